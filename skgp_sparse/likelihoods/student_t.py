"""Student-t observation noise: regression that shrugs off outliers."""

import math

import numpy as np
from scipy.special import betaln, digamma, gammainccinv, gammaincinv, gammaln, polygamma

from .. import backend, linalg
from . import _special as special
from ._base import Likelihood
from ._quadrature import check_n_points, gauss_hermite, latent_nodes, variance_derivative

LOG_2PI = np.log(2.0 * np.pi)
# A Python float (array_api_strict refuses numpy scalars; float32 stays float32 with it).
_LOG_2PI = float(LOG_2PI)
#: Below this multiple of df * scale^2 the variance derivative is taken as 0.5 E[g''];
#: above it, as the derivative of the quadrature sum itself (see expected_log_lik).
_SMALL_VAR = 1e-6
#: Mass of the scale-mixture integrand that log_predictive_density may leave outside
#: its grid, relative to the whole.
_LEFT_OUT = 1e-17
#: Largest grid step of log_predictive_density, in log-precision units. With the step
#: below half the posterior spread as well, the worst relative error found against
#: adaptive quadrature (df from 1 to 1000, var / scale^2 up to 1e4, residuals up to
#: 300 scales) was 7e-12.
_MAX_STEP = 0.3
#: Rows per block in log_predictive_density, which holds (rows, grid) arrays.
_BLOCK_ROWS = 4096


