"""Kernel forms: what an interdomain feature's formulas need to know of a kernel.

A feature's closed forms are written for a stationary profile (an RBF, a Matern of one
smoothness) with a constant amplitude; the registry (:mod:`._registry`) is keyed by the
form's class. :func:`kernel_form` reads a scikit-learn kernel once, when a model is made:
its latent part (top-level WhiteKernel summands are noise, which the model carries
apart) must be exactly one of the profiles below, optionally times a ConstantKernel. A
kernel of any other shape, a subclass of a profile included (it may reparameterise its
parent, and the parent's formulas would then be silently wrong), has the generic form,
which only inducing points accept.

A form also maps the formulas' gradients (in the log variance and the log length scale
of each input dimension) into the kernel's theta, in scikit-learn's order.
"""

import numpy as np
from sklearn.gaussian_process import kernels as skk

from ..kernels import FeatureScaledRBF

__all__ = ["KernelForm", "StationaryForm", "RBFForm", "ScaledRBFForm", "MaternForm", "kernel_form",
           "stationary_length_scales"]


class KernelForm:
    """Any kernel: the form of a kernel that has no closed-form profile below."""

    def __init__(self, kernel):
        #: The kernel the form was read from.
        self.kernel = kernel

    @classmethod
    def describe(cls):
        """A short name for error messages."""
        return "any kernel"


class StationaryForm(KernelForm):
    """An amplitude ``variance`` times a stationary profile with per-dimension length scales.

    The values are read from a kernel's current theta at each call (:meth:`values`):
    the indices and the fixed values are what the form keeps.

    Attributes
    ----------
    variance : float
        The amplitude where it is fixed (1 without a ConstantKernel).
    variance_index : int or None
        Where log(variance) sits in theta (None: fixed, or no ConstantKernel).
    length_scales : ndarray of shape (d,) or (1,)
        The profile's length scales as read (one, isotropic, is broadcast).
    length_scale_index : int or None
        Where the first log length scale sits in theta (None: fixed).
    multiplier : ndarray of shape (d,) or (1,)
        What each dimension's length scale is, per unit of the learned factor (the
        feature scales of :class:`~skgp_sparse.kernels.FeatureScaledRBF`, else 1).
    """

    def __init__(self, kernel, variance, variance_index, length_scales, length_scale_index, multiplier=1.0):
        super().__init__(kernel)
        self.variance = float(variance)
        self.variance_index = variance_index
        self.length_scales = np.atleast_1d(np.asarray(length_scales, dtype=np.float64))
        self.length_scale_index = length_scale_index
        self.multiplier = np.atleast_1d(np.asarray(multiplier, dtype=np.float64))

    def values(self, theta):
        """(variance, length scales of shape (d,) or (1,)) at the log-hyperparameters ``theta``."""
        variance = self.variance if self.variance_index is None else float(np.exp(theta[self.variance_index]))
        if self.length_scale_index is None:
            return variance, self.length_scales
        n = 1 if self._one_factor() else self.length_scales.size
        factor = np.exp(np.asarray(theta[self.length_scale_index : self.length_scale_index + n], dtype=np.float64))
        return variance, factor * self.multiplier

    def _one_factor(self):
        """Whether one theta entry scales every dimension's length scale."""
        return self.length_scales.size == 1

    def theta_bar(self, n_theta, d_log_variance, d_log_length_scales):
        """The gradient in theta (``n_theta`` entries) from the gradients in log(variance)
        and in the log length scale of each input dimension."""
        out = np.zeros(n_theta)
        if self.variance_index is not None:
            out[self.variance_index] += d_log_variance
        if self.length_scale_index is not None:
            self._scatter_length_scales(out, np.asarray(d_log_length_scales, dtype=np.float64))
        return out

    def _scatter_length_scales(self, out, d_log_length_scales):
        start = self.length_scale_index
        if self.length_scales.size == 1:
            out[start] += d_log_length_scales.sum()
        else:
            out[start : start + d_log_length_scales.size] += d_log_length_scales


