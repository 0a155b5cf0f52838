"""The inverse-free basis on arrays of other libraries: array_api_strict and PyTorch (CPU).

The same small problem (M=7 inducing points, B=20 rows, D=2, P outputs, C covariances,
random Sigma and T factors away from T = (K + Sigma)^-1) is built in numpy -- the BLAS
path, the reference -- and in the other library, in the same dtype. Every entry point of
:mod:`skgp_sparse.bases.inverse_free` must agree with numpy to 1e-10 relative in float64
(``close``: relative to the largest entry of the quantity), with the same number of
factor steps in every inner loop on T, and answer with arrays of the input's library on
its device. In float32 the other library is compared with the float64 reference to
:data:`RTOL_F32`. On every library a training step and a prediction stay products only.

array_api_strict runs on its "device1", which refuses every conversion to numpy; a spy on
numpy's conversion functions checks it explicitly as well.
"""

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF, ConstantKernel as C

import skgp_sparse.linalg as sk_linalg
import skgp_sparse.linalg._array_api as sk_linalg_array_api
from skgp_sparse import backend as be
from skgp_sparse.bases import coupled, inverse_free
from skgp_sparse.elbo import VariationalModel
from skgp_sparse.kernels import compile_kernel
from skgp_sparse.likelihoods import GaussianLikelihood
from skgp_sparse.optim import Adam

from ._array_libs import Lib, close, spy_on_numpy_conversions

RTOL = 1e-10
#: float32 state and data against the float64 reference (relative to each quantity's
#: largest entry), T held fixed (no inner loop). Measured: below 6.1e-7 for every output
#: of these problems on both libraries (worst: the gradient in L_t); an order of magnitude
#: is left for other BLAS builds.
RTOL_F32 = 1e-5
#: The predictor after the inner loop on T ran in float32 (to t_tol = 1e-5): both
#: precisions stop within their tolerance of (K + Sigma)^-1, not at the same T.
#: Measured: below 1.1e-6; a factor of 20 left.
RTOL_F32_REFINED = 2e-5
JITTER = 1e-6
FIELDS = ("inducing", "q_mean", "sigma_sqrt", "t_sqrt")
ARRAYS = ("inducing", "q_mean", "sigma_sqrt", "t_sqrt")


@pytest.fixture(params=["strict_device1", "torch"])
def lib(request):
    return Lib(request.param)


def _kernel():
    return compile_kernel(C(1.4) * RBF([0.9, 1.6]))


def _lows(rng, n_cov, m, scale):
    lows = []
    for _ in range(n_cov):
        low = np.tril(0.2 * scale * rng.standard_normal((m, m)))
        low[np.diag_indices(m)] = scale * rng.uniform(0.5, 1.2, m)
        lows.append(low)
    return np.stack(lows)


def _problem(p, n_cov, preconditioned=True, refine=False, seed=0, m=7, b=20, d=2, **options):
    rng = np.random.default_rng(seed + 10 * p + n_cov)
    X = rng.uniform(-2, 2, size=(b, d))
    state = inverse_free.init_state(rng.uniform(-2, 2, size=(m, d)), p, n_cov,
                                    preconditioned_mean=preconditioned, **options)
    state.q_mean = rng.standard_normal((m, p))
    state.sigma_sqrt = _lows(rng, n_cov, m, 0.7)
    state.t_sqrt = _lows(rng, n_cov, m, 0.5)
    state.refine_t = refine
    d_mean = rng.standard_normal((b, p))
    # Negative variance adjoints (a log-concave likelihood), different for every row.
    d_var = -rng.uniform(0.5, 2.0, size=(b, p))
    return _kernel(), X, state, d_mean, d_var


def _in(lib, state, dtype=np.float64):
    # Copies: array_api_strict may share numpy's buffer, and the numpy path updates T in place.
    cast = lambda a: None if a is None else lib(np.array(a, dtype=dtype))  # noqa: E731
    return inverse_free.InverseFreeState(*(cast(getattr(state, n)) for n in ARRAYS), state.n_covariances,
                                         state.refine_t, state.settings)


