"""The four bases side by side: the issue-17 table on diamonds, and equal wall-clock curves.

Two parts, each one process run:

* ``table``: on diamonds (48,546 training rows, batch 1024, default settings otherwise), test
  RMSE, NLPD, epochs and fit seconds of coupled(256), coupled(128), orth_decoupled(128 + 1024),
  solve(128 + 128) and inverse_free(256), and the median time of one training step
  (``_ours.time_our_step``, the steps interleaved in this process).
* ``wallclock``: every basis at its configuration above (coupled at 256) trained without the
  stopping rule for ``--budget`` seconds on diamonds, flights (100,000 rows), KEEL magic and
  KEEL letter (26 classes); the test metric after every epoch against training seconds
  (evaluation time excluded). The report gives each basis's metric at equal wall-clock points.

    python benchmarks/bench_bases.py [--only table|wallclock] [--budget 60] [--quick]

Results: benchmarks/results/bases.json and Markdown tables on stdout.
"""

import argparse
import json
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np

# The package of this checkout, not whichever one is installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _data import gaussian_nlpd, init_inducing, load_keel, load_regression, rmse  # noqa: E402
from _ours import fit_with_curve, time_our_step  # noqa: E402

from skgp_sparse import SparseGPClassifier, SparseGPRegressor  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "bases.json"

#: name -> estimator parameters (the configurations of issue 17's table).
CONFIGS = {
    "coupled(256)": dict(basis="coupled", n_inducing=256),
    "coupled(128)": dict(basis="coupled", n_inducing=128),
    "orth_decoupled(128+1024)": dict(basis="orth_decoupled", n_inducing=128, n_orthogonal=1024),
    "solve(128+128)": dict(basis="solve", n_inducing=128, n_orthogonal=128),
    "inverse_free(256)": dict(basis="inverse_free", n_inducing=256),
}
WALLCLOCK_CONFIGS = ("coupled(256)", "orth_decoupled(128+1024)", "solve(128+128)", "inverse_free(256)")


def _quietly(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)


def regression_metrics(reg, X_te, y_te):
    """Test RMSE and NLPD of a fitted regressor."""
    mean, std = reg.predict(X_te, return_std=True)
    return {"rmse": rmse(y_te, mean), "nlpd": gaussian_nlpd(y_te, mean, std**2)}


def run_table(quick):
    X_tr, X_te, y_tr, y_te = load_regression("diamonds", quick=quick)
    rows = []
    for name, params in CONFIGS.items():
        reg = SparseGPRegressor(batch_size=1024, random_state=0, **params)
        start = time.perf_counter()
        _quietly(reg.fit, X_tr, y_tr)
        seconds = time.perf_counter() - start
        Z0 = init_inducing(X_tr, params["n_inducing"] + params.get("n_orthogonal", 0))
        step = time_our_step(X_tr, y_tr, Z0, 1024, 10 if quick else 40, **params)
        row = dict(model=name, **regression_metrics(reg, X_te, y_te), epochs=int(reg.n_iter_), seconds=seconds,
                   ms_per_step=1e3 * step)
        rows.append(row)
        print(row, flush=True)
    return rows


def wallclock_sets(quick):
    for name in ("diamonds", "flights"):
        yield name, load_regression(name, quick=quick)
    for name in ("magic", "letter"):
        X_tr, X_te, y_tr, y_te = load_keel(name)
        if quick:
            X_tr, y_tr = X_tr[:3000], y_tr[:3000]
        yield name, (X_tr, X_te, y_tr, y_te)


def epoch_metrics(X_te, y_te, classification):
    """``evaluate(model, estimator)`` for ``fit_with_curve``: test metrics of the model as it is
    after an epoch (original target scale)."""

    def evaluate(model, est):
        mean, var = model.predictor().latent(model.kernel, X_te)
        if not classification:
            scale, shift = est._y_train_std[0], est._y_train_mean[0]
            return {"rmse": rmse(y_te, mean[:, 0] * scale + shift),
                    "nlpd": gaussian_nlpd(y_te, mean[:, 0] * scale + shift, (var[:, 0] + model.noise.value) * scale**2)}
        var = np.broadcast_to(var, mean.shape)
        proba = model.likelihood.predict_proba(mean, var)
        if proba.shape[1] == 1:  # the binary likelihoods give p(second class)
            proba = np.hstack([1.0 - proba, proba])
        rows = np.searchsorted(est.classes_, y_te)
        return {"accuracy": float(np.mean(np.argmax(proba, axis=1) == rows)),
                "nlpd": float(-np.mean(np.log(np.maximum(proba[np.arange(len(rows)), rows], 1e-300))))}

    return evaluate


def run_wallclock(quick, budget):
    rows = []
    for data, (X_tr, X_te, y_tr, y_te) in wallclock_sets(quick):
        classification = data in ("magic", "letter")
        estimator = SparseGPClassifier if classification else SparseGPRegressor
        for name in WALLCLOCK_CONFIGS:
            est = estimator(**CONFIGS[name], batch_size=1024, tol=0.0, max_iter=10_000, random_state=0)
            evaluate = epoch_metrics(X_te, y_te, classification)
            fit_seconds, curve = _quietly(fit_with_curve, est, X_tr, y_tr, evaluate, budget)
            rows.append(dict(data=data, model=name, epochs=len(curve), curve=curve))
            print(data, name, len(curve), curve[-1] if curve else None, flush=True)
    return rows


def at_equal_time(rows, checkpoints):
    """Each run's metrics at the last epoch finished by each checkpoint (seconds)."""
    table = []
    for row in rows:
        for t in checkpoints:
            done = [metrics for seconds, metrics in row["curve"] if seconds <= t]
            table.append(dict(data=row["data"], model=row["model"], seconds=t, **(done[-1] if done else {})))
    return table


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("table", "wallclock"))
    parser.add_argument("--budget", type=float, default=60.0, help="training seconds per wall-clock run")
    parser.add_argument("--quick", action="store_true", help="small subsets: a smoke run")
    args = parser.parse_args()
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if args.only in (None, "table"):
        results["table"] = run_table(args.quick)
    if args.only in (None, "wallclock"):
        runs = run_wallclock(args.quick, args.budget)
        checkpoints = [args.budget / 4, args.budget / 2, args.budget]
        results["wallclock"] = {"budget": args.budget, "runs": runs, "at_equal_time": at_equal_time(runs, checkpoints)}
        for row in results["wallclock"]["at_equal_time"]:
            print(row)
    results["machine"] = f"{platform.processor() or platform.machine()}, Python {platform.python_version()}"
    if not args.quick:
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=1, default=float))


if __name__ == "__main__":
    main()
