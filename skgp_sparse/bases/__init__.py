"""Variational families. Each module offers the same small set of functions:

- ``init_state(points, n_outputs, n_covariances, n_orthogonal, **options)``: the starting
  state from ``n_inducing + n_orthogonal`` initial inducing inputs (the basis splits them);
  the keyword options a basis takes are named in its ``INIT_OPTIONS`` (default none) and
  stored on the state, so that they are per fit and pickle with the model (orth_decoupled:
  ``kl_columns`` and the ``seed`` of its column sampler);
- ``marginals(kernel, X, state, jitter, need_grad)`` -> ``(mean (B, P), var (B, C), tape)``;
- ``kl_divergence(kernel, state, jitter, tape=None)``: the KL term (a tape from the same
  parameters saves recomputing kernel matrices);
- ``backward(tape, state, d_mean, d_var, fields)`` -> ``(theta_bar, {field: bar})``: the
  gradient of ``F(mean, var) - KL`` where F's adjoints are d_mean and d_var;
- ``natural_step(tape, state, d_mean, d_var, step)`` -> new state (for the same objective);
- ``make_predictor(kernel, state, jitter)`` -> an object with ``latent(kernel, X, full_cov)``;

and three tuples of state fields: ``INDUCING_FIELDS`` (moved by Adam when inducing inputs
are learned), ``ADAM_FIELDS`` (always moved by Adam) and ``VARIATIONAL_FIELDS`` (moved by
Adam instead of natural steps with ``variational_optimizer="adam"``). A state has
``inducing``, ``q_mean`` (M, P), ``copy()`` and ``drop_caches()``, and ``orthogonal`` when
the basis has a second inducing set. ``EXACT_NATURAL_STEP`` (default False) says that a
natural step of size one from a conjugate likelihood's adjoints lands on the optimal q for
those rows (the coupled basis): full-batch Gaussian fits then optimise the collapsed bound.
``CONJUGATE_NATURAL_STEP`` (default False) says that it lands on each Gaussian block's
optimum given the others: a pass of such steps settles q after a minibatch fit.

A basis may also offer ``adam_field_scales(state, step)`` -> ``{field: multiplier}``: the
training loop then scales Adam's learning rate of those fields at that step (0 holds a field
still; inverse_free moves its inducing inputs at a tenth of the rate).

A basis may overwrite the matrices that ``kernel.vjp`` returned to it (the compiled kernels
hand over ownership, :mod:`skgp_sparse.kernels._base`).
"""

from . import coupled, inverse_free, orth_decoupled, solve

#: Bases by the name used in ``basis=``.
BASES = {"coupled": coupled, "orth_decoupled": orth_decoupled, "solve": solve, "inverse_free": inverse_free}
#: Bases that use ``n_orthogonal``.
ORTHOGONAL_BASES = ("orth_decoupled", "solve")

__all__ = ["BASES", "ORTHOGONAL_BASES", "coupled", "orth_decoupled", "solve", "inverse_free"]
