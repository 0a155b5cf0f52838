"""Plumbing shared by the estimators: parameter rules, option checks, model assembly.

No mathematics here: this module validates estimator parameters and data and assembles
what a :class:`skgp_sparse.elbo.VariationalModel` is built from (kernel, inducing inputs,
rows); :mod:`._training` runs the fit.
"""

import copy
import dataclasses
import functools
import warnings
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Kernel
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import validate_data

from .. import backend
from ..bases import BASES, ORTHOGONAL_BASES
from ..inducing import METHODS as INDUCING_METHODS
from ..inducing import initial_inducing
from ..kernels import compile_kernel
from ..likelihoods import NoiseParameter
from ..optim.loop import array_batches

#: Rows per chunk at prediction time: bounds memory at O(chunk * M) whatever the input size.
PREDICT_CHUNK = 4096

COMMON_CONSTRAINTS = {
    "kernel": [None, Kernel],
    "basis": [StrOptions(set(BASES))],
    "n_inducing": [Interval(Integral, 1, None, closed="left")],
    "n_orthogonal": [Interval(Integral, 0, None, closed="left")],
    "kl_columns": [None, StrOptions({"auto"}), Interval(Integral, 1, None, closed="left")],
    "batch_size": [None, StrOptions({"auto"}), Interval(Integral, 1, None, closed="left")],
    "max_iter": [Interval(Integral, 1, None, closed="left")],
    "tol": [Interval(Real, 0, None, closed="left")],
    "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
    "natural_step_size": [Interval(Real, 0, 1, closed="right")],
    "learning_rate": [Interval(Real, 0, None, closed="neither")],
    "variational_optimizer": [StrOptions({"natural", "adam"})],
    "learn_inducing": ["boolean"],
    "inducing_init": [StrOptions(set(INDUCING_METHODS)), "array-like"],
    "backend": [StrOptions({"numpy", "cupy", "torch"})],
    "dtype": [StrOptions({"float64", "float32"})],
    "random_state": ["random_state"],
    "verbose": ["verbose"],
    "warm_start": ["boolean"],
    "jitter": [StrOptions({"auto"}), Interval(Real, 0, None, closed="left")],
}

def check_basis_options(basis, n_orthogonal):
    """Refuse combinations that cannot work, with a message that says why."""
    if n_orthogonal != 0 and basis not in ORTHOGONAL_BASES:
        raise ValueError(
            f"n_orthogonal={n_orthogonal} is only used by the bases {list(ORTHOGONAL_BASES)}; "
            f"basis={basis!r} has no orthogonal set, so leave n_orthogonal=0"
        )


def feature_scale(X, sample_weight=None):
    """Spread (standard deviation) of each column of X; 1 for a constant column.

    It sets the default kernel's length scales and the size of Adam's steps on the
    inducing inputs, so that a fit does the same on X and on ``1e6 * X``. With
    ``sample_weight``, the weighted spread: that of X with each row repeated its weight's
    number of times.
    """
    n = X.shape[0]
    if n < 2:
        return np.ones(X.shape[1])
    w = np.ones(n) if sample_weight is None else sample_weight
    total = float(w.sum())
    # Two passes, the second over row chunks: np.std would make two temporaries of X's size.
    mean = (w @ X) / total
    sq = np.zeros(X.shape[1])
    for rows in chunked(n, 65536):
        sq += w[rows] @ ((X[rows] - mean) ** 2)
    scale = np.sqrt(sq / total)
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


