"""Poisson observations of a log-rate: regression on counts."""

import numpy as np

from .. import backend, linalg
from . import _special as special
from ._base import Likelihood
from ._quadrature import gauss_hermite, rule_like

#: Gauss-Hermite nodes of log_predictive_density (prediction only, so generous).
_LPD_POINTS = 64


class PoissonLikelihood(Likelihood):
    """``y ~ Poisson(exp(f + log_offset))`` for counts y in {0, 1, 2, ...}.

    The latent function is the log-rate relative to ``exp(log_offset)``: with the
    offset set to the log of the mean count, a zero-mean GP prior centres the rate on
    the average instead of on one event per row. The offset is a fixed constant, not a
    learned hyperparameter, and there are none.

    Under N(f | m, v), E[exp(f)] = exp(m + v / 2), so the expected log-likelihood and
    both its derivatives are exact.

    Parameters
    ----------
    log_offset : float, default=0.0
        Added to the latent function inside the exponential.

    Notes
    -----
    The methods of training and prediction take arrays of any Array API namespace and
    return arrays of that namespace, on the inputs' device, in the floating dtype of
    ``mean`` and ``var`` (counts may be integers); numpy inputs (array-likes included)
    are computed in float64. :meth:`sample` is numpy only.
    """

    #: No learned hyperparameters.
    n_params = 0
    param_names = ()

    def __init__(self, log_offset=0.0):
        log_offset = float(log_offset)
        if not np.isfinite(log_offset):
            raise ValueError(
                f"log_offset must be finite, got {log_offset!r} (the log of a mean count "
                "is -inf when every count is zero; such targets carry no rate to model)"
            )
        self.log_offset = log_offset

    # --- learned hyperparameters: none ------------------------------------------------
    @property
    def log_params(self):
        return np.zeros(0)

    def set_log_params(self, values):
        if np.size(values) != 0:
            raise ValueError(f"PoissonLikelihood has no learned parameters, got {values!r}")

    @property
    def log_bounds(self):
        return np.zeros(0), np.zeros(0)

    def d_log_params(self, y, mean, var):
        """An empty derivative, array of shape (n, 0) in the namespace of the inputs."""
        xp, _, mean, _ = self._inputs(y, mean, var)
        return xp.zeros((mean.shape[0], 0), dtype=mean.dtype, device=backend.device_of(mean))

    @staticmethod
    def check_targets(y):
        """Return y as a float array, or raise ValueError unless it is finite and non-negative.

        Counts are whole numbers, but as in scikit-learn's PoissonRegressor non-negative
        real values are accepted: a rate y = counts / exposure fitted with
        ``sample_weight=exposure`` has the likelihood of the counts (up to a constant).
        An array of another namespace is checked there (one synchronisation for the
        counts of bad values) and returned in its namespace, cast to its device's widest
        float if integer.
        """
        xp, y = backend.float_targets(y)
        problems = []
        non_finite = ~xp.isfinite(y)
        n_non_finite = int(xp.count_nonzero(non_finite))
        if n_non_finite:
            problems.append(f"{n_non_finite} NaN or infinite values")
        negative = (y < 0) & ~non_finite
        n_negative = int(xp.count_nonzero(negative))
        if n_negative:
            smallest = float(xp.min(xp.where(negative, y, 0.0)))
            problems.append(f"{n_negative} negative values (smallest {smallest:g})")
        if problems:
            raise ValueError(
                "PoissonLikelihood needs counts or rates (finite values >= 0); y holds "
                + ", ".join(problems)
                + ". For targets that can be negative use a Gaussian or Student-t likelihood."
            )
        return y

    # --- the interface of the variational model --------------------------------------
    def _mean_rate(self, mean, var, xp=np):
        """E_q[exp(f + log_offset)] = exp(mean + log_offset + var / 2)."""
        return xp.exp(mean + self.log_offset + 0.5 * var)

    def expected_log_lik(self, y, mean, var):
        """Per-row E_q[log p(y | f)] and its derivatives in mean and var, in closed form.

        ``E_q[log p] = y (mean + log_offset) - exp(mean + log_offset + var / 2) - log(y!)``
        for the counts ``y``. Arguments and returns: the contract of
        :class:`~skgp_sparse.likelihoods.Likelihood`, with one latent function.
        """
        xp, y, mean, var = self._inputs(y, mean, var)
        rate = self._mean_rate(mean, var, xp)
        ell = y * (mean + self.log_offset) - rate - special.gammaln(y + 1.0, xp)
        return ell, y - rate, -0.5 * rate

    def predictive(self, mean, var):
        """Mean and variance of the count y, exact.

        ``E[y] = exp(mean + log_offset + var / 2)`` and
        ``Var[y] = E[y] + (exp(var) - 1) E[y]^2``: Poisson noise plus the spread of the
        log-normal rate.
        """
        xp, _, mean, var = self._inputs(None, mean, var)
        rate = self._mean_rate(mean, var, xp)
        return rate, rate + xp.expm1(var) * rate * rate

    def predictive_covariance(self, mean, cov):
        """Mean (n,) and joint covariance (n, n) of the counts given the latent joint
        posterior N(mean, cov), exact: with rates r = exp(f + log_offset),
        Cov[y_i, y_j] = E[r_i] E[r_j] (exp(cov_ij) - 1) + [i = j] E[r_i]."""
        xp = backend.input_namespace(mean, cov)
        mean, cov = backend.likelihood_floats(xp, (mean, cov), mean, cov)
        rate = self._mean_rate(mean, linalg.diagonal(cov, xp), xp)
        return rate, linalg.add_to_diagonal(rate[:, None] * rate[None, :] * xp.expm1(cov), rate, xp)

    def sample(self, f, rng):
        """Draws of the counts given latent values ``f`` (any shape).

        numpy only: ``f`` a numpy array and ``rng`` a :class:`numpy.random.Generator`
        (draws for checks and examples, not part of training or prediction).
        """
        return rng.poisson(np.exp(np.asarray(f) + self.log_offset)).astype(np.float64)

    def log_predictive_density(self, y, mean, var):
        """log p(y) = log E_q[Poisson(y | exp(f + log_offset))], per row, shape (n, 1).

        By Gauss-Hermite quadrature centred on the mode of the integrand in f and scaled
        by its curvature there (adaptive, or Laplace-centred, quadrature). Quadrature
        under N(f | m, v) itself would fail for large counts: p(y | f) is then a peak of
        width 1/sqrt(y) in f that the nodes straddle. The integrand is log-concave, so
        its mode is unique; it has the closed form below. The error is below 1e-7 nats
        for var <= 4, at any count, and grows to about 3e-4 nats at var = 25 for y = 0,
        whose integrand is the most skewed.
        """
        shape = backend.shape_of(mean)
        xp, y, mean, var = self._inputs(y, mean, var)
        y, mean, var = (xp.reshape(a, (-1, 1)) for a in (y, mean, var))
        eta = mean + self.log_offset
        # A floor keeps v = 0 (where the integrand is a point mass at the mean) finite;
        # every term below depends smoothly on v down to it.
        v = xp.clip(var, min=float(xp.finfo(var.dtype).smallest_normal))
        # Mode of -d^2 / (2 v) + y (eta + d) - exp(eta + d) in d = f - mean: it solves
        # d = v (y - exp(eta + d)), i.e. d = v y - W(v exp(eta + v y)) with Lambert's W,
        # taken as Wright's omega of the logarithm so that it cannot overflow.
        # (Any centre would do; the mode makes the rule accurate.)
        d = v * y - special.wrightomega(xp.log(v) + eta + v * y, xp)
        v_rate = v * xp.exp(eta + d)
        spread = xp.sqrt(2.0 * v / (1.0 + v_rate))  # sqrt(2) / sqrt(curvature at the mode)
        x, w = rule_like(*gauss_hermite(_LPD_POINTS), v)
        nodes = d + spread * x
        log_y_factorial = special.gammaln(y + 1.0, xp)
        log_f = -0.5 * nodes * nodes / v + y * (eta + nodes) - xp.exp(eta + nodes) - log_y_factorial
        # p(y) = (spread / sqrt(2 pi v)) * sqrt(pi) * sum_i w_i exp(log_f_i + x_i^2).
        lpd = special.logsumexp(log_f + x * x, axis=1, b=w, keepdims=True, xp=xp) - 0.5 * xp.log1p(v_rate)
        return xp.reshape(lpd, shape)
