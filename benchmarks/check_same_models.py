"""Does a refactor leave every fit unchanged? Fit a fixed grid of models and compare.

A refactor of the algorithm layer must give the same model as before, to 1e-12 in float64.
This script fits every basis with every likelihood family, on minibatches and on one batch,
with numpy float64, and records what each fitted model holds: the kernel's theta, the noise or
likelihood parameters, every array of the variational state, the bound and the predictions
on held-out rows.

    git stash; python benchmarks/check_same_models.py --save /tmp/before.npz; git stash pop
    python benchmarks/check_same_models.py --compare /tmp/before.npz      # exit 1 on a change

``--compare`` prints the largest relative difference of each fit (max |a - b| / max |b| of each
array, the worst of its arrays) and fails when one is above ``--rtol`` (default 1e-12). The fits are short
(a few epochs on a few hundred rows) so that the whole grid takes about a minute; what they
exercise is every step of every path, not convergence.
"""

import argparse
import sys
import warnings
from dataclasses import fields
from pathlib import Path

import numpy as np
from sklearn.exceptions import ConvergenceWarning

# The checkout this script is in, not whichever one pip installed (a git worktree, say).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from skgp_sparse import SparseGPClassifier, SparseGPRegressor  # noqa: E402

BASES = {
    "coupled": {},
    "orth_decoupled": {"n_orthogonal": 12},
    "solve": {"n_orthogonal": 12},
    "inverse_free": {},
}


def data(seed=0, n=240, d=3):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n + 60, d))
    f = np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] ** 2 - 0.3 * X[:, 2]
    return X[:n], f[:n], X[n:], f[n:], rng


def cases():
    """(name, estimator, X, y, X_test) for every fit of the grid."""
    X, f, X_test, _, rng = data()
    y_gauss = f + 0.2 * rng.standard_normal(f.shape)
    y_two = np.column_stack([y_gauss, -y_gauss + 0.1 * rng.standard_normal(f.shape)])
    y_t = f + 0.2 * rng.standard_t(3, f.shape)
    y_count = rng.poisson(np.exp(0.5 * f))
    y_binary = (f + 0.3 * rng.standard_normal(f.shape)) > 0.3
    y_three = np.digitize(f + 0.3 * rng.standard_normal(f.shape), [-0.2, 0.8])
    common = dict(n_inducing=16, max_iter=4, tol=0, random_state=0)
    for basis, extra in BASES.items():
        kw = dict(common, basis=basis, **extra)
        yield f"{basis}/gaussian/minibatch", SparseGPRegressor(batch_size=64, **kw), X, y_gauss, X_test
        yield f"{basis}/gaussian/two-targets", SparseGPRegressor(batch_size=64, **kw), X, y_two, X_test
        yield f"{basis}/gaussian/one-batch", SparseGPRegressor(batch_size=None, **kw), X, y_gauss, X_test
        yield (f"{basis}/student_t/minibatch",
               SparseGPRegressor(likelihood="student_t", batch_size=64, **kw), X, y_t, X_test)
        yield (f"{basis}/poisson/minibatch",
               SparseGPRegressor(likelihood="poisson", batch_size=64, **kw), X, y_count, X_test)
        yield f"{basis}/bernoulli/minibatch", SparseGPClassifier(batch_size=64, **kw), X, y_binary, X_test
        yield f"{basis}/bernoulli/one-batch", SparseGPClassifier(batch_size=None, **kw), X, y_binary, X_test
        yield f"{basis}/multiclass/minibatch", SparseGPClassifier(batch_size=64, **kw), X, y_three, X_test


def record(name, est, X_test):
    """Every array of a fitted estimator that defines its model, keyed by ``name/field``."""
    out = {f"{name}/theta": est.kernel_.theta, f"{name}/bound": np.array(est.log_marginal_likelihood_value_)}
    state = est.variational_state_
    for field in fields(state):
        value = getattr(state, field.name)
        if isinstance(value, np.ndarray):
            out[f"{name}/state.{field.name}"] = value
    if isinstance(est, SparseGPRegressor):
        mean, std = est.predict(X_test, return_std=True)
        out[f"{name}/mean"], out[f"{name}/std"] = mean, std
        for key, value in (getattr(est, "likelihood_params_", None) or {}).items():
            out[f"{name}/likelihood.{key}"] = np.asarray(value, dtype=float)
        if getattr(est, "noise_variance_", None) is not None:
            out[f"{name}/noise"] = np.asarray(est.noise_variance_, dtype=float)
    else:
        out[f"{name}/proba"] = est.predict_proba(X_test)
    return out


def fit_all():
    import skgp_sparse

    print(f"fitting with {Path(skgp_sparse.__file__).parent}")
    arrays = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for name, est, X, y, X_test in cases():
            est.fit(X, y)
            arrays.update(record(name, est, X_test))
    return arrays


def compare(now, before, rtol):
    worst = {}
    missing = sorted(set(before) ^ set(now))
    for key in sorted(set(before) & set(now)):
        a, b = np.asarray(now[key], dtype=float), np.asarray(before[key], dtype=float)
        if a.shape != b.shape:
            diff = np.inf
        else:
            diff = float(np.max(np.abs(a - b), initial=0.0) / max(float(np.max(np.abs(b), initial=0.0)), 1e-300))
        fit = key.rsplit("/", 1)[0]
        if diff >= worst.get(fit, (-1.0, ""))[0]:
            worst[fit] = (diff, key)
    for fit, (diff, key) in worst.items():
        print(f"{fit:40s} {diff:9.2e}  {'ok' if diff <= rtol else 'CHANGED'} (largest: {key.rsplit('/', 1)[1]})")
    for key in missing:
        print(f"only in one of the two: {key}")
    return not missing and all(diff <= rtol for diff, _ in worst.values())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--save", help="write the fitted arrays to this .npz file")
    group.add_argument("--compare", help="compare with the arrays of this .npz file")
    parser.add_argument("--rtol", type=float, default=1e-12)
    args = parser.parse_args(argv)
    arrays = fit_all()
    if args.save:
        np.savez(args.save, **arrays)
        print(f"{len(arrays)} arrays written to {args.save}")
        return 0
    with np.load(args.compare) as before:
        same = compare(arrays, dict(before), args.rtol)
    print("same models" if same else "MODELS CHANGED")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
