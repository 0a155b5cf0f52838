"""Dense linear algebra shared by every basis, all through scipy's BLAS and LAPACK.

Why one library: numpy and scipy wheels each bundle their own OpenBLAS with its own
thread pool. On a two-core machine, alternating the two pools inside a training step
costs more than the arithmetic (both pools spin while the other works), so every
product, Cholesky and triangular solve of a step goes through scipy's bindings here,
the same BLAS that numba's ``np.dot`` uses. Matrices may be C- or F-ordered; results
are C-ordered.

Arrays of other libraries (CuPy, PyTorch, any Array API namespace): every function
also accepts them, and answers in their namespace, on their device. A numpy array takes
the BLAS path above after a single ``isinstance`` check; anything else is routed to
:mod:`skgp_sparse.backend` (Cholesky and triangular solves, one branch per library) or
to the Array API versions at the end of this module (products, written once with
``matmul``). All arguments of one call must belong to the same library.
"""

import warnings

import numpy as np
from scipy.linalg import blas, lapack

__all__ = [
    "CholeskyError",
    "JitterWarning",
    "mm",
    "gram",
    "sym_mm",
    "cholesky",
    "jittered_cholesky",
    "solve_triangular",
    "tri_mm",
    "cho_solve",
    "inverse_cholesky_factor",
    "cholesky_backward",
    "tri_inverse",
]

DEFAULT_JITTER = 1e-6
MAX_JITTER_TRIES = 6
#: The smallest relative jitter a float32 matrix is factorised with: float32's machine
#: epsilon. Its entries carry rounding errors of about that much of the largest, which
#: can leave a nearly singular kernel matrix indefinite by as much: a smaller jitter
#: (such as ``jitter="auto"`` with little noise) cannot make it positive definite, in
#: float64 either, and would only spend the schedule's tries.
FLOAT32_MIN_JITTER = float(np.finfo(np.float32).eps)


class CholeskyError(np.linalg.LinAlgError):
    """A matrix stayed indefinite after every jitter retry."""


class JitterWarning(UserWarning):
    """More jitter than the default was needed to factorise a kernel matrix."""


def _fortran_operand(x, transposed):
    """Return (array, flag) with an F-ordered array such that op(array) == op(x)."""
    if x.flags.f_contiguous:
        return x, transposed
    if x.flags.c_contiguous:
        return x.T, not transposed
    return np.asfortranarray(x), transposed


def _gemm_for(dtype):
    return blas.sgemm if dtype == np.float32 else blas.dgemm


#: Products with at most this many columns go through GEMV, column by column: OpenBLAS's
#: GEMM with one or two columns is several times slower than its GEMV.
_GEMV_MAX_COLUMNS = 2


def _few_columns(a, b, trans_a, trans_b, dtype):
    """op(a) @ op(b) for an op(b) with few columns, by one GEMV per column."""
    gemv = blas.sgemv if dtype == np.float32 else blas.dgemv
    af, flag_a = _fortran_operand(a, trans_a)
    cols = b.T if trans_b else b
    out = np.empty((af.shape[1] if flag_a else af.shape[0], cols.shape[1]), dtype=dtype)
    for j in range(cols.shape[1]):
        out[:, j] = gemv(1.0, af, np.ascontiguousarray(cols[:, j]), trans=int(flag_a))
    return out


