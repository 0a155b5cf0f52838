"""Elementwise part of the stationary kernels: squared distances and profiles.

A stationary kernel here is ``k(a, b) = f(r2)`` with ``r2`` the squared distance between
the (length-scaled) inputs. The BLAS plumbing in :mod:`._stationary` hands this module
the product ``G = A_s B_s^T`` and the squared row norms; everything that touches the
``M x N`` matrices elementwise lives here and nowhere else, so that a GPU port only has
to swap this file (each function below is one elementwise kernel or a short chain).

Profiles, identified by an integer ``kind``, with at most two parameters ``p0, p1``
that are not a length scale of the inputs (``r = sqrt(r2)``):

=========== ========================================== ============
kind         f(r2)                                      p0, p1
=========== ========================================== ============
RBF          exp(-r2 / 2)                               -
MATERN12     exp(-r)                                    -
MATERN32     (1 + sqrt(3) r) exp(-sqrt(3) r)            -
MATERN52     (1 + sqrt(5) r + 5 r2 / 3) exp(-sqrt(5) r) -
RQ           (1 + r2 / (2 alpha))^-alpha                alpha
EXPSINE      exp(-2 sin^2(pi r / p) / l^2)              l, p
=========== ========================================== ============

Why the exponential is not inside the numba loops: without Intel SVML (not available
here) numba calls the scalar libm ``exp``, several times slower per entry than numpy's
own SIMD ``np.exp`` (not a BLAS call, so no thread pool involved; docs/constants.md). So
a profile is evaluated as three passes over memory that stays in cache: a numba pass
writing the exponent's argument, ``np.exp`` in place, and a numba pass combining the
exponential with the polynomial factor and the derivative. ExpSineSquared keeps one
fused loop (``sin``/``cos`` are not faster in numpy).

All jitted functions take arrays and plain scalars only (no Python objects), run with
``parallel=False`` (the BLAS calls around them already use the cores) and are cached on
disk. Loops are written out per profile rather than calling a helper that takes the
arrays: a call with array arguments in the inner loop costs reference counting per
entry, several times the loop's own work (docs/constants.md).
"""

import math

import numpy as np
from numba import njit

RBF = 0
MATERN12 = 1
MATERN32 = 2
MATERN52 = 3
RQ = 4
EXPSINE = 5

#: ``r2 = |a|^2 + |b|^2 - 2 a.b`` loses everything to cancellation when the two points
#: are close compared with their norms. Entries with ``r2 <= REFINE_TOL (|a|^2 + |b|^2)``
#: are recomputed as a plain sum of squared differences, so the relative error of every
#: ``r2`` is at most a few ``eps / REFINE_TOL``. This matters for the profiles in ``r``
#: (Matern 1/2 has ``df/dr = -1`` at 0: an absolute error ``eps`` in ``r2`` would be an
#: error ``sqrt(eps)`` in ``K``) and for inducing inputs that sit on training points.
REFINE_TOL = 1e-3

# Tile size of the transposed copies (see mirror_upper).
_TILE = 8

_SQRT3 = math.sqrt(3.0)
_SQRT5 = math.sqrt(5.0)


# --------------------------------------------------------------------------------------
# squared distances from the BLAS product
# --------------------------------------------------------------------------------------
@njit(cache=True)
def _direct_r2(As, i, Bs, j):
    """Plain sum of squared differences (only for the rare refined entries)."""
    acc = 0.0
    for d in range(As.shape[1]):
        t = As[i, d] - Bs[j, d]
        acc += t * t
    return acc


@njit(cache=True)
def cross_sqdist(G, na, nb, As, Bs):
    """Turn ``G = As Bs^T`` into squared distances ``|a_i - b_j|^2``, in place.

    The first pass is branch-free (it vectorises); only if it flagged entries does a
    second pass recompute them directly.
    """
    m, n = G.shape
    flagged = 0
    for i in range(m):
        for j in range(n):
            s = na[i] + nb[j]
            r2 = s - 2.0 * G[i, j]
            flagged += r2 <= REFINE_TOL * s
            G[i, j] = r2
    if flagged:
        for i in range(m):
            for j in range(n):
                if G[i, j] <= REFINE_TOL * (na[i] + nb[j]):
                    G[i, j] = _direct_r2(As, i, Bs, j)


@njit(cache=True)
def gram_sqdist(G, na, As):
    """Turn ``G = As As^T`` into exactly symmetric squared distances, zero diagonal."""
    m = G.shape[0]
    flagged = 0
    for i in range(m):
        for j in range(i + 1, m):
            s = na[i] + na[j]
            r2 = s - 2.0 * G[i, j]
            flagged += r2 <= REFINE_TOL * s
            G[i, j] = r2
    if flagged:
        for i in range(m):
            for j in range(i + 1, m):
                if G[i, j] <= REFINE_TOL * (na[i] + na[j]):
                    G[i, j] = _direct_r2(As, i, As, j)
    for i in range(m):
        G[i, i] = 0.0
    mirror_upper(G)


