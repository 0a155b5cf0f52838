"""The minibatch training loop: natural steps on q, Adam on everything else."""

import time
from dataclasses import dataclass, field

import numpy as np

from .. import backend
from ..backend import checks_on_device, to_host
from ..linalg import StatusFlags, all_finite, copy_array, deferred_checks


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


#: Steps between two reads of a step's status on a device (:class:`DeferredSteps`): a
#: read is one synchronisation, and a replay after a raised flag redoes at most this many
#: steps on the careful path. Checks also fall at the end of each stopping period and of
#: each epoch, whose figures they read.
CHECK_EVERY = 10
#: After a replay, the next steps run on the careful path at once, as many as the steps
#: replayed and doubling with each replay in a row, up to this many; a clean interval
#: starts over. A condition that persists (a K(Z, Z) too ill-conditioned to fold, a cluster
#: of coincident points) then costs what it costs on the careful path, not each interval
#: twice.
MAX_CAREFUL_STEPS = 640


def _snapshot(model):
    """Copies of everything one step changes: enough to undo a half-committed step."""
    return model.state, {name: copy_array(value) for name, value in model.adam_params().items()}


def _restore(model, snapshot):
    state, params = snapshot
    model.state = state
    model.set_adam_params(params)


def _check_finite(result, epoch):
    """Raise NonFiniteELBOError naming ``epoch`` unless the step's ELBO and gradients are
    finite (within :func:`skgp_sparse.linalg.deferred_checks`: noted for the check)."""
    if not all_finite(result.elbo) or not all(all_finite(g) for g in result.grads.values()):
        raise NonFiniteELBOError(
            f"the ELBO or its gradient became non-finite at epoch {epoch}. "
            "Try standardising X and y (normalize_y=True), a smaller learning_rate or "
            "natural_step_size, or tighter kernel hyperparameter bounds."
        )


def take_step(model, xb, yb, schedule, adam, warming_up, epoch):
    """One training step on the minibatch (xb, yb), committed to ``model``.

    The ELBO estimate and its gradients are evaluated once; q moves by a natural step
    (halved while its factorisation fails), and, after the warm-up, the other parameters
    by an Adam step. A step interrupted while its new parameters were being stored is
    undone before the KeyboardInterrupt propagates.

    Returns
    -------
    result : BatchResult
    new_params, bounds : dict or None
        The Adam step's new values and their bounds (None while warming up).

    Raises
    ------
    NonFiniteELBOError
        When the ELBO or a gradient is not finite (naming ``epoch``).
    """
    result = model.evaluate(xb, yb, need_grad="adam")
    _check_finite(result, epoch)
    new_state, _ = schedule.apply(lambda size: model.natural_step(result, size))
    new_params = bounds = None
    if not warming_up:
        bounds = model.adam_bounds()
        new_params = adam.step(model.adam_params(), result.grads, bounds,
                               rate_scales=model.adam_rate_scales(schedule.t - 1))
    # The commit: two stores that must happen together (undone if interrupted).
    snapshot = _snapshot(model)
    try:
        model.state = new_state
        if new_params is not None:
            model.set_adam_params(new_params)
    except KeyboardInterrupt:
        _restore(model, snapshot)
        raise
    return result, new_params, bounds


class _EpochRecord:
    """The figures of one epoch so far and what a recorded step feeds (the stopping
    rule, the progress lines, the history)."""

    def __init__(self, model, history, stopping, progress, monitor):
        self.model, self.history, self.stopping = model, history, stopping
        self.progress, self.monitor = progress, monitor
        self.total, self.count = 0.0, 0

    def step(self, elbo, gradient, warming_up, monitored=None):
        """Record a completed step of ELBO estimate ``elbo`` (a float); True when the
        stopping rule says the fit has converged. ``monitored``, if given, is the
        monitor's value at this step, already read (see :meth:`DeferredSteps.check`)."""
        self.total += elbo
        self.count += 1
        self.history.n_steps += 1
        self.progress.step(self.history.n_epochs + 1, self.count, self.total)
        if warming_up:
            return False
        monitor = self.monitor if monitored is None else (lambda: monitored)
        closed = self.stopping.add(elbo / self.model.rows_counted, monitor, gradient)
        return closed and self.stopping.converged()


