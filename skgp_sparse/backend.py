"""The seam between this package and the array libraries it runs on: namespaces,
devices and conversions.

The package's array code is written against an array *namespace* ``xp``: numpy itself,
or the `Array API <https://data-apis.org/array-api/>`_ namespace of another library as
:mod:`array_api_compat` wraps it (CuPy, PyTorch on CPU or CUDA, ``array_api_strict`` as
the CI stand-in for a GPU library). The standard has no conversion between libraries,
no way to tell a tensor's library without importing it, and no notion of a library's
widest float on a device; those gaps are filled here:

* which library an array belongs to (:func:`namespace`, :func:`is_foreign`,
  :func:`library`, :func:`input_namespace`) and where it lives (:func:`device_of`);
* conversions between libraries and to the host (:func:`to_namespace`,
  :func:`to_numpy`), and the namespace of a GPU library chosen by name
  (:func:`device_namespace`);
* dtypes (:func:`widest_float`, :func:`working_float`) and small host constants put on a
  device once (:func:`constant`).

Dense linear algebra with a branch per library (Cholesky, triangular solves, products)
is :mod:`skgp_sparse.linalg`; the special functions of the likelihoods are
:mod:`skgp_sparse.likelihoods._special`. Both build on this module, which imports
neither. :mod:`array_api_compat` is imported only when an array of another library is
met, so numpy-only installations do not need it.
"""

import sys
import threading
import numpy as np

__all__ = [
    "namespace",
    "is_numpy",
    "library",
    "is_foreign",
    "is_array",
    "device_of",
    "to_namespace",
    "device_namespace",
    "to_numpy",
    "to_host",
    "checks_on_device",
    "widest_float",
    "working_float",
    "owned_float_copy",
    "shape_of",
    "input_namespace",
    "constant",
    "likelihood_floats",
    "float_targets",
]

# Namespace module names -> library. Read-only lookup table (no switch): the wrapped
# namespaces of array_api_compat and the plain libraries name the same library.
_LIBRARIES = {
    "numpy": "numpy",
    "array_api_compat.numpy": "numpy",
    "torch": "torch",
    "array_api_compat.torch": "torch",
    "cupy": "cupy",
    "array_api_compat.cupy": "cupy",
    "array_api_strict": "array_api_strict",
}


def _compat():
    try:
        import array_api_compat
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError(
            "arrays of a library other than numpy need the array-api-compat package: "
            "pip install array-api-compat (or the 'gpu' extra of skgp_sparse)"
        ) from exc
    return array_api_compat


# --------------------------------------------------------------------------------------
# namespaces, devices and conversions
# --------------------------------------------------------------------------------------
#: (module, class) of the array types that do not declare ``__array_namespace__``.
_UNDECLARED_ARRAY_CLASSES = (("torch", "Tensor"), ("cupy", "ndarray"))


def is_foreign(a):
    """Whether ``a`` is an array of a library other than numpy that this package runs on.

    True for objects that declare an Array API namespace (``__array_namespace__``:
    ``array_api_strict``, JAX) and for the arrays of the libraries that do not declare one,
    PyTorch tensors and CuPy arrays (CuPy 14's ``ndarray`` has no ``__array_namespace__``).
    False for numpy arrays, numpy scalars (which declare numpy's Array API namespace from
    numpy 2 on, yet live on the host and need no optional package) and everything else
    (lists, pandas or Dask objects), which the callers keep converting with ``np.asarray``.
    """
    if isinstance(a, (np.ndarray, np.generic)):
        return False
    if hasattr(type(a), "__array_namespace__"):
        return True
    # Checked through sys.modules so that this test never imports a library: an array of
    # one exists only once the library is imported.
    for module_name, array_class in _UNDECLARED_ARRAY_CLASSES:
        module = sys.modules.get(module_name)
        if module is not None and isinstance(a, getattr(module, array_class)):
            return True
    return False


def on_device(value):
    """Whether ``value`` is an array of a library other than numpy (a hyperparameter that a
    training loop holds on its rows' device, see
    :meth:`skgp_sparse.kernels.CompiledKernel.set_theta`) rather than a host number, a
    numpy array or a numpy scalar."""
    return is_foreign(value)


def is_array(value):
    """Whether ``value`` is an array this package computes with.

    Parameters
    ----------
    value : object

    Returns
    -------
    bool
        True for a numpy array or scalar and for an array of another library this
        package runs on (:func:`is_foreign`); False for lists, Python numbers and other
        objects.
    """
    return isinstance(value, (np.ndarray, np.generic)) or is_foreign(value)


