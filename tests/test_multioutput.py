"""Several outputs: the mixing layer, the LMC bound and its natural steps, masking, and the
regressor's multi-output options, against dense numpy oracles.

The oracle of the latent inducing model (the multi-output paper's eq. 49) writes all L x M
inducing values as one Gaussian: K_uu = blockdiag_l k_l(Z, Z), and output p at x_n loads
on latent l's values through W[p, l] k_l(x_n, Z) K_l^-1. Everything the efficient path
computes latent by latent is checked against that dense Gaussian.
"""

import pickle
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skgp_sparse import SparseGPRegressor
from skgp_sparse.bases import BASES
from skgp_sparse.elbo import VariationalModel, rows_per_kernel
from skgp_sparse.kernels import compile_kernel
from skgp_sparse.likelihoods import GaussianLikelihood, OutputGaussianLikelihood, OutputNoise
from skgp_sparse.multioutput import MixedState, collapsed
from skgp_sparse.multioutput.mixing import initial_mixing

from ._gradcheck import assert_adam_gradients_match


def _data(n=40, n_outputs=3, missing=0.2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, 2))
    g = np.column_stack([np.sin(2 * X[:, 0]), np.cos(X[:, 1]), X[:, 0] * X[:, 1] / 2])
    W = rng.standard_normal((n_outputs, 3))
    Y = g @ W.T + 0.1 * rng.standard_normal((n, n_outputs))
    Y[rng.random(Y.shape) < missing] = np.nan
    return X, Y


def _kernels(n_latent, seed=1):
    rng = np.random.default_rng(seed)
    return [compile_kernel(ConstantKernel(rng.uniform(0.5, 2.0)) * RBF(rng.uniform(0.5, 2.0, size=2)))
            for _ in range(n_latent)]


def _random_group(basis, Z, width, rng):
    """A basis state of ``width`` latents with a random q (coupled: whitened mean and factor)."""
    state = BASES[basis].init_state(Z, n_outputs=width, n_covariances=width)
    m = Z.shape[0]
    state.q_mean = rng.standard_normal((m, width))
    state.q_sqrt = np.stack([np.tril(0.3 * rng.standard_normal((m, m))) + np.eye(m) for _ in range(width)])
    return state


def _model(n_latent=2, n_outputs=3, m=6, seed=0, basis="coupled", random_q=True, noise=None, learned=True,
           n_data=None, X=None):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (40, 2)) if X is None else X
    Z = X[:m].copy()
    if random_q:
        groups = tuple(_random_group(basis, Z, 1, rng) for _ in range(n_latent))
    else:
        groups = tuple(BASES[basis].init_state(Z, n_outputs=1, n_covariances=1) for _ in range(n_latent))
    W = rng.standard_normal((n_outputs, n_latent))
    offset = 0.3 * rng.standard_normal(n_outputs) if learned else np.zeros(n_outputs)
    state = MixedState(groups, W, mixing_learned=learned, offset=offset)
    noise = OutputNoise(rng.uniform(0.05, 0.3, n_outputs) if noise is None else noise, (np.log(1e-4), np.log(10.0)))
    return VariationalModel(basis, _kernels(n_latent), OutputGaussianLikelihood(noise.value), state,
                            X.shape[0] if n_data is None else n_data, noise, jitter=1e-10)


# --- the dense oracle ----------------------------------------------------------------------
def _dense_latent_prior(model, X):
    """Blocks of the latent inducing model: K_uu (LM x LM), the projections P_l = k_l(X, Z) K_l^-1
    and the prior variances k_l(x, x), all dense."""
    Z = model.state.inducing
    kuu, proj, kdiag, low = [], [], [], []
    for kernel in model.kernels:
        K = kernel(Z) + 1e-10 * np.mean(np.diag(kernel(Z))) * np.eye(Z.shape[0])
        kuu.append(K)
        low.append(np.linalg.cholesky(K))
        proj.append(np.linalg.solve(K, kernel(Z, X)).T)
        kdiag.append(kernel.diag(X))
    return kuu, proj, kdiag, low


def _dense_marginals(model, X):
    """The outputs' means (n, P) and P x P covariances (n, P, P) of the dense latent model
    (eq. 44 with the latent inducing variables of eq. 49)."""
    kuu, proj, kdiag, low = _dense_latent_prior(model, X)
    L = len(kuu)
    m_tot = sum(k.shape[0] for k in kuu)
    # q(u) of every latent, unwhitened: m_u = L_l v_l, S_u = L_l S_v L_l^T.
    mu_u = np.concatenate([lo @ g.q_mean[:, 0] for lo, g in zip(low, model.state.groups)])
    S_u = np.zeros((m_tot, m_tot))
    Kuu = np.zeros((m_tot, m_tot))
    off = 0
    for lo, g, K in zip(low, model.state.groups, kuu):
        M = K.shape[0]
        R = lo @ g.q_sqrt[0]
        S_u[off:off + M, off:off + M] = R @ R.T
        Kuu[off:off + M, off:off + M] = K
        off += M
    W = model.state.mixing
    n, P = X.shape[0], W.shape[0]
    means = np.zeros((n, P))
    covs = np.zeros((n, P, P))
    for i in range(n):
        # K_uf(x) of eq. 49: [(m, l), p] = W[p, l] k_l(z_m, x); k(x, x) of eq. 36.
        kuf = np.concatenate([np.outer(K @ proj[l][i], W[:, l]) for l, K in enumerate(kuu)])
        kff = sum(np.outer(W[:, l], W[:, l]) * kdiag[l][i] for l in range(L))
        A = np.linalg.solve(Kuu, kuf)
        means[i] = A.T @ mu_u + model.state.offset
        covs[i] = kff - A.T @ (Kuu - S_u) @ A
    return means, covs


