"""Categorical observations of K latent functions: multi-class classification.

Both likelihoods take one latent function per class, each with its own marginal
variance, and integer labels 0..K-1 given as an array of shape (n,) or (n, 1) (floats
holding whole numbers are accepted, since the model stores targets as a float matrix).

Their methods take arrays of any Array API namespace and return arrays of that
namespace, on the inputs' device, in the floating dtype of ``mean`` and ``var``. The
quadrature nodes and the fixed draws are put on that device once per device and dtype.
Numpy inputs (array-likes included) are computed in float64.
"""

import math

import numpy as np
from numpy.polynomial.hermite import hermgauss

from .. import backend, linalg
from ..linalg import pending_flags
from . import _special as special
from ._base import Likelihood
from ._quadrature import rule_like

#: Floor of the marginal variances under a square root; the derivatives below it are
#: those at the floor, so an optimiser still sees which way the variance should move.
VAR_FLOOR = 1e-10
# A Python float (array_api_strict refuses numpy scalars; float32 stays float32 with it).
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _check_labels(y, n_rows, n_classes, xp=np):
    """Class indices (int64) of the labels ``y``, or ValueError.

    For a namespace other than numpy the check costs one synchronisation with the host
    (a single boolean), which a GPU pays once per call; within
    :func:`skgp_sparse.linalg.deferred_checks` it is noted as a flag instead, and the
    careful path's replay raises the error.
    """
    labels = xp.reshape(xp.asarray(y), (-1,))
    if labels.shape[0] != n_rows:
        raise ValueError(f"expected {n_rows} labels, got {labels.shape[0]}")
    # Whole floats are accepted: the model stores targets as a float matrix.
    whole = labels if xp.isdtype(labels.dtype, "integral") else xp.round(labels)
    invalid = xp.any((whole != labels) | (whole < 0) | (whole >= n_classes))
    flags = pending_flags()
    if flags is not None:
        flags.note(invalid)
        # In range whatever was given, so that the step runs to its check (its values are
        # thrown away there when the flag is raised).
        whole = xp.clip(whole, min=0, max=n_classes - 1)
    elif bool(invalid):
        raise ValueError(f"labels must be integers in [0, {n_classes - 1}]")
    return xp.astype(whole, xp.int64)


def _one_hot(idx, n_classes, xp):
    """Boolean (n, K) array, True at each row's class."""
    return xp.arange(n_classes, device=backend.device_of(idx)) == xp.reshape(idx, (-1, 1))


