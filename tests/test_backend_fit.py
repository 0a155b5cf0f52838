"""End-to-end fits on arrays of other libraries (issue 15).

A fit runs on another array library in two ways: arrays of that library passed in under
scikit-learn's ``array_api_dispatch`` (array_api_strict on its "device1", which refuses
every conversion to numpy, and PyTorch on the CPU), or numpy input with
``backend="cupy"`` / ``"torch"``, which moves it to the GPU (exercised here with the GPU
library replaced by array_api_strict's "device1"). Either way the training rows, the
minibatches (cut there from the same random permutation) and q(u) stay in that library;
kernel hyperparameters and the noise stay on the host.

Every basis that runs there x both estimators x {float64, float32} x {minibatch, full
batch} must give the numpy fit: in float64 the same bound to ``RTOL`` relative and the
same steps; in float32 the tolerances of tests/_fit_checks.py. The fitted attributes
are numpy arrays, so that the model pickles and predicts anywhere.
"""

import warnings

import numpy as np
import pytest
import sklearn
from sklearn.exceptions import ConvergenceWarning

from skgp_sparse import SparseGPRegressor
from skgp_sparse import backend as be
from skgp_sparse.bases import BASES

from . import _fit_checks as fc
from ._array_libs import Lib, close

xs = pytest.importorskip("array_api_strict")
pytest.importorskip("array_api_compat")
from array_api_strict._array_object import Array as StrictArray  # noqa: E402

@pytest.fixture(autouse=True)
def _scipy_array_api(monkeypatch):
    # scikit-learn refuses array_api_dispatch=True unless SCIPY_ARRAY_API=1 is set (it reads
    # the variable when the dispatch is switched on); this package uses no scipy function
    # on foreign arrays, so setting it here, after scipy was imported, is enough.
    monkeypatch.setenv("SCIPY_ARRAY_API", "1")


@pytest.fixture(autouse=True)
def _stream_from_a_fixed_start(monkeypatch):
    # These tests compare the stream's arithmetic across libraries (or dtypes) with
    # numpy's; the exact search that starts a fit is float64 numpy code for all of them,
    # and from its end Adam's first steps carry rounding into the flattest directions
    # (see _fit_checks.without_search); test_float32_fit.py's
    # test_fits_that_start_with_the_search_match_float64 checks the two together.
    fc.without_search(monkeypatch)


@pytest.fixture(params=["strict_device1", "torch"])
def lib(request):
    return Lib(request.param)


def _spy_on_minibatches(monkeypatch, describe):
    """Record ``describe(X_batch, Y_batch)`` of every minibatch a device fit draws."""
    from skgp_sparse.fit import rows as fit_rows

    seen = []
    original = fit_rows.DeviceRows.batches

    def spy(self, Y, batch_size):
        source = original(self, Y, batch_size)

        def batches(rng):
            for xb, yb in source(rng):
                seen.append(describe(xb, yb))
                yield xb, yb

        return batches

    monkeypatch.setattr(fit_rows.DeviceRows, "batches", spy)
    return seen


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("batch_size", [40, None], ids=["minibatch", "full_batch"])
@pytest.mark.parametrize("kind", ["regressor", "binary"])
@pytest.mark.parametrize("basis", list(BASES))
def test_fit_matches_numpy(lib, basis, kind, batch_size, dtype):
    X, y = fc.data()
    y = fc.targets(kind, y)
    # The full-batch regressor searches the collapsed bound: along fixed gradient steps
    # here, so that both fits follow one path (the L-BFGS-B search is checked below).
    params = dict(optimizer=fc.gradient_steps) if kind == "regressor" and batch_size is None else {}
    reference = fc.fit(fc.estimator(kind, basis, batch_size, **params), X, y, False)
    fitted = fc.fit(fc.estimator(kind, basis, batch_size, dtype=dtype, **params), lib(X), lib(y), True)
    fc.assert_same_fit(fitted, reference, dtype, np.random.default_rng(1).uniform(-3, 3, size=(30, 2)))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_collapsed_search_lands_where_numpy_does(lib, dtype):
    X, y = fc.data()
    reference = fc.fit(fc.estimator("regressor", "coupled", None), X, y, False)
    fitted = fc.fit(fc.estimator("regressor", "coupled", None, dtype=dtype), lib(X), lib(y), True)
    fc.assert_same_fit(fitted, reference, dtype, X[:30], searched=True)


