"""The state of a multi-output model: one basis state per latent group, and the mixing."""

from dataclasses import dataclass

import numpy as np

from ..bases.state import VariationalState
from .outputs import LinearMixing


@dataclass
class MixedState(VariationalState):
    """Variational parameters of every latent group, and the mixing matrix.

    A group is a block of latent columns that share one kernel and one basis state (its
    ``q_mean`` has one column per latent, its covariances one per latent): the LMC has L
    groups of one latent, each with its own kernel; independent outputs one group of P.
    Every group's inducing inputs are the same array (shared inducing inputs).

    Attributes
    ----------
    groups : tuple of VariationalState
        The basis states, in the order of the latent columns.
    mixing : array of shape (P, L)
        W, mapping the L latent columns to the P outputs.
    mixing_learned : bool
        Whether Adam moves W and the offsets (the LMC) or they stay fixed (the identity and
        zero offsets of independent outputs).
    offset : array of shape (P,)
        A constant added to each output, f = W g + b. Each target column is centred on its
        own observed entries, so where entries are missing the columns' centres are not
        those of one mixture of zero-mean latents; a learned offset takes up the
        difference, which L < P latents otherwise spend a latent on (docs/constants.md).
    joint_inverse_factor : array of shape (L M, L M) or None
        L_B^-1 of the joint q over every latent's whitened inducing values, whose
        covariance is its Gram matrix, where the fit ended with the joint optimum in closed
        form (the coupled basis); None while the groups' own (mean-field) q holds. The
        means are the groups' either way. Training steps work on the mean-field q and
        drop it.
    """

    groups: tuple
    mixing: np.ndarray
    mixing_learned: bool
    offset: np.ndarray
    joint_inverse_factor: object = None

    @property
    def inducing(self):
        """The shared inducing inputs (M, D)."""
        return self.groups[0].inducing

    @property
    def orthogonal(self):
        """The shared second inducing set, where the basis has one."""
        return self.groups[0].orthogonal

    @property
    def widths(self):
        """The number of latent columns of each group."""
        return tuple(int(g.q_mean.shape[1]) for g in self.groups)

    def output_map(self):
        """W and the offsets mix the groups (:class:`.outputs.LinearMixing`)."""
        return LinearMixing(self.mixing_learned)

    def columns(self):
        """The slice of the latent columns of each group."""
        out, start = [], 0
        for width in self.widths:
            out.append(slice(start, start + width))
            start += width
        return out
