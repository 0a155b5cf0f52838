"""Variational families. Each module offers the same small set of functions:

``init_state(inducing, n_outputs, n_covariances)``, ``marginals(kernel, X, state, jitter,
need_grad)``, ``backward(tape, state, d_mean, d_var)``, ``kl_divergence(state)``,
``natural_step(tape, state, d_mean, d_var, step)``, ``make_predictor(kernel, state, jitter)``
and the tuple ``ADAM_FIELDS`` of state fields that Adam moves; a state has ``copy()`` and
``drop_caches()``.
"""

from . import coupled

#: Bases that are implemented, by the name used in ``basis=``.
BASES = {"coupled": coupled}
#: Bases announced in the documentation whose implementation has not landed yet.
PLANNED_BASES = ("orth_decoupled", "solve", "inverse_free")
#: Bases that use ``n_orthogonal``.
ORTHOGONAL_BASES = ("orth_decoupled", "solve")

__all__ = ["BASES", "PLANNED_BASES", "ORTHOGONAL_BASES", "coupled"]