def namespace(*arrays):
    """The array namespace shared by ``arrays``.

    Parameters
    ----------
    *arrays : arrays, None or Python scalars
        None and Python scalars are ignored.

    Returns
    -------
    xp : module
        ``numpy`` itself when every array is a numpy array (or there are none), so that
        callers can test ``xp is np``; otherwise the namespace from
        :func:`array_api_compat.array_namespace` (``array_api_compat.torch`` for
        tensors, ``array_api_compat.cupy``, ``array_api_strict``, ...).

    Raises
    ------
    TypeError
        If the arrays belong to different libraries (numpy mixed with another one
        included): no transfer is made implicitly.
    """
    arrays = [a for a in arrays if a is not None and not isinstance(a, (bool, int, float, complex))]
    if all(isinstance(a, (np.ndarray, np.generic)) for a in arrays):
        return np
    return _compat().array_namespace(*arrays)


def is_numpy(xp):
    """Whether ``xp`` is numpy (plain or as wrapped by ``array_api_compat``)."""
    return xp is np or library(xp) == "numpy"


def library(xp):
    """Name of the library behind a namespace.

    Returns
    -------
    {"numpy", "torch", "cupy", "array_api_strict", "other"}
    """
    return _LIBRARIES.get(getattr(xp, "__name__", ""), "other")


def device_of(a):
    """Device of an array: ``"cpu"`` for numpy, the library's device object otherwise."""
    if not is_foreign(a):
        return "cpu"
    return _compat().device(a)


def shape_of(a):
    """The shape of ``a`` as a tuple: an array of any supported library, or an
    array-like (a list) as numpy reads it."""
    return tuple(a.shape) if is_foreign(a) else np.shape(a)


def to_numpy(a):
    """A numpy array with the values of ``a`` (a device-to-host copy for a GPU array).

    torch: ``detach().cpu().numpy()``; cupy: ``get()``; array_api_strict: moved to its
    CPU device first (its other devices refuse conversion, as a GPU would); any other
    library: DLPack, then ``np.asarray``.
    """
    if isinstance(a, np.ndarray):
        return a
    if not is_foreign(a):
        return np.asarray(a)
    xp = namespace(a)
    lib = library(xp)
    if lib == "torch":
        return a.detach().cpu().numpy()
    if lib == "cupy":
        return a.get()
    if lib == "array_api_strict":
        cpu = xp.__array_namespace_info__().default_device()
        return np.asarray(a.to_device(cpu))
    try:
        return np.from_dlpack(a)
    except (AttributeError, BufferError, TypeError, RuntimeError):
        return np.asarray(a)


def host_float64(a):
    """``a`` as a float64 numpy array (one read where ``a`` lives on a device; no copy for
    a float64 numpy array)."""
    return np.asarray(to_numpy(a), dtype=np.float64)


def to_host(*values):
    """Numpy copies of several values of one library, in one transfer.

    Parameters
    ----------
    *values : arrays of one library, or Python numbers
        Of any shapes; a device's arrays must share their device.

    Returns
    -------
    list of ndarray
        One array per value, of its shape: float64 (float32 where the device has no
        float64), or the value's own dtype for a numpy array or a number.

    Notes
    -----
    The arrays of a library other than numpy are raveled, cast to the widest float of
    their device and concatenated there, so that a GPU synchronises once for all of them
    (a step's hyperparameter gradients are several small arrays).
    """
    on_device = [i for i, v in enumerate(values) if is_foreign(v)]
    out = [None if i in on_device else np.asarray(v) for i, v in enumerate(values)]
    if not on_device:
        return out
    first = values[on_device[0]]
    xp = namespace(first)
    dtype = widest_float(xp, device_of(first))
    flat = [xp.reshape(xp.astype(values[i], dtype), (-1,)) for i in on_device]
    host = to_numpy(xp.concat(flat) if len(flat) > 1 else flat[0])
    start = 0
    for i in on_device:
        shape = tuple(values[i].shape)
        size = int(np.prod(shape))
        out[i] = host[start : start + size].reshape(shape)
        start += size
    return out


def checks_on_device(a):
    """Whether a training step on arrays like ``a`` keeps its checks on the device and
    reads them every few steps (see :func:`skgp_sparse.linalg.deferred_checks`): every
    library but numpy, whose values are on the host, and whose fast path (one LAPACK or
    numba call per primitive) checks at once for free."""
    return is_foreign(a)


