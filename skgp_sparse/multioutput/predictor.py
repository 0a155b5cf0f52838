"""The fitted multi-output model frozen into arrays: :class:`MixedPredictor`."""

from dataclasses import dataclass, field

import numpy as np

from .. import backend
from ..kernels import compile_kernel
from .mixing import mix


@dataclass
class MixedPredictor:
    """Every latent group's predictor, its kernel, and the mixing W.

    ``latent`` answers as a single basis's predictor does, for the outputs: their means
    (n, P) and variances (n, P), or covariances (P, n, n), each output's the sum over the
    latents of W[p, l]^2 times the latent's. :meth:`latent_parts` gives the latents' own.
    The kernels are kept as scikit-learn objects and compiled on first use, so that a
    pickle holds arrays and kernels only.

    Attributes
    ----------
    parts : tuple
        The basis's predictor of each latent group.
    kernels : tuple of scikit-learn kernels
        The distinct fitted kernels.
    kernel_index : tuple of int
        Each group's kernel, as an index into ``kernels``.
    mixing : ndarray of shape (P, L)
    offset : ndarray of shape (P,)
        The constant of each output (zero for independent outputs).
    """

    parts: tuple
    kernels: tuple
    kernel_index: tuple
    mixing: np.ndarray
    offset: np.ndarray
    _compiled: list = field(default=None, init=False, repr=False, compare=False)

    def _kernel(self, g):
        if self._compiled is None:
            self._compiled = [compile_kernel(k, white_as_noise=True) for k in self.kernels]
        return self._compiled[self.kernel_index[g]]

    def latent_parts(self, X, full_cov=False):
        """The latents' means (n, L) and variances (n, L), or covariances (L, n, n), in
        X's library (the predictor's arrays there too, as ``state_to`` moves them)."""
        means, seconds = [], []
        for g, part in enumerate(self.parts):
            mean, second = part.latent(self._kernel(g), X, full_cov=full_cov)
            xp = backend.namespace(mean)
            shape = ((mean.shape[1],) + tuple(second.shape[1:])) if full_cov else tuple(mean.shape)
            means.append(mean)
            seconds.append(xp.broadcast_to(second, shape))
        return xp.concat(means, axis=1), xp.concat(seconds, axis=0 if full_cov else 1)

    def latent(self, kernel, X, full_cov=False):
        """The outputs' latent means (n, P) and variances (n, P), or covariances (P, n, n).
        ``kernel`` is not read (each group has its own); it keeps the single-output call."""
        mean_g, second = self.latent_parts(X, full_cov)
        xp = backend.namespace(mean_g)
        mean = mean_g @ self.mixing.T + xp.reshape(self.offset, (1, -1))
        if not full_cov:
            return mean, mix(mean_g, second, self.mixing)[1]
        squares = self.mixing * self.mixing
        cov = xp.stack([sum(squares[p, l] * second[l, ...] for l in range(second.shape[0]))
                        for p in range(squares.shape[0])])
        return mean, cov

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_compiled"] = None
        return state