class RobustMaxLikelihood(Likelihood):
    """``p(y = k | f) = 1 - epsilon`` if k = argmax f, else ``epsilon / (K - 1)``.

    With P = Pr_q[argmax f = y] the expected log-likelihood is
    ``P log(1 - epsilon) + (1 - P) log(epsilon / (K - 1))``, and
    ``P = E_{u ~ N(m_y, v_y)} prod_{j != y} Phi((u - m_j) / sqrt(v_j))``, a one-dimensional
    integral taken by Gauss-Hermite quadrature. The derivatives are those of the
    quadrature sum itself, so they agree with the value to rounding error.

    Parameters
    ----------
    n_classes : int
        Number of classes K >= 2.
    epsilon : float, default=1e-3
        Probability mass given to the classes that are not the argmax.
    n_points : int, default=20
        Number of Gauss-Hermite nodes.
    """

    def __init__(self, n_classes, epsilon=1e-3, n_points=20):
        if int(n_classes) < 2:
            raise ValueError(f"n_classes must be at least 2, got {n_classes!r}")
        if not 0.0 < float(epsilon) < 1.0:
            raise ValueError(f"epsilon must lie in (0, 1), got {epsilon!r}")
        self.n_classes = int(n_classes)
        self.epsilon = float(epsilon)
        self.n_points = int(n_points)
        x, w = hermgauss(self.n_points)
        self._nodes, self._weights = x, w / np.sqrt(np.pi)

    @property
    def n_latent(self):
        """K: one latent function per class."""
        return self.n_classes

    @property
    def _log_hit(self):
        return np.log1p(-self.epsilon)

    @property
    def _log_miss(self):
        return np.log(self.epsilon / (self.n_classes - 1))

    def _argmax_probability(self, idx, mean, var, need_grad, xp=np):
        """P = Pr_q[argmax f = idx] per row, and optionally dP/dmean, dP/dvar (n, K)."""
        n, K = mean.shape
        nodes, weights = rule_like(self._nodes, self._weights, mean)
        v = xp.clip(var, min=VAR_FLOOR)
        s = xp.sqrt(v)
        column = xp.reshape(idx, (-1, 1))
        m_y = xp.take_along_axis(mean, column, axis=1)[:, 0]
        v_y = xp.take_along_axis(v, column, axis=1)[:, 0]
        root_2v_y = xp.sqrt(2.0 * v_y)
        u = m_y[:, None] + root_2v_y[:, None] * nodes  # (n, Q)
        z = (u[:, :, None] - mean[:, None, :]) / s[:, None, :]  # (n, Q, K)
        log_phi_cdf = special.log_ndtr(z, xp)
        label = _one_hot(idx, K, xp)  # (n, K)
        own = label[:, None, :]
        # The label's own column is not a factor of the product.
        log_phi_cdf = xp.where(own, 0.0, log_phi_cdf)
        log_prod = xp.sum(log_phi_cdf, axis=2)  # (n, Q)
        P = xp.exp(log_prod) @ weights
        if not need_grad:
            return P, None, None
        # d prod / d z_j = phi(z_j) * prod_{k != j, y} Phi(z_k), formed in logs so that a
        # factor Phi(z_j) that underflows is never divided by.
        log_pdf = -0.5 * z * z - _HALF_LOG_2PI
        A = xp.where(own, 0.0, xp.exp(log_prod[:, :, None] - log_phi_cdf + log_pdf))
        A = A * weights[None, :, None]
        # z_j = (u - m_j) / s_j, u = m_y + sqrt(2 v_y) x.
        A_over_s = A / s[:, None, :]
        d_mean = -xp.sum(A_over_s, axis=1)  # (n, K), the j != y columns
        d_var = -xp.sum(A_over_s * z, axis=1) / (2.0 * s)
        through_u = xp.sum(A_over_s, axis=2)  # dP/du at each node, (n, Q)
        d_mean = xp.where(label, xp.sum(through_u, axis=1)[:, None], d_mean)
        d_var = xp.where(label, ((through_u @ nodes) / root_2v_y)[:, None], d_var)
        return P, d_mean, d_var

    def expected_log_lik(self, y, mean, var):
        """Per-row ``log_miss + (log_hit - log_miss) P`` and its derivatives in every
        latent mean and variance, P = Pr_q[argmax f = y] by the class's quadrature.

        Arguments and returns: the contract of
        :class:`~skgp_sparse.likelihoods.Likelihood`, with K latent functions.
        """
        # The labels stay as given: _check_labels reads them as integers.
        xp, _, mean, var = self._inputs(y, mean, var, float_targets=False)
        idx = _check_labels(y, mean.shape[0], self.n_classes, xp)
        P, dP_mean, dP_var = self._argmax_probability(idx, mean, var, True, xp)
        gap = float(self._log_hit - self._log_miss)
        ell = float(self._log_miss) + gap * P
        return ell[:, None], gap * dP_mean, gap * dP_var

    def argmax_probabilities(self, mean, var):
        """Pr_q[argmax f = k] for every class k, array of shape (n, K), rows renormalised to
        sum to one, from the marginals of the K latent functions (shape (n, K) each)."""
        xp, _, mean, var = self._inputs(None, mean, var)
        n = mean.shape[0]
        device = backend.device_of(mean)
        P = xp.stack(
            [
                self._argmax_probability(xp.full((n,), k, device=device), mean, var, False, xp)[0]
                for k in range(self.n_classes)
            ],
            axis=1,
        )
        # Each column carries its own quadrature error; the events partition the space.
        return P / xp.sum(P, axis=1, keepdims=True)

    def predict_proba(self, mean, var):
        """Predictive class probabilities ``P_k (1 - eps) + (1 - P_k) eps / (K - 1)``, with
        P from :meth:`argmax_probabilities`.

        Arguments and returns: the contract of
        :class:`~skgp_sparse.likelihoods.Likelihood`, with K latent functions.
        """
        P = self.argmax_probabilities(mean, var)
        miss = self.epsilon / (self.n_classes - 1)
        return miss + P * (1.0 - self.epsilon - miss)


