"""Elementwise part of the stationary kernels, compiled with numba.

A stationary kernel here is ``k(a, b) = f(r2)`` with ``r2`` the squared distance between
the (length-scaled) inputs. The BLAS plumbing in :mod:`._stationary` hands these loops
the Gram product ``G = A_s B_s^T`` and the squared row norms; everything that touches
the ``M x N`` matrices elementwise lives in this module and nowhere else, so that a GPU
port only has to rewrite this file (the scalar profiles below map one-to-one onto
elementwise kernels).

Each profile is identified by an integer ``kind`` and at most two parameters
``p0, p1`` (the ones that are not a length scale of the inputs):

========== ================================= ==================
kind        f(r2)                             p0, p1
========== ================================= ==================
RBF         exp(-r2 / 2)                      -
MATERN12    exp(-r)                           -
MATERN32    (1 + sqrt3 r) exp(-sqrt3 r)       -
MATERN52    (1 + sqrt5 r + 5 r2 / 3) exp(..)  -
RQ          (1 + r2 / (2 alpha))^-alpha       alpha
EXPSINE     exp(-2 sin^2(pi r / p) / l^2)     l, p
========== ================================= ==================

with ``r = sqrt(r2)``. The loops are generic in ``kind``: the branch is loop invariant
and perfectly predicted, and without SVML none of the transcendental calls vectorise
anyway, so specialised copies would buy nothing but compile time.

All jitted functions take and return arrays and plain scalars only (no Python
objects), ``parallel=False`` (the BLAS calls around them already use the cores), and
are cached on disk.
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

#: Number of profile parameters (p0, p1) that get a gradient, by kind.
N_PROFILE_PARAMS = {RBF: 0, MATERN12: 0, MATERN32: 0, MATERN52: 0, RQ: 1, EXPSINE: 2}

#: ``r2 = |a|^2 + |b|^2 - 2 a.b`` loses everything to cancellation when the two points
#: are close compared with their norms. Entries with ``r2 <= REFINE_TOL (|a|^2 + |b|^2)``
#: are recomputed as a plain sum of squared differences; the relative error of the rest
#: is then at most a few ``eps / REFINE_TOL``. This matters for the profiles in ``r``
#: (Matern 1/2 has ``d f / d r = -1`` at 0, so an absolute error of ``eps`` in ``r2``
#: would become an error of ``sqrt(eps)`` in ``K``) and for inducing inputs that sit on
#: training points.
REFINE_TOL = 1e-3

# Upper-triangle loops over a symmetric matrix visit it tile by tile so that the
# mirrored writes (column-wise) stay in cache.
_TILE = 64

_SQRT3 = math.sqrt(3.0)
_SQRT5 = math.sqrt(5.0)


# --------------------------------------------------------------------------------------
# scalar profiles
# --------------------------------------------------------------------------------------
@njit(cache=True)
def _f_fp(kind, r2, p0, p1):
    """Return ``(f(r2), d f / d r2)`` for one entry."""
    if kind == RBF:
        f = math.exp(-0.5 * r2)
        return f, -0.5 * f
    if kind == MATERN12:
        r = math.sqrt(r2)
        f = math.exp(-r)
        # d/dr2 exp(-r) = -exp(-r) / (2 r) is infinite at r = 0, where the kernel has a
        # kink; take the subgradient 0 there instead of 0/0.
        if r > 0.0:
            return f, -0.5 * f / r
        return f, 0.0
    if kind == MATERN32:
        t = _SQRT3 * math.sqrt(r2)
        e = math.exp(-t)
        return (1.0 + t) * e, -1.5 * e
    if kind == MATERN52:
        t = _SQRT5 * math.sqrt(r2)
        e = math.exp(-t)
        return (1.0 + t + t * t / 3.0) * e, -(5.0 / 6.0) * (1.0 + t) * e
    if kind == RQ:
        base = 1.0 + r2 / (2.0 * p0)
        f = base ** (-p0)
        return f, -0.5 * f / base
    # EXPSINE, r2 being the unscaled squared distance
    r = math.sqrt(r2)
    x = math.pi * r / p1
    s = math.sin(x)
    c = math.cos(x)
    inv_l2 = 1.0 / (p0 * p0)
    f = math.exp(-2.0 * s * s * inv_l2)
    # d f / d r2 = f * (-4 s c / l^2) * (pi / p) / (2 r); sin(x) / r -> pi / p at 0.
    sinc = s / x if x != 0.0 else 1.0
    k = math.pi / p1
    return f, -2.0 * f * c * sinc * k * k * inv_l2


@njit(cache=True)
def _dlogp(kind, r2, p0, p1, f):
    """Return ``(d f / d log p0, d f / d log p1)`` given ``f = f(r2)``."""
    if kind == RQ:
        u = r2 / (2.0 * p0)
        return p0 * f * (u / (1.0 + u) - math.log(1.0 + u)), 0.0
    if kind == EXPSINE:
        r = math.sqrt(r2)
        x = math.pi * r / p1
        s = math.sin(x)
        inv_l2 = 1.0 / (p0 * p0)
        return 4.0 * s * s * inv_l2 * f, 4.0 * x * s * math.cos(x) * inv_l2 * f
    return 0.0, 0.0


# --------------------------------------------------------------------------------------
# squared distances from the BLAS product
# --------------------------------------------------------------------------------------
@njit(cache=True)
def _direct_r2(As, i, Bs, j):
    """Plain sum of squared differences (the rare refined entries only)."""
    acc = 0.0
    for d in range(As.shape[1]):
        t = As[i, d] - Bs[j, d]
        acc += t * t
    return acc


# The test below is written out in every loop rather than in a helper taking the
# arrays: a call with array arguments in the inner loop costs reference counting per
# entry and was measured 20x slower than the inlined arithmetic.


@njit(cache=True)
def cross_sqdist(G, na, nb, As, Bs):
    """Turn ``G = As Bs^T`` into squared distances, in place."""
    m, n = G.shape
    for i in range(m):
        for j in range(n):
            s = na[i] + nb[j]
            r2 = s - 2.0 * G[i, j]
            if r2 <= REFINE_TOL * s:
                r2 = _direct_r2(As, i, Bs, j)
            G[i, j] = r2


@njit(cache=True)
def gram_sqdist(G, na, As):
    """Turn ``G = As As^T`` into exactly symmetric squared distances with a zero diagonal."""
    m = G.shape[0]
    for ib in range(0, m, _TILE):
        ie = min(ib + _TILE, m)
        for jb in range(ib, m, _TILE):
            je = min(jb + _TILE, m)
            for i in range(ib, ie):
                for j in range(max(jb, i + 1), je):
                    s = na[i] + na[j]
                    r2 = s - 2.0 * G[i, j]
                    if r2 <= REFINE_TOL * s:
                        r2 = _direct_r2(As, i, As, j)
                    G[i, j] = r2
                    G[j, i] = r2
    for i in range(m):
        G[i, i] = 0.0


# --------------------------------------------------------------------------------------
# forward: G -> r2 (kept in G), K = f(r2) and optionally fp = f'(r2)
# --------------------------------------------------------------------------------------
@njit(cache=True)
def cross_forward(G, na, nb, As, Bs, kind, p0, p1, K, fp, want_fp):
    """Fill ``K`` (and ``fp`` if ``want_fp``) from ``G = As Bs^T``; ``G`` becomes ``r2``."""
    m, n = G.shape
    for i in range(m):
        for j in range(n):
            s = na[i] + nb[j]
            r2 = s - 2.0 * G[i, j]
            if r2 <= REFINE_TOL * s:
                r2 = _direct_r2(As, i, Bs, j)
            G[i, j] = r2
            f, g = _f_fp(kind, r2, p0, p1)
            K[i, j] = f
            if want_fp:
                fp[i, j] = g


@njit(cache=True)
def gram_forward(G, na, As, kind, p0, p1, K, fp, want_fp):
    """Symmetric version of :func:`cross_forward`: each pair is evaluated once.

    The diagonal uses ``r2 = 0`` exactly, as sklearn does.
    """
    m = G.shape[0]
    for ib in range(0, m, _TILE):
        ie = min(ib + _TILE, m)
        for jb in range(ib, m, _TILE):
            je = min(jb + _TILE, m)
            for i in range(ib, ie):
                for j in range(max(jb, i + 1), je):
                    s = na[i] + na[j]
                    r2 = s - 2.0 * G[i, j]
                    if r2 <= REFINE_TOL * s:
                        r2 = _direct_r2(As, i, As, j)
                    G[i, j] = r2
                    G[j, i] = r2
                    f, g = _f_fp(kind, r2, p0, p1)
                    K[i, j] = f
                    K[j, i] = f
                    if want_fp:
                        fp[i, j] = g
                        fp[j, i] = g
    f0, g0 = _f_fp(kind, 0.0, p0, p1)
    for i in range(m):
        G[i, i] = 0.0
        K[i, i] = f0
        if want_fp:
            fp[i, i] = g0


# --------------------------------------------------------------------------------------
# backward: W = K_bar * fp with its row and column sums, and the profile-parameter sums
# --------------------------------------------------------------------------------------
@njit(cache=True)
def cross_backward(K_bar, fp, r2, kind, p0, p1, W, rs, cs, pbar):
    """``W = K_bar * fp``, ``rs = W.sum(1)``, ``cs = W.sum(0)``,
    ``pbar[k] += sum(K_bar * d f / d log p_k)`` (only for kinds with parameters)."""
    m, n = W.shape
    has_p = kind == RQ or kind == EXPSINE
    for j in range(n):
        cs[j] = 0.0
    q0 = 0.0
    q1 = 0.0
    for i in range(m):
        acc = 0.0
        for j in range(n):
            w = K_bar[i, j] * fp[i, j]
            W[i, j] = w
            acc += w
            cs[j] += w
        rs[i] = acc
        if has_p:
            for j in range(n):
                f, _ = _f_fp(kind, r2[i, j], p0, p1)
                d0, d1 = _dlogp(kind, r2[i, j], p0, p1, f)
                q0 += K_bar[i, j] * d0
                q1 += K_bar[i, j] * d1
    pbar[0] += q0
    pbar[1] += q1


@njit(cache=True)
def gram_backward(K_bar, fp, r2, kind, p0, p1, Ws, rs, pbar):
    """Symmetric backward: ``Ws = (K_bar + K_bar^T) * fp`` off the diagonal, 0 on it.

    ``r2`` and ``fp`` are symmetric. ``Ws`` is what multiplies the differences
    ``a_i - a_j`` when ``A`` sits in both arguments; its diagonal would multiply a zero
    difference, so it is set to 0 rather than left as rounding noise.
    ``rs = Ws.sum(1)`` (= ``Ws.sum(0)``), ``pbar[k] += sum(K_bar * d f / d log p_k)``.
    """
    m = Ws.shape[0]
    has_p = kind == RQ or kind == EXPSINE
    for i in range(m):
        rs[i] = 0.0
    q0 = 0.0
    q1 = 0.0
    for ib in range(0, m, _TILE):
        ie = min(ib + _TILE, m)
        for jb in range(ib, m, _TILE):
            je = min(jb + _TILE, m)
            for i in range(ib, ie):
                acc = 0.0
                for j in range(max(jb, i + 1), je):
                    s = K_bar[i, j] + K_bar[j, i]
                    w = s * fp[i, j]
                    Ws[i, j] = w
                    Ws[j, i] = w
                    acc += w
                    rs[j] += w
                    if has_p:
                        f, _ = _f_fp(kind, r2[i, j], p0, p1)
                        d0, d1 = _dlogp(kind, r2[i, j], p0, p1, f)
                        q0 += s * d0
                        q1 += s * d1
                rs[i] += acc
    for i in range(m):
        Ws[i, i] = 0.0
        if has_p:
            f, _ = _f_fp(kind, 0.0, p0, p1)
            d0, d1 = _dlogp(kind, 0.0, p0, p1, f)
            q0 += K_bar[i, i] * d0
            q1 += K_bar[i, i] * d1
    pbar[0] += q0
    pbar[1] += q1


# --------------------------------------------------------------------------------------
# small elementwise helpers used by the other kernels and the combinators
# --------------------------------------------------------------------------------------
@njit(cache=True)
def sum_product(a, b):
    """``sum(a * b)`` for two 2-D arrays of one shape, without a temporary."""
    m, n = a.shape
    acc = 0.0
    for i in range(m):
        for j in range(n):
            acc += a[i, j] * b[i, j]
    return acc


@njit(cache=True)
def mirror_upper(K):
    """Copy the upper triangle of a square matrix onto its lower triangle, in place."""
    m = K.shape[0]
    for ib in range(0, m, _TILE):
        ie = min(ib + _TILE, m)
        for jb in range(ib, m, _TILE):
            je = min(jb + _TILE, m)
            for i in range(ib, ie):
                for j in range(max(jb, i + 1), je):
                    K[j, i] = K[i, j]


def empty_like_fp(dtype):
    """Placeholder for the ``fp`` argument when no derivative is wanted."""
    return np.empty((0, 0), dtype=dtype)
