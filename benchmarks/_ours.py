"""Timing of our own training step, built exactly as SparseGPRegressor.fit builds it.

:func:`time_our_step` times steps on numpy arrays (the CPU benchmarks) or, given ``xp``,
``device`` and ``dtype``, on arrays of another Array API library (CuPy, PyTorch) on their
device (``bench_gpu.py``); :func:`synchronize` is the device barrier that both that path
and the GPyTorch peer call before reading the clock.
"""

import time
from contextlib import contextmanager

import numpy as np

from skgp_sparse import SparseGPRegressor
from skgp_sparse import backend
from skgp_sparse.bases import BASES
from skgp_sparse.optim import Adam, NaturalStepSchedule, train
from skgp_sparse.optim.stopping import StoppingRule
from skgp_sparse._estimators._common import resolve_kernel
from skgp_sparse.fit.placement import state_to
from skgp_sparse.fit.plan import feature_scale


def synchronize(xp, device=None):
    """Wait until every kernel queued on ``device`` of namespace ``xp`` has finished.

    GPU libraries return from a call as soon as its kernels are queued, so a clock read
    without this barrier would time the queueing, not the work. A no-op for numpy and for
    devices that compute synchronously (CPU tensors, array_api_strict).

    Parameters
    ----------
    xp : namespace
        numpy or a namespace from :func:`skgp_sparse.backend.namespace`.
    device : device, optional
        The library's device object (torch: ``torch.device``); None is the current one.
    """
    lib = backend.library(xp)
    if lib == "cupy":
        import cupy

        (cupy.cuda.Device() if device is None else cupy.cuda.Device(_cupy_id(device))).synchronize()
    elif lib == "torch":
        import torch

        device = torch.device("cpu") if device is None else torch.device(device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)


def _cupy_id(device):
    """The integer id of a CuPy device given as a ``cupy.cuda.Device`` or an int."""
    return getattr(device, "id", device)