def _dense_collapsed(model, X, Y):
    """Titsias' bound of the LMC on the observed entries, from the dense NP x NP matrices:
    log N(y; 0, Q + D) - tr(D^-1 (K - Q)) / 2, Q the Nystrom approximation through all L x M values."""
    kuu, proj, kdiag, low = _dense_latent_prior(model, X)
    W = model.state.mixing
    n, P = Y.shape
    Qf = sum(np.kron(proj[l] @ K @ proj[l].T, np.outer(W[:, l], W[:, l])) for l, K in enumerate(kuu))
    kdiag_f = sum(np.kron(kdiag[l], W[:, l] ** 2) for l in range(len(kuu)))
    seen = ~np.isnan(Y.reshape(-1))
    noise = np.tile(model.noise.value, n)[seen]
    y = (Y - model.state.offset).reshape(-1)[seen]
    C = Qf[np.ix_(seen, seen)] + np.diag(noise)
    sign, logdet = np.linalg.slogdet(C)
    fit = -0.5 * (y @ np.linalg.solve(C, y) + logdet + y.size * np.log(2 * np.pi))
    return fit - 0.5 * np.sum((kdiag_f[seen] - np.diag(Qf)[seen]) / noise)


# --- the mixing layer against the dense model ---------------------------------------------
@pytest.mark.parametrize("n_latent,n_outputs", [(2, 3), (3, 2), (1, 4)])
def test_mixed_marginals_and_output_covariance_match_the_dense_latent_model(n_latent, n_outputs):
    model = _model(n_latent, n_outputs)
    X = np.random.default_rng(5).uniform(-2, 2, (7, 2))
    mean, var = model.output_marginals(X)
    dense_mean, dense_cov = _dense_marginals(model, X)
    np.testing.assert_allclose(mean, dense_mean, atol=1e-9)
    np.testing.assert_allclose(var, np.diagonal(dense_cov, axis1=1, axis2=2), atol=1e-9)
    # The predictor's output covariance W diag(var_g) W^T is the dense P x P covariance (eq. 53).
    predictor = model.predictor()
    _, var_g = predictor.latent_parts(X)
    W = predictor.mixing
    np.testing.assert_allclose(np.einsum("pl,nl,ql->npq", W, var_g, W), dense_cov, atol=1e-9)


def test_collapsed_bound_is_the_dense_titsias_bound_of_the_lmc_with_missing_entries():
    X, Y = _data()
    model = _model(2, 3, m=8, X=X, random_q=False)
    bound = model.collapsed_evaluate(X, Y).elbo
    np.testing.assert_allclose(bound, _dense_collapsed(model, X, Y), rtol=1e-9)


def test_collapsed_bound_with_inducing_inputs_at_the_rows_is_the_exact_lmc_likelihood():
    X, Y = _data(n=12)
    model = _model(2, 3, m=12, X=X, random_q=False)
    kuu, proj, kdiag, _ = _dense_latent_prior(model, X)
    W = model.state.mixing
    K = sum(np.kron(model.kernels[l](X), np.outer(W[:, l], W[:, l])) for l in range(2))
    seen = ~np.isnan(Y.reshape(-1))
    C = K[np.ix_(seen, seen)] + np.diag(np.tile(model.noise.value, 12)[seen])
    y = (Y - model.state.offset).reshape(-1)[seen]
    exact = -0.5 * (y @ np.linalg.solve(C, y) + np.linalg.slogdet(C)[1] + y.size * np.log(2 * np.pi))
    np.testing.assert_allclose(model.collapsed_evaluate(X, Y).elbo, exact, rtol=1e-6)


@pytest.mark.parametrize("chunk_entries", [None, 64])
def test_collapsed_bound_gradients_match_finite_differences(chunk_entries, monkeypatch):
    # 64 entries: one row a chunk, so the terms summed over chunks are checked too.
    if chunk_entries is not None:
        monkeypatch.setattr(collapsed, "CHUNK_ENTRIES", chunk_entries)
    X, Y = _data(n=25)
    model = _model(2, 3, m=5, X=X, random_q=False)
    assert set(model.adam_params()) == {"theta", "log_noise", "mixing", "offset", "inducing"}
    assert_adam_gradients_match(model, X, Y, collapsed=True, rtol=1e-5, atol=1e-5)


def test_collapsed_bound_of_independent_outputs_is_the_sum_of_single_output_bounds():
    """W = I, fixed: the joint bound splits into one Titsias bound per output (each on its
    observed rows, with its own noise)."""
    X, Y = _data(n=30)
    rng = np.random.default_rng(3)
    kernel = _kernels(1)[0]
    Z = X[:6].copy()
    noise = rng.uniform(0.05, 0.3, 3)
    state = MixedState((BASES["coupled"].init_state(Z, 3, 3),), np.eye(3), mixing_learned=False, offset=np.zeros(3))
    model = VariationalModel("coupled", [kernel], OutputGaussianLikelihood(noise), state, 30,
                             OutputNoise(noise, (-5.0, 2.0)), jitter=1e-10)
    assert not model.outputs.couples(model.state) and model.natural_step_is_exact()
    total = 0.0
    for p in range(3):
        seen = ~np.isnan(Y[:, p])
        single = _single_output(kernel, Z, noise[p], int(seen.sum()))
        total += single.collapsed_evaluate(X[seen], Y[seen, p:p + 1]).elbo
    np.testing.assert_allclose(model.collapsed_evaluate(X, Y).elbo, total, rtol=1e-10)


