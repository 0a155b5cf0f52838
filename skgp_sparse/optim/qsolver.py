"""How q(u) reaches its optimum at given hyperparameters: one answer per model, chosen once.

A fit asks this question of its model and of its exact search's model when its plan is made
(:func:`skgp_sparse.fit.plan.plan_fit`), and the searches, the stream and the checks after a
fit read the answer from the plan. :func:`q_solver` is the one place that reads the model's
capabilities to choose.
"""

import enum


class QSolver(enum.Enum):
    """How q(u) is brought to its optimum on a batch of rows, hyperparameters fixed."""

    #: The bound with q optimal has a one-pass form (Titsias' collapsed bound), and one
    #: natural step of size one sets q there: a Gaussian likelihood on the coupled basis.
    COLLAPSED = "collapsed"
    #: Several outputs mixed through W: the joint q over the latents has a closed form that
    #: both bounds and sets q in one pass, while a natural step of size one is not exact.
    JOINT = "joint"
    #: One natural step of size one lands on q's optimum, with no one-pass bound (the
    #: orthogonally decoupled basis, or known per-row noise, under a Gaussian likelihood).
    EXACT = "exact"
    #: Damped natural steps; a search by L-BFGS-B runs in rounds on Gaussian
    #: pseudo-observations of the likelihood (the binary classifier's).
    PSEUDO = "pseudo"
    #: Damped natural steps, nothing more.
    DAMPED = "damped"

    @property
    def in_one_move(self):
        """Whether q reaches its optimum in one move (a one-pass bound or an exact step):
        full-batch fits and searches then maximise the bound over the hyperparameters."""
        return self in (QSolver.COLLAPSED, QSolver.JOINT, QSolver.EXACT)

    @property
    def one_pass_bound(self):
        """Whether the bound with q optimal is computed in one pass, without moving q."""
        return self in (QSolver.COLLAPSED, QSolver.JOINT)

    @property
    def exact_step(self):
        """Whether one natural step of size one lands on q's optimum."""
        return self in (QSolver.COLLAPSED, QSolver.EXACT)


def q_solver(model, lbfgs=True):
    """The :class:`QSolver` of ``model``.

    Parameters
    ----------
    model : VariationalModel
        Its target layout set (known per-row noise changes the answer).
    lbfgs : bool
        Whether a search of this model runs L-BFGS-B, the optimiser that rounds on
        pseudo-observations take (a user's optimiser does not).
    """
    exact = model.natural_step_is_exact()
    if model.collapses():
        return QSolver.COLLAPSED if exact else QSolver.JOINT
    if exact:
        return QSolver.EXACT
    if lbfgs and model.takes_pseudo_observations():
        return QSolver.PSEUDO
    return QSolver.DAMPED
