"""Plumbing shared by the estimators: parameter rules, option checks, model assembly.

No mathematics here: this module turns estimator parameters into a
:class:`skgp_sparse.elbo.VariationalModel` and runs :func:`skgp_sparse.optim.train`.
"""

import warnings
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Kernel
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import validate_data

from ..bases import BASES, ORTHOGONAL_BASES
from ..inducing import METHODS as INDUCING_METHODS
from ..inducing import initial_inducing
from ..kernels import compile_kernel
from ..likelihoods import NoiseParameter
from ..optim import Adam, NaturalStepSchedule, train
from ..optim.fullbatch import optimal_q, optimise_collapsed
from ..optim.loop import History, array_batches, settle_variational
from ..optim.stopping import StoppingRule
from ._fit_report import warn_at_bounds, warn_jitter_above_noise

#: Rows per chunk at prediction time: bounds memory at O(chunk * M) whatever the input size.
PREDICT_CHUNK = 4096

COMMON_CONSTRAINTS = {
    "kernel": [None, Kernel],
    "basis": [StrOptions(set(BASES))],
    "n_inducing": [Interval(Integral, 1, None, closed="left")],
    "n_orthogonal": [Interval(Integral, 0, None, closed="left")],
    "batch_size": [None, Interval(Integral, 1, None, closed="left")],
    "max_iter": [Interval(Integral, 1, None, closed="left")],
    "tol": [Interval(Real, 0, None, closed="left")],
    "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
    "natural_step_size": [Interval(Real, 0, 1, closed="right")],
    "learning_rate": [Interval(Real, 0, None, closed="neither")],
    "variational_optimizer": [StrOptions({"natural", "adam"})],
    "learn_inducing": ["boolean"],
    "inducing_init": [StrOptions(set(INDUCING_METHODS)), "array-like"],
    "backend": [StrOptions({"numpy", "cupy"})],
    "random_state": ["random_state"],
    "verbose": ["verbose"],
    "warm_start": ["boolean"],
    "jitter": [StrOptions({"auto"}), Interval(Real, 0, None, closed="left")],
}

#: jitter="auto": the relative jitter on K(Z, Z) is at most this, and the absolute jitter
#: at most this fraction of the noise variance. The bound loses about jitter / (2 noise)
#: nats per well-determined inducing direction, so tying it to the noise keeps that loss
#: below a micro-nat whatever the noise; a factorisation that needs more gets more.
AUTO_JITTER = 1e-6

#: Minibatch fits average the ELBO estimates over periods of this many steps (one epoch
#: when that is shorter) and compare windows of ``n_iter_no_change`` periods.
PERIOD_STEPS = 50
#: ``tol`` bounds the rise of the ELBO per row over one epoch, or over this many steps
#: when an epoch is longer: on large data sets the hyperparameters settle within a
#: fraction of an epoch (measured on a 1,000,000-row set: the test RMSE was flat from
#: about 700 steps on while the ELBO still rose by 0.003 nats per row per epoch).
RATE_SPAN_STEPS = 100

#: Steps that move q(u) alone at the start of a fresh minibatch fit, before any Adam step
#: (conjugate likelihoods: a natural step of size one fits q to a batch at once; the
#: others ramp their natural steps up over the schedule's warm-up, so they wait for it).
CONJUGATE_WARMUP_STEPS = 5

#: After a non-conjugate minibatch fit, at most this many natural steps on q alone bring
#: it to the final hyperparameters.
SETTLE_STEPS = 20

#: Rows of the fixed sample whose ELBO the stopping rule reads at the end of each period
#: (in-memory data; a Dask fit reads the mean of the period's minibatch estimates). At 50
#: steps of 1,024 rows a period, its forward pass adds about 5% to a fit.
MONITOR_ROWS = 8192

#: Rows per chunk of the passes over all the data after training (final q, final bound).
PASS_CHUNK = 8192

