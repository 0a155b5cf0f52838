"""The coupled basis on arrays of other libraries: array_api_strict and PyTorch (CPU).

The same small problem (M=6 inducing points, B=20 rows, D=2, P outputs, C covariances)
is built in numpy -- the numba/BLAS path, the reference -- and in the other library, in
the same dtype. Every entry point of :mod:`skgp_sparse.bases.coupled` must agree with
numpy to 1e-10 relative in float64 (``close``: relative to the largest entry of the
quantity), in both forms of the marginals, and answer with arrays of the input's library
on its device. In float32 the other library is compared with the float64 reference to
:data:`RTOL_F32`.

array_api_strict runs on its "device1", which refuses every conversion to numpy: an
``np.asarray`` on the data anywhere in the path raises there; a spy on numpy's
conversion functions checks it explicitly as well.
"""

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF, ConstantKernel as C

from skgp_sparse import backend as be
from skgp_sparse.bases import coupled, toolkit
from skgp_sparse.kernels import compile_kernel
from skgp_sparse.linalg import weighted_gram

from ._array_libs import Lib, close, spy_on_numpy_conversions

RTOL = 1e-10
#: float32 state and data against the float64 reference (relative to each quantity's
#: largest entry). Measured: below 7e-6 for every output of these problems (cond(K_zz)
#: up to 5e2); the bound leaves an order of magnitude for other BLAS builds.
RTOL_F32 = 1e-4
JITTER = 1e-6
FIELDS = ("inducing", "q_mean", "q_sqrt")


@pytest.fixture(params=["strict_device1", "torch"])
def lib(request):
    return Lib(request.param)


def _problem(p, n_cov, seed=0, m=6, b=20, d=2):
    rng = np.random.default_rng(seed + 10 * p + n_cov)
    kernel = compile_kernel(C(1.4) * RBF([0.9, 1.6]))
    X = rng.uniform(-2, 2, size=(b, d))
    Z = rng.uniform(-2, 2, size=(m, d))
    q_mean = rng.standard_normal((m, p))
    lows = []
    for _ in range(n_cov):
        low = np.tril(0.3 * rng.standard_normal((m, m)))
        low[np.diag_indices(m)] = rng.uniform(0.5, 1.2, m)
        lows.append(low)
    q_sqrt = np.stack(lows)
    d_mean = rng.standard_normal((b, p))
    # Negative variance adjoints (a log-concave likelihood), different for every row.
    d_var = -rng.uniform(0.5, 2.0, size=(b, p))
    return kernel, X, coupled.CoupledState(Z, q_mean, q_sqrt), d_mean, d_var


def _in(lib, state, dtype=np.float64):
    cast = lambda a: lib(np.asarray(a, dtype=dtype))  # noqa: E731
    precision = None if state.precision is None else cast(state.precision)
    return coupled.CoupledState(cast(state.inducing), cast(state.q_mean), cast(state.q_sqrt), precision)


CASES = [(1, 1), (2, 1), (2, 2)]
CASE_IDS = ["P1", "P2C1", "P2C2"]


@pytest.fixture(params=CASES, ids=CASE_IDS)
def case(request):
    return request.param


@pytest.mark.parametrize("form", ["whitened", "folded", "auto"])
@pytest.mark.parametrize("need_grad", [False, True, "natural"], ids=["nograd", "grad", "natural"])
def test_marginals(lib, case, form, need_grad):
    kernel, X, state, _, _ = _problem(*case)
    mean, var, tape = coupled.marginals(kernel, X, state, JITTER, need_grad, form=form)
    xmean, xvar, xtape = coupled.marginals(kernel, lib(X), _in(lib, state), JITTER, need_grad, form=form)
    close(lib.check(xmean, np.float64), mean, RTOL)
    close(lib.check(xvar, np.float64), var, RTOL)
    assert (xtape is None) == (tape is None)
    if tape is not None:
        assert type(xtape) is type(tape)


def test_kl_divergence(lib, case):
    kernel, _, state, _, _ = _problem(*case)
    kl = coupled.kl_divergence(kernel, state, JITTER)
    xkl = coupled.kl_divergence(kernel, _in(lib, state), JITTER)
    close(lib.check(xkl, np.float64), kl, RTOL)


@pytest.mark.parametrize("full_cov", [False, True], ids=["var", "cov"])
def test_predictor(lib, case, full_cov):
    kernel, X, state, _, _ = _problem(*case)
    pred = coupled.make_predictor(kernel, state, JITTER)
    xpred = coupled.make_predictor(kernel, _in(lib, state), JITTER)
    for name in ("inducing_points", "mean_weights", "middle"):
        close(lib.check(getattr(xpred, name), np.float64), getattr(pred, name), RTOL)
    mean, var = pred.latent(kernel, X, full_cov=full_cov)
    xmean, xvar = xpred.latent(kernel, lib(X), full_cov=full_cov)
    close(lib.check(xmean, np.float64), mean, RTOL)
    close(lib.check(xvar, np.float64), var, RTOL)


