"""Full-batch Gaussian fits: a quasi-Newton search on the collapsed bound, as GPR does.

When the likelihood is Gaussian, the whole training set is one batch and the basis's
natural step of size one lands on the optimal q(u) (the coupled basis), the bound with
q(u) optimal for every hyperparameter is Titsias' collapsed bound. Its value is the ELBO
at that q; its gradient in every other parameter is the ELBO's partial gradient there,
since the ELBO is stationary in q at its optimum (the envelope theorem). So each
evaluation is: one natural step of size one, then the ELBO and its gradient at the
result, both from the tested minibatch machinery. The search runs on the
log-hyperparameters, the log noise and (when learned) the inducing inputs, with
L-BFGS-B within their bounds, or with a user's optimiser of GPR's signature.
"""

from dataclasses import dataclass, field

import time
import warnings

import numpy as np
import scipy.optimize
from sklearn.exceptions import ConvergenceWarning

from .. import backend
from ..linalg import CholeskyError
from .loop import NonFiniteELBOError


@dataclass
class Packing:
    """Where each named parameter of a model sits in the optimiser's flat vector.

    A parameter with a scale (inducing inputs: each feature's spread) is held divided
    by it, so that the search does the same on X and on ``1e6 * X``. The vector is numpy
    (scipy's optimisers are host code); a parameter held by another array library (the
    inducing inputs of a fit on a GPU) or in float32 is unpacked into its library,
    device and dtype.
    """

    names: list
    shapes: list
    scales: dict
    templates: dict = field(default_factory=dict)
    sizes: list = field(init=False)

    def __post_init__(self):
        self.sizes = [int(np.prod(shape)) for shape in self.shapes]

    @classmethod
    def of(cls, params, scales):
        names = list(params)
        templates = {name: value for name, value in params.items() if _held_apart(value)}
        shapes = [tuple(params[n].shape) if hasattr(params[n], "shape") else np.shape(params[n]) for n in names]
        return cls(names, shapes, scales, templates)

    def _scale(self, name, shape):
        return np.broadcast_to(self.scales.get(name, 1.0), shape)

    def pack(self, params, gradient=False):
        """The flat vector of ``params`` (``gradient``: of a gradient, scaled the other way)."""
        if not self.names:
            return np.zeros(0)
        parts = []
        for name, shape in zip(self.names, self.shapes):
            scale = self._scale(name, shape)
            value = backend.to_numpy(params[name])
            parts.append(np.ravel(value * scale if gradient else value / scale))
        return np.concatenate(parts)

    def unpack(self, vector):
        out, start = {}, 0
        for name, shape, size in zip(self.names, self.shapes, self.sizes):
            value = np.reshape(vector[start : start + size], shape) * self._scale(name, shape)
            template = self.templates.get(name)
            if template is not None:
                xp = backend.namespace(template)
                value = backend.to_namespace(value, xp, device=backend.device_of(template), dtype=template.dtype)
            out[name] = value
            start += size
        return out


def _held_apart(value):
    """Whether a parameter lives elsewhere than the float64 numpy vector: in another
    array library, or in float32."""
    return backend.is_foreign(value) or (isinstance(value, np.ndarray) and value.dtype != np.float64)


def _bounds_vector(packing, bounds):
    """Per-entry (low, high) pairs for scipy; None where a parameter is unbounded."""
    pairs = []
    for name, shape, size in zip(packing.names, packing.shapes, packing.sizes):
        if name not in bounds:
            pairs.extend([(None, None)] * size)
            continue
        low, high = (np.broadcast_to(np.asarray(b, dtype=np.float64), shape).ravel() for b in bounds[name])
        pairs.extend(zip(low, high))
    return pairs