def to_namespace(a, xp, device=None, dtype=None):
    """``a`` as an array of namespace ``xp``, on ``device`` and of ``dtype``.

    Parameters
    ----------
    a : array of any supported library, or array-like
    xp : namespace
        Target namespace (``numpy`` or one returned by :func:`namespace`).
    device : device, optional
        Target device in ``xp``'s terms; by default the library's default device (or
        the array's own device when it is already of ``xp``).
    dtype : dtype of ``xp``, optional
        Target dtype; by default the dtype is kept.

    Returns
    -------
    array of ``xp``
        ``a`` itself when nothing needs to change.

    Notes
    -----
    Between two non-numpy libraries DLPack is tried first (no host round trip between
    CuPy and CUDA torch); otherwise the values go through host memory.
    """
    if is_numpy(xp):
        out = to_numpy(a)
        if dtype is not None and out.dtype != dtype:
            out = out.astype(dtype)
        return out
    if is_foreign(a):
        source = namespace(a)
        if source is xp or library(source) == library(xp) != "other":
            if device is not None and device_of(a) != device:
                a = _compat().to_device(a, device)
            if dtype is not None and a.dtype != dtype:
                a = xp.astype(a, dtype)
            return a
        try:
            moved = xp.from_dlpack(a)
        except (AttributeError, BufferError, TypeError, RuntimeError, ValueError):
            moved = None
        if moved is not None:
            return to_namespace(moved, xp, device=device, dtype=dtype)
        a = to_numpy(a)
    return xp.asarray(np.asarray(a), device=device, dtype=dtype)


def widest_float(xp, device=None):
    """float64 of ``xp``, or float32 where ``device`` has no float64 (Apple's MPS,
    array_api_strict's ``"no_float64"`` device)."""
    if xp is np:
        return np.float64
    info = getattr(xp, "__array_namespace_info__", None)
    if info is not None:
        try:
            available = info().dtypes(device=device, kind="real floating")
        except (TypeError, ValueError):  # an older inspection API without those arguments
            available = None
        if available is not None and "float64" not in available:
            return xp.float32
    return xp.float64


def working_float(xp, *arrays):
    """Floating dtype of a computation on ``arrays``: float32 if all are float32, else
    float64 of two floating dtypes' promotion, else the widest float of the device
    (integer inputs), as numpy's ``result_type(..., float32)`` gives."""
    dtypes = [a.dtype for a in arrays]
    if all(d == xp.float32 for d in dtypes):
        return xp.float32
    if all(d in (xp.float32, xp.float64) for d in dtypes):
        return xp.float64
    return widest_float(xp, device_of(arrays[0]))


def owned_float_copy(points):
    """The namespace of ``points`` and a floating copy of them that a model can own.

    numpy (or array-like) input gives a float64 numpy array, the host's working precision;
    an array of another library gives an array of that library, on its device, in its
    floating dtype (float32 stays float32).

    Returns
    -------
    xp : namespace
    copy : array of ``xp``
    """
    xp = input_namespace(points)
    if is_numpy(xp):
        return xp, np.array(points, dtype=np.float64)
    return xp, xp.asarray(xp.astype(points, working_float(xp, points)), copy=True)


def device_namespace(name):
    """The namespace and device of the GPU library ``name``, for ``backend=name``.

    Parameters
    ----------
    name : {"cupy", "torch"}
        ``"cupy"``: CuPy on its current device; ``"torch"``: PyTorch on its current
        CUDA device.

    Returns
    -------
    xp : namespace
        The library as :mod:`array_api_compat` wraps it.
    device : device object of that library

    Raises
    ------
    ImportError
        The library (or array-api-compat) is not installed.
    RuntimeError
        The library is installed but sees no usable GPU.
    """
    compat = _compat()
    if name == "cupy":
        try:
            import cupy
        except ImportError as exc:
            raise ImportError(
                "backend='cupy' needs CuPy, which is not installed: pip install -e '.[gpu]' "
                "or the cupy-cudaXXx wheel matching your CUDA (or use backend='numpy')"
            ) from exc
        try:
            n_devices = cupy.cuda.runtime.getDeviceCount()
        except Exception as exc:  # CUDARuntimeError when no driver is present
            raise RuntimeError(f"backend='cupy': CuPy is installed but CUDA is not usable ({exc}); use backend='numpy'") from exc
        if n_devices == 0:
            raise RuntimeError("backend='cupy': CuPy is installed but finds no GPU; use backend='numpy'")
        return compat.array_namespace(cupy.empty(0)), cupy.cuda.Device()
    if name == "torch":
        try:
            import torch
        except ImportError as exc:
            raise ImportError("backend='torch' needs PyTorch, which is not installed (or use backend='numpy')") from exc
        if not torch.cuda.is_available():
            raise RuntimeError(
                "backend='torch': PyTorch is installed but sees no CUDA device; use backend='numpy' "
                "(or pass CPU tensors under scikit-learn's array_api_dispatch)"
            )
        device = torch.device("cuda", torch.cuda.current_device())
        return compat.array_namespace(torch.empty(0)), device
    raise ValueError(f"no GPU library called {name!r}; expected 'cupy' or 'torch'")


