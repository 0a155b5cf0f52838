"""Gaussian observation noise: the conjugate case, everything in closed form."""

import math

import numpy as np

from .. import backend, linalg
from ._base import Likelihood

LOG_2PI = np.log(2.0 * np.pi)
#: The same as a Python float: an array_api_strict array refuses numpy scalars, and a
#: float32 array stays float32 next to a Python float.
_LOG_2PI = float(LOG_2PI)


class GaussianLikelihood(Likelihood):
    """``y = f + eps`` with ``eps ~ N(0, noise_variance)``, shared by every output.

    The basis meets the likelihood only through the marginals ``(mean, var)`` of the
    latent function at the rows of a minibatch.

    Every method takes arrays of any Array API namespace (numpy, torch, CuPy,
    array_api_strict, ...) and returns arrays of that namespace, on the inputs' device,
    in their floating dtype; the inputs of one call share a namespace (a numpy array
    with a torch tensor is a TypeError, not a silent transfer). The noise variance
    itself is a Python float, or a 0-d array on the rows' device, in their dtype, while a
    training loop holds the hyperparameters there.
    """

    #: The expected log-likelihood is quadratic in f, so a natural step of size one on a
    #: full batch lands on the optimal q(u).
    conjugate = True
    #: Known per-row noise (``extra_noise``) adds to the observation noise here; under
    #: likelihoods without this flag the model adds it to the latent variance instead.
    takes_known_noise = True

    def __init__(self, noise_variance):
        self.noise_variance = float(noise_variance)

    def expected_log_lik(self, y, mean, var, extra_noise=0.0):
        """Per-entry E_q[log p(y | f)] and its derivatives in mean and var.

        Parameters
        ----------
        y, mean : array of shape (n, P)
        var : array of shape (n, 1) or (n, P)
            Marginal variances of the latent function (broadcast over outputs).
        extra_noise : float or array of shape (n, 1), default=0.0
            Known noise variance of each row, added to ``noise_variance`` (GPR's ``alpha``).

        Returns
        -------
        ell : array of shape (n, P)
        d_mean : array of shape (n, P)
        d_var : array of shape (n, P)
            A read-only broadcast view.
        """
        xp = backend.input_namespace(y, mean, var, extra_noise)
        (y,) = backend.likelihood_floats(xp, (mean, var), y, numpy_as_float64=False)
        s2 = self.noise_variance + extra_noise
        # A Python float for a scalar noise: a numpy float64 scalar would promote float32
        # rows. (numpy's float64 scalars are Python floats, and take the same path.)
        per_row = not isinstance(s2, (int, float))
        log_s2 = xp.log(s2) if per_row else math.log(s2)
        resid = y - mean
        ell = -0.5 * (_LOG_2PI + log_s2) - 0.5 * (resid * resid + var) / s2
        d_mean = resid / s2
        # One value per row (or one for all), broadcast rather than filled.
        device = backend.device_of(ell)
        # A scalar noise fills a 0-d array on the device (no copy of host data).
        value = xp.asarray(-0.5 / s2, dtype=ell.dtype, device=device) if per_row else xp.full(
            (), -0.5 / s2, dtype=ell.dtype, device=device)
        d_var = xp.broadcast_to(value, ell.shape)
        return ell, d_mean, d_var

    def d_log_noise(self, y, mean, var, extra_noise=0.0):
        """Per-entry derivative of the expected log-likelihood in ``log(noise_variance)``
        (the learned part of the noise; ``extra_noise`` is known and fixed).

        Written in operators only, so it runs unchanged on arrays of any namespace (y of
        a floating dtype) and returns an array of theirs, shape (n, P).
        """
        s2 = self.noise_variance
        total = s2 + extra_noise
        resid = y - mean
        return s2 * (-0.5 / total + 0.5 * (resid * resid + var) / total**2)

    def predictive(self, mean, var):
        """Mean and variance of y given the latent marginals (any namespace: operators only)."""
        return mean, var + self.noise_variance

    def predictive_covariance(self, mean, cov):
        """Mean (n,) and joint covariance (n, n) of y given the latent joint posterior."""
        return mean, linalg.add_to_diagonal(cov, self.noise_variance)

    def log_predictive_density(self, y, mean, var):
        """log N(y | mean, var + noise_variance), per entry."""
        xp = backend.input_namespace(y, mean, var)
        (y,) = backend.likelihood_floats(xp, (mean, var), y, numpy_as_float64=False)
        total = var + self.noise_variance
        resid = y - mean
        return -0.5 * (_LOG_2PI + xp.log(total) + resid * resid / total)