class SoftmaxLikelihood(Likelihood):
    """``p(y = k | f) = softmax(f)_k``, expectations by Monte Carlo on fixed draws.

    The standard-normal draws are taken once from ``seed``, so the expected
    log-likelihood is a deterministic function of (mean, var) and its reparameterised
    derivatives are its exact derivatives. Half the draws are the negatives of the
    other half: the odd terms of the integrand then cancel exactly, and the variance
    derivative, sum_s g'(m + sqrt(v) e_s) e_s / (2 sqrt(v)), becomes a symmetric
    difference that stays bounded as v -> 0 for all variances alike. When
    ``n_samples / 2 >= K`` the draws are also whitened to an exact identity second moment.

    That symmetric difference has a step of sqrt(v), down to sqrt(VAR_FLOOR) = 1e-5, where
    float32 would keep about two digits of it. So :meth:`expected_log_lik` computes
    float32 inputs in float64 (the widest float of their device; on a device without
    float64 the variance derivative keeps about eps32 / sqrt(v) relative accuracy) and
    returns float32.

    Parameters
    ----------
    n_classes : int
        Number of classes K >= 2.
    n_samples : int, default=64
        Number of draws per row; must be even (antithetic pairs).
    seed : int, default=0
        Seed of the fixed draws.
    """

    def __init__(self, n_classes, n_samples=64, seed=0):
        if int(n_classes) < 2:
            raise ValueError(f"n_classes must be at least 2, got {n_classes!r}")
        if int(n_samples) < 2 or int(n_samples) % 2:
            raise ValueError(f"n_samples must be a positive even integer, got {n_samples!r}")
        self.n_classes = int(n_classes)
        self.n_samples = int(n_samples)
        self.seed = seed
        half = np.random.default_rng(seed).standard_normal((self.n_samples // 2, self.n_classes))
        if half.shape[0] >= self.n_classes:
            # Whiten so the draws' second moment is exactly the identity: the estimate is
            # then exact for every quadratic integrand, and the cross terms
            # sqrt(v_j v_k) e_j e_k, which would make d/dv_j grow like sqrt(v_k / v_j),
            # vanish at second order.
            chol = np.linalg.cholesky(half.T @ half / half.shape[0])
            half = np.linalg.solve(chol, half.T).T
        self._draws = np.concatenate([half, -half])  # (S, K)

    @property
    def n_latent(self):
        """K: one latent function per class."""
        return self.n_classes

    def _latent_draws(self, mean, var, xp=np):
        s = xp.sqrt(xp.clip(var, min=VAR_FLOOR))
        draws = backend.constant(self._draws, mean)
        return mean[:, None, :] + s[:, None, :] * draws, s, draws  # (n, S, K)

    def expected_log_lik(self, y, mean, var):
        """Per-row E_q[log softmax(f)_y] and its derivatives in every latent mean and
        variance, on the fixed draws.

        Arguments and returns: the contract of
        :class:`~skgp_sparse.likelihoods.Likelihood`, with K latent functions.
        """
        # The labels stay as given: _check_labels reads them as integers.
        xp, _, mean, var = self._inputs(y, mean, var, float_targets=False)
        dtype = mean.dtype
        # The symmetric difference of the variance derivative needs float64 (above).
        wide = backend.widest_float(xp, backend.device_of(mean))
        mean, var = xp.astype(mean, wide, copy=False), xp.astype(var, wide, copy=False)
        n = mean.shape[0]
        idx = _check_labels(y, n, self.n_classes, xp)
        f, s, draws = self._latent_draws(mean, var, xp)
        log_p = special.log_softmax(f, 2, xp)
        ell = xp.mean(xp.take_along_axis(log_p, xp.reshape(idx, (-1, 1, 1)), axis=2)[:, :, 0], axis=1)
        # d log softmax(f)_y / d f = onehot(y) - softmax(f).
        grad = linalg.add_at_last_index(-xp.exp(log_p), idx, 1.0)
        d_mean = xp.mean(grad, axis=1)
        d_var = linalg.middle_axis_dot(grad, draws) / (self.n_samples * 2.0 * s)
        if dtype != d_var.dtype:
            return xp.astype(ell[:, None], dtype), xp.astype(d_mean, dtype), xp.astype(d_var, dtype)
        return ell[:, None], d_mean, d_var

    def predict_proba(self, mean, var):
        """Predictive class probabilities E_q[softmax(f)] on the same fixed draws.

        Arguments and returns: the contract of
        :class:`~skgp_sparse.likelihoods.Likelihood`, with K latent functions.
        """
        xp, _, mean, var = self._inputs(None, mean, var)
        f, _, _ = self._latent_draws(mean, var, xp)
        return xp.mean(special.softmax(f, 2, xp), axis=1)
