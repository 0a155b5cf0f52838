"""Dense linear algebra shared by every basis: the front door.

Each operation here takes arrays of numpy or of any Array API library (CuPy, PyTorch,
``array_api_strict``, ...) and answers in their namespace, on their device. It decides
once which back end computes it, and that decision is the only per-library branch of
the package's linear algebra:

* numpy arrays go to :mod:`._numpy`: one BLAS or LAPACK call through scipy's bindings
  (GEMM, SYRK, SYMM, POTRF, TRSM, TRMM, TRTRI), the same BLAS as numba's, so that a
  training step never alternates two thread pools;
* arrays of every other library go to :mod:`._array_api`: ``matmul`` and the standard's
  operations, with the Cholesky factorisation and the triangular solve of each library
  (``torch.linalg``, ``cupyx.scipy.linalg``) or, where it has none, a blocked
  substitution.

The decision costs one ``isinstance`` for a numpy array. Functions that take ``xp`` (a
namespace, as :func:`skgp_sparse.backend.namespace` returns it) decide on it instead
when it is given. The jitter schedule, its constants, :class:`JitterWarning` and
:class:`CholeskyError` are the same on both back ends (:mod:`._jitter`). Matrices may be
C- or F-ordered; numpy results are C-ordered. All arguments of one call must belong to
the same library.
"""

import numpy as np

from .. import backend as be
from . import _array_api, _fused, _numpy
from ._jitter import (
    DEFAULT_JITTER,
    FLOAT32_MIN_JITTER,
    MAX_JITTER_TRIES,
    CholeskyError,
    JitterWarning,
    retry_with_jitter,
)
from ._deferred import StatusFlags, deferred_checks, pending_flags
from ._numpy import potrf

__all__ = [
    "DEFAULT_JITTER",
    "MAX_JITTER_TRIES",
    "FLOAT32_MIN_JITTER",
    "CholeskyError",
    "JitterWarning",
    "StatusFlags",
    "deferred_checks",
    "pending_flags",
    "mm",
    "gram",
    "weighted_gram",
    "sym_mm",
    "potrf",
    "cholesky",
    "jittered_cholesky",
    "retry_with_jitter",
    "solve_triangular",
    "tri_mm",
    "cho_solve",
    "tri_inverse",
    "inverse_cholesky_factor",
    "cholesky_backward",
    "jittered_cholesky_backward",
    "eye",
    "diagonal",
    "trace",
    "add_to_diagonal",
    "outer_plus_scaled_difference",
    "add_scaled_difference",
    "outer_plus_scaled",
    "add_scaled",
    "column_products",
    "column_dots",
    "minus_column_squares",
    "column_variances",
    "copy_array",
    "same_values",
    "all_finite",
    "tril_halved_diagonal",
    "outer_over",
    "add_to_rows",
    "add_at_last_index",
    "middle_axis_dot",
    "update_rows",
]

#: Stack level of a :class:`JitterWarning` counted from the warning's own frame: the
#: schedule (1), the back end (2), the function of this module (3), its caller (4) and
#: that caller's caller (5), the code whose settings asked for the factorisation.
_JITTER_WARNING_LEVEL = 5


def _on_numpy(a, xp=None):
    """Whether ``a`` (of namespace ``xp``, when given) goes to the numpy back end."""
    if xp is None:
        return not be.is_foreign(a)
    return xp is np


# --------------------------------------------------------------------------------------
# products
# --------------------------------------------------------------------------------------
def mm(a, b, trans_a=False, trans_b=False):
    """Matrix product ``op(a) @ op(b)``.

    Parameters
    ----------
    a, b : array of shape (m, k) and (k, n) after the optional transposes
        1-D arrays are treated as a column (``b``) or a row (``a``).
    trans_a, trans_b : bool
        Use the transpose of ``a`` or ``b``.

    Returns
    -------
    array of shape (m, n) (or without the axis of a 1-D operand)
        numpy: one GEMM (one GEMV per column for one or two columns), C-ordered, without
        copies of the operands.
    """
    if _on_numpy(a):
        return _numpy.mm(a, b, trans_a, trans_b)
    return _array_api.mm(a, b, trans_a, trans_b)


def gram(a, trans=False):
    """Symmetric product ``a @ a.T`` (or ``a.T @ a`` with ``trans``).

    Parameters
    ----------
    a : array of shape (m, k)
    trans : bool

    Returns
    -------
    array of shape (m, m) (or (k, k)), exactly symmetric
        numpy: one SYRK, half a GEMM.
    """
    if _on_numpy(a):
        return _numpy.gram(a, trans)
    return _array_api.gram(a, trans)