# --------------------------------------------------------------------------------------
# inputs and constants of the likelihoods
# --------------------------------------------------------------------------------------
def input_namespace(*arrays):
    """Namespace of a computation's inputs, numpy unless one of them is of another library.

    The entry check of code that keeps a numpy path as it was: numpy arrays, numpy and
    Python scalars, lists and None give ``numpy`` (what that code has always converted
    with ``np.asarray``) after a type test or two per input, without importing
    :mod:`array_api_compat`.

    Parameters
    ----------
    *arrays : arrays, array-likes, scalars or None

    Returns
    -------
    xp : module
        ``numpy``, or the namespace :func:`namespace` finds for the inputs.

    Raises
    ------
    TypeError
        If an array of another library comes with a numpy array or a list (no implicit
        transfer), or arrays of two other libraries meet.
    """
    if not any(is_foreign(a) for a in arrays):
        return np
    return namespace(*arrays)


#: Host constants already converted by :func:`constant`, keyed by target and content.
_CONSTANTS = {}
#: Entries :func:`constant` keeps; the oldest goes first. A few per likelihood and device.
_CONSTANTS_KEPT = 64
_CONSTANTS_LOCK = threading.Lock()


def constant(values, like, dtype=None):
    """Small host constants (quadrature nodes, fixed draws) next to the array ``like``.

    Parameters
    ----------
    values : ndarray or array-like
        The constants, on the host.
    like : array
        Gives the namespace and the device.
    dtype : dtype of ``like``'s namespace, optional
        Default: ``like.dtype``.

    Returns
    -------
    array
        ``values`` in ``like``'s namespace, on its device, of ``dtype``; for a numpy
        ``like``, ``values`` as a numpy array (cast only if ``dtype`` asks for it).
        Treat it as read-only: it is shared between calls.

    Notes
    -----
    The converted array is cached per (library, device, dtype, values), so that a GPU
    receives each constant once rather than at every call. The cache is a bounded
    memo of a pure function, not a setting: nothing reads it but this function.
    """
    xp = namespace(like)
    host = np.asarray(values)
    if xp is np:
        return host if dtype is None or host.dtype == dtype else host.astype(dtype)
    device = device_of(like)
    dtype = like.dtype if dtype is None else dtype
    key = (library(xp), device, dtype, host.dtype.str, host.shape, host.tobytes())
    try:
        hash(key)
    except TypeError:  # a library whose device or dtype objects are unhashable: no memo
        return xp.asarray(host, device=device, dtype=dtype)
    with _CONSTANTS_LOCK:
        hit = _CONSTANTS.get(key)
    if hit is not None:
        return hit
    out = xp.asarray(host, device=device, dtype=dtype)
    with _CONSTANTS_LOCK:
        if len(_CONSTANTS) >= _CONSTANTS_KEPT:
            _CONSTANTS.pop(next(iter(_CONSTANTS)))
        _CONSTANTS[key] = out
    return out


# --------------------------------------------------------------------------------------
# the likelihoods' inputs
# --------------------------------------------------------------------------------------
def likelihood_floats(xp, reference, *arrays, numpy_as_float64=True):
    """``arrays`` in the floating dtype the likelihoods compute in.

    Parameters
    ----------
    xp : namespace
        Namespace of the call, as :func:`input_namespace` finds it.
    reference : tuple of arrays
        The latent marginals, whose working float (:func:`working_float`) sets the dtype
        for a library other than numpy.
    *arrays : arrays of ``xp`` (array-likes too for numpy)
        Targets and marginals.
    numpy_as_float64 : bool, default=True
        numpy: True converts to float64 arrays, lists accepted and float32 widened (the
        likelihoods' per-row terms are O(B) work, taken in float64 for an accurate
        quadrature, as the numpy code always took them); False returns the arrays as they
        are, for elementwise arithmetic under numpy's own promotion rules (as the
        Gaussian likelihood always let an integer or float64 target meet float32
        marginals).

    Returns
    -------
    tuple of arrays of ``xp``
        numpy: as ``numpy_as_float64`` says; another library: the working float of
        ``reference``, so that a float32 fit on a device stays in float32 (integer
        targets are cast to it: the standard does not mix integer and floating arrays).
    """
    if xp is np:
        return tuple(np.asarray(a, dtype=np.float64) for a in arrays) if numpy_as_float64 else arrays
    dtype = working_float(xp, *reference)
    return tuple(xp.astype(a, dtype, copy=False) for a in arrays)


def float_targets(y):
    """Targets as a floating array of their own library, for a likelihood's checks.

    Parameters
    ----------
    y : array of any supported library, or array-like

    Returns
    -------
    xp : namespace
        Namespace of ``y`` (:func:`input_namespace`).
    y : array of ``xp``
        numpy (array-likes included): float64, as the numpy code always took targets;
        another library: a floating array as it is, an integer one cast to the widest
        float of its device.
    """
    xp = input_namespace(y)
    if xp is np:
        return xp, np.asarray(y, dtype=np.float64)
    if not xp.isdtype(y.dtype, "real floating"):
        y = xp.astype(y, widest_float(xp, device_of(y)))
    return xp, y
