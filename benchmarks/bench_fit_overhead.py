"""A whole fit's time against the sum of its training steps, for every basis (issue 34).

A minibatch fit is more than its steps: the exact search that starts it, k-means for the
inducing inputs, the bound on every row between epochs, the stopping rule, the state
moved back to the host. This script fits the default regressor of each basis (its
covariance set of ``--n-inducing`` points, as many orthogonal points where the basis has
them) for ``--epochs`` epochs and splits the fit's wall time into:

* ``search``: the exact search that starts the fit (``fit.search.search_hyperparameters``);
* ``stream``: the training loop over the minibatches (``optim.train``), per-epoch checks
  included;
* ``steps``: the fit's number of steps (``n_steps_``) times the median time of one step of
  the same model timed on its own (``_ours.time_our_step``: ELBO and gradients, natural
  step, Adam);
* ``rest``: the fit less the search and the stream.

Both phases are timed by wrapping the functions the pipeline calls, so the fit runs its own
code. ``stream / steps`` is the training loop's overhead over its steps, ``fit / steps``
the whole fit's.

    python benchmarks/bench_fit_overhead.py                    # diamonds, every basis
    python benchmarks/bench_fit_overhead.py --bases coupled --epochs 2

Results: ``--out`` (default ``benchmarks/results/fit_overhead.json``) and a Markdown table.
"""

import argparse
import json
import platform
import time
import warnings
from pathlib import Path

from threadpoolctl import threadpool_limits

from _data import init_inducing, load_regression
from _ours import basis_settings, implemented_bases, installed_versions, time_our_step, timed_calls
from skgp_sparse.fit.plan import batch_rows


def fit_phases(X, y, params, epochs, seed):
    """Fit the regressor of ``params`` for ``epochs`` epochs; its wall time split by phase."""
    from skgp_sparse import SparseGPRegressor
    from skgp_sparse.fit import pipeline, training

    est = SparseGPRegressor(max_iter=epochs, tol=0.0, random_state=seed, **params)
    seconds = {}
    with timed_calls(pipeline, "search_hyperparameters", seconds), timed_calls(training, "train", seconds), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        est.fit(X, y)
        seconds["fit"] = time.perf_counter() - start
    return est, seconds


def measure(X, y, basis, n_inducing, epochs, n_step_timings, seed):
    params = basis_settings(basis, n_inducing)
    est, seconds = fit_phases(X, y, params, epochs, seed)
    # The rows of the fit's steps, as its plan chose them (a minibatch stream here).
    batch = batch_rows(est.batch_size, X.shape[0], collapses=False)
    Z0 = init_inducing(X, params["n_inducing"] + params["n_orthogonal"], random_state=seed)
    step = time_our_step(X, y, Z0, batch, n_step_timings, seed=seed, **params)
    search = seconds.get("search_hyperparameters", 0.0)
    stream = seconds.get("train", 0.0)
    steps = est.n_steps_ * step
    return dict(basis=basis, n_steps=int(est.n_steps_), epochs=int(est.n_iter_), batch=batch, fit_s=seconds["fit"],
                search_s=search, stream_s=stream, step_s=step, steps_s=steps,
                rest_s=seconds["fit"] - search - stream, fit_over_steps=seconds["fit"] / steps,
                stream_over_steps=stream / steps)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", default="diamonds")
    parser.add_argument("--bases", nargs="+", default=None)
    parser.add_argument("--n-inducing", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--step-timings", type=int, default=20, help="steps timed on their own, per basis")
    parser.add_argument("--rows", type=int, default=None, help="the first training rows only (default: all)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="benchmarks/results/fit_overhead.json")
    args = parser.parse_args()
    X, _, y, _ = load_regression(args.set, random_state=args.seed)
    if args.rows:
        X, y = X[: args.rows], y[: args.rows]
    rows = []
    with threadpool_limits(args.threads):
        for basis in args.bases or implemented_bases():
            rows.append(measure(X, y, basis, args.n_inducing, args.epochs, args.step_timings, args.seed))
            print(json.dumps(rows[-1]), flush=True)
    print(f"\n{args.set}, {X.shape[0]} rows, {args.epochs} epochs, {args.threads} thread(s)\n")
    print("| basis | fit s | search s | stream s | steps (n x step) s | rest s | fit / steps | stream / steps |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['basis']} | {r['fit_s']:.1f} | {r['search_s']:.1f} | {r['stream_s']:.1f} | "
              f"{r['steps_s']:.1f} ({r['n_steps']} x {r['step_s'] * 1e3:.1f} ms) | {r['rest_s']:.1f} | "
              f"{r['fit_over_steps']:.2f} | {r['stream_over_steps']:.2f} |")
    meta = dict(machine=platform.platform(), set=args.set, n_rows=int(X.shape[0]), epochs=args.epochs,
                threads=args.threads, n_inducing=args.n_inducing, versions=installed_versions("scipy", "sklearn"))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))


if __name__ == "__main__":
    main()
