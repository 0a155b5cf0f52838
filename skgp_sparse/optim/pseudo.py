"""The exact search of a non-conjugate likelihood on Gaussian pseudo-observations.

The exact search of :mod:`.fullbatch` moves q(u) to its optimum by damped natural steps
at every evaluation of its quasi-Newton search (a log-concave likelihood has no collapsed
bound): four or five passes over the rows per evaluation. Here the search runs in
rounds. Each round replaces the likelihood by the Gaussian pseudo-observations that
match its expected log-likelihood, value and first derivatives, at the current q
(:meth:`~skgp_sparse.elbo.VariationalModel.pseudo_observations`; conjugate-computation
VI, Khan & Lin 2017), searches the hyperparameters on the collapsed bound of that
Gaussian model (Titsias 2009: q(u) optimal in closed form, one pass per evaluation), then
sets q to that Gaussian model's optimum at the new hyperparameters and brings it towards
its optimum under the true likelihood by damped natural steps, where the next round's
observations are taken.

At a fixed point of the rounds the pseudo-model's bound touches the true bound with q
optimal, with the same gradient in the hyperparameters (both are the ELBO's partial
gradient at that q, by the envelope theorem), so the rounds end where the search of
:mod:`.fullbatch` would: at a stationary point of the bound with q optimal. A round whose
true bound fell is undone, and the next searches within a smaller trust region.
"""

import numpy as np

from ..linalg import CholeskyError
from .fullbatch import (INEXACT_Q_RTOL, INEXACT_Q_START_STEPS, TRUST_RADIUS, CollapsedObjective, SearchResult, lbfgs,
                        optimal_q, random_start)
from .loop import ModelSnapshot
from .qsolver import QSolver

#: Rounds at most (each: new pseudo-observations, a quasi-Newton search, q to its
#: optimum), besides the search's ``max_iter``: a guard far above what searches take
#: (docs/constants.md).
MAX_ROUNDS = 100
#: L-BFGS-B iterations at most of one round's search. The pseudo-observations hold near
#: the q they were taken at, and a round's search far past that chases a model the next
#: round's observations no longer describe. Longer rounds searched for longer, rounds of
#: 2 were no faster and lost accuracy (docs/constants.md).
ROUND_MAX_ITER = 4
#: Damped natural steps at most that bring q to its optimum under the true likelihood
#: after a round's search, and at the search's start (from the previous round's q, or
#: from the prior: each round's observations are taken afresh, so a q short of its
#: optimum is corrected by the next round). Few steps suffice because each round's q
#: starts at the pseudo-model's optimum (``land_on_pseudo_optimum``; docs/constants.md).
ROUND_Q_STEPS = 2
#: A round that raises the true bound by less than this many times ``tol`` nats per row
#: ends the search: the estimators' ``tol`` as it is. Looser stops save seconds and lose
#: test rows (docs/constants.md).
STOP_RISE = 1.0
#: A round whose true bound fell is undone, and the next one searches within a trust
#: region this much smaller (:data:`~.fullbatch.TRUST_RADIUS` at first); below
#: ``MIN_RADIUS`` (log-hyperparameters) the search has converged.
RADIUS_SHRINK = 0.25
MIN_RADIUS = 0.01


class PseudoObjective(CollapsedObjective):
    """The negative collapsed bound of the Gaussian pseudo-model ``pseudo`` (targets,
    per-row precisions, constant; :meth:`~skgp_sparse.elbo.VariationalModel.pseudo_observations`)
    on the rows X, as GPR's ``obj_func``: one pass over the rows per call. Calling it
    moves the model's parameters (not its q) to the vector."""

    def __init__(self, model, X, pseudo, scales=None):
        super().__init__(model, X, None, QSolver.DAMPED, scales)
        self.targets, self.beta, self.constant = pseudo

    def _bound(self, vector):
        self.move(vector)
        return self.model.pseudo_collapsed_evaluate(self.X, self.targets, self.beta, self.constant)


