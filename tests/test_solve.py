"""The SOLVE basis against dense oracles (SVGP over Z and O, the collapsed bounds of the
paper), the coupled basis it reduces to, and finite differences."""

import pickle
import warnings

import numpy as np
import pytest

from skgp_sparse import SparseGPClassifier, SparseGPRegressor
from skgp_sparse.bases import coupled, solve
from skgp_sparse.elbo import VariationalModel
from skgp_sparse.likelihoods import GaussianLikelihood, NoiseParameter

from ._gradcheck import assert_adam_gradients_match
from ._reference_kernel import ReferenceRBF
from skgp_sparse.kernels import PointCovariances


def random_factor(rng, m, scale=0.3):
    low = np.tril(scale * rng.standard_normal((m, m)))
    low[np.diag_indices(m)] = rng.uniform(0.5, 1.2, m)
    return low


def make_problem(n=40, m=5, m2=4, d=2, p=1, seed=0, random_q=True, jitter=1e-6, n_cov=1, likelihood=None, Y=None,
                 natural=True):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, d))
    if Y is None:
        Y = np.sin(X @ np.arange(1, d + 1))[:, None] + 0.1 * rng.standard_normal((n, p))
    points = rng.uniform(-2, 2, size=(m + m2, d))
    kernel = ReferenceRBF(1.3, 0.8 + 0.3 * np.arange(d))
    state = solve.init_state(points, n_outputs=p, n_covariances=n_cov, n_orthogonal=m2)
    if random_q:
        state.q_mean = rng.standard_normal((m, p))
        state.q_sqrt = np.stack([random_factor(rng, m) for _ in range(n_cov)])
        state.q_mean_orthogonal = rng.standard_normal((m2, p))
        state.q_sqrt_orthogonal = np.stack([random_factor(rng, m2) for _ in range(n_cov)])
    if likelihood is None:
        noise = NoiseParameter(kernel, 0.2, (np.log(1e-6), np.log(1e3)))
        model = VariationalModel(solve, kernel, GaussianLikelihood(0.2), state, n, noise=noise, jitter=jitter,
                                 natural=natural)
    else:
        model = VariationalModel(solve, kernel, likelihood, state, n, jitter=jitter, natural=natural)
    return model, X, Y


# --- dense oracles ---------------------------------------------------------------------
def jittered(K, rel):
    return K + rel * np.mean(np.diag(K)) * np.eye(K.shape[0])


def union_moments(model, c=0):
    """Prior covariance of [u; v] = [f(Z); f(O)] and the structured q(u, v) of the paper's
    section 3 (spec A7.1), unwhitened, in dense numpy. The jitters are those the basis
    adds: to K_uu and to the Schur complement C_vv."""
    k, st = model.kernel, model.state
    Z, O = st.inducing, st.orthogonal
    Kuu = jittered(k(Z), model.jitter)
    Kuv, Kvv = k(Z, O), k(O)
    Cvv = Kvv - Kuv.T @ np.linalg.solve(Kuu, Kuv)
    Cvv_j = jittered(Cvv, max(model.jitter, st.residual_jitter))
    Kvv_j = Cvv_j + Kuv.T @ np.linalg.solve(Kuu, Kuv)
    K = np.block([[Kuu, Kuv], [Kuv.T, Kvv_j]])
    Lu, Lv = np.linalg.cholesky(Kuu), np.linalg.cholesky(Cvv_j)
    m_u, m_v = Lu @ st.q_mean, Lv @ st.q_mean_orthogonal
    S_u = Lu @ st.q_sqrt[c] @ st.q_sqrt[c].T @ Lu.T
    S_v = Lv @ st.q_sqrt_orthogonal[c] @ st.q_sqrt_orthogonal[c].T @ Lv.T
    P = Kuv.T @ np.linalg.inv(Kuu)  # K_vu K_uu^-1
    m_uv = np.vstack([m_u, m_v + P @ m_u])
    S_uv = np.block([[S_u, S_u @ P.T], [P @ S_u, S_v + P @ S_u @ P.T]])
    return np.vstack([Z, O]), K, m_uv, S_uv


