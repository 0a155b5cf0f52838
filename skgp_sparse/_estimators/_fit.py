"""The fit pipeline, top to bottom.

``fit`` and ``partial_fit`` validate their data and build the model (the estimator's
job: :mod:`._base`), then hand over to :func:`run_fit` or :func:`run_partial_fit`:

1. the exact search of the hyperparameters on a subset of the rows (a fresh fit);
2. the model and the targets moved to where the rows are (a device, float32);
3. training: a full-batch search of the collapsed bound, or the minibatch stream
   followed by q(u) settled at the final hyperparameters and the bound on every row
   (:mod:`._training`); or, for ``partial_fit``, one pass of minibatch steps;
4. the model back on the host as float64, and warnings about where training left it.

Both return a :class:`FitResult`, from which the estimator sets its fitted attributes.
"""

from dataclasses import dataclass

import numpy as np

from ._common import state_to
from ._fit_report import warn_q_short_of_optimum
from ._training import (SEARCH_ROWS, StreamState, batch_rows, make_optimisers, run_partial_pass, run_training,
                        search_hyperparameters, starts_with_search)


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


def _to_rows_device(model, Y, rows):
    """The model's state and the target array in the rows' library, on their device and in
    their dtype (a no-op for float64 numpy rows). The model is built on the host (k-means
    on the host copy of X) and moves once; kernel theta and the noise stay on the host.
    Training brings the state back to the host at the end of every fit or pass."""
    if not rows.converts:
        return Y
    model.state = state_to(model.state, rows.to_device)
    return rows.to_device(Y)


def run_fit(settings, model, rows, Y, rng, x_scale, search_model=None, steps_before=0):
    """Train ``model`` on ``rows`` with ``settings``, from an exact search when
    ``search_model`` is given (a fresh fit; see :func:`._training.search_hyperparameters`).

    ``Y`` is the host target array in the model's layout; ``x_scale`` the spread of each
    feature (Adam's unit on the inducing inputs); ``steps_before`` the steps of the fit
    this one continues (``warm_start``).
    """
    start = None
    if search_model is not None and starts_with_search(settings, model, rows):
        # One batch: the search and the steps after it maximise the same bound on the same
        # rows, so the search's end is a point of the fit, which it starts from and never
        # ends below. (With minibatches the stream keeps its own start.)
        one_batch = batch_rows(settings, rows.n_rows, model.q_optimal_in_closed_form()) >= rows.n_rows
        start = search_hyperparameters(settings, model, search_model, rows, Y, rng, x_scale, hand_over=one_batch)
    host_Y = Y
    Y = _to_rows_device(model, Y, rows)
    history, schedule, bound = run_training(settings, model, rows, Y, rng, steps_done=steps_before, x_scale=x_scale,
                                            start=start)
    if search_model is not None and bound is not None and _q_may_fall_short(model):
        # Its own generator: the check draws rows without moving the fit's random stream.
        X_check, Y_check = rows.search_rows(host_Y, SEARCH_ROWS, np.random.default_rng(0))
        warn_q_short_of_optimum(settings.name, model, search_model(model, model.n_data, False), X_check, Y_check)
    return FitResult(model, history, schedule.n_backoffs, bound, steps_before)


def _q_may_fall_short(model):
    """Whether the fitted q(u) can end short of its optimum under a conjugate likelihood:
    not where the fit settles it by exact natural steps (the coupled basis) or sets the
    joint q of several outputs in closed form, so that those fits, the defaults among
    them, pay nothing for the check."""
    return model.likelihood.conjugate and not (model.natural_step_is_exact() or model.solves_q_in_closed_form())


def run_partial_fit(settings, model, rows, Y, rng, x_scale, stream=None, search_model=None, steps_before=0):
    """One pass of minibatch steps over ``rows``, continuing ``stream`` (a
    :class:`._training.StreamState`; None on the first call, which starts one, from an
    exact search when ``search_model`` is given). Returns ``(result, stream)``."""
    if search_model is not None and starts_with_search(settings, model, rows, streaming=True):
        # The first chunk starts the stream as fit starts its own: from the exact search.
        search_hyperparameters(settings, model, search_model, rows, Y, rng, x_scale)
    Y = _to_rows_device(model, Y, rows)
    if stream is None:
        schedule, adam = make_optimisers(settings, model, x_scale, False, steps_before, falling_elbo_backoff=False)
        stream = StreamState(adam, schedule, rng, x_scale)
    history = run_partial_pass(settings, model, rows, Y, stream)
    return FitResult(model, history, stream.schedule.n_backoffs, None, steps_before), stream
