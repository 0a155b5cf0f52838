"""Where a multi-output (LMC) fit spends its time: the exact search's bound and the stream.

Fits ``SparseGPRegressor(n_latent=P, missing_targets="mask")`` on one set of
``bench_multioutput.py`` with the benchmark's settings (M = 256, batch 1,024) and reports

* the exact search's bound: the seconds of one evaluation of
  :func:`skgp_sparse.multioutput.collapsed.lmc_collapsed_bound` on the search's rows,
  taken at the search's ``--evaluation``-th call and repeated, and its top functions under
  cProfile;
* the stream after the search: ``--epochs`` epochs (``tol=0``) under cProfile, with the
  functions that take the most time.

    OMP_NUM_THREADS=1 python benchmarks/profile_lmc_fit.py --set weather
"""

import argparse
import cProfile
import io
import pstats
import time
import warnings

from _multioutput_data import MULTIOUTPUT_SETS, load_multioutput, training_targets

from skgp_sparse import SparseGPRegressor
from skgp_sparse.fit import pipeline
from skgp_sparse.multioutput import collapsed
from skgp_sparse.multioutput import outputs as lmc_outputs


def _top(profile, n_lines):
    """The ``n_lines`` functions of ``profile`` with the most time of their own."""
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(n_lines)
    return out.getvalue()


def profile_bound(estimator, X, Y, evaluation, repeats):
    """Seconds of one evaluation of the search's bound, and its profile."""
    bound = collapsed.lmc_collapsed_bound
    captured = []

    # Not an Exception: the fit must not take it for a failed evaluation.
    class Captured(BaseException):
        pass

    def capture(*args, **kwargs):
        captured.append((args, kwargs))
        if len(captured) == evaluation:
            raise Captured
        return bound(*args, **kwargs)

    lmc_outputs.lmc_collapsed_bound = capture  # the name the multi-output model calls
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            estimator.fit(X, Y)
    except Captured:
        pass
    finally:
        lmc_outputs.lmc_collapsed_bound = bound
    args, kwargs = captured[-1]
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        bound(*args, **kwargs)
        seconds.append(time.perf_counter() - start)
    profile = cProfile.Profile()
    profile.runcall(bound, *args, **kwargs)
    return seconds, args[2].shape[0], profile


def profile_stream(estimator, X, Y):
    """Seconds of the stream (the training loop after the search), and its profile."""
    run_training = pipeline.run_training
    profile = cProfile.Profile()
    seconds = []

    def profiled(*args, **kwargs):
        start = time.perf_counter()
        result = profile.runcall(run_training, *args, **kwargs)
        seconds.append(time.perf_counter() - start)
        return result

    pipeline.run_training = profiled
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            estimator.fit(X, Y)
    finally:
        pipeline.run_training = run_training
    return seconds[0], profile


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="weather", choices=sorted(MULTIOUTPUT_SETS))
    parser.add_argument("--evaluation", type=int, default=40, help="which of the search's evaluations to time")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--random-state", type=int, default=0)
    parser.add_argument("--lines", type=int, default=20, help="functions listed per profile")
    args = parser.parse_args()

    X, Y, hidden = load_multioutput(args.set)[:3]
    Y_train = training_targets(Y, hidden)

    def estimator(**kwargs):
        return SparseGPRegressor(n_latent=Y.shape[1], missing_targets="mask", n_inducing=256, batch_size=1024,
                                 random_state=args.random_state, **kwargs)

    seconds, rows, profile = profile_bound(estimator(), X, Y_train, args.evaluation, args.repeats)
    print(f"{args.set}: one evaluation of the search's bound on {rows} rows: "
          + ", ".join(f"{s:.3f}" for s in seconds) + " s")
    print(_top(profile, args.lines))
    stream_s, profile = profile_stream(estimator(max_iter=args.epochs, tol=0.0), X, Y_train)
    print(f"{args.set}: the stream, {args.epochs} epochs: {stream_s:.1f} s ({stream_s / args.epochs:.2f} s an epoch)")
    print(_top(profile, args.lines))


if __name__ == "__main__":
    main()
