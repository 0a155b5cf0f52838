"""The SOLVE basis on arrays of other libraries: array_api_strict and PyTorch (CPU).

The same small problem (M=5 inducing points plus M2=5 orthogonal ones, B=20 rows, D=2,
P outputs, C covariances) is built in numpy -- the numba/BLAS path, the reference -- and
in the other library, in the same dtype. Every entry point of
:mod:`skgp_sparse.bases.solve` must agree with numpy to 1e-10 relative in float64
(``close``: relative to the largest entry of the quantity), in both forms of the
marginals, and answer with arrays of the input's library on its device. In float32 the
other library is compared with the float64 reference to :data:`RTOL_F32`.

array_api_strict runs on its "device1", which refuses every conversion to numpy; a spy on
numpy's conversion functions checks it explicitly as well.
"""

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF, ConstantKernel as C

from skgp_sparse import backend as be
from skgp_sparse.bases import solve
from skgp_sparse.kernels import compile_kernel

from ._array_libs import Lib, close, spy_on_numpy_conversions

RTOL = 1e-10
#: float32 state and data against the float64 reference (relative to each quantity's
#: largest entry). Measured: below 5e-5 for every output of these problems (worst: the
#: P=2, C=2 gradients; two Cholesky factors, C_vv a Schur complement); the bound leaves
#: an order of magnitude for other BLAS builds.
RTOL_F32 = 5e-4
JITTER = 1e-6
FIELDS = ("inducing", "orthogonal", "q_mean", "q_sqrt", "q_mean_orthogonal", "q_sqrt_orthogonal")
ARRAYS = ("inducing", "orthogonal", "q_mean", "q_sqrt", "q_mean_orthogonal", "q_sqrt_orthogonal")


@pytest.fixture(params=["strict_device1", "torch"])
def lib(request):
    return Lib(request.param)


def _lows(rng, n_cov, m):
    lows = []
    for _ in range(n_cov):
        low = np.tril(0.3 * rng.standard_normal((m, m)))
        low[np.diag_indices(m)] = rng.uniform(0.5, 1.2, m)
        lows.append(low)
    return np.stack(lows)


def _problem(p, n_cov, seed=0, m=5, m2=5, b=20, d=2):
    rng = np.random.default_rng(seed + 10 * p + n_cov)
    kernel = compile_kernel(C(1.4) * RBF([0.9, 1.6]))
    X = rng.uniform(-2, 2, size=(b, d))
    Z = rng.uniform(-2, 2, size=(m, d))
    O = rng.uniform(-2, 2, size=(m2, d))
    state = solve.SolveState(Z, O, rng.standard_normal((m, p)), _lows(rng, n_cov, m),
                             rng.standard_normal((m2, p)), _lows(rng, n_cov, m2))
    d_mean = rng.standard_normal((b, p))
    d_var = -rng.uniform(0.5, 2.0, size=(b, p))
    return kernel, X, state, d_mean, d_var


def _in(lib, state, dtype=np.float64):
    cast = lambda a: None if a is None else lib(np.asarray(a, dtype=dtype))  # noqa: E731
    return solve.SolveState(*(cast(getattr(state, n)) for n in ARRAYS), state.residual_jitter,
                            cast(state.precision), cast(state.precision_orthogonal))


CASES = [(1, 1), (2, 1), (2, 2)]
CASE_IDS = ["P1", "P2C1", "P2C2"]


@pytest.fixture(params=CASES, ids=CASE_IDS)
def case(request):
    return request.param


@pytest.mark.parametrize("form", ["whitened", "folded", "auto"])
@pytest.mark.parametrize("need_grad", [False, True, "natural"], ids=["nograd", "grad", "natural"])
def test_marginals(lib, case, form, need_grad):
    kernel, X, state, _, _ = _problem(*case)
    mean, var, tape = solve.marginals(kernel, X, state, JITTER, need_grad, form=form)
    xmean, xvar, xtape = solve.marginals(kernel, lib(X), _in(lib, state), JITTER, need_grad, form=form)
    close(lib.check(xmean, np.float64), mean, RTOL)
    close(lib.check(xvar, np.float64), var, RTOL)
    assert (xtape is None) == (tape is None)
    if tape is not None:
        assert (xtape.inv_u is None) == (tape.inv_u is None)


def test_kl_divergence(lib, case):
    kernel, _, state, _, _ = _problem(*case)
    kl = solve.kl_divergence(kernel, state, JITTER)
    xkl = solve.kl_divergence(kernel, _in(lib, state), JITTER)
    close(lib.check(xkl, np.float64), kl, RTOL)


