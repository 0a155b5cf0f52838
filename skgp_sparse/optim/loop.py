"""The minibatch training loop: natural steps on q, Adam on everything else."""

import time
from dataclasses import dataclass, field

import numpy as np


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
    converged : bool
        Whether the tolerance stopped the fit before ``max_iter``.
    diagnostics : list of dict
        The basis's end-of-epoch diagnostics (bases without ``diagnostics``: empty).
    """

    elbo: list = field(default_factory=list)
    n_epochs: int = 0
    n_steps: int = 0
    converged: bool = False
    diagnostics: list = field(default_factory=list)


def _batches(n, batch_size, rng):
    if batch_size >= n:
        yield slice(None)
        return
    order = rng.permutation(n)
    for start in range(0, n, batch_size):
        yield np.sort(order[start : start + batch_size])


def train(
    model, X, Y, *, batch_size, max_iter, tol, n_iter_no_change, schedule, adam, rng, verbose=0, history=None,
    callback=None,
):
    """Fit ``model`` (a :class:`skgp_sparse.elbo.VariationalModel`) in place.

    Every step draws a minibatch, evaluates the ELBO estimate and its gradients at the
    current parameters once, then moves q by a natural step (``schedule``) and the other
    parameters by an Adam step, both from that same evaluation.

    Stops after ``max_iter`` epochs, or when the epoch-mean ELBO per training row has not
    improved by more than ``tol`` for ``n_iter_no_change`` consecutive epochs.
    ``callback(model, history)``, if given, runs after every epoch (benchmarks use it to
    follow a test metric).
    """
    history = History() if history is None else history
    n = X.shape[0]
    best = -np.inf
    stale = 0
    start = time.perf_counter()
    for _ in range(max_iter):
        total, count = 0.0, 0
        for rows in _batches(n, batch_size, rng):
            xb, yb = X[rows], Y[rows]
            result = model.evaluate(xb, yb)
            if not np.isfinite(result.elbo) or not all(np.all(np.isfinite(g)) for g in result.grads.values()):
                raise NonFiniteELBOError(
                    f"the ELBO or its gradient became non-finite at epoch {history.n_epochs + 1}. "
                    "Try standardising X and y (normalize_y=True), a smaller learning_rate or "
                    "natural_step_size, or tighter kernel hyperparameter bounds."
                )
            new_state, _ = schedule.apply(lambda size: model.natural_step(result, size))
            new_params = adam.step(model.adam_params(), result.grads, model.adam_bounds())
            model.state = new_state
            model.set_adam_params(new_params)
            total += result.elbo
            count += 1
            history.n_steps += 1
        history.n_epochs += 1
        epoch_elbo = total / count
        history.elbo.append(epoch_elbo)
        diagnostics = model.diagnostics()
        if diagnostics:
            history.diagnostics.append(diagnostics)
        if verbose:
            print(
                f"epoch {history.n_epochs:4d}  ELBO {epoch_elbo: .6e}  "
                f"elapsed {time.perf_counter() - start:8.2f} s"
            )
        if callback is not None:
            callback(model, history)
        per_row = epoch_elbo / n
        schedule.end_epoch(per_row)
        if per_row > best + tol:
            stale = 0
        else:
            stale += 1
        best = max(best, per_row)
        if stale >= n_iter_no_change:
            history.converged = True
            break
    return history
