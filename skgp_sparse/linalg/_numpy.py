"""The numpy back end of :mod:`skgp_sparse.linalg`: every operation through scipy's BLAS
and LAPACK.

Why one library: numpy and scipy wheels each bundle their own OpenBLAS with its own
thread pool. On a two-core machine, alternating the two pools inside a training step
costs more than the arithmetic (both pools spin while the other works), so every
product, Cholesky and triangular solve of a step goes through scipy's bindings here,
the same BLAS that numba's ``np.dot`` uses. Matrices may be C- or F-ordered; results
are C-ordered.

Only numpy arrays come here: the front door (:mod:`skgp_sparse.linalg`) sends every
other library to :mod:`._array_api`.
"""

import numpy as np
from scipy.linalg import blas, lapack

from ._jitter import FLOAT32_MIN_JITTER, CholeskyError, retry_with_jitter


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
    """``op(a) @ op(b)`` by one GEMM (GEMV for one or two columns), without copies."""
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
    """``a @ a.T`` (or ``a.T @ a``) by one SYRK, half a GEMM."""
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


def weighted_gram(a, h):
    """``a @ diag(h) @ a.T``: one SYRK when ``h`` has one sign, a scaled SYRK when it is
    constant, a GEMM otherwise."""
    if h.min() == h.max():
        return h[0] * gram(a)
    if np.all(h <= 0):
        return -gram(a * np.sqrt(-h))
    if np.all(h >= 0):
        return gram(a * np.sqrt(h))
    return mm(a * h, a, False, True)


def sym_mm(sym, b):
    """``sym @ b`` for a symmetric ``sym`` by one SYMM (faster than GEMM in OpenBLAS)."""
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
    """Lower Cholesky factor by one POTRF; :class:`CholeskyError` if it fails."""
    if not np.all(np.isfinite(a)):
        raise CholeskyError("matrix to factorise contains NaN or inf")
    low, info = potrf(a)
    if info != 0:
        raise CholeskyError(f"matrix is not positive definite (leading minor {info})")
    return low


def jittered_cholesky(a, jitter, max_tries, what, stacklevel):
    """Cholesky of ``a + jitter * mean(diag(a)) * I`` with the jitter schedule of
    :func:`._jitter.retry_with_jitter` (which warns at ``stacklevel``); a float32 ``a``
    that fails at its first jitter is factorised in float64 and its factor cast back."""
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
        stacklevel=stacklevel, wide_factor=factor_in(np.float64) if narrow else None,
    )


def _trsm_for(dtype):
    return blas.strsm if dtype == np.float32 else blas.dtrsm


def _trmm_for(dtype):
    return blas.strmm if dtype == np.float32 else blas.dtrmm


