"""float32 fits on the numpy path (``dtype="float32"``, issue 15).

The numpy path runs its own code (numba kernels, single-call BLAS and LAPACK) on float32
copies of the rows and the state. Every basis x both estimators x {minibatch, full
batch} must give the float64 fit within the float32 tolerances of tests/_fit_checks.py,
and hand back a float64 numpy model. The training steps must really run in float32: an
instrumented fit finds no float64 matrix in the package's training code, where one
float64 operand would silently promote every product after it (and lose the float32
speed: float32 steps take about 0.56 of the float64 time at M = 1024,
docs/benchmarks.md).
"""

import sys
import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from skgp_sparse import SparseGPClassifier, SparseGPRegressor
from skgp_sparse.bases import BASES
from skgp_sparse.linalg import FLOAT32_MIN_JITTER

from . import _fit_checks as fc


@pytest.fixture(autouse=True)
def _stream_from_a_fixed_start(monkeypatch):
    # These tests compare the stream's arithmetic across libraries (or dtypes) with
    # numpy's; the exact search that starts a fit is float64 numpy code for all of them,
    # and from its end Adam's first steps carry rounding into the flattest directions
    # (see _fit_checks.without_search); test_float32_fit.py's
    # test_fits_that_start_with_the_search_match_float64 checks the two together.
    fc.without_search(monkeypatch)


@pytest.mark.parametrize("batch_size", [40, None], ids=["minibatch", "full_batch"])
@pytest.mark.parametrize("kind", ["regressor", "binary"])
@pytest.mark.parametrize("basis", list(BASES))
def test_fit_matches_float64(basis, kind, batch_size):
    X, y = fc.data()
    y = fc.targets(kind, y)
    # The full-batch regressor searches the collapsed bound: along fixed gradient steps
    # here, so that both fits follow one path (the L-BFGS-B search is checked below).
    params = dict(optimizer=fc.gradient_steps) if kind == "regressor" and batch_size is None else {}
    reference = fc.fit(fc.estimator(kind, basis, batch_size, **params), X, y, False)
    fitted = fc.fit(fc.estimator(kind, basis, batch_size, dtype="float32", **params), X, y, False)
    fc.assert_same_fit(fitted, reference, "float32", np.random.default_rng(1).uniform(-3, 3, size=(30, 2)))


def test_collapsed_search_lands_where_float64_does():
    X, y = fc.data()
    reference = fc.fit(fc.estimator("regressor", "coupled", None), X, y, False)
    fitted = fc.fit(fc.estimator("regressor", "coupled", None, dtype="float32"), X, y, False)
    fc.assert_same_fit(fitted, reference, "float32", X[:30], searched=True)


@pytest.mark.parametrize("kind, params", fc.OTHER_LIKELIHOODS, ids=fc.OTHER_LIKELIHOOD_IDS)
def test_other_likelihoods_match_float64(kind, params):
    X, y = fc.data()
    y = fc.targets(kind, y, params)
    reference = fc.fit(fc.estimator(kind, "coupled", 40, **params), X, y, False)
    fitted = fc.fit(fc.estimator(kind, "coupled", 40, dtype="float32", **params), X, y, False)
    fc.assert_same_fit(fitted, reference, "float32", X[:30])


def test_sample_weight_partial_fit_and_warm_start():
    X, y = fc.data()
    weights = np.random.default_rng(2).uniform(0.5, 2.0, size=y.shape)
    reference = fc.fit(fc.estimator("regressor", "solve", 40), X, y, False, sample_weight=weights)
    fitted = fc.fit(fc.estimator("regressor", "solve", 40, dtype="float32"), X, y, False, sample_weight=weights)
    fc.assert_same_fit(fitted, reference, "float32", X[:30])

    ref = fc.estimator("regressor", "coupled", 40)
    f32 = fc.estimator("regressor", "coupled", 40, dtype="float32")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for rows in (slice(0, 80), slice(80, 160)):
            ref.partial_fit(X[rows], y[rows])
            f32.partial_fit(X[rows], y[rows])
    assert f32.n_steps_ == ref.n_steps_
    fc.assert_numpy_model(f32)
    assert f32.partial_fit(X[:40], y[:40]).n_steps_ == ref.partial_fit(X[:40], y[:40]).n_steps_
    fc.close(f32.predict(X[:30]), ref.predict(X[:30]), fc.RTOL_F32_PREDICT)

    ref = fc.fit(fc.estimator("regressor", "coupled", 40, warm_start=True), X, y, False)
    f32 = fc.fit(fc.estimator("regressor", "coupled", 40, warm_start=True, dtype="float32"), X, y, False)
    fc.assert_same_fit(fc.fit(f32, X, y, False), fc.fit(ref, X, y, False), "float32", X[:30])