#: Falling-ELBO back-off of non-conjugate fits: an epoch whose mean ELBO per row is this
#: many nats below the previous epoch's halves the natural steps for the rest of the fit.
#: Epoch means cover every row once, so they move by far less than this from noise alone.
ELBO_DROP_TOL = 1e-2


def check_basis_options(basis, n_orthogonal, backend):
    """Refuse combinations that cannot work, with a message that says why."""
    if n_orthogonal != 0 and basis not in ORTHOGONAL_BASES:
        raise ValueError(
            f"n_orthogonal={n_orthogonal} is only used by the bases {list(ORTHOGONAL_BASES)}; "
            f"basis={basis!r} has no orthogonal set, so leave n_orthogonal=0"
        )
    if backend == "cupy":
        raise NotImplementedError(
            "backend='cupy' is not available yet in this version of skgp_sparse; use backend='numpy'"
        )


class FitInterruptedWarning(UserWarning):
    """A KeyboardInterrupt (Ctrl-C) ended a fit early; the model is that of the last completed step."""


def feature_scale(X):
    """Spread (standard deviation) of each column of X; 1 for a constant column.

    It sets the default kernel's length scales and the size of Adam's steps on the
    inducing inputs, so that a fit does the same on X and on ``1e6 * X``.
    """
    n = X.shape[0]
    if n < 2:
        return np.ones(X.shape[1])
    # Two passes, the second over row chunks: np.std would make two temporaries of X's size.
    mean = X.mean(axis=0)
    sq = np.zeros(X.shape[1])
    for rows in chunked(n, 65536):
        sq += ((X[rows] - mean) ** 2).sum(axis=0)
    scale = np.sqrt(sq / n)
    return np.where(np.isfinite(scale) & (scale > 0), scale, 1.0)


def default_kernel(n_features, x_scale=None):
    """A learnable amplitude times an RBF with one length scale per feature.

    The length scales start at each feature's spread (``x_scale``; 1 when None) and may
    move over ten decades either side of it.
    """
    scale = np.ones(n_features) if x_scale is None else np.asarray(x_scale, dtype=np.float64)
    bounds = np.column_stack([1e-5 * scale, 1e5 * scale])
    return ConstantKernel(1.0) * RBF(length_scale=scale.copy(), length_scale_bounds=bounds)


def resolve_kernel(kernel, n_features, x_scale=None):
    """Compile the user's kernel (or the default) with WhiteKernel terms as noise."""
    sk_kernel = default_kernel(n_features, x_scale) if kernel is None else kernel
    compiled = compile_kernel(sk_kernel, white_as_noise=True)
    # Evaluate once on a dummy row so that a wrong-length length scale fails here, with
    # the kernel's own message, rather than deep inside the first step.
    compiled.diag(np.zeros((1, n_features)))
    compiled(np.zeros((1, n_features)), np.zeros((1, n_features)))
    return compiled


def latent_white_noise(kernel):
    """Top-level WhiteKernel terms of a non-Gaussian model as latent white noise (None if none)."""
    noise = NoiseParameter(kernel, 1.0, None)
    return noise if noise.from_kernel else None


def clipped_n_inducing(n_inducing, n_samples):
    if n_inducing > n_samples:
        warnings.warn(
            f"n_inducing={n_inducing} is larger than the number of samples ({n_samples}); "
            f"using {n_samples} inducing points",
            UserWarning,
            stacklevel=3,
        )
        return n_samples
    return n_inducing


