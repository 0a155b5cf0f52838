"""Regression benchmark: every basis on diamonds and flights, against GPyTorch and exact GPR.

Accuracy (test RMSE and NLPD) and fit time of every basis in ``skgp_sparse.bases.BASES`` on
ggplot2 ``diamonds`` and a 100,000-row subset of nycflights13 ``flights``, with the test metric
recorded after every epoch (the curves of metric against training time); GPyTorch's SVGP
(CPU) on the same arrays; exact ``GaussianProcessRegressor`` on a training subset of
``--exact-rows`` rows (it is O(n^3)); time per training step of every basis and of GPyTorch.

Everything is measured in this one process, ours and GPyTorch's alternately, on the same
standardised arrays, the same initial inducing inputs, float64 and the same thread count,
so that the ratios mean something on a shared machine.

    python benchmarks/bench_regression.py                 # all sections (about 20 minutes)
    python benchmarks/bench_regression.py --only steps    # step-time ratios only
    python benchmarks/bench_regression.py --quick         # smoke run: small data, seconds

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

from _data import gaussian_nlpd, init_inducing, load_regression, rmse
from _ours import basis_settings, fit_with_curve, implemented_bases, time_our_step

RESULTS_DIR = Path(__file__).parent / "results"
DATASETS = ("diamonds", "flights")


def sklearn_kernel(name, d):
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Matern

    if name == "rbf":
        return ConstantKernel() * RBF(np.ones(d))
    return ConstantKernel() * Matern(np.ones(d), nu=2.5)


def test_metrics(yt, mean, var):
    return dict(rmse=rmse(yt, mean), nlpd=gaussian_nlpd(yt, mean, var))


def accuracy(X, Xt, y, yt, threads, epochs, dataset, M=256):
    """Our fits at M=256, batch 1024: every basis with Matern 5/2, and the coupled basis with RBF."""
    from skgp_sparse import SparseGPRegressor

    def evaluate(model, est):  # test metrics of the model as it is after an epoch, original scale
        mean, var = model.predictor().latent(model.kernel, Xt)
        scale = est._y_train_std[0]
        return test_metrics(yt, mean[:, 0] * scale + est._y_train_mean[0], (var[:, 0] + model.noise.value) * scale**2)

    runs = [(name, "matern52") for name in implemented_bases()] + [("coupled", "rbf")]
    rows, fitted = [], None
    for basis, kernel in runs:
        settings = basis_settings(basis, M)
        # A fixed number of epochs (the stopping rule out of play), as the peer runs.
        reg = SparseGPRegressor(sklearn_kernel(kernel, X.shape[1]), batch_size=1024, max_iter=epochs,
                                tol=0.0, n_iter_no_change=10**6, random_state=0, **settings)
        with threadpool_limits(threads), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit_s, curve = fit_with_curve(reg, X, y, evaluate)
        mean, std = reg.predict(Xt, return_std=True)
        rows.append(dict(dataset=dataset, model=f"skgp_sparse {basis}, {kernel}", basis=basis, kernel=kernel,
                         n_inducing=settings["n_inducing"], n_orthogonal=settings["n_orthogonal"],
                         epochs=reg.n_iter_, fit_s=fit_s, **test_metrics(yt, mean, std**2),
                         noise=reg.noise_variance_, kernel_fitted=str(reg.kernel_), curve=curve))
        print({k: v for k, v in rows[-1].items() if k != "curve"}, flush=True)
        fitted = fitted or reg
    return rows, fitted


def exact_gpr(X, Xt, y, yt, threads, n_rows, dataset):
    """Exact GaussianProcessRegressor (Matern 5/2 ARD + WhiteKernel) on the first n_rows training rows."""
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import WhiteKernel

    n_rows = min(n_rows, len(y))
    gpr = GaussianProcessRegressor(sklearn_kernel("matern52", X.shape[1]) + WhiteKernel(0.1), normalize_y=True,
                                   random_state=0)
    with threadpool_limits(threads), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        gpr.fit(X[:n_rows], y[:n_rows])
        fit_s = time.perf_counter() - start
    mean, std = gpr.predict(Xt, return_std=True)
    row = dict(dataset=dataset, model=f"exact GaussianProcessRegressor, matern52, {n_rows} rows", epochs=0,
               fit_s=fit_s, n_rows=n_rows, **test_metrics(yt, mean, std**2), kernel_fitted=str(gpr.kernel_))
    print(row, flush=True)
    return row


def gpytorch_accuracy(X, Xt, y, yt, threads, epochs, dataset, M=256):
    from _gpytorch_peer import fit_gpytorch, predict_gpytorch

    Z0 = init_inducing(X, M, random_state=0)
    out = []
    for name in ("rbf", "matern52"):
        for mode, n_epochs in (("adam", epochs), ("ngd", max(epochs // 3, 1))):
            model, lik, fit_s, _ = fit_gpytorch(X, y, Z0, 1024, n_epochs, mode=mode, threads=threads,
                                                kernel=name)
            mean, var = predict_gpytorch(model, lik, Xt, threads=threads)
            out.append(dict(dataset=dataset, model=f"GPyTorch SVGP ({mode}), {name}", epochs=n_epochs, fit_s=fit_s,
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
        bases = implemented_bases()
        timings = {"adam": [], "ngd": [], **{b: [] for b in bases}}
        for _ in range(repeats):  # interleaved; the best median of each counts
            for basis in bases:
                settings = basis_settings(basis, M)
                # The orthogonal set is part of the initial points: M more random rows.
                Z = init_inducing(X, M + settings["n_orthogonal"], random_state=0) if settings["n_orthogonal"] else Z0
                with threadpool_limits(threads):
                    timings[basis].append(settled(lambda: time_our_step(X, y, Z, batch, n_steps, **settings)))
            for mode in ("adam", "ngd"):
                timings[mode].append(settled(
                    lambda: time_gpytorch_step(X, y, Z0, batch, n_steps, mode=mode, threads=threads)))
        ours, adam, ngd = (min(timings[k]) for k in ("coupled", "adam", "ngd"))
        rows.append(dict(M=M, batch=batch, ours_ms=1e3 * ours, gpytorch_adam_ms=1e3 * adam,
                         gpytorch_ngd_ms=1e3 * ngd, ratio_vs_adam=ours / adam, ratio_vs_ngd=ours / ngd,
                         bases_ms={b: 1e3 * min(timings[b]) for b in bases}))
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
        lines += ["| data | model | epochs | fit s | test RMSE | test NLPD |", "|---|---|---|---|---|---|"]
        for r in results["accuracy"]:
            lines.append(f"| {r.get('dataset', 'diamonds')} | {r['model']} | {r['epochs']} | {r['fit_s']:.1f} | "
                         f"{r['rmse']:.4f} | {r['nlpd']:.3f} |")
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
    lines.append("Machine: " + str(results.get("meta", {}).get("machine")) + " (shared; timings move by 10-20%)")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["accuracy", "steps"], default=None)
    parser.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n-steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3,
                        help="interleaved rounds of step timings; the best median of each library counts")
    parser.add_argument("--gpytorch-epochs", type=int, default=50)
    parser.add_argument("--epochs", type=int, default=25, help="our epochs (max_iter)")
    parser.add_argument("--exact-rows", type=int, default=3000, help="training rows of the exact GPR")
    parser.add_argument("--no-peer", action="store_true", help="skip GPyTorch")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 3,000 rows, M=32, 2 epochs; results go to results/quick/")
    args = parser.parse_args()
    M = 256
    results_dir = RESULTS_DIR
    if args.quick:
        M, args.epochs, args.gpytorch_epochs, args.n_steps, args.exact_rows = 32, 2, 2, 3, 300
        results_dir = RESULTS_DIR / "quick"

    results = {"meta": dict(machine=platform.platform(), cpu_count=__import__("os").cpu_count(),
                            threads=args.threads, dtype="float64", quick=args.quick, n_inducing=M,
                            date=time.strftime("%Y-%m-%dT%H:%M:%S"))}
    if args.only in (None, "accuracy"):
        results["accuracy"], results["sizes"] = [], {}
        for dataset in args.datasets:
            X, Xt, y, yt = load_regression(dataset, quick=args.quick)
            results["sizes"][dataset] = dict(n_train=len(y), n_test=len(yt), n_features=X.shape[1])
            ours, reg = accuracy(X, Xt, y, yt, args.threads, args.epochs, dataset, M=M)
            results["accuracy"] += ours
            results["accuracy"].append(exact_gpr(X, Xt, y, yt, args.threads, args.exact_rows, dataset))
            if not args.no_peer:
                results["accuracy"] += gpytorch_accuracy(X, Xt, y, yt, args.threads, args.gpytorch_epochs, dataset, M=M)
            if dataset == "diamonds":
                results["predict_100k_s"] = predict_time(reg, args.threads, n_rows=10_000 if args.quick else 100_000)
    if args.only in (None, "steps"):
        X, _, y, _ = load_regression("diamonds", quick=args.quick)
        grid = [(32, 256)] if args.quick else [(64, 1024), (256, 1024), (1024, 1024), (256, 256), (256, 4096)]
        results["steps"] = step_times(X, y, args.threads, args.n_steps, grid, repeats=1 if args.quick else args.repeats)
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / "regression.json"
    # A partial run (--only) keeps the other section of the previous results.
    previous = json.loads(path.read_text()) if path.exists() else {}
    results = {**previous, **results}
    path.write_text(json.dumps(results, indent=2, default=float))
    print(markdown(results))
    print(f"results: {path}")


if __name__ == "__main__":
    main()
