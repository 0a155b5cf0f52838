"""The minibatch stream of a fit and the settling of q(u) after it.

Every fit that is not a one-batch search of the collapsed bound runs the minibatch loop
(:mod:`skgp_sparse.optim.loop`) from here, after the exact search of :mod:`.search` where
the plan (:mod:`.plan`) starts it with one, and then settles q(u) at the final
hyperparameters. The state stays where the rows are: :mod:`.pipeline` brings it back. The
constants below are the stream's defaults (docs/constants.md).
"""

from dataclasses import dataclass

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ..optim import Adam, NaturalStepSchedule, train
from ..optim.loop import settle_variational
from ..optim.stopping import MAX_GRADIENT_SNR, StoppingRule
from .._warnings import warn
from ..optim.qsolver import QSolver
from .search import run_collapsed

#: Minibatch fits average the ELBO estimates over periods of this many steps (one epoch
#: when that is shorter) and compare windows of ``n_iter_no_change`` periods.
PERIOD_STEPS = 50
#: ``tol`` bounds the rise of the ELBO per row over one epoch, or over this many steps
#: when an epoch is longer: on large data sets the hyperparameters settle within a
#: fraction of an epoch (docs/constants.md).
RATE_SPAN_STEPS = 100

#: Steps that move q(u) alone at the start of a fresh minibatch fit, before any Adam step
#: (conjugate likelihoods: a natural step of size one fits q to a batch at once; the
#: others ramp their natural steps up over the schedule's warm-up, so they wait for it).
CONJUGATE_WARMUP_STEPS = 5

#: After a non-conjugate minibatch fit, at most this many natural steps on q alone bring
#: it to the final hyperparameters.
SETTLE_STEPS = 20

#: Rows of the fixed sample whose ELBO the stopping rule reads at the end of each period
#: (in-memory data; a Dask fit reads the mean of the period's minibatch estimates): at
#: most MONITOR_ROWS, at most 1 / MONITOR_SHARE of the rows that a period's steps read, at
#: least MONITOR_MIN_ROWS (see :func:`monitor_size`): a larger sample is a truer picture
#: of the whole, and costs a forward pass over it every period (docs/constants.md).
MONITOR_ROWS = 8192
MONITOR_SHARE = 6
MONITOR_MIN_ROWS = 1024

#: Rows per chunk of the passes over all the data after training (final q, final bound).
PASS_CHUNK = 8192

#: Falling-ELBO back-off of non-conjugate fits: an epoch whose mean ELBO per row is this
#: many nats below the previous epoch's halves the natural steps for the rest of the fit.
#: Epoch means cover every row once, so they move by far less than this from noise alone.
ELBO_DROP_TOL = 1e-2


class FitInterruptedWarning(UserWarning):
    """A KeyboardInterrupt (Ctrl-C) ended a fit early; the model is that of the last completed step."""


@dataclass
class StreamState:
    """What ``partial_fit`` carries from one call to the next besides the model.

    The Adam moments, the natural-step schedule (its step count and back-off) and the
    minibatch generator, so that successive calls continue one optimisation rather than
    restart it; ``x_scale`` is the feature spread of the first call (Adam's step on the
    inducing inputs).
    """

    adam: Adam
    schedule: NaturalStepSchedule
    rng: np.random.Generator
    x_scale: np.ndarray


def make_optimisers(settings, model, plan, steps_done, falling_elbo_backoff=True):
    """The natural-step schedule and Adam of a fit with these settings (a :class:`.settings.FitSettings`)
    as ``plan`` (a :class:`.plan.FitPlan`) lays it out.

    ``steps_done`` (a warm start) lets the natural-step schedule continue where it was
    rather than restart with large steps that would forget the fitted q(u). Without a
    conjugate likelihood the schedule warms up and also backs off on a falling ELBO
    (unless ``falling_elbo_backoff`` is False: partial_fit calls see different rows, so
    their ELBOs are not comparable). Adam moves the inducing inputs at
    :func:`stream_inducing_rate` times its rate.
    """
    conjugate = model.likelihood.conjugate
    schedule = NaturalStepSchedule(
        settings.natural_step_size,
        conjugate=conjugate,
        full_batch=plan.one_batch,
        elbo_drop_tol=None if conjugate or not falling_elbo_backoff else ELBO_DROP_TOL,
    )
    schedule.t = steps_done
    # Inducing inputs live in data units: their Adam steps scale with each feature's spread,
    # or with its length scale where that is shorter.
    step = stream_inducing_rate(settings, plan, model) * \
        model.features.step_units(inducing_step_scale(model.kernel, plan.x_scale))
    scales = {name: step for name in model.basis.INDUCING_FIELDS}
    adam = Adam(learning_rate=settings.learning_rate, step_scales=scales)
    return schedule, adam


