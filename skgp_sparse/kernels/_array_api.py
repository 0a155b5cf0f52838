"""The elementwise part of the stationary kernels for arrays of any Array API library.

The counterpart of :mod:`._profiles` (numba loops over numpy arrays) for CuPy, PyTorch,
``array_api_strict`` and any other namespace: the same squared distances with the same
refinement of near-coincident pairs, the same profiles ``f(r2)`` and ``f'(r2)``, the
same backward sums, written once in standard operations (``matmul``, ``exp``,
``sqrt``, ``where``, reductions). Nothing here converts to numpy: the arrays stay on
their device.

Unlike :mod:`._profiles`, nothing is written in place (the nodes' outputs are fresh
arrays either way); a library that fuses elementwise chains (torch.compile, CuPy's
fusion) sees plain expressions.
"""

import math

from ..backend import device_of
from ..linalg import pending_flags
from ._profiles import EXPSINE, MATERN12, MATERN32, MATERN52, RBF, REFINE_TOL, RQ

__all__ = [
    "sqdist_cross",
    "sqdist_gram",
    "forward",
    "param_sums",
    "weigh",
    "mirror_upper",
    "HalfIntegerMatern",
]

_SQRT3 = math.sqrt(3.0)
_SQRT5 = math.sqrt(5.0)


def _column(v, xp):
    return xp.reshape(v, (-1, 1))


def _row(v, xp):
    return xp.reshape(v, (1, -1))


def _row_sq(x, xp):
    return xp.sum(x * x, axis=1)


def _refine(r2, flagged, As, Bs, xp):
    """Recompute the flagged entries of ``r2`` as plain sums of squared differences.

    One synchronisation with the host (whether anything is flagged); the rare flagged
    pairs are gathered by index, so no ``(M, N, D)`` tensor is formed. Within
    :func:`skgp_sparse.linalg.deferred_checks` (where a gather of data-dependent size
    would be a read): :func:`_refine_in_fixed_shapes`.
    """
    flags = pending_flags()
    if flags is not None:
        return _refine_in_fixed_shapes(r2, flagged, As, Bs, xp, flags)
    if not bool(xp.any(flagged)):
        return r2
    i, j = xp.nonzero(flagged)
    d = xp.take(As, i, axis=0) - xp.take(Bs, j, axis=0)
    # r2 is a fresh array of the caller's. Boolean-mask assignment visits the entries in the row-major order of nonzero.
    r2[flagged] = xp.sum(d * d, axis=1)
    return r2


def _refine_in_fixed_shapes(r2, flagged, As, Bs, xp, flags):
    """:func:`_refine` in shapes known in advance: in each row the last flagged pair is
    refined, and in each column the last flagged pair; a flagged pair that is neither is
    noted in ``flags``.

    Inducing inputs that sit on training rows flag about one pair per row or column,
    from the first step on; clusters of coincident points on both sides are rare, and the
    step that meets one is replayed on the careful path. The refined values are those of
    :func:`_refine` (the same sums of squared differences); the pairs are chosen by a
    maximum of indices, which is cheaper than an argmin over the columns.
    """
    device = device_of(r2)
    # int32 indices: the (M, N) passes over them move half the bytes of int64 ones.
    cols = _row(xp.arange(r2.shape[1], dtype=xp.int32, device=device), xp)
    rows = _column(xp.arange(r2.shape[0], dtype=xp.int32, device=device), xp)
    none = -1
    col_of_row = xp.max(xp.where(flagged, cols, none), axis=1)
    row_of_col = xp.max(xp.where(flagged, rows, none), axis=0)
    # A row or column with nothing flagged points nowhere (its -1 matches no index); its
    # gathered neighbour (index 0) is computed and not used.
    by_row = _squared_differences(As, xp.take(Bs, xp.clip(col_of_row, 0, None), axis=0), xp)
    by_col = _squared_differences(xp.take(As, xp.clip(row_of_col, 0, None), axis=0), Bs, xp)
    row_hit = cols == _column(col_of_row, xp)
    col_hit = rows == _row(row_of_col, xp)
    flags.note(xp.any(flagged & ~(row_hit | col_hit)))
    return xp.where(row_hit, _column(by_row, xp), xp.where(col_hit, _row(by_col, xp), r2))


