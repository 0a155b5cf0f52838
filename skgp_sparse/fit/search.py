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
from .jitter import auto_jitter, smallest_noise
from . import plan as fit_plan
from .._warnings import warn

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


#: Iterations of the second stage of an LMC stream's search (:func:`.plan.lmc_streams`, on
#: :data:`.plan.LMC_SEARCH_ROWS` rows), chosen with the stream's cap after it
#: (:data:`.training.LMC_STREAM_STEPS`, whose note gives the measurements).
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
