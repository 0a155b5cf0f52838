"""The fit pipeline, top to bottom.

``fit`` and ``partial_fit`` validate their data and build the model (the estimator's
job: :mod:`skgp_sparse._estimators._base`), then hand over to :func:`run_fit` or
:func:`run_partial_fit`:

1. the plan of the call, decided once (:mod:`.plan`);
2. the exact search of the hyperparameters on a subset of the rows (a fresh fit,
   :mod:`.search`);
3. the model and the targets moved to where the rows are (a device, float32);
4. training: a full-batch search of the collapsed bound (:mod:`.search`), or the minibatch stream
   followed by q(u) settled at the final hyperparameters and the bound on every row
   (:mod:`.training`); or, for ``partial_fit``, one pass of minibatch steps;
5. the model back on the host as float64 (here, and nowhere else), and warnings about
   where training left it (:mod:`.report`).

Both return a :class:`FitResult`, from which the estimator sets its fitted attributes.
"""

from dataclasses import dataclass

import numpy as np

from .placement import state_to, state_to_host
from .plan import plan_fit, plan_pass
from .report import report_fit, warn_q_short_of_optimum, warn_rows_outside_the_box
from .search import keep_the_better, search_hyperparameters
from .statistics import fit_from_statistics, fits_from_statistics, gather_statistics
from .training import StreamState, make_optimisers, run_partial_pass, run_training, warn_interrupted


@dataclass
class FitResult:
    """What a fit or a pass of ``partial_fit`` produced.

    Attributes
    ----------
    model : VariationalModel
        The trained model, its state as float64 numpy arrays.
    history : skgp_sparse.optim.loop.History
        Epochs, steps, ELBO per epoch, whether the stopping rule ended the fit,
        diagnostics.
    n_natural_backoffs : int
        Times the natural-step schedule halved its steps (see ``n_natural_backoffs_``).
    bound : float or None
        The ELBO of the fitted model on every training row; None when not computed (an
        interrupted fit, a ``partial_fit`` pass).
    steps_before : int
        Training steps taken before this call (a warm start or an earlier pass).
    """

    model: object
    history: object
    n_natural_backoffs: int
    bound: object
    steps_before: int


def _to_rows_device(model, Y, plan, rows):
    """The model's state and the target array in the rows' library, on their device and in
    their dtype (a no-op for float64 numpy rows). The model is built on the host (k-means
    on the host copy of X) and moves once; kernel theta and the noise stay on the host.
    :func:`run_fit` and :func:`run_partial_fit` bring the state back at their end."""
    if not plan.converts:
        return Y
    model.state = state_to(model.state, rows.to_device)
    return rows.to_device(Y)


def run_fit(settings, model, rows, Y, rng, weights=None, fresh=True, steps_before=0):
    """Train ``model`` on ``rows`` with ``settings``, from an exact search when the fit is
    ``fresh`` (see :func:`.search.search_hyperparameters`).

    Parameters
    ----------
    settings : FitSettings
    model : VariationalModel
        Built on the host, its target layout set.
    rows : Rows
    Y : ndarray
        The host target array in the model's layout.
    rng : numpy.random.Generator
    weights : ndarray or None
        The rows' weights (their features' spread is Adam's unit on the inducing inputs).
    fresh : bool
        Whether the fit starts afresh (False: a warm start, which searches nothing).
    steps_before : int
        The steps of the fit this one continues (``warm_start``).

    Returns
    -------
    FitResult
    """
    if fits_from_statistics(settings, model, rows, fresh):
        stats = gather_statistics(model, rows, Y)
        if stats is not None:
            history = fit_from_statistics(settings, model, stats)
            report_fit(settings.name, model, 0.0)
            return FitResult(model, history, 0, history.elbo[-1], steps_before)
        warn_rows_outside_the_box(settings.name)
    plan = plan_fit(settings, model, rows, weights, fresh=fresh)
    start = None
    if plan.search:
        # One batch: the search and the steps after it maximise the same bound on the same
        # rows, so the search's end is a point of the fit, which it starts from and never
        # ends below. (With minibatches the stream keeps its own start.)
        start = search_hyperparameters(settings, plan, model, rows, Y, rng)
    host_Y = Y
    Y = _to_rows_device(model, Y, plan, rows)
    history, schedule, bound = run_training(settings, plan, model, rows, Y, rng, steps_done=steps_before)
    state_to_host(model)
    if history.interrupted:
        warn_interrupted(settings, history)
        return FitResult(model, history, schedule.n_backoffs, None, steps_before)
    bound = keep_the_better(model, bound, start)
    report_fit(settings.name, model, 0.0 if plan.collapsed else settings.learning_rate)
    if plan.check_q and plan.search_q_solver.exact_step:
        # Its own generator: the check draws rows without moving the fit's random stream.
        X_check, Y_check = rows.search_rows(host_Y, plan.search_rows, np.random.default_rng(0))
        warn_q_short_of_optimum(settings.name, model, model.search_model(model.n_data), X_check, Y_check)
    return FitResult(model, history, schedule.n_backoffs, bound, steps_before)


def run_partial_fit(settings, model, rows, Y, rng, weights=None, stream=None, fresh=False, steps_before=0):
    """One pass of minibatch steps over ``rows``, continuing ``stream`` (a
    :class:`.training.StreamState`; None on the first call, which starts one, from an
    exact search when the stream is ``fresh``). The other arguments are those of
    :func:`run_fit`. Returns ``(result, stream)``."""
    plan = plan_pass(settings, model, rows, weights, fresh=fresh,
                     x_scale=None if stream is None else stream.x_scale)
    if plan.search:
        # The first chunk starts the stream as fit starts its own: from the exact search.
        search_hyperparameters(settings, plan, model, rows, Y, rng)
    Y = _to_rows_device(model, Y, plan, rows)
    if stream is None:
        schedule, adam = make_optimisers(settings, model, plan, steps_before, falling_elbo_backoff=False)
        stream = StreamState(adam, schedule, rng, plan.x_scale)
    history = run_partial_pass(settings, plan, model, rows, Y, stream)
    state_to_host(model)
    if history.interrupted:
        warn_interrupted(settings, history)
    return FitResult(model, history, stream.schedule.n_backoffs, None, steps_before), stream