@pytest.mark.parametrize("full_cov", [False, True], ids=["var", "cov"])
def test_predictor(lib, case, full_cov):
    kernel, X, state, _, _ = _problem(*case)
    pred = solve.make_predictor(kernel, state, JITTER)
    xpred = solve.make_predictor(kernel, _in(lib, state), JITTER)
    for name in ("inducing_points", "mean_weights", "middle"):
        close(lib.check(getattr(xpred, name), np.float64), getattr(pred, name), RTOL)
    mean, var = pred.latent(kernel, X, full_cov=full_cov)
    xmean, xvar = xpred.latent(kernel, lib(X), full_cov=full_cov)
    close(lib.check(xmean, np.float64), mean, RTOL)
    close(lib.check(xvar, np.float64), var, RTOL)


@pytest.mark.parametrize("form", ["whitened", "folded"])
def test_backward(lib, case, form):
    kernel, X, state, d_mean, d_var = _problem(*case)
    _, _, tape = solve.marginals(kernel, X, state, JITTER, True, form=form)
    theta_bar, bars = solve.backward(tape, state, d_mean, d_var, FIELDS)
    xstate = _in(lib, state)
    _, _, xtape = solve.marginals(kernel, lib(X), xstate, JITTER, True, form=form)
    xtheta_bar, xbars = solve.backward(xtape, xstate, lib(d_mean), lib(d_var), FIELDS)
    close(lib.check(xtheta_bar, np.float64), theta_bar, RTOL)
    assert set(xbars) == set(FIELDS)
    for name in FIELDS:
        close(lib.check(xbars[name], np.float64), bars[name], RTOL)


@pytest.mark.parametrize("form", ["whitened", "folded"])
@pytest.mark.parametrize("need_grad", [True, "natural"], ids=["grad", "natural"])
def test_natural_step(lib, case, form, need_grad):
    kernel, X, state, d_mean, d_var = _problem(*case)
    step = 0.7
    _, _, tape = solve.marginals(kernel, X, state, JITTER, need_grad, form=form)
    new = solve.natural_step(tape, state, d_mean, d_var, step)
    xstate = _in(lib, state)
    _, _, xtape = solve.marginals(kernel, lib(X), xstate, JITTER, need_grad, form=form)
    xnew = solve.natural_step(xtape, xstate, lib(d_mean), lib(d_var), step)
    assert isinstance(xnew, solve.SolveState)
    for name in ARRAYS + ("precision", "precision_orthogonal"):
        close(lib.check(getattr(xnew, name), np.float64), getattr(new, name), RTOL)
    # a second step from the new state
    _, _, tape2 = solve.marginals(kernel, X, new, JITTER, need_grad, form=form)
    _, _, xtape2 = solve.marginals(kernel, lib(X), xnew, JITTER, need_grad, form=form)
    new2 = solve.natural_step(tape2, new, d_mean, d_var, step)
    xnew2 = solve.natural_step(xtape2, xnew, lib(d_mean), lib(d_var), step)
    for name in ("q_mean", "q_sqrt", "q_mean_orthogonal", "q_sqrt_orthogonal"):
        close(lib.check(getattr(xnew2, name), np.float64), getattr(new2, name), 1e-9)


def test_no_orthogonal_hands_over_to_coupled(lib):
    kernel, X, state, d_mean, d_var = _problem(2, 2, m2=0)
    xstate = _in(lib, state)
    mean, var, tape = solve.marginals(kernel, X, state, JITTER, True, form="whitened")
    xmean, xvar, xtape = solve.marginals(kernel, lib(X), xstate, JITTER, True, form="whitened")
    close(lib.check(xmean, np.float64), mean, RTOL)
    close(lib.check(xvar, np.float64), var, RTOL)
    theta_bar, bars = solve.backward(tape, state, d_mean, d_var, FIELDS)
    xtheta_bar, xbars = solve.backward(xtape, xstate, lib(d_mean), lib(d_var), FIELDS)
    close(lib.check(xtheta_bar, np.float64), theta_bar, RTOL)
    for name in FIELDS:
        close(lib.check(xbars[name], np.float64), bars[name], RTOL)
    new = solve.natural_step(tape, state, d_mean, d_var, 0.7)
    xnew = solve.natural_step(xtape, xstate, lib(d_mean), lib(d_var), 0.7)
    for name in ("q_mean", "q_sqrt", "precision"):
        close(lib.check(getattr(xnew, name), np.float64), getattr(new, name), RTOL)
    pred = solve.make_predictor(kernel, state, JITTER)
    xpred = solve.make_predictor(kernel, xstate, JITTER)
    close(lib.check(xpred.latent(kernel, lib(X))[1], np.float64), pred.latent(kernel, X)[1], RTOL)


