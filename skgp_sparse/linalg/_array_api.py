"""The Array API back end of :mod:`skgp_sparse.linalg`: the same operations for arrays of
any other library (CuPy, PyTorch, ``array_api_strict``, ...), in their namespace and on
their device.

Products are written once with ``matmul``. The standard also has a Cholesky
factorisation, but no triangular solve, and every library reports a failed
factorisation differently; those two are filled in per library:

* torch: ``torch.linalg.cholesky_ex`` (its ``info``) and ``torch.linalg.solve_triangular``.
* cupy: ``cupy.linalg.cholesky`` under ``cupyx.errstate(linalg="raise")`` (cuSOLVER's
  ``devInfo`` is ignored otherwise) and ``cupyx.scipy.linalg.solve_triangular``.
* a namespace wrapping numpy (``array_api_compat.numpy``): the LAPACK and BLAS routines
  of :mod:`._numpy`.
* array_api_strict and any other library: ``xp.linalg.cholesky`` (a raised
  ``LinAlgError`` is a failure) and a blocked substitution in standard operations.

Every branch but numpy's also checks that the factor is finite: CuPy (with the default
error state) and JAX return NaN silently instead of raising. All arguments of one call
must belong to the same library.
"""

import numpy as np

from .. import backend as be
from . import _numpy
from ._deferred import pending_flags
from ._jitter import FLOAT32_MIN_JITTER, CholeskyError, retry_with_jitter

#: Rows per block of the generic triangular substitution (:func:`_substitute`): each
#: block costs one ``matmul`` for its right-hand side and one rank-1 update per row.
_SUBSTITUTION_BLOCK = 32


# --------------------------------------------------------------------------------------
# small helpers (the standard has them under other names, or not at all)
# --------------------------------------------------------------------------------------
def eye(n, like):
    """Identity of the namespace, dtype and device of the array ``like``."""
    xp = be.namespace(like)
    if xp is np:
        return np.eye(n, dtype=like.dtype)
    return xp.eye(n, dtype=like.dtype, device=be.device_of(like))


def diagonal(a, xp):
    """Main diagonal of a square matrix, shape ``(n,)``."""
    linalg = getattr(xp, "linalg", None)
    if linalg is not None and hasattr(linalg, "diagonal"):
        return linalg.diagonal(a)
    return xp.sum(a * eye(a.shape[0], a), axis=1)


def trace(a, xp):
    """Trace of a square matrix as a 0-d array (no device-to-host synchronisation)."""
    return xp.sum(diagonal(a, xp))


def add_to_diagonal(a, value):
    """``a + value * I`` as a new array.

    torch: a copy of ``a`` whose diagonal view is updated in place (one M x M array,
    where ``a + value * I`` makes three); other libraries: with an identity (the standard
    has no writable diagonal).
    """
    xp = be.namespace(a)
    if be.library(xp) == "torch":
        out = a.clone()
        out.diagonal().add_(value)
        return out
    return a + value * eye(a.shape[0], a)


def _astype(a, dtype, xp):
    if xp is np:
        return a.astype(dtype)
    return xp.astype(a, dtype)


# --------------------------------------------------------------------------------------
# products
# --------------------------------------------------------------------------------------
def mm(a, b, trans_a, trans_b):
    """``op(a) @ op(b)`` by ``matmul``, in the working float of the two."""
    xp = be.namespace(a, b)
    squeeze = []
    if a.ndim == 1:
        a, trans_a = xp.reshape(a, (1, -1)), False
        squeeze.append(0)
    if b.ndim == 1:
        b, trans_b = xp.reshape(b, (-1, 1)), False
        squeeze.append(1)
    dtype = be.working_float(xp, a, b)
    a = xp.astype(a, dtype, copy=False)
    b = xp.astype(b, dtype, copy=False)
    c = (xp.matrix_transpose(a) if trans_a else a) @ (xp.matrix_transpose(b) if trans_b else b)
    if squeeze:
        c = xp.reshape(c, tuple(s for i, s in enumerate(c.shape) if i not in squeeze))
    return c


def gram(a, trans):
    """``a @ a.T`` (or ``a.T @ a``), exactly symmetric."""
    xp = be.namespace(a)
    a = xp.astype(a, be.working_float(xp, a), copy=False)
    g = xp.matrix_transpose(a) @ a if trans else a @ xp.matrix_transpose(a)
    return _mirrored_lower(g, xp)


def weighted_gram(a, h):
    """``a @ diag(h) @ a.T`` by one ``matmul``, exactly symmetric; ``h`` is not read
    (its signs would decide between SYRKs on the host, a read on a device)."""
    return _mirrored_lower(mm(a * h, a, False, True), be.namespace(a, h))


