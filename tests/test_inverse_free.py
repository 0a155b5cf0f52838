"""The inverse-free basis against the coupled ELBO, finite differences and dense oracles."""

import pickle

import numpy as np
import pytest
import scipy.linalg

import skgp_sparse.linalg as sk_linalg
from skgp_sparse import SparseGPClassifier, SparseGPRegressor
from skgp_sparse.bases import coupled, inverse_free, toolkit
from skgp_sparse.elbo import VariationalModel
from skgp_sparse.likelihoods import GaussianLikelihood, NoiseParameter

from ._gradcheck import assert_adam_gradients_match
from ._reference_kernel import ReferenceRBF


def random_factor(rng, m, scale):
    low = np.tril(0.2 * scale * rng.standard_normal((m, m)))
    low[np.diag_indices(m)] = scale * rng.uniform(0.5, 1.2, m)
    return low


def make_problem(n=40, m=7, d=2, p=1, seed=0, exact_t=False, natural=True, n_cov=1, **options):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, d))
    Y = np.sin(X @ np.arange(1, d + 1))[:, None] + 0.1 * rng.standard_normal((n, p))
    Z = rng.uniform(-2, 2, size=(m, d))
    kernel = ReferenceRBF(1.3, 0.8 + 0.3 * np.arange(d))
    state = inverse_free.init_state(Z, n_outputs=p, n_covariances=n_cov, **options)
    state.q_mean = rng.standard_normal((m, p))
    state.sigma_sqrt = np.stack([random_factor(rng, m, 0.7) for _ in range(n_cov)])
    if exact_t:
        state.t_sqrt = np.stack([exact_t_factor(kernel, Z, low) for low in state.sigma_sqrt])
    else:
        state.t_sqrt = np.stack([random_factor(rng, m, 0.5) for _ in range(n_cov)])
    noise = NoiseParameter(kernel, 0.2, (np.log(1e-6), np.log(1e3)))
    model = VariationalModel(
        inverse_free, kernel, GaussianLikelihood(0.2), state, n, noise=noise, learn_inducing=True, natural=natural
    )
    return model, X, Y


def exact_t_factor(kernel, Z, low_s):
    P = kernel(Z) + low_s @ low_s.T
    return np.linalg.cholesky(np.linalg.inv(P))


def dense_mean_weights(model):
    """mu of the latent mean K(x, Z) mu: (2 T - T P T) m~ when preconditioned, else q_mean."""
    state = model.state
    if not state.settings.preconditioned_mean:
        return state.q_mean
    mu = np.empty_like(state.q_mean)
    K = model.kernel(state.inducing)
    for c, (ls, lt) in enumerate(zip(state.sigma_sqrt, state.t_sqrt)):
        T, P = lt @ lt.T, K + ls @ ls.T
        cols = toolkit.output_columns(state.sigma_sqrt.shape[0], c)
        mu[:, cols] = (2 * T - T @ P @ T) @ state.q_mean[:, cols]
    return mu


def equivalent_coupled_model(model):
    """The coupled (whitened, jitter-free) model of the same q(u) = N(K mu, K - K P^-1 K)."""
    k, state = model.kernel, model.state
    Z = state.inducing
    K = k(Z)
    P = K + state.sigma_sqrt[0] @ state.sigma_sqrt[0].T
    S = K - K @ np.linalg.solve(P, K)
    Lk = np.linalg.cholesky(K)
    whitened_mean = np.linalg.solve(Lk, K @ dense_mean_weights(model))
    Sw = np.linalg.solve(Lk, np.linalg.solve(Lk, S).T)
    cstate = coupled.CoupledState(Z.copy(), whitened_mean, np.linalg.cholesky(0.5 * (Sw + Sw.T))[None])
    return VariationalModel(coupled, k, GaussianLikelihood(model.likelihood.noise_variance), cstate, model.n_data, jitter=0.0)