@pytest.mark.parametrize("chunk_entries", [None, 64])
def test_collapsed_bound_gradients_of_latents_left_apart_match_finite_differences(chunk_entries, monkeypatch):
    """W = I, fixed: the bound builds only the diagonal blocks of B and of its inverse
    factor; its gradients in the kernels, noises and inducing inputs still match."""
    if chunk_entries is not None:
        monkeypatch.setattr(collapsed, "CHUNK_ENTRIES", chunk_entries)
    X, Y = _data(n=25)
    noise = np.array([0.1, 0.2, 0.15])
    kernels = _kernels(3)
    state = MixedState((BASES["coupled"].init_state(X[:5].copy(), 1, 1),) * 3, np.eye(3), mixing_learned=False,
                       offset=np.zeros(3))
    model = VariationalModel("coupled", kernels, OutputGaussianLikelihood(noise), state, 25,
                             OutputNoise(noise, (-5.0, 2.0)), jitter=1e-10)
    assert not model.outputs.couples(model.state)
    assert_adam_gradients_match(model, X, Y, collapsed=True, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("coupled", [True, False])
def test_collapsed_bound_kernel_gradient_without_the_product_over_rows(coupled):
    """The kernels' gradient goes through a_bar_l A_l^T = m_l (A_l e_l)^T + (B - I)_ll + S_ll - I
    (``_projection_gram``) instead of a product over the rows: it matches that product,
    written out here from the dense joint posterior, for latents coupled or left apart, and
    a kernel shared by two latents gets the sum of what two copies of it get."""
    X, Y = _data(n=60)
    rng = np.random.default_rng(4)
    kernels = _kernels(2)
    Z = X[:7].copy()
    W = rng.standard_normal((3, 2)) if coupled else np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    beta = np.where(np.isnan(Y), 0.0, 1.0 / rng.uniform(0.05, 0.3, (1, 3)))
    Y0 = np.where(np.isnan(Y), 0.0, Y)

    def projection_grams(kernels_, columns):
        captured = []
        original = collapsed._projection_gram

        def spy(mean, a, e, b_block, s_block, xp):
            out = original(mean, a, e, b_block, s_block, xp)
            captured.append(out)
            return out

        collapsed._projection_gram = spy
        try:
            bound = collapsed.lmc_collapsed_bound(kernels_, columns, X, Y0, beta, W, Z, 1e-10, coupled)
        finally:
            collapsed._projection_gram = original
        return bound, captured

    bound, grams = projection_grams(kernels, [0, 1])
    # The same products over the rows, from the dense joint posterior: S = B^-1 of all L x M values.
    low = [np.linalg.cholesky(k(Z) + 1e-10 * np.mean(np.diag(k(Z))) * np.eye(7)) for k in kernels]
    A = [np.linalg.solve(lo, k(Z, X)) for lo, k in zip(low, kernels)]
    c = {(l, j): beta @ (W[:, l] * W[:, j]) for l in range(2) for j in range(2)}
    B = np.eye(14) + np.block([[(A[l] * c[(l, j)]) @ A[j].T for j in range(2)] for l in range(2)])
    S = np.linalg.inv(B)
    mean = S @ np.concatenate([A[l] @ ((beta * Y0) @ W)[:, l] for l in range(2)])
    resid = Y0 - np.column_stack([A[l].T @ mean[7 * l:7 * l + 7] for l in range(2)]) @ W.T
    e = (beta * resid) @ W
    for l in range(2):
        spread = sum(S[7 * l:7 * l + 7, 7 * j:7 * j + 7] @ (A[j] * c[(l, j)]) for j in range(2))
        a_bar = np.outer(mean[7 * l:7 * l + 7], e[:, l]) + A[l] * c[(l, l)] - spread
        np.testing.assert_allclose(grams[l], a_bar @ A[l].T, rtol=1e-8, atol=1e-8 * np.abs(grams[l]).max())
    # One kernel for both latents: its gradient is the sum of the two copies' gradients.
    shared, _ = projection_grams([kernels[0]], [0, 0])
    copies, _ = projection_grams([kernels[0], kernels[0]], [0, 1])
    n_theta = kernels[0].theta.size
    np.testing.assert_allclose(shared.theta_bar, copies.theta_bar[:n_theta] + copies.theta_bar[n_theta:],
                               rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(shared.inducing_bar, copies.inducing_bar, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(shared.value, copies.value, rtol=1e-12)


def _single_output(kernel, Z, noise, n_data, state=None):
    from skgp_sparse.likelihoods import NoiseParameter

    state = BASES["coupled"].init_state(Z, 1, 1) if state is None else state
    return VariationalModel("coupled", kernel, GaussianLikelihood(noise), state, n_data,
                            noise=NoiseParameter(kernel, noise, (-5.0, 2.0)), jitter=1e-10)


# --- the uncollapsed bound --------------------------------------------------------------------
@pytest.mark.parametrize("basis", ["coupled", "solve", "orth_decoupled", "inverse_free"])
def test_bound_gradients_match_finite_differences_on_every_basis(basis):
    X, Y = _data(n=20)
    rng = np.random.default_rng(0)
    n_latent = 2
    Z = X[:8].copy()
    kernels = _kernels(n_latent)
    options = BASES[basis].init_options({"random_state": 0, "n_inducing": 4, "n_orthogonal": 4, "kl_columns": "auto"},
                                        rng)
    n_orthogonal = 4 if BASES[basis].ORTHOGONAL_SET else 0
    groups = tuple(BASES[basis].init_state(Z, 1, 1, n_orthogonal=n_orthogonal, **options) for _ in range(n_latent))
    state = MixedState(groups, rng.standard_normal((3, n_latent)), mixing_learned=True, offset=np.full(3, 0.2))
    noise = OutputNoise([0.1, 0.2, 0.15], (-5.0, 2.0))
    model = VariationalModel(basis, kernels, OutputGaussianLikelihood(noise.value), state, 20, noise, jitter=1e-8)
    # Move q off the prior by a natural step, so that every adjoint is exercised.
    model.state = model.natural_step(model.evaluate(X, Y, need_grad="natural"), 0.5)
    assert_adam_gradients_match(model, X, Y, rtol=2e-5, atol=2e-5)


def test_identity_mixing_equals_independent_single_output_models():
    """W = I with one kernel per latent: the bound is the sum of P single-output bounds,
    each output's q on its observed rows only (masking drops exactly those entries)."""
    X, Y = _data(n=30, n_outputs=2)
    rng = np.random.default_rng(1)
    Z = X[:6].copy()
    kernels = _kernels(2)
    groups = tuple(_random_group("coupled", Z, 1, rng) for _ in range(2))
    noise = np.array([0.1, 0.3])
    state = MixedState(groups, np.eye(2), mixing_learned=False, offset=np.zeros(2))
    model = VariationalModel("coupled", kernels, OutputGaussianLikelihood(noise), state, 30,
                             OutputNoise(noise, None), jitter=1e-10)
    total = 0.0
    for p in range(2):
        seen = ~np.isnan(Y[:, p])
        single = _single_output(kernels[p], Z, noise[p], int(seen.sum()), groups[p].copy())
        total += single.evaluate(X[seen], Y[seen, p:p + 1], need_grad=False).elbo
    np.testing.assert_allclose(model.evaluate(X, Y, need_grad=False).elbo, total, rtol=1e-10)


def test_masked_entries_drop_out_of_the_bound_entry_by_entry():
    """The bound with NaN targets equals the dense oracle that keeps only observed entries:
    sum over observed (n, p) of E_q log N(y_np | f_np, s2_p) minus the KL."""
    X, Y = _data(n=25)
    model = _model(2, 3, X=X)
    mean, cov = _dense_marginals(model, X)
    var = np.diagonal(cov, axis1=1, axis2=2)
    s2 = model.noise.value
    seen = ~np.isnan(Y)
    ell = -0.5 * (np.log(2 * np.pi * s2) + ((np.nan_to_num(Y) - mean) ** 2 + var) / s2)
    kl = sum(float(BASES["coupled"].kl_divergence(k, g, model.jitter)) for k, g in zip(model.kernels, model.state.groups))
    np.testing.assert_allclose(model.evaluate(X, Y, need_grad=False).elbo, np.sum(ell[seen]) - kl, rtol=1e-10)
    # A row's other entries still count: hiding one entry changes the bound by that entry only.
    Y2 = Y.copy()
    n, p = np.argwhere(seen)[0]
    Y2[n, p] = np.nan
    np.testing.assert_allclose(model.evaluate(X, Y2, need_grad=False).elbo,
                               model.evaluate(X, Y, need_grad=False).elbo - ell[n, p], rtol=1e-10)


# --- natural steps ------------------------------------------------------------------------------
def test_natural_sweeps_reach_the_joint_optimum_on_a_full_batch():
    """Sweeps of size one over the latents rise monotonically to the joint optimum of the
    mean-field family: its means are those of the exact joint posterior over the L x M
    values (a Gaussian's mean-field optimum keeps the true mean), each latent's precision
    the diagonal block of the joint precision, and one more sweep moves nothing."""
    X, Y = _data(n=40)
    model = _model(3, 3, m=6, X=X, random_q=False)
    elbos = [model.evaluate(X, Y, need_grad=False).elbo]
    for _ in range(300):
        model.state = model.natural_step(model.evaluate(X, Y, need_grad="natural"), 1.0)
        elbos.append(model.evaluate(X, Y, need_grad=False).elbo)
    assert np.all(np.diff(elbos) > -1e-9)
    # The dense joint posterior of the whitened values v (prior N(0, I)).
    kuu, proj, kdiag, low = _dense_latent_prior(model, X)
    W, s2 = model.state.mixing, model.noise.value
    seen = ~np.isnan(Y)
    rows = []
    for n, p in zip(*np.nonzero(seen)):
        rows.append(np.concatenate([W[p, l] * (proj[l][n] @ low[l]) for l in range(3)]))
    Phi = np.array(rows)
    beta = 1.0 / s2[np.nonzero(seen)[1]]
    precision = np.eye(Phi.shape[1]) + Phi.T @ (beta[:, None] * Phi)
    joint_mean = np.linalg.solve(precision, Phi.T @ (beta * (Y - model.state.offset)[seen]))
    fitted = np.concatenate([g.q_mean[:, 0] for g in model.state.groups])
    np.testing.assert_allclose(fitted, joint_mean, atol=1e-7)
    for l, g in enumerate(model.state.groups):
        block = precision[l * 6:(l + 1) * 6, l * 6:(l + 1) * 6]
        S = g.q_sqrt[0] @ g.q_sqrt[0].T
        np.testing.assert_allclose(np.linalg.inv(S), block, rtol=1e-7, atol=1e-7)
    # The mean-field optimum lies below the joint (collapsed) bound, by the lost correlations.
    assert elbos[-1] <= model.collapsed_evaluate(X, Y).elbo + 1e-9


def test_independent_outputs_need_one_natural_step():
    X, Y = _data(n=30)
    kernel = _kernels(1)[0]
    state = MixedState((BASES["coupled"].init_state(X[:6].copy(), 3, 3),), np.eye(3), mixing_learned=False,
                       offset=np.zeros(3))
    noise = np.array([0.1, 0.2, 0.3])
    model = VariationalModel("coupled", [kernel], OutputGaussianLikelihood(noise), state, 30, OutputNoise(noise, None),
                             jitter=1e-10)
    model.state = model.natural_step(model.evaluate(X, Y, need_grad="natural"), 1.0)
    np.testing.assert_allclose(model.evaluate(X, Y, need_grad=False).elbo, model.collapsed_evaluate(X, Y).elbo,
                               rtol=1e-9)


def test_initial_mixing_spans_the_principal_directions_of_the_observed_targets():
    rng = np.random.default_rng(0)
    Y = rng.standard_normal((500, 2)) @ np.array([[2.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
    Y[rng.random(Y.shape) < 0.1] = np.nan
    W = initial_mixing(Y, 2)
    cov = np.ma.cov(np.ma.masked_invalid(Y), rowvar=False).data
    np.testing.assert_allclose(W @ W.T, cov, atol=0.15)
    assert initial_mixing(Y, 4).shape == (3, 4)


# --- the regressor ---------------------------------------------------------------------------------
def _regression(n=150, seed=0):
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(-3, 3, (n, 1)), axis=0)
    g = np.column_stack([np.sin(2 * X[:, 0]), np.cos(0.7 * X[:, 0])])
    W = np.array([[1.0, 0.3], [0.6, 1.0], [-0.9, 0.5]])
    Y = g @ W.T + 0.05 * rng.standard_normal((n, 3))
    return X, Y


def test_lmc_predicts_a_hidden_block_better_than_independent_outputs():
    X, Y = _regression()
    Ym = Y.copy()
    block = (X[:, 0] > 0.5) & (X[:, 0] < 1.8)
    Ym[block, 0] = np.nan
    errors = {}
    for name, n_latent in (("independent", None), ("lmc", 2)):
        reg = SparseGPRegressor(n_inducing=20, n_latent=n_latent, missing_targets="mask", random_state=0).fit(X, Ym)
        errors[name] = np.sqrt(np.mean((reg.predict(X[block])[:, 0] - Y[block, 0]) ** 2))
    assert errors["lmc"] < 0.5 * errors["independent"], errors


@pytest.mark.parametrize("basis", ["coupled", "solve", "orth_decoupled", "inverse_free"])
def test_every_basis_fits_an_lmc_with_missing_entries(basis):
    X, Y = _regression(120)
    Y[np.random.default_rng(1).random(Y.shape) < 0.15] = np.nan
    extra = {"n_orthogonal": 10} if BASES[basis].ORTHOGONAL_SET else {}
    reg = SparseGPRegressor(basis=basis, n_inducing=15, n_latent=2, missing_targets="mask", batch_size=60,
                            max_iter=30, random_state=0, **extra)
    with warnings.catch_warnings():
        # Short fits: convergence warnings are not what this test is about.
        warnings.simplefilter("ignore")
        reg.fit(X, Y)
    mean, std = reg.predict(X, return_std=True)
    assert mean.shape == std.shape == (120, 3) and np.all(np.isfinite(std))
    assert reg.mixing_matrix_.shape == (3, 2) and reg.noise_variance_.shape == (3,)
    assert reg.score(X, Y) > 0.9


def test_predictions_shapes_and_covariances_agree():
    X, Y = _regression(100)
    reg = SparseGPRegressor(n_inducing=15, n_latent=2, random_state=0).fit(X, Y)
    mean, std = reg.predict(X[:6], return_std=True)
    _, cov = reg.predict(X[:6], return_cov=True)
    out = reg.predict_output_covariance(X[:6])
    assert mean.shape == (6, 3) and cov.shape == (6, 6, 3) and out.shape == (6, 3, 3)
    np.testing.assert_allclose(np.diagonal(cov, axis1=0, axis2=1).T, std**2, rtol=1e-10)
    np.testing.assert_allclose(np.diagonal(out, axis1=1, axis2=2), std**2, rtol=1e-10)
    np.testing.assert_allclose(out, np.transpose(out, (0, 2, 1)))
    draws = reg.sample_y(X[:2], n_samples=4000, random_state=0)
    assert draws.shape == (2, 3, 4000)
    # Correlated across outputs, as the output covariance says.
    np.testing.assert_allclose(np.cov(draws[0]), out[0], atol=0.1 * np.max(np.abs(out[0])))


def test_one_column_targets_are_unchanged_by_the_new_parameters():
    X, Y = _regression(80)
    a = SparseGPRegressor(n_inducing=10, random_state=0).fit(X, Y[:, 0]).predict(X)
    b = SparseGPRegressor(n_inducing=10, random_state=0, missing_targets="mask").fit(X, Y[:, 0])
    assert b.predict(X).shape == (80,)
    c = SparseGPRegressor(n_inducing=10, random_state=0).fit(X, Y[:, :1]).predict(X)
    np.testing.assert_array_equal(a, c[:, 0] if c.ndim == 2 else c)


def test_clear_errors_name_what_to_change():
    X, Y = _regression(60)
    Y[3, 1] = np.nan
    with pytest.raises(ValueError, match="missing_targets='mask'"):
        SparseGPRegressor(n_inducing=5).fit(X, Y)
    Yinf = Y.copy()
    Yinf[4, 0] = np.inf
    with pytest.raises(ValueError, match="inf"):
        SparseGPRegressor(n_inducing=5, missing_targets="mask").fit(X, Yinf)
    Yempty = Y.copy()
    Yempty[:, 2] = np.nan
    with pytest.raises(ValueError, match=r"column\(s\) \[2\]"):
        SparseGPRegressor(n_inducing=5, missing_targets="mask").fit(X, Yempty)
    with pytest.raises(ValueError, match="likelihood='gaussian'"):
        SparseGPRegressor(n_inducing=5, n_latent=2, likelihood="student_t").fit(X, Y[:, 0])
    with pytest.raises(ValueError, match="WhiteKernel"):
        SparseGPRegressor(kernel=RBF() + WhiteKernel(), n_inducing=5, n_latent=2,
                          missing_targets="mask").fit(X, Y)


def test_normalisation_uses_each_columns_observed_entries():
    X, Y = _regression(100)
    Ym = Y.copy()
    Ym[:50, 0] = np.nan
    reg = SparseGPRegressor(n_inducing=10, missing_targets="mask", max_iter=5, random_state=0).fit(X, Ym)
    np.testing.assert_allclose(reg._y_train_mean[0], np.mean(Y[50:, 0]))
    np.testing.assert_allclose(reg._y_train_std[0], np.std(Y[50:, 0]))


def test_same_random_state_same_model_clone_pickle_and_grid_search():
    X, Y = _regression(90)
    Y[np.random.default_rng(2).random(Y.shape) < 0.1] = np.nan
    reg = SparseGPRegressor(n_inducing=10, n_latent=2, missing_targets="mask", random_state=0, max_iter=20)
    a = reg.fit(X, Y).predict(X)
    b = clone(reg).fit(X, Y).predict(X)
    np.testing.assert_array_equal(a, b)
    loaded = pickle.loads(pickle.dumps(reg))
    np.testing.assert_array_equal(loaded.predict(X), a)
    search = GridSearchCV(SparseGPRegressor(missing_targets="mask", random_state=0, max_iter=10),
                          {"n_latent": [1, 2], "n_inducing": [5, 10]}, cv=2).fit(X, Y)
    assert search.best_params_["n_latent"] in (1, 2)
    pipe = make_pipeline(StandardScaler(), SparseGPRegressor(n_inducing=8, n_latent=2, missing_targets="mask",
                                                             random_state=0, max_iter=10)).fit(X, Y)
    assert pipe.predict(X).shape == (90, 3)


def test_partial_fit_warm_start_float32_and_dask_chunks_with_nan():
    X, Y = _regression(200)
    Y[np.random.default_rng(3).random(Y.shape) < 0.1] = np.nan
    reg = SparseGPRegressor(n_inducing=10, n_latent=2, missing_targets="mask", batch_size=50, random_state=0)
    order = np.random.default_rng(4).permutation(200)
    for _ in range(10):
        for rows in np.array_split(order, 4):
            reg.partial_fit(X[rows], Y[rows], n_data=200)
    assert reg.score(X, Y) > 0.8
    warm = SparseGPRegressor(n_inducing=10, n_latent=2, missing_targets="mask", random_state=0, max_iter=5,
                             warm_start=True)
    warm.fit(X, Y)
    warm.fit(X, Y)
    assert warm.score(X, Y) > 0.9
    single = SparseGPRegressor(n_inducing=10, n_latent=2, missing_targets="mask", random_state=0, max_iter=10,
                               dtype="float32").fit(X, Y)
    assert single.score(X, Y) > 0.9
    da = pytest.importorskip("dask.array")
    lazy = SparseGPRegressor(n_inducing=10, n_latent=2, missing_targets="mask", batch_size=50, random_state=0,
                             max_iter=10).fit(da.from_array(X, chunks=50), da.from_array(Y, chunks=(50, 3)))
    assert lazy.score(X, Y) > 0.8


# --- other array libraries -----------------------------------------------------------------------
@pytest.mark.parametrize("route", ["strict_device1", "torch_dispatch", "float32",
                                   pytest.param("cupy_backend", marks=pytest.mark.gpu),
                                   pytest.param("torch_backend", marks=pytest.mark.gpu)])
def test_lmc_on_other_array_libraries_matches_numpy(route, monkeypatch):
    """The same fit from a fixed start (no search: it is compared separately) on arrays of
    another library, on a device that refuses conversions, through the ``backend`` option,
    and in float32, gives numpy's predictions (float64: to rounding; float32: to its
    tolerance)."""
    import sklearn

    from ._fit_checks import without_search

    without_search(monkeypatch)
    monkeypatch.setenv("SCIPY_ARRAY_API", "1")
    X, Y = _regression(80)
    Y[np.random.default_rng(5).random(Y.shape) < 0.15] = np.nan
    params = dict(n_inducing=8, n_latent=2, missing_targets="mask", batch_size=20, max_iter=3, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = SparseGPRegressor(**params).fit(X, Y).predict(X[:10], return_std=True)
        if route == "strict_device1":
            xs = pytest.importorskip("array_api_strict")
            device = xs.Device("device1")
            with sklearn.config_context(array_api_dispatch=True):
                reg = SparseGPRegressor(**params).fit(xs.asarray(X, device=device), xs.asarray(Y, device=device))
                out = reg.predict(xs.asarray(X[:10], device=device), return_std=True)
            out = [np.asarray(o.to_device(xs.Device("CPU_DEVICE"))) for o in out]
        elif route == "torch_dispatch":
            torch = pytest.importorskip("torch")
            with sklearn.config_context(array_api_dispatch=True):
                reg = SparseGPRegressor(**params).fit(torch.asarray(X), torch.asarray(Y))
                out = [o.numpy() for o in reg.predict(torch.asarray(X[:10]), return_std=True)]
        elif route.endswith("_backend"):
            from ._array_libs import require_gpu

            require_gpu(route.split("_")[0])
            out = SparseGPRegressor(backend=route.split("_")[0], **params).fit(X, Y).predict(X[:10], return_std=True)
        else:
            out = SparseGPRegressor(dtype="float32", **params).fit(X, Y).predict(X[:10], return_std=True)
    tolerance = 1e-3 if route == "float32" else 1e-8
    for got, want in zip(out, reference):
        np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)


def test_joint_q_in_closed_form_attains_the_collapsed_bound_and_its_variances():
    """The joint optimum set in closed form (the end of a coupled-basis fit): its ELBO over
    the rows is the collapsed bound, its output variances those of the dense joint
    posterior, and the mean-field q of the same call (same means) lies below it."""
    X, Y = _data(n=40)
    model = _model(3, 3, m=6, X=X, random_q=False)
    model.optimal_q_over([(X, Y)], joint=False)
    mean_field = model.elbo(X, Y)
    model.optimal_q_over([(X[:15], Y[:15]), (X[15:], Y[15:])], joint=True)
    joint = model.elbo(X, Y)
    np.testing.assert_allclose(joint, model.collapsed_evaluate(X, Y).elbo, rtol=1e-9)
    assert mean_field < joint
    # The dense joint posterior over the whitened values: output variances at new rows.
    kuu, proj, kdiag, low = _dense_latent_prior(model, X)
    W, s2 = model.state.mixing, model.noise.value
    seen = ~np.isnan(Y)
    Phi = np.array([np.concatenate([W[p, l] * (proj[l][n] @ low[l]) for l in range(3)]) for n, p in zip(*np.nonzero(seen))])
    beta = 1.0 / s2[np.nonzero(seen)[1]]
    cov = np.linalg.inv(np.eye(18) + Phi.T @ (beta[:, None] * Phi))
    Xs = np.random.default_rng(9).uniform(-2, 2, (5, 2))
    _, proj_s, kdiag_s, _ = _dense_latent_prior(model, Xs)
    for n in range(5):
        for p in range(3):
            phi = np.concatenate([W[p, l] * (proj_s[l][n] @ low[l]) for l in range(3)])
            prior = sum(W[p, l] ** 2 * (kdiag_s[l][n] - proj_s[l][n] @ kuu[l] @ proj_s[l][n]) for l in range(3))
            want = prior + phi @ cov @ phi
            np.testing.assert_allclose(model.output_marginals(Xs[n:n + 1])[1][0, p], want, rtol=1e-8)
            np.testing.assert_allclose(model.predictor().latent(None, Xs[n:n + 1])[1][0, p], want, rtol=1e-8)


def test_joint_variances_and_passes_over_the_rows_do_not_depend_on_their_pieces(monkeypatch):
    """The joint q's output variances in chunks of one row equal those in one chunk; a pass
    over the rows (the joint q, the bound) cuts each chunk into one piece per distinct
    kernel, and gives what one piece of all rows gives."""
    X, Y = _data(n=40)
    model = _model(3, 3, m=6, X=X, random_q=False)
    assert len(model.distinct_kernels()[0]) == 3
    model.optimal_q_over([(X, Y)], joint=True)
    whole_q, whole_bound = model.state, model.elbo_of_chunks([(X, Y)])
    Xs = np.random.default_rng(9).uniform(-2, 2, (7, 2))
    whole_var = model.predictor().latent(None, Xs)[1]
    monkeypatch.setattr(collapsed, "CHUNK_ENTRIES", 1)
    np.testing.assert_allclose(model.predictor().latent(None, Xs)[1], whole_var, rtol=1e-12)
    pieces = list(rows_per_kernel([(X[:22], Y[:22]), (X[22:], Y[22:])], 3))
    assert [p[0].shape[0] for p in pieces] == [8, 8, 6, 6, 6, 6]
    np.testing.assert_array_equal(np.concatenate([p[0] for p in pieces]), X)
    model.optimal_q_over([(X[:22], Y[:22]), (X[22:], Y[22:])], joint=True)
    np.testing.assert_allclose(model.state.joint_inverse_factor, whole_q.joint_inverse_factor, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(model.elbo_of_chunks([(X, Y)]), whole_bound, rtol=1e-12)


def test_log_marginal_likelihood_takes_every_latent_kernels_theta():
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(60, 1))
    Y = np.c_[np.sin(6 * X[:, 0]), np.cos(6 * X[:, 0]), X[:, 0]] + 0.05 * rng.normal(size=(60, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = SparseGPRegressor(n_latent=2, n_inducing=20, random_state=0).fit(X, Y)
    theta = np.concatenate([kernel.theta for kernel in reg.latent_kernels_])
    # The joint q's bound, the one fit stores (damped mean-field steps stopped 0.01 below).
    assert reg.log_marginal_likelihood(theta) == pytest.approx(reg.log_marginal_likelihood_value_, abs=1e-8)
    with pytest.raises(ValueError, match=f"{theta.size} entries, the 2 latent kernels' thetas concatenated"):
        reg.log_marginal_likelihood(reg.kernel_.theta)
    reg.log_marginal_likelihood(theta + 0.1, clone_kernel=False)
    np.testing.assert_allclose([kernel.theta for kernel in reg.latent_kernels_], (theta + 0.1).reshape(2, -1))
    np.testing.assert_allclose(reg.kernel_.theta, theta[: theta.size // 2] + 0.1)


def test_default_kernel_fixes_its_amplitude_under_an_lmc_only():
    # Under n_latent each column of W scales its latent, so the default kernel's amplitude
    # stays at 1; independent outputs and a user's kernel keep theirs learnable.
    X, Y = _data(n=40, n_outputs=2, missing=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lmc = SparseGPRegressor(n_latent=2, n_inducing=10, max_iter=5, random_state=0).fit(X, Y)
        independent = SparseGPRegressor(n_inducing=10, max_iter=5, random_state=0).fit(X, Y)
        given = SparseGPRegressor(kernel=ConstantKernel(2.0) * RBF(), n_latent=2, n_inducing=10, max_iter=5,
                                  random_state=0).fit(X, Y)
    for kernel in lmc.latent_kernels_:
        assert kernel.k1.constant_value == 1.0
        assert kernel.k1.hyperparameter_constant_value.fixed
        assert kernel.theta.size == X.shape[1]
    assert not independent.kernel_.k1.hyperparameter_constant_value.fixed
    assert independent.kernel_.k1.constant_value != 1.0
    assert all(kernel.k1.constant_value != 2.0 for kernel in given.latent_kernels_)


def test_default_length_scales_start_wider_under_an_lmc_on_many_features():
    """On ten features, rows a typical distance apart are all but uncorrelated at length
    scales of one spread; under a learned W the search then fell to W = 0, all noise
    (R^2 = 0). The LMC's default kernel starts its length scales at sqrt(d) spreads and
    fits as the single-output default does; without n_latent the start is one spread."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 10))
    y = 2.0 * X[:, 4] + np.sin(X[:, 4]) + 0.5 * rng.normal(size=200)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lmc = SparseGPRegressor(n_latent=1, n_inducing=10, random_state=0).fit(X, y)
        single = SparseGPRegressor(n_inducing=10, random_state=0).fit(X, y)
    assert single.score(X, y) > 0.9
    assert lmc.score(X, y) > single.score(X, y) - 0.01
    assert np.abs(lmc.mixing_matrix_).min() > 0.1


def test_auto_noise_bounds_floor_each_output_at_1e_3_under_an_lmc_only():
    # Two noiseless outputs that are exact combinations of one smooth function: left
    # free, their noise would go to the lowest bound allowed.
    rng = np.random.default_rng(0)
    X = np.sort(rng.uniform(-3, 3, size=(40, 1)), axis=0)
    g = np.sin(X[:, 0])
    Y = np.column_stack([g, 2.0 * g])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lmc = SparseGPRegressor(n_latent=1, n_inducing=10, random_state=0).fit(X, Y)
        single = SparseGPRegressor(n_inducing=10, random_state=0).fit(X, g)
        given = SparseGPRegressor(n_latent=1, n_inducing=10, noise_variance_bounds=(1e-6, 1e3),
                                  random_state=0).fit(X, Y)
    assert lmc.noise_variance_.shape == (2,)
    np.testing.assert_allclose(lmc.noise_variance_, 1e-3, rtol=1e-6)
    assert single.noise_variance_ < 5e-5
    assert np.all(given.noise_variance_ < 5e-5)


def test_one_batch_lmc_search_starts_at_the_jitter_of_its_noise_floor(monkeypatch):
    """A one-batch LMC fit searches once, at the jitter of its noise floor from the start
    (the noises end at the floor, which would otherwise rerun the search with a smaller
    jitter); independent outputs with masking keep the jitter that follows the noise."""
    from skgp_sparse.fit import search
    from skgp_sparse.fit.jitter import auto_jitter

    rng = np.random.default_rng(0)
    X = np.sort(rng.uniform(-3, 3, size=(40, 1)), axis=0)
    g = np.sin(X[:, 0])
    Y = np.column_stack([g, 2.0 * g])
    Y[:5, 0] = np.nan
    searches = []
    original = search.optimise_collapsed

    def recording(model, *args, **kwargs):
        searches.append((model.jitter, getattr(model, "search_noise_floor", lambda: None)(),
                         auto_jitter(model.kernel, model.state.inducing, 1e-3)))
        return original(model, *args, **kwargs)

    monkeypatch.setattr(search, "optimise_collapsed", recording)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lmc = SparseGPRegressor(n_latent=1, missing_targets="mask", n_inducing=10, random_state=0).fit(X, Y)
    np.testing.assert_allclose(lmc.noise_variance_, 1e-3, rtol=1e-6)
    assert len(searches) == 1
    jitter, floor, at_floor = searches[0]
    assert floor == pytest.approx(1e-3)
    assert jitter == pytest.approx(at_floor, rel=1e-12)
    searches.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        SparseGPRegressor(missing_targets="mask", n_inducing=10, random_state=0).fit(X, Y)
    assert [floor for _, floor, _ in searches][:1] == [None]


def test_lmc_stream_searches_fewer_rows_and_iterations_and_stops_at_its_step_cap(monkeypatch):
    """An LMC's minibatch fit: its exact search reads LMC_SEARCH_ROWS rows, its second stage
    runs LMC_INDUCING_SEARCH_ITER iterations, and the stream after it stops after
    LMC_STREAM_STEPS steps (rounded up to epochs) without a ConvergenceWarning. Independent
    outputs and a single output keep SEARCH_ROWS, the second stage of their rows and
    max_iter; so does a warm start of the LMC (no search)."""
    from sklearn.exceptions import ConvergenceWarning

    from skgp_sparse.fit import plan as fit_plan, search, training

    monkeypatch.setattr(fit_plan, "SEARCH_ROWS", 60)
    monkeypatch.setattr(fit_plan, "LMC_SEARCH_ROWS", 30)
    monkeypatch.setattr(search, "LMC_INDUCING_SEARCH_ITER", 7)
    monkeypatch.setattr(training, "LMC_STREAM_STEPS", 5)  # 2 epochs of 4 steps
    searches = []
    original = search.optimise_collapsed

    def recording(model, X, Y, *args, **kwargs):
        searches.append((X.shape[0], kwargs["max_iter"]))
        return original(model, X, Y, *args, **kwargs)

    monkeypatch.setattr(search, "optimise_collapsed", recording)
    X, Y = _data(n=100, n_outputs=3, missing=0.1)
    params = dict(missing_targets="mask", n_inducing=8, batch_size=25, max_iter=6, tol=0.0, random_state=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lmc = SparseGPRegressor(n_latent=2, **params).fit(X, Y)
    assert searches == [(30, search.SEARCH_FIRST_STAGE_MAX_ITER), (30, 7)]
    assert lmc.n_iter_ == 2
    assert not any(issubclass(w.category, ConvergenceWarning) and "max_iter" in str(w.message) for w in caught)
    searches.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lmc.set_params(warm_start=True).fit(X, Y)
    assert searches == [] and lmc.n_iter_ == 6
    for other, y in ((dict(), Y), (dict(missing_targets="error"), np.nan_to_num(Y[:, 0]))):
        searches.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fitted = SparseGPRegressor(**{**params, **other}).fit(X, y)
        assert searches == [(60, search.SEARCH_FIRST_STAGE_MAX_ITER),
                            (60, search.inducing_search_iterations(100))]
        assert fitted.n_iter_ == 6