def _mirrored_lower(g, xp):
    """``g``'s lower triangle mirrored above its diagonal: exactly symmetric, as SYRK's
    output is (a product's two triangles may differ in their last bits)."""
    return xp.tril(g) + xp.matrix_transpose(xp.tril(g, k=-1))


def sym_mm(sym, b):
    """``sym @ b`` by ``matmul`` (no library offers SYMM through the standard)."""
    return be.namespace(sym, b).matmul(sym, b)


# --------------------------------------------------------------------------------------
# Cholesky
# --------------------------------------------------------------------------------------
def _factor(a, xp):
    """Lower Cholesky factor of ``a`` and whether it succeeded, with LAPACK's ``info``
    when the library reports one (None otherwise). Never raises for an indefinite
    matrix."""
    lib = be.library(xp)
    if lib == "numpy":
        low, info = _numpy.potrf(np.asarray(a))
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


def _factor_noting(a, xp, flags):
    """Lower Cholesky factor of ``a`` without a read of the device: a failed
    factorisation or a non-finite factor is noted in ``flags`` (see
    :mod:`._deferred`), and the factor is then meaningless."""
    lib = be.library(xp)
    if lib == "torch":
        import torch

        low, info = torch.linalg.cholesky_ex(a)
        # A NaN of the lower triangle reaches the diagonal of its row: the diagonal
        # alone tells a non-finite factor.
        flags.note((info != 0) | ~xp.all(xp.isfinite(diagonal(low, xp))))
        return low
    if lib == "cupy":
        return _cupy_factor_noting(a, xp, flags)
    # array_api_strict and any other library: a raised error is known on the host
    # without a read; a non-finite factor is noted.
    try:
        low = xp.linalg.cholesky(a)
    except (np.linalg.LinAlgError, RuntimeError, ValueError):
        # Any lower factor will do: the noted failure sends the step to the careful path.
        flags.note(_raised(a, xp))
        return eye(a.shape[0], a)
    flags.note(~xp.all(xp.isfinite(diagonal(low, xp))))
    return low


def _cupy_factor_noting(a, xp, flags):
    """CuPy's place for a factorisation that reports its failure on the device.

    ``cupy.linalg.cholesky`` reads cuSOLVER's ``devInfo`` to the host only under
    ``cupyx.errstate(linalg="raise")`` and otherwise leaves garbage, finite or not, past a
    failing pivot; it also copies its input. What belongs here is cuSOLVER's ``potrf`` on
    the fresh jittered matrix (which may be overwritten) with ``devInfo != 0`` noted in
    ``flags`` as a 0-d device array. Until that is written and tested on a GPU, CuPy
    takes the careful factorisation, which reads the device once per call.
    """
    low, ok, _ = _factor(a, xp)
    if not ok:
        flags.note(_raised(a, xp))
        return eye(a.shape[0], a)
    return low


def _raised(like, xp):
    """A raised flag (a 0-d True) on the device of ``like``, for a failure the host
    already knows."""
    return xp.asarray(True, device=be.device_of(like))


def _check_finite(a, xp, message):
    if not bool(xp.all(xp.isfinite(a))):
        raise CholeskyError(message)


def cholesky(a, xp):
    """Lower Cholesky factor; :class:`CholeskyError` for a NaN or infinite entry or a
    matrix that is not numerically positive definite."""
    flags = pending_flags()
    if flags is not None:
        return _factor_noting(a, xp, flags)
    low, ok, info = _factor(a, xp)
    if not ok:
        _check_finite(a, xp, "matrix to factorise contains NaN or inf")
        detail = "" if info is None else f" (leading minor {info})"
        raise CholeskyError(f"matrix is not positive definite{detail}")
    return low


def jittered_cholesky(a, xp, jitter, max_tries, what, stacklevel):
    """Cholesky of ``a + jitter * mean(diag(a)) * I`` with the jitter schedule of
    :func:`._jitter.retry_with_jitter` (which warns at ``stacklevel``).

    On a GPU each attempt synchronises once with the host (to learn whether it
    succeeded), and the scale ``mean(diag(a))`` once more. A float32 matrix starts
    from :data:`FLOAT32_MIN_JITTER`, and if it fails at that first jitter it is
    factorised in float64 and its factor cast back, as on numpy (except on a device
    without float64, see :func:`skgp_sparse.backend.widest_float`).

    Within :func:`._deferred.deferred_checks`, one attempt at the first jitter, with
    the scale kept on the device; a non-finite input or a failed factorisation is noted
    for the caller's replay on this careful path (which then warns and retries).
    """
    flags = pending_flags()
    if flags is not None:
        return _jittered_cholesky_noting(a, xp, jitter, flags)
    _check_finite(a, xp, f"{what} contains NaN or inf; check the inputs and the kernel hyperparameters")
    scale = float(xp.mean(diagonal(a, xp)))
    if not scale > 0:
        scale = 1.0

    def factor_in(dtype):
        def factor(added):
            matrix = a if a.dtype == dtype else _astype(a, dtype, xp)
            low, ok, _ = _factor(add_to_diagonal(matrix, added), xp)
            return (_astype(low, a.dtype, xp) if ok and low.dtype != a.dtype else low), ok

        return factor

    wide = be.widest_float(xp, be.device_of(a))
    if a.dtype == xp.float32:
        jitter = max(jitter, FLOAT32_MIN_JITTER)
    return retry_with_jitter(
        factor_in(a.dtype), scale, jitter, max_tries, what, stacklevel=stacklevel,
        wide_factor=factor_in(wide) if a.dtype != wide else None,
    )