def weighted_gram(a, h):
    """``a @ diag(h) @ a.T`` for ``a`` of shape (m, k) and ``h`` of shape (k,).

    Parameters
    ----------
    a : array of shape (m, k)
    h : array of shape (k,)

    Returns
    -------
    array of shape (m, m), exactly symmetric
        numpy: one SYRK when ``h`` has one sign (always, for a log-concave likelihood),
        a scaled SYRK when ``h`` is constant (Gaussian noise), a GEMM otherwise (reading
        ``h``'s signs costs nothing on the host); other libraries: one ``matmul`` of
        ``a * h`` with ``a``, mirrored from its lower triangle, with no read of ``h``.
    """
    if _on_numpy(a):
        return _numpy.weighted_gram(a, h)
    return _array_api.weighted_gram(a, h)


def sym_mm(sym, b):
    """Product ``sym @ b`` for a symmetric ``sym``.

    Parameters
    ----------
    sym : array of shape (m, m), symmetric, both triangles stored
    b : array of shape (m, n)

    Returns
    -------
    array of shape (m, n)
        numpy: one SYMM (faster than GEMM in OpenBLAS), C-ordered.
    """
    if _on_numpy(sym):
        return _numpy.sym_mm(sym, b)
    return _array_api.sym_mm(sym, b)


# --------------------------------------------------------------------------------------
# Cholesky
# --------------------------------------------------------------------------------------
def cholesky(a, xp=None):
    """Lower Cholesky factor of a symmetric positive definite matrix.

    Parameters
    ----------
    a : array of shape (m, m)
    xp : namespace, optional
        Namespace of ``a`` (found from ``a`` when omitted).

    Returns
    -------
    low : array of shape (m, m), lower triangular, namespace, device and dtype of ``a``

    Raises
    ------
    CholeskyError
        If ``a`` has a NaN or infinite entry, or is not numerically positive definite.
    """
    if _on_numpy(a, xp):
        return _numpy.cholesky(a)
    return _array_api.cholesky(a, be.namespace(a) if xp is None else xp)


def jittered_cholesky(a, jitter=DEFAULT_JITTER, max_tries=MAX_JITTER_TRIES, what="kernel matrix", *, xp=None):
    """Cholesky of ``a + jitter * mean(diag(a)) * I``, retried with ten times more jitter.

    Parameters
    ----------
    a : array of shape (m, m)
        Symmetric matrix, numerically positive semi-definite.
    jitter : float
        First relative jitter; the absolute jitter is ``jitter * mean(diag(a))``.
    max_tries : int
        Attempts, each with ten times the previous jitter.
    what : str
        Name of the matrix in the error and warning messages.
    xp : namespace, optional
        Namespace of ``a`` (found from ``a`` when omitted).

    Returns
    -------
    low : array
        Lower factor of the jittered matrix (namespace, device and dtype of ``a``).
    relative : float
        The relative jitter that succeeded (pass it back in to reuse it).

    Raises
    ------
    CholeskyError
        If ``a`` has a NaN or infinite entry, or every attempt failed; the message gives
        the largest jitter tried.

    Warns
    -----
    JitterWarning
        When more than the first jitter was needed, at the line that called this
        function's caller.

    Notes
    -----
    A float32 matrix starts from a relative jitter of at least
    :data:`FLOAT32_MIN_JITTER`. If it fails at that first jitter, it is factorised in
    float64 (with the jitter schedule from the same start) and its factor cast back: a
    kernel matrix often needs far more jitter in float32 (rounding grows like
    ``m * eps * cond``), while the products around its factor are fine in float32. On a
    GPU each attempt synchronises once with the host, and the scale once more.
    """
    if _on_numpy(a, xp):
        return _numpy.jittered_cholesky(a, jitter, max_tries, what, _JITTER_WARNING_LEVEL)
    xp = be.namespace(a) if xp is None else xp
    return _array_api.jittered_cholesky(a, xp, jitter, max_tries, what, _JITTER_WARNING_LEVEL)


