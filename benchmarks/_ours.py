"""Timing of our own training step, built exactly as SparseGPRegressor.fit builds it."""

import time

import numpy as np

from skgp_sparse import SparseGPRegressor
from skgp_sparse.bases import BASES
from skgp_sparse.optim import Adam, NaturalStepSchedule
from skgp_sparse._estimators._common import resolve_kernel


def time_our_step(X, y, Z0, batch_size, n_steps, n_warmup=3, seed=0, **params):
    """Median wall seconds of one training step: ELBO and gradients, natural step, Adam step.

    Minibatches are consecutive slices of a seeded permutation, as in training.
    """
    # Z0 holds the points of every set: n_inducing of them are the covariance set.
    params.setdefault("n_inducing", len(Z0) - params.get("n_orthogonal", 0))
    reg = SparseGPRegressor(inducing_init=Z0, batch_size=batch_size, random_state=seed, **params)
    Y = y.reshape(-1, 1)
    kernel = resolve_kernel(reg.kernel, X.shape[1])
    state = BASES[reg.basis].init_state(Z0, n_outputs=1, n_covariances=1, n_orthogonal=reg.n_orthogonal)
    model = reg._build_model(kernel, state, X.shape[0])
    schedule = NaturalStepSchedule(reg.natural_step_size, conjugate=True, full_batch=False)
    adam = Adam(reg.learning_rate)
    rng = np.random.default_rng(seed)
    total = n_warmup + n_steps
    order = np.concatenate([rng.permutation(X.shape[0]) for _ in range(-(-total * batch_size // X.shape[0]))])
    times = []
    for s in range(total):
        rows = np.sort(order[s * batch_size : (s + 1) * batch_size])
        t0 = time.perf_counter()
        xb, yb = X[rows], Y[rows]
        result = model.evaluate(xb, yb)
        new_state, _ = schedule.apply(lambda size: model.natural_step(result, size))
        new_params = adam.step(model.adam_params(), result.grads, model.adam_bounds())
        model.state = new_state
        model.set_adam_params(new_params)
        if s >= n_warmup:
            times.append(time.perf_counter() - t0)
    return float(np.median(times))


def basis_settings(name, n_inducing):
    """Estimator parameters that compare basis ``name`` at a budget of ``n_inducing`` points.

    Every basis gets ``n_inducing`` covariance points; the bases with an orthogonal set
    (:data:`skgp_sparse.bases.ORTHOGONAL_BASES`) get as many again in that set, so the report
    can set them beside the coupled basis at the same covariance cost and (the coupled
    basis at twice the points) at the same total number of points.
    """
    from skgp_sparse.bases import ORTHOGONAL_BASES

    return dict(basis=name, n_inducing=n_inducing, n_orthogonal=n_inducing if name in ORTHOGONAL_BASES else 0)


def implemented_bases():
    """Names of the bases this checkout implements, in registry order."""
    from skgp_sparse.bases import BASES

    return list(BASES)


def fit_with_curve(estimator, X, y, evaluate, budget=None):
    """Fit ``estimator`` and record ``evaluate(model, estimator)`` after every epoch.

    Returns ``(fit_seconds, curve)`` where curve is a list of ``(training seconds, metrics)``;
    the evaluation time is excluded from the clock (it would penalise frequent evaluation).
    ``budget`` (seconds): the fit is ended, as Ctrl-C would end it, after the first epoch
    that finishes past it.
    """
    curve, paused = [], [0.0]

    def on_epoch(model, history):
        entered = time.perf_counter()
        metrics = evaluate(model, estimator)
        curve.append((entered - start - paused[0], metrics))
        paused[0] += time.perf_counter() - entered
        if budget is not None and curve[-1][0] > budget:
            raise KeyboardInterrupt

    estimator._epoch_callback = on_epoch
    start = time.perf_counter()
    try:
        estimator.fit(X, y)
    finally:
        del estimator._epoch_callback
    return time.perf_counter() - start - paused[0], curve
