"""The seam between this package and the array libraries it runs on.

The package's array code is written against an array *namespace* ``xp`` (today
:mod:`.linalg` and the compiled kernels; the bases, likelihoods and training loop are
to follow): numpy itself, or the `Array API <https://data-apis.org/array-api/>`_
namespace of another library as :mod:`array_api_compat` wraps it (CuPy, PyTorch on CPU
or CUDA, ``array_api_strict`` as the CI stand-in for a GPU library). The standard covers
elementwise maths, reductions, ``matmul`` and a Cholesky factorisation; it has no
triangular solve, reports a failed factorisation differently in every library, and has
no conversion between libraries. Those gaps are filled here, and only here: this is the
one module of the package with a branch per library.

Per library:

* numpy: the BLAS/LAPACK routines of :mod:`.linalg` (LAPACK's ``info`` reports a failed
  Cholesky; TRSM solves).
* torch: ``torch.linalg.cholesky_ex`` (its ``info``) and ``torch.linalg.solve_triangular``.
* cupy: ``cupy.linalg.cholesky`` under ``cupyx.errstate(linalg="raise")`` (cuSOLVER's
  ``devInfo`` is ignored otherwise) and ``cupyx.scipy.linalg.solve_triangular``.
* array_api_strict and any other library: ``xp.linalg.cholesky`` (a raised
  ``LinAlgError`` is a failure) and a blocked substitution in standard operations.

Every branch but numpy's also checks that the factor is finite: CuPy (with the default
error state) and JAX return NaN silently instead of raising.

Numpy arrays never reach the generic code: for them every function here hands over to
the single-BLAS-call routines of :mod:`.linalg`, unchanged. :mod:`array_api_compat` is
imported only when an array of another library is met, so numpy-only installations do
not need it.

The special functions the likelihoods need (``log_ndtr``, ``erfcx``, ``gammaln``, ...)
live beside them, in :mod:`skgp_sparse.likelihoods._special`.
:func:`input_namespace` is the entry check of code whose numpy path stays as it was, and
:func:`constant` puts small host constants (quadrature nodes) on a device once.
"""

import sys
import threading
import numpy as np

from . import linalg as _la
from .linalg import DEFAULT_JITTER, MAX_JITTER_TRIES, CholeskyError

