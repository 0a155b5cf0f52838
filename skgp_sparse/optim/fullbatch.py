"""Exact searches: a quasi-Newton search on the bound with q(u) optimal, as GPR does.

When the likelihood is Gaussian, the whole training set is one batch and the basis's
natural step of size one lands on the optimal q(u) (the coupled basis), the bound with
q(u) optimal for every hyperparameter is Titsias' collapsed bound. Its value is the ELBO
at that q; its gradient in every other parameter is the ELBO's partial gradient there,
since the ELBO is stationary in q at its optimum (the envelope theorem). So each
evaluation is: one natural step of size one, then the ELBO and its gradient at the
result, both from the tested minibatch machinery. Under any other likelihood q(u) is
moved to its optimum by damped natural steps (:func:`optimal_q`), warm-started from the
previous evaluation's q, and the envelope theorem gives the gradient in the same way.
The search runs on the log-hyperparameters, the log noise, the likelihood's parameters
and (when learned) the inducing inputs, with L-BFGS-B within their bounds, or with a
user's optimiser of GPR's signature.
"""

from dataclasses import dataclass, field

import time

import numpy as np
import scipy.optimize

from .. import backend
from ..linalg import CholeskyError
from .loop import NonFiniteELBOError


@dataclass
class Packing:
    """Where each named parameter of a model sits in the optimiser's flat vector.

    A parameter with a scale (inducing inputs: each feature's spread) is held divided
    by it, so that the search does the same on X and on ``1e6 * X``. The vector is numpy
    (scipy's optimisers are host code); every array parameter is unpacked into its
    library, device and dtype (the inducing inputs of a fit on a GPU go back there, a
    float32 parameter stays float32, a float64 numpy one takes the vector's values as
    they are).
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
        templates = {name: value for name, value in params.items() if hasattr(value, "dtype")}
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
    """The negative bound of ``model`` on (X, Y) with q(u) optimal, and its gradient, as
    GPR's ``obj_func``.

    Calling it with a parameter vector sets the model to those parameters and to the
    optimal q(u) for them (the model is left there), and returns ``-bound`` (and, with
    ``eval_gradient``, its gradient). ``scales`` divide parameters in data units (see
    :class:`Packing`). ``solver`` (a :class:`~skgp_sparse.optim.qsolver.QSolver`): how q
    reaches its optimum, in one move or by damped natural steps (:func:`optimal_q`). A
    bound that is not finite at the starting point raises
    :class:`~skgp_sparse.optim.loop.NonFiniteELBOError`; later it is infinite for the
    line search to back off from.
    """

    def __init__(self, model, X, Y, solver, scales=None, q_steps=None):
        self.model, self.X, self.Y = model, X, Y
        self.solver = solver
        self.q_steps = INEXACT_Q_STEPS if q_steps is None else int(q_steps)
        params = model.adam_params()
        self.packing = Packing.of(params, {} if scales is None else scales)
        self.bounds = _bounds_vector(self.packing, model.adam_bounds())
        self.n_evaluations = 0

    def initial(self):
        return self.packing.pack(self.model.adam_params())

    def move(self, vector):
        """Set the model's parameters to ``vector`` (one more evaluation)."""
        self.model.set_adam_params(self.packing.unpack(np.asarray(vector, dtype=np.float64)))
        self.n_evaluations += 1

    def set(self, vector):
        """Move the model to ``vector`` and to q(u)'s optimum there; the ELBO and gradients."""
        model = self.model
        self.move(vector)
        if self.solver.in_one_move:
            land_on_optimal_q(model, self.X, self.Y)
        else:
            optimal_q(model, self.X, self.Y, exact=False, max_steps=self.q_steps, rtol=INEXACT_Q_RTOL)
        return model.evaluate(self.X, self.Y)

    def _bound(self, vector):
        """The bound and its gradient at ``vector``, q(u) at its optimum: in one pass
        where the model has its collapsed form (the model's q(u) is then left as it was;
        :meth:`set` moves it), else through :meth:`set`."""
        if not self.solver.one_pass_bound:
            return self.set(vector)
        self.move(vector)
        return self.model.collapsed_evaluate(self.X, self.Y)

    def __call__(self, vector, eval_gradient=True):
        try:
            result = self._bound(vector)
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
#: hundreds of inducing inputs crawl for thousands of iterations, each adding micro-nats.
#: The search also ends when the last ``PLATEAU_ITERATIONS`` iterations together raised
#: the bound by less than ``tol`` nats per row (the estimators' ``tol``, which a minibatch
#: fit reads per epoch: an iteration passes over every row at least once, so this is the
#: stricter of the two; docs/constants.md).
PLATEAU_ITERATIONS = 20
PLATEAU_RISE_PER_ROW = 1e-3

