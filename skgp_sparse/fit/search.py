"""The exact searches of a fit: the bound with q(u) at its optimum, maximised over the
hyperparameters (and the inducing inputs) by L-BFGS-B, as GaussianProcessRegressor
maximises its log marginal likelihood.

Two of them: the search of the collapsed bound that is a one-batch fit under a Gaussian
likelihood (:func:`run_collapsed`), and the exact search on a subset of the rows that
starts a fresh minibatch fit (:func:`search_hyperparameters`), run on the model's own
search copy (:meth:`~skgp_sparse.elbo.VariationalModel.search_model`), whose end the
stream of :mod:`.training` starts from. :func:`evaluate_bound_at` is the same bound at
given hyperparameters (the estimators' ``log_marginal_likelihood``).
"""

from dataclasses import dataclass

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ..optim.fullbatch import optimal_q, optimise_collapsed
from ..optim.pseudo import optimise_pseudo
from ..optim.loop import History, ModelSnapshot, hyperparameters
from ..optim.qsolver import QSolver, q_solver
from .jitter import auto_jitter, smallest_noise
from . import plan as fit_plan
from .._warnings import warn

#: Iterations at most of the first stage of the search that starts a fresh minibatch fit
#: (:func:`search_hyperparameters`, on :data:`.plan.SEARCH_ROWS` rows): when it is the whole
#: search, and when the second stage follows and moves the hyperparameters again, where a
#: short first stage is as accurate and saves time (docs/constants.md).
SEARCH_MAX_ITER = 200
SEARCH_FIRST_STAGE_MAX_ITER = 30

#: The second stage's iterations: SEARCH_PASSES * N / SEARCH_ROWS for N training rows (as
#: many rows evaluated as 30 passes over the data), within [SEARCH_INDUCING_MIN_ITER,
#: SEARCH_INDUCING_MAX_ITER]. Its cost is fixed by the iterations while a peer's epochs
#: grow with N: large sets gain up to the cap, a fixed count that large sets need would be
#: most of a small set's fit, and below the floor small sets lose accuracy (docs/constants.md).
SEARCH_PASSES = 30
SEARCH_INDUCING_MIN_ITER = 100
SEARCH_INDUCING_MAX_ITER = 300


#: Iterations of the second stage of an LMC stream's search (:func:`.plan.lmc_streams`, on
#: :data:`.plan.LMC_SEARCH_ROWS` rows), chosen with the stream's cap after it
#: (:data:`.training.LMC_STREAM_STEPS`; docs/constants.md).
LMC_INDUCING_SEARCH_ITER = 100