class CollapsedObjective:
    """The negative collapsed bound of ``model`` on (X, Y) and its gradient, as GPR's ``obj_func``.

    Calling it with a parameter vector sets the model to those parameters and to the
    optimal q(u) for them (the model is left there), and returns ``-bound`` (and, with
    ``eval_gradient``, its gradient). ``scales`` divide parameters in data units (see
    :class:`Packing`). A bound that is not finite at the starting point raises
    :class:`~skgp_sparse.optim.loop.NonFiniteELBOError`; later it is infinite for the
    line search to back off from.
    """

    def __init__(self, model, X, Y, scales=None):
        self.model, self.X, self.Y = model, X, Y
        params = model.adam_params()
        self.packing = Packing.of(params, {} if scales is None else scales)
        self.bounds = _bounds_vector(self.packing, model.adam_bounds())
        self.n_evaluations = 0

    def initial(self):
        return self.packing.pack(self.model.adam_params())

    def set(self, vector):
        """Move the model to ``vector`` and to q(u)'s optimum there; the ELBO and gradients."""
        model = self.model
        model.set_adam_params(self.packing.unpack(np.asarray(vector, dtype=np.float64)))
        land_on_optimal_q(model, self.X, self.Y)
        self.n_evaluations += 1
        return model.evaluate(self.X, self.Y)

    def __call__(self, vector, eval_gradient=True):
        try:
            result = self.set(vector)
        except CholeskyError:
            # A trial point so extreme (a vanishing noise, say) that q's optimum cannot be
            # factorised; the starting point itself must work.
            if self.n_evaluations == 0:
                raise
            result = None
        value = np.inf if result is None else -result.elbo
        grad = np.zeros(len(self.bounds)) if result is None else -self.packing.pack(result.grads, gradient=True)
        if not (np.isfinite(value) and np.all(np.isfinite(grad))):
            if self.n_evaluations <= 1:
                raise NonFiniteELBOError(
                    "the ELBO or its gradient is not finite at the starting point of the fit. Try "
                    "standardising X and y (normalize_y=True) or tighter kernel hyperparameter bounds."
                )
            # L-BFGS-B's line search backs off from an infinite value.
            value, grad = np.inf, np.zeros_like(grad)
        return (value, grad) if eval_gradient else value


#: L-BFGS-B's own test (a relative change of 2e-9 in one iteration) lets a search over
#: hundreds of inducing inputs crawl for thousands of iterations, each adding micro-nats
#: (measured: 1,000 diamonds rows, M = 256, 2,457 iterations, the last 2,000 adding 0.0002
#: nats per row). The search also ends when the last ``PLATEAU_ITERATIONS`` iterations
#: together raised the bound by less than ``PLATEAU_RISE_PER_ROW`` nats per row.
PLATEAU_ITERATIONS = 50
PLATEAU_RISE_PER_ROW = 1e-4


class _Plateau:
    """L-BFGS-B callback: prints progress (``verbose``) and stops the search on a plateau."""

    def __init__(self, n_rows, verbose):
        self.threshold = PLATEAU_RISE_PER_ROW * n_rows
        self.verbose = verbose
        self.values = []
        self.start = time.perf_counter()
        self.reached = False

    def __call__(self, intermediate_result):
        self.values.append(-intermediate_result.fun)
        if self.verbose:
            print(f"iteration {len(self.values):4d}  bound {self.values[-1]: .6e}  "
                  f"elapsed {time.perf_counter() - self.start:8.2f} s")
        if len(self.values) > PLATEAU_ITERATIONS:
            if self.values[-1] - self.values[-1 - PLATEAU_ITERATIONS] < self.threshold:
                self.reached = True
                raise StopIteration


def lbfgs(obj_func, initial, bounds, n_rows, verbose=0):
    """GPR's default optimiser, L-BFGS-B on ``obj_func`` (value and gradient) within ``bounds``,
    also stopped on a plateau of the bound (see :data:`PLATEAU_RISE_PER_ROW`)."""
    plateau = _Plateau(n_rows, verbose)
    result = scipy.optimize.minimize(obj_func, initial, method="L-BFGS-B", jac=True, bounds=bounds,
                                     callback=plateau)
    converged = bool(result.success) or plateau.reached
    if not converged:
        warnings.warn(
            f"L-BFGS-B stopped before converging on the collapsed bound after {result.nit} iterations: "
            f"{result.message}. The fitted hyperparameters may not be optimal; rescale X and y, or pass "
            "a kernel whose starting hyperparameters are closer to the data's scales.",
            ConvergenceWarning,
            stacklevel=5,
        )
    return result.x, result.fun, int(result.nit), converged