#: Damped natural steps of an inexact objective stop when the bound rises by less than
#: this fraction of its size, or after ``INEXACT_Q_STEPS`` steps: each evaluation starts
#: from the previous one's q, so a few steps follow the search's moves (docs/constants.md).
INEXACT_Q_RTOL = 1e-9
INEXACT_Q_STEPS = 3
#: Steps at most that bring q to its optimum at the search's starting point.
INEXACT_Q_START_STEPS = 50


class _Plateau:
    """L-BFGS-B callback: prints progress (``verbose``) and stops the search on a plateau.

    It reads the objective as L-BFGS-B sees it: the bound times ``scale`` (1, or one over
    the rows for a search per row)."""

    def __init__(self, n_rows, verbose, scale=1.0, rise_per_row=PLATEAU_RISE_PER_ROW):
        self.threshold = rise_per_row * n_rows * scale
        self.unscale = 1.0 / scale
        self.verbose = verbose
        self.values = []
        self.start = time.perf_counter()
        self.reached = False

    def __call__(self, intermediate_result):
        self.values.append(-intermediate_result.fun)
        if self.verbose:
            print(f"iteration {len(self.values):4d}  bound {self.values[-1] * self.unscale: .6e}  "
                  f"elapsed {time.perf_counter() - self.start:8.2f} s")
        if len(self.values) > PLATEAU_ITERATIONS:
            if self.values[-1] - self.values[-1 - PLATEAU_ITERATIONS] < self.threshold:
                self.reached = True
                raise StopIteration


#: L-BFGS-B runs inside a box of this half-width around its start (log-hyperparameters;
#: inducing inputs in units of each feature's spread), moved and run again while its end
#: lies on the box's edge: a trust region for its first steps. Without one, the first step
#: goes one gradient away, clipped onto the corner of the bounds (every length scale at
#: its longest, the amplitude at its smallest), and the line search stays there whenever
#: that flat model (all noise) beats the start (docs/constants.md).
TRUST_RADIUS = 3.0
TRUST_STAGES = 20


def _box(x, bounds, radius):
    """The bounds within ``radius`` of ``x``, and where they are the true bounds."""
    box = []
    for xi, (low, high) in zip(x, bounds):
        lo = xi - radius if low is None else max(low, xi - radius)
        hi = xi + radius if high is None else min(high, xi + radius)
        box.append((lo, hi))
    return box


def _on_box_edge(x, box, bounds):
    """Whether ``x`` rests on an edge of ``box`` that is not a true bound."""
    for xi, (lo, hi), (low, high) in zip(x, box, bounds):
        if xi <= lo + 1e-9 * max(1.0, abs(lo)) and (low is None or lo > low):
            return True
        if xi >= hi - 1e-9 * max(1.0, abs(hi)) and (high is None or hi < high):
            return True
    return False


def _clipped_into(x, bounds):
    """``x`` moved into ``bounds`` (None: unbounded), as L-BFGS-B moves a start that lies
    outside them. A kernel may start outside its own bounds (``RBF(length_scale_bounds=(1e-5,
    1e-3))`` starts at 1); a trust region drawn around such a start would have its upper
    edge below its lower one."""
    low = np.array([-np.inf if lo is None else lo for lo, _ in bounds], dtype=np.float64)
    high = np.array([np.inf if hi is None else hi for _, hi in bounds], dtype=np.float64)
    return np.clip(x, low, high)


def _projected_gradient(x, gradient, bounds):
    """The gradient of a minimisation with the entries that push ``x`` out through a bound
    it rests on set to zero (the rise along them is not to be had)."""
    g = np.array(gradient, dtype=np.float64, copy=True)
    for i, (xi, (low, high)) in enumerate(zip(x, bounds)):
        if (low is not None and xi <= low and g[i] > 0) or (high is not None and xi >= high and g[i] < 0):
            g[i] = 0.0
    return g


def _is_flat(result, bounds, per_row, tol):
    """Whether no coordinate of the bound rises by ``tol`` nats per row or more per unit of
    its search coordinate at the run's end (``per_row`` turns the optimiser's objective
    into the bound per row). L-BFGS-B's line search fails near an optimum where the
    bound's rounding error outweighs the rise a step would bring (a tiny noise variance
    makes it large); such an end is converged, as the stopping rule of a minibatch fit
    reads a slope below ``tol`` as settled."""
    if result.jac is None:
        return False
    slope = np.abs(_projected_gradient(result.x, result.jac, bounds)) * per_row
    return bool(slope.size == 0 or slope.max() < tol)


