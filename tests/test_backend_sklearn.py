"""scikit-learn's Array API estimator check on the device path (issue 15).

``check_array_api_input`` fits each estimator on numpy and, under ``array_api_dispatch``,
on arrays of another library and device, then compares fitted arrays and every
prediction method: same values (``check_values=True``), each output in the input's
library, on its device, of the numpy output's dtype. Run here for array_api_strict (its
CPU device and "device1") and PyTorch on the CPU, with and without sample weights, and,
marked ``gpu`` and skipped with the reason where there is no CUDA device, for CuPy and
PyTorch on CUDA.

The model itself (``variational_state_``, ``predictor_``) stays numpy, so that a model
fitted on a GPU pickles and predicts anywhere; the one fitted array attribute scikit-learn
inspects, ``inducing_points_``, follows the input (and is pickled as numpy).
"""

import pickle
import warnings

import numpy as np
import pytest
import sklearn
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.estimator_checks import check_array_api_input

from skgp_sparse import SparseGPClassifier, SparseGPRegressor
from skgp_sparse.bases import BASES
from ._array_libs import require_gpu
from ._fit_checks import without_search

pytest.importorskip("array_api_strict")
pytest.importorskip("array_api_compat")


NAMESPACES = [
    ("array_api_strict", None),
    ("array_api_strict", "device1"),
    ("torch", "cpu"),
    pytest.param("cupy", None, marks=pytest.mark.gpu),
    pytest.param("torch", "cuda", marks=pytest.mark.gpu),
]


@pytest.fixture(autouse=True)
def _scipy_array_api(monkeypatch):
    monkeypatch.setenv("SCIPY_ARRAY_API", "1")


@pytest.fixture(autouse=True)
def _stream_from_a_fixed_start(monkeypatch):
    # scikit-learn's check compares the fit on another library with the numpy fit to a
    # tight tolerance: from a fixed start (see _fit_checks.without_search).
    without_search(monkeypatch)


def _estimators():
    for basis in list(BASES):
        extra = dict(n_orthogonal=4) if basis in ("solve", "orth_decoupled") else {}
        # Minibatches (10 of the check's 30 rows) for the regressor: its full-batch search
        # stops where rounding lets it (tests/test_backend_fit.py bounds that separately).
        yield SparseGPRegressor(basis=basis, n_inducing=8, batch_size=10, max_iter=3, **extra)
        yield SparseGPClassifier(basis=basis, n_inducing=8, max_iter=3, **extra)


@pytest.mark.parametrize("estimator", list(_estimators()), ids=lambda e: f"{type(e).__name__}-{e.basis}")
@pytest.mark.parametrize("namespace, device", NAMESPACES, ids=lambda v: str(v))
@pytest.mark.parametrize("sample_weight", [False, True], ids=["unweighted", "weighted"])
def test_check_array_api_input(estimator, namespace, device, sample_weight):
    if namespace == "cupy" or device == "cuda":
        require_gpu(namespace)
    check_values = True
    if namespace == "torch":
        pytest.importorskip("torch")
        # scikit-learn's accuracy_score averages torch labels in torch's default float32
        # (0.9 becomes 0.89999998), which fails the check's float64 tolerance whatever the
        # estimator; the classifier's probabilities are compared to numpy's in
        # tests/test_backend_fit.py instead.
        check_values = not isinstance(estimator, SparseGPClassifier)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check_array_api_input(
            type(estimator).__name__, estimator, namespace, device_name=device,
            check_values=check_values, check_sample_weight=sample_weight,
        )


def test_model_fitted_on_another_library_pickles_as_numpy():
    import array_api_strict as xs

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(60, 3)), rng.normal(size=60)
    device = xs.Device("device1")
    with warnings.catch_warnings(), sklearn.config_context(array_api_dispatch=True):
        warnings.simplefilter("ignore", ConvergenceWarning)
        fitted = SparseGPRegressor(n_inducing=6, batch_size=20, max_iter=2).fit(
            xs.asarray(X, device=device), xs.asarray(y, device=device))
        assert fitted.inducing_points_.device == device
        on_device = fitted.predict(xs.asarray(X[:5], device=device))
    restored = pickle.loads(pickle.dumps(fitted))
    assert type(restored.inducing_points_) is np.ndarray
    assert type(restored.variational_state_.inducing) is np.ndarray
    assert on_device.device == device
    np.testing.assert_allclose(restored.predict(X[:5]), np.asarray(on_device.to_device(xs.Device("CPU_DEVICE"))),
                               rtol=1e-12)