def dense_bound(model, X, Y):
    """Eqs. 19-21 with dense numpy formulas (T and Sigma from their factors)."""
    k, state = model.kernel, model.state
    Z = state.inducing
    K, Kzx = k(Z), k(Z, X)
    Sig = state.sigma_sqrt[0] @ state.sigma_sqrt[0].T
    T = state.t_sqrt[0] @ state.t_sqrt[0].T
    P = K + Sig
    W = T @ P @ T - 2 * T
    mu = dense_mean_weights(model)
    mean = Kzx.T @ mu
    var = k.diag(X) + np.sum(Kzx * (W @ Kzx), 0)
    s2 = model.likelihood.noise_variance
    ell = -0.5 * np.log(2 * np.pi * s2) - 0.5 * ((Y - mean) ** 2 + var[:, None]) / s2
    p = Y.shape[1]
    cov = np.trace(W @ K) + np.trace(P @ T) - K.shape[0] - np.linalg.slogdet(T)[1] - np.linalg.slogdet(Sig)[1]
    kl = 0.5 * (p * cov + np.sum(mu * (K @ mu)))
    return ell.sum() - kl


# --- the bound ---------------------------------------------------------------------------
@pytest.mark.parametrize("preconditioned", [True, False])
@pytest.mark.parametrize("p", [1, 2])
def test_bound_matches_dense_formulas(p, preconditioned):
    model, X, Y = make_problem(p=p, preconditioned_mean=preconditioned)
    assert np.isclose(model.elbo(X, Y), dense_bound(model, X, Y), rtol=1e-10)


