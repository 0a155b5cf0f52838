"""The orthogonally decoupled basis against the coupled model, dense oracles and finite differences."""

import pickle

import numpy as np
import pytest

from skgp_sparse import SparseGPClassifier, SparseGPRegressor
from skgp_sparse.bases import coupled, orth_decoupled
from skgp_sparse.elbo import VariationalModel
from skgp_sparse.likelihoods import GaussianLikelihood, NoiseParameter

from ._gradcheck import assert_adam_gradients_match
from ._reference_kernel import ReferenceRBF
from skgp_sparse.kernels import PointCovariances

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


def random_state(Z, n_beta, p, n_cov, rng, **options):
    state = orth_decoupled.init_state(Z, n_outputs=p, n_covariances=n_cov, n_orthogonal=Z.shape[0] - n_beta,
                                      **options)
    state.q_mean = rng.standard_normal((n_beta, p))
    low = np.tril(0.3 * rng.standard_normal((n_cov, n_beta, n_beta)))
    for c in range(n_cov):
        low[c][np.diag_indices(n_beta)] = rng.uniform(0.5, 1.2, n_beta)
    state.q_sqrt = low
    state.orth_mean = rng.standard_normal(state.orth_mean.shape)
    return state


def make_problem(n=30, mb=5, mg=6, d=2, p=1, seed=0, random_q=True, noise=0.2, natural=True, column_seed=None,
                 **options):
    """A small Gaussian problem; ``options`` (and ``column_seed`` as ``seed``) go to init_state."""
    rng = np.random.default_rng(seed)
    options = dict(options, seed=column_seed)
    X = rng.uniform(-2, 2, size=(n, d))
    Y = np.sin(X @ np.arange(1, d + 1))[:, None] + 0.1 * rng.standard_normal((n, p))
    Z = rng.uniform(-2, 2, size=(mb + mg, d))
    kernel = ReferenceRBF(1.3, 0.8 + 0.3 * np.arange(d))
    if random_q:
        state = random_state(Z, mb, p, 1, rng, **options)
    else:
        state = orth_decoupled.init_state(Z, n_outputs=p, n_covariances=1, n_orthogonal=mg, **options)
    noise_p = NoiseParameter(kernel, noise, (np.log(1e-6), np.log(1e3)))
    model = VariationalModel(orth_decoupled, kernel, GaussianLikelihood(noise), state, n, noise=noise_p,
                             learn_inducing=True, natural=natural)
    return model, X, Y


# --- n_orthogonal = 0 is the coupled model -------------------------------------------
def test_zero_orthogonal_regressor_is_exactly_coupled():
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, size=(300, 2))
    y = np.sin(X[:, 0]) + 0.5 * np.cos(2 * X[:, 1]) + 0.1 * rng.standard_normal(300)
    common = dict(n_inducing=12, batch_size=64, max_iter=4, random_state=3)
    ref = SparseGPRegressor(basis="coupled", **common).fit(X, y)
    orth = SparseGPRegressor(basis="orth_decoupled", n_orthogonal=0, **common).fit(X, y)
    assert orth.elbo(X, y) == ref.elbo(X, y)
    for a, b in zip(orth.predict(X, return_std=True), ref.predict(X, return_std=True)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(orth.inducing_points_, ref.inducing_points_)
    assert orth.loss_curve_ == ref.loss_curve_
    assert orth.orthogonal_points_.shape == (0, 2)


def test_zero_orthogonal_multiclass_classifier_is_exactly_coupled():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((240, 2))
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0.5)
    common = dict(n_inducing=10, batch_size=64, max_iter=3, random_state=0)
    ref = SparseGPClassifier(basis="coupled", **common).fit(X, y)
    orth = SparseGPClassifier(basis="orth_decoupled", n_orthogonal=0, **common).fit(X, y)
    np.testing.assert_array_equal(orth.predict_proba(X), ref.predict_proba(X))
    assert orth.loss_curve_ == ref.loss_curve_


