"""How many rows the exact search that starts a minibatch fit should read, and what its
second stage (the inducing inputs) gives.

For each regression set named on the command line, the default ``SparseGPRegressor`` is
fitted with the search reading ``--rows`` random rows (``skgp_sparse.fit.plan.SEARCH_ROWS``; 0: without
the search, the stream alone from the kernel's initial hyperparameters, as before the
search existed); with ``--without-inducing-stage``, once more at the default rows with the
search's second stage skipped (the inducing inputs left at their k-means start, as before
that stage existed); with ``--inducing-iterations``, at the default rows with the second
stage run for at most each of those iterations (both ends of
``skgp_sparse.fit.search.inducing_search_iterations``, whose default depends on the training rows).
``--seeds`` repeats every fit with each ``random_state`` (the test rows stay those of
split 0); ``--n-train`` keeps the first rows of the training split. Reported per fit:
seconds of the search and of the whole fit, epochs, ``converged_``, test RMSE and NLPD.
Every fit runs under ``threadpool_limits(--threads)``.

    python benchmarks/bench_search_rows.py --sets diamonds weather storms ripples --rows 0 1024 2048 4096
    python benchmarks/bench_search_rows.py --sets weather storms diamonds txhousing --rows 0 2048 --without-inducing-stage
    python benchmarks/bench_search_rows.py --sets weather flights storms diamonds --rows --inducing-iterations 100 300 600
    python benchmarks/bench_search_rows.py --sets gapminder computers txhousing --rows --inducing-iterations 50 90 300 --seeds 0 1 2
    python benchmarks/bench_search_rows.py --sets gapminder computers weather --n-train 3000 --rows --inducing-iterations 44 100 300 --seeds 0 1

Results: ``benchmarks/results/search_rows.json`` and a Markdown table on stdout.
"""

import argparse
import itertools
import json
import os
import sys
import time
import warnings
from types import SimpleNamespace

from threadpoolctl import threadpool_limits

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _data import gaussian_nlpd, load_regression, rmse  # noqa: E402

from skgp_sparse import SparseGPRegressor  # noqa: E402
from skgp_sparse.fit import pipeline, plan, search  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "search_rows.json")


def skip_inducing_stage(original):
    """``optimise_collapsed`` that runs the search's first stage and skips its second (the
    only call with ``scales``), leaving the stage's model where it starts: the first
    stage's hyperparameters at the unmoved inducing inputs, which it then hands back."""

    def optimise(*args, **kwargs):
        if kwargs.get("scales") is not None:
            return SimpleNamespace(n_iter=0, elbo=float("nan"))
        return original(*args, **kwargs)

    return optimise


def fit_once(X, y, Xt, yt, rows, seed, inducing_stage=True, inducing_iterations=None):
    """One default fit; ``rows`` None: without the search; ``inducing_iterations`` None:
    the second stage's default cap."""
    timings = {"search": 0.0}
    original_search, original_starts = pipeline.search_hyperparameters, plan.starts_with_search
    original_optimise, original_rows = search.optimise_collapsed, plan.SEARCH_ROWS
    original_iterations = search.SEARCH_INDUCING_MIN_ITER, search.SEARCH_INDUCING_MAX_ITER
    if inducing_iterations is not None:
        search.SEARCH_INDUCING_MIN_ITER = search.SEARCH_INDUCING_MAX_ITER = inducing_iterations
    iterations = search.inducing_search_iterations(X.shape[0])

    def timed_search(*args, **kwargs):
        start = time.perf_counter()
        result = original_search(*args, **kwargs)
        timings["search"] = time.perf_counter() - start
        return result

    pipeline.search_hyperparameters = timed_search
    if rows is None:
        plan.starts_with_search = lambda *args, **kwargs: False
    else:
        # The search's rows, and the second stage's iterations that scale with them.
        plan.SEARCH_ROWS = rows
    if not inducing_stage:
        search.optimise_collapsed = skip_inducing_stage(original_optimise)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            start = time.perf_counter()
            reg = SparseGPRegressor(random_state=seed).fit(X, y)
            seconds = time.perf_counter() - start
    finally:
        pipeline.search_hyperparameters, plan.starts_with_search = original_search, original_starts
        search.optimise_collapsed = original_optimise
        plan.SEARCH_ROWS = original_rows
        search.SEARCH_INDUCING_MIN_ITER, search.SEARCH_INDUCING_MAX_ITER = original_iterations
    mean, std = reg.predict(Xt, return_std=True)
    return dict(rows=rows, inducing_stage=inducing_stage, inducing_iterations=iterations, seed=seed,
                seconds=seconds, search_seconds=timings["search"], epochs=int(reg.n_iter_),
                converged=bool(reg.converged_), rmse=float(rmse(yt, mean)), nlpd=float(gaussian_nlpd(yt, mean, std**2)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", nargs="+", default=["diamonds", "weather", "storms", "ripples"])
    parser.add_argument("--rows", nargs="*", type=int, default=[0, 1024, 2048, 4096],
                        help="rows of the search (0: no search)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0], help="random_state of the fits")
    parser.add_argument("--n-train", type=int, default=None, help="keep the first N training rows")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--without-inducing-stage", action="store_true",
                        help="also fit at the default rows with the search's second stage skipped")
    parser.add_argument("--inducing-iterations", nargs="*", type=int, default=[],
                        help="also fit at the default rows with the second stage capped at each of these")
    parser.add_argument("--out", default=RESULTS)
    args = parser.parse_args()
    results = json.load(open(args.out)) if os.path.exists(args.out) else {}
    print("| set | rows | search rows | second stage at most | seed | search s | fit s | epochs | converged | RMSE | NLPD |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    with threadpool_limits(args.threads):
        for name in args.sets:
            X, Xt, y, yt = load_regression(name)
            X, y = X[: args.n_train], y[: args.n_train]
            key = name if args.n_train is None else f"{name}[:{args.n_train}]"
            rows = results.setdefault(key, {"n_train": int(X.shape[0]), "fits": []})
            rows["n_train"], rows["fits"] = int(X.shape[0]), []
            runs = [(n or None, True, None) for n in args.rows]
            if args.without_inducing_stage:
                runs.append((plan.SEARCH_ROWS, False, None))
            runs += [(plan.SEARCH_ROWS, True, k) for k in args.inducing_iterations]
            for (n_rows, inducing_stage, iterations), seed in itertools.product(runs, args.seeds):
                r = fit_once(X, y, Xt, yt, n_rows, seed, inducing_stage, iterations)
                rows["fits"].append(r)
                os.makedirs(os.path.dirname(args.out), exist_ok=True)
                json.dump(results, open(args.out, "w"), indent=1)
                label = "none" if n_rows is None else f"{n_rows}{'' if inducing_stage else ', no inducing stage'}"
                stage = f"{r['inducing_iterations']}" if inducing_stage and n_rows else "-"
                print(f"| {name} | {X.shape[0]:,} | {label} | {stage} | {seed} | {r['search_seconds']:.1f} | {r['seconds']:.1f} | {r['epochs']} | "
                      f"{'yes' if r['converged'] else 'no'} | {r['rmse']:.4f} | {r['nlpd']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