@pytest.mark.parametrize("kind, params", fc.OTHER_LIKELIHOODS, ids=fc.OTHER_LIKELIHOOD_IDS)
def test_other_likelihoods_match_numpy(kind, params):
    lib = Lib("strict_device1")
    X, y = fc.data()
    y = fc.targets(kind, y, params)
    reference = fc.fit(fc.estimator(kind, "coupled", 40, **params), X, y, False)
    fitted = fc.fit(fc.estimator(kind, "coupled", 40, **params), lib(X), lib(y), True)
    fc.assert_same_fit(fitted, reference, "float64", X[:30])


@pytest.mark.parametrize("basis", list(BASES))
def test_minibatches_and_state_stay_on_the_device(lib, basis, monkeypatch):
    """During training the minibatches and the state are arrays of the input's library
    (read after every epoch), the hyperparameters numpy."""
    seen = _spy_on_minibatches(monkeypatch, lambda xb, yb: (type(xb), type(yb)))
    X, y = fc.data()
    estimator = fc.estimator("regressor", basis, 40)
    fields = BASES[basis].VARIATIONAL_FIELDS + BASES[basis].INDUCING_FIELDS
    during = []
    estimator._epoch_callback = lambda model, history: during.append(
        (tuple(type(getattr(model.state, f)) for f in fields), type(model.kernel.theta))
    )
    fc.fit(estimator, lib(X), lib(y), True)
    assert seen and set(seen) == {(lib.array_type, lib.array_type)}
    assert during and set(during) == {((lib.array_type,) * len(fields), np.ndarray)}


def test_no_array_of_the_data_or_of_q_leaves_the_device(monkeypatch):
    """Instrumented: every device-to-host transfer during the training steps (strict's
    "device1" allows none but ``to_device``, which the spy records) is of a handful of
    numbers: the hyperparameters' gradient, the likelihood parameters' and the ELBO
    terms. No array of the rows, of the minibatch or of q(u) leaves the device."""
    from skgp_sparse.optim import loop

    lib = Lib("strict_device1")
    X, y = fc.data()
    moved, training = [], [False]
    original_to_device = StrictArray.to_device

    def to_device(self, device, /, stream=None):
        if training[0] and device != self.device:
            moved.append(self.size)
        return original_to_device(self, device, stream=stream)

    original_train = loop.train

    def train(*args, **kwargs):
        training[0] = True
        try:
            return original_train(*args, **kwargs)
        finally:
            training[0] = False

    monkeypatch.setattr(StrictArray, "to_device", to_device)
    monkeypatch.setattr(loop, "train", train)
    from skgp_sparse.fit import training as fit_training

    monkeypatch.setattr(fit_training, "train", train)
    fitted = fc.fit(fc.estimator("regressor", "coupled", 40, n_inducing=16), lib(X), lib(y), True)
    n_theta = fitted.kernel_.theta.size
    assert moved, "the spy saw no transfer (the ELBO must come back as a number)"
    # Per check interval one packed transfer of its steps' ELBO estimates, their
    # hyperparameter gradients for the stopping rule (theta's n_theta entries and the
    # noise's) and the flags; the careful path's steps and monitor move a few numbers each.
    assert max(moved) <= loop.CHECK_EVERY * (n_theta + 2) + 1, sorted(set(moved))
    assert len(moved) <= 2 * fitted.n_steps_, str(moved)