def mm(a, b, trans_a=False, trans_b=False):
    """Matrix product ``op(a) @ op(b)`` through scipy's BLAS, without copies.

    Parameters
    ----------
    a, b : ndarray of shape (m, k) and (k, n) after the optional transposes.
        1-D arrays are treated as a column (``b``) or a row (``a``).
    trans_a, trans_b : bool
        Use the transpose of ``a`` or ``b``.

    Returns
    -------
    ndarray, C-ordered.
    """
    if not isinstance(a, np.ndarray) and _backend.is_foreign(a):
        return _xp_mm(a, b, trans_a, trans_b)
    squeeze = []
    if a.ndim == 1:
        a = a[None, :]
        trans_a = False
        squeeze.append(0)
    if b.ndim == 1:
        b = b[:, None]
        trans_b = False
        squeeze.append(1)
    dtype = np.result_type(a.dtype, b.dtype, np.float32)
    a = a.astype(dtype, copy=False)
    b = b.astype(dtype, copy=False)
    n_cols = b.shape[0] if trans_b else b.shape[1]
    if n_cols <= _GEMV_MAX_COLUMNS:
        c = _few_columns(a, b, trans_a, trans_b, dtype)
    else:
        # C = op(a) op(b) is computed as C^T = op(b)^T op(a)^T, whose F-ordered result
        # is a C-ordered C once transposed back.
        bt, flag_b = _fortran_operand(b, not trans_b)
        at, flag_a = _fortran_operand(a, not trans_a)
        ct = _gemm_for(dtype)(1.0, bt, at, trans_a=flag_b, trans_b=flag_a)
        c = ct.T
    if squeeze:
        c = c.reshape([s for i, s in enumerate(c.shape) if i not in squeeze])
    return c


def gram(a, trans=False):
    """Symmetric product ``a @ a.T`` (or ``a.T @ a`` with ``trans``) by one SYRK, half a GEMM."""
    if not isinstance(a, np.ndarray) and _backend.is_foreign(a):
        return _xp_gram(a, trans)
    dtype = np.result_type(a.dtype, np.float32)
    a = a.astype(dtype, copy=False)
    syrk = blas.ssyrk if dtype == np.float32 else blas.dsyrk
    # With a C-ordered a, its F view is a^T: a a^T is then syrk(trans=1) of the view.
    af, flag = _fortran_operand(a, trans)
    c = syrk(1.0, af, trans=int(flag), lower=1)
    # SYRK writes the lower triangle of a zeroed output; mirror it.
    out = c + c.T
    out.flat[:: out.shape[0] + 1] *= 0.5
    return out


def sym_mm(sym, b):
    """Product ``sym @ b`` for a symmetric ``sym`` by one SYMM (faster than GEMM in OpenBLAS).

    Parameters
    ----------
    sym : ndarray of shape (m, m), symmetric, both triangles stored.
    b : ndarray of shape (m, n).

    Returns
    -------
    ndarray of shape (m, n), C-ordered.
    """
    if not isinstance(sym, np.ndarray) and _backend.is_foreign(sym):
        return _backend.namespace(sym, b).matmul(sym, b)
    dtype = np.result_type(sym.dtype, b.dtype, np.float32)
    symm = blas.ssymm if dtype == np.float32 else blas.dsymm
    # (sym b)^T = b^T sym: a right-side SYMM on the F view of a C-ordered b. A symmetric
    # matrix is its own transpose, so either layout of ``sym`` is read as it is.
    s = sym.astype(dtype, copy=False)
    if not s.flags.f_contiguous:
        s = s.T if s.flags.c_contiguous else np.asfortranarray(s)
    bt = np.ascontiguousarray(b, dtype=dtype).T
    return symm(1.0, s, bt, side=1, lower=1).T


def potrf(a):
    """LAPACK's Cholesky (float32 or float64) of a symmetric ``a``: the lower factor and
    LAPACK's ``info`` (0 on success, else the failing leading minor); never raises."""
    fn = lapack.spotrf if a.dtype == np.float32 else lapack.dpotrf
    # A C-ordered symmetric matrix is its own transpose: factorising its F view as
    # upper gives the transpose of the lower factor, with no copy.
    if a.flags.c_contiguous:
        u, info = fn(a.T, lower=0, clean=1, overwrite_a=0)
        return u.T, info
    return fn(a, lower=1, clean=1, overwrite_a=0)


