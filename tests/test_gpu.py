"""Fits on a GPU (issue 15): ``backend="cupy"`` (and ``"torch"``) give the numpy fit.

For every basis, both estimators and float64/float32, a minibatch fit with
``backend=<GPU library>`` must end where the numpy fit ends (same random_state, hence the
same inducing initialisation and minibatch order): the same final ELBO
(``log_marginal_likelihood_value_``) to 1e-8 relative in float64, the same predictions, and
fitted attributes that are numpy arrays, so that the model pickles without the GPU library
and predicts on a CPU machine. The same holds for arrays of the GPU library passed in
directly under scikit-learn's ``array_api_dispatch``.

float32: the training steps run in float32, so a fit drifts from the float64 one by
rounding. These fits start from the kernel's initial hyperparameters rather than from the
exact search, as the CPU's float32 tests do (``_fit_checks.without_search`` says why: from
the search's end, rounding moves the flattest directions visibly; on the first GPU run,
float32 arrays passed under array_api_dispatch, whose search sees float32-rounded targets,
ended with inducing inputs 0.18 apart from the float64 fit's). From that start the final
ELBO must agree to :data:`ELBO_RTOL_F32` relative and the predictions and inducing inputs
to :data:`PRED_RTOL_F32` of their scale, the CPU float32 tests' tolerances.

Every test is marked ``gpu`` and skipped, with the reason, unless CuPy is importable and
sees a usable device (the ``torch`` variants: unless PyTorch sees a CUDA device). That
``backend="cupy"`` fails with a clear error when CuPy has no device is tested with the
estimators' options, not here.
"""

import dataclasses
import io
import pickle
import warnings

import numpy as np
import pytest
import sklearn
from sklearn.exceptions import ConvergenceWarning

from skgp_sparse import SparseGPClassifier, SparseGPRegressor
from skgp_sparse import backend
from skgp_sparse.bases import ORTHOGONAL_BASES

from . import _fit_checks as fc
from ._array_libs import require_gpu

pytestmark = pytest.mark.gpu

BASIS_NAMES = ("coupled", "orth_decoupled", "solve", "inverse_free")
#: Fitted arrays that follow the input's library under array_api_dispatch.
FOLLOWING_ATTRIBUTES = ("inducing_points_", "orthogonal_points_", "X_train_", "y_train_")
ELBO_RTOL_F64 = 1e-8
PRED_RTOL_F64 = 1e-8
#: float32: relative agreement of the final ELBO with the float64 numpy fit (measured on
#: the CPU through torch: at most 1.2e-6).
ELBO_RTOL_F32 = fc.RTOL_F32
#: float32: agreement of predictions, relative to the largest prediction (measured on the
#: CPU through torch: at most 1.8e-6).
PRED_RTOL_F32 = fc.RTOL_F32_PREDICT


@dataclasses.dataclass
class DeviceLib:
    """A GPU array library as the tests use it.

    Attributes
    ----------
    name : str
        ``"cupy"`` or ``"torch"``.
    backend : str
        The estimators' ``backend`` value that fits on it.
    xp : namespace
        The library's Array API namespace (``array_api_compat`` wrapped).
    device : device
        Where the tests put arrays passed in directly.
    array_type : type
        The library's array class (fitted attributes must not be of it).
    """

    name: str
    backend: str
    xp: object
    device: object
    array_type: type

    def __call__(self, a, dtype="float64"):
        """numpy data ``a`` as an array of this library on its device."""
        a = np.asarray(a)
        if a.dtype.kind == "f":
            return backend.to_namespace(a, self.xp, device=self.device, dtype=getattr(self.xp, dtype))
        return backend.to_namespace(a, self.xp, device=self.device)


def make_device_lib(name):
    """The :class:`DeviceLib` of ``name``, or a pytest skip that says what is missing."""
    module = require_gpu(name)
    if name == "cupy":
        return DeviceLib("cupy", "cupy", backend.namespace(module.empty(0)), module.cuda.Device(), module.ndarray)
    device = module.device("cuda", module.cuda.current_device())
    return DeviceLib("torch", "torch", backend.namespace(module.empty(0)), device, module.Tensor)