def _lbfgs_run(obj_func, x, bounds, n_rows, verbose, max_iter, trust_region, tol, memory, radius=TRUST_RADIUS):
    """One search of :func:`lbfgs` from ``x``: ``(x, fun, n_iter, converged, message)``."""
    scale = 1.0 / float(n_rows) if trust_region else 1.0

    def scaled(x):
        value, gradient = obj_func(x)
        return value * scale, gradient * scale

    start, n_iter, result = x, 0, None
    for _ in range(TRUST_STAGES if trust_region else 1):
        # Each stage has its own plateau test: a stage that ends on its box's edge along a
        # flat direction (the length scale of an unused feature) goes on in the next.
        plateau = _Plateau(n_rows, verbose, scale, tol)
        box = _box(x, bounds, radius) if trust_region else bounds
        # scipy's test on the projected gradient (1e-5) is for the summed bound: per row
        # it is 1e-5 / n_rows, or the search would stop short along flat directions.
        options = {"maxiter": int(max_iter - n_iter), "gtol": 1e-5 * scale, "maxcor": int(memory)}
        result = scipy.optimize.minimize(scaled, x, method="L-BFGS-B", jac=True, bounds=box,
                                         callback=plateau, options=options)
        n_iter += int(result.nit)
        x = result.x
        if n_iter >= max_iter or not trust_region or not _on_box_edge(x, box, bounds):
            break
    flat = _is_flat(result, bounds, 1.0 / (scale * n_rows), tol)
    # L-BFGS-B also reports success when its line search found no lower value at all
    # (its relative-reduction test): a run that never left its start with the bound still
    # sloping has not converged, it has stalled.
    moved = bool(np.any(x != start))
    converged = (plateau.reached or flat or (bool(result.success) and moved)) and n_iter < max_iter
    if converged:
        message = ""
    elif n_iter >= max_iter:
        message = f"max_iter={max_iter} iterations"
    elif not moved:
        message = ("L-BFGS-B found no higher bound than at its start, where the bound still rises; its "
                   "rounding error may exceed the rise of the first steps (a very small fixed noise "
                   "variance makes it large)")
    else:
        message = f"L-BFGS-B: {result.message}"
    return x, result.fun / scale, n_iter, converged, message


def lbfgs(obj_func, initial, bounds, n_rows, verbose=0, max_iter=15000, trust_region=False,
          tol=PLATEAU_RISE_PER_ROW, memory=10, radius=TRUST_RADIUS):
    """GPR's default optimiser, L-BFGS-B on ``obj_func`` (value and gradient) within ``bounds``,
    for at most ``max_iter`` iterations in all, also stopped on a plateau of the bound: less
    than ``tol`` nats per row over :data:`PLATEAU_ITERATIONS` iterations.

    ``trust_region``: the search starts far from the optimum (the exact search that starts
    a minibatch fit, from the kernel's initial hyperparameters): it runs on the objective
    per row, in stages of a trust region (see :data:`TRUST_RADIUS`). Otherwise it is one
    run on the objective as it is, as GPR's; if that run never leaves its start while the
    bound still rises there, it is run again in the trust region. (Its first trial step is
    the whole gradient: where the bound is steep far out, the line search then shrinks
    its steps below what the bound's rounding error lets it resolve; docs/constants.md.)

    A start outside ``bounds`` is moved into them first, as L-BFGS-B itself does.
    ``memory``: the number of past steps L-BFGS-B keeps (scipy's ``maxcor``; 10, its
    default and GPR's, or the model's ``search_memory``). ``radius``: the trust region's
    half-width (:data:`TRUST_RADIUS`).

    Returns ``(x, fun, n_iter, converged, message)`` with ``fun`` on the scale of
    ``obj_func``; ``message`` says why a search that did not converge ended."""
    x = _clipped_into(np.asarray(initial, dtype=np.float64), bounds)
    run = _lbfgs_run(obj_func, x, bounds, n_rows, verbose, max_iter, trust_region, tol, memory, radius)
    stalled = not run[3] and run[2] < max_iter and not np.any(run[0] != x)
    if stalled and not trust_region:
        again = _lbfgs_run(obj_func, x, bounds, n_rows, verbose, max_iter - run[2], True, tol, memory, radius)
        run = (again[0], again[1], run[2] + again[2]) + again[3:]
    return run