def cholesky(a):
    """Lower Cholesky factor of a symmetric positive definite matrix.

    Raises
    ------
    CholeskyError
        If the matrix is not numerically positive definite.
    """
    if not isinstance(a, np.ndarray) and _backend.is_foreign(a):
        return _backend.cholesky(a)
    if not np.all(np.isfinite(a)):
        raise CholeskyError("matrix to factorise contains NaN or inf")
    low, info = potrf(a)
    if info != 0:
        raise CholeskyError(f"matrix is not positive definite (leading minor {info})")
    return low


def jittered_cholesky(a, jitter=DEFAULT_JITTER, max_tries=MAX_JITTER_TRIES, what="kernel matrix"):
    """Cholesky of ``a + jitter * mean(diag(a)) * I``, retried with ten times more jitter.

    Parameters
    ----------
    a : ndarray of shape (m, m)
        Symmetric matrix, numerically positive semi-definite.
    jitter : float
        First relative jitter; the absolute jitter is ``jitter * mean(diag(a))``.
    max_tries : int
        Attempts, each with ten times the previous jitter.
    what : str
        Name of the matrix in the error and warning messages.

    Returns
    -------
    low : ndarray
        Lower factor of the jittered matrix, of ``a``'s dtype.
    relative : float
        The relative jitter that succeeded (pass it back in to reuse it).

    Raises
    ------
    CholeskyError
        If every attempt failed; the message gives the largest jitter tried.

    Notes
    -----
    A float32 matrix starts from a relative jitter of at least
    :data:`FLOAT32_MIN_JITTER`. If it fails at that first jitter, it is factorised in
    float64 (with the jitter schedule from the same start) and its factor cast back: a
    kernel matrix often needs far more jitter in float32 (rounding grows like
    ``m * eps * cond``), while the products around its factor are fine in float32.
    """
    if not isinstance(a, np.ndarray) and _backend.is_foreign(a):
        return _backend.jittered_cholesky(a, None, jitter, max_tries, what, _stacklevel=3)
    if not np.all(np.isfinite(a)):
        raise CholeskyError(f"{what} contains NaN or inf; check the inputs and the kernel hyperparameters")
    scale = float(np.mean(np.diag(a)))
    if not scale > 0:
        scale = 1.0

    def factor_in(dtype):
        def factor(added):
            shifted = a.astype(dtype)  # a copy
            shifted.flat[:: a.shape[0] + 1] += added
            low, info = potrf(shifted)
            return low.astype(a.dtype, copy=False), info == 0

        return factor

    narrow = a.dtype == np.float32
    return retry_with_jitter(
        factor_in(a.dtype), scale, max(jitter, FLOAT32_MIN_JITTER) if narrow else jitter, max_tries, what,
        stacklevel=4, wide_factor=factor_in(np.float64) if narrow else None,
    )


def retry_with_jitter(factor, scale, jitter, max_tries, what, stacklevel, wide_factor=None):
    """The jitter schedule of :func:`jittered_cholesky`, for any factorisation.

    ``factor(added)`` factorises the matrix with ``added`` on its diagonal and returns
    ``(low, succeeded)``. It is tried with ``jitter * scale``, then ten times more each
    time (from 1e-10 when a zero jitter fails), at most ``max_tries`` times. A success
    after the first attempt warns (:class:`JitterWarning`, at ``stacklevel``); when every
    attempt fails, :class:`CholeskyError` names the largest jitter tried.

    ``wide_factor`` (float32 matrices): the same factorisation computed in float64, with
    the factor returned in float32. When the first attempt of ``factor`` fails, the
    schedule runs on ``wide_factor`` instead, from the same jitter.

    Returns
    -------
    low, relative : the factor and the relative jitter that succeeded
    """
    if wide_factor is not None:
        low, ok = factor(jitter * scale)
        if ok:
            return low, jitter
        factor = wide_factor
    rel = jitter
    tried = rel
    for attempt in range(max_tries):
        low, ok = factor(rel * scale)
        if ok:
            if attempt > 0:
                warnings.warn(
                    f"{what} needed a relative jitter of {rel:.0e} to be factorised",
                    JitterWarning,
                    stacklevel=stacklevel,
                )
            return low, rel
        tried = rel
        # A zero jitter that fails escalates from a tiny positive one.
        rel = rel * 10.0 if rel > 0 else 1e-10
    raise CholeskyError(
        f"{what} is not positive definite even with a relative jitter of {tried:.0e}; "
        "the kernel hyperparameters are probably degenerate (check for duplicated inducing "
        "points, a vanishing length scale or unscaled inputs)"
    )