def optimise_pseudo(model, X, Y, n_restarts, rng, scales=None, verbose=0, max_iter=200, trust_region=True,
                    tol=1e-3):
    """Maximise the bound of ``model`` on (X, Y) with q(u) optimal, in place, in rounds on
    Gaussian pseudo-observations (see the module's notes).

    Parameters
    ----------
    model : VariationalModel
        One whose :meth:`~skgp_sparse.elbo.VariationalModel.takes_pseudo_observations`.
    X, Y : ndarray
        The search's rows, each counted as ``model.n_data / len(X)`` rows.
    n_restarts : int
        Further searches from starts drawn uniformly within the bounds (log space).
    rng : numpy Generator
    scales : dict, optional
        Units of parameters in data units (see :class:`~.fullbatch.Packing`).
    verbose : int
        Print the pseudo-model's bound after every L-BFGS-B iteration.
    max_iter : int
        L-BFGS-B iterations at most of each search, over all its rounds.
    trust_region : bool
        Each round's L-BFGS-B runs in stages of a trust region (see :func:`~.fullbatch.lbfgs`).
    tol : float
        The search has converged when a round raises the true bound by less than this many
        nats per row.

    Returns
    -------
    SearchResult
        ``elbo`` is the true bound (q optimal under the true likelihood) at the best
        search's end, where the model is left; ``n_evaluations`` counts the passes of the
        pseudo-model's searches.
    """
    bound = optimal_q(model, X, Y, exact=False, max_steps=ROUND_Q_STEPS, rtol=INEXACT_Q_RTOL)
    first = ModelSnapshot.of(model)
    # The probe only packs the parameters and their bounds: the rounds take their own
    # pseudo-observations.
    probe = CollapsedObjective(model, X, None, QSolver.DAMPED, scales)
    initial = probe.initial()
    if initial.size == 0:
        # Nothing to search (fixed hyperparameters): q(u)'s optimum only.
        bound = optimal_q(model, X, Y, exact=False, max_steps=INEXACT_Q_START_STEPS, rtol=INEXACT_Q_RTOL)
        return SearchResult(bound, 0, True, 0, [bound])
    starts = [initial] + [random_start(probe.bounds, rng, initial) for _ in range(n_restarts)]
    runs, ends, evaluations = [], [], 0
    for k, start in enumerate(starts):
        first.restore(model)
        if k > 0:
            probe.move(start)
            bound = optimal_q(model, X, Y, exact=False, max_steps=ROUND_Q_STEPS, rtol=INEXACT_Q_RTOL)
        run = _rounds(model, X, Y, bound, scales, verbose, max_iter, trust_region, tol)
        evaluations += run[-1]
        runs.append(run)
        ends.append(ModelSnapshot.of(model))
    best = int(np.argmax([run[0] for run in runs]))
    ends[best].restore(model)
    elbo, n_iter, converged, message, _ = runs[best]
    return SearchResult(elbo, n_iter, converged, evaluations, [run[0] for run in runs], message)


def _rounds(model, X, Y, bound, scales, verbose, max_iter, trust_region, tol):
    """One search from the model's parameters and q (q at its optimum there, where the
    true bound is ``bound``): ``(bound, n_iter, converged, message, n_evaluations)``."""
    threshold = STOP_RISE * tol * model.rows_counted
    n_iter = evaluations = 0
    radius, pseudo = TRUST_RADIUS, None
    for _ in range(MAX_ROUNDS):
        if pseudo is None:
            pseudo = model.pseudo_observations(X, Y)
        objective = PseudoObjective(model, X, pseudo, scales)
        before = ModelSnapshot.of(model)
        x, _, iterations, _, _ = lbfgs(objective, objective.initial(), objective.bounds, model.rows_counted, verbose,
                                       min(ROUND_MAX_ITER, max_iter - n_iter), trust_region, tol,
                                       model.search_memory, radius=radius)
        n_iter += iterations
        evaluations += objective.n_evaluations
        objective.move(x)
        # q from where the round's search left it: the pseudo-model's optimum there, whose
        # bound the search raised (q as it was is far below it after a long move); q as it
        # was where that step cannot be factorised (the damped steps start from it).
        try:
            model.land_on_pseudo_optimum(X, *pseudo[:2])
        except CholeskyError:
            pass
        after = optimal_q(model, X, Y, exact=False, max_steps=ROUND_Q_STEPS, rtol=INEXACT_Q_RTOL)
        if not after >= bound:
            # The pseudo-observations did not describe the likelihood where the round
            # went: back to its start, and the next round within a smaller region.
            before.restore(model)
            radius *= RADIUS_SHRINK
            if radius < MIN_RADIUS:
                return bound, n_iter, True, "", evaluations
        else:
            rise, bound, pseudo = after - bound, after, None
            if rise < threshold:
                return bound, n_iter, True, "", evaluations
        if n_iter >= max_iter:
            return bound, n_iter, False, f"max_iter={max_iter} iterations", evaluations
    return bound, n_iter, False, f"{MAX_ROUNDS} rounds of pseudo-observations", evaluations