def _squared_differences(a, b, xp):
    """Row-wise sums of squared differences of two arrays of one shape."""
    d = a - b
    return xp.sum(d * d, axis=1)


def sqdist_cross(As, Bs, xp):
    """Squared distances ``|a_i - b_j|^2`` from one ``matmul``, near-coincident pairs
    refined as in :func:`._profiles.cross_sqdist`."""
    s = _column(_row_sq(As, xp), xp) + _row(_row_sq(Bs, xp), xp)
    r2 = s - 2.0 * (As @ xp.matrix_transpose(Bs))
    return _refine(r2, r2 <= REFINE_TOL * s, As, Bs, xp)


def sqdist_gram(As, xp):
    """Exactly symmetric squared distances of the rows of ``As``, zero diagonal.

    The strict upper triangle is computed (and refined) as in
    :func:`._profiles.gram_sqdist` and mirrored.
    """
    na = _row_sq(As, xp)
    s = _column(na, xp) + _row(na, xp)
    r2 = s - 2.0 * (As @ xp.matrix_transpose(As))
    m = As.shape[0]
    index = xp.arange(m, device=device_of(As))
    upper = _row(index, xp) > _column(index, xp)
    r2 = _refine(r2, (r2 <= REFINE_TOL * s) & upper, As, As, xp)
    return mirror_upper(r2, xp, k=1)


def mirror_upper(K, xp, k=0):
    """The matrix whose upper triangle (from diagonal ``k``) is that of ``K`` and whose
    lower triangle is its mirror image: exactly symmetric (zero diagonal with ``k=1``)."""
    upper = xp.triu(K, k=k)
    return upper + xp.matrix_transpose(xp.triu(K, k=1))


def _safe_divisor(x, xp):
    """``x`` with its zeros replaced by ones (the quotient is then masked by ``where``)."""
    return xp.where(x != 0, x, xp.ones_like(x))


# --------------------------------------------------------------------------------------
# forward profiles
# --------------------------------------------------------------------------------------
def forward(kind, r2, p0, p1, want_fp, xp):
    """``K = f(r2)`` and ``fp = f'(r2)`` (None without ``want_fp``) for profile ``kind``.

    Same formulas and same conventions as :func:`._profiles.forward`: ``f(0) = 1``, and
    the subgradient 0 of Matern 1/2 at ``r = 0``.
    """
    if kind == RBF:
        K = xp.exp(-0.5 * r2)
        return K, (-0.5 * K if want_fp else None)
    if kind == RQ:
        K = xp.exp(-p0 * xp.log1p(r2 * (0.5 / p0)))
        return K, (-0.5 * K / (1.0 + (0.5 / p0) * r2) if want_fp else None)
    if kind == EXPSINE:
        return _expsine(r2, p0, p1, want_fp, xp)
    r = xp.sqrt(r2)
    if kind == MATERN12:
        K = xp.exp(-r)
        if not want_fp:
            return K, None
        return K, xp.where(r > 0, -0.5 * K / _safe_divisor(r, xp), xp.zeros_like(r))
    if kind == MATERN32:
        e = xp.exp(-_SQRT3 * r)
        return (1.0 + _SQRT3 * r) * e, (-1.5 * e if want_fp else None)
    if kind == MATERN52:
        t = _SQRT5 * r
        e = xp.exp(-t)
        K = (1.0 + t + t * t / 3.0) * e
        return K, (-(5.0 / 6.0) * (1.0 + t) * e if want_fp else None)
    raise ValueError(f"unknown profile {kind}")