#: Adam's rate on the inducing inputs, as a share of its rate on the hyperparameters, in
#: a stream that starts from the q(u) of the binary classifier's search on
#: pseudo-observations (:func:`stream_inducing_rate`). Adam's first steps move every
#: coordinate by its full rate whatever the gradient, and the whitened q(u) handed over
#: by the search then describes another function: a conjugate natural step of size one
#: lands on the new optimum at once, a non-conjugate one climbs back over epochs, which
#: the stopping rule reads as a fit still rising. Many-class streams start without a
#: search and keep the full rate (docs/constants.md).
SEARCHED_Q_INDUCING_RATE = 0.3


def stream_inducing_rate(settings, plan, model):
    """Adam's rate on the inducing inputs in the stream of ``plan`` (a
    :class:`.plan.FitPlan`), as a share of its rate: :data:`SEARCHED_Q_INDUCING_RATE`
    where a minibatch stream starts from the q(u) of the search on pseudo-observations
    (``plan.search_q_solver``; on the search's basis, :func:`.search._start_stream_q`),
    else 1.

    Only there did it pay: the Poisson regressor's stream, which starts from its damped
    search's q(u), lost test NLPD at the lower rate, and a one-batch binary fit, whose
    ELBO dips when Adam starts on the inducing inputs, kept the same test accuracy
    (docs/constants.md)."""
    from_pseudo_search = plan.on_search_basis and plan.search_q_solver is QSolver.PSEUDO
    return SEARCHED_Q_INDUCING_RATE if plan.search and not plan.hand_over and from_pseudo_search else 1.0


def inducing_step_scale(kernel, x_scale):
    """The unit of Adam's steps on the inducing inputs, per feature: its spread, or the
    shortest length scale the kernel gives it when that is shorter.

    The function varies over a length scale, not over the spread: where the exact search
    has found length scales far below the spread, steps of a fraction of the spread would
    throw the inducing inputs off the rows they sit on (docs/constants.md). Kernels
    without a ``length_scale`` (scikit-learn's name) keep the spread; a
    ``FeatureScaledRBF``'s length scales are its ``length_scale`` times its
    ``feature_scale``.
    """
    step = np.array(x_scale, dtype=np.float64, copy=True)
    params = kernel.to_sklearn().get_params()
    for name, value in params.items():
        if name.endswith("length_scale") and not name.endswith("bounds"):
            scale = np.asarray(value, dtype=np.float64)
            factors = params.get(name[: -len("length_scale")] + "feature_scale")
            if factors is not None:
                scale = scale * np.asarray(factors, dtype=np.float64)
            if scale.ndim == 0 or scale.shape == step.shape:
                step = np.minimum(step, scale)
    return step


#: An LMC's stream (:func:`.plan.lmc_streams`): the steps at most of the stream after its
#: search, rounded up to whole epochs (:func:`stream_epochs`), with the search's second stage
#: of :data:`.search.LMC_INDUCING_SEARCH_ITER` iterations. After the stream's first
#: epochs, which read every row, the hidden blocks' predictions got worse as it went on
#: (a likely cause, not tested apart: the stream's Adam steps follow the bound of the
#: mean-field q(u), whose optimum is not the joint q's that the search found;
#: docs/constants.md).
LMC_STREAM_STEPS = 90