def check_sample_weight(sample_weight, n_rows):
    """``sample_weight`` as a float64 array of ``n_rows`` finite, non-negative weights with
    a positive sum (None when it is None)."""
    if sample_weight is None:
        return None
    if is_dask_collection(sample_weight):
        sample_weight = sample_weight.compute()
    # Weights of another library join the host target layout, which goes to the device once.
    w = np.asarray(backend.to_numpy(sample_weight), dtype=np.float64)
    if w.ndim == 0:
        w = np.full(n_rows, float(w))
    if w.ndim != 1 or w.shape[0] != n_rows:
        raise ValueError(f"sample_weight must have shape ({n_rows},) (one weight per row); got {w.shape}")
    if not np.all(np.isfinite(w)):
        raise ValueError("sample_weight contains NaN or inf")
    if np.any(w < 0):
        raise ValueError(f"sample_weight must be non-negative; got {w.min()!r} (drop the row instead)")
    if not np.any(w > 0):
        raise ValueError("sample_weight is zero for every row: at least one weight must be non-zero")
    return w


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


def random_rows(n_total, n_rows, rng):
    """``n_rows`` of ``n_total`` row indices drawn without replacement, in order; None when
    ``n_rows`` covers them all (take every row, draw nothing)."""
    if n_rows >= n_total:
        return None
    return np.sort(rng.choice(n_total, n_rows, replace=False))


class InMemoryRows:
    """Training rows held as one numpy array (the Dask counterpart is ``_dask.DaskRows``).

    Attributes
    ----------
    sample : ndarray
        Rows to initialise from (inducing inputs, feature scales): all of them here.
    n_rows : int
    converts : bool
        Whether the model's state and the targets must be converted (:meth:`to_device`)
        to train on these rows: False for float64 numpy rows.
    """

    converts = False

    def __init__(self, X):
        self.X = X
        self.sample = X
        self.n_rows = X.shape[0]

    def to_device(self, a):
        """A host array ``a`` (targets, state) as the training steps take it: as it is here."""
        return a

    def sample_weights(self, weights):
        """The weights of the rows of ``sample`` (None when ``weights`` is None)."""
        return weights

    def batches(self, Y, batch_size):
        """``batches(rng)``: shuffled minibatches of ``batch_size`` rows of (X, Y)."""
        return array_batches(self.X, Y, batch_size)

    def all_rows(self, Y):
        """(X, Y), every row in order."""
        return self.X, Y

    def monitor_rows(self, Y, n_rows, rng):
        """A fixed random sample of at most ``n_rows`` rows of (X, Y), for the stopping rule."""
        rows = random_rows(self.n_rows, n_rows, rng)
        return (self.X, Y) if rows is None else (self.X[rows], Y[rows])

    def search_rows(self, Y, n_rows, rng):
        """At most ``n_rows`` random rows of (X, Y) as float64 numpy arrays (``Y`` is the
        host target array), for the exact search that starts a fit: all of them when there
        are no more."""
        rows = random_rows(self.sample.shape[0], n_rows, rng)
        return (self.sample, Y) if rows is None else (self.sample[rows], Y[rows])


class DeviceRows(InMemoryRows):
    """Training rows held as one array of another Array API library (torch, CuPy,
    array_api_strict, ...), on its device, or as a float32 numpy array (a float32 fit
    on the CPU).

    Minibatches are cut there with ``xp.take``; their rows are those the numpy path draws
    (the same Generator permutation, each batch's rows sorted), sent to the device once
    per epoch as one index array. ``sample`` is a host (numpy) copy of the rows, used
    only to initialise (inducing inputs by k-means, feature scales).
    """

    converts = True

    def __init__(self, X, sample, xp, dtype):
        self.X = X
        self.sample = sample
        self.n_rows = X.shape[0]
        self.xp = xp
        self.dtype = dtype
        self.device = backend.device_of(X)

    def _take(self, a, rows):
        return self.xp.take(a, rows, axis=0)

    def batches(self, Y, batch_size):
        X, n = self.X, self.n_rows

        def batches(rng):
            if batch_size >= n:
                yield X, Y
                return
            order = rng.permutation(n)
            starts = range(0, n, batch_size)
            host_rows = np.concatenate([np.sort(order[start : start + batch_size]) for start in starts])
            rows = backend.to_namespace(host_rows, self.xp, device=self.device)
            for start in starts:
                part = rows[start : min(start + batch_size, n)]
                yield self._take(X, part), self._take(Y, part)

        return batches

    def monitor_rows(self, Y, n_rows, rng):
        rows = random_rows(self.n_rows, n_rows, rng)
        if rows is None:
            return self.X, Y
        rows = backend.to_namespace(rows, self.xp, device=self.device)
        return self._take(self.X, rows), self._take(Y, rows)

    def to_device(self, a):
        """A host array ``a`` (targets, state) in the rows' library, on their device, in
        their floating dtype."""
        return backend.to_namespace(a, self.xp, device=self.device, dtype=self.dtype)