# --- the basis itself -----------------------------------------------------------------
def test_gamma_part_of_the_mean_vanishes_at_the_beta_points():
    model, X, _ = make_problem(mb=4, mg=7, d=1, seed=2)
    state = model.state
    state.inducing = np.array([[-1.5], [-0.5], [0.5], [1.5]])
    state.q_mean = np.zeros_like(state.q_mean)  # a_b = 0: only the gamma part is left
    mean_at_beta, _, _ = orth_decoupled.marginals(model.kernel, state.inducing, state, jitter=0.0)
    mean_elsewhere, _, _ = orth_decoupled.marginals(model.kernel, X, state, jitter=0.0)
    scale = np.max(np.abs(mean_elsewhere))
    assert scale > 0.1  # not trivially zero
    np.testing.assert_allclose(mean_at_beta, 0.0, atol=1e-10 * scale)
    # With the default relative jitter it vanishes up to the jitter.
    mean_jit, _, _ = orth_decoupled.marginals(model.kernel, state.inducing, state, jitter=1e-6)
    np.testing.assert_allclose(mean_jit, 0.0, atol=1e-4 * scale)


class FeatureKernel(PointCovariances):
    """k(x, y) = phi(x)^T phi(y) with random Fourier features: a kernel whose feature space is explicit."""

    white_noise_level = 0.0
    white_noise_theta_index = []

    def __init__(self, d, n_features=400, seed=0):
        rng = np.random.default_rng(seed)
        self.W = rng.standard_normal((n_features, d)) / 0.8
        self.b = rng.uniform(0, 2 * np.pi, n_features)
        self.theta = np.zeros(1)

    def phi(self, A):
        return np.sqrt(2.0 / self.b.size) * np.cos(A @ self.W.T + self.b)

    def __call__(self, A, B=None):
        return self.phi(A) @ self.phi(A if B is None else B).T

    def diag(self, A):
        return np.sum(self.phi(A) ** 2, axis=1)

    def vjp(self, A, B=None):
        return self(A, B), None

    def diag_vjp(self, A):
        return self.diag(A), None


