"""The inverse-free basis against the coupled ELBO, finite differences and dense oracles."""

import pickle

import numpy as np
import pytest
import scipy.linalg

import skgp_sparse.linalg as sk_linalg
from skgp_sparse import SparseGPClassifier, SparseGPRegressor
from skgp_sparse.bases import coupled, inverse_free
from skgp_sparse.elbo import VariationalModel
from skgp_sparse.likelihoods import GaussianLikelihood, NoiseParameter

from ._gradcheck import assert_adam_gradients_match
from ._reference_kernel import ReferenceRBF


def random_factor(rng, m, scale):
    low = np.tril(0.2 * scale * rng.standard_normal((m, m)))
    low[np.diag_indices(m)] = scale * rng.uniform(0.5, 1.2, m)
    return low


def make_problem(n=40, m=7, d=2, p=1, seed=0, exact_t=False, natural=True, n_cov=1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, d))
    Y = np.sin(X @ np.arange(1, d + 1))[:, None] + 0.1 * rng.standard_normal((n, p))
    Z = rng.uniform(-2, 2, size=(m, d))
    kernel = ReferenceRBF(1.3, 0.8 + 0.3 * np.arange(d))
    state = inverse_free.init_state(Z, n_outputs=p, n_covariances=n_cov)
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


def equivalent_coupled_model(model):
    """The coupled (whitened, jitter-free) model of the same q(u) = N(K mu, K - K P^-1 K)."""
    k, state = model.kernel, model.state
    Z = state.inducing
    K = k(Z)
    P = K + state.sigma_sqrt[0] @ state.sigma_sqrt[0].T
    S = K - K @ np.linalg.solve(P, K)
    Lk = np.linalg.cholesky(K)
    whitened_mean = np.linalg.solve(Lk, K @ state.q_mean)
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
    mean = Kzx.T @ state.q_mean
    var = k.diag(X) + np.sum(Kzx * (W @ Kzx), 0)
    s2 = model.likelihood.noise_variance
    ell = -0.5 * np.log(2 * np.pi * s2) - 0.5 * ((Y - mean) ** 2 + var[:, None]) / s2
    p = Y.shape[1]
    cov = np.trace(W @ K) + np.trace(P @ T) - K.shape[0] - np.linalg.slogdet(T)[1] - np.linalg.slogdet(Sig)[1]
    kl = 0.5 * (p * cov + np.sum(state.q_mean * (K @ state.q_mean)))
    return ell.sum() - kl


# --- the bound ---------------------------------------------------------------------------
@pytest.mark.parametrize("p", [1, 2])
def test_bound_matches_dense_formulas(p):
    model, X, Y = make_problem(p=p)
    assert np.isclose(model.elbo(X, Y), dense_bound(model, X, Y), rtol=1e-10)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bound_equals_the_coupled_elbo_at_the_exact_t(seed):
    model, X, Y = make_problem(seed=seed, exact_t=True)
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
@pytest.mark.parametrize("p", [1, 3])
def test_gradients_match_finite_differences(p):
    model, X, Y = make_problem(p=p, seed=p)
    assert_adam_gradients_match(model, X, Y)


@pytest.mark.parametrize("p", [1, 2])
def test_adam_mode_gradients_in_q_and_t_match_finite_differences(p):
    model, X, Y = make_problem(p=p, seed=5 + p, natural=False, m=5, n=25)
    assert_adam_gradients_match(model, X, Y)


def test_adam_mode_gradients_with_one_covariance_per_output():
    model, X, Y = make_problem(p=2, seed=9, natural=False, m=5, n=25, n_cov=2)
    assert_adam_gradients_match(model, X, Y)


# --- product-only steps --------------------------------------------------------------
def test_factor_steps_converge_to_the_inverse_quadratically():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((30, 30))
    target = a @ a.T + 0.1 * np.eye(30)  # condition number ~ 1e3
    low = np.eye(30) / np.sqrt(np.abs(target).sum(axis=1).max())
    norms = []
    for _ in range(40):
        low, norm = inverse_free.refine_inverse_factor(low, target, 1, 0.0)
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


def test_natural_steps_on_a_full_batch_reach_the_collapsed_bound_and_t_follows():
    from .test_coupled import collapsed_bound

    model, X, Y = make_problem(n=60, m=8, seed=3)
    model.state.sigma_sqrt = model.state.t_sqrt = None
    model.state.q_mean[:] = 0.0
    target = collapsed_bound(model.kernel, model.state.inducing, X, Y[:, 0], model.likelihood.noise_variance, 0.0)
    for _ in range(40):
        model.state = model.natural_step(model.evaluate(X, Y), 1.0)
    assert abs(model.elbo(X, Y) - target) < 1e-4 * abs(target)
    assert model.diagnostics()["t_residual"] < 1e-2


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
    monkeypatch.setattr(sk_linalg, "_potrf", boom)
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
    for step in (1.0, 0.5):
        result = model.evaluate(X, Y)
        model.state = model.natural_step(result, step)
        model.set_adam_params(adam.step(model.adam_params(), result.grads))
    model.elbo(X, Y)
    model.diagnostics()
    return model.predictor().latent(model.kernel, X[:5])


def test_training_steps_and_prediction_use_no_decomposition(monkeypatch):
    model, X, Y = make_problem(n=30, m=6)
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
        state.inducing, state.q_mean.astype(np.float32), state.sigma_sqrt.astype(np.float32), state.t_sqrt.astype(np.float32)
    )
    es, ws = inverse_free.middle_matrices(kzz, s32)
    assert ws[0].dtype == np.float32
    mean = kzx.T @ s32.q_mean
    var = kdiag + np.sum(kzx * (ws[0] @ kzx), axis=0)
    s2 = np.float32(model.likelihood.noise_variance)
    ell = -0.5 * np.log(2 * np.pi * s2) - 0.5 * ((Y.astype(np.float32) - mean) ** 2 + var[:, None]) / s2
    cov = inverse_free._cov_part(kzz, ws[0], es[0], *inverse_free._lower_factors(s32)[0][:1], inverse_free._lower_factors(s32)[1][0])
    value32 = float(ell.sum()) - 0.5 * (cov + float(np.sum(s32.q_mean * (kzz @ s32.q_mean))))
    assert abs(value32 - value64) < 1e-4 * abs(value64)


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
    assert not hasattr(ref, "diagnostics_")
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