class NoiseParameter:
    """Where the Gaussian noise variance lives: its own log-parameter, or WhiteKernel terms.

    Parameters
    ----------
    kernel : compiled kernel
    value : float
        Initial noise variance when there is no WhiteKernel summand.
    log_bounds : (float, float) or None
        Bounds of the log noise variance; None keeps it fixed.
    """

    def __init__(self, kernel, value, log_bounds):
        self.kernel = kernel
        self.from_kernel = kernel.white_noise_level > 0 or len(kernel.white_noise_theta_index) > 0
        self.log_value = float(np.log(value))
        self.log_bounds = None if self.from_kernel else log_bounds

    @property
    def value(self):
        """The noise variance: a host float, or a 0-d array on the device where a training
        loop holds ``log_value`` (see :meth:`skgp_sparse.elbo.VariationalModel.hold_hyperparameters_on`)."""
        if self.from_kernel:
            return float(self.kernel.white_noise_level)
        if backend.on_device(self.log_value):
            return backend.namespace(self.log_value).exp(self.log_value)
        return float(np.exp(self.log_value))

    @property
    def learned(self):
        return self.log_bounds is not None

    def set_variance(self, value):
        """Set the noise variance (nothing to set where a WhiteKernel carries it)."""
        if not self.from_kernel:
            self.log_value = float(np.log(value))

    def packed_log_value(self):
        """The log variance as Adam moves it: an array of shape (1,), on the device where a
        training loop holds it there."""
        if backend.on_device(self.log_value):
            return backend.namespace(self.log_value).reshape(self.log_value, (1,))
        return np.array([self.log_value])

    def set_packed_log_value(self, packed):
        """Set the log variance from :meth:`packed_log_value`'s form."""
        self.log_value = backend.namespace(packed).reshape(packed, ()) if backend.on_device(packed) \
            else float(packed[0])

    @staticmethod
    def total(xp, per_entry):
        """The sum of per-entry derivatives in the one log variance."""
        return xp.sum(per_entry)

    def scatter_gradient(self, d_log_noise, theta_grad):
        """Send d ELBO / d log(noise) to the parameter that carries the noise."""
        if not self.from_kernel:
            return d_log_noise
        theta = self.kernel.theta
        total = self.value
        for idx in self.kernel.white_noise_theta_index:
            theta_grad[idx] += d_log_noise * np.exp(theta[idx]) / total
        return None


