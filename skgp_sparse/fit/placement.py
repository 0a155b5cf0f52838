"""Where a fit runs, and moving a model's state there and back.

A fit runs on float64 numpy arrays, on float32 numpy copies (``dtype="float32"``), or on
the arrays of another Array API library on its device (``backend="cupy"`` / ``"torch"``,
or such arrays under scikit-learn's ``array_api_dispatch``). :func:`fit_device` decides
which from the settings and X's library, before the rows are validated: validation
makes its host copy according to it. The state crosses between the host and the
training arrays' place by :func:`state_to`.
"""

import copy
import dataclasses

import numpy as np

from .. import backend


@dataclasses.dataclass(frozen=True)
class FitDevice:
    """Where a fit runs when it does not run on float64 numpy: a namespace (numpy
    itself for a float32 fit on the CPU), a device (None: that of the input arrays or
    the library's default) and the floating dtype of the training arrays."""

    xp: object
    device: object
    dtype: object


def dtype_name(dtype):
    """The estimator's ``dtype`` parameter ("float64", "float32", np.float64 or np.float32)
    as its name."""
    return np.dtype(dtype).name


def is_dask_collection(a):
    """Whether ``a`` is a Dask collection, without importing Dask when it was not."""
    return type(a).__module__.split(".")[0] in ("dask", "dask_expr") and hasattr(a, "__dask_graph__")


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


def fit_device(settings, X):
    """Where a fit with ``settings`` (a :class:`.settings.FitSettings`) runs on X: None
    for the float64 numpy path, else a :class:`FitDevice`.

    Arrays of another library under ``array_api_dispatch`` are fitted where they live;
    ``backend="cupy"`` or ``"torch"`` moves numpy input to that library's GPU (and fails
    at once, naming what is missing, without one). ``dtype="float32"`` on numpy runs the
    numpy path on float32 copies of the rows and state (Dask input: None, its chunks are
    converted as they stream).
    """
    xp = dispatch_namespace(X)
    device = None
    if settings.backend != "numpy":
        if is_dask_collection(X):
            # Streamed chunks would cross to the GPU one by one; the device path holds the rows.
            raise NotImplementedError(
                f"{settings.name}: a Dask array streams through backend='numpy' only; "
                f"compute it into memory for backend={settings.backend!r}, or use backend='numpy'"
            )
        gpu_xp, device = backend.device_namespace(settings.backend)
        if xp is not None and backend.library(xp) != settings.backend:
            raise ValueError(
                f"{settings.name}: backend={settings.backend!r} but X is an array of "
                f"{backend.library(xp)}; pass numpy arrays (moved to the GPU by the fit) or arrays "
                "of the backend's library"
            )
        xp = gpu_xp
    if xp is None:
        # Dask input streams in the estimator's dtype (DaskRows).
        if settings.dtype == "float64" or is_dask_collection(X):
            return None
        # float32 on the CPU: the numpy path's own code, on float32 copies of the rows.
        return FitDevice(np, None, np.float32)
    dtype = getattr(xp, settings.dtype)
    return FitDevice(xp, device, dtype)


def state_to(state, convert):
    """A basis state or predictor (a dataclass of arrays, possibly nesting another) with
    every array passed through ``convert``; other fields (None caches, settings, numbers)
    are kept as they are."""
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        changes = {f.name: state_to(getattr(state, f.name), convert) for f in dataclasses.fields(state) if f.init}
        return dataclasses.replace(state, **changes)
    if backend.is_array(state):
        return convert(state)
    if isinstance(state, tuple) and state and all(dataclasses.is_dataclass(part) for part in state):
        # Nested states (a multi-output state's latent groups); a tuple of arrays is a
        # cache, kept as it is.
        return tuple(state_to(part, convert) for part in state)
    if isinstance(state, np.random.Generator):
        # Its own stream: drawing from the moved state must not advance the original.
        return copy.deepcopy(state)
    return state


def state_to_host(model):
    """After a fit on arrays of another library or in float32: the model's state as
    float64 numpy arrays, so that the fitted estimator pickles and predicts anywhere as a
    float64 fit does (a no-op for a float64 numpy state)."""
    inducing = getattr(model.state, "inducing", None)
    if inducing is not None and not (isinstance(inducing, np.ndarray) and inducing.dtype == np.float64):
        model.state = state_to(model.state, lambda a: np.array(backend.to_numpy(a), dtype=np.float64))