__all__ = [
    "namespace",
    "is_numpy",
    "library",
    "is_foreign",
    "device_of",
    "to_namespace",
    "device_namespace",
    "to_numpy",
    "widest_float",
    "working_float",
    "shape_of",
    "cholesky",
    "jittered_cholesky",
    "solve_triangular",
    "tri_mm",
    "eye",
    "diagonal",
    "trace",
    "add_to_diagonal",
    "input_namespace",
    "constant",
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

#: Rows per block of the generic triangular substitution (:func:`_substitute`): each
#: block costs one ``matmul`` for its right-hand side and one rank-1 update per row.
_SUBSTITUTION_BLOCK = 32


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
def is_foreign(a):
    """Whether ``a`` is an array of a library other than numpy that this package runs on.

    True for objects that declare an Array API namespace (``__array_namespace__``: CuPy,
    ``array_api_strict``, JAX) and for PyTorch tensors, which do not declare one. False
    for numpy arrays and for everything else (lists, pandas or Dask objects), which the
    callers keep converting with ``np.asarray`` as before.
    """
    if isinstance(a, np.ndarray):
        return False
    if hasattr(type(a), "__array_namespace__"):
        return True
    # Checked through sys.modules so that torch is never imported by this test.
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(a, torch.Tensor)


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
    if isinstance(a, np.ndarray):
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
# small generic helpers (the standard has them under other names, or not at all)
# --------------------------------------------------------------------------------------
def eye(n, like):
    """Identity of the namespace, dtype and device of the array ``like``."""
    xp = namespace(like)
    if xp is np:
        return np.eye(n, dtype=like.dtype)
    return xp.eye(n, dtype=like.dtype, device=device_of(like))


def diagonal(a, xp=None):
    """Main diagonal of a square matrix, shape ``(n,)``."""
    xp = namespace(a) if xp is None else xp
    if xp is np:
        return np.diagonal(a)
    linalg = getattr(xp, "linalg", None)
    if linalg is not None and hasattr(linalg, "diagonal"):
        return linalg.diagonal(a)
    return xp.sum(a * eye(a.shape[0], a), axis=1)


def trace(a, xp=None):
    """Trace of a square matrix: a Python float for numpy, a 0-d array otherwise (no
    device-to-host synchronisation)."""
    xp = namespace(a) if xp is None else xp
    if xp is np:
        return float(np.trace(a))
    return xp.sum(diagonal(a, xp))


def add_to_diagonal(a, value, xp=None):
    """``a + value * I`` as a new array (``a`` is not modified)."""
    xp = namespace(a) if xp is None else xp
    if xp is np:
        out = a.copy()
        out.flat[:: out.shape[0] + 1] += value
        return out
    return a + value * eye(a.shape[0], a)


# --------------------------------------------------------------------------------------
# Cholesky
# --------------------------------------------------------------------------------------
def _factor(a, xp):
    """Lower Cholesky factor of ``a`` and whether it succeeded, with LAPACK's ``info``
    when the library reports one (None otherwise). Never raises for an indefinite
    matrix."""
    lib = library(xp)
    if lib == "numpy":
        low, info = _la.potrf(np.asarray(a))
        return low, info == 0, info
    if lib == "torch":
        import torch

        low, info = torch.linalg.cholesky_ex(a)
        # One synchronisation for both checks: info alone misses a NaN input.
        ok = bool((info == 0) & torch.all(torch.isfinite(low)))
        return low, ok, (None if ok else int(info))
    if lib == "cupy":
        import cupy
        import cupyx

        # cuSOLVER's devInfo is ignored by default and the factor then holds garbage
        # past the failing pivot, finite or not; the "raise" state checks it.
        try:
            with cupyx.errstate(linalg="raise"):
                low = cupy.linalg.cholesky(a)
        except np.linalg.LinAlgError:
            return None, False, None
        return low, bool(cupy.all(cupy.isfinite(low))), None
    # array_api_strict (numpy's LAPACK underneath, raising LinAlgError) and any other
    # library: a raised error or a non-finite factor is a failure.
    try:
        low = xp.linalg.cholesky(a)
    except (np.linalg.LinAlgError, RuntimeError, ValueError):
        return None, False, None
    return low, bool(xp.all(xp.isfinite(low))), None


def _check_finite(a, xp, message):
    if not bool(xp.all(xp.isfinite(a))):
        raise CholeskyError(message)


def cholesky(a, xp=None):
    """Lower Cholesky factor of a symmetric positive definite matrix, in ``a``'s namespace.

    Parameters
    ----------
    a : array of shape (m, m)
    xp : namespace, optional
        Namespace of ``a`` (found from ``a`` when omitted).

    Returns
    -------
    low : array of shape (m, m), lower triangular, same namespace, device and dtype.

    Raises
    ------
    CholeskyError
        If ``a`` has a NaN or infinite entry, or is not numerically positive definite.
    """
    xp = namespace(a) if xp is None else xp
    if xp is np:
        return _la.cholesky(a)
    low, ok, info = _factor(a, xp)
    if not ok:
        _check_finite(a, xp, "matrix to factorise contains NaN or inf")
        detail = "" if info is None else f" (leading minor {info})"
        raise CholeskyError(f"matrix is not positive definite{detail}")
    return low


def jittered_cholesky(
    a, xp=None, jitter=DEFAULT_JITTER, max_tries=MAX_JITTER_TRIES, what="kernel matrix", _stacklevel=2
):
    """Cholesky of ``a + jitter * mean(diag(a)) * I``, retried with ten times more jitter.

    The semantics of :func:`skgp_sparse.linalg.jittered_cholesky` (which numpy arrays
    are handed to), for an array of any namespace: the same jitter sequence, the same
    :class:`~skgp_sparse.linalg.JitterWarning` when more than the first jitter was
    needed, the same :class:`~skgp_sparse.linalg.CholeskyError` messages.

    Parameters
    ----------
    a : array of shape (m, m)
    xp : namespace, optional
    jitter : float
        First relative jitter.
    max_tries : int
        Attempts, each with ten times the previous jitter.
    what : str
        Name of the matrix in the messages.

    Returns
    -------
    low : array
        Lower factor of the jittered matrix (namespace, device and dtype of ``a``).
    relative : float
        The relative jitter that succeeded.

    Notes
    -----
    On a GPU each attempt synchronises once with the host (to learn whether it
    succeeded), and the scale ``mean(diag(a))`` once more. A float32 matrix starts
    from :data:`~skgp_sparse.linalg.FLOAT32_MIN_JITTER`, and if it fails at that first
    jitter it is factorised in float64 and its factor cast back, as on numpy (except on
    a device without float64, see :func:`widest_float`).
    """
    xp = namespace(a) if xp is None else xp
    if xp is np:
        return _la.jittered_cholesky(a, jitter=jitter, max_tries=max_tries, what=what)
    _check_finite(a, xp, f"{what} contains NaN or inf; check the inputs and the kernel hyperparameters")
    scale = float(xp.mean(diagonal(a, xp)))
    if not scale > 0:
        scale = 1.0

    def factor_in(dtype):
        def factor(added):
            matrix = a if a.dtype == dtype else _astype(a, dtype, xp)
            low, ok, _ = _factor(matrix + added * eye(a.shape[0], matrix), xp)
            return (_astype(low, a.dtype, xp) if ok and low.dtype != a.dtype else low), ok

        return factor

    wide = widest_float(xp, device_of(a))
    if a.dtype == xp.float32:
        jitter = max(jitter, _la.FLOAT32_MIN_JITTER)
    return _la.retry_with_jitter(
        factor_in(a.dtype), scale, jitter, max_tries, what, stacklevel=_stacklevel + 2,
        wide_factor=factor_in(wide) if a.dtype != wide else None,
    )


def _astype(a, dtype, xp):
    if xp is np:
        return a.astype(dtype)
    return xp.astype(a, dtype)


# --------------------------------------------------------------------------------------
# triangular solves and products
# --------------------------------------------------------------------------------------
def solve_triangular(low, b, xp=None, trans=False, right=False):
    """Solve ``op(low) x = b`` (or ``x op(low) = b`` with ``right``), ``low`` lower triangular.

    Only the lower triangle of ``low`` is read.

    Parameters
    ----------
    low : array of shape (m, m)
    b : array of shape (m, n) or (m,); (n, m) or (m,) with ``right``
        A 1-D ``b`` is a column (a row with ``right``).
    xp : namespace, optional
    trans : bool
        Use ``low.T`` instead of ``low``.
    right : bool
        Solve from the right: ``x = b op(low)^-1``.

    Returns
    -------
    x : array of the shape of ``b``, namespace of ``low``.
    """
    xp = namespace(low, b) if xp is None else xp
    vector = b.ndim == 1
    if vector:
        b = _as_matrix(b, xp, row=right)
    x = _solve_2d(low, b, xp, trans, right)
    if vector:
        return x[0, :] if right else x[:, 0]
    return x


def _as_matrix(v, xp, row):
    if xp is np:
        return v[None, :] if row else v[:, None]
    return xp.reshape(v, (1, -1) if row else (-1, 1))


def _solve_2d(low, b, xp, trans, right):
    lib = library(xp)
    if lib == "numpy":
        return _la._triangular_right_side(_la._trsm_for, low, b, trans, right)
    if lib == "torch":
        import torch

        # op(L) is L (lower) or L^T (upper); torch reads only that triangle.
        a = low.mT if trans else low
        return torch.linalg.solve_triangular(a, b, upper=trans, left=not right)
    if lib == "cupy":
        from cupyx.scipy.linalg import solve_triangular as cupy_trsm

        if right:
            # x op(L) = b  <=>  op(L)^T x^T = b^T
            return cupy_trsm(low, b.T, trans=0 if trans else 1, lower=True).T
        return cupy_trsm(low, b, trans=1 if trans else 0, lower=True)
    return _generic_solve(low, b, xp, trans, right)


def _generic_solve(low, b, xp, trans, right):
    """Triangular solve in standard operations only, for libraries without one."""
    t = xp.matrix_transpose
    if right:
        # x op(L) = b  <=>  op(L)^T x^T = b^T; op(L)^T is L^T (upper) or L (lower).
        return t(_substitute(low if trans else t(low), t(b), lower=trans, xp=xp))
    return _substitute(t(low) if trans else low, b, lower=not trans, xp=xp)


def _substitute(tri, b, lower, xp):
    """Solve ``tri x = b`` by blocked forward (``lower``) or back substitution.

    The right-hand side of each block of :data:`_SUBSTITUTION_BLOCK` rows is updated with
    the rows already solved by one ``matmul``; inside a block the rows are solved one
    at a time with a rank-1 update of the rows left. Only the triangle named by
    ``lower`` is read. No in-place writes, so any Array API library can run it.
    """
    m = tri.shape[0]
    if m == 0:
        return b
    starts = list(range(0, m, _SUBSTITUTION_BLOCK))
    blocks = {}
    for k0 in starts if lower else reversed(starts):
        k1 = min(k0 + _SUBSTITUTION_BLOCK, m)
        rhs = b[k0:k1, :]
        if lower and k0 > 0:
            rhs = rhs - tri[k0:k1, :k0] @ xp.concat([blocks[s] for s in starts if s < k0], axis=0)
        elif not lower and k1 < m:
            rhs = rhs - tri[k0:k1, k1:] @ xp.concat([blocks[s] for s in starts if s >= k1], axis=0)
        rows = []
        if lower:
            rest = rhs
            for i in range(k0, k1):
                x = rest[:1, :] / tri[i, i]
                rows.append(x)
                rest = rest[1:, :] - tri[i + 1 : k1, i : i + 1] * x
        else:
            rest = rhs
            for i in range(k1 - 1, k0 - 1, -1):
                n_left = i - k0
                x = rest[n_left:, :] / tri[i, i]
                rows.append(x)
                rest = rest[:n_left, :] - tri[k0:i, i : i + 1] * x
            rows.reverse()
        blocks[k0] = xp.concat(rows, axis=0)
    return xp.concat([blocks[s] for s in starts], axis=0)


def tri_mm(low, b, xp=None, trans=False, right=False):
    """Product ``op(low) @ b`` (or ``b @ op(low)`` with ``right``) for a lower triangular
    ``low`` whose strict upper part is ignored.

    numpy: one TRMM (:func:`skgp_sparse.linalg.tri_mm`); other libraries: ``matmul``
    with the lower triangle of ``low`` (no library offers TRMM through the standard,
    and a GEMM on a GPU is as fast).
    """
    xp = namespace(low, b) if xp is None else xp
    if xp is np:
        return _la.tri_mm(low, b, trans=trans, right=right)
    tri = xp.tril(low)
    if trans:
        tri = xp.matrix_transpose(tri)
    return b @ tri if right else tri @ b


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
    # numpy scalars declare an Array API namespace (numpy 2), which is_foreign reads as
    # another library; they are numpy's.
    if not any(not isinstance(a, (np.ndarray, np.generic)) and is_foreign(a) for a in arrays):
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
