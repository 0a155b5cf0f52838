"""The jitter on K(Z, Z): where a fresh model starts it, and what ``jitter="auto"`` allows."""

import numpy as np

from .. import backend
from ..linalg import FLOAT32_MIN_JITTER

#: jitter="auto": the relative jitter on K(Z, Z) is at most this, and the absolute jitter
#: at most this fraction of the noise variance. The bound loses about jitter / (2 noise)
#: nats per well-determined inducing direction, so tying it to the noise keeps that loss
#: below a micro-nat whatever the noise; a factorisation that needs more gets more.
AUTO_JITTER = 1e-6


def auto_jitter(kernel, Z, noise_variance=None):
    """The relative jitter that ``jitter="auto"`` starts from (see :data:`AUTO_JITTER`);
    for float32 inducing inputs no less than the float32 factorisations start from
    (:data:`~skgp_sparse.linalg.FLOAT32_MIN_JITTER`). ``kernel``: the covariances of the
    inducing features Z (:mod:`skgp_sparse.features`; a compiled kernel for points)."""
    xp = backend.namespace(Z)
    floor = FLOAT32_MIN_JITTER if Z.dtype == xp.float32 else 0.0
    diag = kernel.kuu_diag(Z)
    scale = float(xp.mean(diag))
    if noise_variance is None or not scale > 0:
        return AUTO_JITTER
    return max(floor, min(AUTO_JITTER, AUTO_JITTER * noise_variance / scale))


def smallest_noise(model):
    """The model's Gaussian noise variance, the smallest of them where each output has its
    own (the jitter must stay small against every one)."""
    return float(np.min(model.noise.value))


def starting_jitter(jitter, kernel, Z, noise_variance=None):
    """The relative jitter of a fresh model: the estimator's ``jitter``, or :func:`auto_jitter`
    for "auto"."""
    if jitter == "auto":
        return auto_jitter(kernel, Z, noise_variance)
    return float(jitter)
