"""The estimator's parameters as the fit reads them: taken once, frozen, for one fit."""

from dataclasses import dataclass, fields

from .placement import dtype_name


@dataclass(frozen=True)
class FitSettings:
    """What the fit pipeline reads of its estimator's constructor parameters (the model
    is built by the estimator itself, from the rest).

    Made by :meth:`from_parameters` at the start of ``fit`` or ``partial_fit``, so that the
    fit pipeline (:mod:`.pipeline`, :mod:`.training`) reads plain values rather than the
    estimator, and a parameter set on the estimator during the fit cannot change it.
    Each field has the meaning of the estimator parameter of the same name (see the
    estimators' docstrings), except:

    ``name``
        The estimator's class name, for messages.
    ``dtype``
        Its name, "float64" or "float32" (the parameter also takes numpy's types).
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
    backend: str
    dtype: str
    epoch_callback: object = None

    @classmethod
    def from_parameters(cls, name, params, epoch_callback=None):
        """The settings of an estimator named ``name`` (its class name) whose constructor
        parameters are ``params`` (``get_params(deep=False)``; those the fit does not read
        are left out); ``epoch_callback`` as the field."""
        own = ("name", "dtype", "epoch_callback")
        values = {f.name: params[f.name] for f in fields(cls) if f.name not in own}
        return cls(name=name, dtype=dtype_name(params["dtype"]), epoch_callback=epoch_callback, **values)