def initial_inducing_points(estimator, X, kernel, rng):
    """The n_inducing + n_orthogonal initial inducing inputs (the basis splits them)."""
    init = estimator.inducing_init
    if not isinstance(init, str):
        Z = np.asarray(init, dtype=np.float64)
        if Z.ndim != 2 or Z.shape[1] != X.shape[1] or Z.shape[0] <= estimator.n_orthogonal:
            raise ValueError(
                f"inducing_init as an array must have shape (n_inducing + n_orthogonal, {X.shape[1]}) "
                f"with n_inducing >= 1; got {Z.shape} with n_orthogonal={estimator.n_orthogonal}"
            )
        if not np.all(np.isfinite(Z)):
            raise ValueError("inducing_init contains NaN or inf")
        return Z
    n_points = clipped_n_inducing(estimator.n_inducing + estimator.n_orthogonal, X.shape[0])
    return initial_inducing(X, n_points, init, kernel, rng)


def generator_from(random_state):
    """A numpy Generator seeded from a sklearn-style random_state (int, RandomState, None)."""
    from sklearn.utils import check_random_state

    return np.random.default_rng(check_random_state(random_state).randint(np.iinfo(np.int32).max))


class InMemoryRows:
    """Training rows held as one numpy array (the Dask counterpart is ``_dask.DaskRows``).

    Attributes
    ----------
    sample : ndarray
        Rows to initialise from (inducing inputs, feature scales): all of them here.
    n_rows : int
    """

    def __init__(self, X):
        self.X = X
        self.sample = X
        self.n_rows = X.shape[0]

    def batches(self, Y, batch_size):
        """``batches(rng)``: shuffled minibatches of ``batch_size`` rows of (X, Y)."""
        return array_batches(self.X, Y, batch_size)

    def all_rows(self, Y):
        """(X, Y), every row in order."""
        return self.X, Y

    def monitor_rows(self, Y, n_rows, rng):
        """A fixed random sample of at most ``n_rows`` rows of (X, Y), for the stopping rule."""
        if n_rows >= self.n_rows:
            return self.X, Y
        rows = np.sort(rng.choice(self.n_rows, n_rows, replace=False))
        return self.X[rows], Y[rows]


def is_dask_collection(a):
    """Whether ``a`` is a Dask collection, without importing Dask when it was not."""
    return type(a).__module__.split(".")[0] in ("dask", "dask_expr") and hasattr(a, "__dask_graph__")


def training_rows(estimator, X, y, rng, **check_params):
    """Validate (X, y) for fit: the rows as a source of minibatches, and y as numpy.

    Dask input streams from its chunks (``_dask.DaskRows``); anything else is validated
    by scikit-learn into one float64 array. Sets ``n_features_in_`` (and
    ``feature_names_in_``).
    """
    if is_dask_collection(X) or is_dask_collection(y):
        from . import _dask

        return _dask.training_rows(estimator, X, y, rng, **check_params)
    X, y = validate_data(estimator, X, y, dtype=np.float64, order="C", **check_params)
    return InMemoryRows(X), y


def check_n_data(n_data, n_seen):
    """partial_fit's N: ``n_data`` when given, else the rows seen so far."""
    if n_data is None:
        return n_seen
    if isinstance(n_data, bool) or not isinstance(n_data, Integral) or n_data < 1:
        raise ValueError(f"n_data must be a positive int (the number of training rows); got {n_data!r}")
    return int(n_data)


def batch_rows(estimator, n_rows):
    return n_rows if estimator.batch_size is None else min(estimator.batch_size, n_rows)


@dataclass
class StreamState:
    """What ``partial_fit`` carries from one call to the next besides the model.

    The Adam moments, the natural-step schedule (its step count and back-off) and the
    minibatch generator, so that successive calls continue one optimisation rather than
    restart it; ``x_scale`` is the feature spread of the first call (Adam's step on the
    inducing inputs).
    """

    adam: Adam
    schedule: NaturalStepSchedule
    rng: np.random.Generator
    x_scale: np.ndarray