def stream_epochs(settings, plan):
    """Epochs at most of the minibatch stream: ``max_iter``, or for an LMC's stream after
    its search fewer, :data:`LMC_STREAM_STEPS` steps rounded up to whole epochs (a cap
    below ``max_iter`` ends the fit as designed, with no ConvergenceWarning)."""
    if not (plan.lmc and plan.search):
        return settings.max_iter
    return min(-(-LMC_STREAM_STEPS // plan.steps_per_epoch), settings.max_iter)


def stopping_rule(settings, steps_per_epoch):
    """The fit's :class:`StoppingRule` for epochs of ``steps_per_epoch`` steps."""
    period = min(steps_per_epoch, PERIOD_STEPS)
    span = min(steps_per_epoch, RATE_SPAN_STEPS)
    snr = MAX_GRADIENT_SNR if steps_per_epoch > 1 else None
    return StoppingRule(settings.tol, settings.n_iter_no_change, period, span, max_gradient_snr=snr,
                        reach_per_span=settings.learning_rate * span)


def monitor_size(plan):
    """Rows of the stopping rule's fixed sample for a fit of ``plan`` (see :data:`MONITOR_ROWS`).

    Periods are one epoch when an epoch has fewer than :data:`PERIOD_STEPS` steps, and a
    sample of 8,192 rows then costs a share of a small set's epoch that large data never
    pay. Sized to the period, the sample costs a small set what it costs a large one. Its
    rows are the same at every period, so a smaller sample is not noisier from period to
    period, only a smaller picture of the whole (docs/constants.md).
    """
    period_rows = min(plan.steps_per_epoch, PERIOD_STEPS) * plan.batch_rows
    return int(min(MONITOR_ROWS, max(MONITOR_MIN_ROWS, period_rows // MONITOR_SHARE)))


def warmup_steps(model, schedule, steps_per_epoch):
    """Natural-only steps still to take at the start of a fit (none once past them).

    Non-conjugate fits wait for the natural step's own warm-up, but no longer than
    :data:`CONJUGATE_WARMUP_STEPS` epochs (a full-batch fit would otherwise leave the
    kernel alone for 50 epochs).
    """
    if not model.natural:
        return 0
    total = CONJUGATE_WARMUP_STEPS
    if not schedule.conjugate:
        total = min(schedule.warmup_steps, CONJUGATE_WARMUP_STEPS * steps_per_epoch)
    return max(0, total - schedule.t)


def settle_and_bound(plan, model, rows, Y, rng, schedule):
    """After minibatch training: q(u) brought to the final hyperparameters as ``plan``
    says (:attr:`.plan.FitPlan.settle`), then the exact bound.

    Returns the ELBO of the fitted model over all training rows (one more pass over them).
    """
    if plan.settle == "joint":
        # The joint optimum at the final hyperparameters: its bound and predictions.
        model.optimal_q_over(rows.batches(Y, PASS_CHUNK)(rng), joint=True)
    elif plan.settle is not None:
        exact = plan.settle == "exact"
        size = max(plan.batch_rows, PASS_CHUNK) if exact else plan.batch_rows
        settle_variational(model, rows.batches(Y, size), rng, schedule, exact, SETTLE_STEPS)
    return model.elbo_of_chunks(rows.batches(Y, PASS_CHUNK)(rng))


def run_training(settings, plan, model, rows, Y, rng, steps_done=0):
    """Train ``model`` with ``settings`` as ``plan`` (a :class:`.plan.FitPlan`) says;
    returns ``(history, schedule, bound)``, the state where the rows are.

    A one-batch fit whose q(u) is optimal in closed form optimises the collapsed bound
    (:func:`run_collapsed`); every other fit runs minibatch natural-gradient training
    (for at most :func:`stream_epochs` epochs), then settles q(u) at the final
    hyperparameters. ``bound`` is the ELBO of the fitted
    model on all training rows (None when the user interrupted the fit). ``rows`` is a
    :class:`.rows.Rows`; Y is in memory.
    """
    schedule, adam = make_optimisers(settings, model, plan, steps_done)
    if plan.collapsed:
        history, bound = run_collapsed(settings, plan, model, rows, Y, rng)
        if plan.settle == "joint":
            # Several outputs: the joint q at the optimum the search found, and its bound.
            bound = settle_and_bound(plan, model, rows, Y, rng, schedule)
        return history, schedule, bound
    stopping = stopping_rule(settings, plan.steps_per_epoch)
    max_epochs = stream_epochs(settings, plan)
    history = train(
        model,
        rows.batches(Y, plan.batch_rows),
        max_iter=max_epochs,
        stopping=stopping,
        schedule=schedule,
        adam=adam,
        rng=rng,
        verbose=settings.verbose,
        callback=settings.epoch_callback,
        warmup_steps=warmup_steps(model, schedule, plan.steps_per_epoch),
        monitor_rows=rows.monitor_rows(Y, monitor_size(plan), rng),
        steps_per_epoch=plan.steps_per_epoch,
    )
    if history.interrupted:
        return history, schedule, None
    bound = settle_and_bound(plan, model, rows, Y, rng, schedule)
    if not history.converged and not (max_epochs < settings.max_iter and history.n_epochs >= max_epochs):
        warn(
            f"{settings.name} stopped at max_iter={settings.max_iter} epochs before converging: "
            f"{stopping.reason_not_converged()}; increase max_iter (or tol)",
            ConvergenceWarning,
        )
    return history, schedule, bound


def run_partial_pass(settings, plan, model, rows, Y, stream):
    """One pass of minibatch steps over ``rows`` (``partial_fit``), continuing ``stream``."""
    batch, steps = plan.batch_rows, plan.steps_per_epoch
    history = train(
        model,
        rows.batches(Y, batch),
        max_iter=1,
        # One pass whose single period never closes: the rule only counts (no gradient to read).
        stopping=StoppingRule(0.0, 1, steps + 1, steps, max_gradient_snr=None),
        schedule=stream.schedule,
        adam=stream.adam,
        rng=stream.rng,
        verbose=settings.verbose,
        warmup_steps=warmup_steps(model, stream.schedule, steps),
    )
    return history


def warn_interrupted(settings, history):
    warn(
        f"{settings.name}: fit interrupted (KeyboardInterrupt) after {history.n_steps} "
        "steps; the estimator holds the model of the last completed step, which predicts "
        "normally (call fit again, with warm_start=True to continue)",
        FitInterruptedWarning,
    )

