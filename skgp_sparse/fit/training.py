"""Training of the estimators' models: the exact search that starts a fit, the search of
the collapsed bound, the minibatch stream and the settling of q(u) after it.

Which of them runs, on how many rows, is the plan's (:mod:`.plan`): a one-batch fit whose
q(u) is optimal in closed form searches the collapsed bound
(:mod:`skgp_sparse.optim.fullbatch`); every other fit runs the minibatch loop
(:mod:`skgp_sparse.optim.loop`) and then settles q(u) at the final hyperparameters. The
state stays where the rows are: :mod:`.pipeline` brings it back. The constants below are
the measured defaults of that machinery (docs/benchmarks.md, "Default settings").
"""

from dataclasses import dataclass

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ..optim import Adam, NaturalStepSchedule, train
from ..optim.fullbatch import optimal_q, optimise_collapsed
from ..optim.pseudo import optimise_pseudo
from ..optim.loop import History, ModelSnapshot, hyperparameters, settle_variational
from ..optim.stopping import MAX_GRADIENT_SNR, StoppingRule
from .jitter import auto_jitter, smallest_noise
from . import plan as fit_plan
from .._warnings import warn

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


def run_collapsed(settings, model, rows, Y, rng, x_scale):
    """Quasi-Newton search of the collapsed bound (full batch, Gaussian): GPR's procedure,
    for at most ``max_iter`` iterations.

    With ``jitter="auto"`` the jitter follows the noise: if the search ended at a noise
    far below where it started, the search is run again from there with the jitter the
    new noise allows, so that the jitter does not bias the optimum. A model whose
    ``search_noise_floor`` is not None (an LMC) starts at the jitter of that floor instead.
    """
    optimizer = "fmin_l_bfgs_b" if settings.optimizer is None else settings.optimizer
    X, Y = rows.all_rows(Y)
    scales = {name: x_scale for name in model.basis.INDUCING_FIELDS}
    floor = model.search_noise_floor()
    if settings.jitter == "auto" and floor is not None:
        # The model asks for the jitter of its smallest noise from the start (an LMC, see
        # MixedModel.search_noise_floor), so that the search below need not be rerun.
        model.jitter = min(model.jitter, auto_jitter(model.kernel, model.state.inducing, floor))
    options = dict(scales=scales, verbose=settings.verbose, max_iter=settings.max_iter, tol=settings.tol)
    search = optimise_collapsed(model, X, Y, optimizer, settings.n_restarts_optimizer, rng, **options)
    history = History(elbo=list(search.run_elbos), n_epochs=search.n_iter, n_steps=search.n_evaluations,
                      converged=search.converged)
    if settings.jitter == "auto":
        allowed = auto_jitter(model.kernel, model.state.inducing, smallest_noise(model))
        if model.jitter > 10.0 * allowed:
            model.jitter = allowed
            search = optimise_collapsed(model, X, Y, optimizer, 0, rng, **options)
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


#: Iterations at most of the exact search that starts a fresh minibatch fit (see
#: :func:`search_hyperparameters`; its rows are :data:`.plan.SEARCH_ROWS`): of the search of the
#: hyperparameters when it is the whole search, and when the second stage follows (which
#: moves the hyperparameters again, with the inducing inputs). Measured with the default
#: regressor (first stage capped at 200 or 30 iterations): storms test RMSE 0.2506 both
#: ways, weather 0.1906 and 0.1869, diamonds 0.0904 and 0.0903, simdat 0.1691 and 0.1718,
#: the search 2 to 5 s shorter on one thread.
SEARCH_MAX_ITER = 200
SEARCH_FIRST_STAGE_MAX_ITER = 30

