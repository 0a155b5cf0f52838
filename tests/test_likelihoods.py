"""Likelihoods: derivatives by finite differences, expectations against independent integrals."""

import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import expit, ndtr

from skgp_sparse.likelihoods.bernoulli import _SMALL_VAR
from skgp_sparse.likelihoods import (
    BernoulliLikelihood,
    GaussianLikelihood,
    RobustMaxLikelihood,
    SoftmaxLikelihood,
)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def fd_gradients(lik, y, mean, var, rel_step_var=1e-3):
    """Central differences of the summed-per-row ELL in every column of mean and var.

    Rows are independent, so one perturbation of a whole column differentiates every row.
    Steps follow each row's scale: the mean step its smallest standard deviation (the
    multi-class ELL bends on that scale), the variance step the variance itself, so that
    it stays inside (0, v) for tiny variances.
    """
    h_mean = 1e-4 * np.sqrt(np.minimum(var.min(axis=1), 1.0))

    def ell(m, v):
        return lik.expected_log_lik(y, m, v)[0].sum(axis=1)

    d_mean, d_var = np.zeros_like(mean), np.zeros_like(var)
    for j in range(mean.shape[1]):
        step = np.zeros_like(mean)
        step[:, j] = h_mean
        d_mean[:, j] = (ell(mean + step, var) - ell(mean - step, var)) / (2 * h_mean)
        h = rel_step_var * np.minimum(var[:, j], 1.0)
        step = np.zeros_like(var)
        step[:, j] = h
        d_var[:, j] = (ell(mean, var + step) - ell(mean, var - step)) / (2 * h)
    return d_mean, d_var


def assert_derivatives_match(lik, y, mean, var, rtol, atol=1e-9, rel_step_var=1e-3):
    ell, d_mean, d_var = lik.expected_log_lik(y, mean, var)
    assert ell.shape == (mean.shape[0], 1)
    assert d_mean.shape == mean.shape and d_var.shape == var.shape
    fd_mean, fd_var = fd_gradients(lik, y, mean, var, rel_step_var)
    np.testing.assert_allclose(d_mean, fd_mean, rtol=rtol, atol=atol)
    np.testing.assert_allclose(d_var, fd_var, rtol=rtol, atol=atol)
    return d_mean, d_var


def bernoulli_reference(link, y, m, v):
    """E_{N(f | m, v)}[log p(y | f)] by adaptive quadrature in the standardised variable."""
    log_link = stats.norm.logcdf if link == "probit" else (lambda f: -np.logaddexp(0.0, -f))
    sign = 2.0 * y - 1.0

    def integrand(t):
        return log_link(sign * (m + np.sqrt(v) * t)) * stats.norm.pdf(t)

    return integrate.quad(integrand, -np.inf, np.inf, epsabs=1e-13, epsrel=1e-12)[0]


BERNOULLI_MEANS = np.array([[-3.0], [-0.5], [0.0], [0.3], [2.0], [6.0]])
BERNOULLI_LABELS = np.array([[1.0], [1.0], [0.0], [0.0], [1.0], [0.0]])


# --- Gaussian ---------------------------------------------------------------------