def _careful_step(record, xb, yb, schedule, adam, warming_up, epoch):
    """One step checked at once (:func:`take_step`), recorded in ``record`` (an
    :class:`_EpochRecord`); True when the stopping rule says the fit has converged."""
    result, new_params, bounds = take_step(record.model, xb, yb, schedule, adam, warming_up, epoch)
    gradient = _step_gradient(record.stopping, record.model, new_params, bounds, result)
    if gradient is not None:
        (gradient,) = to_host(gradient)
    return record.step(result.elbo, gradient, warming_up)


def _step_gradient(stopping, model, new_params, bounds, result):
    """The hyperparameter gradient the stopping rule reads of a step (None when it reads
    none or the step was a warm-up)."""
    if new_params is None or not stopping.reads_gradient:
        return None
    return hyperparameter_gradient(new_params, bounds, result.grads, model.rows_counted)


class DeferredSteps:
    """Training steps whose checks stay on the device, read once per interval.

    Within an interval every step runs under :func:`skgp_sparse.linalg.deferred_checks`:
    its status (a non-finite value, a failed factorisation, a pair of points whose
    distance needs refining, ...) is noted in :class:`~skgp_sparse.linalg.StatusFlags`
    and its ELBO estimate stays a 0-d device array. :meth:`check` reads the interval's
    ELBO estimates and flags in one transfer. When no flag is raised the steps are
    recorded as they were taken; otherwise the model goes back to the checkpoint made at
    the last check and the interval's minibatches are replayed on the careful path,
    which warns, adds jitter, halves natural steps or raises NonFiniteELBOError (naming
    the epoch) exactly where the steps taken one at a time would have. The steps after a
    replay run on the careful path for a while (:meth:`take_carefully`), so that a
    condition that persists is not paid for twice in every interval.

    Parameters
    ----------
    model, schedule, adam, stopping
        Those of :func:`train`.
    check_every : int
        Most steps between two checks.
    """

    def __init__(self, model, schedule, adam, stopping, check_every):
        self.model, self.schedule, self.adam, self.stopping = model, schedule, adam, stopping
        self.check_every = max(int(check_every), 1)
        self.flags = StatusFlags()
        self.pending = []
        self.checkpoint = None
        #: Intervals replayed on the careful path after a raised flag.
        self.n_replays = 0
        self.careful_span = 0
        self.careful_left = 0

    def take_carefully(self):
        """Whether the next step runs on the careful path at once (the backing off after a
        replay, see :data:`MAX_CAREFUL_STEPS`); counts it when it does."""
        if self.careful_left <= 0:
            return False
        self.careful_left -= 1
        return True

    def take(self, xb, yb, warming_up, epoch):
        """Take one step with its checks deferred; True when the interval is full (the
        caller then calls :meth:`check`)."""
        if self.checkpoint is None:
            self.checkpoint = self._capture()
        with deferred_checks(self.flags):
            result, new_params, bounds = take_step(self.model, xb, yb, self.schedule, self.adam, warming_up, epoch)
        gradient = _step_gradient(self.stopping, self.model, new_params, bounds, result)
        self.pending.append((xb, yb, warming_up, result.elbo, gradient))
        counted = _counted_steps(self.pending)
        return len(self.pending) >= self.check_every or counted >= self.stopping.steps_left_in_period()

    def check(self, record, epoch):
        """Read the pending steps' status and record them in ``record`` (an
        :class:`_EpochRecord`), replaying them on the careful path after a raised flag.

        Returns
        -------
        bool
            Whether the stopping rule says the fit has converged.
        """
        if not self.pending:
            return False
        pending, self.pending = self.pending, []
        monitored = self._monitor_at_period_end(pending, record)
        raised = self.flags.take()
        on_device = raised is not None and raised is not True
        # The stopping rule's gradients (on the device where the hyperparameters are held
        # there) and the monitor's value travel in the same read as the ELBO estimates
        # and the flags.
        gradients = [step[4] for step in pending if step[4] is not None]
        extra = [monitored] if monitored is not None else []
        host = to_host(*[step[3] for step in pending], *gradients, *extra, *([raised] if on_device else []))
        if raised is True or (on_device and bool(host[-1])):
            return self._replay(pending, record, epoch)
        host_gradients = iter(host[len(pending):])
        monitored = None if monitored is None else float(host[len(pending) + len(gradients)])
        converged = False
        for i, ((_, _, warming_up, _, gradient), elbo) in enumerate(zip(pending, host)):
            gradient = None if gradient is None else next(host_gradients)
            last = i == len(pending) - 1
            converged = record.step(float(elbo), gradient, warming_up, monitored if last else None)
        self.checkpoint = None
        self.careful_span = 0
        return converged

    def _monitor_at_period_end(self, pending, record):
        """The monitor's value (a 0-d device array, its checks deferred with the steps') when
        the last of the ``pending`` steps closes a stopping period, else None: the stopping
        rule reads the monitor at the model of that step, which is the model now."""
        counted = _counted_steps(pending)
        if record.monitor is None or counted == 0 or counted < self.stopping.steps_left_in_period():
            return None
        with deferred_checks(self.flags):
            return record.monitor()

    def discard(self):
        """Go back to the last check (a KeyboardInterrupt within an interval): the model
        is then that of the last recorded step."""
        if self.checkpoint is not None:
            self._restore(self.checkpoint)
        self.pending, self.checkpoint = [], None
        self.flags.take()

    def _replay(self, pending, record, epoch):
        self.n_replays += 1
        self._restore(self.checkpoint)
        self.checkpoint = None
        self.careful_span = min(2 * self.careful_span or len(pending), MAX_CAREFUL_STEPS)
        self.careful_left = self.careful_span
        converged = False
        for xb, yb, warming_up, _, _ in pending:
            converged = _careful_step(record, xb, yb, self.schedule, self.adam, warming_up, epoch)
        return converged

    def _capture(self):
        """What the steps of an interval change: the model's state, its Adam-moved
        parameters and jitter, and the optimisers' counters and moments."""
        model = self.model
        return (model.state.copy(), {name: copy_array(v) for name, v in model.adam_params().items()},
                [kernel.saved_hyperparameters() for kernel in model.kernels],
                model.jitter, _attributes(self.schedule), _attributes(self.adam))

    def _restore(self, checkpoint):
        state, params, kernels, jitter, schedule, adam = checkpoint
        # The kernels' own values (theta's would come back through exp(log v), not always
        # to the last bit), then everything else Adam moves, which syncs the noise.
        for kernel, saved in zip(self.model.kernels, kernels):
            kernel.restore_hyperparameters(saved)
        self.model.state = state
        self.model.set_adam_params({name: value for name, value in params.items() if name != "theta"})
        self.model.jitter = jitter
        vars(self.schedule).update(_attributes_of(schedule))
        vars(self.adam).update(_attributes_of(adam))


