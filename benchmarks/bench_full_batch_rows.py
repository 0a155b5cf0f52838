"""Where ``batch_size="auto"`` should stop fitting the whole training set as one batch.

On subsets of N training rows of several data sets (the loaders, splits and
standardisation of ``bench_defaults.py --only sets``; each subset is the first N rows of the
shuffled training split, tested on the whole test split), the default estimator is fitted
twice, everything else at its default:

* ``batch_size=None``: one batch (a Gaussian regressor runs L-BFGS-B on the collapsed
  bound over all N rows; a classifier takes full-batch natural and Adam steps);
* ``batch_size=1024``: the stream (an exact search on 2,048 rows, then minibatches).

Measured for both: fit seconds and the test RMSE and Gaussian NLPD (regression) or
accuracy and log-loss (classification). The threshold belongs where the full batch stops
being both as accurate and no slower.

    python benchmarks/bench_full_batch_rows.py                    # every set and size (about an hour)
    python benchmarks/bench_full_batch_rows.py --sets diamonds magic --rows 2048 4096
    python benchmarks/bench_full_batch_rows.py --quick            # smoke run
    python benchmarks/bench_full_batch_rows.py --report

Results: ``benchmarks/results/full_batch_rows.json`` (``--quick``: under ``results/quick/``)
and a Markdown table on stdout.
"""

import argparse
import json
import sys
from pathlib import Path

# The package of this checkout, not whichever one is installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_defaults import (RESULTS_DIR, evaluate, load_sets_data, make_estimator, meta, metric_names, save,
                            side_by_side_arguments, timed_fit)

SETS = ("diamonds", "weather", "storms", "simdat", "movies", "magic", "ring", "phoneme")
ROWS = (2048, 4096, 8192, 16384)
BATCHES = {"full": None, "stream": 1024}


def markdown(results):
    lines = ["| data | task | N | full s | stream s | full metric | stream metric | full NLPD / log-loss | "
             "stream NLPD / log-loss | full s / stream s |",
             "|" + "---|" * 10]
    for key, row in results["runs"].items():
        if not all(k in row for k in BATCHES):
            continue
        full, stream = row["full"], row["stream"]
        metric, second = metric_names(full["task"])
        lines.append(f"| {row['set']} | {full['task']} | {row['rows']:,} | {full['fit_s']:.1f} | "
                     f"{stream['fit_s']:.1f} | {full[metric]:.4f} | {stream[metric]:.4f} | {full[second]:.4f} | "
                     f"{stream[second]:.4f} | {full['fit_s'] / stream['fit_s']:.2f} |")
    return "\n".join(lines)


def main():
    parser = side_by_side_arguments(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    parser.add_argument("--sets", nargs="+", default=list(SETS))
    parser.add_argument("--rows", nargs="+", type=int, default=list(ROWS),
                        help="subset sizes (--quick: sets of 3,000 rows, subsets of 1,024 and 2,048)")
    args = parser.parse_args()
    args.ripples_rows = args.synthetic_rows = None  # read by load_sets_data: the defaults
    if args.quick and args.rows == list(ROWS):
        args.rows = [1024, 2048]
    path = args.out or RESULTS_DIR / ("quick" if args.quick else "") / "full_batch_rows.json"
    results = json.loads(path.read_text()) if path.exists() else {"runs": {}}
    if not args.report:
        results["meta"] = meta(args)
        for name in args.sets:
            task, X, Xt, y, yt, _ = load_sets_data(name, args)
            for n in args.rows:
                if n > len(y):
                    continue
                row = results["runs"].setdefault(f"{name}/{n}", dict(set=name, rows=n))
                for label, batch_size in BATCHES.items():
                    est = make_estimator(task, args.seed, batch_size=batch_size)
                    seconds, caught = timed_fit(est, X[:n], y[:n], args.threads)
                    row[label] = dict(task=task, fit_s=seconds, n_iter=int(est.n_iter_),
                                      converged=bool(est.converged_), warnings=caught,
                                      **evaluate(est, task, Xt, yt, args.threads))
                    save(results, path)
                    print(name, n, label, {k: v for k, v in row[label].items() if k != "warnings"}, flush=True)
    print(markdown(results))


if __name__ == "__main__":
    main()