def _check_state(lib, xstate, state, rtol, dtype=np.float64):
    for name in ARRAYS:
        close(lib.check(getattr(xstate, name), dtype), getattr(state, name), rtol)
    assert (xstate.n_covariances, xstate.refine_t, xstate.settings) == (state.n_covariances, state.refine_t,
                                                                         state.settings)


CASES = [(1, 1), (2, 1), (2, 2)]
CASE_IDS = ["P1", "P2C1", "P2C2"]


@pytest.fixture(params=CASES, ids=CASE_IDS)
def case(request):
    return request.param


@pytest.fixture(params=[True, False], ids=["pre", "plain"])
def preconditioned(request):
    return request.param


@pytest.mark.parametrize("refine", [False, True], ids=["fixed_t", "refine_t"])
@pytest.mark.parametrize("need_grad", [False, True, "natural"], ids=["nograd", "grad", "natural"])
def test_marginals(lib, case, preconditioned, refine, need_grad):
    kernel, X, state, _, _ = _problem(*case, preconditioned, refine)
    xstate = _in(lib, state)
    mean, var, tape = inverse_free.marginals(kernel, X, state, JITTER, need_grad)
    xmean, xvar, xtape = inverse_free.marginals(kernel, lib(X), xstate, JITTER, need_grad)
    close(lib.check(xmean, np.float64), mean, RTOL)
    close(lib.check(xvar, np.float64), var, RTOL)
    assert (xtape is None) == (tape is None)
    # the inner loop moved T in place, the same way
    _check_state(lib, xstate, state, RTOL)


@pytest.mark.parametrize("t_tol", [1e-3, 1e-8, 0.0])
def test_inner_loop_takes_the_same_steps(lib, case, t_tol):
    kernel, _, state, _, _ = _problem(*case, refine=True, t_tol=t_tol, t_max_iter=30)
    xstate = _in(lib, state)
    n_steps = inverse_free.refine_t(kernel(state.inducing), state)
    x_steps = inverse_free.refine_t(kernel(xstate.inducing), xstate)
    assert x_steps == n_steps > 0
    _check_state(lib, xstate, state, RTOL)


def test_factor_step_functions(lib):
    rng = np.random.default_rng(4)
    a = rng.standard_normal((12, 12))
    target = a @ a.T + 1e-2 * np.eye(12)
    low = np.eye(12) / np.sqrt(np.abs(target).sum(axis=1).max()) + np.tril(0.01 * rng.standard_normal((12, 12)))
    xlow, xtarget = lib(low), lib(target)
    e = inverse_free.residual(low, target)
    xe = inverse_free.residual(xlow, xtarget)
    close(lib.check(xe, np.float64), e, RTOL)
    close(lib.check(inverse_free.eigenvalue_bound(xe), np.float64), inverse_free.eigenvalue_bound(e), RTOL)
    # a large residual: the step size is capped; a small one (the step at the result) is not
    big = inverse_free.residual(low, 1e3 * target)
    for e_, xe_ in ((e, xe), (big, lib(big))):
        for eta in (1.0, 1e-4):
            new, used = inverse_free.factor_step(low, e_, eta)
            xnew, xused = inverse_free.factor_step(xlow, xe_, eta)
            close(lib.check(xnew, np.float64), new, RTOL)
            close(lib.check(xused, np.float64), used, RTOL)
    for max_iter, tol in ((200, 1e-10), (3, 0.0), (0, 1.0)):
        new, norm, n_steps = inverse_free.refine_inverse_factor(low, target, max_iter, tol)
        xnew, xnorm, x_steps = inverse_free.refine_inverse_factor(xlow, xtarget, max_iter, tol)
        assert x_steps == n_steps
        assert isinstance(xnorm, float) and np.isclose(xnorm, norm, rtol=1e-6, atol=1e-12)
        close(lib.check(xnew, np.float64), new, RTOL)
    sig, t = inverse_free.initial_factors(target, 2, 0.05)
    xsig, xt = inverse_free.initial_factors(xtarget, 2, 0.05)
    close(lib.check(xsig, np.float64), sig, RTOL)
    close(lib.check(xt, np.float64), t, RTOL)


