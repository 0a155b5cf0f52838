"""Bernoulli observations of one latent function: binary classification."""

import numpy as np
from scipy.special import erfcx, expit, log_ndtr, ndtr

from ._quadrature import gauss_hermite, latent_nodes

_SQRT_2_OVER_PI = np.sqrt(2.0 / np.pi)


def _probit_terms(z):
    """log Phi(z) and its first two derivatives in z, stable in both tails.

    The inverse Mills ratio r = phi(z) / Phi(z) is taken as sqrt(2/pi) / erfcx(-z/sqrt2):
    the Gaussian factors that underflow in phi and Phi for large |z| cancel analytically.
    """
    log_p = log_ndtr(z)
    r = _SQRT_2_OVER_PI / erfcx(-z / np.sqrt(2.0))
    # r (z + r) is the variance deficit of a truncated normal, so it lies in (0, 1); far in
    # the left tail z + r is a difference of large numbers, and the clip keeps rounding
    # error there from leaving that interval.
    d2 = -np.clip(r * (z + r), 0.0, 1.0)
    return log_p, r, d2


def _logit_terms(z):
    """log sigmoid(z) and its first two derivatives in z."""
    log_p = -np.logaddexp(0.0, -z)
    d1 = expit(-z)
    d2 = -expit(z) * d1
    return log_p, d1, d2


class BernoulliLikelihood:
    """``p(y = 1 | f) = link(f)`` for labels y in {0, 1}, with one latent function.

    Expectations under the latent marginal N(f | m, v) are taken by Gauss-Hermite
    quadrature on ``n_points`` nodes. The derivative in the variance uses
    d/dv E[g(f)] = 0.5 E[g''(f)] (Opper & Archambeau, 2009) on the same nodes, which
    stays bounded as v -> 0, where differentiating the nodes would divide by sqrt(v).

    Parameters
    ----------
    link : {"probit", "logit"}, default="probit"
        The inverse link: the standard normal CDF Phi, or the logistic sigmoid.
    n_points : int, default=20
        Number of Gauss-Hermite nodes.
    """

    #: The expected log-likelihood is not quadratic in f: no exact unit natural step.
    conjugate = False

    def __init__(self, link="probit", n_points=20):
        if link not in ("probit", "logit"):
            raise ValueError(f"link must be 'probit' or 'logit', got {link!r}")
        if int(n_points) < 1:
            raise ValueError(f"n_points must be a positive integer, got {n_points!r}")
        self.link = link
        self.n_points = int(n_points)
        self._nodes, self._weights = gauss_hermite(self.n_points)

    def expected_log_lik(self, y, mean, var):
        """Per-row E_q[log p(y | f)] and its derivatives in mean and var.

        Parameters
        ----------
        y : ndarray of shape (n, 1)
            Labels, 0.0 or 1.0.
        mean, var : ndarray of shape (n, 1)
            Marginal mean and variance of the latent function.

        Returns
        -------
        ell : ndarray of shape (n, 1)
        d_mean : ndarray of shape (n, 1)
        d_var : ndarray of shape (n, 1)
        """
        shape = np.shape(mean)
        # p(y | f) = link(s f) with s = +1 for y = 1 and -1 for y = 0 (both links are
        # symmetric: 1 - link(f) = link(-f)).
        sign = 2.0 * np.asarray(y, dtype=float).reshape(-1, 1) - 1.0
        z = sign * latent_nodes(self._nodes, mean, var)
        terms = _probit_terms if self.link == "probit" else _logit_terms
        log_p, d1, d2 = terms(z)
        w = self._weights
        ell = log_p @ w
        d_mean = sign[:, 0] * (d1 @ w)
        # d2 carries sign^2 = 1.
        d_var = 0.5 * (d2 @ w)
        return ell.reshape(shape), d_mean.reshape(shape), d_var.reshape(shape)

    def predict_proba(self, mean, var):
        """Probability of the label 1, E_q[link(f)], per row.

        The probit case is exact, Phi(m / sqrt(1 + v)); the logit case uses the same
        Gauss-Hermite quadrature as the expected log-likelihood.

        Parameters
        ----------
        mean, var : ndarray of shape (n, 1)

        Returns
        -------
        ndarray of shape (n, 1)
            p(y = 1); p(y = 0) is one minus it.
        """
        mean = np.asarray(mean, dtype=float)
        var = np.asarray(var, dtype=float)
        if self.link == "probit":
            return ndtr(mean / np.sqrt(1.0 + np.maximum(var, 0.0)))
        return (expit(latent_nodes(self._nodes, mean, var)) @ self._weights).reshape(mean.shape)
