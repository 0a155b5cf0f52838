"""Categorical observations of K latent functions: multi-class classification.

Both likelihoods take one latent function per class, each with its own marginal
variance, and integer labels 0..K-1 given as an array of shape (n,) or (n, 1) (floats
holding whole numbers are accepted, since the model stores targets as a float matrix).
"""

import numpy as np
from numpy.polynomial.hermite import hermgauss
from scipy.special import log_ndtr, log_softmax, softmax

#: Floor of the marginal variances under a square root; the derivatives below it are
#: those at the floor, so an optimiser still sees which way the variance should move.
VAR_FLOOR = 1e-10
_HALF_LOG_2PI = 0.5 * np.log(2.0 * np.pi)


def _check_labels(y, n_rows, n_classes):
    labels = np.asarray(y).reshape(-1)
    if labels.shape[0] != n_rows:
        raise ValueError(f"expected {n_rows} labels, got {labels.shape[0]}")
    idx = np.rint(labels).astype(np.intp)
    if np.any(idx != labels) or np.any(idx < 0) or np.any(idx >= n_classes):
        raise ValueError(f"labels must be integers in [0, {n_classes - 1}]")
    return idx


class RobustMaxLikelihood:
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

    #: The expected log-likelihood is not quadratic in f: no exact unit natural step.
    conjugate = False

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
    def _log_hit(self):
        return np.log1p(-self.epsilon)

    @property
    def _log_miss(self):
        return np.log(self.epsilon / (self.n_classes - 1))

    def _argmax_probability(self, idx, mean, var, need_grad):
        """P = Pr_q[argmax f = idx] per row, and optionally dP/dmean, dP/dvar (n, K)."""
        n, K = mean.shape
        rows = np.arange(n)
        v = np.maximum(var, VAR_FLOOR)
        s = np.sqrt(v)
        m_y, v_y = mean[rows, idx], v[rows, idx]
        root_2v_y = np.sqrt(2.0 * v_y)
        u = m_y[:, None] + root_2v_y[:, None] * self._nodes  # (n, Q)
        z = (u[:, :, None] - mean[:, None, :]) / s[:, None, :]  # (n, Q, K)
        log_phi_cdf = log_ndtr(z)
        own = np.zeros((n, 1, K), dtype=bool)
        own[rows, 0, idx] = True
        # The label's own column is not a factor of the product.
        log_phi_cdf = np.where(own, 0.0, log_phi_cdf)
        log_prod = log_phi_cdf.sum(axis=2)  # (n, Q)
        P = np.exp(log_prod) @ self._weights
        if not need_grad:
            return P, None, None
        # d prod / d z_j = phi(z_j) * prod_{k != j, y} Phi(z_k), formed in logs so that a
        # factor Phi(z_j) that underflows is never divided by.
        log_pdf = -0.5 * z * z - _HALF_LOG_2PI
        A = np.where(own, 0.0, np.exp(log_prod[:, :, None] - log_phi_cdf + log_pdf))
        A *= self._weights[None, :, None]
        # z_j = (u - m_j) / s_j, u = m_y + sqrt(2 v_y) x.
        A_over_s = A / s[:, None, :]
        d_mean = -A_over_s.sum(axis=1)  # (n, K), the j != y columns
        d_var = -(A_over_s * z).sum(axis=1) / (2.0 * s)
        through_u = A_over_s.sum(axis=2)  # dP/du at each node, (n, Q)
        d_mean[rows, idx] = through_u.sum(axis=1)
        d_var[rows, idx] = (through_u @ self._nodes) / root_2v_y
        return P, d_mean, d_var

    def expected_log_lik(self, y, mean, var):
        """Per-row E_q[log p(y | f)] and its derivatives in every latent mean and variance.

        Parameters
        ----------
        y : ndarray of shape (n,) or (n, 1)
            Integer class labels in 0..K-1.
        mean, var : ndarray of shape (n, K)
            Marginal means and variances of the K latent functions.

        Returns
        -------
        ell : ndarray of shape (n, 1)
        d_mean : ndarray of shape (n, K)
        d_var : ndarray of shape (n, K)
        """
        mean = np.asarray(mean, dtype=float)
        var = np.asarray(var, dtype=float)
        idx = _check_labels(y, mean.shape[0], self.n_classes)
        P, dP_mean, dP_var = self._argmax_probability(idx, mean, var, need_grad=True)
        gap = self._log_hit - self._log_miss
        ell = self._log_miss + gap * P
        return ell[:, None], gap * dP_mean, gap * dP_var

    def argmax_probabilities(self, mean, var):
        """Pr_q[argmax f = k] for every class, rows renormalised to sum to one.

        Parameters
        ----------
        mean, var : ndarray of shape (n, K)

        Returns
        -------
        ndarray of shape (n, K)
        """
        mean = np.asarray(mean, dtype=float)
        var = np.asarray(var, dtype=float)
        n = mean.shape[0]
        P = np.column_stack(
            [self._argmax_probability(np.full(n, k), mean, var, need_grad=False)[0] for k in range(self.n_classes)]
        )
        # Each column carries its own quadrature error; the events partition the space.
        return P / P.sum(axis=1, keepdims=True)

    def predict_proba(self, mean, var):
        """Predictive class probabilities ``P_k (1 - eps) + (1 - P_k) eps / (K - 1)``.

        Parameters
        ----------
        mean, var : ndarray of shape (n, K)

        Returns
        -------
        ndarray of shape (n, K)
            Rows sum to one.
        """
        P = self.argmax_probabilities(mean, var)
        miss = self.epsilon / (self.n_classes - 1)
        return miss + P * (1.0 - self.epsilon - miss)