def test_kl_divergence(lib, case, preconditioned):
    kernel, X, state, _, _ = _problem(*case, preconditioned, refine=True)
    xstate = _in(lib, state)
    kl = inverse_free.kl_divergence(kernel, state, JITTER)
    xkl = inverse_free.kl_divergence(kernel, xstate, JITTER)
    close(lib.check(xkl, np.float64), kl, RTOL)
    _, _, tape = inverse_free.marginals(kernel, X, state, JITTER, True)
    _, _, xtape = inverse_free.marginals(kernel, lib(X), xstate, JITTER, True)
    close(lib.check(inverse_free.kl_divergence(kernel, xstate, JITTER, xtape), np.float64),
          inverse_free.kl_divergence(kernel, state, JITTER, tape), RTOL)


@pytest.mark.parametrize("mixed_signs", [False, True], ids=["h_neg", "h_mixed"])
def test_backward(lib, case, preconditioned, mixed_signs):
    kernel, X, state, d_mean, d_var = _problem(*case, preconditioned)
    if mixed_signs:  # the GEMM branch of the weighted gram
        d_var = np.random.default_rng(5).standard_normal(d_var.shape)
    xstate = _in(lib, state)
    _, _, tape = inverse_free.marginals(kernel, X, state, JITTER, True)
    theta_bar, bars = inverse_free.backward(tape, state, d_mean, d_var, FIELDS)
    _, _, xtape = inverse_free.marginals(kernel, lib(X), xstate, JITTER, True)
    xtheta_bar, xbars = inverse_free.backward(xtape, xstate, lib(d_mean), lib(d_var), FIELDS)
    close(lib.check(xtheta_bar, np.float64), theta_bar, RTOL)
    assert set(xbars) == set(FIELDS)
    for name in FIELDS:
        close(lib.check(xbars[name], np.float64), bars[name], RTOL)
    # a second backward pass over the same tape (its caches) and fewer fields
    _, xbars = inverse_free.backward(xtape, xstate, lib(d_mean), lib(d_var), ("q_mean",))
    close(lib.check(xbars["q_mean"], np.float64), bars["q_mean"], RTOL)


@pytest.mark.parametrize("need_grad", [True, "natural"], ids=["grad", "natural"])
def test_natural_step(lib, case, preconditioned, need_grad):
    kernel, X, state, d_mean, d_var = _problem(*case, preconditioned)
    xstate = _in(lib, state)
    for step in (0.7, 0.05):
        _, _, tape = inverse_free.marginals(kernel, X, state, JITTER, need_grad)
        new = inverse_free.natural_step(tape, state, d_mean, d_var, step)
        _, _, xtape = inverse_free.marginals(kernel, lib(X), xstate, JITTER, need_grad)
        xnew = inverse_free.natural_step(xtape, xstate, lib(d_mean), lib(d_var), step)
        assert isinstance(xnew, inverse_free.InverseFreeState) and xnew.refine_t
        _check_state(lib, xnew, new, RTOL)
        # the next evaluation first runs the inner loop on T: same steps, same T
        n_steps = inverse_free.refine_t(kernel(new.inducing), new)
        assert inverse_free.refine_t(kernel(xnew.inducing), xnew) == n_steps > 0
        _check_state(lib, xnew, new, RTOL)
        state, xstate = new, xnew


def test_natural_step_raises_on_non_finite_values(lib):
    kernel, X, state, d_mean, d_var = _problem(1, 1)
    xstate = _in(lib, state)
    _, _, xtape = inverse_free.marginals(kernel, lib(X), xstate, JITTER, "natural")
    with pytest.raises(sk_linalg.CholeskyError):
        inverse_free.natural_step(xtape, xstate, lib(d_mean * np.nan), lib(d_var), 1.0)


def test_natural_step_notes_non_finite_values_within_deferred_checks(lib):
    """Within deferred checks the finiteness test reads nothing: a NaN raises the flag (the
    careful path's replay raises the error), finite values do not."""
    kernel, X, state, d_mean, d_var = _problem(1, 1)
    xstate = _in(lib, state)
    _, _, xtape = inverse_free.marginals(kernel, lib(X), xstate, JITTER, "natural")
    for scale, raised in ((1.0, False), (np.nan, True)):
        flags = sk_linalg.StatusFlags()
        with sk_linalg.deferred_checks(flags):
            inverse_free.natural_step(xtape, xstate, lib(d_mean * scale), lib(d_var), 1.0)
        assert bool(flags.take()) is raised