@pytest.mark.parametrize("preconditioned", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bound_equals_the_coupled_elbo_at_the_exact_t(seed, preconditioned):
    model, X, Y = make_problem(seed=seed, exact_t=True, preconditioned_mean=preconditioned)
    reference = equivalent_coupled_model(model)
    assert np.isclose(model.elbo(X, Y), reference.elbo(X, Y), rtol=1e-9)
    mean, var, _ = inverse_free.marginals(model.kernel, X, model.state, 0.0, need_grad=False)
    ref_mean, ref_var, _ = coupled.marginals(reference.kernel, X, reference.state, 0.0, need_grad=False)
    np.testing.assert_allclose(mean, ref_mean, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(var, ref_var, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_bound_is_below_the_coupled_elbo_elsewhere(seed):
    model, X, Y = make_problem(seed=seed, exact_t=True)
    exact = model.elbo(X, Y)
    rng = np.random.default_rng(seed + 10)
    for _ in range(5):
        model.state.t_sqrt = model.state.t_sqrt * (1 + 0.3 * np.tril(rng.standard_normal(model.state.t_sqrt.shape)))
        assert model.elbo(X, Y) < exact


def test_gradient_in_t_vanishes_at_the_exact_t():
    model, X, Y = make_problem(exact_t=True, natural=False)
    grads = model.evaluate(X, Y).grads
    assert np.max(np.abs(grads["t_sqrt"])) < 1e-8 * np.max(np.abs(grads["sigma_sqrt"]) + 1)


# --- gradients --------------------------------------------------------------------------
@pytest.mark.parametrize("preconditioned", [True, False])
@pytest.mark.parametrize("p", [1, 3])
def test_gradients_match_finite_differences(p, preconditioned):
    model, X, Y = make_problem(p=p, seed=p, preconditioned_mean=preconditioned)
    assert_adam_gradients_match(model, X, Y)


@pytest.mark.parametrize("preconditioned", [True, False])
@pytest.mark.parametrize("p", [1, 2])
def test_adam_mode_gradients_in_q_and_t_match_finite_differences(p, preconditioned):
    # Preconditioned: q_mean is m~ and the mean (2 T - T P T) m~ also depends on L_s and L_t.
    model, X, Y = make_problem(p=p, seed=5 + p, natural=False, m=5, n=25, preconditioned_mean=preconditioned)
    assert_adam_gradients_match(model, X, Y)


@pytest.mark.parametrize("preconditioned", [True, False])
def test_adam_mode_gradients_with_one_covariance_per_output(preconditioned):
    model, X, Y = make_problem(p=2, seed=9, natural=False, m=5, n=25, n_cov=2, preconditioned_mean=preconditioned)
    assert_adam_gradients_match(model, X, Y)


# --- product-only steps --------------------------------------------------------------
def test_factor_steps_converge_to_the_inverse_quadratically():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((30, 30))
    target = a @ a.T + 0.1 * np.eye(30)  # condition number ~ 1e3
    low = np.eye(30) / np.sqrt(np.abs(target).sum(axis=1).max())
    norms = []
    for _ in range(40):
        low, norm, _ = inverse_free.refine_inverse_factor(low, target, 1, 0.0)
        norms.append(norm)
        assert np.all(np.diag(low) > 0) and np.allclose(low, np.tril(low))
    np.testing.assert_allclose(low @ low.T @ target, np.eye(30), atol=1e-8)
    # quadratic at the end: each residual about the square of the previous one
    tail = [n for n in norms if 1e-12 < n < 1e-1]
    assert any(b < 10 * a * a for a, b in zip(tail, tail[1:]))


def test_factor_step_is_capped_so_the_diagonal_stays_positive():
    target = np.diag([1e6, 1.0, 1.0])
    low = np.eye(3)  # L^T A L - I has an eigenvalue of ~1e6
    e = inverse_free.residual(low, target)
    new, eta = inverse_free.factor_step(low, e, 1.0)
    assert eta <= 1.0 / (1e6 - 1) + 1e-15
    assert np.all(np.diag(new) > 0)


@pytest.mark.parametrize("preconditioned", [True, False])
def test_natural_steps_on_a_full_batch_reach_the_collapsed_bound_and_t_follows(preconditioned):
    from .test_coupled import collapsed_bound

    model, X, Y = make_problem(n=60, m=8, seed=3, preconditioned_mean=preconditioned)
    model.state.sigma_sqrt = model.state.t_sqrt = None
    model.state.q_mean[:] = 0.0
    target = collapsed_bound(model.kernel, model.state.inducing, X, Y[:, 0], model.likelihood.noise_variance, 0.0)
    for _ in range(40):
        model.state = model.natural_step(model.evaluate(X, Y), 1.0)
    assert abs(model.elbo(X, Y) - target) < 1e-4 * abs(target)
    # the evaluation has just brought T within the tolerance of the inner loop
    assert model.diagnostics()["t_residual_factor"] < model.state.settings.t_tol


def test_natural_step_raises_on_non_finite_values_so_the_schedule_backs_off():
    model, X, Y = make_problem()
    result = model.evaluate(X, Y)
    result.d_mean = result.d_mean * np.nan
    with pytest.raises(sk_linalg.CholeskyError):
        model.natural_step(result, 1.0)


def _forbid_decompositions(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("a decomposition was called")

    for name in ("cholesky", "jittered_cholesky", "solve_triangular", "cho_solve", "tri_inverse", "inverse_cholesky_factor"):
        monkeypatch.setattr(sk_linalg, name, boom)
        for module in (coupled, inverse_free):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, boom)
    monkeypatch.setattr(sk_linalg, "potrf", boom)
    for name in ("cholesky", "inv", "solve", "eigh", "eigvalsh", "qr", "svd", "lstsq", "det", "slogdet", "pinv"):
        monkeypatch.setattr(np.linalg, name, boom)
    for name in ("cholesky", "inv", "solve", "solve_triangular", "cho_factor", "cho_solve", "lu", "lu_factor", "eigh", "qr", "svd"):
        monkeypatch.setattr(scipy.linalg, name, boom)
    for name in ("dpotrf", "spotrf", "dtrtrs", "dtrtri", "strtri", "dgesv", "dsyev", "dgetrf"):
        monkeypatch.setattr(scipy.linalg.lapack, name, boom)
    for name in ("dtrsm", "strsm"):
        monkeypatch.setattr(scipy.linalg.blas, name, boom)


def _train_steps(model, X, Y):
    from skgp_sparse.optim import Adam

    adam = Adam(0.01)
    for i, step in enumerate((1.0, 0.5, 0.5)):
        result = model.evaluate(X, Y)
        model.state = model.natural_step(result, step)
        scales = model.basis.adam_field_scales(model.state, i) if hasattr(model.basis, "adam_field_scales") else None
        model.set_adam_params(adam.step(model.adam_params(), result.grads, rate_scales=scales))
    model.elbo(X, Y)
    model.diagnostics()
    return model.predictor().latent(model.kernel, X[:5])


def test_training_steps_and_prediction_use_no_decomposition(monkeypatch):
    model, X, Y = make_problem(n=30, m=6, inducing_warmup_steps=1, inducing_rate_scale=0.5)
    model.state.sigma_sqrt = model.state.t_sqrt = None  # initialisation too
    adam_model, _, _ = make_problem(n=30, m=6, natural=False)
    _forbid_decompositions(monkeypatch)
    mean, var = _train_steps(model, X, Y)
    assert np.all(np.isfinite(mean)) and np.all(var >= 0)
    _train_steps(adam_model, X, Y)


def test_the_no_decomposition_check_catches_the_coupled_basis(monkeypatch):
    from .test_coupled import make_problem as coupled_problem

    model, X, Y = coupled_problem(n=30, m=6)
    _forbid_decompositions(monkeypatch)
    with pytest.raises(AssertionError, match="decomposition"):
        _train_steps(model, X, Y)


def test_bound_in_float32_is_close_to_float64():
    model, X, Y = make_problem(n=50, m=8, seed=4, exact_t=True)
    value64 = model.elbo(X, Y)
    k, state = model.kernel, model.state
    kzz, kzx, kdiag = (a.astype(np.float32) for a in (k(state.inducing), k(state.inducing, X), k.diag(X)))
    s32 = inverse_free.InverseFreeState(
        state.inducing, state.q_mean.astype(np.float32), state.sigma_sqrt.astype(np.float32), state.t_sqrt.astype(np.float32),
        settings=state.settings,
    )
    es, ws = inverse_free.middle_matrices(kzz, s32)
    mu = inverse_free.mean_weights(s32, ws)
    assert ws[0].dtype == np.float32 and mu.dtype == np.float32
    mean = kzx.T @ mu
    var = kdiag + np.sum(kzx * (ws[0] @ kzx), axis=0)
    s2 = np.float32(model.likelihood.noise_variance)
    ell = -0.5 * np.log(2 * np.pi * s2) - 0.5 * ((Y.astype(np.float32) - mean) ** 2 + var[:, None]) / s2
    cov = inverse_free._cov_part(kzz, ws[0], es[0], *inverse_free._lower_factors(s32)[0][:1], inverse_free._lower_factors(s32)[1][0])
    value32 = float(ell.sum()) - 0.5 * (cov + float(np.sum(mu * (kzz @ mu))))
    assert abs(value32 - value64) < 1e-4 * abs(value64)


# --- the preconditioned mean --------------------------------------------------------
def dense_newton_schulz(model, c=0):
    """N = 2 T - T P T for covariance c (the map from m~ to mu)."""
    state = model.state
    T = state.t_sqrt[c] @ state.t_sqrt[c].T
    P = model.kernel(state.inducing) + state.sigma_sqrt[c] @ state.sigma_sqrt[c].T
    return 2 * T - T @ P @ T


def same_function_models(seed, exact_t=False, natural=True, p=1):
    """A plain and a preconditioned model of the same q(u): m~ = (2 T - T P T)^-1 mu."""
    plain, X, Y = make_problem(seed=seed, exact_t=exact_t, natural=natural, p=p, preconditioned_mean=False)
    pre, _, _ = make_problem(seed=seed, exact_t=exact_t, natural=natural, p=p)
    np.testing.assert_array_equal(pre.state.t_sqrt, plain.state.t_sqrt)  # same draws
    pre.state.q_mean = np.linalg.solve(dense_newton_schulz(pre), plain.state.q_mean)
    return plain, pre, X, Y


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("seed", [0, 1])
def test_preconditioned_and_plain_mean_give_the_same_bound_at_the_same_function(seed, p):
    plain, pre, X, Y = same_function_models(seed, natural=False, p=p)
    assert np.isclose(pre.elbo(X, Y), plain.elbo(X, Y), rtol=1e-10)
    for a, b in zip(pre.basis.marginals(pre.kernel, X, pre.state, 0.0, False)[:2],
                    plain.basis.marginals(plain.kernel, X, plain.state, 0.0, False)[:2]):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    # chain rule: dF/dm~ = (2 T - T P T) dF/dmu
    g_pre, g_plain = pre.evaluate(X, Y).grads["q_mean"], plain.evaluate(X, Y).grads["q_mean"]
    np.testing.assert_allclose(g_pre, dense_newton_schulz(pre) @ g_plain, rtol=1e-8, atol=1e-10)


def test_preconditioned_and_plain_mean_predict_the_same_at_the_exact_t():
    plain, pre, X, Y = same_function_models(2, exact_t=True)
    Xt = X[:7] + 0.3
    for a, b in zip(pre.predictor().latent(pre.kernel, Xt), plain.predictor().latent(plain.kernel, Xt)):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)
    # and at T = P^-1 the preconditioned mean is P^-1 m~
    P = pre.kernel(pre.state.inducing) + pre.state.sigma_sqrt[0] @ pre.state.sigma_sqrt[0].T
    np.testing.assert_allclose(pre.predictor().mean_weights, np.linalg.solve(P, pre.state.q_mean), rtol=1e-7)


def test_a_natural_step_of_size_zero_keeps_the_function():
    # The step re-expresses the new mean as pseudo-targets under the new Sigma and refines T:
    # with nothing moved the latent mean must be where it was, though T was random before.
    model, X, Y = make_problem(seed=4, t_tol=1e-12, t_max_iter=100)
    before = model.basis.marginals(model.kernel, X, model.state, 0.0, False)[0]
    model.state = model.natural_step(model.evaluate(X, Y), 0.0)
    after = model.basis.marginals(model.kernel, X, model.state, 0.0, False)[0]
    np.testing.assert_allclose(after, before, rtol=1e-7, atol=1e-9)


def test_the_mean_is_carried_by_its_pseudo_targets_when_the_kernel_moves():
    # Doubling the kernel's variance doubles K(x, Z) mu at a fixed mu; at fixed m~ (and
    # Sigma small against K) the mean K(x, Z) P^-1 m~ hardly moves.
    model, X, Y = make_problem(seed=1, exact_t=True, t_tol=1e-12, t_max_iter=100)
    state = model.state
    state.sigma_sqrt = 0.01 * state.sigma_sqrt
    state.t_sqrt = np.stack([exact_t_factor(model.kernel, state.inducing, state.sigma_sqrt[0])])
    plain = state.copy()
    plain.settings = inverse_free.InverseFreeSettings(preconditioned_mean=False, t_tol=1e-12, t_max_iter=100)
    plain.q_mean = inverse_free.mean_weights(state, inverse_free.middle_matrices(model.kernel(state.inducing), state)[1])
    state.refine_t = plain.refine_t = True  # as after a natural step: predictions refine T first
    before = model.predictor().latent(model.kernel, X)[0]
    model.kernel.set_theta(model.kernel.theta + np.r_[np.log(2.0), np.zeros(model.kernel.theta.size - 1)])
    moved_pre = inverse_free.make_predictor(model.kernel, state, 0.0).latent(model.kernel, X)[0]
    moved_plain = inverse_free.make_predictor(model.kernel, plain, 0.0).latent(model.kernel, X)[0]
    np.testing.assert_allclose(moved_plain, 2 * before, rtol=1e-8)
    assert np.max(np.abs(moved_pre - before)) < 0.05 * np.max(np.abs(before))


# --- the inner loop on T -------------------------------------------------------------
def spd_target(m=20, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, m))
    return a @ a.T + 0.05 * np.eye(m)


def test_inner_t_loop_stops_at_the_first_residual_below_the_tolerance():
    target = spd_target()
    start = np.eye(20) / np.sqrt(np.abs(target).sum(axis=1).max())
    low, norm, n = inverse_free.refine_inverse_factor(start, target, 100, 1e-8)
    assert norm < 1e-8 and 0 < n < 100
    assert np.isclose(norm, np.linalg.norm(low.T @ target @ low - np.eye(20)))
    # one step fewer had not met it
    _, norm_before, n_before = inverse_free.refine_inverse_factor(start, target, n - 1, 1e-8)
    assert n_before == n - 1 and norm_before >= 1e-8
    # a factor that already meets the tolerance is returned as it is
    same, _, n_again = inverse_free.refine_inverse_factor(low, target, 100, 1e-6)
    assert n_again == 0 and same is low


def test_inner_t_loop_stops_at_the_step_limit():
    target = spd_target(seed=1)
    start = np.eye(20) / np.sqrt(np.abs(target).sum(axis=1).max())
    _, norm, n = inverse_free.refine_inverse_factor(start, target, 3, 0.0)
    assert n == 3 and norm > 1e-3


@pytest.mark.parametrize("n_cov", [1, 2])
def test_every_evaluation_after_a_natural_step_first_brings_t_within_the_tolerance(n_cov):
    model, X, Y = make_problem(p=2, n_cov=n_cov, seed=6, t_tol=1e-9, t_max_iter=60)
    K = model.kernel(model.state.inducing)

    def worst_residual(state):
        return max(np.linalg.norm(lt.T @ (K + ls @ ls.T) @ lt - np.eye(len(K))) for ls, lt in zip(state.sigma_sqrt, state.t_sqrt))

    assert worst_residual(model.state) > 1.0  # a random T
    model.state = model.natural_step(model.evaluate(X, Y), 0.5)
    assert model.state.refine_t
    # the next evaluation (training or not) first refines T to the current K + Sigma
    for need_grad in (True, False):
        model.kernel.set_theta(model.kernel.theta + 0.05)
        K = model.kernel(model.state.inducing)
        assert worst_residual(model.state) > 1e-3
        model.evaluate(X, Y, need_grad=need_grad)
        assert worst_residual(model.state) < 1e-9


def test_the_t_settings_are_read_from_the_state():
    loose, X, Y = make_problem(seed=2, t_max_iter=0)
    tight, _, _ = make_problem(seed=2, t_max_iter=60, t_tol=1e-10)
    before = loose.state.t_sqrt.copy()
    for model in (loose, tight):
        model.state.refine_t = True
        model.evaluate(X, Y)
    np.testing.assert_array_equal(loose.state.t_sqrt, before)
    assert not np.allclose(tight.state.t_sqrt, before)


# --- settings on the state -------------------------------------------------------------
def test_settings_are_stored_on_the_state_and_validated():
    Z = np.zeros((3, 1)) + np.arange(3)[:, None]
    state = inverse_free.init_state(Z, 1, 1, t_max_iter=7, t_tol=1e-5, sigma_init=0.1, inducing_warmup_steps=4,
                                    inducing_rate_scale=0.2, preconditioned_mean=False)
    assert state.settings == inverse_free.InverseFreeSettings(False, 7, 1e-5, 0.1, 4, 0.2)
    assert state.copy().settings == state.settings
    assert pickle.loads(pickle.dumps(state)).settings == state.settings
    assert inverse_free.init_state(Z, 1, 1).settings == inverse_free.InverseFreeSettings()
    with pytest.raises(TypeError):
        inverse_free.init_state(Z, 1, 1, t_iterations=3)
    for bad in (dict(t_max_iter=-1), dict(t_tol=-1.0), dict(sigma_init=0.0), dict(inducing_rate_scale=-0.1),
                dict(inducing_warmup_steps=-1)):
        with pytest.raises(ValueError):
            inverse_free.init_state(Z, 1, 1, **bad)


def test_a_state_pickled_before_the_settings_existed_keeps_its_plain_mean():
    model, X, Y = make_problem(preconditioned_mean=False, t_max_iter=4, inducing_rate_scale=1.0)
    old = model.state
    del old.__dict__["settings"]  # what an earlier version pickled
    loaded = pickle.loads(pickle.dumps(old))
    assert loaded.settings == inverse_free.LEGACY_SETTINGS and not loaded.settings.preconditioned_mean
    np.testing.assert_array_equal(loaded.q_mean, old.q_mean)


def test_sigma_init_sets_the_initial_sigma():
    model, X, Y = make_problem(sigma_init=0.3)
    model.state.sigma_sqrt = model.state.t_sqrt = None
    model.evaluate(X, Y)
    scale = 0.3 * np.mean(np.diag(model.kernel(model.state.inducing)))
    np.testing.assert_allclose(model.state.sigma_sqrt[0], np.sqrt(scale) * np.eye(7))


def test_inducing_inputs_wait_then_move_at_their_own_rate():
    state = inverse_free.init_state(np.zeros((2, 1)), 1, 1, inducing_warmup_steps=3, inducing_rate_scale=0.1)
    assert [inverse_free.adam_field_scales(state, s) for s in range(5)] == [{"inducing": 0.0}] * 3 + [{"inducing": 0.1}] * 2


def test_adam_rate_scales_hold_a_parameter_and_then_start_it_fresh():
    from skgp_sparse.optim import Adam

    grads = {"a": np.array([2.0, -1.0]), "b": np.array([3.0, -0.5])}
    plain, scaled = Adam(0.1), Adam(0.1)
    params = {"a": np.zeros(2), "b": np.zeros(2)}
    ref = plain.step(params, grads)
    held = scaled.step(params, grads, rate_scales={"b": 0.0})
    np.testing.assert_array_equal(held["a"], ref["a"])
    np.testing.assert_array_equal(held["b"], params["b"])
    # the first step b takes is a first Adam step (size lr * scale), whatever the global count
    moved = scaled.step(held, grads, rate_scales={"b": 0.5})
    np.testing.assert_allclose(moved["b"], 0.05 * np.sign(grads["b"]), rtol=1e-6)
    # without rate_scales the steps are the plain ones
    np.testing.assert_array_equal(Adam(0.1).step(params, grads)["b"], ref["b"])


# --- estimators ----------------------------------------------------------------------
def toy(n=300, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 1))
    return X, np.sin(2 * X[:, 0]) + 0.1 * rng.standard_normal(n)


