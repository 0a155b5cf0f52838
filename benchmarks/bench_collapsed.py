"""One evaluation of the exact search: the collapsed bound in one pass against a natural
step of size one and two passes (the route every basis has).

The model is the one the default regressor's search builds for its second stage (coupled
basis, M = 256 inducing inputs learned, the rows of the search), captured on its first
call. Both routes give the same value and gradient (tests/test_collapsed.py); they are
timed alternately in one process, ``--repeats`` evaluations each, and reported as medians
and their ratio.

    python benchmarks/bench_collapsed.py --sets weather diamonds txhousing

Prints a Markdown table.
"""

import argparse
import os
import sys
import time
import warnings

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _data import load_regression  # noqa: E402

from skgp_sparse import SparseGPRegressor  # noqa: E402
from skgp_sparse.fit import search  # noqa: E402
from skgp_sparse.optim.fullbatch import land_on_optimal_q  # noqa: E402


class Captured(Exception):
    """Raised to stop the fit once the second stage's model is in hand."""

    def __init__(self, model, X, Y):
        super().__init__()
        self.model, self.X, self.Y = model, X, Y


def search_model(X, y, seed):
    """The model, rows and targets of the default search's second stage."""
    original = search.optimise_collapsed

    def capture(model, Xs, Ys, *args, **kwargs):
        if kwargs.get("scales") is not None:
            raise Captured(model, Xs, Ys)
        return original(model, Xs, Ys, *args, **kwargs)

    search.optimise_collapsed = capture
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            SparseGPRegressor(random_state=seed).fit(X, y)
    except Captured as found:
        return found.model, found.X, found.Y
    finally:
        search.optimise_collapsed = original
    raise RuntimeError("the fit ran no second search stage")


def one_pass(model, X, Y):
    return model.collapsed_evaluate(X, Y)


def natural_step_then_evaluate(model, X, Y):
    land_on_optimal_q(model, X, Y)
    return model.evaluate(X, Y)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", nargs="+", default=["weather", "diamonds", "txhousing"])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print("| set | rows | M | features | one pass ms | natural step + two passes ms | ratio |")
    print("|---|---|---|---|---|---|---|")
    with threadpool_limits(args.threads):
        for name in args.sets:
            X, _, y, _ = load_regression(name, random_state=args.seed)
            model, Xs, Ys = search_model(X, y, args.seed)
            times = {one_pass: [], natural_step_then_evaluate: []}
            for _ in range(args.repeats):
                for route, record in times.items():
                    start = time.perf_counter()
                    route(model, Xs, Ys)
                    record.append(time.perf_counter() - start)
            fast, slow = (1e3 * np.median(record) for record in times.values())
            print(f"| {name} | {Xs.shape[0]:,} | {model.state.inducing.shape[0]} | {Xs.shape[1]} | {fast:.1f} | "
                  f"{slow:.1f} | {slow / fast:.2f} |", flush=True)


if __name__ == "__main__":
    main()
