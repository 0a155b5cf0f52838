"""An end-to-end minibatch fit on arrays of other libraries (issue 15).

With scikit-learn's ``array_api_dispatch`` on, ``SparseGPRegressor(basis="coupled",
batch_size=<below n>)`` fits X and y of array_api_strict (float64, its default device) or
PyTorch (CPU) in their library: the minibatches, the state and its gradients stay there,
the kernel hyperparameters and the noise on the host. The fit must be the numpy fit: the
same minibatch order (from the same random_state), the same final bound to 1e-8 relative
and the same predictions to 1e-8; the fitted attributes are numpy arrays. Unsupported
combinations raise a NotImplementedError that says what to do.
"""

import pickle
import warnings

import numpy as np
import pytest
import sklearn
from sklearn.exceptions import ConvergenceWarning

from skgp_sparse import SparseGPClassifier, SparseGPRegressor

from ._array_libs import Lib, close

xs = pytest.importorskip("array_api_strict")
pytest.importorskip("array_api_compat")

RTOL = 1e-8


@pytest.fixture(autouse=True)
def _scipy_array_api(monkeypatch):
    # scikit-learn refuses array_api_dispatch=True unless SCIPY_ARRAY_API=1 is set (it reads
    # the variable when the dispatch is switched on); this package uses no scipy function
    # on foreign arrays, so setting it here, after scipy was imported, is enough.
    monkeypatch.setenv("SCIPY_ARRAY_API", "1")


@pytest.fixture(params=["strict", "torch"])
def lib(request):
    if request.param == "torch":
        return Lib("torch")
    # The default device of array_api_strict: its "device1" refuses every conversion to
    # numpy, and the fit converts a host copy of X (k-means, validation) on purpose.
    return Lib("strict_default")


def _data(n=240, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, d))
    y = np.sin(X[:, 0]) + 0.5 * np.cos(2 * X[:, 1]) + 0.1 * rng.standard_normal(n)
    return X, y


def _regressor(**params):
    settings = dict(basis="coupled", n_inducing=12, batch_size=64, max_iter=6, random_state=3)
    settings.update(params)
    return SparseGPRegressor(**settings)


def _fit(model, X, y, dispatch):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        with sklearn.config_context(array_api_dispatch=dispatch):
            return model.fit(X, y)


@pytest.mark.parametrize("normalize_y", [False, True])
def test_minibatch_fit_matches_numpy(lib, normalize_y, monkeypatch):
    X, y = _data()
    reference = _fit(_regressor(normalize_y=normalize_y), X, y, False)

    seen = []
    from skgp_sparse._estimators import _common

    original = _common.DeviceRows.batches

    def spy(self, Y, batch_size):
        source = original(self, Y, batch_size)

        def batches(rng):
            for xb, yb in source(rng):
                seen.append((type(xb), type(yb)))
                yield xb, yb

        return batches

    monkeypatch.setattr(_common.DeviceRows, "batches", spy)
    during = []
    estimator = _regressor(normalize_y=normalize_y)
    # After every epoch: the state on the device, the hyperparameters on the host.
    estimator._epoch_callback = lambda model, history: during.append(
        (tuple(type(getattr(model.state, f)) for f in ("inducing", "q_mean", "q_sqrt")), type(model.kernel.theta))
    )
    fitted = _fit(estimator, lib(X), lib(y), True)
    del fitted._epoch_callback
    assert seen, "the fit did not cut its minibatches on the device"
    assert set(seen) == {(lib.array_type, lib.array_type)}
    assert during and set(during) == {((lib.array_type,) * 3, np.ndarray)}

    assert fitted.n_steps_ == reference.n_steps_
    lml, ref = fitted.log_marginal_likelihood_value_, reference.log_marginal_likelihood_value_
    assert abs(lml - ref) <= RTOL * abs(ref), (lml, ref)
    # The fitted attributes are numpy, so that the model pickles and predicts anywhere.
    for name in ("inducing", "q_mean", "q_sqrt"):
        value = getattr(fitted.variational_state_, name)
        assert type(value) is np.ndarray
        close(value, getattr(reference.variational_state_, name), RTOL)
    assert type(fitted.inducing_points_) is np.ndarray
    np.testing.assert_allclose(fitted.kernel_.theta, reference.kernel_.theta, rtol=RTOL)
    X_test = np.random.default_rng(1).uniform(-3, 3, size=(50, 2))
    mean, std = pickle.loads(pickle.dumps(fitted)).predict(X_test, return_std=True)
    ref_mean, ref_std = reference.predict(X_test, return_std=True)
    close(mean, ref_mean, RTOL)
    close(std, ref_std, RTOL)