@pytest.mark.parametrize("var0", [1e-6, 0.3, 20.0])
def test_gaussian_derivatives_match_finite_differences(rng, var0):
    lik = GaussianLikelihood(0.7)
    y = rng.standard_normal((6, 2))
    mean = rng.standard_normal((6, 2))
    var = var0 * np.exp(rng.uniform(-1, 1, (6, 2)))
    ell, d_mean, d_var = lik.expected_log_lik(y, mean, var)
    fd_mean = (lik.expected_log_lik(y, mean + 1e-5, var)[0] - lik.expected_log_lik(y, mean - 1e-5, var)[0]) / 2e-5
    h = 1e-3 * var
    fd_var = (lik.expected_log_lik(y, mean, var + h)[0] - lik.expected_log_lik(y, mean, var - h)[0]) / (2 * h)
    np.testing.assert_allclose(d_mean, fd_mean, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(d_var, fd_var, rtol=1e-6, atol=1e-9)

    def ell_at(log_noise):
        return GaussianLikelihood(np.exp(log_noise)).expected_log_lik(y, mean, var)[0]

    log_s2 = np.log(lik.noise_variance)
    fd_noise = (ell_at(log_s2 + 1e-5) - ell_at(log_s2 - 1e-5)) / 2e-5
    np.testing.assert_allclose(lik.d_log_noise(y, mean, var), fd_noise, rtol=1e-7, atol=1e-9)


# --- Bernoulli --------------------------------------------------------------------


@pytest.mark.parametrize("link", ["probit", "logit"])
@pytest.mark.parametrize("var0, n_points", [
    (1e-8, 20), (1e-3, 20), (1.0, 20), (4.0, 20), (25.0, 20), (100.0, 20), (25.0, 5), (25.0, 200),
])
def test_bernoulli_derivatives_match_finite_differences(link, var0, n_points):
    # The derivatives are those of the quadrature sum, so they match its finite
    # differences at any number of nodes, at large variance too, where the nodes resolve
    # the link's bend at f = 0 poorly (0.5 E[g''] on 20 nodes is off by 5% at v = 25
    # and by 160% at v = 100; a gradient built from it failed the lml's check).
    lik = BernoulliLikelihood(link, n_points)
    var = np.full_like(BERNOULLI_MEANS, var0)
    # The symmetric nodes make the quadrature a smooth function of v (not of sqrt(v)), so
    # a large relative step is safe, and needed to beat rounding when v is tiny.
    rel_step = 0.5 if var0 < 1e-2 else 1e-4
    assert_derivatives_match(lik, BERNOULLI_LABELS, BERNOULLI_MEANS, var, rtol=1e-6, atol=1e-7, rel_step_var=rel_step)


@pytest.mark.parametrize("link", ["probit", "logit"])
def test_bernoulli_variance_derivative_is_negative_at_every_variance(link):
    # The binary search's pseudo-observations take -2 d_var as a row's precision, and
    # need it positive: log-concave links make the quadrature sum concave in f's spread.
    mean = np.repeat(np.linspace(-30.0, 30.0, 61), 6)[:, None]
    var = np.tile([0.0, 1e-3, 0.5, 30.0, 1e3, 1e5], 61)[:, None]
    for label in (0.0, 1.0):
        d_var = BernoulliLikelihood(link).expected_log_lik(np.full_like(mean, label), mean, var)[2]
        assert np.all(d_var < 0.0)


@pytest.mark.parametrize("link", ["probit", "logit"])
def test_bernoulli_variance_derivative_is_continuous_at_its_small_variance_branch(link):
    # At and below the floor the variance derivative is 0.5 E[g''], above it the sum's
    # own derivative; where the rule is exact to rounding the switch must not show.
    lik = BernoulliLikelihood(link)
    mean = np.repeat(BERNOULLI_MEANS, 2, axis=0)
    labels = np.repeat(BERNOULLI_LABELS, 2, axis=0)
    var = np.tile([[_SMALL_VAR], [_SMALL_VAR * (1.0 + 1e-12)]], (len(BERNOULLI_MEANS), 1))
    d_var = lik.expected_log_lik(labels, mean, var)[2]
    np.testing.assert_allclose(d_var[0::2], d_var[1::2], rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("link", ["probit", "logit"])
def test_bernoulli_variance_derivative_is_bounded_as_variance_vanishes(link):
    lik = BernoulliLikelihood(link)
    mean = BERNOULLI_MEANS
    # With v -> 0 the derivative tends to 0.5 g''(m); for the logit g'' = -s(1 - s).
    d_var = lik.expected_log_lik(BERNOULLI_LABELS, mean, np.zeros_like(mean))[2]
    if link == "logit":
        np.testing.assert_allclose(d_var, -0.5 * expit(mean) * expit(-mean), rtol=1e-12)
    assert np.all(np.isfinite(d_var)) and np.all(d_var <= 0.0) and np.all(d_var >= -0.5)


@pytest.mark.parametrize("link", ["probit", "logit"])
@pytest.mark.parametrize("var0, n_points, rtol", [(1e-6, 20, 1e-12), (1.0, 20, 1e-8), (4.0, 20, 2e-5), (25.0, 200, 1e-7)])
def test_bernoulli_ell_matches_adaptive_quadrature(link, var0, n_points, rtol):
    lik = BernoulliLikelihood(link, n_points)
    var = np.full_like(BERNOULLI_MEANS, var0)
    ell = lik.expected_log_lik(BERNOULLI_LABELS, BERNOULLI_MEANS, var)[0]
    ref = [bernoulli_reference(link, y, m, var0) for y, m in zip(BERNOULLI_LABELS[:, 0], BERNOULLI_MEANS[:, 0])]
    np.testing.assert_allclose(ell[:, 0], ref, rtol=rtol, atol=1e-14)


@pytest.mark.parametrize("link", ["probit", "logit"])
def test_bernoulli_ell_matches_monte_carlo(link):
    lik = BernoulliLikelihood(link)
    mean = np.array([[-1.0], [0.4], [2.5]])
    var = np.array([[0.5], [2.0], [1.0]])
    y = np.array([[1.0], [0.0], [0.0]])
    ell = lik.expected_log_lik(y, mean, var)[0][:, 0]
    f = mean + np.sqrt(var) * np.random.default_rng(1).standard_normal((3, 200_000))
    z = (2 * y - 1) * f
    log_p = stats.norm.logcdf(z) if link == "probit" else -np.logaddexp(0.0, -z)
    np.testing.assert_allclose(ell, log_p.mean(axis=1), rtol=1e-2)


def test_bernoulli_ell_is_stable_far_in_the_tails():
    lik = BernoulliLikelihood("probit")
    mean = np.array([[-40.0], [40.0]])
    ell, d_mean, d_var = lik.expected_log_lik(np.ones((2, 1)), mean, np.full((2, 1), 0.5))
    assert np.all(np.isfinite(ell)) and np.all(np.isfinite(d_mean)) and np.all(np.isfinite(d_var))
    # log Phi(f) ~ -f^2 / 2 on the left: the ELL is large and negative, not -inf.
    assert -810.0 < ell[0, 0] < -790.0 and abs(ell[1, 0]) < 1e-200
    np.testing.assert_allclose(d_var[0, 0], -0.5, rtol=1e-3)


def test_probit_predict_proba_is_the_closed_form_and_the_integral(rng):
    lik = BernoulliLikelihood("probit")
    mean = rng.normal(scale=2.0, size=(7, 1))
    var = np.exp(rng.uniform(-4, 3, size=(7, 1)))
    p = lik.predict_proba(mean, var)
    assert p.shape == (7, 1)
    np.testing.assert_allclose(p, ndtr(mean / np.sqrt(1 + var)), rtol=1e-14)
    ref = [integrate.quad(lambda t: ndtr(m + np.sqrt(v) * t) * stats.norm.pdf(t), -np.inf, np.inf, epsabs=1e-13)[0]
           for m, v in zip(mean[:, 0], var[:, 0])]
    np.testing.assert_allclose(p[:, 0], ref, rtol=1e-9, atol=1e-13)


def test_logit_predict_proba_is_the_integral(rng):
    lik = BernoulliLikelihood("logit")
    mean = rng.normal(scale=2.0, size=(5, 1))
    var = np.exp(rng.uniform(-4, 1, size=(5, 1)))
    ref = [integrate.quad(lambda t: expit(m + np.sqrt(v) * t) * stats.norm.pdf(t), -np.inf, np.inf, epsabs=1e-13)[0]
           for m, v in zip(mean[:, 0], var[:, 0])]
    np.testing.assert_allclose(lik.predict_proba(mean, var)[:, 0], ref, rtol=1e-6)


def test_bernoulli_rejects_unknown_link():
    with pytest.raises(ValueError):
        BernoulliLikelihood("cauchit")


# --- RobustMax --------------------------------------------------------------------


def multiclass_case(rng, n, K, var0, near_tie):
    """Means and variances; with near_tie the means differ by about one standard deviation,
    so that even at tiny variances the argmax is uncertain and every derivative is alive."""
    var = var0 * np.exp(rng.uniform(-1, 1, (n, K)))
    if near_tie:
        mean = rng.standard_normal((n, 1)) + np.sqrt(var) * rng.standard_normal((n, K))
    else:
        mean = 1.5 * rng.standard_normal((n, K))
    return mean, var, np.arange(n) % K


@pytest.mark.parametrize("K", [2, 4])
@pytest.mark.parametrize("var0, near_tie", [(1e-8, True), (1e-3, True), (1.0, False), (1.0, True), (50.0, False)])
def test_robustmax_derivatives_match_finite_differences(rng, K, var0, near_tie):
    lik = RobustMaxLikelihood(K)
    mean, var, y = multiclass_case(rng, 8, K, var0, near_tie)
    d_mean, _ = assert_derivatives_match(lik, y, mean, var, rtol=1e-5, atol=1e-7)
    assert np.abs(d_mean).max() > 1e-3  # the case does exercise the derivatives
    # Labels given as a float column give the same answer.
    np.testing.assert_allclose(lik.expected_log_lik(y[:, None].astype(float), mean, var)[1], d_mean)


def test_robustmax_argmax_probability_matches_monte_carlo(rng):
    lik = RobustMaxLikelihood(4)
    mean, var, _ = multiclass_case(rng, 5, 4, 1.0, near_tie=True)
    P = lik.argmax_probabilities(mean, var)
    f = mean[:, None, :] + np.sqrt(var)[:, None, :] * np.random.default_rng(2).standard_normal((5, 200_000, 4))
    counts = np.stack([(f.argmax(axis=2) == k).mean(axis=1) for k in range(4)], axis=1)
    np.testing.assert_allclose(P, counts, atol=5e-3)


def test_robustmax_ell_is_the_mixture_of_hit_and_miss(rng):
    eps, K = 0.01, 3
    lik = RobustMaxLikelihood(K, epsilon=eps)
    mean, var, y = multiclass_case(rng, 6, K, 0.5, near_tie=True)
    P = lik.argmax_probabilities(mean, var)[np.arange(6), y]
    ell = lik.expected_log_lik(y, mean, var)[0][:, 0]
    # argmax_probabilities is renormalised over classes, the ELL is not: they agree to
    # the quadrature error.
    np.testing.assert_allclose(ell, P * np.log(1 - eps) + (1 - P) * np.log(eps / (K - 1)), rtol=1e-3)


def test_robustmax_probabilities_sum_to_one(rng):
    lik = RobustMaxLikelihood(5)
    mean, var, _ = multiclass_case(rng, 9, 5, 2.0, near_tie=False)
    p = lik.predict_proba(mean, var)
    assert p.shape == (9, 5) and np.all(p > 0)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-14)


def test_robustmax_two_classes_is_the_probit_of_the_difference(rng):
    eps = 1e-3
    mean = rng.standard_normal((6, 2))
    var = np.exp(rng.uniform(-2, 1, (6, 2)))
    # With K = 2, Pr[f_0 > f_1] = Phi((m_0 - m_1) / sqrt(v_0 + v_1)) exactly. Twenty nodes
    # resolve it to ~1e-3 when one variance is much smaller than the other (the integrand
    # is then a sharp step on the scale of the nodes); a hundred to ~1e-10.
    P0 = ndtr((mean[:, 0] - mean[:, 1]) / np.sqrt(var.sum(axis=1)))
    for n_points, atol in ((20, 5e-3), (100, 1e-7)):
        P = RobustMaxLikelihood(2, epsilon=eps, n_points=n_points).argmax_probabilities(mean, var)
        np.testing.assert_allclose(P[:, 0], P0, atol=atol)
    lik = RobustMaxLikelihood(2, epsilon=eps)
    # Small variance: the larger latent wins with probability 1 - eps.
    mean = np.array([[1.0, -1.0], [-0.2, 0.3]])
    p = lik.predict_proba(mean, np.full((2, 2), 1e-4))
    np.testing.assert_allclose(p, [[1 - eps, eps], [eps, 1 - eps]], atol=1e-12)
    ell = lik.expected_log_lik(np.array([0, 0]), mean, np.full((2, 2), 1e-4))[0][:, 0]
    np.testing.assert_allclose(ell, [np.log(1 - eps), np.log(eps)], rtol=1e-9)


def test_robustmax_rejects_bad_labels():
    lik = RobustMaxLikelihood(3)
    mean = np.zeros((2, 3))
    for y in (np.array([0, 3]), np.array([0.5, 1.0]), np.array([-1, 0])):
        with pytest.raises(ValueError):
            lik.expected_log_lik(y, mean, np.ones((2, 3)))


# --- Softmax ----------------------------------------------------------------------


@pytest.mark.parametrize("var0", [1e-6, 1e-3, 1.0, 30.0])
def test_softmax_derivatives_match_finite_differences(rng, var0):
    lik = SoftmaxLikelihood(4)
    mean, var, y = multiclass_case(rng, 8, 4, var0, near_tie=False)
    assert_derivatives_match(lik, y, mean, var, rtol=1e-4, atol=1e-8)


def test_softmax_variance_derivative_tends_to_half_the_hessian(rng):
    # The draws are antithetic and whitened, so as v -> 0 (even at unequal rates across
    # classes) d/dv_k tends to 0.5 d^2 log softmax_y / d f_k^2 = -0.5 p_k (1 - p_k).
    lik = SoftmaxLikelihood(3)
    mean = rng.standard_normal((4, 3))
    var = 1e-12 * np.exp(rng.uniform(-3, 3, (4, 3)))
    d_var = lik.expected_log_lik(np.arange(4) % 3, mean, var)[2]
    p = np.exp(mean) / np.exp(mean).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(d_var, -0.5 * p * (1 - p), rtol=1e-4)


def test_softmax_is_deterministic(rng):
    mean, var, y = multiclass_case(rng, 6, 3, 1.0, near_tie=False)
    a, b = SoftmaxLikelihood(3, seed=4), SoftmaxLikelihood(3, seed=4)
    first = a.expected_log_lik(y, mean, var)
    for again in (a.expected_log_lik(y, mean, var), b.expected_log_lik(y, mean, var)):
        for x, z in zip(first, again):
            np.testing.assert_array_equal(x, z)
    np.testing.assert_array_equal(a.predict_proba(mean, var), b.predict_proba(mean, var))
    other = SoftmaxLikelihood(3, seed=5).expected_log_lik(y, mean, var)[0]
    assert not np.array_equal(other, first[0])


def test_softmax_ell_matches_long_monte_carlo(rng):
    lik = SoftmaxLikelihood(3, n_samples=256)
    mean, var, y = multiclass_case(rng, 4, 3, 1.0, near_tie=False)
    ell = lik.expected_log_lik(y, mean, var)[0][:, 0]
    f = mean[:, None, :] + np.sqrt(var)[:, None, :] * np.random.default_rng(3).standard_normal((4, 200_000, 3))
    log_p = f - np.logaddexp.reduce(f, axis=2, keepdims=True)
    ref = log_p[np.arange(4), :, y].mean(axis=1)
    np.testing.assert_allclose(ell, ref, rtol=2e-2, atol=1e-2)


def test_softmax_predict_proba_rows_sum_to_one(rng):
    lik = SoftmaxLikelihood(5)
    mean, var, _ = multiclass_case(rng, 7, 5, 3.0, near_tie=False)
    p = lik.predict_proba(mean, var)
    assert p.shape == (7, 5) and np.all(p > 0)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-14)
    # Small variance: the softmax of the mean.
    p0 = lik.predict_proba(mean, np.full_like(var, 1e-12))
    np.testing.assert_allclose(p0, np.exp(mean) / np.exp(mean).sum(axis=1, keepdims=True), rtol=1e-8)


def test_softmax_rejects_odd_sample_count():
    with pytest.raises(ValueError):
        SoftmaxLikelihood(3, n_samples=63)