class RBFForm(StationaryForm):
    """An amplitude times scikit-learn's RBF."""

    @classmethod
    def describe(cls):
        return "RBF"


class ScaledRBFForm(StationaryForm):
    """An amplitude times :class:`~skgp_sparse.kernels.FeatureScaledRBF`: length scales
    ``length_scale * feature_scale``, one learned factor for every dimension."""

    @classmethod
    def describe(cls):
        return "FeatureScaledRBF"

    def _scatter_length_scales(self, out, d_log_length_scales):
        # Every dimension's log length scale moves with the one log factor.
        out[self.length_scale_index] += d_log_length_scales.sum()

    def _one_factor(self):
        return True


class MaternForm(StationaryForm):
    """An amplitude times scikit-learn's Matern of smoothness ``nu``."""

    def __init__(self, kernel, variance, variance_index, length_scales, length_scale_index, nu):
        super().__init__(kernel, variance, variance_index, length_scales, length_scale_index)
        self.nu = float(nu)

    @classmethod
    def describe(cls):
        return "Matern"


def kernel_form(kernel):
    """The :class:`KernelForm` of a scikit-learn kernel (see the module notes)."""
    latent, offset = _latent_part(kernel, 0)
    if latent is None:
        return KernelForm(kernel)
    variance, variance_index, profile, profile_offset = 1.0, None, latent, offset
    if type(latent) is skk.Product:
        parts = [(latent.k1, offset), (latent.k2, offset + _n_theta(latent.k1))]
        constants = [(k, o) for k, o in parts if type(k) is skk.ConstantKernel]
        others = [(k, o) for k, o in parts if type(k) is not skk.ConstantKernel]
        if len(constants) != 1 or len(others) != 1:
            return KernelForm(kernel)
        (constant, constant_offset), (profile, profile_offset) = constants[0], others[0]
        variance = constant.constant_value
        variance_index = None if constant.hyperparameter_constant_value.fixed else constant_offset
    fixed = profile.hyperparameter_length_scale.fixed if hasattr(profile, "hyperparameter_length_scale") else True
    index = None if fixed else profile_offset
    if type(profile) is skk.RBF:
        return RBFForm(kernel, variance, variance_index, profile.length_scale, index)
    if type(profile) is FeatureScaledRBF:
        scale = np.ones(1) if profile.feature_scale is None else np.asarray(profile.feature_scale, dtype=np.float64)
        return ScaledRBFForm(kernel, variance, variance_index, profile.length_scale * scale, index, multiplier=scale)
    if type(profile) is skk.Matern:
        return MaternForm(kernel, variance, variance_index, profile.length_scale, index, profile.nu)
    return KernelForm(kernel)


def stationary_length_scales(kernel, n_dims):
    """The length scale of each of ``n_dims`` input dimensions of a compiled kernel of a
    stationary form, at its current theta; None for a kernel of another form."""
    form = kernel_form(kernel.to_sklearn())
    if not isinstance(form, StationaryForm):
        return None
    return np.broadcast_to(form.values(kernel.theta)[1], (n_dims,)).copy()


def _latent_part(kernel, offset):
    """The kernel without its top-level WhiteKernel summands, and its theta offset; None
    where more than one latent summand remains."""
    if type(kernel) is skk.Sum:
        left, left_offset = _latent_part(kernel.k1, offset)
        right, right_offset = _latent_part(kernel.k2, offset + _n_theta(kernel.k1))
        if left is None or right is None:
            return None, offset
        if left is _WHITE:
            return right, right_offset
        if right is _WHITE:
            return left, left_offset
        return None, offset
    if type(kernel) is skk.WhiteKernel:
        return _WHITE, offset
    return kernel, offset


def _n_theta(kernel):
    """The number of theta entries of a scikit-learn kernel."""
    return int(np.asarray(kernel.theta).size)


#: A marker: a WhiteKernel summand, left to the model's noise.
_WHITE = object()