def inducing_search_iterations(n_rows):
    """Iterations at most of the search's second stage for a fit to ``n_rows`` rows (the
    model's ``n_data``: of ``partial_fit``, the whole stream's; see
    :data:`SEARCH_PASSES`)."""
    passes = -(-SEARCH_PASSES * n_rows // fit_plan.SEARCH_ROWS)
    return int(min(max(passes, SEARCH_INDUCING_MIN_ITER), SEARCH_INDUCING_MAX_ITER))


def search_hyperparameters(settings, plan, model, rows, Y, rng):
    """Set ``model``'s hyperparameters, then its inducing inputs, by quasi-Newton searches
    of an exact objective on ``plan.search_rows`` random rows, before any minibatch
    step.

    Minibatch Adam steps on the hyperparameters move them by about the learning rate
    times the gradient's signal-to-noise ratio per step, so a fit started far from their
    optimum can crawl along a plateau for hundreds of epochs; the search jumps there in
    seconds, and the stream then refines on every row. The inducing inputs fare worse
    still: hundreds of coordinates, each with a noisy minibatch gradient.

    The objective is the bound with q(u) at its optimum for every hyperparameter (the
    collapsed bound under a Gaussian likelihood) on the coupled basis, at all of the
    fit's initial inducing inputs (the orthogonal set too), with the data term of the rows
    counted as the estimate of all N rows' (each row N / rows times), as a minibatch step
    counts it. Taken as a data set of its own, a subset asks for longer length scales
    than the whole (less data, less detail), and the stream did not make up the
    difference (docs/constants.md).

    Two stages, on the same rows:

    1. the hyperparameters, the inducing inputs fixed at their k-means start, by L-BFGS-B
       in a trust region (:func:`~skgp_sparse.optim.fullbatch.optimise_collapsed`), with
       ``optimizer`` and ``n_restarts_optimizer`` as a full-batch fit takes them, for at
       most :data:`SEARCH_MAX_ITER` iterations, or :data:`SEARCH_FIRST_STAGE_MAX_ITER` when
       the second stage follows;
    2. where the fit learns its inducing inputs and the objective is the collapsed bound
       (a Gaussian likelihood), the inducing inputs and the hyperparameters together, from
       the first stage's end, for at most :func:`inducing_search_iterations` iterations
       (:data:`LMC_INDUCING_SEARCH_ITER` for an LMC's stream, ``plan.lmc``); the moved
       inputs are split back into the basis's sets. The stream's Adam steps on the
       inducing inputs recover little of what this stage finds. Other likelihoods skip
       it: their bound re-optimises q(u) by a few natural steps per evaluation, and there
       it doubled the fit's time for no accuracy; on the binary classifier's
       pseudo-observations it paid on one set only (docs/constants.md).

    ``plan.hand_over`` (a one-batch ``fit``): where the search ran on every row, the model also takes its
    q(u) and the returned :class:`StartPoint` says where the search left it (see
    :func:`_hand_over`); otherwise None is returned, and a stream under a non-conjugate
    likelihood starts from the search's q(u) (:func:`_start_stream_q`).

    Each stage runs on ``model.search_model`` (a copy of its current parameters on the
    search's basis); ``Y`` is the host
    target array; ``plan.x_scale`` is each feature's spread (the unit of the inducing
    inputs' search coordinates).
    """
    X, Y = rows.search_rows(Y, plan.search_rows, rng)
    optimizer = fit_plan.search_optimizer(settings)
    solver = plan.search_q_solver
    search = model.search_model(model.n_data)
    fields = [name for name in model.basis.INDUCING_FIELDS if name in model.learn_fields]
    binary_rounds = solver is QSolver.PSEUDO
    # Rounds on pseudo-observations only before a minibatch stream, which goes on from the
    # search's end: they stop once a round raises the bound by less than tol nats per row,
    # looser than the damped search's plateau test, which a one-batch fit keeps (docs/constants.md).
    pseudo = binary_rounds and not plan.hand_over
    second_stage = bool(fields) and solver.in_one_move
    max_iter = SEARCH_FIRST_STAGE_MAX_ITER if second_stage else SEARCH_MAX_ITER
    if pseudo:
        result = optimise_pseudo(search, X, Y, settings.n_restarts_optimizer, rng, verbose=settings.verbose > 1,
                                 max_iter=max_iter, tol=settings.tol)
    else:
        # A binary classifier's search that ends a one-batch fit settles q(u) further at
        # each evaluation (see ONE_BATCH_Q_STEPS).
        q_steps = ONE_BATCH_Q_STEPS if binary_rounds else None
        result = optimise_collapsed(search, X, Y, optimizer, settings.n_restarts_optimizer, rng, solver,
                                    verbose=settings.verbose > 1, trust_region=True, tol=settings.tol, max_iter=max_iter,
                                    q_steps=q_steps)
    model.set_adam_params(hyperparameters(search))
    if second_stage:
        search = model.search_model(model.n_data, learn_inducing=True)
        iterations = LMC_INDUCING_SEARCH_ITER if plan.lmc else inducing_search_iterations(model.n_data)
        result = optimise_collapsed(search, X, Y, optimizer, 0, rng, solver, scales={"inducing": model.features.step_units(plan.x_scale)},
                                    verbose=settings.verbose > 1, max_iter=iterations, tol=settings.tol)
        model.set_adam_params({**hyperparameters(search), **_split_like(model.state, fields, search.state.inducing)})
        model.state.drop_caches()
    if settings.jitter == "auto" and model.noise is not None:
        # The jitter follows the noise the search found (it was set for the initial noise).
        model.jitter = auto_jitter(model.covariances[0], model.state.inducing, smallest_noise(model))
    model.start_q(X, Y)
    if settings.verbose:
        print(f"exact search on {X.shape[0]} rows: {result.n_iter} iterations, bound per row "
              f"{result.elbo / search.rows_counted:.4f}")
    if not plan.on_search_basis:
        return None
    if not plan.hand_over:
        _start_stream_q(model, search, X, Y, solver)
        return None
    return _hand_over(model, search, X, Y, solver) if X.shape[0] == rows.n_rows else None


#: Damped natural steps at most per evaluation of the damped search that ends a one-batch
#: fit of the binary classifier (whose minibatch fits search on pseudo-observations,
#: ``QSolver.PSEUDO``); other searches of a q(u) without a closed-form optimum take
#: :data:`~skgp_sparse.optim.fullbatch.INEXACT_Q_STEPS`. With the Bernoulli variance derivative
#: that of its quadrature sum, a natural step is not Newton's step in the mean at large latent
#: variance, and with fewer steps q lags behind the search until L-BFGS-B's line search fails.
#: These fits have at most a batch of rows, so the extra steps are cheap (docs/constants.md).
ONE_BATCH_Q_STEPS = 6


#: Damped natural steps at most that settle the search's q(u) on its rows before a
#: minibatch stream starts from it (see :func:`_start_stream_q`); each is one pass over
#: at most SEARCH_ROWS rows, and the search's own evaluations have left q near there.
STREAM_HAND_OVER_Q_STEPS = 20
#: A hand-over step that raises the bound by less than this share of its size ends the
#: hand-over: the steps' rises fall off geometrically from the search's end, and later ones
#: do not change the fit (docs/constants.md).
STREAM_HAND_OVER_Q_RTOL = 1e-5


def _start_stream_q(model, search, X, Y, solver):
    """Start a minibatch stream under a non-conjugate likelihood from the search's q(u)
    (the search ran on the model's own basis, ``plan.on_search_basis``).

    The search's model counts the model's N rows, so its q(u) on the search's rows is
    q(u) for the whole data as far as those rows stand for it. From the prior q(u) the
    stream spent its first epochs climbing back to where the search had been, while Adam
    moved the hyperparameters under a q far from its optimum (docs/constants.md). Under a
    conjugate likelihood the stream's natural steps of size one land on q's optimum by
    themselves (or :meth:`start_q` sets it)."""
    if model.likelihood.conjugate:
        return
    _take_search_q(model, search, X, Y, solver, STREAM_HAND_OVER_Q_STEPS, STREAM_HAND_OVER_Q_RTOL)


def _take_search_q(model, search, X, Y, solver, max_steps, rtol=1e-15):
    """Bring the search's q(u) to its optimum on its rows (X, Y) by at most ``max_steps``
    natural steps (fewer once a step raises the bound by less than ``rtol`` of its size;
    one where ``solver``'s step is exact), at the model's jitter, and give it to
    ``model``; returns the bound there."""
    search.jitter = model.jitter
    bound = optimal_q(search, X, Y, solver.exact_step, max_steps=max_steps, rtol=rtol)
    model.state = search.state.copy()
    model.jitter = max(model.jitter, search.jitter)
    return bound


#: Damped natural steps at most that bring q(u) to its optimum at the end of the exact
#: search before the stream starts from it (each is one pass over at most SEARCH_ROWS rows).
HAND_OVER_Q_STEPS = 100


@dataclass
class StartPoint:
    """Where the exact search left a model whose stream follows it: the bound there on every
    training row, and the model there (see :func:`keep_the_better`)."""

    bound: float
    snapshot: ModelSnapshot


def _hand_over(model, search, X, Y, solver):
    """Start ``model``'s stream from the search's q(u), the search having run on every row
    and on the model's own basis: its end is then a model of the fit, with its bound.
    Returns that :class:`StartPoint`.

    Without it the stream began at the prior q(u), whose bound is far below the search's,
    and a non-conjugate fit, whose natural steps warm up slowly, could stop on its
    tolerance before it had climbed back (docs/constants.md)."""
    # The search's evaluations move q by a few damped steps each (non-conjugate
    # likelihoods): q is brought to its optimum at the search's end first, so that the
    # start point's bound is the one log_marginal_likelihood reports there. It is found at
    # the model's jitter (set for the noise the search found), not at the larger one that
    # some trial point of the search may have needed.
    bound = _take_search_q(model, search, X, Y, solver, HAND_OVER_Q_STEPS)
    return StartPoint(float(bound), ModelSnapshot.of(model))


def keep_the_better(model, bound, start):
    """The model back at ``start`` (a :class:`StartPoint`) when the stream ended on a lower
    bound over the same rows: a fit never ends below where its exact search left it.
    Returns the bound of the model kept."""
    if start is None or bound is None or not bound < start.bound:
        return bound
    start.snapshot.restore(model)
    return start.bound


def _split_like(state, fields, points):
    """``points`` (the sets of ``fields`` of ``state`` stacked in order, as the search's
    model stacks them) cut back into those sets."""
    out, start = {}, 0
    for name in fields:
        n = getattr(state, name).shape[0]
        out[name] = points[start : start + n]
        start += n
    return out


def run_collapsed(settings, plan, model, rows, Y, rng):
    """Quasi-Newton search of the collapsed bound (full batch, Gaussian): GPR's procedure,
    for at most ``max_iter`` iterations, q(u) brought to its optimum as ``plan.q_solver``
    says; ``plan.x_scale`` is the unit of the inducing inputs' search coordinates.

    With ``jitter="auto"`` the jitter follows the noise: if the search ended at a noise
    far below where it started, the search is run again from there with the jitter the
    new noise allows, so that the jitter does not bias the optimum. A model whose
    ``search_noise_floor`` is not None (an LMC) starts at the jitter of that floor instead.
    """
    optimizer = fit_plan.search_optimizer(settings)
    X, Y = rows.all_rows(Y)
    scales = {name: model.features.step_units(plan.x_scale) for name in model.basis.INDUCING_FIELDS}
    floor = model.search_noise_floor()
    if settings.jitter == "auto" and floor is not None:
        # The model asks for the jitter of its smallest noise from the start (an LMC, see
        # VariationalModel.search_noise_floor), so that the search below need not be rerun.
        model.jitter = min(model.jitter, auto_jitter(model.covariances[0], model.state.inducing, floor))
    options = dict(scales=scales, verbose=settings.verbose, max_iter=settings.max_iter, tol=settings.tol)
    search = optimise_collapsed(model, X, Y, optimizer, settings.n_restarts_optimizer, rng, plan.q_solver, **options)
    history = History(elbo=list(search.run_elbos), n_epochs=search.n_iter, n_steps=search.n_evaluations,
                      converged=search.converged)
    if settings.jitter == "auto":
        allowed = auto_jitter(model.covariances[0], model.state.inducing, smallest_noise(model))
        if model.jitter > 10.0 * allowed:
            model.jitter = allowed
            search = optimise_collapsed(model, X, Y, optimizer, 0, rng, plan.q_solver, **options)
            history.elbo += search.run_elbos
            history.n_epochs += search.n_iter
            history.n_steps += search.n_evaluations
            history.converged = search.converged
    if not history.converged:
        warn(
            f"{settings.name}: the search of the collapsed bound stopped before converging, "
            f"after {search.message}; the fitted hyperparameters may not be optimal. Increase max_iter, "
            "or rescale X and y (normalize_y=True) or start the kernel closer to the data's scales.",
            ConvergenceWarning,
        )
    return history, search.elbo


def evaluate_bound_at(model, X, Y, theta, eval_gradient):
    """The bound on (X, Y) at kernel log-hyperparameters ``theta`` with q re-optimised.

    For a Gaussian likelihood and the coupled basis this is the collapsed bound (for
    several mixed outputs, value and gradient in its one pass); otherwise q is moved to
    its optimum by damped natural steps. The gradient in theta is the ELBO's partial
    gradient at that q (the bound is stationary in q there), in the collapsed bound's one
    pass where the model has it: the ELBO's own partial gradient sums terms of the size
    of the precision that cancel, and at a tiny noise its rounding exceeds the gradient
    (docs/constants.md).
    """
    if theta is not None:
        model.set_adam_params({"theta": np.asarray(theta, dtype=np.float64)})
    solver = q_solver(model)
    if solver is QSolver.JOINT:
        # Several mixed outputs: the joint q's bound, which fit stores, in one pass (damped
        # mean-field natural steps stop below it).
        result = model.collapsed_evaluate(X, Y)
        return (result.elbo, result.grads["theta"]) if eval_gradient else result.elbo
    value = optimal_q(model, X, Y, solver.exact_step)
    if not eval_gradient:
        return value
    if solver.one_pass_bound:
        return value, model.collapsed_evaluate(X, Y).grads["theta"]
    return value, model.evaluate(X, Y).grads["theta"]
