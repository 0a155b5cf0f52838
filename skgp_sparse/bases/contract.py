"""What a variational family provides, as a type: :class:`Basis`.

A basis is the variational family of a model: its parameters (a state), the latent
marginals at a minibatch's rows, the KL term, their reverse pass, its natural step and
the frozen predictor of a fitted model. Each module of :mod:`skgp_sparse.bases` writes
these as plain functions over arrays, named as the contract names them, and ends with a
small subclass of :class:`Basis` that takes them (``members=globals()``) and one instance
of it, ``BASIS``, which :data:`skgp_sparse.bases.BASES` registers. The rest of the package (the ELBO, the optimisers, the estimators) knows a
basis only through the members documented here: it calls them directly, and what a basis
may leave out has a default on :class:`Basis`.

The contract is checked when a basis is created, which is when its module is imported:
a required member left out (an abstract one below), a field list that is not a tuple of
names, or a function that does not take the contract's arguments raises ``TypeError``.
"""

import inspect
from abc import ABC, abstractmethod


class Basis(ABC):
    """A variational family, as the ELBO, the optimisers and the estimators use it.

    A subclass sets the abstract attributes as class attributes and the abstract methods
    as functions; the members with a default may be left out. ``class
    CoupledBasis(Basis, members=globals())`` takes every member of the contract (but
    ``name``) that its module defines and its body does not, functions as static methods:
    the bases' modules define their maths as plain functions, which their tests call too.
    Bases hold no state of their own: one instance per basis, its module's ``BASIS``, and a
    pickle refers to that instance.

    The state a basis works on is a dataclass deriving from
    :class:`~skgp_sparse.bases.state.VariationalState` (which gives it ``copy`` and
    ``drop_caches``), with at least ``inducing`` (M, D) and ``q_mean`` (M, P), every field
    the field tuples name, and ``orthogonal`` when the basis has a second inducing set
    (:attr:`ORTHOGONAL_SET`). A basis may overwrite the matrices that ``kernel.vjp``
    returned to it (the compiled kernels hand over ownership,
    :mod:`skgp_sparse.kernels._base`).
    """

    # --- declarations every basis makes ------------------------------------------------
    @property
    @abstractmethod
    def name(self):
        """The basis's name in the estimators' ``basis=`` (its key in ``BASES``)."""

    @property
    @abstractmethod
    def INDUCING_FIELDS(self):
        """Tuple of the state fields Adam moves when the inducing inputs are learned."""

    @property
    @abstractmethod
    def ADAM_FIELDS(self):
        """Tuple of the state fields Adam always moves (those without a natural step)."""

    @property
    @abstractmethod
    def VARIATIONAL_FIELDS(self):
        """Tuple of the state fields Adam moves instead of the natural step with
        ``variational_optimizer="adam"`` (empty: the basis has no Adam-only mode)."""

    #: Whether a natural step of size one from a conjugate likelihood's adjoints lands on
    #: the optimal q for those rows (all Gaussian blocks at once): full-batch Gaussian fits
    #: then optimise the collapsed bound.
    EXACT_NATURAL_STEP = False
    #: Whether such a step lands on each Gaussian block's optimum given the others: a pass
    #: of these steps settles q after a minibatch fit.
    CONJUGATE_NATURAL_STEP = False
    #: Whether the basis has a second inducing set, of ``n_orthogonal`` points (its state
    #: then has ``orthogonal``). Without one, ``init_state`` refuses ``n_orthogonal > 0``.
    ORTHOGONAL_SET = False
    #: Whether q is one Gaussian N(q_mean, q_sqrt q_sqrt^T) over the whitened values
    #: v = L^-1 u of one inducing set (with ``precision``, the inverse of its covariance),
    #: so that the several-output closed forms (the joint optimal q, the LMC's collapsed
    #: bound) can set and bound it directly.
    WHITENED_Q = False

    # --- what every basis computes ----------------------------------------------------
    @abstractmethod
    def init_state(self, points, n_outputs, n_covariances, n_orthogonal=0, **options):
        """The starting state.

        Parameters
        ----------
        points : array of shape (n_inducing + n_orthogonal, D)
            The initial inducing inputs; a basis with a second set splits them. numpy
            (or array-like) points give a float64 numpy state; an array of another
            library gives a state of that library, on its device, in its floating dtype.
        n_outputs : int
            P, the number of latent functions (columns of the means).
        n_covariances : int
            C, 1 (one covariance shared by the outputs) or P.
        n_orthogonal : int
            The size of the second inducing set.
        **options
            The basis's own options (see :meth:`init_options`), stored on the state so
            that they are per fit and pickle with the model.

        Returns
        -------
        VariationalState
        """

    @abstractmethod
    def marginals(self, kernel, X, state, jitter, need_grad=True):
        """Latent marginals at the rows of X.

        Parameters
        ----------
        kernel : compiled kernel
        X : array of shape (B, D)
        state : VariationalState
        jitter : float
            Relative jitter of the Cholesky factorisations of kernel matrices.
        need_grad : bool or "natural"
            True: a tape for :meth:`backward` and :meth:`natural_step`; "natural": a tape
            for :meth:`natural_step` only; False: no tape.

        Returns
        -------
        mean : array of shape (B, P)
        var : array of shape (B, C)
        tape : object or None
            What the reverse pass and the natural step need; its ``jitter`` is the
            relative jitter the factorisations needed.
        """

    @abstractmethod
    def kl_divergence(self, kernel, state, jitter, tape=None):
        """KL(q || prior), a float or a 0-d array; a tape from :meth:`marginals` on the same
        parameters saves recomputing kernel matrices."""

    @abstractmethod
    def backward(self, tape, state, d_mean, d_var, fields):
        """The gradient of F(mean, var) - KL, F's adjoints being ``d_mean`` (B, P) and
        ``d_var`` (B, C).

        Returns
        -------
        theta_bar : array
            The gradient in the kernel's log-hyperparameters.
        field_bars : dict of str -> array
            The gradient in each state field named in ``fields``.
        """

    @abstractmethod
    def natural_step(self, tape, state, d_mean, d_var, step):
        """A new state: the natural-gradient step of size ``step`` on the Gaussian blocks
        for the objective of :meth:`backward` (may raise
        :class:`skgp_sparse.linalg.CholeskyError`; the schedule then backs off)."""

    @abstractmethod
    def make_predictor(self, kernel, state, jitter):
        """The fitted model frozen into plain arrays: an object with
        ``latent(kernel, X, full_cov=False)`` -> (mean (n, P), variance (n, C) or
        covariance (C, n, n))."""

    # --- what a basis may add (defaults) ----------------------------------------------
    def latent_shape(self, state):
        """(P, C) of a state: its latent functions and its covariances (1, shared by the
        latents, or P), the ``n_outputs`` and ``n_covariances`` it was made with. The default
        reads ``q_mean`` (M, P) and ``q_sqrt`` (C, M, M)."""
        return state.q_mean.shape[1], state.q_sqrt.shape[0]

    def init_options(self, params, rng):
        """The keyword options of :meth:`init_state` for a fit (default: none).

        Parameters
        ----------
        params : dict
            The estimator's parameters (``get_params(deep=False)``).
        rng : numpy Generator
            The fit's generator, for a seed of the basis's own (draw from it only where
            the basis needs one, so that other fits keep their random stream).

        Returns
        -------
        dict
        """
        return {}

    def diagnostics(self, kernel, state, jitter):
        """Figures about the state reported once per epoch (default: none).

        Returns
        -------
        dict of str -> float
        """
        return {}

    def adam_field_scales(self, state, step):
        """Multipliers of Adam's learning rate per state field for training step ``step``
        (counted from the model's first step), as ``rate_scales`` of
        :meth:`skgp_sparse.optim.Adam.step`; 0 holds a field still (default: None, every
        field at the plain rate).

        Returns
        -------
        dict of str -> float, or None
        """
        return None

    def collapsed_bound(self, kernel, X, Y, beta, state, jitter):
        """The bound with q at its optimum under Gaussian noise of per-row precisions
        ``beta``, and its gradient, in one pass (a
        :class:`skgp_sparse.bases._collapsed.CollapsedBound`). Optional: see
        :attr:`has_collapsed_bound`."""
        raise NotImplementedError(f"the {self.name} basis has no collapsed bound")

    @property
    def has_collapsed_bound(self):
        """Whether the basis writes :meth:`collapsed_bound` (a subclass defines it)."""
        return type(self).collapsed_bound is not Basis.collapsed_bound

    # --- checks and identity -----------------------------------------------------------
    def __init_subclass__(cls, members=None, **kwargs):
        super().__init_subclass__(**kwargs)
        if members is None:
            return
        for name in _MODULE_MEMBERS:
            if name in members and name not in vars(cls):
                value = members[name]
                setattr(cls, name, staticmethod(value) if inspect.isfunction(value) else value)

    def __init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"{type(self).__name__}.name must be a non-empty str; got {self.name!r}")
        for attribute in ("INDUCING_FIELDS", "ADAM_FIELDS", "VARIATIONAL_FIELDS"):
            value = getattr(self, attribute)
            if not isinstance(value, tuple) or not all(isinstance(f, str) for f in value):
                raise TypeError(f"{type(self).__name__}.{attribute} must be a tuple of field names; got {value!r}")
        for attribute in ("EXACT_NATURAL_STEP", "CONJUGATE_NATURAL_STEP", "ORTHOGONAL_SET", "WHITENED_Q"):
            if not isinstance(getattr(self, attribute), bool):
                raise TypeError(f"{type(self).__name__}.{attribute} must be a bool")
        for method in _CALLED_METHODS:
            _check_arguments(self, method)

    def __reduce__(self):
        # By reference to the module's one instance, so that a loaded model's basis is the
        # registered one (pickle checks that the module's BASIS is this object).
        return "BASIS"

    def __repr__(self):
        return f"<basis {self.name!r}>"


