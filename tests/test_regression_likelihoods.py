"""Student-t and Poisson likelihoods: expectations against adaptive quadrature, derivatives
against finite differences, limits and input checks."""

import numpy as np
import pytest
from scipy import integrate, optimize, stats
from scipy.special import gammaln

from skgp_sparse.likelihoods import GaussianLikelihood, PoissonLikelihood, StudentTLikelihood

SCALE = 0.5  # not 1, so that a scale / scale^2 mix-up shows


def col(values):
    return np.asarray(values, dtype=float).reshape(-1, 1)


# --- independent references ---------------------------------------------------------


def t_logpdf(resid, df, scale):
    """Student-t log-density, written with gammaln (the library uses betaln)."""
    return (
        gammaln(0.5 * (df + 1)) - gammaln(0.5 * df) - 0.5 * np.log(df * np.pi) - np.log(scale)
        - 0.5 * (df + 1) * np.log1p((resid / scale) ** 2 / df)
    )


def gaussian_expectation(g, m, v, kink=None):
    """E_{N(f | m, v)}[g(f)] by adaptive quadrature in the standardised variable.

    ``kink``: where g bends sharply (f = y for the Student-t), handed to quad as a
    breakpoint. Beyond 40 standard deviations the Gaussian weight is below 1e-300.
    """
    sd = np.sqrt(v)

    def integrand(t):
        return g(m + sd * t) * np.exp(-0.5 * t * t) / np.sqrt(2 * np.pi)

    points = None
    if kink is not None and abs((kink - m) / sd) < 40:
        points = [(kink - m) / sd]
    return integrate.quad(integrand, -40, 40, points=points, limit=400, epsabs=1e-14, epsrel=1e-13)[0]


def log_gaussian_expectation(log_g, m, v, kink=None):
    """log E_{N(f | m, v)}[exp(log_g(f))], with the integrand's peak factored out.

    The peak is located on a fine grid and refined by a bounded search, since for large
    counts it is narrower than the grid.
    """
    sd = np.sqrt(v)
    t_kink = (kink - m) / sd if kink is not None and abs((kink - m) / sd) < 40 else None

    def log_h(t):
        return log_g(m + sd * t) - 0.5 * t * t

    t = np.linspace(-40, 40, 20001)
    i = int(np.argmax(log_h(t)))
    t_peak = optimize.minimize_scalar(
        lambda s: -log_h(s), bounds=(t[max(i - 1, 0)], t[min(i + 1, t.size - 1)]),
        method="bounded", options={"xatol": 1e-12},
    ).x
    peak = log_h(t_peak)
    # Breakpoints on the peak's own scale (from its curvature), so that quad cannot step
    # over a peak much narrower than the range.
    dt = 1e-4
    curvature = -(log_h(t_peak + dt) - 2 * peak + log_h(t_peak - dt)) / dt**2
    width = 1.0 / np.sqrt(max(curvature, 1.0))
    points = {t_peak + k * width for k in (-30, -10, -3, 0, 3, 10, 30)}
    if t_kink is not None:
        points.add(t_kink)
    points = sorted(p for p in points if -40 < p < 40)
    total = integrate.quad(
        lambda s: np.exp(log_h(s) - peak), -40, 40, points=points, limit=400, epsabs=0, epsrel=1e-13
    )[0]
    return peak + np.log(total / np.sqrt(2 * np.pi))


def fd_mean_var(lik, y, mean, var, rel_step_var):
    """Central differences of the per-row expected log-likelihood in mean and var."""

    def ell(m, v):
        return lik.expected_log_lik(y, m, v)[0]

    h = 1e-5 * np.sqrt(np.maximum(var, 1e-2))
    d_mean = (ell(mean + h, var) - ell(mean - h, var)) / (2 * h)
    hv = rel_step_var * var
    d_var = (ell(mean, var + hv) - ell(mean, var - hv)) / (2 * hv)
    return d_mean, d_var


# --- Student-t: expected log-likelihood -------------------------------------------

#: Residuals y - mean in units of the scale: on the peak, on its shoulder, past the bend,
#: and two gross outliers.
T_RESIDUALS = np.array([0.0, 0.4, 3.0, 25.0, -60.0])


def t_grid(var_over_scale2):
    y = col(SCALE * T_RESIDUALS + 0.3)
    mean = np.full_like(y, 0.3)
    return y, mean, np.full_like(y, var_over_scale2 * SCALE**2)


