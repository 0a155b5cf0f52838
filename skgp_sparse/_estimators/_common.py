"""Plumbing shared by the estimators: parameter rules, option checks, model assembly.

No mathematics here: this module validates estimator parameters and data, assembles what
a :class:`skgp_sparse.elbo.VariationalModel` is built from (kernel, inducing inputs), and
serves predictions in chunks and on devices; the fit itself is :mod:`skgp_sparse.fit`.
"""

import functools
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Kernel, Matern
from sklearn.utils._param_validation import Interval, Options, StrOptions

from .. import backend
from ..bases import BASES
from ..features import KINDS as FEATURE_KINDS
from ..features import InducingFeatures
from ..inducing import METHODS as INDUCING_METHODS
from ..inducing import initial_inducing
from ..kernels import FeatureScaledRBF, compile_kernel
from ..likelihoods import NoiseParameter
from .._warnings import warn
from ..fit.placement import dispatch_namespace, is_dask_collection, state_to

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
    "inducing_features": [StrOptions(set(FEATURE_KINDS)), InducingFeatures],
    "backend": [StrOptions({"numpy", "cupy", "torch"})],
    # numpy's types too, as scikit-learn's dtype parameters take them.
    "dtype": [StrOptions({"float64", "float32"}), Options(type, {np.float64, np.float32})],
    "random_state": ["random_state"],
    "verbose": ["verbose"],
    "warm_start": ["boolean"],
    "jitter": [StrOptions({"auto"}), Interval(Real, 0, None, closed="left")],
    "optimizer": [StrOptions({"fmin_l_bfgs_b"}), callable, None],
    "n_restarts_optimizer": [Interval(Integral, 0, None, closed="left")],
    "copy_X_train": ["boolean"],
}

def check_basis_options(basis, n_orthogonal):
    """Refuse combinations that cannot work, with a message that says why: a second
    inducing set for a basis that does not declare one (``ORTHOGONAL_SET``)."""
    if n_orthogonal != 0 and not BASES[basis].ORTHOGONAL_SET:
        takers = [name for name, other in BASES.items() if other.ORTHOGONAL_SET]
        raise ValueError(
            f"n_orthogonal={n_orthogonal} is only used by the bases {takers}; "
            f"basis={basis!r} has no orthogonal set, so leave n_orthogonal=0"
        )


@dataclass(frozen=True)
class KernelForm:
    """What an estimator's default kernel (``kernel=None``) is made of; see
    :func:`default_kernel`.

    Attributes
    ----------
    matern_nu : float or None
        The Matern smoothness of the stationary part, or None for an RBF.
    learn_amplitude : bool
        Whether the amplitude is learned (else fixed at 1).
    widen : float
        The length scales start at this multiple of each feature's spread.
    bias : bool
        Whether a learned constant is added.
    shared_length_scale : bool
        One learned length scale times each feature's spread
        (:class:`~skgp_sparse.kernels.FeatureScaledRBF`) instead of one per feature (an
        RBF only).
    """

    matern_nu: float | None = None
    learn_amplitude: bool = True
    widen: float = 1.0
    bias: bool = False
    shared_length_scale: bool = False


def default_kernel(n_features, x_scale=None, form=KernelForm()):
    """An amplitude times a stationary kernel of the features' spreads, as ``form`` (a
    :class:`KernelForm`) says: an RBF, or a Matern of smoothness ``form.matern_nu``; with
    ``form.bias``, plus a learned constant (``ConstantKernel(1.0)``).

    The length scales start at ``form.widen`` times each feature's spread (``x_scale``; 1
    when None) and may move over ten decades either side of it: one per feature, or,
    with ``form.shared_length_scale``, one factor shared by every feature's spread. The
    amplitude starts at 1 and is learned, unless ``form.learn_amplitude`` is False (it
    then stays at 1: under a learned mixing W, a latent's amplitude and its column of W
    scale the same output variance, and the search's quasi-Newton steps stall along that
    flat direction).

    The constant is the prior variance of an offset shared by the whole latent function.
    Without it a stationary kernel's prior pulls the function to zero beyond its length
    scales, and a latent function that sits far from zero everywhere (a classifier's
    decision function on KEEL ring: the log-odds of two Gaussians of different spreads, a
    quadratic with a large constant) is carried by a huge amplitude and long length
    scales, a ridge that the fit climbs slowly.
    """
    scale = np.ones(n_features) if x_scale is None else np.asarray(x_scale, dtype=np.float64)
    amplitude = ConstantKernel(1.0) if form.learn_amplitude else ConstantKernel(1.0, constant_value_bounds="fixed")
    if form.shared_length_scale:
        if form.matern_nu is not None:
            raise ValueError("a shared length scale is only built for the RBF (matern_nu=None)")
        stationary = FeatureScaledRBF(form.widen, (1e-5, 1e5), feature_scale=scale)
    elif form.matern_nu is None:
        stationary = RBF(length_scale=form.widen * scale, length_scale_bounds=_decades_around(scale))
    else:
        stationary = Matern(length_scale=form.widen * scale, length_scale_bounds=_decades_around(scale),
                            nu=form.matern_nu)
    kernel = amplitude * stationary
    return kernel + ConstantKernel(1.0) if form.bias else kernel