def test_a_nearly_singular_kernel_matrix_is_factorised_with_the_float32_jitter_floor():
    # y linear in one feature: the fit drives the length scales far out, K(Z, Z) towards
    # rank one. float64 gets there with a jitter of 1e-13; float32 rounding needs more.
    X = np.random.RandomState(0).normal(size=(10, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = SparseGPRegressor(n_inducing=10, max_iter=50, random_state=0).fit(X, X[:, 0])
        fitted = SparseGPRegressor(n_inducing=10, max_iter=50, random_state=0, dtype="float32").fit(X, X[:, 0])
    assert reference.jitter_ < 1e-10
    assert fitted.jitter_ >= FLOAT32_MIN_JITTER
    fc.close(fitted.predict(X), reference.predict(X), 1e-2)


def test_auto_jitter_of_float32_starts_at_the_floor(monkeypatch):
    # With little noise, jitter="auto" asks for less than float32 factorisations use: the
    # full-batch search must not be run again for a jitter it cannot have.
    from skgp_sparse.fit import jitter, search
    from skgp_sparse.kernels import compile_kernel
    from sklearn.gaussian_process.kernels import RBF

    Z = np.linspace(0.0, 1.0, 8)[:, None]
    kernel = compile_kernel(RBF())
    assert jitter.auto_jitter(kernel, Z, 1e-6) == pytest.approx(1e-12)
    assert jitter.auto_jitter(kernel, Z.astype(np.float32), 1e-6) == FLOAT32_MIN_JITTER

    searches = []
    original = search.optimise_collapsed
    monkeypatch.setattr(search, "optimise_collapsed", lambda *a, **k: searches.append(1) or original(*a, **k))
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, size=(120, 1))
    y = np.sin(X[:, 0]) + 0.02 * rng.standard_normal(120)
    fitted = fc.fit(SparseGPRegressor(n_inducing=12, dtype="float32", random_state=0), X, y, False)
    # This noise would allow a relative jitter below FLOAT32_MIN_JITTER / 10.
    assert fitted.noise_variance_ < 0.01 and fitted.jitter_ == FLOAT32_MIN_JITTER
    assert len(searches) == 1


@pytest.mark.parametrize("kind", ["regressor", "binary"])
def test_dask_input_streams_in_float32(kind):
    da = pytest.importorskip("dask.array")
    X, y = fc.data()
    y = fc.targets(kind, y)
    chunked = da.from_array(X, chunks=50)
    reference = fc.fit(fc.estimator(kind, "coupled", 40), chunked, y, False)
    model = fc.estimator(kind, "coupled", 40, dtype="float32")
    assert _float64_matrices_in_training(lambda: fc.fit(model, chunked, y, False)) == set()
    fc.assert_same_fit(model, reference, "float32", X[:30])


# --------------------------------------------------------------------------------------
# the training steps run in float32
# --------------------------------------------------------------------------------------
#: The package's training code: kernels, bases, linear algebra, the ELBO and the
#: optimisers. The likelihoods compute their O(B) per-row terms in float64 on purpose
#: (their adjoints are cast to float32 before the basis sees them); L-BFGS-B's vector
#: and the kernel's theta live on the host in float64 by design; neither is a matrix.
TRAINING_CODE = ("/bases/", "/kernels/", "/linalg/", "/elbo.py", "/optim/loop.py", "/optim/natural.py",
                 "/optim/adam.py")
#: Where the likelihoods' float64 adjoints become float32 (the float64 inputs are its locals).
CONVERSION = "in_float_of"


def _float64_matrices_in_training(fit):
    """Run ``fit()`` and return where a float64 matrix (two axes longer than one) was
    held by a local variable of the training code, from the first training step until
    the state is brought back to float64 at the end."""
    found = set()
    state = {"on": False}

    def profile(frame, event, arg):
        name = frame.f_code.co_name
        if event == "call" and name in ("train", "run_collapsed"):
            state["on"] = True
        elif event == "call" and name == "state_to_host":
            state["on"] = False
        if event != "return" or not state["on"]:
            return
        filename = frame.f_code.co_filename.replace("\\", "/")
        if not any(f"/skgp_sparse{part}" in filename for part in TRAINING_CODE):
            return
        caller = frame.f_back.f_code.co_name if frame.f_back is not None else None
        if CONVERSION in (name, caller):
            return
        for local, value in frame.f_locals.items():
            if (isinstance(value, np.ndarray) and value.dtype == np.float64 and value.ndim >= 2
                    and sorted(value.shape)[-2] > 1):
                found.add((filename.split("/skgp_sparse/")[1], name, local, value.shape))

    sys.setprofile(profile)
    try:
        fit()
    finally:
        sys.setprofile(None)
    return found


@pytest.mark.parametrize(
    "kind, basis, batch_size",
    [("regressor", basis, 40) for basis in BASES]
    + [("regressor", "coupled", None), ("regressor", "orth_decoupled", None), ("binary", "coupled", 40),
       ("multiclass", "solve", 40)],
)
def test_training_runs_in_float32(kind, basis, batch_size):
    X, y = fc.data()
    y = fc.targets(kind, y)
    model = fc.estimator(kind, basis, batch_size, dtype="float32", max_iter=1)
    assert _float64_matrices_in_training(lambda: fc.fit(model, X, y, False)) == set()
    # The instrument sees float64 where there is some: the same fit in float64.
    model = fc.estimator(kind, basis, batch_size, max_iter=1)
    assert _float64_matrices_in_training(lambda: fc.fit(model, X, y, False))


def test_float32_models_predict_in_float64():
    # A float32 fit hands back a float64 model: its outputs are float64 arrays, as GPR's.
    X, y = fc.data(n=60)
    regressor = fc.fit(SparseGPRegressor(n_inducing=8, max_iter=2, random_state=0, dtype="float32"), X, y, False)
    classifier = fc.fit(SparseGPClassifier(n_inducing=8, max_iter=2, random_state=0, dtype="float32"), X, y > 0, False)
    assert regressor.predict(X).dtype == np.float64
    assert regressor.predict(X, return_std=True)[1].dtype == np.float64
    assert classifier.predict_proba(X).dtype == np.float64


@pytest.mark.parametrize("kind", ["regressor", "binary"])
def test_fits_that_start_with_the_search_match_float64(monkeypatch, kind):
    """The default path, search then stream, in float32 against float64: the search's
    tolerances (its end point is where the bound is flattest), predictions included."""
    monkeypatch.undo()
    X, y = fc.data()
    y = fc.targets(kind, y)
    reference = fc.fit(fc.estimator(kind, "coupled", 40), X, y, False)
    fitted = fc.fit(fc.estimator(kind, "coupled", 40, dtype="float32"), X, y, False)
    fc.assert_same_fit(fitted, reference, "float32", X[:30], searched=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_numpy_dtypes_are_taken_for_their_names(dtype):
    """As scikit-learn's dtype parameters: np.float32 is "float32" (the same fit, bit for bit)."""
    X, y = fc.data()
    by_type = SparseGPRegressor(n_inducing=8, batch_size=40, max_iter=2, dtype=dtype, random_state=0).fit(X, y)
    by_name = SparseGPRegressor(n_inducing=8, batch_size=40, max_iter=2, dtype=np.dtype(dtype).name,
                                random_state=0).fit(X, y)
    np.testing.assert_array_equal(by_type.predict(X), by_name.predict(X))
    with pytest.raises(ValueError, match="dtype"):
        SparseGPRegressor(dtype=np.float16).fit(X, y)