# --------------------------------------------------------------------------------------
# forward profiles: r2 -> K = f(r2) and, if wanted, fp = f'(r2)
# --------------------------------------------------------------------------------------
@njit(cache=True)
def _exponent(kind, r2, out):
    """``out`` = the argument of the exponential of the Matern/RBF profiles."""
    m, n = r2.shape
    if kind == RBF:
        for i in range(m):
            for j in range(n):
                out[i, j] = -0.5 * r2[i, j]
    else:
        c = 1.0 if kind == MATERN12 else (_SQRT3 if kind == MATERN32 else _SQRT5)
        for i in range(m):
            for j in range(n):
                out[i, j] = -c * math.sqrt(r2[i, j])


@njit(cache=True)
def _combine(kind, r2, K, want_fp):
    """``K`` holds ``exp(-c r)`` on entry; make it ``f``, and overwrite ``r2`` with ``f'(r2)``
    if ``want_fp``.

    The derivative is written over ``r2`` in place on purpose: with a separate output
    array that happens to be ``r2`` LLVM's runtime overlap check fails and the loop
    runs scalar (docs/constants.md); writing through the same array it knows that
    each entry is read before it is overwritten.
    """
    m, n = r2.shape
    if kind == RBF:
        if want_fp:
            for i in range(m):
                for j in range(n):
                    r2[i, j] = -0.5 * K[i, j]
    elif kind == MATERN12:
        # f'(r2) = -exp(-r) / (2 r) is infinite at r = 0, where the kernel has a kink:
        # take the subgradient 0 there instead of 0/0.
        if want_fp:
            for i in range(m):
                for j in range(n):
                    r = math.sqrt(r2[i, j])
                    r2[i, j] = -0.5 * K[i, j] / r if r > 0.0 else 0.0
    elif kind == MATERN32:
        if want_fp:
            for i in range(m):
                for j in range(n):
                    e = K[i, j]
                    K[i, j] = (1.0 + _SQRT3 * math.sqrt(r2[i, j])) * e
                    r2[i, j] = -1.5 * e
        else:
            for i in range(m):
                for j in range(n):
                    K[i, j] *= 1.0 + _SQRT3 * math.sqrt(r2[i, j])
    else:  # MATERN52
        if want_fp:
            for i in range(m):
                for j in range(n):
                    t = _SQRT5 * math.sqrt(r2[i, j])
                    e = K[i, j]
                    K[i, j] = (1.0 + t + t * t / 3.0) * e
                    r2[i, j] = -(5.0 / 6.0) * (1.0 + t) * e
        else:
            for i in range(m):
                for j in range(n):
                    t = _SQRT5 * math.sqrt(r2[i, j])
                    K[i, j] *= 1.0 + t + t * t / 3.0


@njit(cache=True)
def _rq_fp(r2, K, alpha, fp):
    """Rational quadratic: ``f' = -f / (2 (1 + r2 / (2 alpha)))``."""
    m, n = r2.shape
    h = 0.5 / alpha
    for i in range(m):
        for j in range(n):
            fp[i, j] = -0.5 * K[i, j] / (1.0 + h * r2[i, j])


@njit(cache=True)
def _expsine(r2, l, p, K, fp, want_fp):
    """ExpSineSquared on unscaled squared distances, fused (sin, cos, exp per entry)."""
    m, n = r2.shape
    k = math.pi / p
    inv_l2 = 1.0 / (l * l)
    for i in range(m):
        for j in range(n):
            x = k * math.sqrt(r2[i, j])
            s = math.sin(x)
            f = math.exp(-2.0 * s * s * inv_l2)
            K[i, j] = f
            if want_fp:
                # f' = f (-4 s cos(x) / l^2) (pi / p) / (2 r); sin(x) / r -> pi / p at 0
                sinc = s / x if x != 0.0 else 1.0
                fp[i, j] = -2.0 * f * math.cos(x) * sinc * k * k * inv_l2


def forward(kind, r2, p0, p1, K, want_fp):
    """Fill ``K = f(r2)`` for profile ``kind``; return ``fp = f'(r2)`` if ``want_fp``.

    For the profiles without parameters (RBF, Matern) the backward pass needs ``fp`` only,
    so ``fp`` is written over ``r2`` (one M x N buffer fewer to allocate and page in);
    for RQ and ExpSineSquared ``r2`` is kept and ``fp`` is a new array. ``f(0) = 1``
    exactly for every profile, so a zero diagonal of ``r2`` gives sklearn's unit
    diagonal.

    Returns
    -------
    fp : ndarray or None
        None without ``want_fp``; otherwise possibly ``r2`` itself (see above).
    """
    if kind == EXPSINE or kind == RQ:
        fp = np.empty_like(r2) if want_fp else np.empty((0, 0), dtype=r2.dtype)
    else:
        fp = r2
    if kind == EXPSINE:
        _expsine(r2, p0, p1, K, fp, want_fp)
    elif kind == RQ:
        # (1 + r2 / (2 alpha))^-alpha = exp(-alpha log1p(r2 / (2 alpha))): numpy's SIMD
        # log1p and exp
        np.multiply(r2, 0.5 / p0, out=K)
        np.log1p(K, out=K)
        K *= -p0
        np.exp(K, out=K)
        if want_fp:
            _rq_fp(r2, K, p0, fp)
    else:
        _exponent(kind, r2, K)
        np.exp(K, out=K)
        _combine(kind, r2, K, want_fp)
    return fp if want_fp else None