@pytest.mark.parametrize("form", ["whitened", "folded"])
def test_backward(lib, case, form):
    kernel, X, state, d_mean, d_var = _problem(*case)
    _, _, tape = coupled.marginals(kernel, X, state, JITTER, True, form=form)
    theta_bar, bars = coupled.backward(tape, state, d_mean, d_var, FIELDS)
    xstate = _in(lib, state)
    _, _, xtape = coupled.marginals(kernel, lib(X), xstate, JITTER, True, form=form)
    xtheta_bar, xbars = coupled.backward(xtape, xstate, lib(d_mean), lib(d_var), FIELDS)
    close(lib.check(xtheta_bar, np.float64), theta_bar, RTOL)
    assert set(xbars) == set(FIELDS)
    for name in FIELDS:
        close(lib.check(xbars[name], np.float64), bars[name], RTOL)
    # A second backward pass over the same tape (the folded tape rebuilds W K_zx).
    xtheta_bar2, _ = coupled.backward(xtape, xstate, lib(d_mean), lib(d_var), ("inducing",))
    close(lib.check(xtheta_bar2, np.float64), theta_bar, RTOL)


@pytest.mark.parametrize("form", ["whitened", "folded"])
@pytest.mark.parametrize("need_grad", [True, "natural"], ids=["grad", "natural"])
def test_natural_step(lib, case, form, need_grad):
    kernel, X, state, d_mean, d_var = _problem(*case)
    step = 0.7
    _, _, tape = coupled.marginals(kernel, X, state, JITTER, need_grad, form=form)
    new = coupled.natural_step(tape, state, d_mean, d_var, step)
    xstate = _in(lib, state)
    _, _, xtape = coupled.marginals(kernel, lib(X), xstate, JITTER, need_grad, form=form)
    xnew = coupled.natural_step(xtape, xstate, lib(d_mean), lib(d_var), step)
    assert isinstance(xnew, coupled.CoupledState)
    for name in ("inducing", "q_mean", "q_sqrt", "precision"):
        close(lib.check(getattr(xnew, name), np.float64), getattr(new, name), RTOL)
    # the precisions the step cached, and the ones recomputed from the new factor
    close(lib.check(xstate.precision, np.float64), state.precision, RTOL)
    xnew.drop_caches()
    close(lib.check(xnew.precisions(), np.float64), new.precision, 1e-9)
    # a second step from the new state (uses the cached gram of the same tape's h)
    _, _, tape2 = coupled.marginals(kernel, X, new, JITTER, need_grad, form=form)
    _, _, xtape2 = coupled.marginals(kernel, lib(X), xnew, JITTER, need_grad, form=form)
    new2 = coupled.natural_step(tape2, new, d_mean, d_var, step)
    xnew2 = coupled.natural_step(xtape2, xnew, lib(d_mean), lib(d_var), step)
    close(lib.check(xnew2.q_mean, np.float64), new2.q_mean, 1e-9)
    close(lib.check(xnew2.q_sqrt, np.float64), new2.q_sqrt, 1e-9)


def test_folded_grams_of_features(lib, case):
    # The natural step's fallback when the folded gram loses definiteness.
    kernel, X, state, _, d_var = _problem(*case)
    h = toolkit.summed_var_adjoint(d_var, state.q_sqrt.shape[0])
    _, _, tape = coupled.marginals(kernel, X, state, JITTER, "natural", form="folded")
    _, _, xtape = coupled.marginals(kernel, lib(X), _in(lib, state), JITTER, "natural", form="folded")
    grams = tape.whitened_grams_of_features(h)
    xgrams = xtape.whitened_grams_of_features(lib(h))
    assert len(xgrams) == len(grams)
    for xg, g in zip(xgrams, grams):
        close(lib.check(xg, np.float64), g, RTOL)
    # h of both signs: the general product instead of a SYRK
    mixed = h * np.where(np.arange(h.shape[0]) % 2 == 0, 1.0, -1.0)[:, None]
    for c in range(h.shape[1]):
        close(lib.check(weighted_gram(xtape.kzx, lib(mixed[:, c])), np.float64),
              weighted_gram(tape.kzx, mixed[:, c]), RTOL)


def test_natural_step_indefinite_precision_raises(lib):
    kernel, X, state, d_mean, d_var = _problem(2, 2)
    xstate = _in(lib, state)
    _, _, xtape = coupled.marginals(kernel, lib(X), xstate, JITTER, "natural", form="whitened")
    # A large positive variance adjoint makes I - 2 A diag(h) A^T indefinite.
    with pytest.raises(coupled.CholeskyError):
        coupled.natural_step(xtape, xstate, lib(d_mean), lib(1e4 * np.abs(d_var)), 1.0)


