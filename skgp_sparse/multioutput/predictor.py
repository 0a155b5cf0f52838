"""The fitted multi-output model frozen into arrays: :class:`MixedPredictor`."""

from dataclasses import dataclass, field

import numpy as np

from .. import backend
from ..features import InducingFeatures, InducingPoints, covariances
from ..kernels import compile_kernel
from ..linalg import mm
from .collapsed import joint_output_factors, joint_output_variances, projections
from .mixing import mix, output_covariances


@dataclass
class JointCovariance:
    """The joint q's covariance over every latent's whitened inducing values, as a
    predictor needs it: the inducing inputs, each distinct kernel's Cholesky factor of
    K(Z, Z) (jittered as fitted) and L_B^-1 (see :func:`.collapsed.joint_optimal_q`)."""

    inducing: np.ndarray
    #: (K, M, M), one per distinct kernel (an array, so that it moves with the others).
    low_factors: np.ndarray
    inverse_factor: np.ndarray


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
    joint : JointCovariance or None
        Where the fit ended with the joint q (the coupled basis), its covariance: the
        outputs' variances and covariances then come from it (the means do not change).
    features : InducingFeatures
        What the inducing variables are (their covariances are resolved with the kernels,
        on first use).
    """

    parts: tuple
    kernels: tuple
    kernel_index: tuple
    mixing: np.ndarray
    offset: np.ndarray
    joint: JointCovariance = None
    features: InducingFeatures = field(default_factory=InducingPoints)
    _compiled: list = field(default=None, init=False, repr=False, compare=False)

    def _kernel(self, g):
        """The covariances of the features under group ``g``'s kernel (compiled and
        resolved once, and again after unpickling)."""
        if self._compiled is None:
            self._compiled = [covariances(self.features, compile_kernel(k, white_as_noise=True))
                              for k in self.kernels]
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
        if self.joint is not None:
            return mean, self._joint_output_moments(X, full_cov)
        if not full_cov:
            return mean, mix(mean_g, second, self.mixing)[1]
        squares = self.mixing * self.mixing
        cov = xp.stack([sum(squares[p, l] * second[l, ...] for l in range(second.shape[0]))
                        for p in range(squares.shape[0])])
        return mean, cov

    def _kernel_of_column(self):
        """Each latent column's kernel (the joint q is the coupled basis's: its predictors
        have one mean column per latent)."""
        return [self.kernel_index[g] for g, part in enumerate(self.parts) for _ in range(part.mean_weights.shape[1])]

    def _joint_projections(self, X):
        """The distinct compiled kernels, and A_l and t of :func:`.collapsed.projections` at X."""
        kernels = [self._kernel(self.kernel_index.index(k)) for k in range(len(self.kernels))]
        lows = [self.joint.low_factors[k, ...] for k in range(len(kernels))]
        return (kernels,) + tuple(projections(kernels, self._kernel_of_column(), lows, self.joint.inducing, X))

    def _joint_output_moments(self, X, full_cov):
        """Each output's variances (n, P), or covariances over the rows (P, n, n), under the joint q."""
        kernels, A, t = self._joint_projections(X)
        if not full_cov:
            return joint_output_variances(A, t, self.mixing, self.joint.inverse_factor)
        G = joint_output_factors(A, self.mixing, self.joint.inverse_factor)
        xp = backend.namespace(t)
        squares = self.mixing * self.mixing
        residual = self._unexplained_covariances(kernels, A, X)
        return xp.stack([sum(squares[p, l] * residual[l] for l in range(len(A))) + mm(G[p], G[p], trans_a=True)
                         for p in range(len(G))])

    def _unexplained_covariances(self, kernels, A, X):
        """K_l(X, X) - A_l^T A_l of each latent column (n x n): the prior covariance at X that
        its inducing values leave unexplained."""
        return [kernels[k].kff(X) - mm(A[l], A[l], trans_a=True) for l, k in enumerate(self._kernel_of_column())]

    def output_covariances(self, X):
        """The P x P covariance of the outputs' latent values at each row of X, (n, P, P)."""
        if self.joint is None:
            _, var_g = self.latent_parts(X)
            return output_covariances(np.asarray(var_g), self.mixing)
        _, A, t = self._joint_projections(X)
        G = np.stack(joint_output_factors(A, self.mixing, self.joint.inverse_factor))   # (P, LM, n)
        return np.einsum("pl,nl,ql->npq", self.mixing, t, self.mixing) + np.einsum("pkn,qkn->npq", G, G)

    def joint_output_covariance(self, X):
        """The covariance of every output's latent values at every row, ((n P) x (n P)),
        index n * P + p, and their means (n, P): for joint draws."""
        n, P = X.shape[0], self.mixing.shape[0]
        if self.joint is None:
            mean_g, cov_g = self.latent_parts(X, full_cov=True)
            cov = np.einsum("pl,lnm,ql->npmq", self.mixing, cov_g, self.mixing)
        else:
            # The joint q's covariance replaces the latents' own: only their means are needed.
            mean_g, _ = self.latent_parts(X)
            kernels, A, _ = self._joint_projections(X)
            G = np.stack(joint_output_factors(A, self.mixing, self.joint.inverse_factor))   # (P, LM, n)
            residual = np.stack(self._unexplained_covariances(kernels, A, X))
            cov = np.einsum("pl,lnm,ql->npmq", self.mixing, residual, self.mixing) + np.einsum("pkn,qkm->npmq", G, G)
        mean = mean_g @ self.mixing.T + self.offset
        return mean, cov.reshape(n * P, n * P)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_compiled"] = None
        return state