#: The members a subclass may take from its module's namespace (``members=``).
_MODULE_MEMBERS = (
    "INDUCING_FIELDS", "ADAM_FIELDS", "VARIATIONAL_FIELDS", "EXACT_NATURAL_STEP", "CONJUGATE_NATURAL_STEP",
    "ORTHOGONAL_SET", "WHITENED_Q", "init_state", "init_options", "latent_shape", "marginals", "kl_divergence", "backward", "natural_step",
    "make_predictor", "diagnostics", "adam_field_scales", "collapsed_bound",
)
#: The methods the package calls, with the arguments it passes positionally.
_CALLED_METHODS = (
    "init_state", "marginals", "kl_divergence", "backward", "natural_step", "make_predictor", "init_options",
    "latent_shape", "diagnostics", "adam_field_scales", "collapsed_bound",
)


def _check_arguments(basis, method):
    """TypeError unless ``basis.method`` takes the positional arguments of the contract's
    declaration (its keyword options aside)."""
    declared = inspect.signature(getattr(Basis, method)).parameters.values()
    positional = [p for p in declared if p.name != "self" and p.kind == p.POSITIONAL_OR_KEYWORD]
    try:
        inspect.signature(getattr(basis, method)).bind(*[None] * len(positional))
    except TypeError as error:
        names = ", ".join(p.name for p in positional)
        raise TypeError(f"{type(basis).__name__}.{method} must take ({names}): {error}") from None
