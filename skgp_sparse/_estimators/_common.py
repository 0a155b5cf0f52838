"""Plumbing shared by the estimators: parameter rules, option checks, model assembly.

No mathematics here: this module turns estimator parameters into a
:class:`skgp_sparse.elbo.VariationalModel` and runs :func:`skgp_sparse.optim.train`.
"""

import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Kernel
from sklearn.utils._param_validation import Interval, StrOptions

from ..bases import BASES, ORTHOGONAL_BASES, PLANNED_BASES
from ..inducing import METHODS as INDUCING_METHODS
from ..inducing import initial_inducing
from ..kernels import compile_kernel
from ..optim import Adam, NaturalStepSchedule, train

#: Rows per chunk at prediction time: bounds memory at O(chunk * M) whatever the input size.
PREDICT_CHUNK = 4096

COMMON_CONSTRAINTS = {
    "kernel": [None, Kernel],
    "basis": [StrOptions(set(BASES) | set(PLANNED_BASES))],
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
    "jitter": [Interval(Real, 0, None, closed="left")],
}

#: Falling-ELBO back-off of non-conjugate fits: an epoch whose mean ELBO per row is this
#: many nats below the previous epoch's halves the natural steps for the rest of the fit.
#: Epoch means cover every row once, so they move by far less than this from noise alone.
ELBO_DROP_TOL = 1e-2


def check_basis_options(basis, n_orthogonal, backend):
    """Refuse combinations that cannot work, with a message that says why."""
    if basis in PLANNED_BASES:
        raise NotImplementedError(
            f"basis={basis!r} is not available yet in this version of skgp_sparse; "
            f"available: {sorted(BASES)}"
        )
    if n_orthogonal != 0 and basis not in ORTHOGONAL_BASES:
        raise ValueError(
            f"n_orthogonal={n_orthogonal} is only used by the bases {list(ORTHOGONAL_BASES)}; "
            f"basis={basis!r} has no orthogonal set, so leave n_orthogonal=0"
        )
    if backend == "cupy":
        raise NotImplementedError(
            "backend='cupy' is not available yet in this version of skgp_sparse; use backend='numpy'"
        )


def default_kernel(n_features):
    """A learnable amplitude times an RBF with one length scale per feature."""
    return ConstantKernel(1.0) * RBF(length_scale=np.ones(n_features))


def resolve_kernel(kernel, n_features):
    """Compile the user's kernel (or the default) with WhiteKernel terms as noise."""
    sk_kernel = default_kernel(n_features) if kernel is None else kernel
    compiled = compile_kernel(sk_kernel, white_as_noise=True)
    # Evaluate once on a dummy row so that a wrong-length length scale fails here, with
    # the kernel's own message, rather than deep inside the first step.
    compiled.diag(np.zeros((1, n_features)))
    compiled(np.zeros((1, n_features)), np.zeros((1, n_features)))
    return compiled


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


def run_training(estimator, model, X, Y, rng, conjugate, steps_done=0):
    """Minibatch natural-gradient training of ``model`` with the estimator's settings.

    ``steps_done`` (a warm start) lets the natural-step schedule continue where it was
    rather than restart with large steps that would forget the fitted q(u). Without a
    conjugate likelihood the schedule warms up and also backs off on a falling ELBO.
    """
    n = X.shape[0]
    batch = n if estimator.batch_size is None else min(estimator.batch_size, n)
    schedule = NaturalStepSchedule(
        estimator.natural_step_size,
        conjugate=conjugate,
        full_batch=batch >= n,
        elbo_drop_tol=None if conjugate else ELBO_DROP_TOL,
    )
    schedule.t = steps_done
    adam = Adam(learning_rate=estimator.learning_rate)
    history = train(
        model,
        X,
        Y,
        batch_size=batch,
        max_iter=estimator.max_iter,
        tol=estimator.tol,
        n_iter_no_change=estimator.n_iter_no_change,
        schedule=schedule,
        adam=adam,
        rng=rng,
        verbose=estimator.verbose,
        # Set by benchmarks only (not a parameter: it would not survive clone).
        callback=getattr(estimator, "_epoch_callback", None),
    )
    if not history.converged:
        warnings.warn(
            f"{type(estimator).__name__} stopped at max_iter={estimator.max_iter} epochs before the "
            f"ELBO settled to tol={estimator.tol}; increase max_iter or tol",
            ConvergenceWarning,
            stacklevel=3,
        )
    return history, schedule


def chunked(n_rows, size=PREDICT_CHUNK):
    for start in range(0, n_rows, size):
        yield slice(start, min(start + size, n_rows))


def record_fit(estimator, model, history, schedule, steps_done):
    """Set the fitted attributes that every estimator shares from a trained model."""
    estimator.kernel_ = model.kernel.to_sklearn()
    # Cached matrices are recomputable; dropping them keeps pickles small.
    model.state.drop_caches()
    estimator.variational_state_ = model.state
    estimator.inducing_points_ = model.state.inducing
    orthogonal = getattr(model.state, "orthogonal", None)
    if orthogonal is not None:
        estimator.orthogonal_points_ = orthogonal
    estimator.jitter_ = model.jitter
    estimator.n_iter_ = history.n_epochs
    estimator.n_steps_ = steps_done + history.n_steps
    estimator.loss_curve_ = history.elbo
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
