"""Loading fitted estimators with skops, trusting only skgp_sparse.persistence.trusted_types()."""

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, DotProduct, WhiteKernel

from skgp_sparse.features import Multiscale
from skgp_sparse import SparseGPClassifier, SparseGPRegressor
from skgp_sparse.persistence import trusted_types

sio = pytest.importorskip("skops.io")

BASES = ["coupled", "orth_decoupled", "solve", "inverse_free"]


def fitted_models():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    y = X[:, 0] + 0.1 * rng.normal(size=60)
    binary = (X[:, 0] > 0).astype(int)
    three = np.digitize(X[:, 0], [-0.5, 0.5])
    settings = dict(n_inducing=5, max_iter=2, random_state=0)
    for basis in BASES:
        extra = dict(n_orthogonal=3) if basis in ("orth_decoupled", "solve") else {}
        yield SparseGPRegressor(basis=basis, **extra, **settings).fit(X, y), X
        yield SparseGPClassifier(basis=basis, **extra, **settings).fit(X, binary), X
        yield SparseGPClassifier(basis=basis, **settings).fit(X, three), X
    yield SparseGPRegressor(likelihood="student_t", **settings).fit(X, y), X
    yield SparseGPRegressor(likelihood="poisson", **settings).fit(X, np.round(np.abs(3 * y))), X
    kernel = ConstantKernel(1.0) * RBF(1.0) + DotProduct() + WhiteKernel(0.1)
    yield SparseGPRegressor(kernel, **settings).fit(X, y), X
    # Two classes on 20 features or more: the default kernel is a FeatureScaledRBF.
    wide = np.hstack([X, rng.normal(size=(60, 18))])
    yield SparseGPClassifier(**settings).fit(wide, binary), wide
    # Inducing features of another kind than points.
    yield SparseGPRegressor(RBF([1.0, 1.0]), inducing_features="multiscale", **settings).fit(X, y), X
    yield SparseGPClassifier(RBF(1.0), inducing_features=Multiscale(0.3), **settings).fit(X, binary), X
    yield SparseGPRegressor(inducing_features="fourier", **settings).fit(X, y), X


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_every_fitted_estimator_loads_with_the_trusted_types_alone():
    trusted = set(trusted_types())
    for model, X in fitted_models():
        data = sio.dumps(model)
        assert set(sio.get_untrusted_types(data=data)) <= trusted, type(model).__name__
        loaded = sio.loads(data, trusted=trusted_types())
        np.testing.assert_array_equal(loaded.predict(X), model.predict(X))


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_without_the_list_skops_refuses_the_file():
    from skops.io.exceptions import UntrustedTypesFoundException

    model = SparseGPRegressor(n_inducing=3, max_iter=1, random_state=0)
    model.fit(np.random.default_rng(0).normal(size=(20, 1)), np.arange(20.0))
    with pytest.raises(UntrustedTypesFoundException):
        sio.loads(sio.dumps(model), trusted=[])