def _trsm_for(dtype):
    return blas.strsm if dtype == np.float32 else blas.dtrsm


def solve_triangular(low, b, trans=False):
    """Solve ``op(low) x = b`` for a lower triangular ``low``.

    Parameters
    ----------
    low : ndarray of shape (m, m), lower triangular.
    b : ndarray of shape (m,) or (m, n).
    trans : bool
        Solve with ``low.T`` instead of ``low``.

    Returns
    -------
    ndarray of the shape of ``b``, C-ordered.
    """
    if not isinstance(low, np.ndarray) and _backend.is_foreign(low):
        return _backend.solve_triangular(low, b, trans=trans)
    vector = b.ndim == 1
    x = _triangular_right_side(_trsm_for, low, b[:, None] if vector else b, trans)
    return x[:, 0] if vector else x


def _triangular_right_side(routine_for, low, b, trans, right=False):
    """``op(low)^-1 b`` (TRSM) or ``op(low) b`` (TRMM) without copying C-ordered data;
    with ``right``, ``b op(low)`` (TRMM) instead.

    ``x = op(L) b`` is ``x^T = b^T op(L)^T``: a right-side operation on b^T, whose F view
    is the C-ordered b; L's F view is L (F-ordered) or its upper transpose (C-ordered).
    ``x = b op(L)`` is likewise ``x^T = op(L)^T b^T``, a left-side operation on b^T.
    """
    dtype = np.result_type(low.dtype, b.dtype, np.float32)
    low = low.astype(dtype, copy=False)
    bt = np.ascontiguousarray(b, dtype=dtype).T
    lf, flag, lower = low, True, True
    if low.flags.c_contiguous and not low.flags.f_contiguous:
        lf, flag, lower = low.T, False, False
    # op_A must equal op(L)^T: L^T when trans is False, L when it is True.
    trans_flag = flag if not trans else not flag
    xt = routine_for(dtype)(1.0, lf, bt, side=0 if right else 1, lower=lower, trans_a=int(trans_flag))
    return xt.T


def _trmm_for(dtype):
    return blas.strmm if dtype == np.float32 else blas.dtrmm


def tri_mm(low, b, trans=False, right=False):
    """Product ``op(low) @ b`` (or ``b @ op(low)``) for a lower triangular ``low``: half
    the flops of a GEMM.

    Parameters
    ----------
    low : ndarray of shape (m, m), lower triangular (the strict upper part is ignored).
    b : ndarray of shape (m, n), or (n, m) with ``right``.
    trans : bool
        Multiply by ``low.T`` instead of ``low``.
    right : bool
        Multiply ``b`` on the right: ``b @ op(low)``.
    """
    if not isinstance(low, np.ndarray) and _backend.is_foreign(low):
        return _backend.tri_mm(low, b, trans=trans, right=right)
    return _triangular_right_side(_trmm_for, low, b, trans, right)


def cho_solve(low, b):
    """Solve ``(low low^T) x = b`` given the lower Cholesky factor."""
    return solve_triangular(low, solve_triangular(low, b), trans=True)


def tri_inverse(low):
    """Inverse of a lower triangular matrix (lower triangular, C-ordered)."""
    if not isinstance(low, np.ndarray) and _backend.is_foreign(low):
        return _xp_tri_inverse(low)
    fn = lapack.strtri if low.dtype == np.float32 else lapack.dtrtri
    if low.flags.c_contiguous:
        # The F view of a C-ordered lower factor is its (upper) transpose: invert that
        # and transpose back, without copies.
        inv, info = fn(low.T, lower=0)
        inv = inv.T
    else:
        inv, info = fn(low, lower=1)
    if info != 0:
        raise CholeskyError("triangular factor is singular")
    return np.ascontiguousarray(np.tril(inv))


