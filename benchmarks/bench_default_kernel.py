"""Which default kernel: ARD RBF or ARD Matern 5/2, both times a learnable amplitude.

On every data set of ``bench_defaults.py --only sets`` (the same loaders, splits and
standardisation), the default estimator (``SparseGPRegressor(random_state=seed)`` /
``SparseGPClassifier(random_state=seed)``) is fitted twice, given ``ConstantKernel(1) *
RBF(spread)`` and ``ConstantKernel(1) * Matern(spread, nu=2.5)``, with the length scales
started at each feature's spread and bounded ten decades either side of it, as the
estimators' default kernels are. Measured for both: fit
seconds, epochs, ``converged_``, and the test RMSE and Gaussian NLPD (regression) or
accuracy and log-loss (classification); reported as Matern minus RBF.

    python benchmarks/bench_default_kernel.py                     # every set (hours on 2 cores)
    python benchmarks/bench_default_kernel.py --sets weather magic
    python benchmarks/bench_default_kernel.py --quick --sets weather magic   # smoke run
    python benchmarks/bench_default_kernel.py --report

Results: ``benchmarks/results/default_kernel.json`` (``--quick``: under ``results/quick/``;
rewritten after every fit, and a run of some sets keeps the other sets' rows) and a
Markdown table on stdout.
"""

import argparse
import json
import sys
from pathlib import Path

# The package of this checkout, not whichever one is installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_defaults import (RESULTS_DIR, SETS_BINARY, SETS_MULTICLASS, SETS_REGRESSION, evaluate,
                            load_sets_data, make_estimator, meta, metric_names, save,
                            side_by_side_arguments, timed_fit)

KERNELS = ("rbf", "matern52")


def kernel_for(name, X):
    """The default kernel's shape with an ARD RBF or Matern 5/2 (``name``): an amplitude
    started at 1, length scales started at each feature's spread and bounded ten decades
    either side of it."""
    from skgp_sparse._estimators._common import KernelForm, default_kernel
    from skgp_sparse.fit.plan import feature_scale

    return default_kernel(X.shape[1], feature_scale(X), KernelForm(matern_nu=None if name == "rbf" else 2.5))


def fit(name, kernel_name, args):
    task, X, Xt, y, yt, _ = load_sets_data(name, args)
    est = make_estimator(task, args.seed, kernel=kernel_for(kernel_name, X))
    seconds, caught = timed_fit(est, X, y, args.threads)
    return dict(task=task, n_train=len(y), fit_s=seconds, epochs=int(est.n_iter_), converged=bool(est.converged_),
                warnings=caught, kernel=str(est.kernel_), **evaluate(est, task, Xt, yt, args.threads))


def markdown(results):
    lines = ["| data | task | n train | RBF s | Matern s | RBF epochs | Matern epochs | RBF metric | "
             "Matern metric | RBF NLPD / log-loss | Matern NLPD / log-loss | Matern - RBF (RMSE % / points) | "
             "Matern - RBF (nats) |",
             "|" + "---|" * 13]
    for name, row in results["sets"].items():
        if not all(k in row for k in KERNELS):
            continue
        rbf, mat = row["rbf"], row["matern52"]
        metric, second = metric_names(rbf["task"])
        if rbf["task"] == "regression":
            change = f"{100 * (mat['rmse'] / rbf['rmse'] - 1):+.1f}%"
        else:
            change = f"{100 * (mat['accuracy'] - rbf['accuracy']):+.2f}"
        lines.append(f"| {name} | {rbf['task']} | {rbf['n_train']:,} | {rbf['fit_s']:.1f} | {mat['fit_s']:.1f} | "
                     f"{rbf['epochs']} | {mat['epochs']} | {rbf[metric]:.4f} | {mat[metric]:.4f} | "
                     f"{rbf[second]:.4f} | {mat[second]:.4f} | {change} | {mat[second] - rbf[second]:+.4f} |")
    return "\n".join(lines)


def main():
    parser = side_by_side_arguments(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    parser.add_argument("--sets", nargs="+", default=list(SETS_REGRESSION + SETS_BINARY + SETS_MULTICLASS))
    args = parser.parse_args()
    # load_sets_data reads these two (the synthetic sets' sizes: their defaults).
    args.ripples_rows = args.synthetic_rows = None
    path = args.out or RESULTS_DIR / ("quick" if args.quick else "") / "default_kernel.json"
    results = json.loads(path.read_text()) if path.exists() else {"sets": {}}
    if not args.report:
        results["meta"] = meta(args)
        for name in args.sets:
            row = results["sets"].setdefault(name, {})
            for kernel_name in KERNELS:
                row[kernel_name] = fit(name, kernel_name, args)
                save(results, path)
                print(name, kernel_name, {k: v for k, v in row[kernel_name].items() if k != "warnings"}, flush=True)
    print(markdown(results))


if __name__ == "__main__":
    main()
