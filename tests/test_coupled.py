"""The coupled basis and the ELBO assembly against dense oracles and finite differences."""

import numpy as np
import pytest

from skgp_sparse.bases import coupled
from skgp_sparse.elbo import VariationalModel
from skgp_sparse.likelihoods import GaussianLikelihood, NoiseParameter

from ._reference_kernel import ReferenceRBF
from ._gradcheck import assert_adam_gradients_match


@pytest.fixture(params=["whitened", "folded"])
def form(request, monkeypatch):
    """Run a test with every training step in one form of the coupled marginals."""
    if request.param == "whitened":
        monkeypatch.setattr(coupled, "FOLDED_FORM_MIN_ROWS_PER_POINT", np.inf)
    else:
        monkeypatch.setattr(coupled, "FOLDED_FORM_MIN_ROWS_PER_POINT", 0)
        monkeypatch.setattr(coupled, "FOLDED_FORM_MAX_CONDITION", np.inf)
    return request.param


def make_problem(n=40, m=7, d=2, p=1, seed=0, random_q=True):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, d))
    Y = np.sin(X @ np.arange(1, d + 1))[:, None] + 0.1 * rng.standard_normal((n, p))
    Z = rng.uniform(-2, 2, size=(m, d))
    kernel = ReferenceRBF(1.3, 0.8 + 0.3 * np.arange(d))
    state = coupled.init_state(Z, n_outputs=p, n_covariances=1)
    if random_q:
        state.q_mean = rng.standard_normal((m, p))
        low = np.tril(0.3 * rng.standard_normal((m, m)))
        low[np.diag_indices(m)] = rng.uniform(0.5, 1.2, m)
        state.q_sqrt = low[None]
    noise = NoiseParameter(kernel, 0.2, (np.log(1e-6), np.log(1e3)))
    model = VariationalModel(coupled, kernel, GaussianLikelihood(0.2), state, n, noise=noise, learn_inducing=True)
    return model, X, Y


def dense_elbo(model, X, Y):
    """ELBO from dense unwhitened formulas: q(u) = N(L m, L S L^T)."""
    k = model.kernel
    Z = model.state.inducing
    Kzz = k(Z) + model.jitter * np.mean(np.diag(k(Z))) * np.eye(Z.shape[0])
    Lk = np.linalg.cholesky(Kzz)
    mu = Lk @ model.state.q_mean
    S = Lk @ model.state.q_sqrt[0] @ model.state.q_sqrt[0].T @ Lk.T
    Kzx = k(Z, X)
    Ainv = np.linalg.solve(Kzz, Kzx)
    mean = Ainv.T @ mu
    var = k.diag(X) - np.sum(Kzx * Ainv, 0) + np.sum(Ainv * (S @ Ainv), 0)
    s2 = model.likelihood.noise_variance
    ell = -0.5 * np.log(2 * np.pi * s2) - 0.5 * ((Y - mean) ** 2 + var[:, None]) / s2
    m = Z.shape[0]
    kl = 0.0
    for p in range(Y.shape[1]):
        kl += 0.5 * (np.trace(np.linalg.solve(Kzz, S)) + mu[:, p] @ np.linalg.solve(Kzz, mu[:, p]) - m
                     + np.linalg.slogdet(Kzz)[1] - np.linalg.slogdet(S)[1])
    return ell.sum() - kl


def test_elbo_matches_dense_unwhitened_formula():
    model, X, Y = make_problem(p=2)
    assert np.isclose(model.elbo(X, Y), dense_elbo(model, X, Y), rtol=1e-10)


@pytest.mark.parametrize("p", [1, 3])
def test_gradients_match_finite_differences(p, form):
    model, X, Y = make_problem(p=p, seed=p)
    assert_adam_gradients_match(model, X, Y)


def collapsed_bound(kernel, Z, X, y, s2, jitter):
    """Titsias (2009): log N(y | 0, Q + s2 I) - tr(K - Q) / (2 s2)."""
    Kzz = kernel(Z) + jitter * np.mean(np.diag(kernel(Z))) * np.eye(Z.shape[0])
    Kzx = kernel(Z, X)
    Q = Kzx.T @ np.linalg.solve(Kzz, Kzx)
    C = Q + s2 * np.eye(X.shape[0])
    sign, logdet = np.linalg.slogdet(C)
    lml = -0.5 * (y @ np.linalg.solve(C, y) + logdet + X.shape[0] * np.log(2 * np.pi))
    return lml - 0.5 * np.sum(kernel.diag(X) - np.diag(Q)) / s2