def dispatch_namespace(X):
    """The namespace of X when it is an array of a library other than numpy and
    scikit-learn's ``array_api_dispatch`` is on (``sklearn.config_context``); None
    otherwise (the fit then converts X to numpy, as it always did)."""
    if not backend.is_foreign(X):
        return None
    from sklearn import get_config

    if not get_config().get("array_api_dispatch", False):
        return None
    return backend.namespace(X)


@dataclass
class FitDevice:
    """Where a fit runs when it does not run on float64 numpy: a namespace (numpy
    itself for a float32 fit on the CPU), a device (None: that of the input arrays or
    the library's default) and the floating dtype of the training arrays."""

    xp: object
    device: object
    dtype: object


def fit_device(estimator, X):
    """Where ``estimator`` fits X: None for the float64 numpy path, else a :class:`FitDevice`.

    Arrays of another library under ``array_api_dispatch`` are fitted where they live;
    ``backend="cupy"`` or ``"torch"`` moves numpy input to that library's GPU (and fails
    at once, naming what is missing, without one). ``dtype="float32"`` on numpy runs the
    numpy path on float32 copies of the rows and state (Dask input: None, its chunks are
    converted as they stream).
    """
    xp = dispatch_namespace(X)
    device = None
    if estimator.backend != "numpy":
        if is_dask_collection(X):
            # Streamed chunks would cross to the GPU one by one; the device path holds the rows.
            raise NotImplementedError(
                f"{type(estimator).__name__}: a Dask array streams through backend='numpy' only; "
                f"compute it into memory for backend={estimator.backend!r}, or use backend='numpy'"
            )
        gpu_xp, device = backend.device_namespace(estimator.backend)
        if xp is not None and backend.library(xp) != estimator.backend:
            raise ValueError(
                f"{type(estimator).__name__}: backend={estimator.backend!r} but X is an array of "
                f"{backend.library(xp)}; pass numpy arrays (moved to the GPU by the fit) or arrays "
                "of the backend's library"
            )
        xp = gpu_xp
    if xp is None:
        # Dask input streams in the estimator's dtype (_dask.DaskRows).
        if estimator.dtype == "float64" or is_dask_collection(X):
            return None
        # float32 on the CPU: the numpy path's own code, on float32 copies of the rows.
        return FitDevice(np, None, np.float32)
    dtype = getattr(xp, estimator.dtype)
    return FitDevice(xp, device, dtype)


def device_training_rows(estimator, X, y, where, **check_params):
    """Validate (X, y) for a fit on ``where`` (a :class:`FitDevice`): the rows as
    :class:`DeviceRows` (X in the device's library, on its device, in its dtype) and
    y as numpy.

    The checks of ``validate_data`` (and ``n_features_in_``) run on host copies; y is
    brought to the host because the target transformations (normalisation, layout) are
    numpy code; the fit sends the finished target array to the device once.
    """
    foreign = backend.is_foreign(X)
    host_X = backend.to_numpy(X) if foreign else X
    host_y = backend.to_numpy(y) if backend.is_foreign(y) else y
    host_X, y = validate_data(estimator, host_X, host_y, dtype=np.float64, order="C", **check_params)
    xp = where.xp
    if foreign:
        X = xp.astype(X, where.dtype) if X.dtype != where.dtype else X
    else:
        X = backend.to_namespace(host_X, xp, device=where.device, dtype=where.dtype)
    return DeviceRows(X, host_X, xp, where.dtype), y