@pytest.mark.parametrize("monitor", [False, True], ids=["all_rows", "monitor_sample"])
def test_multi_output_weights_known_noise(lib, monitor, monkeypatch):
    """Two outputs (one covariance broadcast over them), sample weights and a known noise
    per row (alpha), and optionally a stopping rule reading a random sample of the rows."""
    if monitor:
        from skgp_sparse._estimators import _training

        monkeypatch.setattr(_training, "MONITOR_ROWS", 100)
    X, y = _data()
    rng = np.random.default_rng(2)
    y = np.column_stack([y, np.cos(X[:, 1]) + 0.1 * rng.standard_normal(X.shape[0])])
    weights = rng.uniform(0.5, 2.0, X.shape[0])
    alpha = rng.uniform(1e-4, 1e-2, X.shape[0])
    params = dict(alpha=alpha, normalize_y=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        reference = _regressor(**params).fit(X, y, sample_weight=weights)
        with sklearn.config_context(array_api_dispatch=True):
            fitted = _regressor(**params).fit(lib(X), lib(y), sample_weight=weights)
    assert fitted.n_steps_ == reference.n_steps_
    lml, ref = fitted.log_marginal_likelihood_value_, reference.log_marginal_likelihood_value_
    assert abs(lml - ref) <= RTOL * abs(ref), (lml, ref)
    X_test = np.random.default_rng(1).uniform(-3, 3, size=(50, 2))
    close(fitted.predict(X_test), reference.predict(X_test), RTOL)


def test_same_minibatch_order(lib):
    """The rows of every minibatch on the device are those of the numpy fit, in order."""
    from skgp_sparse._estimators._common import DeviceRows, InMemoryRows

    X, y = _data(n=50)
    Y = y[:, None]
    host = InMemoryRows(X).batches(Y, 16)(np.random.default_rng(5))
    rows = DeviceRows(lib(X), X, __import__("skgp_sparse").backend.namespace(lib(X)))
    device = rows.batches(rows.to_device(Y), 16)(np.random.default_rng(5))
    pairs = list(zip(host, device, strict=True))
    assert len(pairs) == 4
    for (xh, yh), (xd, yd) in pairs:
        np.testing.assert_array_equal(lib.check(xd, np.float64), xh)
        np.testing.assert_array_equal(lib.check(yd, np.float64), yh)


def test_without_dispatch_converts_as_before(lib):
    X, y = _data(n=120)
    fitted = _fit(_regressor(max_iter=2), lib(X), lib(y), False)
    assert type(fitted.variational_state_.inducing) is np.ndarray


def test_full_batch_is_refused(lib):
    X, y = _data(n=120)
    with pytest.raises(NotImplementedError, match="batch_size"):
        _fit(_regressor(batch_size=None), lib(X), lib(y), True)
    with pytest.raises(NotImplementedError, match="batch_size"):
        _fit(_regressor(batch_size=500), lib(X), lib(y), True)


def test_other_basis_is_refused(lib):
    X, y = _data(n=120)
    with pytest.raises(NotImplementedError, match="basis='inverse_free'"):
        _fit(_regressor(basis="inverse_free"), lib(X), lib(y), True)


def test_other_likelihood_is_refused(lib):
    X, y = _data(n=120)
    with pytest.raises(NotImplementedError, match="StudentTLikelihood"):
        _fit(_regressor(likelihood="student_t"), lib(X), lib(y), True)
    labels = (y > 0).astype(np.int64)
    with pytest.raises(NotImplementedError, match="Likelihood"):
        _fit(SparseGPClassifier(basis="coupled", n_inducing=8, batch_size=32, max_iter=2), lib(X), lib(labels), True)