# --------------------------------------------------------------------------------------
# triangular solves and products
# --------------------------------------------------------------------------------------
def solve_triangular(low, b, trans=False, right=False, *, xp=None):
    """Solve ``op(low) x = b`` (or ``x op(low) = b`` with ``right``), ``low`` lower triangular.

    Only the lower triangle of ``low`` is read.

    Parameters
    ----------
    low : array of shape (m, m)
    b : array of shape (m, n) or (m,); (n, m) or (m,) with ``right``
        A 1-D ``b`` is a column (a row with ``right``).
    trans : bool
        Use ``low.T`` instead of ``low``.
    right : bool
        Solve from the right: ``x = b op(low)^-1``.
    xp : namespace, optional
        Namespace of ``low`` and ``b`` (found from them when omitted).

    Returns
    -------
    x : array of the shape of ``b``
        numpy: one TRSM, C-ordered.
    """
    if _on_numpy(low, xp):
        return _numpy.solve_triangular(low, b, trans, right)
    return _array_api.solve_triangular(low, b, be.namespace(low, b) if xp is None else xp, trans, right)


def tri_mm(low, b, trans=False, right=False, *, xp=None, zeros_above=False):
    """Product ``op(low) @ b`` (or ``b @ op(low)`` with ``right``) for a lower triangular
    ``low`` whose strict upper part is ignored.

    Parameters
    ----------
    low : array of shape (m, m)
    b : array of shape (m, n), or (n, m) with ``right``
    trans : bool
        Multiply by ``low.T`` instead of ``low``.
    right : bool
        Multiply ``b`` on the right: ``b @ op(low)``.
    xp : namespace, optional
        Namespace of ``low`` and ``b`` (found from them when omitted).
    zeros_above : bool, default=False
        The strict upper part of ``low`` is known to hold zeros (a factor from
        :func:`cholesky` or :func:`jittered_cholesky`, an inverse from :func:`tri_inverse`):
        other libraries then multiply ``low`` as it is, without a masked copy of it.

    Returns
    -------
    array of the shape of ``b``
        numpy: one TRMM, half the flops of a GEMM; other libraries: ``matmul`` with the
        lower triangle of ``low``.
    """
    if _on_numpy(low, xp):
        return _numpy.tri_mm(low, b, trans, right)
    return _array_api.tri_mm(low, b, be.namespace(low, b) if xp is None else xp, trans, right, zeros_above)


def cho_solve(low, b):
    """Solve ``(low low^T) x = b`` given the lower Cholesky factor ``low``.

    Parameters
    ----------
    low : array of shape (m, m), lower triangular
    b : array of shape (m, n) or (m,)

    Returns
    -------
    array of the shape of ``b``
    """
    return solve_triangular(low, solve_triangular(low, b), trans=True)


def tri_inverse(low):
    """Inverse of a lower triangular matrix.

    Parameters
    ----------
    low : array of shape (m, m), lower triangular

    Returns
    -------
    array of shape (m, m), lower triangular (numpy: one TRTRI, C-ordered)

    Raises
    ------
    CholeskyError
        If ``low`` is singular.
    """
    if _on_numpy(low):
        return _numpy.tri_inverse(low)
    return _array_api.tri_inverse(low)


def inverse_cholesky_factor(precision):
    """Lower triangular ``L`` with ``L L^T = precision^-1``, without forming the inverse.

    With ``J`` the order-reversing permutation and ``C = chol(J P J)``, the matrix
    ``J C^-T J`` is lower triangular and squares to ``P^-1``.

    Parameters
    ----------
    precision : array of shape (m, m), symmetric positive definite

    Returns
    -------
    array of shape (m, m), lower triangular

    Raises
    ------
    CholeskyError
        If ``precision`` is not positive definite.
    """
    if _on_numpy(precision):
        return _numpy.inverse_cholesky_factor(precision)
    return _array_api.inverse_cholesky_factor(precision)


def cholesky_backward(low, low_bar=None, lt_low_bar=None, inv_low=None):
    """Reverse-mode derivative of the Cholesky factorisation.

    Given ``low = chol(A)`` and the adjoint ``low_bar = dF/dlow`` (only its lower
    triangle matters), return the symmetric ``A_bar`` with ``dF = sum(A_bar * dA)`` for
    symmetric perturbations ``dA`` (Murray 2016, eq. 10):
    ``A_bar = sym(L^-T Phi(L^T L_bar) L^-1)``, Phi taking the lower triangle with a halved
    diagonal.

    Parameters
    ----------
    low : array of shape (m, m), lower triangular
    low_bar : array of shape (m, m), optional
        Not needed when ``lt_low_bar`` is given.
    lt_low_bar : array of shape (m, m), optional
        ``low.T @ low_bar``, for callers that can form it more cheaply than by a product.
    inv_low : array of shape (m, m), optional
        ``L^-1`` with zeros above its diagonal (as :func:`tri_inverse` returns it), for
        callers that hold it: the two triangular solves become two triangular products.

    Returns
    -------
    array of shape (m, m), symmetric
    """
    if _on_numpy(low):
        return _numpy.cholesky_backward(low, low_bar, lt_low_bar, inv_low)
    return _array_api.cholesky_backward(low, low_bar, lt_low_bar, inv_low)