#: The second stage's iterations: SEARCH_PASSES * N / SEARCH_ROWS for N training rows (as
#: many rows evaluated as 30 passes over the data), within [SEARCH_INDUCING_MIN_ITER,
#: SEARCH_INDUCING_MAX_ITER]. Its cost is fixed by the iterations while a peer's 50 epochs
#: grow with N, so a fixed count that large sets need is most of a small set's fit.
#: Measured with the default regressor (docs/benchmarks.md, "The search's second stage"):
#: at 100, 300 and 600 iterations nycflights13 weather (20,706 rows) test RMSE 0.1869,
#: 0.1805, 0.1778, flights (90,000) 0.9078, 0.8756, 0.8754, storms (17,583) 0.2505, 0.2499,
#: 0.2499, diamonds (48,546) 0.0905, 0.0908, 0.0920. On the small sets (mean of three
#: seeds, ``benchmarks/bench_search_rows.py``, 50 / 90 / 300 iterations): Ecdat Computers
#: (5,633 rows) 0.2905, 0.2890, 0.2855 in fits of 4.1, 5.5 and 10.5 s, where GPyTorch's
#: 50 epochs take about 7.5 s; dslabs gapminder (6,425) 0.1817, 0.1769, 0.1718 (3.6, 4.6,
#: 9.2 s); txhousing (6,412) 0.2179, 0.2179, 0.2177. On 3,000-row subsets 44 iterations
#: lost up to 5% of test RMSE against 100 (Computers 0.3095 and 0.2945, gapminder 0.2066
#: and 0.2015, weather 0.2174 and 0.2142), hence the floor.
SEARCH_PASSES = 30
SEARCH_INDUCING_MIN_ITER = 100
SEARCH_INDUCING_MAX_ITER = 300


#: An LMC's stream (:func:`.plan.lmc_streams`): the iterations of its search's second stage
#: (on :data:`.plan.LMC_SEARCH_ROWS` rows), and the steps at most of the stream after the
#: search, rounded up to whole epochs (:func:`stream_epochs`). After the stream's first
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
LMC_INDUCING_SEARCH_ITER = 100
LMC_STREAM_STEPS = 90


def stream_epochs(settings, plan):
    """Epochs at most of the minibatch stream: ``max_iter``, or for an LMC's stream after
    its search fewer, :data:`LMC_STREAM_STEPS` steps rounded up to whole epochs (a cap
    below ``max_iter`` ends the fit as designed, with no ConvergenceWarning)."""
    if not (plan.lmc and plan.search):
        return settings.max_iter
    return min(-(-LMC_STREAM_STEPS // plan.steps_per_epoch), settings.max_iter)


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
    difference (measured, default regressor, 2,048 rows: nycflights13 weather test RMSE
    0.219 as a data set of its own, 0.206 counted as all rows; diamonds 0.0985 and 0.0981).

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
       inducing inputs recover little of what this stage finds (measured, default
       regressor, ``benchmarks/bench_search_rows.py --without-inducing-stage``: test RMSE
       without it and with it, weather 0.2038 and 0.1869, storms 0.2589 and 0.2507,
       diamonds 0.0909 and 0.0904). Other likelihoods skip it: their bound
       re-optimises q(u) by a few natural steps per evaluation, and there it doubled the
       fit's time for no accuracy (measured once, default classifier, one thread: KEEL
       magic 18 s without it, 39 s with it; accuracy 0.889 with it, 0.888 and 0.894
       without it in runs that differed only in thread count; banana 0.900 both ways).
       On the binary classifier's pseudo-observations (rounds of
       :func:`~skgp_sparse.optim.pseudo.optimise_pseudo` over the inducing inputs too) it
       paid clearly on one set of seven: spambase 92.2% to 93.7%, magic 88.96% to 89.27%,
       phoneme one test row better, ring, twonorm, banana and nasscds unchanged, for 1.3 to
       2.5 times the search's time (measured once, rounds of four iterations, one thread,
       on a shared machine).

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
    optimizer = search_optimizer(settings)
    search = model.search_model(model.n_data)
    fields = [name for name in model.basis.INDUCING_FIELDS if name in model.learn_fields]
    binary_rounds = on_pseudo_observations(settings, search)
    pseudo = binary_rounds and not plan.hand_over
    second_stage = bool(fields) and search.q_optimal_in_closed_form()
    max_iter = SEARCH_FIRST_STAGE_MAX_ITER if second_stage else SEARCH_MAX_ITER
    if pseudo:
        result = optimise_pseudo(search, X, Y, settings.n_restarts_optimizer, rng, verbose=settings.verbose > 1,
                                 max_iter=max_iter, tol=settings.tol)
    else:
        # A binary classifier's search that ends a one-batch fit settles q(u) further at
        # each evaluation (see ONE_BATCH_Q_STEPS).
        q_steps = ONE_BATCH_Q_STEPS if binary_rounds else None
        result = optimise_collapsed(search, X, Y, optimizer, settings.n_restarts_optimizer, rng,
                                    verbose=settings.verbose > 1, trust_region=True, tol=settings.tol, max_iter=max_iter,
                                    q_steps=q_steps)
    model.set_adam_params(hyperparameters(search))
    if second_stage:
        search = model.search_model(model.n_data, learn_inducing=True)
        iterations = LMC_INDUCING_SEARCH_ITER if plan.lmc else inducing_search_iterations(model.n_data)
        result = optimise_collapsed(search, X, Y, optimizer, 0, rng, scales={"inducing": plan.x_scale},
                                    verbose=settings.verbose > 1, max_iter=iterations, tol=settings.tol)
        model.set_adam_params({**hyperparameters(search), **_split_like(model.state, fields, search.state.inducing)})
        model.state.drop_caches()
    if settings.jitter == "auto" and model.noise is not None:
        # The jitter follows the noise the search found (it was set for the initial noise).
        model.jitter = auto_jitter(model.kernel, model.state.inducing, smallest_noise(model))
    model.start_q(X, Y)
    if settings.verbose:
        print(f"exact search on {X.shape[0]} rows: {result.n_iter} iterations, bound per row "
              f"{result.elbo / search.rows_counted:.4f}")
    if not plan.on_search_basis:
        return None
    if not plan.hand_over:
        _start_stream_q(model, search, X, Y)
        return None
    return _hand_over(model, search, X, Y) if X.shape[0] == rows.n_rows else None


