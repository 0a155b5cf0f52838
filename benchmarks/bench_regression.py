"""Regression benchmark on ggplot2 diamonds: accuracy, fit time, step time against GPyTorch.

Everything is measured in this one process, ours and GPyTorch's alternately, on the same
standardised arrays, the same initial inducing inputs, float64 and the same thread count,
so that the ratios mean something on a shared machine.

    python benchmarks/bench_regression.py                 # all sections (about 6 minutes)
    python benchmarks/bench_regression.py --only steps    # step-time ratios only

Needs the peer: ``pip install /opt/wheels/torch-2.13.0+cpu-*.whl gpytorch`` (the local CPU
wheel first, or pip pulls CUDA). Results: benchmarks/results/regression.json and a
Markdown summary on stdout (copied into docs/benchmarks.md).
"""

import argparse
import json
import platform
import time
import warnings
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from _data import gaussian_nlpd, init_inducing, load_diamonds, rmse
from _ours import time_our_step

RESULTS = Path(__file__).parent / "results" / "regression.json"


def sklearn_kernel(name, d):
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Matern

    if name == "rbf":
        return ConstantKernel() * RBF(np.ones(d))
    return ConstantKernel() * Matern(np.ones(d), nu=2.5)


def accuracy(X, Xt, y, yt, threads, epochs):
    """Our fits on diamonds at M=256, batch 1024, default settings but for the kernel."""
    from skgp_sparse import SparseGPRegressor

    rows, fitted = [], None
    for name in ("rbf", "matern52"):
        reg = SparseGPRegressor(sklearn_kernel(name, X.shape[1]), n_inducing=256, batch_size=1024,
                                max_iter=epochs, random_state=0)
        with threadpool_limits(threads), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            start = time.perf_counter()
            reg.fit(X, y)
            fit_s = time.perf_counter() - start
        mean, std = reg.predict(Xt, return_std=True)
        rows.append(dict(model=f"skgp_sparse coupled, {name}", epochs=reg.n_iter_, fit_s=fit_s,
                         rmse=rmse(yt, mean), nlpd=gaussian_nlpd(yt, mean, std**2),
                         noise=reg.noise_variance_, kernel=str(reg.kernel_)))
        print(rows[-1], flush=True)
        fitted = fitted or reg
    return rows, fitted


def gpytorch_accuracy(X, Xt, y, yt, threads, epochs):
    from _gpytorch_peer import fit_gpytorch, predict_gpytorch

    Z0 = init_inducing(X, 256, random_state=0)
    out = []
    for name in ("rbf", "matern52"):
        for mode, n_epochs in (("adam", epochs), ("ngd", max(epochs // 3, 1))):
            model, lik, fit_s, _ = fit_gpytorch(X, y, Z0, 1024, n_epochs, mode=mode, threads=threads,
                                                kernel=name)
            mean, var = predict_gpytorch(model, lik, Xt, threads=threads)
            out.append(dict(model=f"GPyTorch SVGP ({mode}), {name}", epochs=n_epochs, fit_s=fit_s,
                            rmse=rmse(yt, mean), nlpd=gaussian_nlpd(yt, mean, var)))
            print(out[-1], flush=True)
    return out


def step_times(X, y, threads, n_steps, grid, repeats=2):
    """Median seconds per training step, ours and GPyTorch's, for each (M, batch)."""
    from _gpytorch_peer import time_gpytorch_step

    def settled(fn):
        # Let the other library's worker threads park before timing (they spin for a
        # while after their last job and would compete for the two cores).
        time.sleep(0.5)
        return fn()

    rows = []
    for M, batch in grid:
        Z0 = init_inducing(X, M, random_state=0)
        timings = {"ours": [], "adam": [], "ngd": []}
        for _ in range(repeats):  # interleaved; the best median of each counts
            with threadpool_limits(threads):
                timings["ours"].append(settled(lambda: time_our_step(X, y, Z0, batch, n_steps)))
            for mode in ("adam", "ngd"):
                timings[mode].append(settled(
                    lambda: time_gpytorch_step(X, y, Z0, batch, n_steps, mode=mode, threads=threads)))
        ours, adam, ngd = (min(timings[k]) for k in ("ours", "adam", "ngd"))
        rows.append(dict(M=M, batch=batch, ours_ms=1e3 * ours, gpytorch_adam_ms=1e3 * adam,
                         gpytorch_ngd_ms=1e3 * ngd, ratio_vs_adam=ours / adam, ratio_vs_ngd=ours / ngd))
        print(rows[-1], flush=True)
    return rows


def predict_time(reg, threads, n_rows=100_000):
    rng = np.random.default_rng(0)
    Xp = rng.standard_normal((n_rows, reg.n_features_in_))
    with threadpool_limits(threads):
        reg.predict(Xp[:1000], return_std=True)
        start = time.perf_counter()
        reg.predict(Xp, return_std=True)
        return time.perf_counter() - start


def markdown(results):
    lines = []
    if "accuracy" in results:
        lines += ["| model | epochs | fit s | test RMSE | test NLPD |", "|---|---|---|---|---|"]
        for r in results["accuracy"]:
            lines.append(f"| {r['model']} | {r['epochs']} | {r['fit_s']:.1f} | {r['rmse']:.4f} | {r['nlpd']:.3f} |")
        lines.append("")
    if "steps" in results:
        lines += ["| M | batch | ours ms | GPyTorch Adam ms | GPyTorch NGD ms | ours / Adam | ours / NGD |",
                  "|---|---|---|---|---|---|---|"]
        for r in results["steps"]:
            lines.append(f"| {r['M']} | {r['batch']} | {r['ours_ms']:.2f} | {r['gpytorch_adam_ms']:.2f} | "
                         f"{r['gpytorch_ngd_ms']:.2f} | {r['ratio_vs_adam']:.2f} | {r['ratio_vs_ngd']:.2f} |")
        lines.append("")
    if "predict_100k_s" in results:
        lines.append(f"predict(return_std=True) on 100,000 rows at M=256: {results['predict_100k_s']:.2f} s")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["accuracy", "steps"], default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n-steps", type=int, default=30)
    parser.add_argument("--gpytorch-epochs", type=int, default=50)
    parser.add_argument("--epochs", type=int, default=25, help="our epochs (max_iter)")
    args = parser.parse_args()

    X, Xt, y, yt = load_diamonds(random_state=0)
    results = {"meta": dict(machine=platform.platform(), cpu_count=__import__("os").cpu_count(),
                            threads=args.threads, dtype="float64", n_train=len(y), n_test=len(yt),
                            date=time.strftime("%Y-%m-%dT%H:%M:%S"))}
    if args.only in (None, "accuracy"):
        ours, reg = accuracy(X, Xt, y, yt, args.threads, args.epochs)
        results["accuracy"] = ours + gpytorch_accuracy(X, Xt, y, yt, args.threads, args.gpytorch_epochs)
        results["predict_100k_s"] = predict_time(reg, args.threads)
    if args.only in (None, "steps"):
        grid = [(64, 1024), (256, 1024), (1024, 1024), (256, 256), (256, 4096)]
        results["steps"] = step_times(X, y, args.threads, args.n_steps, grid)
    RESULTS.parent.mkdir(exist_ok=True)
    # A partial run (--only) keeps the other section of the previous results.
    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results = {**previous, **results}
    RESULTS.write_text(json.dumps(results, indent=2, default=float))
    print(markdown(results))


if __name__ == "__main__":
    main()