def inverse_cholesky_factor(precision):
    """Lower triangular ``L`` with ``L L^T = precision^-1``, without forming the inverse.

    With ``J`` the order-reversing permutation and ``C = chol(J P J)``, the matrix
    ``J C^-T J`` is lower triangular and squares to ``P^-1``.

    Raises
    ------
    CholeskyError
        If ``precision`` is not positive definite.
    """
    if not isinstance(precision, np.ndarray) and _backend.is_foreign(precision):
        return _xp_inverse_cholesky_factor(precision)
    flipped = np.ascontiguousarray(precision[::-1, ::-1])
    c = cholesky(flipped)
    return np.ascontiguousarray(tri_inverse(c).T[::-1, ::-1])


def _lower_operand(low):
    """(F-ordered array, lower flag, transposed flag) with op(array) == low."""
    if low.flags.c_contiguous and not low.flags.f_contiguous:
        return low.T, False, True
    return np.asfortranarray(low), True, False


def cholesky_backward(low, low_bar=None, lt_low_bar=None, inv_low=None):
    """Reverse-mode derivative of the Cholesky factorisation.

    Given ``low = chol(A)`` and the adjoint ``low_bar = dF/dlow`` (only its lower
    triangle matters), return the symmetric ``A_bar`` with ``dF = sum(A_bar * dA)`` for
    symmetric perturbations ``dA`` (Murray 2016, eq. 10):
    ``A_bar = sym(L^-T Phi(L^T L_bar) L^-1)``, Phi taking the lower triangle with a halved
    diagonal. Callers that can form ``low.T @ low_bar`` more cheaply than by a product
    pass it as ``lt_low_bar``; callers that hold ``inv_low = L^-1`` pass it to trade the
    two triangular solves for two triangular products.
    """
    if not isinstance(low, np.ndarray) and _backend.is_foreign(low):
        return _xp_cholesky_backward(low, low_bar, lt_low_bar, inv_low)
    if lt_low_bar is None:
        lt_low_bar = tri_mm(low, np.tril(low_bar), trans=True)
    if inv_low is not None:
        # sym(L^-T Phi L^-1) = L^-T Y L^-1 / 2 with Y = Phi + Phi^T, the lower triangle of
        # lt_low_bar mirrored; a congruence of a symmetric matrix is symmetric.
        lower = np.tril(lt_low_bar)
        mirrored = lower + lower.T
        mirrored.flat[:: mirrored.shape[0] + 1] *= 0.5
        out = tri_mm(inv_low, tri_mm(inv_low, mirrored, trans=True), right=True)
        out *= 0.5
        return out
    phi = np.asfortranarray(np.tril(lt_low_bar))
    phi[np.diag_indices_from(phi)] *= 0.5
    lf, lower, transposed = _lower_operand(low)
    trsm = _trsm_for(phi.dtype)
    # L^-T Phi (left side), then (.) L^-1 (right side), both in place on F-ordered data.
    x = trsm(1.0, lf, phi, side=0, lower=lower, trans_a=int(not transposed), overwrite_b=1)
    x = trsm(1.0, lf, x, side=1, lower=lower, trans_a=int(transposed), overwrite_b=1)
    out = x + x.T
    out *= 0.5
    return out