@pytest.mark.parametrize("full_cov", [False, True], ids=["var", "cov"])
def test_predictor(lib, case, preconditioned, full_cov):
    kernel, X, state, _, _ = _problem(*case, preconditioned, refine=True)
    xstate = _in(lib, state)
    before = state.copy()
    pred = inverse_free.make_predictor(kernel, state, JITTER)
    xpred = inverse_free.make_predictor(kernel, xstate, JITTER)
    for name in ("inducing_points", "mean_weights", "middle"):
        close(lib.check(getattr(xpred, name), np.float64), getattr(pred, name), RTOL)
    mean, var = pred.latent(kernel, X, full_cov=full_cov)
    xmean, xvar = xpred.latent(kernel, lib(X), full_cov=full_cov)
    close(lib.check(xmean, np.float64), mean, RTOL)
    close(lib.check(xvar, np.float64), var, RTOL)
    # the predictor refined a copy: the state is unchanged, and owns its arrays
    _check_state(lib, xstate, before, 0.0)
    assert xpred.mean_weights is not xstate.q_mean


def test_diagnostics(lib, case):
    kernel, _, state, _, _ = _problem(*case)
    diag = inverse_free.diagnostics(kernel, state, JITTER)
    xdiag = inverse_free.diagnostics(kernel, _in(lib, state), JITTER)
    assert set(xdiag) == set(diag)
    for name, value in diag.items():
        assert type(xdiag[name]) is float
        assert np.isclose(xdiag[name], value, rtol=RTOL, atol=0.0)


@pytest.mark.parametrize("n_cov", [1, 2])
def test_init_state_copy_and_first_use(lib, n_cov):
    rng = np.random.default_rng(1)
    points = rng.uniform(-2, 2, size=(8, 2))
    kernel = _kernel()
    state = inverse_free.init_state(points, 2, n_cov, sigma_init=0.05)
    xstate = inverse_free.init_state(lib(points), 2, n_cov, sigma_init=0.05)
    for name in ("inducing", "q_mean"):
        np.testing.assert_array_equal(lib.check(getattr(xstate, name), np.float64), getattr(state, name))
    assert xstate.sigma_sqrt is None and xstate.t_sqrt is None and xstate.settings == state.settings
    assert inverse_free.adam_field_scales(xstate, 0) == inverse_free.adam_field_scales(state, 0)
    inverse_free.ensure_initialised(kernel, state)
    inverse_free.ensure_initialised(kernel, xstate)
    _check_state(lib, xstate, state, RTOL)
    copy = xstate.copy()
    for name in ARRAYS:
        assert getattr(copy, name) is not getattr(xstate, name)
    copy.drop_caches()
    copy.q_mean = copy.q_mean + 1.0
    copy.sigma_sqrt[0, 0, 0] = 5.0
    assert float(xstate.q_mean[0, 0]) == 0.0 and float(xstate.sigma_sqrt[0, 0, 0]) != 5.0
    with pytest.raises(ValueError):
        inverse_free.init_state(lib(points), 1, 1, n_orthogonal=2)


def _model(state, kernel, n):
    return VariationalModel(inverse_free, kernel, GaussianLikelihood(0.3), state, n, learn_inducing=True)


def _train(model, X, Y, n_steps=4):
    adam = Adam(0.02)
    elbos = []
    for i in range(n_steps):
        result = model.evaluate(X, Y)
        elbos.append(result.elbo)
        model.state = model.natural_step(result, 1.0 if i == 0 else 0.5)
        model.set_adam_params(adam.step(model.adam_params(), result.grads, rate_scales=model.adam_rate_scales(i)))
    elbos.append(model.elbo(X, Y))
    return elbos