def search_optimizer(settings):
    """The exact search's optimiser: the user's, or L-BFGS-B (GPR's default)."""
    return settings.optimizer or "fmin_l_bfgs_b"


def on_pseudo_observations(settings, search):
    """Whether the exact search of ``search`` (its model) can run in rounds on Gaussian
    pseudo-observations (:func:`~skgp_sparse.optim.pseudo.optimise_pseudo`): L-BFGS-B,
    a likelihood without a collapsed bound that asks for them (the binary classifier's),
    a model that takes them. A user's optimiser gets the true bound (the damped search).

    The caller takes them only before a minibatch stream, which goes on from where the
    search ends. The rounds stop once one raises the bound by less than ``tol`` nats per
    row, which is looser than the damped search's plateau test (20 iterations). Where the
    search ends a one-batch fit, the damped search's tighter end stays: on scikit-learn's
    30-row classification case the rounds left a gradient of 0.18 in the log length
    scale, against less than 0.05 from the damped search. Stopping the rounds only once
    a round's L-BFGS-B also converges within its iterations (four then) doubled the
    search on the seven binary sets, and ring's and twonorm's streams then ran 49 and 62 epochs
    along the ridge past where the search ended."""
    return (search_optimizer(settings) == "fmin_l_bfgs_b" and not search.q_optimal_in_closed_form()
            and search.takes_pseudo_observations())


#: Damped natural steps at most per evaluation of the damped search that ends a one-batch
#: fit of the binary classifier (whose minibatch fits search on pseudo-observations,
#: :func:`on_pseudo_observations`); other searches of a q(u) without a closed-form optimum
#: take :data:`~skgp_sparse.optim.fullbatch.INEXACT_Q_STEPS` (3). With the Bernoulli variance
#: derivative that of its quadrature sum, a natural step is no longer Newton's step in the
#: mean at large latent variance, and 3 steps left q lagging behind the search: on
#: scikit-learn's 30-row case (ConstantKernel * RBF, inducing inputs at the rows)
#: L-BFGS-B's line search failed and the fit ended at a bound of -12.288 with a gradient
#: of 0.65 in the log length scale, where 4 to 8 steps end at -12.2515 (gradient under
#: 0.007); on tests/test_weights_noise.py's 60 weighted rows 3 steps ended at -14.94 and
#: 4, 6 and 8 at -14.30 to -14.31 (5 at -14.37 and -14.40 for the weighted rows and the
#: rows repeated, apart on the amplitude's ridge). Those fits have at most a batch of
#: rows, so the extra steps are cheap; many classes, whose likelihoods did not change,
#: keep 3 (10 per evaluation cost KEEL magic's binary damped search 8x its time).
ONE_BATCH_Q_STEPS = 6