def jittered_cholesky_backward(low, lt_low_bar, jitter, inv_low=None):
    """Adjoint of K from that of ``low = chol(K + jitter * mean(diag K) I)``
    (:func:`jittered_cholesky`).

    The added jitter moves with the mean diagonal, which puts ``jitter * trace(K_bar) / n``
    back on the diagonal of the plain Cholesky adjoint.

    Parameters
    ----------
    low : array of shape (m, m), lower triangular
    lt_low_bar : array of shape (m, m)
        ``low^T dF/dlow``.
    jitter : float
        The relative jitter of the factorisation.
    inv_low : array of shape (m, m), optional
        ``low^-1`` (see :func:`cholesky_backward`).

    Returns
    -------
    array of shape (m, m), symmetric
    """
    if _on_numpy(low):
        return _numpy.jittered_cholesky_backward(low, lt_low_bar, jitter, inv_low)
    return _array_api.jittered_cholesky_backward(low, lt_low_bar, jitter, inv_low)


# --------------------------------------------------------------------------------------
# identity, diagonal and trace (the standard has them under other names, or not at all)
# --------------------------------------------------------------------------------------
def eye(n, like):
    """Identity of shape (n, n) in the namespace, dtype and device of the array ``like``."""
    if _on_numpy(like):
        return _numpy.eye(n, like)
    return _array_api.eye(n, like)


def diagonal(a, xp=None):
    """Main diagonal of a square matrix, shape ``(n,)`` (a view for numpy).

    Parameters
    ----------
    a : array of shape (n, n)
    xp : namespace, optional
        Namespace of ``a`` (found from ``a`` when omitted).
    """
    if _on_numpy(a, xp):
        return _numpy.diagonal(a)
    return _array_api.diagonal(a, be.namespace(a) if xp is None else xp)


def trace(a, xp=None):
    """Trace of a square matrix: a Python float for numpy, a 0-d array otherwise (no
    device-to-host synchronisation).

    Parameters
    ----------
    a : array of shape (n, n)
    xp : namespace, optional
        Namespace of ``a`` (found from ``a`` when omitted).
    """
    if _on_numpy(a, xp):
        return _numpy.trace(a)
    return _array_api.trace(a, be.namespace(a) if xp is None else xp)


def add_to_diagonal(a, value, xp=None):
    """``a + value * I`` as a new array (``a`` is not modified).

    Parameters
    ----------
    a : array of shape (n, n)
    value : float, 0-d array or array of shape (n,)
        One value for every diagonal entry, or one per entry.
    xp : namespace, optional
        Namespace of ``a`` (found from ``a`` when omitted).
    """
    if _on_numpy(a, xp):
        return _numpy.add_to_diagonal(a, value)
    return _array_api.add_to_diagonal(a, value)


# --------------------------------------------------------------------------------------
# fused passes over (M, B) arrays: one numba loop each for numpy (:mod:`._fused`), the
# same expression in standard operations for every other library. The first argument
# of the four accumulating passes may be overwritten (numpy writes into it to save an
# M x B temporary): pass an array the caller no longer needs, and use the return value.
# --------------------------------------------------------------------------------------
def outer_plus_scaled_difference(s_a, a, q_mean, d_mean, h):
    """``q_mean @ d_mean.T + 2 * (s_a - a) * h``: dF/dA of the coupled marginals.

    Parameters
    ----------
    s_a, a : arrays of shape (M, B)
        ``s_a`` is overwritten for numpy.
    q_mean : array of shape (M, P)
    d_mean : array of shape (B, P)
    h : array of shape (B,)
    """
    if _on_numpy(s_a):
        return _fused.a_adjoint_inplace(s_a, a, q_mean, d_mean, h)
    return _array_api.outer_plus_scaled_difference(s_a, a, q_mean, d_mean, h)


def add_scaled_difference(out, s_a, a, h):
    """``out + 2 * (s_a - a) * h`` for ``out``, ``s_a``, ``a`` of shape (M, B) and ``h`` of
    shape (B,); ``out`` is overwritten for numpy."""
    if _on_numpy(out):
        return _fused.add_scaled_difference_inplace(out, s_a, a, h)
    return _array_api.add_scaled_difference(out, s_a, a, h)