def test_training_steps_match_numpy(lib):
    """Natural steps, Adam on the hyperparameters and (at its own rate) Z, from the first use."""
    rng = np.random.default_rng(7)
    X = rng.uniform(-2, 2, size=(30, 2))
    Y = np.sin(X[:, :1]) + 0.1 * rng.standard_normal((30, 1))
    Z = rng.uniform(-2, 2, size=(6, 2))
    model = _model(inverse_free.init_state(Z, 1, 1, inducing_warmup_steps=1), _kernel(), 30)
    xmodel = _model(inverse_free.init_state(lib(Z), 1, 1, inducing_warmup_steps=1), _kernel(), 30)
    elbos = _train(model, X, Y)
    xelbos = _train(xmodel, lib(X), lib(Y))
    np.testing.assert_allclose(xelbos, elbos, rtol=1e-9)
    np.testing.assert_allclose(xmodel.kernel.theta, model.kernel.theta, rtol=1e-9)
    assert not np.array_equal(be.to_numpy(xmodel.state.inducing), Z)  # Z moved after its warm-up
    _check_state(lib, xmodel.state, model.state, 1e-9)
    mean, var = model.predictor().latent(model.kernel, X)
    xmean, xvar = xmodel.predictor().latent(xmodel.kernel, lib(X))
    close(lib.check(xmean, np.float64), mean, 1e-9)
    close(lib.check(xvar, np.float64), var, 1e-9)


def test_float32(lib, case):
    """float32 arrays stay float32 and agree with the float64 reference to RTOL_F32."""
    kernel, X, state, d_mean, d_var = _problem(*case)
    f32 = np.float32
    xstate = _in(lib, state, f32)
    xX, xdm, xdv = lib(X.astype(f32)), lib(d_mean.astype(f32)), lib(d_var.astype(f32))
    mean, var, tape = inverse_free.marginals(kernel, X, state, JITTER, True)
    xmean, xvar, xtape = inverse_free.marginals(kernel, xX, xstate, JITTER, True)
    close(lib.check(xmean, f32), mean, RTOL_F32)
    close(lib.check(xvar, f32), var, RTOL_F32)
    close(lib.check(inverse_free.kl_divergence(kernel, xstate, JITTER), f32),
          inverse_free.kl_divergence(kernel, state, JITTER), RTOL_F32)
    theta_bar, bars = inverse_free.backward(tape, state, d_mean, d_var, FIELDS)
    xtheta_bar, xbars = inverse_free.backward(xtape, xstate, xdm, xdv, FIELDS)
    close(be.to_numpy(xtheta_bar), theta_bar, RTOL_F32)
    for name in FIELDS:
        close(lib.check(xbars[name], f32), bars[name], RTOL_F32)
    new = inverse_free.natural_step(tape, state, d_mean, d_var, 0.7)
    xnew = inverse_free.natural_step(xtape, xstate, xdm, xdv, 0.7)
    _check_state(lib, xnew, new, RTOL_F32, f32)
    # the inner loop on T in float32, to a tolerance float32 can reach
    for s in (new, xnew):
        s.settings = inverse_free.InverseFreeSettings(t_tol=1e-5)
    pred = inverse_free.make_predictor(kernel, new, JITTER)
    xpred = inverse_free.make_predictor(kernel, xnew, JITTER)
    assert inverse_free.diagnostics(kernel, xnew, JITTER)["t_residual_factor"] > 1e-5  # the copy was refined
    for full_cov in (False, True):
        m, v = pred.latent(kernel, X, full_cov=full_cov)
        xm, xv = xpred.latent(kernel, xX, full_cov=full_cov)
        close(lib.check(xm, f32), m, RTOL_F32_REFINED)
        close(lib.check(xv, f32), v, RTOL_F32_REFINED)


def test_strict_path_never_converts_to_numpy(monkeypatch):
    """Instrumented: numpy's conversion functions record any call on a strict array."""
    lib = Lib("strict_device1")
    kernel, X, state, d_mean, d_var = _problem(2, 2, refine=True)
    xstate, xX, xdm, xdv = _in(lib, state), lib(X), lib(d_mean), lib(d_var)
    points = lib(np.random.default_rng(3).uniform(-2, 2, size=(8, 2)))
    calls = spy_on_numpy_conversions(monkeypatch)
    fresh = inverse_free.init_state(points, 2, 2)
    inverse_free.ensure_initialised(kernel, fresh)
    inverse_free.adam_field_scales(fresh, 3)
    for need_grad in (False, "natural", True):
        inverse_free.marginals(kernel, xX, xstate, JITTER, need_grad)
    _, _, tape = inverse_free.marginals(kernel, xX, xstate, JITTER, True)
    inverse_free.kl_divergence(kernel, xstate, JITTER, tape)
    inverse_free.backward(tape, xstate, xdm, xdv, FIELDS)
    new = inverse_free.natural_step(tape, xstate, xdm, xdv, 0.5)
    inverse_free.refine_t(kernel(new.inducing), new)
    inverse_free.kl_divergence(kernel, new, JITTER)
    pred = inverse_free.make_predictor(kernel, new, JITTER)
    pred.latent(kernel, xX), pred.latent(kernel, xX, full_cov=True)
    inverse_free.diagnostics(kernel, new, JITTER)
    new.copy().drop_caches()
    monkeypatch.undo()
    assert calls == []