#: Damped natural steps at most that settle the search's q(u) on its rows before a
#: minibatch stream starts from it (see :func:`_start_stream_q`); each is one pass over
#: at most SEARCH_ROWS rows, and the search's own evaluations have left q near there.
STREAM_HAND_OVER_Q_STEPS = 20
#: A hand-over step that raises the bound by less than this share of its size ends the
#: hand-over. The steps' rises fall off geometrically from the search's end: on KEEL
#: ring 2.2e-5, 3e-6, ... nats per row, 21 passes and 0.43 s (6% of the fit) to gain
#: 2.7e-5 in all. With this tolerance the seven binary sets of docs/benchmarks.md fit the
#: same accuracy and log-loss to four digits.
STREAM_HAND_OVER_Q_RTOL = 1e-5


def _start_stream_q(model, search, X, Y):
    """Start a minibatch stream under a non-conjugate likelihood from the search's q(u),
    (the search ran on the model's own basis, ``plan.on_search_basis``).

    The search's model counts the model's N rows, so its q(u) on the search's rows is
    q(u) for the whole data as far as those rows stand for it. From the prior q(u) the
    stream spent its first epochs climbing back to where the search had been, while Adam
    moved the hyperparameters under a q far from its optimum (KEEL ring, default
    classifier: the first epoch's ELBO per row -486 against the search's -0.086, and
    about ten epochs to come back; docs/benchmarks.md, "The binary classifier's stream
    from the search's q(u)"). Under a conjugate likelihood the stream's natural steps of
    size one land on q's optimum by themselves (or :meth:`start_q` sets it)."""
    if model.likelihood.conjugate:
        return
    _take_search_q(model, search, X, Y, STREAM_HAND_OVER_Q_STEPS, STREAM_HAND_OVER_Q_RTOL)


def _take_search_q(model, search, X, Y, max_steps, rtol=1e-15):
    """Bring the search's q(u) to its optimum on its rows (X, Y) by at most ``max_steps``
    natural steps (fewer once a step raises the bound by less than ``rtol`` of its size),
    at the model's jitter, and give it to ``model``; returns the bound there."""
    search.jitter = model.jitter
    bound = optimal_q(search, X, Y, search.natural_step_is_exact(), max_steps=max_steps, rtol=rtol)
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


def _hand_over(model, search, X, Y):
    """Start ``model``'s stream from the search's q(u), the search having run on every row
    and on the model's own basis: its end is then a model of the fit, with its bound.
    Returns that :class:`StartPoint`.

    Without it the stream began at the prior q(u), whose bound is far below the search's,
    and a non-conjugate fit, whose natural steps warm up slowly, could stop on its
    tolerance before it had climbed back (measured: scikit-learn's 30-row classification
    test, a bound of -14.935 at the end of the fit against -14.882 at the end of the
    search, and -14.883 with the initial kernel)."""
    # The search's evaluations move q by a few damped steps each (non-conjugate
    # likelihoods): q is brought to its optimum at the search's end first, so that the
    # start point's bound is the one log_marginal_likelihood reports there. It is found at
    # the model's jitter (set for the noise the search found), not at the larger one that
    # some trial point of the search may have needed.
    bound = _take_search_q(model, search, X, Y, HAND_OVER_Q_STEPS)
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


def evaluate_bound_at(model, X, Y, theta, eval_gradient):
    """The bound on (X, Y) at kernel log-hyperparameters ``theta`` with q re-optimised.

    For a Gaussian likelihood and the coupled basis this is the collapsed bound (for
    several mixed outputs, value and gradient in its one pass); otherwise q is moved to
    its optimum by damped natural steps. The gradient in theta is the ELBO's partial
    gradient at that q (the bound is stationary in q there), in the collapsed bound's one
    pass where the model has it: the ELBO's own partial gradient
    sums terms of the size of the precision that cancel, and at a noise of 1e-10 its
    rounding was larger than the gradient (measured on scikit-learn's six rows: -2.1
    against -6.0 by finite differences).
    """
    if theta is not None:
        model.set_adam_params({"theta": np.asarray(theta, dtype=np.float64)})
    if model.collapses() and not model.natural_step_is_exact():
        # Several mixed outputs: the joint q's bound, which fit stores, in one pass (damped
        # mean-field natural steps stop below it).
        result = model.collapsed_evaluate(X, Y)
        return (result.elbo, result.grads["theta"]) if eval_gradient else result.elbo
    value = optimal_q(model, X, Y, model.natural_step_is_exact())
    if not eval_gradient:
        return value
    if model.collapses():
        return value, model.collapsed_evaluate(X, Y).grads["theta"]
    return value, model.evaluate(X, Y).grads["theta"]