def _expsine(r2, l, p, want_fp, xp):
    k = math.pi / p
    inv_l2 = 1.0 / (l * l)
    x = k * xp.sqrt(r2)
    s = xp.sin(x)
    K = xp.exp(-2.0 * s * s * inv_l2)
    if not want_fp:
        return K, None
    # sin(x) / x -> 1 at x = 0
    sinc = xp.where(x != 0, s / _safe_divisor(x, xp), xp.ones_like(x))
    return K, -2.0 * K * xp.cos(x) * sinc * (k * k * inv_l2)


class HalfIntegerMatern:
    """Matern profile of ``nu = n + 1/2`` (n >= 0) in closed form: a polynomial times
    ``exp(-s)``, with ``s = sqrt(2 nu) r``.

    From ``K_(n+1/2)(s) = sqrt(pi / (2 s)) exp(-s) sum_k (n+k)! / (k! (n-k)!) (2 s)^-k``:

    * ``f = c s^nu K_nu(s) = c sqrt(pi/2) exp(-s) sum_k a_(n,k) 2^-k s^(n-k)``,
    * ``f' = -c nu s^(nu-1) K_(nu-1)(s)``, the same form with ``n - 1`` (n >= 1),

    ``c = 2^(1-nu) / Gamma(nu)``. This is what :class:`._stationary.GenericMatern`
    computes with ``scipy.special.kv`` on numpy arrays, without leaving the device.
    """

    def __init__(self, nu):
        n = int(round(nu - 0.5))
        if n < 1 or n + 0.5 != nu:
            raise ValueError(f"nu = {nu} is not a half-integer of at least 3/2")
        self.nu = nu
        c = 2.0 ** (1.0 - nu) / math.gamma(nu) * math.sqrt(math.pi / 2.0)
        # Coefficients of s^0, s^1, ... (highest power last) for f and for f'.
        self.f_coef = self._coefficients(n, c)
        self.fp_coef = self._coefficients(n - 1, -c * nu)

    @staticmethod
    def _coefficients(n, scale):
        coef = [0.0] * (n + 1)
        for k in range(n + 1):
            a = math.factorial(n + k) / (math.factorial(k) * math.factorial(n - k))
            coef[n - k] = scale * a * 2.0 ** (-k)
        return coef

    @staticmethod
    def _horner(coef, s):
        out = coef[-1]
        for c in reversed(coef[:-1]):
            out = out * s + c
        return out

    def __call__(self, r2, want_fp, xp):
        s = xp.sqrt((2.0 * self.nu) * r2)
        e = xp.exp(-s)
        K = self._horner(self.f_coef, s) * e
        if not want_fp:
            return K, None
        return K, self._horner(self.fp_coef, s) * e


# --------------------------------------------------------------------------------------
# backward
# --------------------------------------------------------------------------------------
def weigh(K_bar, fp, xp):
    """``W = K_bar * fp`` with its row and column sums (see :func:`._profiles.weigh_cross`)."""
    W = K_bar * fp
    return W, xp.sum(W, axis=1), xp.sum(W, axis=0)


def param_sums(kind, K_bar, r2, fp, p0, p1, xp):
    """``(sum(K_bar * d f / d log p0), sum(K_bar * d f / d log p1))`` as 0-d arrays (or
    0.0 for a profile without parameters); see :func:`._profiles.param_sums`."""
    if kind == RQ:
        u = r2 * (0.5 / p0)
        return -2.0 * p0 * xp.sum(K_bar * fp * (u - (1.0 + u) * xp.log1p(u))), 0.0
    if kind == EXPSINE:
        k = math.pi / p1
        inv_l2 = 1.0 / (p0 * p0)
        x = k * xp.sqrt(r2)
        s = xp.sin(x)
        f = xp.exp(-2.0 * s * s * inv_l2)
        kb = K_bar * (4.0 * inv_l2) * s * f
        return xp.sum(kb * s), xp.sum(kb * x * xp.cos(x))
    return 0.0, 0.0
