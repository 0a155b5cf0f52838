"""The estimator's parameters as the fit reads them: taken once, frozen, for one fit."""

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class FitSettings:
    """What the fit pipeline reads of its estimator's constructor parameters (the model
    is built by the estimator itself, from the rest).

    Made by :meth:`from_estimator` at the start of ``fit`` or ``partial_fit``, so that the
    fit pipeline (:mod:`._fit`, :mod:`._training`) reads plain values rather than the
    estimator, and a parameter set on the estimator during the fit cannot change it.
    Each field has the meaning of the estimator parameter of the same name (see the
    estimators' docstrings), except:

    ``name``
        The estimator's class name, for messages.
    ``epoch_callback``
        Called after every epoch of a minibatch fit as ``callback(model, history)``; set
        by benchmarks on the estimator's ``_epoch_callback`` attribute (not a parameter:
        it would not survive ``clone``), None otherwise.
    """

    name: str
    batch_size: object
    max_iter: int
    tol: float
    n_iter_no_change: int
    natural_step_size: float
    learning_rate: float
    optimizer: object
    n_restarts_optimizer: int
    jitter: object
    verbose: int
    epoch_callback: object = None

    @classmethod
    def from_estimator(cls, estimator):
        """The settings of ``estimator``'s current parameters."""
        values = {f.name: getattr(estimator, f.name) for f in fields(cls) if f.name not in ("name", "epoch_callback")}
        return cls(name=type(estimator).__name__, epoch_callback=getattr(estimator, "_epoch_callback", None),
                   **values)