@pytest.fixture(params=["cupy", "torch"])
def device_lib(request):
    pytest.importorskip("array_api_compat", reason="array-api-compat is not installed")
    return make_device_lib(request.param)


@pytest.fixture(autouse=True)
def _scipy_array_api(monkeypatch):
    # scikit-learn refuses array_api_dispatch=True unless SCIPY_ARRAY_API=1 (it reads the
    # variable when the dispatch is switched on).
    monkeypatch.setenv("SCIPY_ARRAY_API", "1")


# --------------------------------------------------------------------------------------
# data, estimators, reference fits
# --------------------------------------------------------------------------------------
def _data(kind, n=240, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, d))
    f = np.sin(X[:, 0]) + 0.5 * np.cos(2 * X[:, 1])
    if kind == "regressor":
        return X, f + 0.1 * rng.standard_normal(n)
    return X, (f + 0.3 * rng.standard_normal(n) > 0).astype(np.int64)


def _estimator(kind, basis, **params):
    """A minibatch fit of a few epochs: batch_size below n, the stopping rule out of play."""
    settings = dict(basis=basis, n_inducing=12, n_orthogonal=8 if basis in ORTHOGONAL_BASES else 0,
                    batch_size=64, max_iter=4, tol=0.0, n_iter_no_change=10**6, random_state=3)
    settings.update(params)
    return (SparseGPRegressor if kind == "regressor" else SparseGPClassifier)(**settings)


def _fit(estimator, X, y, dispatch=False):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        with sklearn.config_context(array_api_dispatch=dispatch):
            return estimator.fit(X, y)


_REFERENCES = {}


def _reference(kind, basis, dtype, monkeypatch):
    """The numpy (float64) fit that a fit in ``dtype`` is compared with, made once per
    estimator, basis and start. float32 fits and their reference skip the exact search
    (see the module's docstring); ``monkeypatch`` keeps it skipped for the test's own fit."""
    searched = dtype == "float64"
    if not searched:
        fc.without_search(monkeypatch)
    key = (kind, basis, searched)
    if key not in _REFERENCES:
        _REFERENCES[key] = _fit(_estimator(kind, basis, backend="numpy"), *_data(kind))
    return _REFERENCES[key]