def outer_plus_scaled(w, alpha, d_mean, h):
    """``alpha @ d_mean.T + 2 * w * h``: dF/dK_zx of the folded coupled marginals.

    Parameters
    ----------
    w : array of shape (M, B)
        Overwritten for numpy.
    alpha : array of shape (M, P)
    d_mean : array of shape (B, P)
    h : array of shape (B,)
    """
    if _on_numpy(w):
        return _fused.folded_adjoint_inplace(w, alpha, d_mean, h)
    return _array_api.outer_plus_scaled(w, alpha, d_mean, h)


def add_scaled(out, w, h):
    """``out + 2 * w * h`` for ``out``, ``w`` of shape (M, B) and ``h`` of shape (B,);
    ``out`` is overwritten for numpy."""
    if _on_numpy(out):
        return _fused.add_scaled_inplace(out, w, h)
    return _array_api.add_scaled(out, w, h)


def column_products(base, a, b):
    """``base + colsum(a * b)`` as a new array, for ``a``, ``b`` of shape (M, B) and
    ``base`` of shape (B,): the variance terms of the bases' marginals."""
    if _on_numpy(a):
        return _fused.add_column_products(base, a, b, np.empty_like(base))
    return _array_api.column_products(base, a, b)


def column_dots(a, b):
    """``colsum(a * b)``, shape (B,), for ``a``, ``b`` of shape (M, B): the predictors'
    variance terms (numpy: one ``einsum``, whose summation order the predictions of a
    fitted model have always had)."""
    if _on_numpy(a):
        return _numpy.column_dots(a, b)
    return _array_api.column_dots(a, b)


def minus_column_squares(base, a):
    """``base - colsum(a * a)`` as a new array, for ``a`` of shape (M, B) and ``base`` of
    shape (B,)."""
    if _on_numpy(a):
        return _fused.prior_minus_squares(base, a)
    return _array_api.minus_column_squares(base, a)


def column_variances(kdiag, a, lt_a_list):
    """``kdiag - colsum(a * a) + colsum(lt_a * lt_a)`` for each ``lt_a`` of the list,
    stacked as the columns of a (B, C) array: the coupled marginals' variances."""
    if _on_numpy(a):
        return _fused.column_variances(kdiag, a, lt_a_list)
    return _array_api.column_variances(kdiag, a, lt_a_list)


# --------------------------------------------------------------------------------------
# copies and comparisons (the bases' states and cache keys)
# --------------------------------------------------------------------------------------
def copy_array(a):
    """An independent copy of ``a``, in its library and on its device."""
    if _on_numpy(a):
        return _numpy.copy_array(a)
    return _array_api.copy_array(a)


def all_finite(a):
    """Whether every entry of ``a`` is finite.

    Parameters
    ----------
    a : array or Python number

    Returns
    -------
    bool
        The answer: for numpy (and numbers) at once, for another library by one bool
        read from the device. Within :func:`deferred_checks`, True, with the contrary
        noted in the pending :class:`StatusFlags` (and no read).
    """
    if _on_numpy(a):
        finite = bool(np.all(np.isfinite(a)))
        flags = pending_flags()
        if flags is None or finite:
            return finite
        # A host value (a hyperparameter's gradient) within a deferred interval: raised
        # at the interval's check like the device's flags, so that every failure of an
        # interval is met again by its replay.
        flags.note(True)
        return True
    return _array_api.all_finite(a)


def same_values(a, b):
    """Whether two arrays of one library hold the same values (for numpy
    ``np.array_equal``; otherwise one bool read back from the device)."""
    if _on_numpy(a):
        return _numpy.same_values(a, b)
    return _array_api.same_values(a, b)


# --------------------------------------------------------------------------------------
# the inverse-free basis: Phi(E), the lower triangle with its diagonal halved
# --------------------------------------------------------------------------------------
def tril_halved_diagonal(a):
    """The lower triangle of a square matrix with its diagonal halved, as a new array.

    This is Phi(a) of the product-only factor steps (``L (I - eta Phi(E))``) and of
    Cholesky adjoints: the lower-triangular solution X of X + X^T = a for a symmetric a.

    Parameters
    ----------
    a : array of shape (n, n)

    Returns
    -------
    array of shape (n, n)
        In ``a``'s namespace, dtype and device; a non-finite entry of ``a``'s lower
        triangle stays where it is.
    """
    if _on_numpy(a):
        return _numpy.tril_halved_diagonal(a)
    return _array_api.tril_halved_diagonal(a)