def dense_svgp(kernel, points, K, m, S, X, Y, s2):
    """SVGP over inducing inputs ``points`` with prior K and q = N(m, S): marginals, ELBO."""
    Kzx = kernel(points, X)
    W = np.linalg.solve(K, Kzx)
    mean = W.T @ m
    var = kernel.diag(X) - np.sum(Kzx * W, 0) + np.sum(W * (S @ W), 0)
    ell = -0.5 * np.log(2 * np.pi * s2) - 0.5 * ((Y - mean) ** 2 + var[:, None]) / s2
    n = K.shape[0]
    kl = 0.0
    for p in range(m.shape[1]):
        kl += 0.5 * (np.trace(np.linalg.solve(K, S)) + m[:, p] @ np.linalg.solve(K, m[:, p]) - n
                     + np.linalg.slogdet(K)[1] - np.linalg.slogdet(S)[1])
    return mean, var, ell.sum() - kl


def titsias(kernel, Z, X, y, s2, rel):
    """Collapsed bound of Titsias (2009) with the basis's jittered K_zz."""
    Kzz = jittered(kernel(Z), rel)
    Kzx = kernel(Z, X)
    Q = Kzx.T @ np.linalg.solve(Kzz, Kzx)
    C = Q + s2 * np.eye(X.shape[0])
    lml = -0.5 * (y @ np.linalg.solve(C, y) + np.linalg.slogdet(C)[1] + X.shape[0] * np.log(2 * np.pi))
    return lml - 0.5 * np.sum(kernel.diag(X) - np.diag(Q)) / s2


def collapsed_solve(model, X, y):
    """Fully collapsed SOLVE bound (eq. 30 of the paper, spec A6.3) in dense numpy."""
    k, st = model.kernel, model.state
    Z, O = st.inducing, st.orthogonal
    s2 = model.likelihood.noise_variance
    n = X.shape[0]
    Kuu = jittered(k(Z), model.jitter)
    Kuv, Kuf = k(Z, O), k(Z, X)
    Cvv = jittered(k(O) - Kuv.T @ np.linalg.solve(Kuu, Kuv), max(model.jitter, st.residual_jitter))
    Cvf = k(O, X) - Kuv.T @ np.linalg.solve(Kuu, Kuf)
    Qff = Kuf.T @ np.linalg.solve(Kuu, Kuf)
    Cff = np.diag(k.diag(X)) - Qff
    A = Qff + s2 * np.eye(n)
    Ainv_Cfv = np.linalg.solve(A, Cvf.T)
    m_v = Cvv @ np.linalg.solve(Cvv + Cvf @ Ainv_Cfv, Cvf @ np.linalg.solve(A, y))
    S_v = Cvv @ np.linalg.solve(Cvv + Cvf @ Cvf.T / s2, Cvv)
    Bc = Cvf.T @ np.linalg.solve(Cvv, Cvf)
    r = y - Cvf.T @ np.linalg.solve(Cvv, m_v)
    lml = -0.5 * (r @ np.linalg.solve(A, r) + np.linalg.slogdet(A)[1] + n * np.log(2 * np.pi))
    trace = np.trace(Cff - Bc @ np.linalg.solve(Bc + s2 * np.eye(n), Bc))
    m2 = O.shape[0]
    kl = 0.5 * (np.trace(np.linalg.solve(Cvv, S_v)) + m_v @ np.linalg.solve(Cvv, m_v) - m2
                + np.linalg.slogdet(Cvv)[1] - np.linalg.slogdet(S_v)[1])
    return lml - trace / (2 * s2) - kl