@pytest.mark.parametrize("df", [2.1, 4.0, 30.0])
@pytest.mark.parametrize("var0", [1e-10, 1e-3, 0.3, 1.0])
def test_student_t_ell_matches_adaptive_quadrature(df, var0):
    # While var <= scale^2 the 32 default nodes resolve the bend of log p(y | f): the worst
    # case, df = 2.1 at var = scale^2, is 2e-7.
    lik = StudentTLikelihood(df, SCALE)
    y, mean, var = t_grid(var0)
    ell = lik.expected_log_lik(y, mean, var)[0][:, 0]
    ref = [
        gaussian_expectation(lambda f, yi=yi: t_logpdf(yi - f, df, SCALE), mi, vi, kink=yi)
        for yi, mi, vi in zip(y[:, 0], mean[:, 0], var[:, 0])
    ]
    np.testing.assert_allclose(ell, ref, rtol=1e-6)


@pytest.mark.parametrize("var0, n_points, rtol", [
    (4.0, 32, 5e-5), (10.0, 32, 1e-3), (10.0, 200, 1e-6), (100.0, 32, 5e-2),
])
def test_student_t_ell_accuracy_at_large_variance(var0, n_points, rtol):
    # Past var ~ df scale^2 the nodes straddle the bend: the error grows with var / scale^2
    # and falls with more nodes (df = 4; the measured worst cases are 1.4e-5, 4e-4, 7e-7
    # and 2e-2).
    lik = StudentTLikelihood(4.0, SCALE, n_points=n_points)
    y, mean, var = t_grid(var0)
    ell = lik.expected_log_lik(y, mean, var)[0][:, 0]
    ref = [
        gaussian_expectation(lambda f, yi=yi: t_logpdf(yi - f, 4.0, SCALE), mi, vi, kink=yi)
        for yi, mi, vi in zip(y[:, 0], mean[:, 0], var[:, 0])
    ]
    np.testing.assert_allclose(ell, ref, rtol=rtol)


