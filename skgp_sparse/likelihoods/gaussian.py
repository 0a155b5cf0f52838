"""Gaussian observation noise: the conjugate case, everything in closed form."""

import numpy as np

LOG_2PI = np.log(2.0 * np.pi)


class GaussianLikelihood:
    """``y = f + eps`` with ``eps ~ N(0, noise_variance)``, shared by every output.

    The basis meets the likelihood only through the marginals ``(mean, var)`` of the
    latent function at the rows of a minibatch.
    """

    #: The expected log-likelihood is quadratic in f, so a natural step of size one on a
    #: full batch lands on the optimal q(u).
    conjugate = True
    #: dELL/dvar is the same for every output, so the outputs may share one covariance.
    shared_variance_adjoint = True

    def __init__(self, noise_variance):
        self.noise_variance = float(noise_variance)

    def expected_log_lik(self, y, mean, var):
        """Per-entry E_q[log p(y | f)] and its derivatives in mean and var.

        Parameters
        ----------
        y, mean : ndarray of shape (n, P)
        var : ndarray of shape (n, 1) or (n, P)
            Marginal variances of the latent function (broadcast over outputs).

        Returns
        -------
        ell : ndarray of shape (n, P)
        d_mean : ndarray of shape (n, P)
        d_var : ndarray of shape (n, P)
        """
        s2 = self.noise_variance
        resid = y - mean
        ell = -0.5 * (LOG_2PI + np.log(s2)) - 0.5 * (resid * resid + var) / s2
        d_mean = resid / s2
        d_var = np.broadcast_to(-0.5 / s2, ell.shape)
        return ell, d_mean, d_var

    def d_log_noise(self, y, mean, var):
        """Per-entry derivative of the expected log-likelihood in ``log(noise_variance)``."""
        s2 = self.noise_variance
        resid = y - mean
        return -0.5 + 0.5 * (resid * resid + var) / s2

    def predictive(self, mean, var):
        """Mean and variance of y given the latent marginals."""
        return mean, var + self.noise_variance

    def log_predictive_density(self, y, mean, var):
        """log N(y | mean, var + noise_variance), per entry."""
        total = var + self.noise_variance
        return -0.5 * (LOG_2PI + np.log(total) + (y - mean) ** 2 / total)