def _forbid_decompositions(monkeypatch, lib):
    """Make every decomposition of the package, and of the library's linalg, raise."""

    def boom(*args, **kwargs):
        raise AssertionError("a decomposition was called")

    for name in ("cholesky", "jittered_cholesky", "solve_triangular", "cho_solve", "tri_inverse",
                 "inverse_cholesky_factor", "potrf"):
        monkeypatch.setattr(sk_linalg, name, boom)
    for name in ("tri_inverse", "inverse_cholesky_factor"):
        monkeypatch.setattr(sk_linalg_array_api, name, boom)
    for module in (coupled, inverse_free):
        for name in ("cholesky", "jittered_cholesky", "solve_triangular", "tri_inverse", "inverse_cholesky_factor"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, boom)
    for name in ("cholesky", "jittered_cholesky", "solve_triangular", "_factor", "_solve_2d"):
        monkeypatch.setattr(sk_linalg_array_api, name, boom)
    if lib.name == "torch":
        torch = lib.torch
        for name in ("cholesky", "cholesky_ex", "inv", "inv_ex", "solve", "solve_ex", "solve_triangular", "eigh",
                     "eigvalsh", "qr", "svd", "lstsq", "det", "slogdet", "pinv", "lu", "lu_factor"):
            monkeypatch.setattr(torch.linalg, name, boom)
    else:
        import array_api_strict

        for name in ("cholesky", "inv", "solve", "eigh", "eigvalsh", "qr", "svd", "det", "slogdet", "pinv"):
            monkeypatch.setattr(array_api_strict.linalg, name, boom)


def test_training_steps_and_prediction_use_no_decomposition(lib, monkeypatch):
    kernel, X, state, d_mean, d_var = _problem(2, 2)
    xstate, xX = _in(lib, state), lib(X)
    xstate.sigma_sqrt = xstate.t_sqrt = None  # the initialisation too
    _forbid_decompositions(monkeypatch, lib)
    inverse_free.ensure_initialised(kernel, xstate)
    for step in (1.0, 0.5):
        _, _, tape = inverse_free.marginals(kernel, xX, xstate, JITTER, True)
        inverse_free.kl_divergence(kernel, xstate, JITTER, tape)
        inverse_free.backward(tape, xstate, lib(d_mean), lib(d_var), FIELDS)
        xstate = inverse_free.natural_step(tape, xstate, lib(d_mean), lib(d_var), step)
    inverse_free.kl_divergence(kernel, xstate, JITTER)
    inverse_free.diagnostics(kernel, xstate, JITTER)
    pred = inverse_free.make_predictor(kernel, xstate, JITTER)
    mean, var = pred.latent(kernel, xX)
    assert bool(be.namespace(var).all(var >= 0.0))
    # the check catches a basis that factorises (the coupled basis, same library)
    cstate = coupled.init_state(lib(state.inducing), 2, 2)
    with pytest.raises(AssertionError, match="decomposition"):
        coupled.marginals(kernel, xX, cstate, JITTER, True)


def test_mixed_libraries_are_refused(lib):
    kernel, X, state, d_mean, d_var = _problem(1, 1)
    with pytest.raises(TypeError):
        inverse_free.marginals(kernel, X, _in(lib, state), JITTER, False)
    _, _, xtape = inverse_free.marginals(kernel, lib(X), _in(lib, state), JITTER, True)
    with pytest.raises(TypeError):
        inverse_free.backward(xtape, _in(lib, state), d_mean, d_var, FIELDS)