# --- the bound ---------------------------------------------------------------------------
@pytest.mark.parametrize("p", [1, 2])
def test_bound_is_svgp_over_z_and_o_with_the_structured_covariance(p):
    model, X, Y = make_problem(p=p, seed=p)
    points, K, m_uv, S_uv = union_moments(model)
    mean, var, elbo = dense_svgp(model.kernel, points, K, m_uv, S_uv, X, Y, model.likelihood.noise_variance)
    got_mean, got_var, _ = solve.marginals(model.kernel, X, model.state, model.jitter, need_grad=False)
    np.testing.assert_allclose(got_mean, mean, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(got_var[:, 0], var, rtol=1e-9, atol=1e-10)
    assert np.isclose(model.elbo(X, Y), elbo, rtol=1e-10)


def test_prior_q_of_v_gives_the_coupled_bound_over_z():
    model, X, Y = make_problem(seed=4)
    st = model.state
    st.q_mean_orthogonal[:] = 0.0
    st.q_sqrt_orthogonal[:] = np.eye(st.n_orthogonal)
    cstate = coupled.CoupledState(st.inducing, st.q_mean, st.q_sqrt)
    cmodel = VariationalModel(coupled, model.kernel, model.likelihood, cstate, X.shape[0], noise=model.noise)
    assert np.isclose(model.elbo(X, Y), cmodel.elbo(X, Y), rtol=1e-12)
    mean, var, _ = solve.marginals(model.kernel, X, st, model.jitter, need_grad=False)
    cmean, cvar, _ = coupled.marginals(model.kernel, X, cstate, model.jitter, need_grad=False)
    np.testing.assert_allclose(mean, cmean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(var, cvar, rtol=1e-10, atol=1e-12)


def test_no_orthogonal_points_is_the_coupled_model():
    model, X, Y = make_problem(m2=0, seed=5)
    st = model.state
    cstate = coupled.CoupledState(st.inducing, st.q_mean, st.q_sqrt)
    cmodel = VariationalModel(coupled, model.kernel, model.likelihood, cstate, X.shape[0], noise=model.noise)
    assert model.elbo(X, Y) == cmodel.elbo(X, Y)
    r, cr = model.evaluate(X, Y), cmodel.evaluate(X, Y)
    np.testing.assert_array_equal(r.grads["theta"], cr.grads["theta"])
    np.testing.assert_array_equal(r.grads["inducing"], cr.grads["inducing"])
    assert r.grads["orthogonal"].shape == (0, 2)
    new, cnew = model.natural_step(r, 0.5), cmodel.natural_step(cr, 0.5)
    np.testing.assert_array_equal(new.q_mean, cnew.q_mean)
    np.testing.assert_array_equal(new.q_sqrt, cnew.q_sqrt)
    Xs = X[:7] + 0.1
    a = solve.make_predictor(model.kernel, st, model.jitter).latent(model.kernel, Xs)
    b = coupled.make_predictor(model.kernel, cstate, model.jitter).latent(model.kernel, Xs)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_kl_is_the_sum_of_the_two_gaussian_kls_to_their_priors():
    """KL_u to N(0, K_uu) plus KL_v to the residual prior N(0, C_vv) of dimension M2 (the
    dump's '- M' in eq. 36 would be off by (M - M2) / 2 here, with M != M2)."""
    model, _, _ = make_problem(m=6, m2=3, seed=6)
    _, K, m_uv, S_uv = union_moments(model)
    m = model.state.inducing.shape[0]
    Kuu, Kuv, Kvv = K[:m, :m], K[:m, m:], K[m:, m:]
    Cvv = Kvv - Kuv.T @ np.linalg.solve(Kuu, Kuv)

    def kl(mu, S, P):
        return 0.5 * (np.trace(np.linalg.solve(P, S)) + mu @ np.linalg.solve(P, mu) - P.shape[0]
                      + np.linalg.slogdet(P)[1] - np.linalg.slogdet(S)[1])

    P = Kuv.T @ np.linalg.inv(Kuu)
    m_u, S_u = m_uv[:m, 0], S_uv[:m, :m]
    m_v = m_uv[m:, 0] - P @ m_u
    S_v = S_uv[m:, m:] - P @ S_u @ P.T
    expected = kl(m_u, S_u, Kuu) + kl(m_v, S_v, Cvv)
    assert np.isclose(solve.kl_divergence(model.kernel, model.state, model.jitter), expected, rtol=1e-10)


def test_minibatch_estimate_is_unbiased():
    """The average of the minibatch estimates over a partition into batches is the ELBO."""
    model, X, Y = make_problem(n=24, seed=8)
    full = model.elbo(X, Y)
    perm = np.random.default_rng(0).permutation(24)
    parts = [model.evaluate(X[idx], Y[idx], need_grad=False).elbo for idx in perm.reshape(4, 6)]
    assert np.isclose(np.mean(parts), full, rtol=1e-12)


def test_predictor_matches_the_marginals_and_the_dense_union_posterior():
    model, X, Y = make_problem(p=2, seed=9, n_cov=2)
    Xs = np.random.default_rng(1).uniform(-3, 3, size=(11, 2))
    mean, var, _ = solve.marginals(model.kernel, Xs, model.state, model.jitter, need_grad=False)
    pred = solve.make_predictor(model.kernel, model.state, model.jitter)
    pmean, pvar = pred.latent(model.kernel, Xs)
    np.testing.assert_allclose(pmean, mean, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(pvar, var, rtol=1e-8, atol=1e-10)
    # Full covariance: the structured SVGP posterior over [Z; O] (spec A4), per covariance.
    _, cov = pred.latent(model.kernel, Xs, full_cov=True)
    for c in range(2):
        points, K, m_uv, S_uv = union_moments(model, c)
        Kzx = model.kernel(points, Xs)
        W = np.linalg.solve(K, Kzx)
        dense = model.kernel(Xs) - Kzx.T @ W + W.T @ S_uv @ W
        np.testing.assert_allclose(cov[c], dense, rtol=1e-8, atol=1e-10)


# --- gradients ---------------------------------------------------------------------------
@pytest.mark.parametrize("p", [1, 2])
def test_gradients_match_finite_differences(p):
    model, X, Y = make_problem(p=p, seed=20 + p)
    assert set(model.adam_params()) == {"theta", "log_noise", "inducing", "orthogonal"}
    assert_adam_gradients_match(model, X, Y)


@pytest.mark.parametrize("natural", [True, False])
def test_gradients_in_the_whitened_form_match_finite_differences(natural):
    """Fewer rows than twice the larger set: the whitened form (the tests above run the
    folded one, checked here too)."""
    model, X, Y = make_problem(n=9, m=5, m2=4, p=2, seed=24, natural=natural)
    assert model.evaluate(X, Y).tape.groups[0].inv_u is None
    assert_adam_gradients_match(model, X, Y)
    folded, X2, Y2 = make_problem(p=2, seed=24, natural=natural)
    assert folded.evaluate(X2, Y2).tape.groups[0].inv_u is not None


@pytest.mark.parametrize("p, n_cov", [(1, 1), (2, 1), (2, 2)])
def test_folded_and_whitened_forms_agree(p, n_cov):
    """Same marginals, gradients and natural step from either form of the same model."""
    from skgp_sparse._estimators.classifier import make_likelihood

    likelihood = make_likelihood("robustmax", 2) if n_cov == 2 else None
    Y = np.random.default_rng(2).integers(0, 2, size=(40, 1)).astype(float) if n_cov == 2 else None
    model, X, Y = make_problem(p=p, n_cov=n_cov, seed=25, likelihood=likelihood, Y=Y, natural=False)
    st, k = model.state, model.kernel
    fields = ("inducing", "orthogonal") + solve.VARIATIONAL_FIELDS
    out = {}
    for form in ("whitened", "folded"):
        mean, var, tape = solve.marginals(k, X, st, model.jitter, True, form=form)
        d_mean = np.cos(mean)
        d_var = -0.3 - 0.1 * np.sin(np.arange(X.shape[0]))[:, None] * np.ones((1, var.shape[1] if n_cov > 1 else p))
        theta_bar, bars = solve.backward(tape, st, d_mean, d_var, fields)
        step = solve.natural_step(tape, st, d_mean, d_var, 0.4)
        out[form] = (mean, var, theta_bar, bars, step)
    w, f = out["whitened"], out["folded"]
    np.testing.assert_allclose(f[0], w[0], rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(f[1], w[1], rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(f[2], w[2], rtol=1e-8, atol=1e-10)
    for name in fields:
        np.testing.assert_allclose(f[3][name], w[3][name], rtol=1e-8, atol=1e-10, err_msg=name)
    for name in ("q_mean", "q_sqrt", "q_mean_orthogonal", "q_sqrt_orthogonal"):
        np.testing.assert_allclose(getattr(f[4], name), getattr(w[4], name), rtol=1e-8, atol=1e-10, err_msg=name)


def test_ill_conditioned_factors_keep_the_whitened_form(monkeypatch):
    """The folded form's rounding grows with the condition numbers of K_uu and C_vv: above
    the coupled basis's bound (lowered here to what this problem has) a training step
    keeps the whitened form."""
    model, X, Y = make_problem(seed=26)
    tape = model.evaluate(X, Y).tape.groups[0]
    bounds = [float(coupled.condition_bound(low, inv, np)) for low, inv in ((tape.low_u, tape.inv_u),
                                                                           (tape.low_v, tape.inv_v))]
    for limit in bounds:
        monkeypatch.setattr(coupled, "FOLDED_FORM_MAX_CONDITION", 0.99 * limit)
        assert model.evaluate(X, Y).tape.groups[0].inv_u is None
    monkeypatch.setattr(coupled, "FOLDED_FORM_MAX_CONDITION", 1.01 * max(bounds))
    assert model.evaluate(X, Y).tape.groups[0].inv_u is not None


class NoDerivatives(PointCovariances):
    """A kernel that refuses to build derivative tapes."""

    def __init__(self, kernel):
        self.kernel, self.theta = kernel, kernel.theta

    def __call__(self, A, B=None):
        return self.kernel(A, B)

    def diag(self, A):
        return self.kernel.diag(A)

    def vjp(self, A, B=None):
        raise AssertionError("a derivative tape was built")

    diag_vjp = vjp


@pytest.mark.parametrize("m2", [0, 4])
def test_natural_only_evaluations_build_no_derivative_tapes(m2):
    model, X, Y = make_problem(m2=m2, seed=27)
    full = model.evaluate(X, Y)
    mean, _, tape = solve.marginals(NoDerivatives(model.kernel), X, model.state, model.jitter, need_grad="natural")
    reference = solve.marginals(model.kernel, X, model.state, model.jitter, need_grad=False)[0]
    np.testing.assert_allclose(mean, reference, rtol=1e-9, atol=1e-12)
    a = solve.natural_step(tape, model.state, full.d_mean, full.d_var, 0.5)
    b = solve.natural_step(full.tape.groups[0], model.state, full.d_mean, full.d_var, 0.5)
    for name in ("q_mean", "q_sqrt", "q_mean_orthogonal", "q_sqrt_orthogonal"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=1e-9, atol=1e-12, err_msg=name)


def test_gradient_includes_both_relative_jitters():
    """Large jitters make their dependence on theta visible to finite differences."""
    model, X, Y = make_problem(seed=23, jitter=1e-2)
    assert_adam_gradients_match(model, X, Y)


@pytest.mark.parametrize("p", [1, 2])
def test_adam_mode_gradients_match_finite_differences(p):
    model, X, Y = make_problem(p=p, seed=30 + p, natural=False)
    assert set(solve.VARIATIONAL_FIELDS) <= set(model.adam_params())
    assert_adam_gradients_match(model, X, Y)


def test_adam_mode_gradients_with_one_covariance_per_output():
    from skgp_sparse._estimators.classifier import make_likelihood

    rng = np.random.default_rng(3)
    Y = rng.integers(0, 3, size=(30, 1)).astype(float)
    model, X, Y = make_problem(n=30, m=4, m2=3, p=3, n_cov=3, seed=33, likelihood=make_likelihood("robustmax", 3),
                               Y=Y, natural=False)
    assert_adam_gradients_match(model, X, Y)


# --- natural steps -----------------------------------------------------------------------
def optimal_q_u_given_v(model, X, y):
    """Spec A6.1: the optimal q(u) for a fixed q(v), whitened (m, S)."""
    k, st = model.kernel, model.state
    s2 = model.likelihood.noise_variance
    Z, O = st.inducing, st.orthogonal
    Lu = np.linalg.cholesky(jittered(k(Z), model.jitter))
    B = np.linalg.solve(Lu, k(Z, X))
    A = np.linalg.solve(Lu, k(Z, O))
    Lv = np.linalg.cholesky(jittered(k(O) - A.T @ A, max(model.jitter, st.residual_jitter)))
    D = np.linalg.solve(Lv, k(O, X) - A.T @ B)
    S = np.linalg.inv(np.eye(Z.shape[0]) + B @ B.T / s2)
    m = S @ B @ (y - D.T @ st.q_mean_orthogonal[:, 0]) / s2
    return m, S, D, B


def test_one_full_batch_natural_step_of_size_one_is_a_block_jacobi_step():
    """Gaussian likelihood, full batch, step 1: each block lands on its optimum given the
    other block's previous value (A6.1 for q(u); the same with the roles swapped for q(v)).
    This is NOT the joint optimum in general (checked: the ELBO still moves afterwards)."""
    model, X, Y = make_problem(seed=40)
    y = Y[:, 0]
    s2 = model.likelihood.noise_variance
    m_u, S_u, D, B = optimal_q_u_given_v(model, X, y)
    S_v = np.linalg.inv(np.eye(D.shape[0]) + D @ D.T / s2)
    m_v = S_v @ D @ (y - B.T @ model.state.q_mean[:, 0]) / s2
    new = model.natural_step(model.evaluate(X, Y), 1.0)
    np.testing.assert_allclose(new.q_mean[:, 0], m_u, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(new.q_sqrt[0] @ new.q_sqrt[0].T, S_u, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(new.q_mean_orthogonal[:, 0], m_v, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(new.q_sqrt_orthogonal[0] @ new.q_sqrt_orthogonal[0].T, S_v, rtol=1e-8, atol=1e-10)
    model.state = new
    first = model.elbo(X, Y)
    model.state = model.natural_step(model.evaluate(X, Y), 1.0)
    assert model.elbo(X, Y) > first + 1e-6


def test_iterated_natural_steps_reach_the_collapsed_solve_bound():
    """Full-batch steps of size 1 (block Jacobi) converge to the joint optimum, whose value
    is the fully collapsed SOLVE bound (eq. 30), which lies between Titsias(Z) and
    Titsias(Z u O): SOLVE is at least as tight as coupled(|Z|) at the optimum."""
    model, X, Y = make_problem(n=50, m=5, m2=5, seed=41, random_q=False)
    values = []
    for _ in range(200):
        model.state = model.natural_step(model.evaluate(X, Y), 1.0)
        values.append(model.elbo(X, Y))
    y = Y[:, 0]
    target = collapsed_solve(model, X, y)
    assert np.isclose(values[-1], target, rtol=1e-9)
    assert np.all(np.diff(values) > -1e-9)  # each block-Jacobi step only improves it here
    s2, st = model.likelihood.noise_variance, model.state
    low = titsias(model.kernel, st.inducing, X, y, s2, model.jitter)
    high = titsias(model.kernel, np.vstack([st.inducing, st.orthogonal]), X, y, s2, model.jitter)
    assert low + 1e-3 < target < high


def test_natural_step_is_the_gradient_in_expectation_parameters_of_each_block():
    """For each block, eta = (m, S + m m^T): the step moves (P m, -P/2) by step * dELBO/deta,
    the ELBO's derivatives taken by finite differences."""
    model, X, Y = make_problem(n=25, m=4, m2=3, seed=42)
    state = model.state.copy()
    step = 0.3
    new = model.natural_step(model.evaluate(X, Y), step)
    for mean_name, sqrt_name in (("q_mean", "q_sqrt"), ("q_mean_orthogonal", "q_sqrt_orthogonal")):
        mean0 = getattr(state, mean_name)[:, 0].copy()
        L0 = getattr(state, sqrt_name)[0]
        S0 = L0 @ L0.T

        def elbo_at(mean, S):
            st = state.copy()
            setattr(st, mean_name, mean[:, None])
            setattr(st, sqrt_name, np.linalg.cholesky(S)[None])
            model.state = st
            return model.evaluate(X, Y, need_grad=False).elbo

        eps, m = 1e-5, mean0.size
        g_mean = np.array([(elbo_at(mean0 + eps * e, S0) - elbo_at(mean0 - eps * e, S0)) / (2 * eps)
                           for e in np.eye(m)])
        g_S = np.zeros((m, m))
        for i in range(m):
            for j in range(i, m):
                E = np.zeros((m, m))
                E[i, j] = E[j, i] = 1.0
                dd = (elbo_at(mean0, S0 + eps * E) - elbo_at(mean0, S0 - eps * E)) / (2 * eps)
                g_S[i, j] = g_S[j, i] = dd if i == j else dd / 2
        P0 = np.linalg.inv(S0)
        L1 = getattr(new, sqrt_name)[0]
        P1 = np.linalg.inv(L1 @ L1.T)
        np.testing.assert_allclose(-0.5 * P1, -0.5 * P0 + step * g_S, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(P1 @ getattr(new, mean_name)[:, 0], P0 @ mean0 + step * (g_mean - 2 * g_S @ mean0),
                                   rtol=1e-6, atol=1e-6)
    model.state = state


# --- initialisation and conditioning -----------------------------------------------------
def test_split_keeps_every_point_and_spreads_z():
    rng = np.random.default_rng(0)
    points = rng.uniform(-1, 1, size=(30, 2))
    Z, O = solve.split_inducing(points, 12)
    assert Z.shape == (18, 2) and O.shape == (12, 2)
    np.testing.assert_array_equal(np.sort(np.vstack([Z, O]), axis=0), np.sort(points, axis=0))
    # Farthest-point selection covers the square better than the first 18 points do.
    grid = np.stack(np.meshgrid(np.linspace(-1, 1, 21), np.linspace(-1, 1, 21)), -1).reshape(-1, 2)

    def covering_radius(S):
        return np.max(np.min(np.sum((grid[:, None] - S[None]) ** 2, -1), 1))

    assert covering_radius(Z) < covering_radius(points[:18])


def test_init_state_checks_counts():
    with pytest.raises(ValueError, match="at least one inducing point in Z"):
        solve.init_state(np.zeros((3, 1)), 1, 1, n_orthogonal=3)


def test_nearly_singular_residual_covariance_gets_its_own_jitter():
    """An O point on top of a Z point makes C_vv singular: it is factorised with more
    jitter than K_uu needs, and the raised jitter is remembered in the state."""
    model, X, Y = make_problem(seed=50, jitter=0.0)
    model.state.orthogonal[0] = model.state.inducing[0]
    model.state.orthogonal[1] = model.state.inducing[0]
    with pytest.warns(Warning, match="residual covariance"):
        elbo = model.evaluate(X, Y).elbo
    assert np.isfinite(elbo)
    assert model.state.residual_jitter > 0
    assert model.jitter == 0.0  # K_uu itself needed none
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.evaluate(X, Y)  # the raised jitter is reused without retries


# --- estimators --------------------------------------------------------------------------
def toy(n=200, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 2))
    y = np.sin(2 * X[:, 0]) * np.cos(X[:, 1]) + 0.1 * rng.standard_normal(n)
    return X, y


def test_regressor_with_no_orthogonal_points_equals_coupled():
    X, y = toy()
    kw = dict(n_inducing=12, max_iter=5, batch_size=64, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = SparseGPRegressor(basis="solve", n_orthogonal=0, **kw).fit(X, y)
        b = SparseGPRegressor(basis="coupled", **kw).fit(X, y)
    assert a.elbo(X, y) == b.elbo(X, y)
    np.testing.assert_array_equal(a.predict(X[:20], return_std=True), b.predict(X[:20], return_std=True))


def test_classifier_with_no_orthogonal_points_equals_coupled():
    X, y = toy()
    labels = (y > 0).astype(int) + (X[:, 1] > 1)
    kw = dict(n_inducing=10, max_iter=3, batch_size=64, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = SparseGPClassifier(basis="solve", n_orthogonal=0, **kw).fit(X, labels)
        b = SparseGPClassifier(basis="coupled", **kw).fit(X, labels)
    np.testing.assert_array_equal(a.predict_proba(X[:20]), b.predict_proba(X[:20]))


@pytest.mark.parametrize("optimizer", ["natural", "adam"])
def test_regressor_fits_and_pickles(optimizer):
    X, y = toy(300)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # Adam on q(u) needs more epochs than natural steps to get as far.
        reg = SparseGPRegressor(basis="solve", n_inducing=10, n_orthogonal=10, batch_size=100,
                                max_iter=30 if optimizer == "natural" else 80, variational_optimizer=optimizer, learning_rate=0.05, random_state=0).fit(X, y)
    assert reg.orthogonal_points_.shape == (10, 2) and reg.inducing_points_.shape == (10, 2)
    Xt, yt = toy(200, seed=1)
    assert reg.score(Xt, yt) > 0.8
    mean, std = reg.predict(Xt[:5], return_std=True)
    assert np.all(std > 0)
    clone = pickle.loads(pickle.dumps(reg))
    np.testing.assert_array_equal(clone.predict(Xt[:5]), mean)


@pytest.mark.parametrize("class_covariance, n_covariances", [("shared", 1), ("per_class", 3)])
def test_classifiers_fit_binary_and_multiclass(class_covariance, n_covariances):
    X, y = toy(300)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        binary = SparseGPClassifier(basis="solve", n_inducing=8, n_orthogonal=8, max_iter=40, batch_size=100,
                                    random_state=0).fit(X, (y > 0).astype(int))
        labels = (y > 0).astype(int) + (X[:, 1] > 1)
        multi = SparseGPClassifier(basis="solve", n_inducing=8, n_orthogonal=6, max_iter=40, batch_size=100,
                                   class_covariance=class_covariance, random_state=0).fit(X, labels)
    assert binary.score(X, (y > 0).astype(int)) > 0.8
    assert multi.score(X, labels) > 0.7
    assert multi.variational_state_.q_sqrt_orthogonal.shape == (n_covariances, 6, 6)
    proba = pickle.loads(pickle.dumps(multi)).predict_proba(X[:5])
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(proba, multi.predict_proba(X[:5]))