def _counted_steps(pending):
    """How many of the ``pending`` steps the stopping rule counts (the warm-up's do not)."""
    return sum(1 for step in pending if not step[2])


def _attributes(obj):
    """The attributes of ``obj`` with a shallow copy of each dict among them (Adam's
    moments: their arrays are replaced at each step, never written)."""
    return {name: dict(value) if isinstance(value, dict) else value for name, value in vars(obj).items()}


def _attributes_of(saved):
    """A fresh copy of saved attributes (a checkpoint may be restored more than once)."""
    return {name: dict(value) if isinstance(value, dict) else value for name, value in saved.items()}


def train(
    model, batches, *, max_iter, stopping, schedule, adam, rng, verbose=0, history=None, callback=None,
    warmup_steps=0, monitor_rows=None, steps_per_epoch=None, check_every=CHECK_EVERY,
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

    ``batches(rng)`` yields the ``(X_batch, Y_batch)`` of one epoch: the training rows'
    own source (:meth:`skgp_sparse.fit.rows.Rows.batches`; :func:`array_batches` shuffles
    arrays into minibatches, the Dask path streams chunks). ``steps_per_epoch``, if given,
    is the length of an epoch that ``verbose >= 2`` progress lines report (see
    :class:`Progress`).

    Rows of a library other than numpy (a GPU's) keep each step's checks on the device
    (:class:`DeferredSteps`): they are read with the steps' ELBO estimates at most every
    ``check_every`` steps, at the end of each stopping period and of each epoch, and a
    raised flag replays the steps since the last check on the careful path, so that
    warnings, back-offs and errors are those of steps checked one at a time. numpy rows
    check every step at once (their reads cost nothing), and so does every step with
    ``check_every=None`` (the careful path alone).

    A KeyboardInterrupt (Ctrl-C) ends the fit at the last completed step: a step is
    computed in full before any parameter changes, and one interrupted while its new
    parameters were being stored is undone, so the model is always that of a whole step
    (with checks on the device, the step of the last check). ``history.interrupted`` is
    then True. An interrupt before the first step completes is raised again (there is no
    fit to keep).
    """
    history = History() if history is None else history
    progress = Progress(verbose, time.perf_counter(), model.rows_counted, steps_per_epoch)
    monitor = None if monitor_rows is None else (lambda: model.sample_elbo(*monitor_rows) / model.rows_counted)
    steps = _EpochSteps(model, history, stopping, schedule, adam, warmup_steps, check_every, callback)
    try:
        for _ in range(max_iter):
            record = _EpochRecord(model, history, stopping, progress, monitor)
            open_epoch = record
            try:
                converged = steps.run(record, batches(rng))
                open_epoch = None
                history.converged = history.converged or converged
                _close_epoch(model, history, record.total / record.count, progress, steps.callback)
                schedule.end_epoch(record.total / record.count / model.rows_counted)
            except KeyboardInterrupt:
                if not steps.interrupted(open_epoch):
                    raise
                break
            if converged:
                break
    finally:
        if steps.held:
            # Whatever ended the loop (its end, an error, an interrupt), the model leaves
            # it with host hyperparameters, as it came in.
            model.hold_hyperparameters_on_host()
            adam.moments_to_host(HYPERPARAMETERS)
    return history


class _EpochSteps:
    """The steps of :func:`train`'s epochs and what they keep from one epoch to the next:
    whether Adam holds the hyperparameters on the rows' device (``held``, decided at the
    first batch), the deferred checks of a device's steps, and the steps taken so far
    (the warm-up counts them)."""

    def __init__(self, model, history, stopping, schedule, adam, warmup_steps, check_every, callback):
        self.model, self.history, self.stopping = model, history, stopping
        self.schedule, self.adam = schedule, adam
        self.warmup_steps, self.check_every, self.callback = warmup_steps, check_every, callback
        self.steps_before = history.n_steps
        self.held, self.deferred = None, None

    def run(self, record, batches):
        """One epoch of steps over ``batches``, recorded in ``record``; True when the
        stopping rule says the fit has converged."""
        epoch = self.history.n_epochs + 1
        for xb, yb in batches:
            if self.held is None:
                self._first_batch(xb)
            if self.deferred is None and self.check_every is not None and checks_on_device(xb):
                self.deferred = DeferredSteps(self.model, self.schedule, self.adam, self.stopping, self.check_every)
            warming_up = self._steps_taken() < self.warmup_steps
            if self.deferred is None or self.deferred.take_carefully():
                converged = _careful_step(record, xb, yb, self.schedule, self.adam, warming_up, epoch)
            elif self.deferred.take(xb, yb, warming_up, epoch):
                converged = self.deferred.check(record, epoch)
            else:
                converged = False
            if converged:
                return True
        return self.deferred is not None and self.deferred.check(record, epoch)

    def _first_batch(self, xb):
        # Adam moves the hyperparameters on the rows' device (with checks at once too, so
        # that both paths compute alike), and a deferred step then reads nothing between
        # checks.
        self.held = checks_on_device(xb) and self.model.hold_hyperparameters_on(xb)
        if self.held and self.callback is not None:
            self.callback = _with_host_hyperparameters(self.callback, xb)

    def _steps_taken(self):
        pending = 0 if self.deferred is None else len(self.deferred.pending)
        return self.history.n_steps - self.steps_before + pending

    def interrupted(self, open_epoch):
        """Bookkeeping of a KeyboardInterrupt: the steps not yet checked are dropped, and
        the completed steps of the epoch it cut short (``open_epoch``, its record; None
        once the epoch was closed) count. False when no step of this fit completed: the
        interrupt is then raised again (there is no fit to keep)."""
        if self.deferred is not None:
            self.deferred.discard()
        if self.history.n_steps == self.steps_before:
            return False
        self.history.interrupted = True
        if open_epoch is not None and open_epoch.count:
            # The partial epoch counts: its mean ELBO is over the steps it completed.
            self.history.n_epochs += 1
            self.history.elbo.append(open_epoch.total / open_epoch.count)
        return True


#: The hyperparameters among the parameters Adam moves: those whose gradient the stopping
#: rule reads for a steady pull (the inducing inputs and q(u) are not among them:
#: thousands of coordinates, and q is moved by its own natural steps), and those the exact
#: search that starts a fit hands to it.
HYPERPARAMETERS = ("theta", "log_noise", "likelihood", "mixing", "offset")


def hyperparameters(model):
    """The values of ``model``'s hyperparameters (:data:`HYPERPARAMETERS`) as Adam holds
    them, for ``set_adam_params``."""
    return {name: value for name, value in model.adam_params().items() if name in HYPERPARAMETERS}


class ModelSnapshot:
    """A model's hyperparameters (host copies, as :func:`hyperparameters` gives them), its
    state (q(u) and the inducing inputs, in their library) and its jitter, to go back to
    (a search's round that lowered the bound, the end of a search a stream did not beat)."""

    def __init__(self, params, state, jitter):
        self.params, self.state, self.jitter = params, state, jitter

    @classmethod
    def of(cls, model):
        params = {name: np.array(value, copy=True) for name, value in hyperparameters(model).items()}
        return cls(params, model.state.copy(), model.jitter)

    def restore(self, model):
        """Put the model back; the snapshot stays valid for another restore."""
        model.set_adam_params(self.params)
        model.state = self.state.copy()
        model.jitter = self.jitter


def hyperparameter_gradient(params, bounds, grads, rows_counted):
    """The minibatch gradient per row of the hyperparameters as one numpy vector, zero
    where a parameter rests on a bound (its gradient pushes into the bound for good); None
    when the model learns none.

    ``params`` and ``bounds`` are those of the step's Adam update (its new values and the
    bounds it clipped them to), ``grads`` the step's gradients, ``rows_counted`` the
    model's rows (:attr:`~skgp_sparse.elbo.VariationalModel.rows_counted`)."""
    names = [name for name in HYPERPARAMETERS if name in params and name in grads]
    if not names:
        return None
    if backend.on_device(params[names[0]]):
        return _device_hyperparameter_gradient(names, params, bounds, grads, rows_counted)
    parts = []
    for name in names:
        gradient = np.ravel(backend.to_numpy(grads[name])).astype(np.float64)
        value = np.ravel(backend.to_numpy(params[name]))
        if name in bounds:
            low, high = (np.broadcast_to(np.asarray(b, dtype=np.float64), np.shape(params[name])).ravel()
                         for b in bounds[name])
            gradient = np.where((value > low) & (value < high), gradient, 0.0)
        parts.append(gradient)
    return np.concatenate(parts) / rows_counted


def _device_hyperparameter_gradient(names, params, bounds, grads, rows_counted):
    """:func:`hyperparameter_gradient` of hyperparameters held on a device, computed there
    (a 1-D array of theirs; the check that reads the step's ELBO reads it too)."""
    first = params[names[0]]
    xp = backend.namespace(first)
    parts = []
    for name in names:
        value = xp.reshape(params[name], (-1,))
        gradient = xp.astype(xp.reshape(grads[name], (-1,)), value.dtype)
        if name in bounds:
            # Host bounds, copied to the device once (backend.constant caches them).
            low, high = (backend.constant(np.array(np.broadcast_to(np.asarray(b, dtype=np.float64), tuple(value.shape))),
                                          value) for b in bounds[name])
            gradient = xp.where((value > low) & (value < high), gradient, xp.zeros_like(gradient))
        parts.append(gradient)
    return (xp.concat(parts) if len(parts) > 1 else parts[0]) / rows_counted


def _with_host_hyperparameters(callback, like):
    """``callback`` run with the model's hyperparameters on the host (it may evaluate the
    model on host arrays), held on ``like``'s device again after it."""

    def run(model, history):
        model.hold_hyperparameters_on_host()
        try:
            callback(model, history)
        finally:
            model.hold_hyperparameters_on(like)

    return run


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