def _step_rows(n_rows, batch_size, total, seed):
    """Row indices of ``total`` minibatches: consecutive slices of seeded permutations, each
    batch sorted (as training cuts them), concatenated into one array."""
    rng = np.random.default_rng(seed)
    order = np.concatenate([rng.permutation(n_rows) for _ in range(-(-total * batch_size // n_rows))])
    return np.concatenate([np.sort(order[s * batch_size : (s + 1) * batch_size]) for s in range(total)])


def time_our_step(X, y, Z0, batch_size, n_steps, n_warmup=3, seed=0, xp=None, device=None, dtype=None,
                  return_times=False, **params):
    """Median wall seconds of one training step: ELBO and gradients, natural step, Adam step.

    Minibatches are consecutive slices of a seeded permutation, as in training.

    Parameters
    ----------
    X, y : ndarray of shape (n, d) and (n,)
        Training data (numpy float64).
    Z0 : ndarray of shape (n_inducing + n_orthogonal, d)
        Initial inducing inputs, every set's.
    batch_size, n_steps, n_warmup : int
        Rows per step; timed steps; untimed steps before them (first-call overheads,
        allocator and kernel-cache warm-up).
    seed : int
        Seed of the minibatch order.
    xp : namespace, optional
        None (default): the numpy step as the CPU benchmarks have always timed it (their
        results stay comparable). A namespace (numpy included): X, y and the model's state
        go to ``device`` in ``dtype`` once, the minibatches are cut there with ``xp.take``
        from one index array on the device, and the steps are those of
        :func:`skgp_sparse.optim.loop.train` itself (finiteness check, natural step, Adam
        with the estimator's step and rate scales, the commit), timed between device
        barriers.
    device : device, optional
        Device of ``xp`` (default: the library's default device).
    dtype : {"float64", "float32"}, optional
        Floating dtype of the data and state on the device (default float64).
    return_times : bool
        Also return every timed step's seconds.
    **params
        SparseGPRegressor parameters (basis, n_inducing, n_orthogonal, kernel, ...).

    Returns
    -------
    float or (float, list of float)
    """
    # Z0 holds the points of every set: n_inducing of them are the covariance set.
    params.setdefault("n_inducing", len(Z0) - params.get("n_orthogonal", 0))
    reg = SparseGPRegressor(inducing_init=Z0, batch_size=batch_size, random_state=seed, **params)
    Y = y.reshape(-1, 1)
    kernel = resolve_kernel(reg.kernel, X.shape[1])
    state = BASES[reg.basis].init_state(Z0, n_outputs=1, n_covariances=1, n_orthogonal=reg.n_orthogonal)
    model = reg._build_model(kernel, state, X.shape[0])
    schedule = NaturalStepSchedule(reg.natural_step_size, conjugate=True, full_batch=False)
    if xp is not None or device is not None or dtype is not None:
        xp = np if xp is None else xp
        times = _time_train_steps(model, reg, X, Y, Z0, schedule, batch_size, n_steps, n_warmup, seed, xp, device, dtype)
        med = float(np.median(times))
        return (med, times) if return_times else med
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
    med = float(np.median(times))
    return (med, times) if return_times else med


def _time_train_steps(model, reg, X, Y, Z0, schedule, batch_size, n_steps, n_warmup, seed, xp, device, dtype):
    """Seconds of each timed step of ``train`` on (X, Y) moved to ``xp``/``device``/``dtype``.

    The steps are run by :func:`skgp_sparse.optim.loop.train` itself, so that their work
    is the training loop's to the line; the clock is read inside the batch source, which
    train resumes exactly once per step: a step's time runs from just before its
    minibatch is cut to the moment train asks for the next one, between device barriers.
    """
    float_dtype = getattr(xp, "float64" if dtype in (None, "float64") else str(dtype))
    if backend.is_numpy(xp):
        xp, float_dtype = np, np.dtype(float_dtype)

    def to_device(a):
        return backend.to_namespace(np.asarray(a), xp, device=device, dtype=float_dtype)

    # Everything moves once, before the clock starts (the estimators do the same).
    Xd, Yd = to_device(X), to_device(Y)
    # The host prior moved to the device in the working dtype, as the estimators move it
    # (init_state makes numpy states in float64).
    model.state = state_to(BASES[reg.basis].init_state(Z0, n_outputs=1, n_covariances=1,
                                                       n_orthogonal=reg.n_orthogonal), to_device)
    total = n_warmup + n_steps
    rows = backend.to_namespace(_step_rows(X.shape[0], batch_size, total, seed), xp, device=device)
    # The estimators' Adam: steps on the inducing inputs scaled by each feature's spread.
    x_scale = feature_scale(X)
    adam = Adam(reg.learning_rate, step_scales={name: x_scale for name in model.basis.INDUCING_FIELDS})
    times = []

    def batches(rng):
        for s in range(total):
            part = rows[s * batch_size : (s + 1) * batch_size]
            synchronize(xp, device)
            t0 = time.perf_counter()
            yield xp.take(Xd, part, axis=0), xp.take(Yd, part, axis=0)
            synchronize(xp, device)
            times.append(time.perf_counter() - t0)

    # A stopping rule that never closes a period and no warm-up: every step is a full
    # step (natural and Adam) and none ends the run early.
    never = StoppingRule(0.0, 1, 10**12, 1)
    history = train(model, batches, max_iter=1, stopping=never, schedule=schedule,
                    adam=adam, rng=np.random.default_rng(seed), warmup_steps=0)
    if history.n_steps != total:
        raise RuntimeError(f"train ran {history.n_steps} steps, expected {total}")
    return times[n_warmup:]


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


def installed_versions(*names):
    """numpy's version and those of the named packages that are installed, for a results file."""
    out = {"numpy": np.__version__}
    for name in names:
        try:
            out[name] = __import__(name).__version__
        except ImportError:
            pass
    return out


@contextmanager
def timed_calls(module, name, seconds):
    """Within the block, ``module.name`` is wrapped so that its wall time adds up in
    ``seconds[name]`` (a phase of a fit timed by the function the fit calls)."""
    original = getattr(module, name)

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - start

    setattr(module, name, wrapper)
    try:
        yield
    finally:
        setattr(module, name, original)


def fit_by_phase(estimator, X, y, X_test):
    """Fit ``estimator`` on one thread, warnings silenced, its wall time split into the
    exact search that starts the fit and the minibatch stream.

    Returns ``(proba, fit_s, search_s, stream_s)``: the predicted probabilities of
    ``X_test`` (a classifier), the fit's seconds and those of its two phases."""
    import warnings

    from threadpoolctl import threadpool_limits

    from skgp_sparse.fit import pipeline, training

    seconds = {}
    with timed_calls(pipeline, "search_hyperparameters", seconds), timed_calls(training, "train", seconds), \
            threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        estimator.fit(X, y)
        fit_s = time.perf_counter() - start
        proba = estimator.predict_proba(X_test)
    return proba, fit_s, seconds.get("search_hyperparameters", 0.0), seconds.get("train", 0.0)