def _positive(name, value):
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = np.nan
    if not (np.isfinite(number) and number > 0.0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return number


def _log_bounds(name, value, bounds):
    """Bounds of log(value) as a pair of floats, or None for "fixed"."""
    if isinstance(bounds, str):
        if bounds != "fixed":
            raise ValueError(f"{name}_bounds must be a pair of floats or 'fixed', got {bounds!r}")
        return None
    try:
        low, high = (float(b) for b in bounds)
    except (TypeError, ValueError):
        raise ValueError(f"{name}_bounds must be a pair of floats or 'fixed', got {bounds!r}") from None
    if not (0.0 < low <= high < np.inf):
        raise ValueError(f"{name}_bounds must satisfy 0 < low <= high < inf, got {bounds!r}")
    if not low <= value <= high:
        raise ValueError(
            f"{name}={value!r} lies outside {name}_bounds={bounds!r}; "
            f"pick an initial {name} inside the bounds or widen them"
        )
    return np.log(low), np.log(high)


class StudentTLikelihood(Likelihood):
    """``y = f + scale * t_df``: Student-t noise with ``df`` degrees of freedom.

    Its density falls off as a power of the residual, so a few gross outliers pull the
    latent function far less than under Gaussian noise. Both ``df`` and ``scale`` are
    hyperparameters learned in log space, within their bounds.

    Expectations under the latent marginal N(f | m, v) are taken by Gauss-Hermite
    quadrature on ``n_points`` nodes. log p(y | f) bends on the scale
    ``sqrt(df) * scale`` around f = y, so the rule is accurate while v stays below about
    ``df * scale**2`` and loses accuracy as v grows past it: with ``df=4``, 32 nodes
    reach a relative error near 1e-9 at ``v = scale**2``, 1.5e-5 at ``4 scale**2``,
    4e-4 at ``10 scale**2`` and 2e-2 at ``100 scale**2``.

    Parameters
    ----------
    df : float, default=4.0
        Degrees of freedom, > 0. Four gives tails heavy enough to discount outliers
        while the noise keeps a finite variance.
    scale : float, default=1.0
        Scale of the noise, > 0 (its standard deviation is
        ``scale * sqrt(df / (df - 2))`` for df > 2).
    df_bounds : pair of floats or "fixed", default=(2.1, 1000.0)
        Bounds of the learned df, or "fixed" to keep it. Above 2 the predictive
        variance stays finite; at 1000 the noise is Gaussian for any practical purpose.
    scale_bounds : pair of floats or "fixed", default=(1e-3, 1e3)
        Bounds of the learned scale, or "fixed" to keep it. They match the square roots
        of the regressor's default noise-variance bounds at the low end.
    n_points : int, default=32
        Number of Gauss-Hermite nodes of the expected log-likelihood. More than the 20
        of the classifiers' likelihoods, since log p(y | f) bends more sharply than a
        link function does; the nodes cost little next to the kernel's work.

    Notes
    -----
    The methods of training and prediction take arrays of any Array API namespace and
    return arrays of that namespace, on the inputs' device, in the floating dtype of
    ``mean`` and ``var``; numpy inputs (array-likes included) are computed in float64.
    ``df`` and ``scale`` (and :attr:`log_params`) stay Python floats and numpy arrays on
    the host: the functions of them alone (``betaln``, ``digamma``, the Gamma quantiles)
    are scipy's, on scalars. :meth:`sample` is numpy only.
    """

    _NAMES = ("df", "scale")

    def __init__(self, df=4.0, scale=1.0, df_bounds=(2.1, 1e3), scale_bounds=(1e-3, 1e3), n_points=32):
        self.df = _positive("df", df)
        self.scale = _positive("scale", scale)
        self.df_bounds = df_bounds
        self.scale_bounds = scale_bounds
        self._bounds = {
            "df": _log_bounds("df", self.df, df_bounds),
            "scale": _log_bounds("scale", self.scale, scale_bounds),
        }
        self.n_points = check_n_points(n_points)
        self._nodes, self._weights = gauss_hermite(self.n_points)

    # --- learned hyperparameters ----------------------------------------------------
    @property
    def param_names(self):
        """Names of the learned hyperparameters, in the order of :attr:`log_params`."""
        return tuple(name for name in self._NAMES if self._bounds[name] is not None)

    @property
    def n_params(self):
        return len(self.param_names)

    @property
    def log_params(self):
        """Logarithms of the learned hyperparameters, ndarray of shape (n_params,)."""
        return np.array([np.log(getattr(self, name)) for name in self.param_names], dtype=float)

    def set_log_params(self, values):
        """Set the learned hyperparameters from their logarithms (bounds are not enforced)."""
        values = np.asarray(values, dtype=float).reshape(-1)
        if values.shape != (self.n_params,) or not np.all(np.isfinite(values)):
            raise ValueError(f"expected {self.n_params} finite log-parameters {self.param_names}, got {values!r}")
        for name, value in zip(self.param_names, values):
            setattr(self, name, float(np.exp(value)))

    @property
    def log_bounds(self):
        """(low, high): arrays of shape (n_params,) bounding :attr:`log_params`."""
        pairs = [self._bounds[name] for name in self.param_names]
        return np.array([p[0] for p in pairs], dtype=float), np.array([p[1] for p in pairs], dtype=float)

    # --- the density at the quadrature nodes -----------------------------------------
    def _log_norm(self):
        """log of the density's normalising constant, Gamma((df+1)/2) / (Gamma(df/2) sqrt(df pi) scale).

        Written with betaln, which keeps its precision for large df where the two gammaln
        terms would cancel.
        """
        nu = self.df
        return -betaln(0.5 * nu, 0.5) - 0.5 * np.log(nu) - np.log(self.scale)

    @staticmethod
    def _residuals(y, mean, var, nodes, xp):
        """y - f at every node, shape (n, n_points)."""
        return xp.reshape(y, (-1, 1)) - latent_nodes(nodes, mean, var, xp)

    def _log_density(self, resid, xp=np):
        a2 = self.df * self.scale**2
        return float(self._log_norm()) - 0.5 * (self.df + 1.0) * xp.log1p(resid * resid / a2)

    @staticmethod
    def check_targets(y):
        """Return y as a float array, or raise ValueError if it holds NaN or infinite values.

        An array of another namespace is checked there (one synchronisation for the count)
        and returned in its namespace, cast to its device's widest float if integer.
        """
        xp, y = backend.float_targets(y)
        n_bad = int(xp.count_nonzero(~xp.isfinite(y)))
        if n_bad:
            raise ValueError(
                f"StudentTLikelihood needs finite targets; y holds {n_bad} NaN or "
                "infinite values. Drop or impute those rows before fitting (the Student-t "
                "noise tolerates outliers, but not missing values)."
            )
        return y

    # --- the interface of the variational model --------------------------------------
    def expected_log_lik(self, y, mean, var):
        """Per-row E_q[log p(y | f)] and its derivatives in mean and var.

        The derivative in the mean is that of the quadrature sum. The one in the
        variance is too, sum_i w_i g'(f_i) x_i / sqrt(2 v) for g = log p(y | .), so that
        it is consistent with the reported value; that form divides by sqrt(v), so for
        v below ``1e-6 df scale^2`` it is replaced by d/dv E[g(f)] = 0.5 E[g''(f)]
        (Opper & Archambeau, 2009), which equals it to rounding error there and stays
        finite at v = 0. At large v the first form is also the more accurate estimate of
        the exact derivative, by about an order of magnitude, as g'' is sharper than g'.

        Arguments and returns: the contract of
        :class:`~skgp_sparse.likelihoods.Likelihood`, with one latent function.
        """
        shape = backend.shape_of(mean)
        xp, y, mean, var, nodes, w = self._inputs_and_rule(y, mean, var)
        var = xp.reshape(var, (-1, 1))
        resid = self._residuals(y, mean, var, nodes, xp)
        nu, a2 = self.df, self.df * self.scale**2
        total = a2 + resid * resid
        ell = self._log_density(resid, xp) @ w
        # g'(f) = (df + 1) (y - f) / (df scale^2 + (y - f)^2).
        d1 = (nu + 1.0) * resid / total
        d_mean = d1 @ w

        def half_mean_curvature(resid, total):
            # 0.5 E[g''(f)] with g''(f) = (df + 1) ((y - f)^2 - df scale^2) / total^2.
            return 0.5 * (((nu + 1.0) * (resid**2 - a2) / total**2) @ w)

        # Rows of small variance only (usually none) take half_mean_curvature.
        d_var = variance_derivative(d1 @ (w * nodes), var, _SMALL_VAR * a2, half_mean_curvature, resid, total)
        return xp.reshape(ell, shape), xp.reshape(d_mean, shape), xp.reshape(d_var, shape)

    def d_log_params(self, y, mean, var):
        """Per-row derivatives of the expected log-likelihood in the learned log-parameters.

        They are exact derivatives of the quadrature sum (the nodes do not depend on df
        or scale).

        Returns
        -------
        array of shape (n, n_params)
            Columns in the order of :attr:`param_names`, in the namespace and on the
            device of the inputs.
        """
        xp, y, mean, var, nodes, w = self._inputs_and_rule(y, mean, var)
        resid = self._residuals(y, mean, var, nodes, xp)
        nu, a2 = self.df, self.df * self.scale**2
        # share = (y - f)^2 / (df scale^2 + (y - f)^2), in [0, 1).
        share = resid * resid / (a2 + resid * resid)
        columns = []
        if self._bounds["df"] is not None:
            d_norm = float(0.5 * nu * (digamma(0.5 * (nu + 1.0)) - digamma(0.5 * nu)) - 0.5)
            per_node = -0.5 * nu * xp.log1p(resid * resid / a2) + 0.5 * (nu + 1.0) * share
            columns.append(d_norm + per_node @ w)
        if self._bounds["scale"] is not None:
            columns.append(-1.0 + (nu + 1.0) * (share @ w))
        if columns:
            return xp.stack(columns, axis=1)
        return xp.zeros((resid.shape[0], 0), dtype=resid.dtype, device=backend.device_of(resid))

    def _noise_variance(self):
        """Variance of the Student-t noise, ``scale^2 df / (df - 2)``, infinite for df <= 2."""
        return self.scale**2 * self.df / (self.df - 2.0) if self.df > 2.0 else math.inf

    def predictive(self, mean, var):
        """Mean and variance of y under the predictive distribution.

        The variance is ``var + scale^2 df / (df - 2)`` for df > 2 and infinite otherwise
        (the noise then has no variance). The mean is ``mean`` (for df <= 1, where the
        noise has no mean either, it is the predictive median).
        """
        _, _, mean, var = self._inputs(None, mean, var)
        return mean, var + self._noise_variance()

    def predictive_covariance(self, mean, cov):
        """Mean (n,) and joint covariance (n, n) of y given the latent joint posterior: the
        noise of each row is independent, with variance ``scale^2 df / (df - 2)``."""
        return mean, linalg.add_to_diagonal(cov, self._noise_variance())

    def sample(self, f, rng):
        """Draws of y given latent values ``f`` (any shape): f plus scaled Student-t noise.

        numpy only: ``f`` a numpy array and ``rng`` a :class:`numpy.random.Generator`
        (draws for checks and examples, not part of training or prediction).
        """
        return f + self.scale * rng.standard_t(self.df, size=np.shape(f))

    def log_predictive_density(self, y, mean, var):
        """log p(y) = log E_q[p(y | f)], per row, shape (n, 1).

        The Student-t is a scale mixture of Gaussians: with lam ~ Gamma(df/2, rate df/2),
        ``p(y) = E_lam[N(y | mean, var + scale^2 / lam)]``. This integral over
        ``u = log(lam)`` has a smooth, bounded integrand in every regime, including the
        one where var is much larger than scale^2, where quadrature in f fails because
        p(y | f) is then a narrow peak that the nodes straddle. It is taken by the
        trapezoid rule (spectrally accurate for such integrands) on a grid that leaves
        out at most 1e-17 of the mass: its ends are quantiles of two Gamma laws that bound
        the integrand's tails. The sum is formed with logsumexp, so far outliers neither
        underflow nor lose digits.

        The grid's length depends on the data, so for a namespace other than numpy each
        block of 4096 rows costs one synchronisation with the host (a single scalar).
        """
        xp, y, mean, var = self._inputs(y, mean, var)
        y, mean, var = (xp.reshape(a, (-1, 1)) for a in (y, mean, var))
        blocks = []
        n = y.shape[0]
        for start in range(0, n, _BLOCK_ROWS):
            rows = slice(start, min(start + _BLOCK_ROWS, n))  # the standard has no clipping
            blocks.append(self._scale_mixture_lpd(y[rows, :], mean[rows, :], var[rows, :], xp))
        return xp.concat(blocks, axis=0) if blocks else xp.zeros_like(mean)

    def _scale_mixture_lpd(self, y, mean, var, xp=np):
        k = 0.5 * self.df
        r2 = ((y - mean) / self.scale) ** 2
        v = xp.clip(var, min=0.0) / self.scale**2
        # With Phi(u) the log-integrand, Phi'(u) <= k + 1/2 - k e^u (the posterior of lam
        # for y = mean, v = 0) and Phi'(u) >= k - (k + r2 / 2) e^u, so beyond the quantiles
        # below Phi falls at least as fast as the log-density of those two Gamma laws.
        u_lo = float(np.log(gammaincinv(k, _LEFT_OUT))) - xp.log(k + 0.5 * r2)
        u_hi = xp.full_like(u_lo, float(np.log(gammainccinv(k + 0.5, _LEFT_OUT)) - np.log(k)))
        # The posterior of u has a standard deviation of about sqrt(trigamma(k + 1/2)),
        # the narrowest feature the grid must resolve.
        step = float(min(_MAX_STEP, 0.5 * np.sqrt(polygamma(1, k + 0.5))))
        span = u_hi - u_lo  # (a NaN target gives a NaN row, not a failure here)
        # The one host synchronisation of the block (on a GPU): the grid's length.
        widest = step
        if span.shape[0]:
            widest = max(step, float(xp.max(xp.where(xp.isfinite(span), span, step))))
        n_grid = int(np.ceil(widest / step)) + 1
        h = span / (n_grid - 1)
        u = u_lo + h * xp.arange(n_grid, dtype=h.dtype, device=backend.device_of(h))
        with np.errstate(divide="ignore"):  # v = 0 (also for libraries computing with numpy)
            log_s = xp.logaddexp(xp.log(v), -u)  # log of (var + scale^2 / lam) / scale^2
        log_gamma = float(k * np.log(k) - gammaln(k)) + k * u - k * xp.exp(u)
        log_normal = -0.5 * (_LOG_2PI + log_s) - 0.5 * r2 * xp.exp(-log_s)
        lpd = special.logsumexp(log_gamma + log_normal, axis=1, keepdims=True, xp=xp)
        return lpd + xp.log(h) - float(np.log(self.scale))