@pytest.mark.parametrize("n_cov", [1, 2])
def test_init_state_copy_and_caches(lib, n_cov):
    rng = np.random.default_rng(1)
    Z = rng.uniform(-2, 2, size=(6, 2))
    state = coupled.init_state(Z, n_outputs=2, n_covariances=n_cov)
    xstate = coupled.init_state(lib(Z), n_outputs=2, n_covariances=n_cov)
    for name in ("inducing", "q_mean", "q_sqrt"):
        np.testing.assert_array_equal(lib.check(getattr(xstate, name), np.float64), getattr(state, name))
    assert xstate.precision is None
    close(lib.check(xstate.precisions(), np.float64), state.precisions(), RTOL)
    copy = xstate.copy()
    for name in ("inducing", "q_mean", "q_sqrt", "precision"):
        a, b = getattr(copy, name), getattr(xstate, name)
        assert a is not b
        np.testing.assert_array_equal(lib.check(a, np.float64), be.to_numpy(b))
    copy.drop_caches()
    assert copy.precision is None and xstate.precision is not None
    # A copy is independent of the original.
    copy.q_mean[0, 0] = 5.0
    assert float(xstate.q_mean[0, 0]) == 0.0


def test_init_state_rejects_orthogonal(lib):
    with pytest.raises(ValueError):
        coupled.init_state(lib(np.zeros((3, 2))), 1, 1, n_orthogonal=2)


def test_float32(lib, case):
    """float32 arrays stay float32 and agree with the float64 reference to RTOL_F32."""
    kernel, X, state, d_mean, d_var = _problem(*case)
    f32 = np.float32
    xstate = _in(lib, state, f32)
    xX, xdm, xdv = lib(X.astype(f32)), lib(d_mean.astype(f32)), lib(d_var.astype(f32))
    mean, var, tape = coupled.marginals(kernel, X, state, JITTER, True, form="whitened")
    xmean, xvar, xtape = coupled.marginals(kernel, xX, xstate, JITTER, True)
    close(lib.check(xmean, f32), mean, RTOL_F32)
    close(lib.check(xvar, f32), var, RTOL_F32)
    close(lib.check(coupled.kl_divergence(kernel, xstate, JITTER), f32),
          coupled.kl_divergence(kernel, state, JITTER), RTOL_F32)
    theta_bar, bars = coupled.backward(tape, state, d_mean, d_var, FIELDS)
    xtheta_bar, xbars = coupled.backward(xtape, xstate, xdm, xdv, FIELDS)
    close(be.to_numpy(xtheta_bar), theta_bar, RTOL_F32)
    for name in FIELDS:
        close(lib.check(xbars[name], f32), bars[name], RTOL_F32)
    _, _, tape = coupled.marginals(kernel, X, state, JITTER, "natural", form="whitened")
    _, _, xtape = coupled.marginals(kernel, xX, xstate, JITTER, "natural")
    new = coupled.natural_step(tape, state, d_mean, d_var, 0.7)
    xnew = coupled.natural_step(xtape, xstate, xdm, xdv, 0.7)
    close(lib.check(xnew.q_mean, f32), new.q_mean, RTOL_F32)
    close(lib.check(xnew.q_sqrt, f32), new.q_sqrt, RTOL_F32)
    pred = coupled.make_predictor(kernel, state, JITTER)
    xpred = coupled.make_predictor(kernel, xstate, JITTER)
    for full_cov in (False, True):
        m, v = pred.latent(kernel, X, full_cov=full_cov)
        xm, xv = xpred.latent(kernel, xX, full_cov=full_cov)
        close(lib.check(xm, f32), m, RTOL_F32)
        close(lib.check(xv, f32), v, RTOL_F32)


def test_strict_path_never_converts_to_numpy(monkeypatch):
    """Instrumented: numpy's conversion functions record any call on a strict array."""
    lib = Lib("strict_device1")
    kernel, X, state, d_mean, d_var = _problem(2, 2)
    xstate, xX, xdm, xdv = _in(lib, state), lib(X), lib(d_mean), lib(d_var)
    calls = spy_on_numpy_conversions(monkeypatch)
    for form in ("whitened", "folded"):
        _, _, tape = coupled.marginals(kernel, xX, xstate, JITTER, True, form=form)
        coupled.backward(tape, xstate, xdm, xdv, FIELDS)
        coupled.natural_step(tape, xstate, xdm, xdv, 0.5)
    coupled.kl_divergence(kernel, xstate, JITTER)
    pred = coupled.make_predictor(kernel, xstate, JITTER)
    pred.latent(kernel, xX), pred.latent(kernel, xX, full_cov=True)
    xstate.copy().drop_caches()
    monkeypatch.undo()
    assert calls == []


def test_mixed_libraries_are_refused(lib):
    kernel, X, state, _, _ = _problem(1, 1)
    with pytest.raises(TypeError):
        coupled.marginals(kernel, X, _in(lib, state), JITTER, False)