def _decades_around(scale):
    """Bounds of per-feature length scales: ten decades either side of each spread."""
    return np.column_stack([1e-5 * scale, 1e5 * scale])


def resolve_kernel(kernel, n_features, x_scale=None, form=KernelForm()):
    """Compile the user's kernel, or the default of :func:`default_kernel` in ``form``
    on features of spread ``x_scale``, with WhiteKernel terms as noise."""
    sk_kernel = default_kernel(n_features, x_scale, form) if kernel is None else kernel
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


def clipped_n_inducing(n_inducing, n_samples, chosen=True):
    """``n_inducing`` clipped to ``n_samples``, with a warning when the user chose the value
    (``chosen``; the default adapts to small data without one, as a default should)."""
    if n_inducing > n_samples:
        if chosen:
            warn(
                f"n_inducing={n_inducing} is larger than the number of samples ({n_samples}); "
                f"using {n_samples} inducing points",
                UserWarning,
            )
        return n_samples
    return n_inducing


def initial_inducing_points(init, n_inducing, n_orthogonal, X, kernel, rng, n_inducing_chosen=True, strata=None):
    """The n_inducing + n_orthogonal initial inducing inputs (the basis splits them):
    ``init`` is the estimator's ``inducing_init``; ``n_inducing_chosen``: whether the user
    set ``n_inducing`` (a default adapts to small data and to the rows of an
    ``inducing_init`` array without a word; a chosen value is checked against both);
    ``strata``: a group per row of X for k-means (see :func:`skgp_sparse.inducing.initial_inducing`)."""
    if not isinstance(init, str):
        Z = np.asarray(init, dtype=np.float64)
        if Z.ndim != 2 or Z.shape[1] != X.shape[1] or Z.shape[0] <= n_orthogonal:
            raise ValueError(
                f"inducing_init as an array must have shape (n_inducing + n_orthogonal, {X.shape[1]}) "
                f"with n_inducing >= 1; got {Z.shape} with n_orthogonal={n_orthogonal}"
            )
        if n_inducing_chosen and Z.shape[0] != n_inducing + n_orthogonal:
            raise ValueError(
                f"inducing_init has {Z.shape[0]} rows but n_inducing + n_orthogonal = {n_inducing} + "
                f"{n_orthogonal} = {n_inducing + n_orthogonal}; pass that many rows, or leave n_inducing "
                "at its default to take the array's rows as the inducing inputs"
            )
        if not np.all(np.isfinite(Z)):
            raise ValueError("inducing_init contains NaN or inf")
        return Z
    chosen = n_inducing_chosen or n_orthogonal != 0
    n_points = clipped_n_inducing(n_inducing + n_orthogonal, X.shape[0], chosen)
    return initial_inducing(X, n_points, init, kernel, rng, strata=strata)


def generator_from(random_state):
    """A numpy Generator seeded from a sklearn-style random_state (int, RandomState, None)."""
    from sklearn.utils import check_random_state

    return np.random.default_rng(check_random_state(random_state).randint(np.iinfo(np.int32).max))


def device_rows_for_prediction(X, xp, n_features, name):
    """X, an array of another library under ``array_api_dispatch``, checked for
    prediction where it lives (no copy to the host): two dimensions, the fitted number of
    features (``n_features``; ``name``: the estimator's, for the message), finite; as the
    widest float of its device."""
    if X.ndim != 2:
        raise ValueError(f"Expected a 2D array for X, got {X.ndim} dimensions; reshape your data")
    if X.shape[1] != n_features:
        raise ValueError(
            f"X has {X.shape[1]} features, but {name} is expecting "
            f"{n_features} features as input."
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


def consistent_covariance(cov):
    """Latent covariances (C, n, n) made symmetric, with their diagonals clipped at zero.

    A predictor computes a covariance as k(X, X) plus a product through the inducing
    inputs; where the posterior variance is near zero (rows at the inducing inputs, little
    noise, long length scales) the two nearly cancel and rounding leaves a diagonal entry
    below zero, and the product is symmetric only to rounding. Every predictor's variance
    path (``predict(return_std=True)``) clips at zero; so must the covariance's diagonal, or
    the two disagree and the square roots of a ``return_cov`` diagonal are NaN
    (docs/constants.md)."""
    cov = 0.5 * (cov + np.swapaxes(cov, -1, -2))
    diagonal = np.einsum("...ii->...i", cov)  # a writable view of every diagonal
    np.clip(diagonal, 0.0, None, out=diagonal)
    return cov


def latent_in_chunks(predictor, kernel, X):
    """Latent mean (n, P) and variance (n, C) of a fitted predictor, PREDICT_CHUNK rows at a time."""
    parts = [predictor.latent(kernel, X[rows]) for rows in chunked(X.shape[0])]
    if not parts:
        raise ValueError("X has no rows")
    return np.vstack([p[0] for p in parts]), np.vstack([p[1] for p in parts])