@dataclass
class SearchResult:
    """Outcome of :func:`optimise_collapsed`: the best run's bound and how it ended."""

    elbo: float
    n_iter: int
    converged: bool
    n_evaluations: int
    run_elbos: list
    message: str = ""


def random_start(bounds, rng, initial):
    """A restart as GPR draws it: uniform within the (log-space) bounds; unbounded entries keep their value."""
    start = initial.copy()
    for i, (low, high) in enumerate(bounds):
        if low is not None and high is not None and np.isfinite(low) and np.isfinite(high):
            start[i] = rng.uniform(low, high)
    return start


def optimise_collapsed(model, X, Y, optimizer, n_restarts, rng, solver, scales=None, verbose=0, max_iter=15000,
                       trust_region=False, tol=PLATEAU_RISE_PER_ROW, q_steps=None):
    """Maximise the bound of ``model`` on (X, Y) with q(u) optimal, in place.

    Parameters
    ----------
    model : VariationalModel
        Natural steps on q(u). With a Gaussian likelihood and a basis with exact natural
        steps the bound is the collapsed bound; otherwise q(u) is brought to its optimum by
        damped natural steps at every evaluation.
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
    solver : QSolver
        How ``model``'s q(u) reaches its optimum (its fit's plan says).
    scales : dict, optional
        Units of parameters in data units (see :class:`Packing`).
    verbose : int
        Print the bound after every L-BFGS-B iteration.
    max_iter : int
        Iterations of each L-BFGS-B run at most.
    trust_region : bool
        Run L-BFGS-B per row in stages of a trust region (see :func:`lbfgs`).
    tol : float
        The search has converged when :data:`PLATEAU_ITERATIONS` iterations raise the
        bound by less than this many nats per row (or by L-BFGS-B's own tests).
    q_steps : int, optional
        Damped natural steps at most per evaluation where q(u) has no closed-form
        optimum; :data:`INEXACT_Q_STEPS` by default.

    Returns
    -------
    SearchResult
        The model is left at the best run's parameters and at the optimal q(u) for them.
    """
    if not solver.in_one_move:
        # Each evaluation takes a few natural steps from the previous one's q: the first
        # starts from q's optimum at the starting point, or its gradient (that of a q far
        # from optimal, orders of magnitude too large) would throw the first line search
        # onto the bounds (docs/constants.md).
        optimal_q(model, X, Y, exact=False, max_steps=INEXACT_Q_START_STEPS, rtol=INEXACT_Q_RTOL)
    objective = CollapsedObjective(model, X, Y, solver, scales, q_steps=q_steps)
    initial = objective.initial()
    if initial.size == 0:
        # Nothing to search (fixed hyperparameters and inducing inputs): q(u)'s optimum only.
        elbo = objective.set(initial).elbo
        return SearchResult(elbo, 0, True, objective.n_evaluations, [elbo])
    starts = [initial] + [random_start(objective.bounds, rng, initial) for _ in range(n_restarts)]
    runs = []
    for start in starts:
        if optimizer == "fmin_l_bfgs_b":
            run = lbfgs(objective, start, objective.bounds, model.rows_counted, verbose, max_iter, trust_region, tol,
                        model.search_memory)
        else:
            x, fun = optimizer(objective, start, objective.bounds)
            run = (x, fun, 0, True, "")
        runs.append(run)
    x, fun, n_iter, success, message = min(runs, key=lambda run: run[1])
    result = objective.set(x)
    return SearchResult(result.elbo, n_iter, success, objective.n_evaluations, [-r[1] for r in runs], message)


def land_on_optimal_q(model, X, Y):
    """q's optimum on all rows (X, Y) where the model reaches it in one move
    (``model.land_on_optimal_q``: a natural step of size one where it is exact)."""
    model.land_on_optimal_q(X, Y)


#: Largest natural step of :func:`optimal_q` after its first (a full step first). Near
#: the optimum the natural step of size one of a non-conjugate likelihood can overshoot
#: and oscillate about it, converging slowly; a shorter step converges faster
#: (docs/constants.md).
DAMPED_STEP = 0.7


def optimal_q(model, X, Y, exact, max_steps=500, rtol=1e-15):
    """Move ``model``'s q to its optimum on the full batch (X, Y), hyperparameters fixed.

    ``exact``: one natural step of size one lands there. Otherwise a natural step of
    size one, then steps of at most :data:`DAMPED_STEP` halved while they fail or lower
    the bound (damped fixed-point iteration), until the bound rises by less than
    ``rtol`` of its size.

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
        size = min(DAMPED_STEP, 2.0 * size)
        if rise <= rtol * abs(result.elbo):
            break
    return result.elbo
