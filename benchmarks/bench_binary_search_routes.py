"""The binary classifier's exact search by two routes, side by side in one process per set.

* ``damped``: the search of :mod:`skgp_sparse.optim.fullbatch`, q(u) moved to its optimum
  by up to three damped natural steps at every L-BFGS-B evaluation (the route of the
  other likelihoods and of one-batch fits);
* ``pseudo``: the rounds of :mod:`skgp_sparse.optim.pseudo`, the hyperparameters searched
  on the collapsed bound of Gaussian pseudo-observations refreshed between rounds (the
  default of a binary minibatch fit, since commit 2ca9950);
* ``ROUTE:NAME=VALUE,...``: a route with constants set, for the measurements behind
  their values: of ``skgp_sparse.optim.pseudo`` by their names (``ROUND_MAX_ITER``,
  ``ROUND_Q_STEPS``, ``STOP_RISE``), of ``skgp_sparse.fit.plan`` as ``plan.NAME``
  (``plan.SEARCH_ROWS``).

Each fit is ``SparseGPClassifier(n_inducing=256, batch_size=1024, random_state=0)`` on a
90/10 split (stratified, ``--split-seed``) of KEEL ring, twonorm, spambase, magic, banana,
phoneme or DAAG nassCDS, one thread; its wall time is split into the search
(``search_hyperparameters``) and the stream (``train``). The variants of a set run one
after the other in one process (``--repeats`` times, alternating), so their times compare
within a set even on a shared machine.

    python benchmarks/bench_binary_search_routes.py
    python benchmarks/bench_binary_search_routes.py --sets ring --variants pseudo pseudo:ROUND_MAX_ITER=4

Results: one JSON line per fit on stdout and in ``--out`` (appended to).
"""

import argparse
import json
from pathlib import Path

import numpy as np
from sklearn.metrics import log_loss

from _data import load_keel, load_nasscds
from _ours import fit_by_phase

SETS = ["ring", "twonorm", "spambase", "magic", "banana", "phoneme", "nasscds"]


def load_set(name, seed):
    return load_nasscds(random_state=seed) if name == "nasscds" else load_keel(name, random_state=seed)


def settings_of(variant):
    """(route, {constant: value}) of a variant's name."""
    route, _, spec = variant.partition(":")
    if route not in ("damped", "pseudo"):
        raise ValueError(f"unknown route {route!r}")
    constants = dict(item.split("=") for item in spec.split(",") if item)
    return route, {name: float(value) if "." in value else int(value) for name, value in constants.items()}


def fit_variant(variant, X, Xt, y, yt):
    """One fit of ``variant``, the route's settings restored after it."""
    from skgp_sparse import SparseGPClassifier
    from skgp_sparse.fit import plan
    from skgp_sparse.likelihoods import BernoulliLikelihood
    from skgp_sparse.optim import pseudo

    route, constants = settings_of(variant)
    modules = {name: plan if name.startswith("plan.") else pseudo for name in constants}
    constants = {(modules[name], name.removeprefix("plan.")): value for name, value in constants.items()}
    saved = {key: getattr(*key) for key in constants}
    clf = SparseGPClassifier(n_inducing=256, batch_size=1024, random_state=0)
    try:
        BernoulliLikelihood.pseudo_observation_search = route == "pseudo"
        for (module, name), value in constants.items():
            setattr(module, name, value)
        proba, fit_s, search_s, stream_s = fit_by_phase(clf, X, y, Xt)
    finally:
        BernoulliLikelihood.pseudo_observation_search = True
        for (module, name), value in saved.items():
            setattr(module, name, value)
    return dict(accuracy=float(np.mean(clf.classes_[proba.argmax(axis=1)] == yt)),
                log_loss=float(log_loss(yt, proba, labels=clf.classes_)), fit_s=fit_s,
                search_s=search_s, stream_s=stream_s, epochs=int(clf.n_iter_), converged=bool(clf.converged_))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="+", default=SETS, choices=SETS)
    parser.add_argument("--variants", nargs="+", default=["damped", "pseudo"])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--out", default="benchmarks/results/binary_search_routes_rounds4.jsonl")
    args = parser.parse_args()
    for variant in args.variants:
        settings_of(variant)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    for name in args.sets:
        X, Xt, y, yt = load_set(name, args.split_seed)
        for repeat in range(args.repeats):
            for variant in args.variants:
                row = dict(set=name, split=args.split_seed, repeat=repeat, variant=variant,
                           **fit_variant(variant, X, Xt, y, yt))
                line = json.dumps(row)
                print(line, flush=True)
                with open(args.out, "a") as out:
                    out.write(line + "\n")


if __name__ == "__main__":
    main()