def _triangular_right_side(routine_for, low, b, trans, right=False):
    """``op(low)^-1 b`` (TRSM) or ``op(low) b`` (TRMM) without copying C-ordered data;
    with ``right``, ``b op(low)^-1`` or ``b op(low)`` instead.

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


def solve_triangular(low, b, trans=False, right=False):
    """``op(low)^-1 b`` (or ``b op(low)^-1`` with ``right``) by one TRSM; a 1-D ``b`` is a
    column (a row with ``right``)."""
    if b.ndim == 1:
        x = _triangular_right_side(_trsm_for, low, b[None, :] if right else b[:, None], trans, right)
        return x[0, :] if right else x[:, 0]
    return _triangular_right_side(_trsm_for, low, b, trans, right)


def tri_mm(low, b, trans=False, right=False):
    """``op(low) @ b`` (or ``b @ op(low)``) by one TRMM, half the flops of a GEMM."""
    return _triangular_right_side(_trmm_for, low, b, trans, right)


def tri_inverse(low):
    """Inverse of a lower triangular matrix by one TRTRI (lower triangular, C-ordered)."""
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
    """Lower ``L`` with ``L L^T = precision^-1``: ``J chol(J P J)^-T J`` (``J`` reverses
    the order), one POTRF and one TRTRI."""
    flipped = np.ascontiguousarray(precision[::-1, ::-1])
    c = cholesky(flipped)
    return np.ascontiguousarray(tri_inverse(c).T[::-1, ::-1])


def _lower_operand(low):
    """(F-ordered array, lower flag, transposed flag) with op(array) == low."""
    if low.flags.c_contiguous and not low.flags.f_contiguous:
        return low.T, False, True
    return np.asfortranarray(low), True, False


def cholesky_backward(low, low_bar=None, lt_low_bar=None, inv_low=None):
    """Adjoint of ``A`` from that of ``low = chol(A)`` (Murray 2016, eq. 10), by two
    in-place TRSMs, or two TRMMs given ``inv_low``."""
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
    """Adjoint of K from that of ``low = chol(K + jitter * mean(diag K) I)``."""
    k_bar = cholesky_backward(low, lt_low_bar=lt_low_bar, inv_low=inv_low)
    k_bar.flat[:: k_bar.shape[0] + 1] += jitter * np.trace(k_bar) / k_bar.shape[0]
    return k_bar


def eye(n, like):
    """Identity of ``like``'s dtype."""
    return np.eye(n, dtype=like.dtype)


def diagonal(a):
    """Main diagonal of a square matrix (a view)."""
    return np.diagonal(a)


def trace(a):
    """Trace of a square matrix, as a Python float."""
    return float(np.trace(a))


def add_to_diagonal(a, value):
    """``a + value * I`` as a new array, by one strided update of a copy."""
    out = a.copy()
    out.flat[:: out.shape[0] + 1] += value
    return out


# --------------------------------------------------------------------------------------
# array helpers of the bases
# --------------------------------------------------------------------------------------
def column_dots(a, b):
    """``colsum(a * b)`` by one ``einsum``, without the M x B product."""
    return np.einsum("ij,ij->j", a, b)


def copy_array(a):
    """An independent copy of ``a``."""
    return a.copy()


def same_values(a, b):
    """Whether two arrays hold the same values (``np.array_equal``)."""
    return np.array_equal(a, b)


# --------------------------------------------------------------------------------------
# the inverse-free basis
# --------------------------------------------------------------------------------------
def tril_halved_diagonal(a):
    """The lower triangle of ``a`` with its diagonal halved: one copy, one strided update."""
    phi = np.tril(a)
    phi[np.diag_indices_from(phi)] *= 0.5
    return phi


# --------------------------------------------------------------------------------------
# the orthogonally decoupled basis
# --------------------------------------------------------------------------------------
def outer_over(buffer, left, right):
    """``left @ right.T``, written into ``buffer`` when ``left`` has one column (an outer
    product: the elementwise product is what GEMM computes for one column), else by GEMM."""
    if left.shape[1] == 1:
        np.multiply(left, right.T, out=buffer)
        return buffer
    return mm(left, right, trans_b=True)


def add_to_rows(base, index, values):
    """A copy of ``base`` with ``values`` added to its (distinct) rows ``index``."""
    out = base.copy()
    out[index] += values
    return out


# --------------------------------------------------------------------------------------
# the likelihoods
# --------------------------------------------------------------------------------------
def add_at_last_index(a, index, value):
    """``a[i, ..., index[i]] += value`` for every row ``i``, in place; returns ``a``."""
    a[np.arange(a.shape[0]), ..., index] += value
    return a


def middle_axis_dot(a, b):
    """``sum_s a[n, s, k] * b[s, k]`` by one ``einsum`` (no (n, S, K) temporary)."""
    return np.einsum("nsk,sk->nk", a, b)


def update_rows(target, rows, compute, *operands):
    """``target[rows] = compute(*(o[rows] for o in operands))`` in place, skipped when no
    row is selected; returns ``target``."""
    if np.any(rows):
        target[rows] = compute(*(o[rows] for o in operands))
    return target