def test_one_natural_step_of_size_one_reaches_the_collapsed_optimum(form):
    model, X, Y = make_problem(random_q=False)
    result = model.evaluate(X, Y)
    model.state = model.natural_step(result, 1.0)
    target = collapsed_bound(model.kernel, model.state.inducing, X, Y[:, 0], model.likelihood.noise_variance, model.jitter)
    assert np.isclose(model.elbo(X, Y), target, rtol=1e-10)
    # A second step of size one is a fixed point.
    before = model.state.copy()
    model.state = model.natural_step(model.evaluate(X, Y), 1.0)
    np.testing.assert_allclose(model.state.q_mean, before.q_mean, atol=1e-9)
    np.testing.assert_allclose(model.state.q_sqrt, before.q_sqrt, atol=1e-9)


def test_natural_step_is_the_gradient_in_expectation_parameters(form):
    """eta = (m, S + m m^T): the step moves (P m, -P/2) by step * dELBO/deta (finite differences)."""
    model, X, Y = make_problem(random_q=True, n=25, m=4)
    state = model.state.copy()
    mean0, S0 = state.q_mean[:, 0].copy(), state.q_sqrt[0] @ state.q_sqrt[0].T

    def elbo_at(mean, S):
        model.state = coupled.CoupledState(state.inducing, mean[:, None], np.linalg.cholesky(S)[None])
        return model.evaluate(X, Y, need_grad=False).elbo

    eps, m = 1e-5, mean0.size
    g_mean = np.array([(elbo_at(mean0 + eps * e, S0) - elbo_at(mean0 - eps * e, S0)) / (2 * eps) for e in np.eye(m)])
    g_S = np.zeros((m, m))  # symmetric gradient: dELBO = tr(g_S dS)
    for i in range(m):
        for j in range(i, m):
            E = np.zeros((m, m))
            E[i, j] = E[j, i] = 1.0
            d = (elbo_at(mean0, S0 + eps * E) - elbo_at(mean0, S0 - eps * E)) / (2 * eps)
            g_S[i, j] = g_S[j, i] = d if i == j else d / 2
    g_eta1 = g_mean - 2 * g_S @ mean0

    model.state = state.copy()
    step = 0.3
    new = model.natural_step(model.evaluate(X, Y), step)
    P0 = np.linalg.inv(S0)
    P1 = np.linalg.inv(new.q_sqrt[0] @ new.q_sqrt[0].T)
    np.testing.assert_allclose(-0.5 * P1, -0.5 * P0 + step * g_S, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(P1 @ new.q_mean[:, 0], P0 @ mean0 + step * g_eta1, rtol=1e-6, atol=1e-6)


def test_minibatch_estimate_is_unbiased():
    model, X, Y = make_problem(n=12)
    full = model.elbo(X, Y)
    rng = np.random.default_rng(0)
    # evaluate() scales the batch's data term by n_data / B
    draws = [model.evaluate(X[idx], Y[idx], need_grad=False).elbo for idx in
             (rng.choice(12, 3, replace=False) for _ in range(4000))]
    se = np.std(draws) / np.sqrt(len(draws))
    assert abs(np.mean(draws) - full) < 4 * se


def test_kl_is_zero_at_the_prior_and_positive_elsewhere():
    model, _, _ = make_problem(random_q=False)
    assert coupled.kl_divergence(model.kernel, model.state, model.jitter) == pytest.approx(0.0, abs=1e-12)
    model, _, _ = make_problem(random_q=True)
    assert coupled.kl_divergence(model.kernel, model.state, model.jitter) > 0


@pytest.mark.parametrize("white", [False, True])
def test_gradients_through_compiled_sklearn_kernels(white):
    """The whole chain (sklearn kernel -> compiled kernel -> basis -> ELBO) by finite differences,
    including a WhiteKernel summand that carries the noise."""
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

    from skgp_sparse.kernels import compile_kernel

    rng = np.random.default_rng(7)
    X = rng.uniform(-2, 2, size=(30, 2))
    Y = np.cos(X[:, :1] * 2) + 0.1 * rng.standard_normal((30, 1))
    sk = ConstantKernel(1.2) * Matern([0.7, 1.1], nu=2.5)
    if white:
        sk = sk + WhiteKernel(0.3)
    kernel = compile_kernel(sk, white_as_noise=True)
    state = coupled.init_state(rng.uniform(-2, 2, size=(6, 2)), n_outputs=1, n_covariances=1)
    state.q_mean = rng.standard_normal((6, 1))
    noise = NoiseParameter(kernel, 0.2, (np.log(1e-6), np.log(1e3)))
    model = VariationalModel(coupled, kernel, GaussianLikelihood(0.2), state, 30, noise=noise,
                             learn_inducing=True)
    assert ("log_noise" in model.adam_params()) is not white
    assert_adam_gradients_match(model, X, Y)


def test_gradient_includes_the_relative_jitter(form):
    """A large jitter makes its dependence on the kernel amplitude visible to finite differences."""
    model, X, Y = make_problem(seed=3)
    model.jitter = 1e-2
    grads = model.evaluate(X, Y).grads["theta"]
    params = model.adam_params()
    eps = 1e-6
    fd = []
    for sign in (1, -1):
        shifted = {k: np.array(v, dtype=float) for k, v in params.items()}
        shifted["theta"][0] += sign * eps
        model.set_adam_params(shifted)
        fd.append(model.evaluate(X, Y, need_grad=False).elbo)
    model.set_adam_params(params)
    assert np.isclose(grads[0], (fd[0] - fd[1]) / (2 * eps), rtol=1e-6)


@pytest.mark.parametrize("p", [1, 2])
def test_adam_mode_gradients_in_q_match_finite_differences(p, form):
    model, X, Y = make_problem(p=p, seed=10 + p)
    model = VariationalModel(coupled, model.kernel, model.likelihood, model.state, X.shape[0], noise=model.noise,
                             natural=False)
    assert {"q_mean", "q_sqrt"} <= set(model.adam_params())
    assert_adam_gradients_match(model, X, Y)


def test_adam_mode_gradients_with_one_covariance_per_output(form):
    from skgp_sparse._estimators.classifier import make_likelihood

    rng = np.random.default_rng(3)
    X = rng.uniform(-2, 2, size=(30, 2))
    Y = rng.integers(0, 3, size=(30, 1)).astype(float)
    state = coupled.init_state(rng.uniform(-2, 2, size=(5, 2)), n_outputs=3, n_covariances=3)
    state.q_mean = rng.standard_normal((5, 3))
    state.q_sqrt = state.q_sqrt + np.tril(0.2 * rng.standard_normal((3, 5, 5)), -1)
    model = VariationalModel(coupled, ReferenceRBF(1.1, np.array([0.9, 1.2])), make_likelihood("robustmax", 3), state,
                             30, natural=False)
    assert_adam_gradients_match(model, X, Y)


TAPES = {"whitened": coupled.WhitenedTape, "folded": coupled.FoldedTape}


@pytest.mark.parametrize("n_cov", [1, 3])
def test_the_two_forms_of_a_training_step_agree(n_cov):
    """Marginals, every gradient and the natural step are the same model in both forms."""
    model, X, Y = make_problem(p=3, seed=5)
    rng = np.random.default_rng(5)
    low = np.tril(0.3 * rng.standard_normal((n_cov, 7, 7)))
    low[:, np.arange(7), np.arange(7)] = rng.uniform(0.5, 1.2, (n_cov, 7))
    model.state.q_sqrt = low
    d_mean, d_var = rng.standard_normal((40, 3)), -rng.uniform(0.1, 1.0, (40, 3))
    out = {}
    for form in TAPES:
        mean, var, tape = coupled.marginals(model.kernel, X, model.state, model.jitter, form=form)
        assert type(tape) is TAPES[form]
        theta, bars = coupled.backward(tape, model.state, d_mean, d_var, ("inducing", "q_mean", "q_sqrt"))
        # A second backward pass over one tape gives the same answer (the folded tape reuses a buffer).
        theta_again, _ = coupled.backward(tape, model.state, d_mean, d_var)
        np.testing.assert_allclose(theta_again, theta, rtol=1e-12)
        new = coupled.natural_step(tape, model.state, d_mean, d_var, 0.4)
        out[form] = (mean, var, theta, *bars.values(), new.q_mean, new.q_sqrt)
    for w, f in zip(out["whitened"], out["folded"]):
        np.testing.assert_allclose(f, w, rtol=1e-9, atol=1e-11)


def test_auto_folds_only_well_conditioned_float64_training_batches():
    model, X, Y = make_problem(n=40, m=7)
    k, state, jitter = model.kernel, model.state, model.jitter
    assert type(coupled.marginals(k, X, state, jitter)[2]) is coupled.FoldedTape
    # fewer than two rows per inducing point: the whitened form is cheaper
    assert type(coupled.marginals(k, X[:13], state, jitter)[2]) is coupled.WhitenedTape
    # two nearly equal inducing points with a tiny jitter: cond(K_zz) far above the bound
    close = coupled.CoupledState(np.vstack([state.inducing, state.inducing[:1] + 1e-7]),
                                 np.zeros((8, 1)), np.eye(8)[None])
    assert type(coupled.marginals(k, X, close, 1e-12)[2]) is coupled.WhitenedTape
