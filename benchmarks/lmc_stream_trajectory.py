"""How an LMC fit's hidden-entry accuracy moves along its minibatch stream.

Fits ``SparseGPRegressor(n_latent=P, missing_targets="mask")`` on one set of
``bench_multioutput.py`` with the benchmark's settings (M = 256, batch 1,024, one thread)
and, every ``--every`` epochs of the stream, sets the joint q(u) on every row at the
stream's current parameters (what the fit does once the stream ends) on a copy of the
model and scores the hidden entries: the RMSE / NLPD that a stream stopped there would
give. The seconds exclude that scoring. Also prints the time of the fit's phases.

    OMP_NUM_THREADS=1 python benchmarks/lmc_stream_trajectory.py --set weather --epochs 30 --random-state 0

``--epochs`` lifts the LMC's stream cap (``training.LMC_STREAM_STEPS``) and runs at most
that many epochs; ``--search-rows`` and ``--inducing-iter`` replace the LMC's search rows
and second-stage iterations (``plan.LMC_SEARCH_ROWS``, ``search.LMC_INDUCING_SEARCH_ITER``).
"""

import argparse
import copy
import time
import warnings

import numpy as np
from threadpoolctl import threadpool_limits

from _multioutput_data import MULTIOUTPUT_SETS, load_multioutput, training_targets

from skgp_sparse import SparseGPRegressor
from skgp_sparse.fit import pipeline, plan as fit_plan, search, training


def _scores(Y, hidden, names, mean, var):
    """Pooled and per-output RMSE / NLPD over the hidden entries."""
    def one(mask, p=None):
        y, m, v = (Y[mask], mean[mask], var[mask]) if p is None else (Y[mask, p], mean[mask, p], var[mask, p])
        nlpd = np.mean(0.5 * np.log(2 * np.pi * v) + 0.5 * (y - m) ** 2 / v)
        return float(np.sqrt(np.mean((y - m) ** 2))), float(nlpd)
    out = {"all": one(hidden)}
    for p, name in enumerate(names):
        out[name] = one(hidden[:, p], p)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="weather", choices=sorted(MULTIOUTPUT_SETS))
    parser.add_argument("--random-state", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=None, help="stream epochs at most (lifts the LMC's cap)")
    parser.add_argument("--every", type=int, default=5, help="score every this many epochs")
    parser.add_argument("--search-rows", type=int, default=None)
    parser.add_argument("--inducing-iter", type=int, default=None)
    args = parser.parse_args()
    if args.epochs is not None:
        training.LMC_STREAM_STEPS = 10**9
    if args.search_rows is not None:
        fit_plan.LMC_SEARCH_ROWS = args.search_rows
    if args.inducing_iter is not None:
        search.LMC_INDUCING_SEARCH_ITER = args.inducing_iter

    X, Y, hidden, info = load_multioutput(args.set, return_info=True)
    Y_train = training_targets(Y, hidden)
    times, trajectory, scoring, context = {}, [], [0.0], {}

    def timed(function, name):
        def wrapper(*a, **kw):
            start = time.perf_counter()
            result = function(*a, **kw)
            times.setdefault(name, []).append(time.perf_counter() - start)
            return result
        return wrapper

    search.optimise_collapsed = timed(search.optimise_collapsed, "search stages")
    pipeline.search_hyperparameters = timed(pipeline.search_hyperparameters, "search")
    training.settle_and_bound = timed(training.settle_and_bound, "final")
    train = training.train

    def stream(*a, **kw):
        context["batches"], context["start"] = kw["batches"], time.perf_counter()
        return timed(train, "stream")(*a, **kw)

    training.train = stream

    def score(model, history):
        if history.n_epochs % args.every:
            return
        start = time.perf_counter()
        seconds = start - context["start"] - scoring[0]
        m = copy.deepcopy(model)
        m.optimal_q_over(context["batches"](np.random.default_rng(0)), joint=True)
        mean, var = m.output_marginals(np.asarray(X, dtype=np.float64))
        var = np.asarray(var) + np.asarray(m.noise.value)[None, :]
        s = _scores(Y, hidden, info["outputs"], np.asarray(mean), var)
        trajectory.append((history.n_epochs, seconds, s))
        print(f"  epoch {history.n_epochs:3d}, stream {seconds:6.1f} s: RMSE / NLPD {s['all'][0]:.3f} / "
              f"{s['all'][1]:.3f}", flush=True)
        scoring[0] += time.perf_counter() - start

    def estimator(**kw):
        base = dict(n_latent=Y.shape[1], missing_targets="mask", n_inducing=min(256, len(X)),
                    batch_size=min(1024, len(X)), random_state=args.random_state)
        return SparseGPRegressor(**{**base, **kw})

    extra = {} if args.epochs is None else {"max_iter": args.epochs}
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        estimator(n_inducing=16, batch_size=40).fit(X[:40], Y_train[:40])  # first-call paths
        times.clear()
        reg = estimator(**extra)
        reg._epoch_callback = score
        start = time.perf_counter()
        reg.fit(X, Y_train)
        fit_s = time.perf_counter() - start - scoring[0]
        mean, std = reg.predict(X, return_std=True)
    mean, var = np.asarray(mean).reshape(Y.shape), np.asarray(std).reshape(Y.shape) ** 2
    s = _scores(Y, hidden, info["outputs"], mean, var)
    print(f"{args.set}, random_state {args.random_state}: fit {fit_s:.1f} s (scoring excluded), {reg.n_iter_} epochs, "
          f"RMSE / NLPD {s['all'][0]:.3f} / {s['all'][1]:.3f}")
    phases = [f"{name} {sum(v):.1f}" for name, v in times.items() if name not in ("stream", "search stages")]
    print("  seconds: " + ", ".join(phases)
          + f", stream {sum(times.get('stream', [0.0])) - scoring[0]:.1f}; search stages "
          + ", ".join(f"{v:.1f}" for v in times.get("search stages", [])))
    print("  per output: " + ", ".join(f"{k} {v[0]:.3f} / {v[1]:.3f}" for k, v in s.items() if k != "all"))


if __name__ == "__main__":
    main()
