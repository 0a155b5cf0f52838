"""The minibatch training loop: natural steps on q, Adam on everything else."""

import time
from dataclasses import dataclass, field

import numpy as np

from .. import backend
from ..linalg import copy_array


class NonFiniteELBOError(FloatingPointError):
    """The ELBO or its gradient stopped being finite during a fit."""


@dataclass
class History:
    """What happened during a fit.

    Attributes
    ----------
    elbo : list of float
        Mean of the minibatch ELBO estimates over each epoch (nats, full-data scale).
    n_epochs, n_steps : int
        Completed epochs and steps.
    converged : bool
        Whether the stopping rule ended the fit before ``max_iter``.
    interrupted : bool
        Whether a KeyboardInterrupt (Ctrl-C) ended the fit; the model then holds the
        parameters of the last completed step.
    diagnostics : list of dict
        The basis's end-of-epoch diagnostics (none for a basis that reports none).
    """

    elbo: list = field(default_factory=list)
    n_epochs: int = 0
    n_steps: int = 0
    converged: bool = False
    interrupted: bool = False
    diagnostics: list = field(default_factory=list)


def _batches(n, batch_size, rng):
    if batch_size >= n:
        yield slice(None)
        return
    order = rng.permutation(n)
    for start in range(0, n, batch_size):
        yield np.sort(order[start : start + batch_size])


def array_batches(X, Y, batch_size):
    """The default batch source: each epoch, shuffled minibatches of ``batch_size`` rows.

    Returns
    -------
    callable
        ``batches(rng)`` -> iterator of ``(X_batch, Y_batch)`` covering every row once.
    """

    def batches(rng):
        for rows in _batches(X.shape[0], batch_size, rng):
            yield X[rows], Y[rows]

    return batches


def _snapshot(model):
    """Copies of everything one step changes: enough to undo a half-committed step."""
    return model.state, {name: copy_array(value) for name, value in model.adam_params().items()}


def _all_finite(g):
    """Whether every entry of a gradient is finite (one bool back from another library)."""
    xp = backend.namespace(g)
    return bool(xp.all(xp.isfinite(g)))


def _restore(model, snapshot):
    state, params = snapshot
    model.state = state
    model.set_adam_params(params)


def _check_finite(result, epoch):
    if not np.isfinite(result.elbo) or not all(_all_finite(g) for g in result.grads.values()):
        raise NonFiniteELBOError(
            f"the ELBO or its gradient became non-finite at epoch {epoch}. "
            "Try standardising X and y (normalize_y=True), a smaller learning_rate or "
            "natural_step_size, or tighter kernel hyperparameter bounds."
        )