def _jittered_cholesky_noting(a, xp, jitter, flags):
    """The factor and the relative jitter of the first attempt of
    :func:`jittered_cholesky`, with nothing read from the device."""
    diag = diagonal(a, xp)
    # A NaN or inf off the diagonal reaches the factor's diagonal, which the
    # factorisation checks; the input's own diagonal is checked here.
    flags.note(~xp.all(xp.isfinite(diag)))
    scale = xp.mean(diag)
    scale = xp.where(scale > 0, scale, xp.ones_like(scale))
    if a.dtype == xp.float32:
        jitter = max(jitter, FLOAT32_MIN_JITTER)
    return _factor_noting(add_to_diagonal(a, jitter * scale), xp, flags), jitter


# --------------------------------------------------------------------------------------
# triangular solves and products
# --------------------------------------------------------------------------------------
def solve_triangular(low, b, xp, trans, right):
    """``op(low)^-1 b`` (or ``b op(low)^-1`` with ``right``), reading only the lower
    triangle of ``low``; a 1-D ``b`` is a column (a row with ``right``)."""
    vector = b.ndim == 1
    if vector:
        b = xp.reshape(b, (1, -1) if right else (-1, 1))
    x = _solve_2d(low, b, xp, trans, right)
    if vector:
        return x[0, :] if right else x[:, 0]
    return x


def _solve_2d(low, b, xp, trans, right):
    lib = be.library(xp)
    if lib == "numpy":
        return _numpy.solve_triangular(low, b, trans, right)
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


def tri_mm(low, b, xp, trans, right, zeros_above=False):
    """``op(low) @ b`` (or ``b @ op(low)``) by ``matmul`` with the lower triangle of
    ``low`` (no library offers TRMM through the standard, and a GEMM on a GPU is as
    fast); ``low`` as it is when its upper triangle is known to be zero."""
    tri = low if zeros_above else xp.tril(low)
    if trans:
        tri = xp.matrix_transpose(tri)
    return b @ tri if right else tri @ b


# --------------------------------------------------------------------------------------
# inverses and the reverse mode of the Cholesky factorisation
# --------------------------------------------------------------------------------------
def tri_inverse(low):
    """Inverse of a lower triangular matrix, by a triangular solve against the identity."""
    xp = be.namespace(low)
    singular = xp.any(diagonal(low, xp) == 0)
    flags = pending_flags()
    if flags is not None:
        flags.note(singular)
    elif bool(singular):
        raise CholeskyError("triangular factor is singular")
    # Forward substitution against I leaves exact zeros above the diagonal: no tril.
    return solve_triangular(low, eye(low.shape[0], low), xp, False, False)


def inverse_cholesky_factor(precision):
    """Lower ``L`` with ``L L^T = precision^-1``: ``J chol(J P J)^-T J``."""
    xp = be.namespace(precision)
    c = cholesky(xp.flip(precision, axis=(0, 1)), xp)
    return xp.flip(xp.matrix_transpose(tri_inverse(c)), axis=(0, 1))


def cholesky_backward(low, low_bar, lt_low_bar, inv_low):
    """Adjoint of ``A`` from that of ``low = chol(A)`` (Murray 2016, eq. 10)."""
    xp = be.namespace(low)
    t = xp.matrix_transpose
    if lt_low_bar is None:
        lt_low_bar = tri_mm(low, xp.tril(low_bar), xp, True, False)
    if inv_low is not None:
        inner = tri_mm(inv_low, _mirrored_lower(lt_low_bar, xp), xp, True, False, zeros_above=True)
        return 0.5 * tri_mm(inv_low, inner, xp, False, True, zeros_above=True)
    # Phi: the lower triangle with a halved diagonal.
    lower = xp.tril(lt_low_bar)
    phi = 0.5 * (lower + xp.tril(lt_low_bar, k=-1))
    x = solve_triangular(low, phi, xp, True, False)
    x = solve_triangular(low, x, xp, False, True)
    return 0.5 * (x + t(x))