class OutputGaussianLikelihood(GaussianLikelihood):
    """Gaussian noise of its own variance on each of P outputs, and missing entries.

    ``y[n, p] = f_p(x_n) + eps`` with ``eps ~ N(0, noise_variance[p])``. A NaN target is an
    entry nobody observed: it adds nothing to the expected log-likelihood and its adjoints
    are zero, so it drops out of the bound entry by entry (the row's other outputs still
    count). Used by the multi-output models (:mod:`skgp_sparse.multioutput`).

    Parameters
    ----------
    noise_variance : array-like of shape (P,)
    """

    def __init__(self, noise_variance):
        self.noise_variance = np.array(noise_variance, dtype=np.float64).reshape(-1)

    def _variances(self, xp, like, extra_noise):
        """The noise variance of each entry, (1, P) or (n, P), in the namespace of ``like``."""
        s2 = xp.asarray(self.noise_variance, dtype=like.dtype, device=backend.device_of(like))
        return xp.reshape(s2, (1, -1)) + extra_noise

    def expected_log_lik(self, y, mean, var, extra_noise=0.0):
        """Per-entry E_q[log p(y | f)] and its derivatives in mean and var, zero where y is NaN.

        Parameters
        ----------
        y, mean, var : array of shape (n, P)
        extra_noise : float or array of shape (n, 1), default=0.0
            Known noise variance of each row, added to every output's.

        Returns
        -------
        ell, d_mean, d_var : arrays of shape (n, P)
        """
        xp = backend.input_namespace(y, mean, var, extra_noise)
        (y,) = backend.likelihood_floats(xp, (mean, var), y, numpy_as_float64=False)
        observed, y = _observed(xp, y)
        s2 = self._variances(xp, mean, extra_noise)
        resid = (y - mean) * observed
        ell = (-0.5 * (_LOG_2PI + xp.log(s2)) - 0.5 * (resid * resid + var) / s2) * observed
        return ell, resid / s2, (-0.5 / s2) * observed

    def d_log_noise(self, y, mean, var, extra_noise=0.0):
        """Per-entry derivative of the expected log-likelihood in ``log(noise_variance[p])``
        (zero where y is NaN), shape (n, P)."""
        xp = backend.input_namespace(y, mean, var, extra_noise)
        observed, y = _observed(xp, y)
        s2 = xp.asarray(self.noise_variance, dtype=mean.dtype, device=backend.device_of(mean))
        total = xp.reshape(s2, (1, -1)) + extra_noise
        resid = (y - mean) * observed
        return s2 * (-0.5 / total + 0.5 * (resid * resid + var) / total**2) * observed

    def predictive_covariance(self, mean, cov, output=0):
        """Mean (n,) and joint covariance (n, n) of output ``output`` given its latent joint posterior."""
        return mean, linalg.add_to_diagonal(cov, float(self.noise_variance[output]))


def _observed(xp, y):
    """(1.0 where y is observed and 0.0 where it is NaN, y with its NaNs replaced by zeros)."""
    missing = xp.isnan(y)
    return xp.astype(~missing, y.dtype), xp.where(missing, xp.zeros_like(y), y)


class OutputNoise:
    """One learned (or fixed) log noise variance per output (see :class:`NoiseParameter`).

    Parameters
    ----------
    value : array-like of shape (P,)
        Initial noise variances.
    log_bounds : (float, float) or None
        Bounds of every output's log noise variance; None keeps them fixed.
    """

    #: Never carried by a WhiteKernel (the multi-output models refuse one).
    from_kernel = False

    def __init__(self, value, log_bounds):
        self.log_value = np.log(np.array(value, dtype=np.float64).reshape(-1))
        self.log_bounds = log_bounds

    @property
    def value(self):
        return np.exp(self.log_value)

    @property
    def learned(self):
        return self.log_bounds is not None

    def set_variance(self, value):
        """Set every output's noise variance (``value``: a number or one per output)."""
        self.log_value = np.log(np.array(value, dtype=np.float64).reshape(-1))

    def packed_log_value(self):
        """The log variances as Adam moves them, (P,) (a copy)."""
        return self.log_value.copy()

    def set_packed_log_value(self, packed):
        """Set the log variances from :meth:`packed_log_value`'s form."""
        self.log_value = np.array(backend.to_numpy(packed), dtype=np.float64).reshape(-1)

    @staticmethod
    def total(xp, per_entry):
        """The per-output sums (P,) of per-entry derivatives (n, P) in the log variances."""
        return xp.sum(per_entry, axis=0)

    @staticmethod
    def scatter_gradient(d_log_noise, theta_grad):
        """The gradient in the log variances: their own (no WhiteKernel carries them)."""
        return d_log_noise
