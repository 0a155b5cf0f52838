"""Inducing features: what each inducing variable is, and its covariances.

An inducing variable may be the latent function's value at a point (inducing points, the
default) or a linear functional of the whole function: a Gaussian-weighted average of it
(:class:`Multiscale`), its inner product with a sinusoid in the kernel's reproducing kernel
Hilbert space on an interval (variational Fourier features, :mod:`._vff`), or an average of
its Fourier transform over a small band of frequencies (integrated Fourier features,
:mod:`._iff`). A sparse variational GP uses such variables exactly as it uses inducing
points: only the covariances K(u, u) and K(u, f) change (K(f, f) stays the kernel's own).

The estimators take the kind as ``inducing_features=`` (a name or an object of this
package). Every covariance goes through one seam, a :class:`Covariances` resolved once by
(feature kind, kernel form) (:func:`covariances`); :func:`register_features` adds a pair.
"""

from ._forms import (KernelForm, MaternForm, RBFForm, ScaledRBFForm, StationaryForm, kernel_form,
                     stationary_length_scales)
from ._kinds import FITTED_ATTRIBUTES, KINDS, InducingFeatures, InducingPoints, Multiscale, as_features
from ._fourier import (FeatureStatistics, FourierCovariances, FourierFeatures, StatisticsBound, feature_statistics,
                       fourier_covariances)
from ._multiscale import MultiscaleCovariances
from ._registry import Covariances, covariances, point_covariances, register_features, registered_pairs

# Multiscale windows have closed forms under an amplitude times an RBF.
register_features(Multiscale, RBFForm, MultiscaleCovariances)
register_features(Multiscale, ScaledRBFForm, MultiscaleCovariances)
# Fourier features: VFF under a Matern in one dimension, IFF under any known spectral density.
register_features(FourierFeatures, MaternForm, fourier_covariances)
register_features(FourierFeatures, RBFForm, fourier_covariances)
register_features(FourierFeatures, ScaledRBFForm, fourier_covariances)
KINDS[FourierFeatures.name] = FourierFeatures

__all__ = [
    "Covariances",
    "FeatureStatistics",
    "FourierCovariances",
    "StatisticsBound",
    "feature_statistics",
    "FourierFeatures",
    "FITTED_ATTRIBUTES",
    "InducingFeatures",
    "InducingPoints",
    "KINDS",
    "KernelForm",
    "MaternForm",
    "Multiscale",
    "MultiscaleCovariances",
    "point_covariances",
    "RBFForm",
    "ScaledRBFForm",
    "StationaryForm",
    "as_features",
    "covariances",
    "kernel_form",
    "register_features",
    "registered_pairs",
    "stationary_length_scales",
]