def make_optimisers(estimator, model, x_scale, conjugate, full_batch, steps_done, falling_elbo_backoff=True):
    """The natural-step schedule and Adam for the estimator's settings.

    ``steps_done`` (a warm start) lets the natural-step schedule continue where it was
    rather than restart with large steps that would forget the fitted q(u). Without a
    conjugate likelihood the schedule warms up and also backs off on a falling ELBO
    (unless ``falling_elbo_backoff`` is False: partial_fit calls see different rows, so
    their ELBOs are not comparable).
    """
    schedule = NaturalStepSchedule(
        estimator.natural_step_size,
        conjugate=conjugate,
        full_batch=full_batch,
        elbo_drop_tol=None if conjugate or not falling_elbo_backoff else ELBO_DROP_TOL,
    )
    schedule.t = steps_done
    # Inducing inputs live in data units: their Adam steps scale with each feature's spread.
    scales = {name: x_scale for name in model.basis.INDUCING_FIELDS}
    adam = Adam(learning_rate=estimator.learning_rate, step_scales=scales)
    return schedule, adam


def auto_jitter(kernel, Z, noise_variance=None):
    """The relative jitter that ``jitter="auto"`` starts from (see :data:`AUTO_JITTER`)."""
    scale = float(np.mean(kernel.diag(Z)))
    if noise_variance is None or not scale > 0:
        return AUTO_JITTER
    return min(AUTO_JITTER, AUTO_JITTER * noise_variance / scale)


def starting_jitter(estimator, kernel, Z, noise_variance=None):
    """The relative jitter of a fresh model: the estimator's, or :func:`auto_jitter`."""
    if estimator.jitter == "auto":
        return auto_jitter(kernel, Z, noise_variance)
    return float(estimator.jitter)


def fits_collapsed(model, rows, batch, conjugate):
    """Whether the fit optimises the collapsed bound (full batch, exact natural steps)."""
    return (
        conjugate
        and model.natural
        and batch >= rows.n_rows
        and getattr(model.basis, "EXACT_NATURAL_STEP", False)
    )


def run_collapsed(estimator, model, rows, Y, rng, x_scale):
    """Quasi-Newton search of the collapsed bound (full batch, Gaussian): GPR's procedure.

    With ``jitter="auto"`` the jitter follows the noise: if the search ended at a noise
    far below where it started, the search is run again from there with the jitter the
    new noise allows, so that the jitter does not bias the optimum.
    """
    optimizer = "fmin_l_bfgs_b" if estimator.optimizer is None else estimator.optimizer
    X, Y = rows.all_rows(Y)
    scales = {name: x_scale for name in model.basis.INDUCING_FIELDS}
    settings = dict(scales=scales, verbose=estimator.verbose)
    search = optimise_collapsed(model, X, Y, optimizer, estimator.n_restarts_optimizer, rng, **settings)
    history = History(elbo=list(search.run_elbos), n_epochs=search.n_iter, n_steps=search.n_evaluations,
                      converged=search.converged)
    if estimator.jitter == "auto":
        allowed = auto_jitter(model.kernel, model.state.inducing, model.noise.value)
        if model.jitter > 10.0 * allowed:
            model.jitter = allowed
            search = optimise_collapsed(model, X, Y, optimizer, 0, rng, **settings)
            history.elbo += search.run_elbos
            history.n_epochs += search.n_iter
            history.n_steps += search.n_evaluations
            history.converged = search.converged
    return history, search.elbo


def stopping_rule(estimator, steps_per_epoch):
    """The estimator's :class:`StoppingRule` for epochs of ``steps_per_epoch`` steps."""
    period = min(steps_per_epoch, PERIOD_STEPS)
    span = min(steps_per_epoch, RATE_SPAN_STEPS)
    return StoppingRule(estimator.tol, estimator.n_iter_no_change, period, span)


def warmup_steps(model, schedule, steps_per_epoch):
    """Natural-only steps still to take at the start of a fit (none once past them).

    Non-conjugate fits wait for the natural step's own warm-up, but no longer than
    :data:`CONJUGATE_WARMUP_STEPS` epochs (a full-batch fit would otherwise leave the
    kernel alone for 50 epochs).
    """
    if not model.natural:
        return 0
    total = CONJUGATE_WARMUP_STEPS
    if not schedule.conjugate:
        total = min(schedule.warmup_steps, CONJUGATE_WARMUP_STEPS * steps_per_epoch)
    return max(0, total - schedule.t)