def train(
    model, X, Y, *, batch_size, max_iter, stopping, schedule, adam, rng, verbose=0, history=None,
    callback=None, batches=None, warmup_steps=0, monitor_rows=None, steps_per_epoch=None,
):
    """Fit ``model`` (a :class:`skgp_sparse.elbo.VariationalModel`) in place.

    Every step draws a minibatch and evaluates the ELBO estimate and its gradients at the
    current parameters once. The first ``warmup_steps`` steps move q alone, by natural
    steps: the hyperparameter gradient at the prior q(u) is orders of magnitude larger
    than anywhere later, and one such step would fill Adam's second moment and shrink
    every later step. After that each step moves q by a natural step (``schedule``) and
    the other parameters by an Adam step, both from the same evaluation.

    Stops after ``max_iter`` epochs, or when ``stopping`` (a
    :class:`~skgp_sparse.optim.stopping.StoppingRule`, fed every step's ELBO estimate per
    row) says the ELBO has stopped rising; then ``history.converged`` is True.
    ``callback(model, history)``, if given, runs after every epoch (benchmarks use it to
    follow a test metric).

    ``monitor_rows``, if given, is a fixed ``(X, Y)`` sample of the training rows: the
    stopping rule then reads the ELBO per row on them at the end of each period rather
    than the mean of the period's noisy minibatch estimates.

    ``batches(rng)``, if given, replaces the shuffled minibatches of (X, Y): it yields the
    ``(X_batch, Y_batch)`` of one epoch (the Dask path streams chunks this way); X and Y
    are then not read, and ``steps_per_epoch``, if given, is the length of an epoch that
    ``verbose >= 2`` progress lines report (see :class:`Progress`).

    A KeyboardInterrupt (Ctrl-C) ends the fit at the last completed step: a step is
    computed in full before any parameter changes, and one interrupted while its new
    parameters were being stored is undone, so the model is always that of a whole step.
    ``history.interrupted`` is then True. An interrupt before the first step completes
    is raised again (there is no fit to keep).
    """
    history = History() if history is None else history
    if batches is None:
        batches = array_batches(X, Y, batch_size)
        steps_per_epoch = -(-X.shape[0] // batch_size)
    start = time.perf_counter()
    progress = Progress(verbose, start, model.rows_counted, steps_per_epoch)
    steps_before = history.n_steps
    monitor = None if monitor_rows is None else (lambda: model.sample_elbo(*monitor_rows) / model.rows_counted)
    snapshot = None
    for _ in range(max_iter):
        total, count, epoch_open = 0.0, 0, True
        try:
            for xb, yb in batches(rng):
                result = model.evaluate(xb, yb)
                _check_finite(result, history.n_epochs + 1)
                new_state, _ = schedule.apply(lambda size: model.natural_step(result, size))
                warming_up = history.n_steps - steps_before < warmup_steps
                new_params = bounds = None
                if not warming_up:
                    bounds = model.adam_bounds()
                    new_params = adam.step(model.adam_params(), result.grads, bounds,
                                           rate_scales=model.adam_rate_scales(schedule.t - 1))
                # The commit: two stores that must happen together (undone if interrupted).
                snapshot = _snapshot(model)
                model.state = new_state
                if new_params is not None:
                    model.set_adam_params(new_params)
                snapshot = None
                total += result.elbo
                count += 1
                history.n_steps += 1
                progress.step(history.n_epochs + 1, count, total)
                closed = False
                if not warming_up:
                    gradient = None
                    if stopping.reads_gradient:
                        gradient = hyperparameter_gradient(new_params, bounds, result.grads, model.rows_counted)
                    closed = stopping.add(result.elbo / model.rows_counted, monitor, gradient)
                if closed and stopping.converged():
                    history.converged = True
                    break
            epoch_open = False
            _close_epoch(model, history, total / count, progress, callback)
            schedule.end_epoch(total / count / model.rows_counted)
            if history.converged:
                break
        except KeyboardInterrupt:
            if snapshot is not None:
                _restore(model, snapshot)
            if history.n_steps == steps_before:
                raise
            history.interrupted = True
            if epoch_open and count:
                # The partial epoch counts: its mean ELBO is over the steps it completed.
                history.n_epochs += 1
                history.elbo.append(total / count)
            break
    return history


#: The hyperparameters among the parameters Adam moves: those whose gradient the stopping
#: rule reads for a steady pull (the inducing inputs and q(u) are not among them:
#: thousands of coordinates, and q is moved by its own natural steps), and those the exact
#: search that starts a fit hands to it.
HYPERPARAMETERS = ("theta", "log_noise", "likelihood", "mixing", "offset")


def hyperparameters(model):
    """The values of ``model``'s hyperparameters (:data:`HYPERPARAMETERS`) as Adam holds
    them, for ``set_adam_params``."""
    return {name: value for name, value in model.adam_params().items() if name in HYPERPARAMETERS}


def hyperparameter_gradient(params, bounds, grads, rows_counted):
    """The minibatch gradient per row of the hyperparameters as one numpy vector, zero
    where a parameter rests on a bound (its gradient pushes into the bound for good); None
    when the model learns none.

    ``params`` and ``bounds`` are those of the step's Adam update (its new values and the
    bounds it clipped them to), ``grads`` the step's gradients, ``rows_counted`` the
    model's rows (:attr:`~skgp_sparse.elbo.VariationalModel.rows_counted`)."""
    parts = []
    for name in HYPERPARAMETERS:
        if name not in params or name not in grads:
            continue
        gradient = np.ravel(backend.to_numpy(grads[name])).astype(np.float64)
        value = np.ravel(backend.to_numpy(params[name]))
        if name in bounds:
            low, high = (np.broadcast_to(np.asarray(b, dtype=np.float64), np.shape(params[name])).ravel()
                         for b in bounds[name])
            gradient = np.where((value > low) & (value < high), gradient, 0.0)
        parts.append(gradient)
    return np.concatenate(parts) / rows_counted if parts else None


def _close_epoch(model, history, epoch_elbo, progress, callback):
    """Record an epoch (or the part of one that ended the fit) in ``history``."""
    history.n_epochs += 1
    history.elbo.append(epoch_elbo)
    diagnostics = model.diagnostics()
    if diagnostics:
        history.diagnostics.append(diagnostics)
    progress.epoch(history.n_epochs, epoch_elbo)
    if callback is not None:
        callback(model, history)


#: ``verbose >= 2``: seconds between two progress lines within an epoch.
PROGRESS_SECONDS = 10.0


class Progress:
    """What a fit prints, by ``verbose`` level, as scikit-learn's iterative estimators do.

    ``verbose >= 1``: one line per epoch, with its mean ELBO per row (per row, so that fits
    of any size read alike) and the seconds since the start. ``verbose >= 2``: also a line
    every :data:`PROGRESS_SECONDS` within an epoch (a long epoch of a large data set is
    otherwise silent for minutes): the steps done, of how many when the epoch's length is
    known, and the ELBO per row of the epoch so far.
    """

    def __init__(self, verbose, start, rows_counted, steps_per_epoch=None):
        self.verbose = verbose
        self.start = start
        self.rows_counted = rows_counted
        self.steps_per_epoch = steps_per_epoch
        self.last_line = start

    def step(self, epoch, steps, elbo_sum):
        """After step ``steps`` of ``epoch``, whose ELBO estimates sum to ``elbo_sum``."""
        if self.verbose < 2:
            return
        now = time.perf_counter()
        if now - self.last_line < PROGRESS_SECONDS:
            return
        self.last_line = now
        of = "" if self.steps_per_epoch is None else f" of {self.steps_per_epoch}"
        print(f"epoch {epoch:4d}  step {steps}{of}  ELBO per row so far {elbo_sum / steps / self.rows_counted: .5f}"
              f"  elapsed {now - self.start:8.2f} s")

    def epoch(self, epoch, elbo):
        """At the end of ``epoch``, whose steps' mean ELBO estimate is ``elbo``."""
        if not self.verbose:
            return
        self.last_line = now = time.perf_counter()
        print(f"epoch {epoch:4d}  ELBO per row {elbo / self.rows_counted: .5f}  elapsed {now - self.start:8.2f} s")


def settle_variational(model, batches, rng, schedule, exact, max_steps):
    """Natural steps on q alone after training, so that q belongs to the final hyperparameters.

    The last Adam step moves the hyperparameters after q's last step was computed; this
    pass takes q back to them without moving anything else.

    Parameters
    ----------
    model : VariationalModel
    batches : callable
        ``batches(rng)`` -> iterator over one epoch of ``(X_batch, Y_batch)``.
    rng : numpy Generator
    schedule : NaturalStepSchedule
        Step sizes (with back-off) of the inexact case.
    exact : bool
        The natural step of size 1 lands on the batch's optimum (a conjugate likelihood
        and a basis whose step is exact, see ``VariationalModel.natural_step_is_exact``). One pass then
        averages the batch optima with weights equal to their row counts: in natural
        parameters that is the optimal q for the whole data, to rounding.
    max_steps : int
        Otherwise, at most this many steps of the schedule's current size.

    Returns
    -------
    int
        Steps taken.
    """
    rows_done = 0
    steps = 0
    for xb, yb in batches(rng):
        if not exact and steps >= max_steps:
            break
        result = model.evaluate(xb, yb, need_grad="natural")
        rows_done += xb.shape[0]
        if exact:
            model.state = model.natural_step(result, xb.shape[0] / rows_done)
        else:
            model.state, _ = schedule.apply(lambda size: model.natural_step(result, size))
        steps += 1
    return steps