def test_backend_moves_numpy_input(monkeypatch):
    """``backend="cupy"`` (the GPU library replaced by strict's device1): numpy input is
    fitted on the device, equal to the numpy fit; the fitted model is numpy."""
    lib = Lib("strict_device1")
    monkeypatch.setattr(be, "device_namespace", lambda name: (xs, lib.device))
    types = _spy_on_minibatches(monkeypatch, lambda xb, yb: (type(xb), be.device_of(xb)))
    X, y = fc.data()
    for kind in ("regressor", "binary"):
        targets = fc.targets(kind, y)
        reference = fc.fit(fc.estimator(kind, "coupled", 40), X, targets, False)
        fitted = fc.fit(fc.estimator(kind, "coupled", 40, backend="cupy"), X, targets, False)
        fc.assert_same_fit(fitted, reference, "float64", X[:30])
    assert set(types) == {(StrictArray, lib.device)}


def test_partial_fit_and_warm_start_on_the_device(lib):
    X, y = fc.data()
    ref = fc.estimator("regressor", "coupled", 40)
    dev = fc.estimator("regressor", "coupled", 40)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for rows in (slice(0, 80), slice(80, 160)):
            ref.partial_fit(X[rows], y[rows])
            with sklearn.config_context(array_api_dispatch=True):
                dev.partial_fit(lib(X[rows]), lib(y[rows]))
    assert dev.n_steps_ == ref.n_steps_
    fc.assert_numpy_model(dev)
    close(dev.predict(X[:30]), ref.predict(X[:30]), 1e-8)

    ref = fc.fit(fc.estimator("regressor", "coupled", 40, warm_start=True), X, y, False)
    dev = fc.fit(fc.estimator("regressor", "coupled", 40, warm_start=True), lib(X), lib(y), True)
    ref = fc.fit(ref, X, y, False)
    dev = fc.fit(dev, lib(X), lib(y), True)
    fc.assert_same_fit(dev, ref, "float64", X[:30])


def test_same_minibatch_order(lib):
    """The rows of every minibatch on the device are those of the numpy fit, in order."""
    from skgp_sparse.fit.rows import DeviceRows, InMemoryRows

    X, y = fc.data(n=50)
    Y = y[:, None]
    host = InMemoryRows(X).batches(Y, 16)(np.random.default_rng(5))
    device_X = lib(X)
    rows = DeviceRows(device_X, X, be.namespace(device_X), device_X.dtype)
    device = rows.batches(rows.to_device(Y), 16)(np.random.default_rng(5))
    pairs = list(zip(host, device, strict=True))
    assert len(pairs) == 4
    for (xh, yh), (xd, yd) in pairs:
        np.testing.assert_array_equal(lib.check(xd, np.float64), xh)
        np.testing.assert_array_equal(lib.check(yd, np.float64), yh)


def test_without_dispatch_converts_as_before():
    lib = Lib("torch")
    X, y = fc.data(n=120)
    fitted = fc.fit(fc.estimator("regressor", "coupled", 40, max_iter=2), lib(X), lib(y), False)
    assert type(fitted.variational_state_.inducing) is np.ndarray


@pytest.mark.parametrize("name", ["cupy", "torch"])
def test_missing_gpu_library_fails_at_once(name):
    import importlib.util

    X, y = fc.data(n=60)
    if importlib.util.find_spec(name) is None:
        error, match = ImportError, f"backend='{name}' needs"
    elif name == "torch" and not __import__("torch").cuda.is_available():
        error, match = RuntimeError, "no CUDA device"
    else:
        pytest.skip(f"{name} is installed with a usable GPU here (tests/test_gpu.py fits on it)")
    with pytest.raises(error, match=match):
        SparseGPRegressor(backend=name).fit(X, y)


def test_dask_input_with_a_gpu_backend_is_refused():
    da = pytest.importorskip("dask.array")
    X, y = fc.data(n=60)
    with pytest.raises(NotImplementedError, match="Dask array streams through backend='numpy' only"):
        SparseGPRegressor(backend="cupy").fit(da.from_array(X, chunks=20), y)


def test_backend_and_input_library_must_agree(monkeypatch):
    monkeypatch.setattr(be, "device_namespace", lambda name: (xs, None))
    lib = Lib("torch")
    X, y = fc.data(n=60)
    with pytest.raises(ValueError, match="backend='cupy' but X is an array of torch"):
        fc.fit(SparseGPRegressor(backend="cupy"), lib(X), lib(y), True)
