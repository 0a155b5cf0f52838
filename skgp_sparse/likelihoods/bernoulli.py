"""Bernoulli observations of one latent function: binary classification."""

import math

import numpy as np

from .. import backend
from . import _special as special
from ._base import Likelihood
from ._quadrature import gauss_hermite, latent_nodes, variance_derivative

# Python floats, not numpy scalars: array_api_strict refuses numpy scalars, and a
# float32 array keeps its dtype next to a Python float.
_SQRT_2_OVER_PI = float(np.sqrt(2.0 / np.pi))
_SQRT2 = math.sqrt(2.0)
#: Latent variance at and below which the variance derivative is 0.5 E[g''] rather than
#: the derivative of the quadrature sum (see BernoulliLikelihood.expected_log_lik). Both
#: links bend on a unit scale, so the two forms agree to rounding there, while the sum's
#: form loses accuracy to cancellation between the symmetric nodes in float32, the more
#: the smaller v (docs/constants.md).
_SMALL_VAR = 1e-2


def _probit_terms(z, xp=np):
    """log Phi(z), its derivative in z, and the inverse Mills ratio that the second
    derivative (:func:`_probit_curvature`) reuses, stable in both tails.

    The inverse Mills ratio r = phi(z) / Phi(z), which is the first derivative, is taken
    as sqrt(2/pi) / erfcx(-z/sqrt2): the Gaussian factors that underflow in phi and Phi
    for large |z| cancel analytically.
    """
    log_p = special.log_ndtr(z, xp)
    r = _SQRT_2_OVER_PI / special.erfcx(-z / _SQRT2, xp)
    return log_p, r


def _probit_curvature(z, r):
    """The second derivative of log Phi at z, from the first, r."""
    xp = backend.namespace(z)
    # r (z + r) is the variance deficit of a truncated normal, so it lies in (0, 1); far in
    # the left tail z + r is a difference of large numbers, and the clip keeps rounding
    # error there from leaving that interval.
    return -xp.clip(r * (z + r), 0.0, 1.0)


def _logit_terms(z, xp=np):
    """log sigmoid(z) and its derivative in z."""
    return -xp.logaddexp(0.0, -z), special.expit(-z, xp)


def _logit_curvature(z, d1):
    """The second derivative of log sigmoid at z, from the first, d1 = sigmoid(-z)."""
    return -special.expit(z, backend.namespace(z)) * d1


class BernoulliLikelihood(Likelihood):
    """``p(y = 1 | f) = link(f)`` for labels y in {0, 1}, with one latent function.

    Expectations under the latent marginal N(f | m, v) are taken by Gauss-Hermite
    quadrature on ``n_points`` nodes, and their derivatives in m and v are those of the
    quadrature sum, so that they match finite differences of the reported value at any
    ``n_points`` (``0.5 E[g''(f)]`` on the same nodes, the other usual form of the
    variance derivative, misses them by 5% at v = 25 with 20 nodes). Below a variance of
    1e-2 the variance derivative is 0.5 E[g''(f)] (Opper & Archambeau, 2009), equal to
    the other to rounding there and finite at v = 0.

    The methods take arrays of any Array API namespace and return arrays of that
    namespace, on the inputs' device, in the floating dtype of ``mean`` and ``var``
    (labels may be integers). The quadrature nodes are put on that device once per
    device and dtype. Numpy inputs (array-likes included) are computed in float64.

    Parameters
    ----------
    link : {"probit", "logit"}, default="probit"
        The inverse link: the standard normal CDF Phi, or the logistic sigmoid.
    n_points : int, default=20
        Number of Gauss-Hermite nodes.
    """

    #: The exact search that starts a fit moves the hyperparameters on the collapsed bound
    #: of Gaussian pseudo-observations, refreshed between rounds
    #: (:mod:`skgp_sparse.optim.pseudo`), rather than re-optimising q(u) by damped
    #: natural steps at every evaluation, in a fraction of the time (docs/constants.md).
    #: Both links are log-concave, so every row's pseudo-precision -2 d_var is positive:
    #: d_var sums w_i x_i (g'(m + s x_i) - g'(m - s x_i)) / s over the positive nodes
    #: (s = sqrt(2 v)), and g' decreases.
    pseudo_observation_search = True

    def __init__(self, link="probit", n_points=20):
        if link not in ("probit", "logit"):
            raise ValueError(f"link must be 'probit' or 'logit', got {link!r}")
        if int(n_points) < 1:
            raise ValueError(f"n_points must be a positive integer, got {n_points!r}")
        self.link = link
        self.n_points = int(n_points)
        self._nodes, self._weights = gauss_hermite(self.n_points)

    def expected_log_lik(self, y, mean, var):
        """Per-row E_q[log link(s f)], s = +1 for the label 1.0 and -1 for 0.0, and its
        derivatives in mean and var, by the class's quadrature.

        Arguments and returns: the contract of
        :class:`~skgp_sparse.likelihoods.Likelihood`, with one latent function.
        """
        shape = backend.shape_of(mean)
        xp, y, mean, var, nodes, w = self._inputs_and_rule(y, mean, var)
        # p(y | f) = link(s f) with s = +1 for y = 1 and -1 for y = 0 (both links are
        # symmetric: 1 - link(f) = link(-f)).
        sign = 2.0 * xp.reshape(y, (-1, 1)) - 1.0
        z = sign * latent_nodes(nodes, mean, var, xp)
        if self.link == "probit":
            log_p, d1 = _probit_terms(z, xp)
            curvature = _probit_curvature
        else:
            log_p, d1 = _logit_terms(z, xp)
            curvature = _logit_curvature
        ell = log_p @ w
        d_mean = sign[:, 0] * (d1 @ w)

        def half_mean_curvature(z, d1):
            return 0.5 * (curvature(z, d1) @ w)

        # The slope of log link(s f) in f is s link'/link(s f), so the sum's moment takes
        # the sign; its curvature carries s^2 = 1.
        slope_moment = sign[:, 0] * (d1 @ (w * nodes))
        d_var = variance_derivative(slope_moment, var, _SMALL_VAR, half_mean_curvature, z, d1)
        return xp.reshape(ell, shape), xp.reshape(d_mean, shape), xp.reshape(d_var, shape)

    def predict_proba(self, mean, var):
        """Probability of the label 1, E_q[link(f)], per row.

        The probit case is exact, Phi(m / sqrt(1 + v)); the logit case uses the same
        Gauss-Hermite quadrature as the expected log-likelihood. Arguments and returns:
        the contract of :class:`~skgp_sparse.likelihoods.Likelihood` for two classes
        (p(y = 0) is one minus the result).
        """
        xp, _, mean, var, nodes, w = self._inputs_and_rule(None, mean, var)
        if self.link == "probit":
            return special.ndtr(mean / xp.sqrt(1.0 + xp.clip(var, min=0.0)), xp)
        return xp.reshape(special.expit(latent_nodes(nodes, mean, var, xp), xp) @ w, mean.shape)