@pytest.mark.parametrize("df", [2.1, 4.0, 30.0])
@pytest.mark.parametrize("var0", [1e-4, 0.3, 4.0, 30.0])
def test_student_t_mean_and_var_derivatives_match_finite_differences(df, var0):
    # Both are derivatives of the quadrature sum itself, so they match its differences to
    # the precision of the differences, even where the sum is a poor estimate of the
    # integral (var0 = 30). The sum is a smooth function of v (symmetric nodes), so at
    # small v a step of half the variance is safe, and needed to beat rounding.
    lik = StudentTLikelihood(df, SCALE)
    y, mean, var = t_grid(var0)
    ell, d_mean, d_var = lik.expected_log_lik(y, mean, var)
    assert ell.shape == d_mean.shape == d_var.shape == (5, 1)
    fd_mean, fd_var = fd_mean_var(lik, y, mean, var, rel_step_var=0.5 if var0 < 1e-2 else 1e-4)
    np.testing.assert_allclose(d_mean, fd_mean, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(d_var, fd_var, rtol=1e-6, atol=1e-9)


def test_student_t_var_derivative_below_the_switch_matches_finite_differences():
    # Below 1e-6 df scale^2 d_var is 0.5 E[g'']; the quadrature is a smooth function of v
    # (symmetric nodes), so a step of half the variance is safe and beats rounding.
    lik = StudentTLikelihood(4.0, SCALE)
    y, mean, var = t_grid(1e-8)
    _, d_var = fd_mean_var(lik, y, mean, var, rel_step_var=0.5)
    np.testing.assert_allclose(lik.expected_log_lik(y, mean, var)[2], d_var, rtol=1e-4, atol=1e-8)


def test_student_t_var_derivative_is_half_the_curvature_as_variance_vanishes():
    df = 4.0
    lik = StudentTLikelihood(df, SCALE)
    y, mean, _ = t_grid(0.0)
    a2 = df * SCALE**2
    resid = y - mean
    half_curvature = 0.5 * (df + 1) * (resid**2 - a2) / (a2 + resid**2) ** 2
    for var in (0.0, -1e-12, 1e-10):  # rounding can hand in a slightly negative variance
        ell, d_mean, d_var = lik.expected_log_lik(y, mean, np.full_like(y, var))
        if var <= 0:  # the point mass at the mean
            np.testing.assert_allclose(ell, t_logpdf(resid, df, SCALE), rtol=1e-12)
            np.testing.assert_allclose(d_mean, (df + 1) * resid / (a2 + resid**2), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(d_var, half_curvature, rtol=1e-8)
    # The two forms of d_var meet at the switch without a visible jump.
    switch = 1e-6 * a2
    below = lik.expected_log_lik(y, mean, np.full_like(y, switch))[2]
    above = lik.expected_log_lik(y, mean, np.full_like(y, switch * (1 + 1e-9)))[2]
    np.testing.assert_allclose(above, below, rtol=1e-8)


def test_student_t_var_derivative_tracks_the_exact_one():
    # Against the derivative of the integral itself (differences of adaptive quadrature):
    # close where the quadrature is (var0 = 1); at var0 = 4, where it is not, the
    # derivative of the sum is still nearer than 0.5 E[g''] on the same nodes.
    df = 4.0
    lik = StudentTLikelihood(df, SCALE)
    a2 = df * SCALE**2
    for var0, rtol in [(1.0, 1e-6), (4.0, 1e-3)]:
        y, mean, var = t_grid(var0)
        d_var = lik.expected_log_lik(y, mean, var)[2][:, 0]
        exact = []
        for yi, mi, vi in zip(y[:3, 0], mean[:3, 0], var[:3, 0]):
            h = 1e-3 * vi

            def ell(v, yi=yi, mi=mi):
                return gaussian_expectation(lambda f: t_logpdf(yi - f, df, SCALE), mi, v, kink=yi)

            exact.append((ell(vi + h) - ell(vi - h)) / (2 * h))
        np.testing.assert_allclose(d_var[:3], exact, rtol=rtol)
        if var0 == 4.0:
            resid = y[:3] - (mean[:3] + np.sqrt(2 * var[:3]) * lik._nodes)
            second_order = 0.5 * ((df + 1) * (resid**2 - a2) / (a2 + resid**2) ** 2) @ lik._weights
            assert np.all(np.abs(d_var[:3] - exact) < 0.5 * np.abs(second_order - exact))


@pytest.mark.parametrize("fixed", [None, "df", "scale"])
@pytest.mark.parametrize("var0", [1e-10, 0.3, 10.0])
def test_student_t_d_log_params_match_finite_differences(fixed, var0):
    bounds = {"df_bounds": "fixed" if fixed == "df" else (1.0, 1e3),
              "scale_bounds": "fixed" if fixed == "scale" else (1e-3, 1e3)}
    lik = StudentTLikelihood(3.5, SCALE, **bounds)
    y, mean, var = t_grid(var0)
    grad = lik.d_log_params(y, mean, var)
    names = tuple(n for n in ("df", "scale") if n != fixed)
    assert lik.param_names == names and lik.n_params == len(names)
    assert grad.shape == (5, len(names))
    theta = lik.log_params
    for j in range(len(names)):
        fd = 0.0
        for sign in (1, -1):
            shifted = theta.copy()
            shifted[j] += sign * 1e-5
            lik.set_log_params(shifted)
            fd = fd + sign * lik.expected_log_lik(y, mean, var)[0][:, 0] / 2e-5
        lik.set_log_params(theta)
        np.testing.assert_allclose(grad[:, j], fd, rtol=1e-6, atol=1e-8, err_msg=names[j])


def test_student_t_d_log_params_match_finite_differences_at_large_df():
    # The digamma difference and the log1p terms cancel to O(1/df); they must still
    # differentiate correctly near the upper bound.
    lik = StudentTLikelihood(900.0, SCALE)
    y, mean, var = t_grid(0.3)
    grad = lik.d_log_params(y, mean, var)[:, 0]
    theta = lik.log_params

    def ell_at(log_df):
        lik.set_log_params([log_df, theta[1]])
        return lik.expected_log_lik(y, mean, var)[0][:, 0]

    fd = (ell_at(theta[0] + 1e-4) - ell_at(theta[0] - 1e-4)) / 2e-4
    lik.set_log_params(theta)
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-7)


def test_student_t_approaches_gaussian_as_df_grows():
    # The t density differs from the Gaussian by O(1/df) (by about resid^4 / (4 df scale^4)
    # in the log): the gap in every output shrinks tenfold from df = 1e5 to 1e6.
    gauss = GaussianLikelihood(SCALE**2)
    y, mean, var = t_grid(0.7)
    y, mean, var = y[:3], mean[:3], var[:3]  # residuals up to 3 scales
    reference = (
        *gauss.expected_log_lik(y, mean, var),
        gauss.log_predictive_density(y, mean, var),
        gauss.predictive(mean, var)[1],
    )
    gaps = []
    for df in (1e5, 1e6):
        lik = StudentTLikelihood(df, SCALE, df_bounds=(1.0, 1e7))
        mine = (
            *lik.expected_log_lik(y, mean, var),
            lik.log_predictive_density(y, mean, var),
            lik.predictive(mean, var)[1],
        )
        gaps.append([np.max(np.abs(a - b) / np.maximum(np.abs(b), 1.0)) for a, b in zip(mine, reference)])
    gaps = np.array(gaps)
    assert np.all(gaps[1] < 1e-4), gaps
    assert np.all(gaps[1] < 0.15 * gaps[0]), gaps


# --- Student-t: predictive -------------------------------------------------------


@pytest.mark.parametrize("df", [1.0, 2.1, 4.0, 30.0, 1000.0])
def test_student_t_log_predictive_density_matches_adaptive_quadrature(df):
    # Including var >> scale^2, where quadrature in f would straddle the peak of p(y | f).
    lik = StudentTLikelihood(df, SCALE, df_bounds="fixed")
    for var0 in (1e-10, 0.3, 4.0, 100.0, 1e4):
        y, mean, var = t_grid(var0)
        lpd = lik.log_predictive_density(y, mean, var)
        assert lpd.shape == (5, 1)
        ref = [
            log_gaussian_expectation(lambda f, yi=yi: t_logpdf(yi - f, df, SCALE), mi, vi, kink=yi)
            for yi, mi, vi in zip(y[:, 0], mean[:, 0], var[:, 0])
        ]
        np.testing.assert_allclose(lpd[:, 0], ref, rtol=1e-9, err_msg=f"var0={var0}")


def test_student_t_log_predictive_density_at_zero_variance_is_the_t_density():
    lik = StudentTLikelihood(3.0, SCALE)
    y, mean, var = t_grid(0.0)
    expected = stats.t.logpdf(y, 3.0, loc=mean, scale=SCALE)
    np.testing.assert_allclose(lik.log_predictive_density(y, mean, var), expected, rtol=1e-10)


def test_student_t_log_predictive_density_handles_many_rows_in_blocks():
    rng = np.random.default_rng(3)
    n = 9000  # more than one block of rows
    y, mean = col(rng.standard_normal(n) * 3), col(rng.standard_normal(n))
    var = col(rng.uniform(0, 2, n))
    lik = StudentTLikelihood()
    lpd = lik.log_predictive_density(y, mean, var)
    rows = [0, 4095, 4096, 8999]
    each = np.vstack([lik.log_predictive_density(y[[i]], mean[[i]], var[[i]]) for i in rows])
    np.testing.assert_allclose(lpd[rows], each, rtol=1e-9)


def test_student_t_predictive_moments():
    mean, var = col([0.5, -2.0]), col([0.1, 3.0])
    m, v = StudentTLikelihood(5.0, SCALE).predictive(mean, var)
    np.testing.assert_array_equal(m, mean)
    np.testing.assert_allclose(v, var + stats.t.var(5.0, scale=SCALE), rtol=1e-14)
    # At df <= 2 the noise has no variance.
    _, v = StudentTLikelihood(2.0, SCALE, df_bounds=(1.0, 10.0)).predictive(mean, var)
    assert np.all(np.isinf(v))


# --- Student-t: parameters and checks ------------------------------------------------


def test_student_t_hyperparameters_round_trip_in_log_space():
    lik = StudentTLikelihood(6.0, 0.2, df_bounds=(2.5, 50.0), scale_bounds=(1e-2, 10.0))
    assert lik.n_params == 2 and lik.param_names == ("df", "scale")
    np.testing.assert_allclose(lik.log_params, np.log([6.0, 0.2]))
    assert lik.log_params.dtype == np.float64 and lik.log_params.shape == (2,)
    low, high = lik.log_bounds
    np.testing.assert_allclose(low, np.log([2.5, 1e-2]))
    np.testing.assert_allclose(high, np.log([50.0, 10.0]))
    lik.set_log_params(np.log([9.0, 0.4]))
    assert lik.df == pytest.approx(9.0) and lik.scale == pytest.approx(0.4)
    with pytest.raises(ValueError, match="expected 2 finite log-parameters"):
        lik.set_log_params([1.0])
    with pytest.raises(ValueError, match="expected 2 finite log-parameters"):
        lik.set_log_params([np.nan, 0.0])

    both_fixed = StudentTLikelihood(df_bounds="fixed", scale_bounds="fixed")
    assert both_fixed.n_params == 0 and both_fixed.log_params.shape == (0,)
    assert both_fixed.d_log_params(*t_grid(0.3)).shape == (5, 0)
    assert [b.shape for b in both_fixed.log_bounds] == [(0,), (0,)]


@pytest.mark.parametrize("kwargs, message", [
    ({"df": 0.0}, "df must be a finite number > 0"),
    ({"df": np.nan}, "df must be a finite number > 0"),
    ({"scale": -1.0}, "scale must be a finite number > 0"),
    ({"scale": np.inf}, "scale must be a finite number > 0"),
    ({"n_points": 0}, "n_points must be a positive integer"),
    ({"n_points": 2.5}, "n_points must be a positive integer"),
    ({"n_points": "many"}, "n_points must be a positive integer"),
    ({"df_bounds": "free"}, "df_bounds must be a pair of floats or 'fixed'"),
    ({"df_bounds": (3.0,)}, "df_bounds must be a pair of floats or 'fixed'"),
    ({"scale_bounds": (1.0, 0.1)}, r"scale_bounds must satisfy 0 < low <= high < inf"),
    ({"scale_bounds": (0.0, 1.0)}, r"scale_bounds must satisfy 0 < low <= high < inf"),
    ({"df": 1.5}, r"df=1.5 lies outside df_bounds=\(2.1, 1000.0\)"),
])
def test_student_t_rejects_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        StudentTLikelihood(**kwargs)


def test_student_t_check_targets():
    y = col([0.0, -3.0, 1e6])
    np.testing.assert_array_equal(StudentTLikelihood.check_targets(y), y)
    np.testing.assert_array_equal(StudentTLikelihood().check_targets([1, 2]), [1.0, 2.0])
    for bad in (np.nan, np.inf):
        with pytest.raises(ValueError, match="1 NaN or infinite values. Drop or impute"):
            StudentTLikelihood.check_targets(col([0.0, bad]))


# --- Poisson -------------------------------------------------------------------------

#: Zeros, small and large counts, and two surprises (500 events where 3 are expected, none
#: where 400 are), whose predictive integrands peak far from the prior mean.
COUNTS = np.array([0.0, 0.0, 1.0, 3.0, 40.0, 10_000.0, 500.0, 0.0])
LOG_RATES = np.array([-3.0, 1.5, 0.0, 1.0, 3.5, 9.0, 1.0, 6.0])


def poisson_logpmf(y, log_rate):
    return y * log_rate - np.exp(log_rate) - gammaln(y + 1)


@pytest.mark.parametrize("var0", [0.0, 1e-10, 0.05, 1.0, 4.0, 25.0])
def test_poisson_ell_matches_adaptive_quadrature_and_closed_form(var0):
    off = 0.7
    lik = PoissonLikelihood(log_offset=off)
    y, mean = col(COUNTS), col(LOG_RATES - off)
    var = np.full_like(y, var0)
    ell = lik.expected_log_lik(y, mean, var)[0]
    closed = y * (mean + off) - np.exp(mean + off + 0.5 * var) - gammaln(y + 1)
    np.testing.assert_allclose(ell, closed, rtol=1e-14)
    if var0 > 0:
        ref = [
            gaussian_expectation(lambda f, yi=yi: stats.poisson.logpmf(yi, np.exp(f + off)), mi, var0)
            for yi, mi in zip(y[:, 0], mean[:, 0])
        ]
        np.testing.assert_allclose(ell[:, 0], ref, rtol=1e-9)
    else:
        np.testing.assert_allclose(ell[:, 0], stats.poisson.logpmf(COUNTS, np.exp(LOG_RATES)), rtol=1e-12)


@pytest.mark.parametrize("var0", [1e-6, 0.5, 9.0])
def test_poisson_derivatives_match_finite_differences(var0):
    lik = PoissonLikelihood(log_offset=-1.2)
    y, mean = col(COUNTS), col(LOG_RATES + 1.2)
    var = np.full_like(y, var0)
    ell, d_mean, d_var = lik.expected_log_lik(y, mean, var)
    assert ell.shape == d_mean.shape == d_var.shape == (8, 1)
    # exp(v / 2) is smooth on the scale of 1, so at small v a step of half of v is safe.
    fd_mean, fd_var = fd_mean_var(lik, y, mean, var, rel_step_var=0.5 if var0 < 1e-2 else 1e-4)
    np.testing.assert_allclose(d_mean, fd_mean, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(d_var, fd_var, rtol=1e-6, atol=1e-8)


def test_poisson_predictive_moments_match_quadrature_and_sampling():
    off = 1.1
    lik = PoissonLikelihood(off)
    mean, var = col([-1.0, 0.2, 2.0]), col([0.3, 1.0, 0.05])
    y_mean, y_var = lik.predictive(mean, var)
    for i in range(3):
        m, v = mean[i, 0], var[i, 0]
        rate = gaussian_expectation(lambda f: np.exp(f + off), m, v)
        rate2 = gaussian_expectation(lambda f: np.exp(2 * (f + off)), m, v)
        # Var[y] = E[Var(y | f)] + Var[E(y | f)] = E[rate] + Var[rate].
        np.testing.assert_allclose(y_mean[i, 0], rate, rtol=1e-10)
        np.testing.assert_allclose(y_var[i, 0], rate + rate2 - rate**2, rtol=1e-10)
    rng = np.random.default_rng(7)
    f = mean + np.sqrt(var) * rng.standard_normal((3, 400_000))
    counts = rng.poisson(np.exp(f + off))
    np.testing.assert_allclose(y_mean[:, 0], counts.mean(axis=1), rtol=1e-2)
    np.testing.assert_allclose(y_var[:, 0], counts.var(axis=1), rtol=3e-2)


@pytest.mark.parametrize("var0, atol", [(1e-10, 1e-10), (0.05, 1e-10), (1.0, 1e-10), (4.0, 1e-7), (25.0, 5e-4)])
def test_poisson_log_predictive_density_matches_adaptive_quadrature(var0, atol):
    # Quadrature centred on the integrand's mode: exact to rounding while var is moderate;
    # from var ~ 4 on, the skewed integrand of a zero count costs accuracy (measured:
    # 3e-8 nats at var = 4, 3e-4 at var = 25).
    off = 0.4
    lik = PoissonLikelihood(off)
    y, mean = col(COUNTS), col(LOG_RATES - off)
    var = np.full_like(y, var0)
    lpd = lik.log_predictive_density(y, mean, var)
    assert lpd.shape == (8, 1)
    ref = [
        log_gaussian_expectation(lambda f, yi=yi: poisson_logpmf(yi, f + off), mi, var0)
        for yi, mi in zip(y[:, 0], mean[:, 0])
    ]
    np.testing.assert_allclose(lpd[:, 0], ref, rtol=1e-10, atol=atol)


def test_poisson_log_predictive_density_at_zero_variance_is_the_pmf():
    lik = PoissonLikelihood(-0.3)
    y, mean = col(COUNTS), col(LOG_RATES + 0.3)
    lpd = lik.log_predictive_density(y, mean, np.zeros_like(y))
    np.testing.assert_allclose(lpd[:, 0], stats.poisson.logpmf(COUNTS, np.exp(LOG_RATES)), rtol=1e-12)


def test_poisson_has_no_learned_parameters():
    lik = PoissonLikelihood()
    assert lik.n_params == 0 and lik.param_names == ()
    assert lik.log_params.shape == (0,) and lik.log_params.dtype == np.float64
    assert [b.shape for b in lik.log_bounds] == [(0,), (0,)]
    assert lik.d_log_params(col(COUNTS), col(LOG_RATES), col(LOG_RATES)).shape == (8, 0)
    lik.set_log_params(np.zeros(0))
    with pytest.raises(ValueError, match="no learned parameters"):
        lik.set_log_params([0.0])
    for bad in (np.inf, -np.inf, np.nan):
        with pytest.raises(ValueError, match="log_offset must be finite"):
            PoissonLikelihood(bad)


def test_poisson_check_targets():
    y = col([0, 3, 10_000])
    np.testing.assert_array_equal(PoissonLikelihood.check_targets(y), y)
    np.testing.assert_array_equal(PoissonLikelihood().check_targets(np.array([0, 1], dtype=np.int64)), [0.0, 1.0])
    with pytest.raises(ValueError, match=r"2 negative values \(smallest -3\).*Gaussian or Student-t"):
        PoissonLikelihood.check_targets(col([-1.0, 2.0, -3.0]))
    # Rates (counts over an exposure) are accepted, as scikit-learn's PoissonRegressor does.
    np.testing.assert_array_equal(PoissonLikelihood.check_targets(col([0.5, 2.0])), col([0.5, 2.0]))
    with pytest.raises(ValueError, match="1 NaN or infinite values"):
        PoissonLikelihood.check_targets(col([np.nan, 2.0]))
    with pytest.raises(ValueError, match=r"1 NaN or infinite values, 1 negative values"):
        PoissonLikelihood.check_targets(col([np.inf, -2.0]))