def test_marginals_and_kl_equal_the_feature_space_computation():
    """mu = (I - P_b) Psi_g a_g + Psi_b a_b, Sigma = (I - P_b) + Psi_b K^-1 S K^-1 Psi_b^T in R^400."""
    rng = np.random.default_rng(4)
    d, mb, mg, p = 2, 5, 6, 2
    kernel = FeatureKernel(d)
    Z = rng.uniform(-2, 2, size=(mb + mg, d))
    X = rng.uniform(-2, 2, size=(9, d))
    state = random_state(Z, mb, p, 1, rng)
    mean, var, _ = orth_decoupled.marginals(kernel, X, state, jitter=0.0, need_grad=False)
    kl = orth_decoupled.kl_divergence(kernel, state, jitter=0.0)

    psi_b, psi_g, phi_x = kernel.phi(state.inducing).T, kernel.phi(state.orthogonal).T, kernel.phi(X).T
    K = psi_b.T @ psi_b
    Lk = np.linalg.cholesky(K)
    proj = psi_b @ np.linalg.solve(K, psi_b.T)
    eye = np.eye(proj.shape[0])
    S = Lk @ state.q_sqrt[0] @ state.q_sqrt[0].T @ Lk.T
    Kinv_psi_b_t = np.linalg.solve(K, psi_b.T)
    Sigma = eye - proj + Kinv_psi_b_t.T @ S @ Kinv_psi_b_t
    a_b = np.linalg.solve(Lk.T, state.q_mean)  # whitened m = L_k^T a_b
    mu = (eye - proj) @ psi_g @ state.orth_mean + psi_b @ a_b
    np.testing.assert_allclose(mean, phi_x.T @ mu, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(var[:, 0], np.einsum("ij,ij->j", phi_x, Sigma @ phi_x), rtol=1e-8, atol=1e-9)
    logdet = np.linalg.slogdet(Sigma)[1]
    dense_kl = sum(0.5 * (np.trace(Sigma) - eye.shape[0] + mu[:, j] @ mu[:, j] - logdet) for j in range(p))
    assert kl == pytest.approx(dense_kl, rel=1e-8)


def test_kl_is_zero_at_the_prior_and_positive_elsewhere():
    model, _, _ = make_problem(random_q=False)
    assert orth_decoupled.kl_divergence(model.kernel, model.state, model.jitter) == pytest.approx(0.0, abs=1e-12)
    for seed in range(5):
        model, _, _ = make_problem(seed=seed, p=2)
        model.state.q_mean[:] = 0.0
        model.state.q_sqrt[:] = np.eye(model.state.q_sqrt.shape[1])
        # only the gamma term is left: a_g^T (K_gg - K_gb K^-1 K_bg) a_g / 2 > 0
        assert orth_decoupled.kl_divergence(model.kernel, model.state, model.jitter) > 0


# --- gradients ------------------------------------------------------------------------
@pytest.mark.parametrize("p", [1, 2])
def test_gradients_match_finite_differences(p):
    model, X, Y = make_problem(p=p, seed=p)
    assert {"theta", "log_noise", "inducing", "orthogonal", "orth_mean"} == set(model.adam_params())
    assert_adam_gradients_match(model, X, Y)


def test_gradients_with_beta_in_the_whitened_form():
    """Fewer rows than twice |beta|: the coupled tape of beta is the whitened one (the
    tests above run the folded one)."""
    model, X, Y = make_problem(n=8, mb=5, p=2, seed=16)
    assert isinstance(model.evaluate(X, Y).tape.groups[0].beta, coupled.WhitenedTape)
    assert_adam_gradients_match(model, X, Y)


def test_adam_mode_gradients_in_q_match_finite_differences():
    model, X, Y = make_problem(p=2, seed=5, natural=False)
    assert {"q_mean", "q_sqrt", "orth_mean"} <= set(model.adam_params())
    assert_adam_gradients_match(model, X, Y)


def test_gradients_with_one_covariance_per_latent():
    from skgp_sparse._estimators.classifier import make_likelihood

    rng = np.random.default_rng(3)
    X = rng.uniform(-2, 2, size=(30, 2))
    Y = rng.integers(0, 3, size=(30, 1)).astype(float)
    state = random_state(rng.uniform(-2, 2, size=(9, 2)), 4, 3, 3, rng)
    model = VariationalModel(orth_decoupled, ReferenceRBF(1.1, np.array([0.9, 1.2])), make_likelihood("robustmax", 3),
                             state, 30, natural=False)
    assert_adam_gradients_match(model, X, Y)


def test_gradients_through_compiled_sklearn_kernel_with_white_noise():
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

    from skgp_sparse.kernels import compile_kernel

    rng = np.random.default_rng(7)
    X = rng.uniform(-2, 2, size=(25, 2))
    Y = np.cos(X[:, :1] * 2) + 0.1 * rng.standard_normal((25, 1))
    kernel = compile_kernel(ConstantKernel(1.2) * Matern([0.7, 1.1], nu=2.5) + WhiteKernel(0.3), white_as_noise=True)
    state = random_state(rng.uniform(-2, 2, size=(9, 2)), 4, 1, 1, rng)
    noise = NoiseParameter(kernel, 0.2, (np.log(1e-6), np.log(1e3)))
    model = VariationalModel(orth_decoupled, kernel, GaussianLikelihood(0.2), state, 25, noise=noise)
    model.jitter = 1e-3  # large enough for its path through the amplitude to show
    assert_adam_gradients_match(model, X, Y)


@pytest.mark.parametrize("kl_columns", [None, 3])
def test_backward_twice_over_one_tape(kl_columns):
    """With a compiled kernel the backward pass writes the adjoints of the gamma kernel
    matrices over them; a second pass over the same tape recomputes what it needs."""
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    from skgp_sparse.kernels import compile_kernel

    rng = np.random.default_rng(17)
    X = rng.uniform(-2, 2, size=(25, 2))
    Y = np.sin(X[:, :1]) + 0.1 * rng.standard_normal((25, 1))
    kernel = compile_kernel(ConstantKernel(1.3) * RBF([0.8, 1.1]))
    state = random_state(rng.uniform(-2, 2, size=(11, 2)), 4, 1, 1, rng, kl_columns=kl_columns)
    model = VariationalModel(orth_decoupled, kernel, GaussianLikelihood(0.2), state, 25)
    result = model.evaluate(X, Y)
    again = orth_decoupled.backward(result.tape.groups[0], state, result.d_mean, result.d_var, model.learn_fields)
    np.testing.assert_allclose(again[0], result.grads["theta"], rtol=1e-12)
    for name in model.learn_fields:
        np.testing.assert_allclose(again[1][name], result.grads[name], rtol=1e-12, atol=1e-14, err_msg=name)


# --- the Gaussian optimum (spec 6.3, the paper's App. E corrected) ----------------------
def closed_form_state(model, X, y):
    """a* = (K_aX K_Xa + s2 K_aa)^-1 K_aX y over alpha = [gamma; beta] (beta block jittered as
    in the model), in the model's coordinates, and S* = K (K + K_bX K_Xb / s2)^-1 K."""
    k, st, s2 = model.kernel, model.state, model.likelihood.noise_variance
    Zb, Zg = st.inducing, st.orthogonal
    Kbb = k(Zb)
    K = Kbb + model.jitter * np.mean(np.diag(Kbb)) * np.eye(Zb.shape[0])
    Kaa = np.block([[k(Zg), k(Zg, Zb)], [k(Zb, Zg), K]])
    KaX = np.vstack([k(Zg, X), k(Zb, X)])
    a = np.linalg.solve(KaX @ KaX.T + s2 * Kaa, KaX @ y)
    mg = Zg.shape[0]
    a_g, w_b = a[:mg], a[mg:]
    a_b = w_b + np.linalg.solve(K, k(Zb, Zg) @ a_g)
    Lk = np.linalg.cholesky(K)
    KbX = k(Zb, X)
    S = K @ np.linalg.solve(K + KbX @ KbX.T / s2, K)
    S_w = np.linalg.solve(Lk, np.linalg.solve(Lk, S).T).T
    out = st.copy()
    out.orth_mean = a_g[:, None]
    out.q_mean = (Lk.T @ a_b)[:, None]
    out.q_sqrt = np.linalg.cholesky(S_w)[None]
    return out


def test_alternating_updates_reach_the_closed_form_optimum():
    """Natural step (size 1) on beta and an exact Newton step on a_g (the ELBO is quadratic in
    a_g, with Hessian -(Phi^T Phi / s2 + K_perp)) from the basis's own gradient, alternated."""
    model, X, Y = make_problem(n=40, mb=4, mg=8, d=1, seed=6, random_q=False, noise=0.1)
    k, st, s2 = model.kernel, model.state, model.likelihood.noise_variance
    Kbb = k(st.inducing)
    K = Kbb + model.jitter * np.mean(np.diag(Kbb)) * np.eye(Kbb.shape[0])
    Kgb = k(st.orthogonal, st.inducing)
    phi = k(X, st.orthogonal) - k(X, st.inducing) @ np.linalg.solve(K, Kgb.T)
    hessian = phi.T @ phi / s2 + k(st.orthogonal) - Kgb @ np.linalg.solve(K, Kgb.T)
    # Block coordinate ascent: linear convergence (the two blocks are correlated here).
    for _ in range(150):
        model.state = model.natural_step(model.evaluate(X, Y), 1.0)
        grad = model.evaluate(X, Y).grads["orth_mean"]
        model.state.orth_mean = model.state.orth_mean + np.linalg.solve(hessian, grad)
    reached = model.elbo(X, Y)
    best = closed_form_state(model, X, Y[:, 0])
    target = VariationalModel(orth_decoupled, k, model.likelihood, best, X.shape[0]).elbo(X, Y)
    assert reached == pytest.approx(target, rel=1e-10, abs=1e-8)
    np.testing.assert_allclose(model.state.orth_mean, best.orth_mean, atol=1e-6 * np.abs(best.orth_mean).max())
    # The optimum is stationary, beats the coupled (Titsias) optimum on beta alone and stays
    # below the exact log marginal likelihood.
    at_best = VariationalModel(orth_decoupled, k, model.likelihood, best, X.shape[0], noise=model.noise)
    np.testing.assert_allclose(at_best.evaluate(X, Y).grads["orth_mean"], 0.0, atol=1e-6)
    C = k(X) + s2 * np.eye(X.shape[0])
    exact = -0.5 * (Y[:, 0] @ np.linalg.solve(C, Y[:, 0]) + np.linalg.slogdet(C)[1] + X.shape[0] * np.log(2 * np.pi))
    beta_only = VariationalModel(coupled, k, model.likelihood, coupled.init_state(st.inducing, 1, 1), X.shape[0])
    beta_only.state = beta_only.natural_step(beta_only.evaluate(X, Y), 1.0)
    assert beta_only.elbo(X, Y) + 1.0 < target < exact


def test_adam_on_the_gamma_coefficients_approaches_the_optimum():
    from skgp_sparse.optim import Adam

    model, X, Y = make_problem(n=40, mb=4, mg=8, d=1, seed=6, random_q=False, noise=0.1)
    best = closed_form_state(model, X, Y[:, 0])
    target = VariationalModel(orth_decoupled, model.kernel, model.likelihood, best, X.shape[0]).elbo(X, Y)
    start = model.elbo(X, Y)
    adam = Adam(0.05)
    for _ in range(400):
        result = model.evaluate(X, Y)
        model.state = model.natural_step(result, 1.0)
        grads = {"orth_mean": result.grads["orth_mean"]}
        model.state.orth_mean = adam.step({"orth_mean": model.state.orth_mean}, grads)["orth_mean"]
    assert target - model.elbo(X, Y) < 1e-3 * (target - start)


# --- options: per state, no module settings ------------------------------------------------
def test_the_module_has_constants_not_settings():
    """The field lists are plain tuples; the removed module settings are gone for good."""
    assert orth_decoupled.ADAM_FIELDS == ("orth_mean",)
    assert orth_decoupled.VARIATIONAL_FIELDS == ("q_mean", "q_sqrt")
    assert orth_decoupled.EXACT_NATURAL_STEP is True and orth_decoupled.CONJUGATE_NATURAL_STEP is True
    for removed in ("GAMMA_STEP", "DIAGONAL_STEP_SIZE", "KL_COLUMNS", "__getattr__"):
        assert not hasattr(orth_decoupled, removed)


def test_auto_kl_columns_rule():
    """Exact up to 256 gamma points, then max(64, Mg / 16) columns (the measured rule)."""
    exact_max, columns = orth_decoupled.AUTO_EXACT_MAX_ORTHOGONAL, orth_decoupled.AUTO_MIN_COLUMNS
    assert (exact_max, columns, orth_decoupled.AUTO_COLUMN_RATIO) == (256, 64, 16)
    assert orth_decoupled.resolve_kl_columns("auto", exact_max) is None
    assert orth_decoupled.resolve_kl_columns("auto", exact_max + 1) == columns
    assert orth_decoupled.resolve_kl_columns("auto", 1024) == 64
    assert orth_decoupled.resolve_kl_columns("auto", 4096) == 256
    assert orth_decoupled.resolve_kl_columns("auto", 4097) == 257
    assert orth_decoupled.resolve_kl_columns(None, 10**5) is None
    assert orth_decoupled.resolve_kl_columns(8, 100) == 8
    # As many columns as points or more: the exact term, which costs no more.
    assert orth_decoupled.resolve_kl_columns(100, 100) is None
    Z = np.random.default_rng(0).uniform(size=(exact_max + 3, 1))
    assert orth_decoupled.init_state(Z, 1, 1, n_orthogonal=exact_max + 1).kl_columns == columns
    assert orth_decoupled.init_state(Z, 1, 1, n_orthogonal=exact_max).kl_columns is None


def test_options_live_on_the_state_and_pickle_with_it():
    model, X, Y = make_problem(mg=5, kl_columns=2, seed=9)
    state = model.state
    assert state.kl_columns == 2 and state.column_rng is not None
    model.evaluate(X, Y)  # draws columns and fills the cache of the exact term
    model.elbo(X, Y)
    assert state.quadratic_cache is not None
    restored = pickle.loads(pickle.dumps(state))
    assert restored.kl_columns == 2 and restored.quadratic_cache is None
    # The generator travels with its position: both draw the same columns next.
    r1 = orth_decoupled.marginals(model.kernel, X, state, model.jitter)[2].quad.cols
    r2 = orth_decoupled.marginals(model.kernel, X, restored, model.jitter)[2].quad.cols
    np.testing.assert_array_equal(r1, r2)
    copied = state.copy()
    np.testing.assert_array_equal(orth_decoupled.marginals(model.kernel, X, state, model.jitter)[2].quad.cols,
                                  orth_decoupled.marginals(model.kernel, X, copied, model.jitter)[2].quad.cols)


def test_same_seed_same_model_other_seed_other_model():
    """The column sampler draws from the state's own generator, seeded by ``seed``."""

    def trained(seed):
        from skgp_sparse.optim import Adam

        model, X, Y = make_problem(n=40, mg=12, seed=11, random_q=False, kl_columns=3, column_seed=seed)
        adam = Adam(0.05)
        for _ in range(15):
            result = model.evaluate(X, Y)
            new_state = model.natural_step(result, 0.5)
            params = adam.step(model.adam_params(), result.grads, model.adam_bounds())
            model.state = new_state
            model.set_adam_params(params)
        return model.state

    a, b, c = trained(3), trained(3), trained(4)
    for name in ("orth_mean", "orthogonal", "inducing", "q_mean"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert not np.array_equal(a.orth_mean, c.orth_mean)


def test_column_sampled_kl_and_its_gradient_are_unbiased():
    model, X, Y = make_problem(mg=5, seed=9, kl_columns=2)
    assert model.state.kl_columns == 2
    exact_kl = orth_decoupled.kl_divergence(model.kernel, model.state, model.jitter)
    exact_model, _, _ = make_problem(mg=5, seed=9, kl_columns=None)
    exact_grads = exact_model.evaluate(X, Y).grads
    kls, grads = [], {name: [] for name in ("orth_mean", "orthogonal", "theta", "inducing")}
    for _ in range(3000):
        result = model.evaluate(X, Y)
        kls.append(orth_decoupled.kl_divergence(model.kernel, model.state, model.jitter, result.tape.groups[0]))
        for name in grads:
            grads[name].append(result.grads[name])
    kls = np.array(kls)
    assert kls.std() > 0  # really sampled
    assert abs(kls.mean() - exact_kl) < 4 * kls.std() / np.sqrt(kls.size)
    for name, draws in grads.items():
        draws = np.array(draws)
        se = draws.std(axis=0) / np.sqrt(draws.shape[0])
        tol = 4 * se + 1e-10 * np.abs(exact_grads[name]).max()
        assert np.all(np.abs(draws.mean(axis=0) - exact_grads[name]) <= tol), name
    # The reported ELBO keeps the exact KL, and so does a natural-step-only evaluation.
    assert model.elbo(X, Y) == pytest.approx(exact_model.elbo(X, Y), rel=1e-12)
    natural = model.evaluate(X, Y, need_grad="natural")
    assert natural.elbo == pytest.approx(exact_model.evaluate(X, Y, need_grad=False).elbo, rel=1e-12)


class NoDerivatives(PointCovariances):
    """A kernel that refuses to build derivative tapes."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.theta = kernel.theta
        self.calls = 0

    def __call__(self, A, B=None):
        self.calls += 1
        return self.kernel(A, B)

    def diag(self, A):
        return self.kernel.diag(A)

    def vjp(self, A, B=None):
        raise AssertionError("a derivative tape was built")

    def diag_vjp(self, A):
        raise AssertionError("a derivative tape was built")


@pytest.mark.parametrize("options", [{}, {"kl_columns": 2}])
def test_evaluations_without_gradients_build_no_derivative_tapes(options):
    model, X, Y = make_problem(p=2, seed=12, **options)
    full = model.evaluate(X, Y)
    lazy = NoDerivatives(model.kernel)
    mean, var, tape = orth_decoupled.marginals(lazy, X, model.state, model.jitter, need_grad="natural")
    np.testing.assert_allclose(mean, full.tape.groups[0].mean, rtol=1e-10, atol=1e-12)
    # The natural step from that tape is the one from the full tape.
    d_mean, d_var = full.d_mean, full.d_var
    a = orth_decoupled.natural_step(tape, model.state, d_mean, d_var, 0.5)
    b = orth_decoupled.natural_step(full.tape.groups[0], model.state, d_mean, d_var, 0.5)
    np.testing.assert_allclose(a.q_mean, b.q_mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(a.q_sqrt, b.q_sqrt, rtol=1e-9, atol=1e-12)
    mean2, var2, none = orth_decoupled.marginals(lazy, X, model.state, model.jitter, need_grad=False)
    assert none is None
    np.testing.assert_allclose(mean2, mean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(var2, var, rtol=1e-10, atol=1e-12)
    orth_decoupled.kl_divergence(lazy, model.state, model.jitter)
    orth_decoupled.make_predictor(lazy, model.state, model.jitter).latent(lazy, X)


def test_exact_term_is_reused_until_its_inputs_change():
    model, X, _ = make_problem(seed=13)
    kernel = NoDerivatives(model.kernel)
    state = model.state
    first = orth_decoupled.kl_divergence(kernel, state, model.jitter)
    calls = kernel.calls
    assert orth_decoupled.kl_divergence(kernel, state, model.jitter) == first
    # K_bb and K_gb again, but not K_gg.
    assert kernel.calls == calls + 2
    # A natural step keeps gamma, a and the kernel: the cache carries over.
    tape = orth_decoupled.marginals(model.kernel, X, state, model.jitter)[2]
    stepped = orth_decoupled.natural_step(tape, state, np.ones((X.shape[0], 1)), -np.ones((X.shape[0], 1)), 0.3)
    assert stepped.quadratic_cache is state.quadratic_cache
    # New coefficients: recomputed, and equal to a fresh computation.
    state.orth_mean = 2.0 * state.orth_mean
    changed = orth_decoupled.kl_divergence(kernel, state, model.jitter)
    assert kernel.calls == calls + 5
    fresh, _, _ = make_problem(seed=13)
    fresh.state.orth_mean = state.orth_mean.copy()
    assert changed == pytest.approx(orth_decoupled.kl_divergence(fresh.kernel, fresh.state, fresh.jitter), rel=1e-12)
    # So is a new theta.
    model.kernel.set_theta(model.kernel.theta + 0.1)
    kernel.theta = model.kernel.theta
    orth_decoupled.kl_divergence(kernel, state, model.jitter)
    assert kernel.calls == calls + 8


# --- estimators --------------------------------------------------------------------------
def wiggly(n=400, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 1))
    return X, np.sin(3 * X[:, 0]) + 0.3 * np.cos(7 * X[:, 0]) + 0.05 * rng.standard_normal(n)


def test_regressor_with_gamma_points_fits_better_than_its_beta_points_alone():
    X, y = wiggly()
    common = dict(n_inducing=6, batch_size=None, max_iter=150, learning_rate=0.05, tol=0.0, n_iter_no_change=10**6,
                  random_state=0)
    orth = SparseGPRegressor(basis="orth_decoupled", n_orthogonal=40, **common).fit(X, y)
    plain = SparseGPRegressor(basis="coupled", **common).fit(X, y)
    assert orth.inducing_points_.shape == (6, 1) and orth.orthogonal_points_.shape == (40, 1)
    Xt, yt = wiggly(200, seed=1)
    assert orth.elbo(X, y) > plain.elbo(X, y) + 3.0
    assert orth.score(Xt, yt) > plain.score(Xt, yt) - 0.01
    mean, std = orth.predict(Xt, return_std=True)
    assert np.all(np.isfinite(mean)) and np.all(std > 0)
    restored = pickle.loads(pickle.dumps(orth))
    np.testing.assert_array_equal(restored.predict(Xt), orth.predict(Xt))
    # full covariance agrees with the marginal variances
    _, cov = orth.predict(Xt[:5], return_cov=True)
    np.testing.assert_allclose(np.sqrt(np.diag(cov)), std[:5], rtol=1e-8)


@pytest.mark.parametrize("n_classes", [2, 3])
def test_classifier_with_gamma_points(n_classes):
    rng = np.random.default_rng(n_classes)
    X = rng.standard_normal((300, 2))
    y = (np.sin(2 * X[:, 0]) + X[:, 1] > 0).astype(int) + (n_classes == 3) * (X[:, 1] > 1)
    clf = SparseGPClassifier(basis="orth_decoupled", n_inducing=8, n_orthogonal=24, batch_size=100, max_iter=30,
                             random_state=0).fit(X, y)
    assert clf.orthogonal_points_.shape == (24, 2)
    assert clf.variational_state_.orth_mean.shape == (24, 1 if n_classes == 2 else 3)
    assert np.any(clf.variational_state_.orth_mean != 0)
    proba = clf.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert clf.score(X, y) > 0.8
    restored = pickle.loads(pickle.dumps(clf))
    np.testing.assert_array_equal(restored.predict_proba(X), proba)


def test_warm_start_continues_both_sets():
    X, y = wiggly(200)
    reg = SparseGPRegressor(basis="orth_decoupled", n_inducing=5, n_orthogonal=10, batch_size=100, max_iter=3,
                            warm_start=True, random_state=0).fit(X, y)
    first = reg.orthogonal_points_.copy()
    reg.fit(X, y)
    assert reg.n_steps_ == 12 and not np.array_equal(first, reg.orthogonal_points_)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="beta point"):
        orth_decoupled.init_state(np.zeros((3, 1)), 1, 1, n_orthogonal=3)
    for bad in (0, -2, 1.5, True, "all"):
        with pytest.raises(ValueError, match="kl_columns"):
            orth_decoupled.init_state(np.zeros((3, 1)), 1, 1, n_orthogonal=1, kl_columns=bad)


def test_estimator_kl_columns_and_seeded_sampler():
    """kl_columns reaches the state; the column sampler follows random_state."""
    from skgp_sparse import SparseGPRegressor

    rng = np.random.default_rng(5)
    X = rng.uniform(-2, 2, size=(700, 2))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.standard_normal(700)
    settings = dict(basis="orth_decoupled", n_inducing=10, n_orthogonal=40, kl_columns=8, batch_size=200, max_iter=2)

    def fit(seed, **extra):
        return SparseGPRegressor(**{**settings, **extra}, random_state=seed).fit(X, y)

    first, again, other = fit(0), fit(0), fit(1)
    np.testing.assert_array_equal(first.variational_state_.orth_mean, again.variational_state_.orth_mean)
    assert not np.array_equal(first.variational_state_.orth_mean, other.variational_state_.orth_mean)
    exact = fit(0, kl_columns=None)
    assert not np.array_equal(first.variational_state_.orth_mean, exact.variational_state_.orth_mean)
