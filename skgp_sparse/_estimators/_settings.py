"""The estimator's parameters as the fit reads them: taken once, frozen, for one fit."""

from dataclasses import dataclass, fields

from ._common import dtype_name


@dataclass(frozen=True)
class FitSettings:
    """What a fit needs from its estimator's constructor parameters.

    Made by :meth:`from_estimator` at the start of ``fit`` or ``partial_fit``, so that the
    fit pipeline (:mod:`._fit`, :mod:`._training`) reads plain values rather than the
    estimator, and a parameter set on the estimator during the fit cannot change it.
    Each field has the meaning of the estimator parameter of the same name (see the
    estimators' docstrings; ``dtype`` as its name), except:

    ``name``
        The estimator's class name, for messages.
    ``epoch_callback``
        Called after every epoch of a minibatch fit as ``callback(model, history)``; set
        by benchmarks on the estimator's ``_epoch_callback`` attribute (not a parameter:
        it would not survive ``clone``), None otherwise.
    """

    name: str
    basis: str
    n_inducing: int
    n_orthogonal: int
    kl_columns: object
    inducing_init: object
    learn_inducing: bool
    batch_size: object
    max_iter: int
    tol: float
    n_iter_no_change: int
    natural_step_size: float
    learning_rate: float
    variational_optimizer: str
    optimizer: object
    n_restarts_optimizer: int
    jitter: object
    backend: str
    dtype: str
    verbose: int
    epoch_callback: object = None

    @classmethod
    def from_estimator(cls, estimator):
        """The settings of ``estimator``'s current parameters."""
        values = {f.name: getattr(estimator, f.name) for f in fields(cls) if f.name not in ("name", "epoch_callback")}
        values["dtype"] = dtype_name(values["dtype"])
        return cls(name=type(estimator).__name__, epoch_callback=getattr(estimator, "_epoch_callback", None),
                   **values)