# --------------------------------------------------------------------------------------
# backward: W = K_bar * fp with its row and column sums; profile-parameter sums
# --------------------------------------------------------------------------------------
@njit(cache=True, fastmath={"reassoc"})
def weigh_cross(K_bar, fp, W, rs, cs):
    """``W = K_bar * fp``, ``rs = W.sum(1)``, ``cs = W.sum(0)``.

    ``reassoc`` lets LLVM vectorise the row sums (a different summation order only).
    """
    m, n = W.shape
    for j in range(n):
        cs[j] = 0.0
    for i in range(m):
        acc = 0.0
        for j in range(n):
            w = K_bar[i, j] * fp[i, j]
            W[i, j] = w
            acc += w
            cs[j] += w
        rs[i] = acc


@njit(cache=True, fastmath={"reassoc"})
def _rq_param_sum(K_bar, r2, fp, log1p_u, alpha):
    """``sum(K_bar * d f / d log alpha)``, ``d f / d log alpha = alpha f (u / (1 + u) -
    log(1 + u))`` with ``u = r2 / (2 alpha)`` and ``f = -2 (1 + u) fp``; ``log1p_u`` comes
    from numpy's SIMD log1p."""
    m, n = r2.shape
    h = 0.5 / alpha
    acc = 0.0
    for i in range(m):
        for j in range(n):
            u = h * r2[i, j]
            acc += K_bar[i, j] * fp[i, j] * (u - (1.0 + u) * log1p_u[i, j])
    return -2.0 * alpha * acc


@njit(cache=True)
def _expsine_param_sums(K_bar, r2, l, p):
    """``sum(K_bar * d f / d log l)`` and ``sum(K_bar * d f / d log p)``."""
    m, n = r2.shape
    k = math.pi / p
    inv_l2 = 1.0 / (l * l)
    q0 = 0.0
    q1 = 0.0
    for i in range(m):
        for j in range(n):
            x = k * math.sqrt(r2[i, j])
            s = math.sin(x)
            f = math.exp(-2.0 * s * s * inv_l2)
            kb = K_bar[i, j] * 4.0 * s * inv_l2 * f
            q0 += kb * s
            q1 += kb * x * math.cos(x)
    return q0, q1


def param_sums(kind, K_bar, r2, fp, p0, p1):
    """``(sum(K_bar * d f / d log p0), sum(K_bar * d f / d log p1))``.

    Works for gram mode too, since ``r2`` and ``fp`` are then full symmetric matrices.
    """
    if kind == RQ:
        log1p_u = np.multiply(r2, 0.5 / p0)
        np.log1p(log1p_u, out=log1p_u)
        return _rq_param_sum(K_bar, r2, fp, log1p_u, p0), 0.0
    if kind == EXPSINE:
        return _expsine_param_sums(K_bar, r2, p0, p1)
    return 0.0, 0.0


# --------------------------------------------------------------------------------------
# small helpers used by the other kernels and the combinators
# --------------------------------------------------------------------------------------
@njit(cache=True, fastmath={"reassoc"})
def scale_and_dot(bar, D, c, out):
    """``out = c * bar`` and return ``sum(bar * D)``, in one pass."""
    m, n = bar.shape
    acc = 0.0
    for i in range(m):
        for j in range(n):
            b = bar[i, j]
            out[i, j] = c * b
            acc += b * D[i, j]
    return acc


@njit(cache=True)
def mirror_upper(K):
    """Copy the upper triangle of a square matrix onto its lower triangle, in place.

    Tile by tile, with the inner loop writing a contiguous piece of a lower-triangle row
    and reading down a column of the upper triangle. The tiles are small because for a
    power-of-two ``M`` every row of a column read falls into the same L1 cache set, which
    large tiles thrash (docs/constants.md).
    """
    m = K.shape[0]
    for jb in range(0, m, _TILE):
        je = min(jb + _TILE, m)
        for ib in range(0, je, _TILE):
            ie = min(ib + _TILE, m)
            for j in range(jb, je):
                for i in range(ib, min(ie, j)):
                    K[j, i] = K[i, j]