def test_regressor_fits_close_to_the_coupled_basis_and_pickles():
    X, y = toy()
    kw = dict(n_inducing=20, max_iter=60, batch_size=100, random_state=0)
    ours = SparseGPRegressor(basis="inverse_free", **kw).fit(X, y)
    ref = SparseGPRegressor(basis="coupled", **kw).fit(X, y)
    Xt, yt = toy(200, seed=1)
    rmse = np.sqrt(np.mean((ours.predict(Xt) - yt) ** 2))
    rmse_ref = np.sqrt(np.mean((ref.predict(Xt) - yt) ** 2))
    assert rmse < 1.1 * rmse_ref + 0.01
    # T lags one Adam step behind K, so its residual is small but not zero
    assert len(ours.diagnostics_) == ours.n_iter_ and ours.diagnostics_[-1]["t_residual_factor"] < 1.0
    assert ref.diagnostics_ == []  # documented on every basis, empty where the basis offers none
    clone = pickle.loads(pickle.dumps(ours))
    np.testing.assert_array_equal(clone.predict(Xt, return_std=True)[1], ours.predict(Xt, return_std=True)[1])
    # a lower bound on the exact log marginal likelihood at the fitted hyperparameters
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import WhiteKernel

    exact = GaussianProcessRegressor(ours.kernel_ + WhiteKernel(ours.noise_variance_, "fixed"), optimizer=None,
                                     normalize_y=True).fit(X, y)
    assert ours.elbo(X, y) < exact.log_marginal_likelihood_value_