def jittered_cholesky_backward(low, lt_low_bar, jitter, inv_low=None):
    """Adjoint of K from that of ``low = chol(K + jitter * mean(diag K) I)``
    (:func:`jittered_cholesky`), given ``lt_low_bar = low^T dF/dlow`` (and optionally
    ``inv_low = low^-1``, see :func:`cholesky_backward`).

    The added jitter moves with the mean diagonal, which puts ``jitter * trace(K_bar) / n``
    back on the diagonal of the plain Cholesky adjoint.
    """
    if not isinstance(low, np.ndarray) and _backend.is_foreign(low):
        return _xp_jittered_cholesky_backward(low, lt_low_bar, jitter, inv_low)
    k_bar = cholesky_backward(low, lt_low_bar=lt_low_bar, inv_low=inv_low)
    k_bar.flat[:: k_bar.shape[0] + 1] += jitter * np.trace(k_bar) / k_bar.shape[0]
    return k_bar


# --------------------------------------------------------------------------------------
# The same operations for arrays of other libraries (see the module docstring). Written
# once in Array API operations; what the standard lacks comes from the backend module.
# --------------------------------------------------------------------------------------
def _xp_mm(a, b, trans_a, trans_b):
    xp = _backend.namespace(a, b)
    squeeze = []
    if a.ndim == 1:
        a, trans_a = xp.reshape(a, (1, -1)), False
        squeeze.append(0)
    if b.ndim == 1:
        b, trans_b = xp.reshape(b, (-1, 1)), False
        squeeze.append(1)
    dtype = _backend.working_float(xp, a, b)
    a = xp.astype(a, dtype, copy=False)
    b = xp.astype(b, dtype, copy=False)
    c = (xp.matrix_transpose(a) if trans_a else a) @ (xp.matrix_transpose(b) if trans_b else b)
    if squeeze:
        c = xp.reshape(c, tuple(s for i, s in enumerate(c.shape) if i not in squeeze))
    return c


def _xp_gram(a, trans):
    xp = _backend.namespace(a)
    a = xp.astype(a, _backend.working_float(xp, a), copy=False)
    g = xp.matrix_transpose(a) @ a if trans else a @ xp.matrix_transpose(a)
    # Exactly symmetric, as SYRK's mirrored triangle is: keep the lower triangle only.
    return xp.tril(g) + xp.matrix_transpose(xp.tril(g, k=-1))


def _xp_tri_inverse(low):
    xp = _backend.namespace(low)
    if bool(xp.any(_backend.diagonal(low, xp) == 0)):
        raise CholeskyError("triangular factor is singular")
    return xp.tril(_backend.solve_triangular(low, _backend.eye(low.shape[0], low), xp))


def _xp_inverse_cholesky_factor(precision):
    xp = _backend.namespace(precision)
    c = _backend.cholesky(xp.flip(precision, axis=(0, 1)), xp)
    return xp.flip(xp.matrix_transpose(_xp_tri_inverse(c)), axis=(0, 1))


def _xp_cholesky_backward(low, low_bar, lt_low_bar, inv_low):
    xp = _backend.namespace(low)
    t = xp.matrix_transpose
    if lt_low_bar is None:
        lt_low_bar = _backend.tri_mm(low, xp.tril(low_bar), xp, trans=True)
    if inv_low is not None:
        mirrored = xp.tril(lt_low_bar) + t(xp.tril(lt_low_bar, k=-1))
        inner = _backend.tri_mm(inv_low, mirrored, xp, trans=True)
        return 0.5 * _backend.tri_mm(inv_low, inner, xp, right=True)
    # Phi: the lower triangle with a halved diagonal.
    lower = xp.tril(lt_low_bar)
    phi = 0.5 * (lower + xp.tril(lt_low_bar, k=-1))
    x = _backend.solve_triangular(low, phi, xp, trans=True)
    x = _backend.solve_triangular(low, x, xp, right=True)
    return 0.5 * (x + t(x))


def _xp_jittered_cholesky_backward(low, lt_low_bar, jitter, inv_low):
    k_bar = _xp_cholesky_backward(low, None, lt_low_bar, inv_low)
    return _backend.add_to_diagonal(k_bar, jitter * _backend.trace(k_bar) / k_bar.shape[0])


# Imported last: the backend module imports the exceptions and routines defined above.
from . import backend as _backend  # noqa: E402
