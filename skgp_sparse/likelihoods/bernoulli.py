"""Bernoulli observations of one latent function: binary classification."""

import math

import numpy as np

from .. import backend
from . import _special as special
from ._base import Likelihood
from ._quadrature import gauss_hermite, latent_nodes

# Python floats, not numpy scalars: array_api_strict refuses numpy scalars, and a
# float32 array keeps its dtype next to a Python float.
_SQRT_2_OVER_PI = float(np.sqrt(2.0 / np.pi))
_SQRT2 = math.sqrt(2.0)


def _probit_terms(z, xp=np):
    """log Phi(z) and its first two derivatives in z, stable in both tails.

    The inverse Mills ratio r = phi(z) / Phi(z) is taken as sqrt(2/pi) / erfcx(-z/sqrt2):
    the Gaussian factors that underflow in phi and Phi for large |z| cancel analytically.
    """
    log_p = special.log_ndtr(z, xp)
    r = _SQRT_2_OVER_PI / special.erfcx(-z / _SQRT2, xp)
    # r (z + r) is the variance deficit of a truncated normal, so it lies in (0, 1); far in
    # the left tail z + r is a difference of large numbers, and the clip keeps rounding
    # error there from leaving that interval.
    d2 = -xp.clip(r * (z + r), 0.0, 1.0)
    return log_p, r, d2


def _logit_terms(z, xp=np):
    """log sigmoid(z) and its first two derivatives in z."""
    log_p = -xp.logaddexp(0.0, -z)
    d1 = special.expit(-z, xp)
    d2 = -special.expit(z, xp) * d1
    return log_p, d1, d2


class BernoulliLikelihood(Likelihood):
    """``p(y = 1 | f) = link(f)`` for labels y in {0, 1}, with one latent function.

    Expectations under the latent marginal N(f | m, v) are taken by Gauss-Hermite
    quadrature on ``n_points`` nodes. The derivative in the variance uses
    d/dv E[g(f)] = 0.5 E[g''(f)] (Opper & Archambeau, 2009) on the same nodes, which
    stays bounded as v -> 0, where differentiating the nodes would divide by sqrt(v).

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
    #: natural steps at every evaluation (docs/benchmarks.md, "The binary search on
    #: Gaussian pseudo-observations"). Both links are log-concave, so every row's
    #: pseudo-precision is positive.
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
        terms = _probit_terms if self.link == "probit" else _logit_terms
        log_p, d1, d2 = terms(z, xp)
        ell = log_p @ w
        d_mean = sign[:, 0] * (d1 @ w)
        # d2 carries sign^2 = 1.
        d_var = 0.5 * (d2 @ w)
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
            return special.ndtr(mean / xp.sqrt(1.0 + xp.maximum(var, 0.0)), xp)
        return xp.reshape(special.expit(latent_nodes(nodes, mean, var, xp), xp) @ w, mean.shape)