def jittered_cholesky_backward(low, lt_low_bar, jitter, inv_low):
    """Adjoint of K from that of ``low = chol(K + jitter * mean(diag K) I)``."""
    xp = be.namespace(low)
    k_bar = cholesky_backward(low, None, lt_low_bar, inv_low)
    return add_to_diagonal(k_bar, jitter * trace(k_bar, xp) / k_bar.shape[0])


# --------------------------------------------------------------------------------------
# the fused passes and array helpers of the bases (numpy: :mod:`._fused`, :mod:`._numpy`)
# --------------------------------------------------------------------------------------
def outer_plus_scaled_difference(s_a, a, q_mean, d_mean, h):
    """``q_mean @ d_mean.T + 2 * (s_a - a) * h``, a new array."""
    return 2.0 * (s_a - a) * h + q_mean @ d_mean.T


def add_scaled_difference(out, s_a, a, h):
    """``out + 2 * (s_a - a) * h``, a new array."""
    return out + 2.0 * (s_a - a) * h


def outer_plus_scaled(w, alpha, d_mean, h):
    """``alpha @ d_mean.T + 2 * w * h``, a new array."""
    return 2.0 * w * h + alpha @ d_mean.T


def add_scaled(out, w, h):
    """``out + 2 * w * h``, a new array."""
    return out + 2.0 * w * h


def column_products(base, a, b):
    """``base + colsum(a * b)``."""
    return base + be.namespace(a, b).sum(a * b, axis=0)


def column_dots(a, b):
    """``colsum(a * b)``."""
    return be.namespace(a, b).sum(a * b, axis=0)


def minus_column_squares(base, a):
    """``base - colsum(a * a)``."""
    return base - be.namespace(a).sum(a * a, axis=0)


def column_variances(kdiag, a, lt_a_list):
    """``kdiag - colsum(a * a) + colsum(lt_a * lt_a)`` for each ``lt_a``, shape (B, C)."""
    prior = minus_column_squares(kdiag, a)
    return be.namespace(a).stack([column_products(prior, lta, lta) for lta in lt_a_list], axis=1)


def copy_array(a):
    """An independent copy of ``a``, on its device."""
    return be.namespace(a).asarray(a, copy=True)


def all_finite(a):
    """Whether every entry of ``a`` is finite (one bool read back from the device, or
    within :func:`._deferred.deferred_checks` True with the contrary noted)."""
    xp = be.namespace(a)
    finite = xp.all(xp.isfinite(a))
    flags = pending_flags()
    if flags is None:
        return bool(finite)
    flags.note(~finite)
    return True


def same_values(a, b):
    """Whether two arrays hold the same values (one bool read back from the device).

    Within :func:`._deferred.deferred_checks` only the same array counts (equal values
    could not be told without a read): a cache then recomputes what it cannot prove
    unchanged."""
    if pending_flags() is not None:
        return a is b
    return a.shape == b.shape and bool(be.namespace(a, b).all(a == b))


# --------------------------------------------------------------------------------------
# the inverse-free basis
# --------------------------------------------------------------------------------------
def tril_halved_diagonal(a):
    """The lower triangle of ``a`` with its diagonal halved, a new array."""
    xp = be.namespace(a)
    # The strict lower triangle plus half the diagonal (triangles, not a product with I,
    # so that a non-finite entry stays where it is).
    return xp.tril(a, k=-1) + 0.5 * xp.triu(xp.tril(a))


# --------------------------------------------------------------------------------------
# the orthogonally decoupled basis
# --------------------------------------------------------------------------------------
def add_to_rows(base, index, values):
    """``base + E @ values`` with the (n x c) selection matrix ``E[index[j], j] = 1``: the
    standard has no scatter, and a product with zeros and ones adds the rows exactly."""
    xp = be.namespace(base, index, values)
    n, c = base.shape[0], index.shape[0]
    hit = xp.reshape(xp.arange(n, device=be.device_of(base)), (n, 1)) == xp.reshape(index, (1, c))
    return base + xp.astype(hit, values.dtype) @ values


# --------------------------------------------------------------------------------------
# the likelihoods
# --------------------------------------------------------------------------------------
def add_at_last_index(a, index, value):
    """``a`` plus ``value`` where the last axis equals each row's ``index``: a new array
    (the standard has no scatter, and some libraries no in-place writes)."""
    xp = be.namespace(a)
    positions = xp.arange(a.shape[-1], device=be.device_of(a))
    hit = positions == xp.reshape(index, (-1,) + (1,) * (a.ndim - 1))
    return xp.where(hit, a + value, a)


def middle_axis_dot(a, b):
    """``sum_s a[n, s, k] * b[s, k]`` as the product summed over its middle axis."""
    return be.namespace(a, b).sum(a * b, axis=1)


def update_rows(target, rows, compute, *operands):
    """``compute`` on every row, its values taken where ``rows`` holds: no boolean
    indexing (a data-dependent size) and no in-place write."""
    return be.namespace(target).where(rows, compute(*operands), target)