class SoftmaxLikelihood:
    """``p(y = k | f) = softmax(f)_k``, expectations by Monte Carlo on fixed draws.

    The standard-normal draws are taken once from ``seed``, so the expected
    log-likelihood is a deterministic function of (mean, var) and its reparameterised
    derivatives are its exact derivatives. Half the draws are the negatives of the
    other half: the odd terms of the integrand then cancel exactly, and the variance
    derivative, sum_s g'(m + sqrt(v) e_s) e_s / (2 sqrt(v)), becomes a symmetric
    difference that stays bounded as v -> 0 for all variances alike. When
    ``n_samples / 2 >= K`` the draws are also whitened to an exact identity second moment.

    Parameters
    ----------
    n_classes : int
        Number of classes K >= 2.
    n_samples : int, default=64
        Number of draws per row; must be even (antithetic pairs).
    seed : int, default=0
        Seed of the fixed draws.
    """

    #: The expected log-likelihood is not quadratic in f: no exact unit natural step.
    conjugate = False

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

    def _latent_draws(self, mean, var):
        s = np.sqrt(np.maximum(var, VAR_FLOOR))
        return mean[:, None, :] + s[:, None, :] * self._draws, s  # (n, S, K)

    def expected_log_lik(self, y, mean, var):
        """Per-row E_q[log softmax(f)_y] and its derivatives in every latent mean and variance.

        Parameters
        ----------
        y : ndarray of shape (n,) or (n, 1)
            Integer class labels in 0..K-1.
        mean, var : ndarray of shape (n, K)

        Returns
        -------
        ell : ndarray of shape (n, 1)
        d_mean : ndarray of shape (n, K)
        d_var : ndarray of shape (n, K)
        """
        mean = np.asarray(mean, dtype=float)
        var = np.asarray(var, dtype=float)
        n = mean.shape[0]
        idx = _check_labels(y, n, self.n_classes)
        f, s = self._latent_draws(mean, var)
        log_p = log_softmax(f, axis=2)
        rows = np.arange(n)
        ell = log_p[rows, :, idx].mean(axis=1)
        # d log softmax(f)_y / d f = onehot(y) - softmax(f).
        grad = -np.exp(log_p)
        grad[rows, :, idx] += 1.0
        d_mean = grad.mean(axis=1)
        d_var = np.einsum("nsk,sk->nk", grad, self._draws) / (self.n_samples * 2.0 * s)
        return ell[:, None], d_mean, d_var

    def predict_proba(self, mean, var):
        """E_q[softmax(f)] on the same fixed draws.

        Parameters
        ----------
        mean, var : ndarray of shape (n, K)

        Returns
        -------
        ndarray of shape (n, K)
            Rows sum to one.
        """
        mean = np.asarray(mean, dtype=float)
        var = np.asarray(var, dtype=float)
        f, _ = self._latent_draws(mean, var)
        return softmax(f, axis=2).mean(axis=1)