# --------------------------------------------------------------------------------------
# checks
# --------------------------------------------------------------------------------------
def _foreign_leaves(value, path="", seen=None):
    """Paths of every array of a library other than numpy inside ``value`` (through
    dataclasses, dicts, lists, tuples and plain objects' attributes)."""
    seen = set() if seen is None else seen
    if id(value) in seen or isinstance(value, (str, bytes, int, float, bool, type(None), np.ndarray, np.generic)):
        return []
    seen.add(id(value))
    if backend.is_foreign(value):
        return [path or "<root>"]
    found = []
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = ((f.name, getattr(value, f.name, None)) for f in dataclasses.fields(value))
    elif isinstance(value, dict):
        items = ((repr(k), v) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        items = ((str(i), v) for i, v in enumerate(value))
    elif hasattr(value, "__dict__") and type(value).__module__.startswith("skgp_sparse"):
        items = vars(value).items()
    else:
        return []
    for name, item in items:
        found += _foreign_leaves(item, f"{path}.{name}" if path else name, seen)
    return found


class _RecordingUnpickler(pickle.Unpickler):
    """An unpickler that notes the module of every class or function the pickle imports."""

    def __init__(self, file):
        super().__init__(file)
        self.modules = set()

    def find_class(self, module, name):
        self.modules.add(module)
        return super().find_class(module, name)


def _load_recording_modules(blob):
    """``pickle.loads(blob)`` and the modules the pickle imported. A pickle that names a
    library (for a class or a function) needs it installed to load; one that holds the
    library's name in a string (``backend="torch"``) does not."""
    unpickler = _RecordingUnpickler(io.BytesIO(blob))
    return unpickler.load(), unpickler.modules


def _predictions(estimator, X):
    if isinstance(estimator, SparseGPRegressor):
        mean, std = estimator.predict(X, return_std=True)
        return {"mean": mean, "std": std}
    return {"proba": estimator.predict_proba(X)}


def _close(actual, expected, rtol):
    """Entrywise agreement within ``rtol`` of the largest entry of ``expected``."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    scale = np.max(np.abs(expected), initial=0.0)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * scale)


def _check_matches(fitted, reference, kind, dtype, device_lib, dispatched=False):
    elbo_rtol, pred_rtol = (ELBO_RTOL_F64, PRED_RTOL_F64) if dtype == "float64" else (ELBO_RTOL_F32, PRED_RTOL_F32)
    assert fitted.n_steps_ == reference.n_steps_
    elbo, ref = fitted.log_marginal_likelihood_value_, reference.log_marginal_likelihood_value_
    assert np.isfinite(elbo)
    assert abs(elbo - ref) <= elbo_rtol * abs(ref), (elbo, ref, abs(elbo - ref) / abs(ref))

    # Every fitted attribute is host data: nothing of the GPU library is left on the model,
    # but for the inducing inputs' public copies and the kept training rows, which follow
    # arrays passed in under array_api_dispatch (scikit-learn's convention, as
    # GaussianProcessRegressor's X_train_) and are pickled as numpy.
    following = FOLLOWING_ATTRIBUTES if dispatched else ()
    fitted_attrs = {name: value for name, value in vars(fitted).items() if name.endswith("_") and name not in following}
    leaves = _foreign_leaves(fitted_attrs)
    assert not leaves, f"fitted attributes holding {device_lib.name} arrays: {leaves}"
    points = backend.to_numpy(fitted.inducing_points_)
    assert type(fitted.inducing_points_) is np.ndarray or dispatched
    _close(points, reference.inducing_points_, pred_rtol)

    X_test = np.random.default_rng(1).uniform(-3, 3, size=(50, 2))
    predicted = _predictions(fitted, X_test)
    expected = _predictions(reference, X_test)
    for name in expected:
        assert type(predicted[name]) is np.ndarray, (name, type(predicted[name]))
        _close(predicted[name], expected[name], pred_rtol)

    # The pickle needs nothing of the GPU library (it loads on a machine without it), and
    # the unpickled model predicts what the fitted one does, in numpy.
    loaded, modules = _load_recording_modules(pickle.dumps(fitted))
    assert not {m for m in modules if m.split(".")[0] == device_lib.name}, f"the pickle imports {device_lib.name}"
    assert type(loaded.inducing_points_) is np.ndarray
    restored = _predictions(loaded, X_test)
    for name in predicted:
        assert type(restored[name]) is np.ndarray
        np.testing.assert_array_equal(restored[name], predicted[name])


# --------------------------------------------------------------------------------------
# tests
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("basis", BASIS_NAMES)
@pytest.mark.parametrize("kind", ["regressor", "classifier"])
def test_backend_fit_matches_numpy(device_lib, kind, basis, dtype, monkeypatch):
    """numpy input, ``backend=<GPU library>``: the fit runs on the GPU and ends as the numpy fit."""
    reference = _reference(kind, basis, dtype, monkeypatch)
    X, y = _data(kind)
    fitted = _fit(_estimator(kind, basis, backend=device_lib.backend, dtype=dtype), X, y)
    _check_matches(fitted, reference, kind, dtype, device_lib)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("basis", BASIS_NAMES)
@pytest.mark.parametrize("kind", ["regressor", "classifier"])
def test_device_arrays_under_dispatch_match_numpy(device_lib, kind, basis, dtype, monkeypatch):
    """Arrays of the GPU library passed in directly, ``array_api_dispatch`` on: the fit runs
    where they live and ends as the numpy fit."""
    reference = _reference(kind, basis, dtype, monkeypatch)
    X, y = _data(kind)
    fitted = _fit(_estimator(kind, basis, dtype=dtype), device_lib(X, dtype), device_lib(y, dtype), dispatch=True)
    _check_matches(fitted, reference, kind, dtype, device_lib, dispatched=True)