# --------------------------------------------------------------------------------------
# the orthogonally decoupled basis: products into a spent buffer, additions to rows
# --------------------------------------------------------------------------------------
def outer_over(buffer, left, right):
    """``left @ right.T``, written over ``buffer`` where that saves an allocation.

    The adjoint of a kernel matrix is as large as the matrix; with one column (a single
    output) it is an outer product, which numpy writes into the memory of a matrix the
    caller no longer needs instead of paying a fresh array's page faults on every step.

    Parameters
    ----------
    buffer : array of shape (m, n) or None
        Memory the caller gives up (its content is not read); None for a new array.
        Arrays of libraries other than numpy are never written in place (the standard does
        not say whether an array shares memory with another).
    left : array of shape (m, k)
    right : array of shape (n, k)

    Returns
    -------
    array of shape (m, n)
        ``buffer`` itself when it was written over, else a new array: use the return value.
    """
    if buffer is not None and _on_numpy(buffer):
        return _numpy.outer_over(buffer, left, right)
    return mm(left, right, trans_b=True)


def add_to_rows(base, index, values):
    """``base`` with ``values`` added to its rows ``index``, as a new array.

    Parameters
    ----------
    base : array of shape (n, k)
        Not modified.
    index : integer array of shape (c,)
        Distinct row indices, in the namespace and on the device of ``base``.
    values : array of shape (c, k)
        Row ``j`` is added to row ``index[j]`` of ``base``.

    Returns
    -------
    array of shape (n, k)
        numpy: a copy updated by fancy indexing; other libraries (the standard has no
        scatter): ``base + E @ values`` with the (n x c) selection matrix
        ``E[index[j], j] = 1``.
    """
    if _on_numpy(base):
        return _numpy.add_to_rows(base, index, values)
    return _array_api.add_to_rows(base, index, values)


# --------------------------------------------------------------------------------------
# the likelihoods: indexed additions, contractions and row-selected updates
# --------------------------------------------------------------------------------------
def add_at_last_index(a, index, value):
    """``a`` plus ``value`` at ``a[i, ..., index[i]]`` for every row ``i``: a one-hot
    update along the last axis (the class of each row).

    Parameters
    ----------
    a : array of shape (n, ..., K)
        Overwritten for numpy: pass an array the caller no longer needs, and use the
        return value.
    index : integer array of shape (n,)
        An index into the last axis for each row.
    value : float

    Returns
    -------
    array of the shape and dtype of ``a``
        numpy: ``a`` itself, updated in place at its ``n * ...`` indexed entries (no pass
        over all of it); other libraries: a new array, by ``where`` on the one-hot mask.
    """
    if _on_numpy(a):
        return _numpy.add_at_last_index(a, index, value)
    return _array_api.add_at_last_index(a, index, value)


def middle_axis_dot(a, b):
    """Dot products over the middle axis: ``c[n, k] = sum_s a[n, s, k] * b[s, k]``.

    Parameters
    ----------
    a : array of shape (n, S, K)
    b : array of shape (S, K)

    Returns
    -------
    array of shape (n, K)
        numpy: one ``einsum``, without the (n, S, K) product; other libraries: the
        product summed over its middle axis.
    """
    if _on_numpy(a):
        return _numpy.middle_axis_dot(a, b)
    return _array_api.middle_axis_dot(a, b)


def update_rows(target, rows, compute, *operands):
    """``target`` with its entries at ``rows`` replaced by ``compute`` of the operands.

    Parameters
    ----------
    target : array of shape (n,)
        Overwritten for numpy: pass an array the caller no longer needs, and use the
        return value.
    rows : boolean array of shape (n,)
        The entries to replace.
    compute : callable
        ``compute(*row_operands)`` -> array of shape (k,): the new values of ``k`` rows
        from the operands at those rows. It is written in operators (and ``@``), so
        that it runs on any library.
    *operands : arrays whose first axis has length n

    Returns
    -------
    array of shape (n,)
        numpy: ``target`` itself, ``compute`` run on the selected rows only (and not at
        all when none is selected, the usual case); other libraries: ``compute`` run on
        every row and its values selected by ``where`` (no boolean indexing, whose size
        is data-dependent: a synchronisation on a GPU).
    """
    if _on_numpy(target):
        return _numpy.update_rows(target, rows, compute, *operands)
    return _array_api.update_rows(target, rows, compute, *operands)