@dataclass
class SearchResult:
    """Outcome of :func:`optimise_collapsed`: the best run's bound and how it ended."""

    elbo: float
    n_iter: int
    converged: bool
    n_evaluations: int
    run_elbos: list


def _random_start(bounds, rng, initial):
    """A restart as GPR draws it: uniform within the (log-space) bounds; unbounded entries keep their value."""
    start = initial.copy()
    for i, (low, high) in enumerate(bounds):
        if low is not None and high is not None and np.isfinite(low) and np.isfinite(high):
            start[i] = rng.uniform(low, high)
    return start


def optimise_collapsed(model, X, Y, optimizer, n_restarts, rng, scales=None, verbose=0):
    """Maximise the collapsed bound of ``model`` on the full batch (X, Y), in place.

    Parameters
    ----------
    model : VariationalModel
        Gaussian likelihood, a basis with exact natural steps.
    X, Y : ndarray
        All training rows.
    optimizer : "fmin_l_bfgs_b" or callable
        A callable is called as ``optimizer(obj_func, initial_theta, bounds)`` and returns
        ``(theta_opt, func_min)``, as in GaussianProcessRegressor; ``obj_func(theta,
        eval_gradient=True)`` returns the negative bound and its gradient, where theta
        packs the log-hyperparameters, the log noise and the learned inducing inputs.
    n_restarts : int
        Further runs from starts drawn uniformly within the bounds (log space).
    rng : numpy Generator
    scales : dict, optional
        Units of parameters in data units (see :class:`Packing`).
    verbose : int
        Print the bound after every L-BFGS-B iteration.

    Returns
    -------
    SearchResult
        The model is left at the best run's parameters and at the optimal q(u) for them.
    """
    objective = CollapsedObjective(model, X, Y, scales)
    initial = objective.initial()
    if initial.size == 0:
        # Nothing to search (fixed hyperparameters and inducing inputs): q(u)'s optimum only.
        elbo = objective.set(initial).elbo
        return SearchResult(elbo, 0, True, objective.n_evaluations, [elbo])
    starts = [initial] + [_random_start(objective.bounds, rng, initial) for _ in range(n_restarts)]
    runs = []
    for start in starts:
        if optimizer == "fmin_l_bfgs_b":
            x, fun, n_iter, success = lbfgs(objective, start, objective.bounds, model.rows_counted, verbose)
        else:
            x, fun = optimizer(objective, start, objective.bounds)
            n_iter, success = 0, True
        runs.append((fun, x, n_iter, success))
    best = min(range(len(runs)), key=lambda i: runs[i][0])
    fun, x, n_iter, success = runs[best]
    result = objective.set(x)
    return SearchResult(result.elbo, n_iter, success, objective.n_evaluations, [-r[0] for r in runs])


def land_on_optimal_q(model, X, Y):
    """One natural step of size one on all rows (X, Y): q's optimum where the step is exact."""
    model.state = model.natural_step(model.evaluate(X, Y, need_grad="natural"), 1.0)


def optimal_q(model, X, Y, exact, max_steps=500, rtol=1e-12):
    """Move ``model``'s q to its optimum on the full batch (X, Y), hyperparameters fixed.

    ``exact``: one natural step of size one lands there. Otherwise natural steps of size
    one are tried and halved while they fail or lower the bound (damped fixed-point
    iteration), until the bound rises by less than ``rtol`` of its size.

    Returns
    -------
    float
        The bound at the final q.
    """
    if exact:
        land_on_optimal_q(model, X, Y)
        return model.evaluate(X, Y, need_grad=False).elbo
    size = 1.0
    result = model.evaluate(X, Y, need_grad="natural")
    for _ in range(max_steps):
        previous = model.state
        try:
            model.state = model.natural_step(result, size)
        except CholeskyError:
            size *= 0.5
            continue
        trial = model.evaluate(X, Y, need_grad="natural")
        if not trial.elbo >= result.elbo:
            model.state = previous
            size *= 0.5
            if size < 1e-8:
                break
            continue
        rise, result = trial.elbo - result.elbo, trial
        size = min(1.0, 2.0 * size)
        if rise <= rtol * abs(result.elbo):
            break
    return result.elbo