@pytest.mark.parametrize("n_classes", [2, 3])
def test_classifier_binary_and_multiclass(n_classes):
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, size=(300, 2))
    y = (np.floor(X[:, 0] + 3) * n_classes // 6).astype(int)
    clf = SparseGPClassifier(basis="inverse_free", n_inducing=15, max_iter=30, batch_size=100, random_state=0)
    clf.fit(X, y)
    assert clf.score(X, y) > 0.9
    assert np.allclose(clf.predict_proba(X[:5]).sum(axis=1), 1.0)
    clone = pickle.loads(pickle.dumps(clf))
    np.testing.assert_array_equal(clone.predict_proba(X[:5]), clf.predict_proba(X[:5]))


def test_orthogonal_points_are_refused():
    with pytest.raises(ValueError, match="n_orthogonal"):
        inverse_free.init_state(np.zeros((3, 1)), 1, 1, n_orthogonal=2)
    with pytest.raises(ValueError, match="n_orthogonal"):
        SparseGPRegressor(basis="inverse_free", n_orthogonal=2).fit(*toy(30))


def test_training_loop_moves_the_inducing_inputs_at_the_basis_rate(monkeypatch):
    """The loop hands the basis's adam_field_scales to every Adam step it takes."""
    from skgp_sparse import SparseGPRegressor
    from skgp_sparse.optim import Adam

    seen = []
    plain = Adam.step

    def recording_step(self, params, grads, bounds=None, rate_scales=None):
        seen.append(rate_scales)
        return plain(self, params, grads, bounds, rate_scales=rate_scales)

    monkeypatch.setattr(Adam, "step", recording_step)
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, size=(300, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(300)
    SparseGPRegressor(basis="inverse_free", n_inducing=10, batch_size=100, max_iter=2, random_state=0).fit(X, y)
    assert seen and all(scales == {"inducing": 0.1} for scales in seen)
    seen.clear()
    SparseGPRegressor(n_inducing=10, batch_size=100, max_iter=2, random_state=0).fit(X, y)
    assert seen and all(scales is None for scales in seen)


def test_float32_refinement_stops_at_its_rounding_floor():
    # An ill-conditioned float32 target: ||L^T A L - I||_F cannot fall to tol = 0, and
    # the loop ends at the first step that does not lower it, with the better factor.
    from sklearn.gaussian_process.kernels import RBF

    Z = np.random.default_rng(0).normal(size=(256, 3))
    target = RBF(3.0)(Z) + 1e-2 * np.eye(256)
    bound = float(np.max(np.abs(target).sum(axis=1)))
    start = np.eye(256) / np.sqrt(bound)
    low32, norm32, steps32 = inverse_free.refine_inverse_factor(
        start.astype(np.float32), target.astype(np.float32), 200, 0.0)
    assert low32.dtype == np.float32 and steps32 < 200
    # The norm it stopped at is the lowest of the path: one more step does not go lower.
    _, norm_next, _ = inverse_free.refine_inverse_factor(low32, target.astype(np.float32), 1, 0.0)
    assert norm32 <= norm_next
    # float64 keeps its rule: every step allowed is taken.
    _, _, steps64 = inverse_free.refine_inverse_factor(start, target, 30, 0.0)
    assert steps64 == 30