@pytest.mark.parametrize("n_cov", [1, 2])
def test_init_state_copy_and_caches(lib, n_cov):
    rng = np.random.default_rng(1)
    points = rng.uniform(-2, 2, size=(10, 2))
    state = solve.init_state(points, n_outputs=2, n_covariances=n_cov, n_orthogonal=4)
    xstate = solve.init_state(lib(points), n_outputs=2, n_covariances=n_cov, n_orthogonal=4)
    for name in ARRAYS:
        np.testing.assert_array_equal(lib.check(getattr(xstate, name), np.float64), getattr(state, name))
    assert xstate.precision is None and xstate.precision_orthogonal is None
    xstate.precision = lib(np.ones((n_cov, 6, 6)))
    copy = xstate.copy()
    for name in ARRAYS + ("precision",):
        a, b = getattr(copy, name), getattr(xstate, name)
        assert a is not b
        np.testing.assert_array_equal(lib.check(a, np.float64), be.to_numpy(b))
    copy.drop_caches()
    assert copy.precision is None and xstate.precision is not None
    copy.q_mean[0, 0] = 5.0
    assert float(xstate.q_mean[0, 0]) == 0.0
    with pytest.raises(ValueError):
        solve.init_state(lib(points), 1, 1, n_orthogonal=10)


def test_float32(lib, case):
    """float32 arrays stay float32 and agree with the float64 reference to RTOL_F32."""
    kernel, X, state, d_mean, d_var = _problem(*case)
    f32 = np.float32
    xstate = _in(lib, state, f32)
    xX, xdm, xdv = lib(X.astype(f32)), lib(d_mean.astype(f32)), lib(d_var.astype(f32))
    mean, var, tape = solve.marginals(kernel, X, state, JITTER, True, form="whitened")
    xmean, xvar, xtape = solve.marginals(kernel, xX, xstate, JITTER, True)
    close(lib.check(xmean, f32), mean, RTOL_F32)
    close(lib.check(xvar, f32), var, RTOL_F32)
    close(lib.check(solve.kl_divergence(kernel, xstate, JITTER), f32),
          solve.kl_divergence(kernel, state, JITTER), RTOL_F32)
    theta_bar, bars = solve.backward(tape, state, d_mean, d_var, FIELDS)
    xtheta_bar, xbars = solve.backward(xtape, xstate, xdm, xdv, FIELDS)
    close(be.to_numpy(xtheta_bar), theta_bar, RTOL_F32)
    for name in FIELDS:
        close(lib.check(xbars[name], f32), bars[name], RTOL_F32)
    _, _, tape = solve.marginals(kernel, X, state, JITTER, "natural", form="whitened")
    _, _, xtape = solve.marginals(kernel, xX, xstate, JITTER, "natural")
    new = solve.natural_step(tape, state, d_mean, d_var, 0.7)
    xnew = solve.natural_step(xtape, xstate, xdm, xdv, 0.7)
    for name in ("q_mean", "q_sqrt", "q_mean_orthogonal", "q_sqrt_orthogonal"):
        close(lib.check(getattr(xnew, name), f32), getattr(new, name), RTOL_F32)
    pred = solve.make_predictor(kernel, state, JITTER)
    xpred = solve.make_predictor(kernel, xstate, JITTER)
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
    points = lib(np.random.default_rng(3).uniform(-2, 2, size=(10, 2)))
    calls = spy_on_numpy_conversions(monkeypatch)
    solve.init_state(points, 2, 2, n_orthogonal=4)
    for form in ("whitened", "folded"):
        for need_grad in (False, "natural", True):
            solve.marginals(kernel, xX, xstate, JITTER, need_grad, form=form)
        _, _, tape = solve.marginals(kernel, xX, xstate, JITTER, True, form=form)
        solve.backward(tape, xstate, xdm, xdv, FIELDS)
        solve.natural_step(tape, xstate, xdm, xdv, 0.5)
    solve.kl_divergence(kernel, xstate, JITTER)
    pred = solve.make_predictor(kernel, xstate, JITTER)
    pred.latent(kernel, xX), pred.latent(kernel, xX, full_cov=True)
    xstate.copy().drop_caches()
    monkeypatch.undo()
    assert calls == []


def test_mixed_libraries_are_refused(lib):
    kernel, X, state, _, _ = _problem(1, 1)
    with pytest.raises(TypeError):
        solve.marginals(kernel, X, _in(lib, state), JITTER, False)