def settle_and_bound(model, rows, Y, rng, schedule, batch, conjugate):
    """After minibatch training: q(u) brought to the final hyperparameters, then the exact bound.

    Returns the ELBO of the fitted model over all training rows (one more pass over them).
    """
    exact = conjugate and model.natural and getattr(model.basis, "CONJUGATE_NATURAL_STEP", False)
    if model.natural:
        size = max(batch, PASS_CHUNK) if exact else batch
        settle_variational(model, rows.batches(Y, size), rng, schedule, exact, SETTLE_STEPS)
    return model.elbo_of_chunks(rows.batches(Y, PASS_CHUNK)(rng))


def run_training(estimator, model, rows, Y, rng, conjugate, steps_done=0, x_scale=None):
    """Fit ``model`` with the estimator's settings; returns ``(history, schedule, bound)``.

    A full-batch Gaussian fit on a basis with exact natural steps optimises the collapsed
    bound (:func:`run_collapsed`); every other fit runs minibatch natural-gradient
    training, then settles q(u) at the final hyperparameters. ``bound`` is the ELBO of
    the fitted model on all training rows. ``rows`` is an :class:`InMemoryRows` or a
    ``_dask.DaskRows``; Y is in memory.
    """
    n = rows.n_rows
    batch = batch_rows(estimator, n)
    x_scale = feature_scale(rows.sample) if x_scale is None else x_scale
    schedule, adam = make_optimisers(estimator, model, x_scale, conjugate, batch >= n, steps_done)
    name = type(estimator).__name__
    if fits_collapsed(model, rows, batch, conjugate):
        history, bound = run_collapsed(estimator, model, rows, Y, rng, x_scale)
        step_tolerance = 0.0
    else:
        steps_per_epoch = -(-n // batch)
        history = train(
            model,
            None,
            None,
            batch_size=batch,
            max_iter=estimator.max_iter,
            stopping=stopping_rule(estimator, steps_per_epoch),
            schedule=schedule,
            adam=adam,
            rng=rng,
            verbose=estimator.verbose,
            # Set by benchmarks only (not a parameter: it would not survive clone).
            callback=getattr(estimator, "_epoch_callback", None),
            batches=rows.batches(Y, batch),
            warmup_steps=warmup_steps(model, schedule, steps_per_epoch),
            monitor_rows=rows.monitor_rows(Y, MONITOR_ROWS, rng),
        )
        if history.interrupted:
            warn_interrupted(estimator, history)
            return history, schedule, None
        bound = settle_and_bound(model, rows, Y, rng, schedule, batch, conjugate)
        step_tolerance = estimator.learning_rate
        if not history.converged:
            warnings.warn(
                f"{name} stopped at max_iter={estimator.max_iter} epochs while the ELBO was still rising by "
                f"more than tol={estimator.tol} nats per row per epoch; increase max_iter (or tol)",
                ConvergenceWarning,
                stacklevel=3,
            )
    report_fit(name, model, step_tolerance)
    return history, schedule, bound


def report_fit(name, model, step_tolerance):
    """Warnings about the fitted parameters (bounds, jitter against noise)."""
    if model.learn_hyperparameters:
        noise = model.noise
        learned_noise = None
        if noise is not None and noise.learned:
            learned_noise = (noise.value, tuple(np.exp(noise.log_bounds)))
        warn_at_bounds(name, model.kernel.to_sklearn(), step_tolerance, learned_noise)
    if model.noise is not None:
        scale = float(np.mean(model.kernel.diag(model.state.inducing)))
        warn_jitter_above_noise(name, model.jitter * scale, model.noise.value)


def run_partial_pass(estimator, model, rows, Y, stream):
    """One pass of minibatch steps over ``rows`` (``partial_fit``), continuing ``stream``."""
    n = rows.n_rows
    batch = batch_rows(estimator, n)
    history = train(
        model,
        None,
        None,
        batch_size=batch,
        max_iter=1,
        stopping=StoppingRule(0.0, 1, -(-n // batch) + 1, -(-n // batch)),
        schedule=stream.schedule,
        adam=stream.adam,
        rng=stream.rng,
        verbose=estimator.verbose,
        batches=rows.batches(Y, batch),
        warmup_steps=warmup_steps(model, stream.schedule, -(-n // batch)),
    )
    if history.interrupted:
        warn_interrupted(estimator, history)
    return history


def warn_interrupted(estimator, history):
    warnings.warn(
        f"{type(estimator).__name__}: fit interrupted (KeyboardInterrupt) after {history.n_steps} "
        "steps; the estimator holds the model of the last completed step, which predicts "
        "normally (call fit again, with warm_start=True to continue)",
        FitInterruptedWarning,
        stacklevel=4,
    )


def chunked(n_rows, size=PREDICT_CHUNK):
    for start in range(0, n_rows, size):
        yield slice(start, min(start + size, n_rows))


def record_fit(estimator, model, history, schedule, steps_done, append=False, bound=None):
    """Set the fitted attributes that every estimator shares from a trained model.

    ``append`` (partial_fit): the epochs and ELBOs add to those already recorded.
    ``bound``: the ELBO of the fitted model on all training rows (None when not computed:
    an interrupted fit, a partial_fit pass).
    """
    estimator.log_marginal_likelihood_value_ = np.nan if bound is None else float(bound)
    estimator.kernel_ = model.kernel.to_sklearn()
    # Cached matrices are recomputable; dropping them keeps pickles small.
    model.state.drop_caches()
    estimator.variational_state_ = model.state
    estimator.inducing_points_ = model.state.inducing
    orthogonal = getattr(model.state, "orthogonal", None)
    if orthogonal is not None:
        estimator.orthogonal_points_ = orthogonal
    estimator.jitter_ = model.jitter
    estimator.n_iter_ = history.n_epochs + (estimator.n_iter_ if append else 0)
    estimator.n_steps_ = steps_done + history.n_steps
    estimator.loss_curve_ = (list(estimator.loss_curve_) if append else []) + list(history.elbo)
    estimator.converged_ = history.converged
    estimator.n_natural_backoffs_ = schedule.n_backoffs
    if history.diagnostics:
        estimator.diagnostics_ = history.diagnostics
    estimator.predictor_ = model.predictor()


def latent_in_chunks(predictor, kernel, X):
    """Latent mean (n, P) and variance (n, C) of a fitted predictor, PREDICT_CHUNK rows at a time."""
    parts = [predictor.latent(kernel, X[rows]) for rows in chunked(X.shape[0])]
    if not parts:
        raise ValueError("X has no rows")
    return np.vstack([p[0] for p in parts]), np.vstack([p[1] for p in parts])


def evaluate_bound_at(model, X, Y, theta, eval_gradient, conjugate):
    """The bound on (X, Y) at kernel log-hyperparameters ``theta`` with q re-optimised.

    For a Gaussian likelihood and the coupled basis this is the collapsed bound; otherwise
    q is moved to its optimum by damped natural steps. The gradient in theta is the
    ELBO's partial gradient at that q (the bound is stationary in q there).
    """
    if theta is not None:
        model.set_adam_params({"theta": np.asarray(theta, dtype=np.float64)})
    exact = conjugate and model.natural and getattr(model.basis, "EXACT_NATURAL_STEP", False)
    value = optimal_q(model, X, Y, exact)
    if not eval_gradient:
        return value
    return value, model.evaluate(X, Y).grads["theta"]