def state_to(state, convert):
    """A basis state or predictor (a dataclass of arrays, possibly nesting another) with
    every array passed through ``convert``; other fields (None caches, settings, numbers)
    are kept as they are."""
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        changes = {f.name: state_to(getattr(state, f.name), convert) for f in dataclasses.fields(state) if f.init}
        return dataclasses.replace(state, **changes)
    if isinstance(state, np.ndarray) or backend.is_foreign(state):
        return convert(state)
    if isinstance(state, np.random.Generator):
        # Its own stream: drawing from the moved state must not advance the original.
        return copy.deepcopy(state)
    return state


def device_rows_for_prediction(estimator, X, xp):
    """X, an array of another library under ``array_api_dispatch``, checked for
    prediction where it lives (no copy to the host): two dimensions, the fitted number of
    features, finite; as the widest float of its device."""
    if X.ndim != 2:
        raise ValueError(f"Expected a 2D array for X, got {X.ndim} dimensions; reshape your data")
    if X.shape[1] != estimator.n_features_in_:
        raise ValueError(
            f"X has {X.shape[1]} features, but {type(estimator).__name__} is expecting "
            f"{estimator.n_features_in_} features as input."
        )
    dtype = backend.widest_float(xp, backend.device_of(X))
    X = xp.astype(X, dtype) if X.dtype != dtype else X
    if not bool(xp.all(xp.isfinite(X))):
        raise ValueError("Input X contains NaN or infinity.")
    return X


def latent_on_device(predictor, kernel, X, xp, full_cov=False):
    """Latent predictions of a fitted (numpy) predictor at X of another library, computed
    on X's device (the predictor's arrays are sent there once), in chunks of
    PREDICT_CHUNK rows; returned as numpy arrays."""
    device = backend.device_of(X)
    on_device = state_to(predictor, lambda a: backend.to_namespace(a, xp, device=device, dtype=X.dtype))
    if full_cov:
        mean, cov = on_device.latent(kernel, X, full_cov=True)
        return backend.to_numpy(mean), backend.to_numpy(cov)
    parts = [on_device.latent(kernel, X[rows, ...]) for rows in chunked(X.shape[0])]
    if not parts:
        raise ValueError("X has no rows")
    mean = xp.concat([p[0] for p in parts], axis=0)
    var = xp.concat([p[1] for p in parts], axis=0)
    return backend.to_numpy(mean), backend.to_numpy(var)


def outputs_follow_input(method):
    """Decorate a prediction method ``method(self, X, ...)``: with scikit-learn's
    ``array_api_dispatch`` on and X an array of another library, its numeric outputs are
    returned in X's library and on X's device (scikit-learn's convention); labels of
    another kind (strings) stay numpy."""

    @functools.wraps(method)
    def wrapper(self, X, *args, **kwargs):
        out = method(self, X, *args, **kwargs)
        xp = dispatch_namespace(X)
        if xp is None:
            return out
        device = backend.device_of(X)

        def convert(a):
            if isinstance(a, np.ndarray) and a.dtype.kind in "biuf":
                return backend.to_namespace(np.ascontiguousarray(a), xp, device=device)
            return a

        return tuple(convert(a) for a in out) if isinstance(out, tuple) else convert(out)

    return wrapper


def is_dask_collection(a):
    """Whether ``a`` is a Dask collection, without importing Dask when it was not."""
    return type(a).__module__.split(".")[0] in ("dask", "dask_expr") and hasattr(a, "__dask_graph__")


def training_rows(estimator, X, y, rng, **check_params):
    """Validate (X, y) for fit: the rows as a source of minibatches, and y as numpy.

    Dask input streams from its chunks (``_dask.DaskRows``, in the estimator's dtype);
    anything else is validated
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
