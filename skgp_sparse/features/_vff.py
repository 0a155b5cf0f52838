"""Variational Fourier features in one dimension for half-integer Matern kernels.

Hensman, Durrande and Solin (JMLR 2018). The kernel is scikit-learn's ``Matern`` of order
``nu`` in {0.5, 1.5, 2.5} and length scale ``l``, times an amplitude ``s2``; write
``lam = sqrt(2 nu) / l``. On an interval ``[a, b]`` the kernel's reproducing kernel
Hilbert space (RKHS) ``H`` restricted to ``[a, b]`` is a Sobolev space whose inner product
is an integral of derivatives over ``[a, b]`` plus terms at the left end ``a``:

* ``nu = 1/2``: ``<g, h> = 1/(2 lam s2) int (lam g + g')(lam h + h') + g(a) h(a) / s2``,
* ``nu = 3/2``: ``<g, h> = 1/(4 lam^3 s2) int (L g)(L h) + g(a) h(a) / s2
  + g'(a) h'(a) / (lam^2 s2)``, with ``L = (lam + d/dx)^2``,
* ``nu = 5/2``: ``<g, h> = 3/(16 lam^5 s2) int (L g)(L h) + 9 g(a) h(a) / (8 s2)
  + 9 g''(a) h''(a) / (8 lam^4 s2) + 3/(lam^2 s2) (g'(a) h'(a) + (g''(a) h(a) + g(a) h''(a)) / 8)``,
  with ``L = (lam + d/dx)^3``.

The features are the inner products of ``f`` with the ``M = 2F + 1`` functions
``1, cos(w_m (x - a)), sin(w_m (x - a))``, ``w_m = 2 pi m / (b - a)``, ``m = 1..F``, in
this order: rows ``0..F`` the cosines (row 0 the constant), rows ``F+1..2F`` the sines.
Because they are periodic on ``[a, b]`` the integrals of cross terms vanish, and
``K(u, u)`` is block diagonal (cosines, sines), each block a diagonal plus a rank-1 or
rank-2 term coming from the boundary terms (:class:`DiagonalPlusLowRank`,
:class:`BlockDiagonalLowRank`). By the reproducing property ``K(u, f)`` is the basis
itself inside ``[a, b]``; outside it is the inner product of each basis function with
the restriction of ``k(x, .)`` to ``[a, b]``: see :func:`vff_kuf`.
``K(f, f)`` is the kernel's own (diagonal ``s2``).

The derivatives are in ``log_length_scale`` and ``log_variance`` (scikit-learn's theta of
``ConstantKernel(s2) * Matern(l)``).
"""

import numpy as np

__all__ = [
    "BlockDiagonalLowRank",
    "DiagonalPlusLowRank",
    "vff_frequencies",
    "vff_kuf",
    "vff_kuf_adjoint",
    "vff_kuu",
    "vff_kuu_adjoint",
    "vff_log_det_kuu_adjoint",
]

_ORDERS = (0.5, 1.5, 2.5)


class DiagonalPlusLowRank:
    """The symmetric positive definite matrix ``diag(diagonal) + factor @ factor.T``.

    Solves and the log-determinant use the Woodbury identity and the matrix determinant
    lemma through the small ``r x r`` capacitance ``C = I + factor.T diag(1/diagonal)
    factor``: O(n r^2) time, O(n r) memory, no Cholesky of the ``n x n`` matrix.

    Parameters
    ----------
    diagonal : ndarray of shape (n,)
        Positive diagonal.
    factor : ndarray of shape (n, r)
        Low-rank factor (``r`` may be 0).
    """

    def __init__(self, diagonal, factor):
        self.diagonal = np.asarray(diagonal, dtype=np.float64)
        factor = np.asarray(factor, dtype=np.float64)
        self.factor = factor[:, None] if factor.ndim == 1 else factor
        scaled = self.factor / self.diagonal[:, None]
        self._scaled_factor = scaled
        self._capacitance = np.eye(self.factor.shape[1]) + self.factor.T @ scaled

    @property
    def shape(self):
        """``(n, n)``."""
        return (self.diagonal.size, self.diagonal.size)

    def dense(self):
        """The matrix as a dense ndarray of shape (n, n)."""
        return np.diag(self.diagonal) + self.factor @ self.factor.T

    def matmul(self, B):
        """``self @ B`` for B of shape (n,) or (n, k)."""
        B = np.asarray(B, dtype=np.float64)
        scale = self.diagonal if B.ndim == 1 else self.diagonal[:, None]
        return scale * B + self.factor @ (self.factor.T @ B)

    def solve(self, B):
        """``self^{-1} B`` for B of shape (n,) or (n, k), by the Woodbury identity."""
        B = np.asarray(B, dtype=np.float64)
        scale = self.diagonal if B.ndim == 1 else self.diagonal[:, None]
        DinvB = B / scale
        if self.factor.shape[1] == 0:
            return DinvB
        return DinvB - self._scaled_factor @ np.linalg.solve(self._capacitance, self.factor.T @ DinvB)

    def log_det(self):
        """``log det(self)`` by the matrix determinant lemma."""
        small = np.linalg.slogdet(self._capacitance)[1] if self.factor.shape[1] else 0.0
        return float(np.sum(np.log(self.diagonal)) + small)

    def inverse_diagonal(self):
        """The diagonal of ``self^{-1}``, shape (n,), in O(n r^2)."""
        if self.factor.shape[1] == 0:
            return 1.0 / self.diagonal
        inner = np.linalg.solve(self._capacitance, self._scaled_factor.T)
        return 1.0 / self.diagonal - np.sum(self._scaled_factor * inner.T, axis=1)


class BlockDiagonalLowRank:
    """A block-diagonal matrix of :class:`DiagonalPlusLowRank` blocks.

    Parameters
    ----------
    blocks : sequence of DiagonalPlusLowRank
        The diagonal blocks, top-left first.
    """

    def __init__(self, blocks):
        self.blocks = list(blocks)
        sizes = [blk.shape[0] for blk in self.blocks]
        self._edges = np.cumsum([0] + sizes)

    @property
    def shape(self):
        """``(n, n)``, ``n`` the sum of the blocks' sizes."""
        return (int(self._edges[-1]), int(self._edges[-1]))

    def _apply(self, method, B):
        B = np.asarray(B, dtype=np.float64)
        parts = [getattr(blk, method)(B[lo:hi]) for blk, lo, hi in
                 zip(self.blocks, self._edges[:-1], self._edges[1:])]
        return np.concatenate(parts, axis=0)

    def dense(self):
        """The matrix as a dense ndarray of shape (n, n)."""
        out = np.zeros(self.shape)
        for blk, lo, hi in zip(self.blocks, self._edges[:-1], self._edges[1:]):
            out[lo:hi, lo:hi] = blk.dense()
        return out

    def matmul(self, B):
        """``self @ B`` for B of shape (n,) or (n, k)."""
        return self._apply("matmul", B)

    def solve(self, B):
        """``self^{-1} B`` for B of shape (n,) or (n, k), block by block (Woodbury)."""
        return self._apply("solve", B)

    def log_det(self):
        """``log det(self)``: the sum over the blocks (matrix determinant lemma)."""
        return float(sum(blk.log_det() for blk in self.blocks))

    def inverse_diagonal(self):
        """The diagonal of ``self^{-1}``, shape (n,)."""
        return np.concatenate([blk.inverse_diagonal() for blk in self.blocks])


def _check_order(nu):
    if float(nu) not in _ORDERS:
        raise ValueError(f"nu must be one of {_ORDERS}, got {nu!r}")
    return float(nu)


def vff_frequencies(a, b, n_frequencies):
    """Angular frequencies ``w_m = 2 pi m / (b - a)``, ``m = 0..F``.

    Parameters
    ----------
    a, b : float
        The interval, ``a < b``.
    n_frequencies : int
        ``F``, the number of nonzero frequencies.

    Returns
    -------
    ndarray of shape (F + 1,)
    """
    if not b > a:
        raise ValueError(f"need a < b, got a={a!r}, b={b!r}")
    return 2.0 * np.pi * np.arange(n_frequencies + 1) / (b - a)


# Tails of K(u, f) outside [a, b]. For x outside, k(x, .) restricted to [a, b] is a
# combination of k(e, .) and its derivatives in the first argument at the nearer end e,
# with coefficients that depend on d = |x - e|; by the reproducing property of those
# representers the inner product with a basis function is the same combination of the
# function's value and derivatives at e (the same at a and b: the basis is periodic).
# Cosine rows (value 1, slope 0, curvature -w^2 at e) and sine rows (value 0, slope w,
# curvature 0) give, with s = x - e the signed offset and E = exp(-lam d):
#   nu = 1/2: cos E,                             sin 0
#   nu = 3/2: cos (1 + lam d) E,                 sin s w E
#   nu = 5/2: cos (1 + lam d + (lam^2 - w^2) d^2 / 2) E,   sin s w (1 + lam d) E
# and their derivatives in log l (= -lam d/dlam):
#   nu = 1/2: cos lam d E,                       sin 0
#   nu = 3/2: cos lam^2 d^2 E,                   sin lam d s w E
#   nu = 5/2: cos lam d^3 (lam^2 - w^2) E / 2,   sin lam^2 d^2 s w E
def _tails(nu, lam, w_cos, w_sin, offset):
    """Cosine and sine rows of K(u, f) and their log-length-scale derivatives at the
    signed offsets ``offset`` (K,) of outside inputs from the nearer end."""
    d = np.abs(offset)
    E = np.exp(-lam * d)
    ld = lam * d
    wc, ws = w_cos[:, None], w_sin[:, None]
    if nu == 0.5:
        cos = np.broadcast_to(E, (w_cos.size, d.size))
        sin = np.zeros((w_sin.size, d.size))
        dcos = np.broadcast_to(ld * E, cos.shape)
        dsin = sin
    elif nu == 1.5:
        cos = np.broadcast_to((1.0 + ld) * E, (w_cos.size, d.size))
        sin = ws * (offset * E)
        dcos = np.broadcast_to(ld * ld * E, cos.shape)
        dsin = ws * (ld * offset * E)
    else:
        cos = (1.0 + ld + 0.5 * (lam**2 - wc**2) * d * d) * E
        sin = ws * (offset * (1.0 + ld) * E)
        dcos = 0.5 * lam * (lam**2 - wc**2) * (d**3 * E)
        dsin = ws * (ld * ld * offset * E)
    return np.vstack([cos, sin]), np.vstack([dcos, dsin])


def _outside(x, a, b):
    """Index of the inputs outside [a, b] and their signed offsets from the nearer end."""
    idx = np.flatnonzero((x < a) | (x > b))
    xo = x[idx]
    return idx, np.where(xo < a, xo - a, xo - b)


def vff_kuf(x, a, b, n_frequencies, nu, length_scale):
    """Covariance between the Fourier features and function values.

    Parameters
    ----------
    x : ndarray of shape (N,)
        Inputs (one dimension).
    a, b : float
        The interval of the features.
    n_frequencies : int
        ``F``: ``M = 2F + 1`` features.
    nu : {0.5, 1.5, 2.5}
        Matern order.
    length_scale : float
        Matern length scale ``l`` (``lam = sqrt(2 nu) / l``).

    Returns
    -------
    ndarray of shape (2F + 1, N)
        Inside ``[a, b]``: ``cos(w_m (x - a))`` (rows 0..F) and ``sin(w_m (x - a))``
        (rows F+1..2F), independent of the hyperparameters (the amplitude cancels
        everywhere). Outside, with ``e`` the nearer end, ``s = x - e``, ``d = |s|`` and
        ``E = exp(-lam d)``, every cosine row gets ``E`` (nu = 1/2), ``(1 + lam d) E``
        (3/2) or ``(1 + lam d + (lam^2 - w_m^2) d^2 / 2) E`` (5/2), and the sine rows
        ``0``, ``s w_m E`` or ``s w_m (1 + lam d) E``: the features' covariance with a
        value of the process outside the box, which decays with the distance.
    """
    nu = _check_order(nu)
    x = np.asarray(x, dtype=np.float64).ravel()
    w = vff_frequencies(a, b, n_frequencies)
    phase = x - a
    out = np.vstack([np.cos(np.outer(w, phase)), np.sin(np.outer(w[1:], phase))])
    idx, offset = _outside(x, a, b)
    if idx.size:
        lam = np.sqrt(2.0 * nu) / length_scale
        out[:, idx] = _tails(nu, lam, w, w[1:], offset)[0]
    return out


def vff_kuf_adjoint(x, a, b, n_frequencies, nu, length_scale, bar):
    """Gradient of ``sum(bar * K(u, f))`` in ``log_length_scale``.

    Only the inputs outside ``[a, b]`` contribute (inside, ``K(u, f)`` does not depend on
    the hyperparameters), and ``K(u, f)`` never depends on the amplitude.

    Parameters
    ----------
    x, a, b, n_frequencies, nu, length_scale
        As in :func:`vff_kuf`.
    bar : ndarray of shape (2F + 1, N)
        The adjoint of ``K(u, f)``.

    Returns
    -------
    float
    """
    nu = _check_order(nu)
    x = np.asarray(x, dtype=np.float64).ravel()
    idx, offset = _outside(x, a, b)
    if idx.size == 0:
        return 0.0
    w = vff_frequencies(a, b, n_frequencies)
    lam = np.sqrt(2.0 * nu) / length_scale
    dK = _tails(nu, lam, w, w[1:], offset)[1]
    return float(np.sum(np.asarray(bar, dtype=np.float64)[:, idx] * dK))


# K(u, u) parameters. Each block's diagonal is (b - a) c (lam^2 + w^2)^p / (lam^(2p-1) s2)
# with p = nu + 1/2 (from the integral term: L applied to cos or sin of frequency w has
# squared modulus (lam^2 + w^2)^p, and the mean of cos^2 over whole periods is 1/2, of 1
# is 1); c below is for w > 0 (halve the divisor at w = 0). The low-rank factors come from
# the boundary terms (divided by sqrt(s2)).
_DIAG_CONST = {0.5: 1.0 / 4.0, 1.5: 1.0 / 8.0, 2.5: 3.0 / 32.0}


def _block_parts(nu, lam, w, b_minus_a, variance, sine):
    """Diagonal, low-rank factor and their derivatives in log l, for one block."""
    p = nu + 0.5
    const = np.full(w.shape, _DIAG_CONST[nu])
    if not sine:
        const[w == 0] *= 2.0
    diag = b_minus_a * const * (lam**2 + w**2) ** p / lam ** (2 * p - 1) / variance
    # d log diag / d log lam = 2p lam^2 / (lam^2 + w^2) - (2p - 1); d lam / d log l = -lam.
    ddiag = -diag * (2 * p * lam**2 / (lam**2 + w**2) - (2 * p - 1))
    root = np.sqrt(variance)
    ones = np.ones_like(w)[:, None] / root
    if sine:
        if nu == 0.5:
            factor = np.zeros((w.size, 0))
        else:
            factor = (np.sqrt(3.0) if nu == 2.5 else 1.0) * (w / lam)[:, None] / root
        dfactor = factor.copy()  # proportional to 1/lam: d/d log l multiplies by 1
    elif nu == 2.5:
        curv = (3.0 * (w / lam) ** 2 - 1.0) / np.sqrt(8.0 * variance)
        factor = np.column_stack([curv, ones[:, 0]])
        dfactor = np.column_stack([6.0 * (w / lam) ** 2 / np.sqrt(8.0 * variance), 0.0 * w])
    else:
        factor, dfactor = ones, np.zeros_like(ones)
    return diag, factor, ddiag, dfactor


def _kuu_parts(a, b, n_frequencies, nu, length_scale, variance):
    nu = _check_order(nu)
    w = vff_frequencies(a, b, n_frequencies)
    lam = np.sqrt(2.0 * nu) / length_scale
    return (_block_parts(nu, lam, w, b - a, variance, sine=False),
            _block_parts(nu, lam, w[1:], b - a, variance, sine=True))


def vff_kuu(a, b, n_frequencies, nu, length_scale, variance):
    """Covariance of the Fourier features as a structured operator.

    Parameters
    ----------
    a, b : float
        The interval.
    n_frequencies : int
        ``F``: ``M = 2F + 1`` features.
    nu : {0.5, 1.5, 2.5}
        Matern order.
    length_scale : float
        Matern length scale.
    variance : float
        Amplitude ``s2``; ``K(u, u)`` is proportional to ``1 / s2``.

    Returns
    -------
    BlockDiagonalLowRank
        Cosine block (F + 1) then sine block (F), each ``diag + U U^T``: rank 1 and 0
        (nu = 1/2), 1 and 1 (3/2), 2 and 1 (5/2). No jitter is needed: the diagonal is
        positive.
    """
    cos_parts, sin_parts = _kuu_parts(a, b, n_frequencies, nu, length_scale, variance)
    return BlockDiagonalLowRank([DiagonalPlusLowRank(*cos_parts[:2]),
                                 DiagonalPlusLowRank(*sin_parts[:2])])


def vff_kuu_adjoint(a, b, n_frequencies, nu, length_scale, variance, bar):
    """Gradient of ``sum(bar * K(u, u))`` in ``log_length_scale`` and ``log_variance``.

    One adjoint serves every term of a bound: the collapsed (Titsias) bound and the KL
    both reach ``K(u, u)`` through log-determinants, solves and traces, whose adjoints are
    dense ``M x M`` matrices (``K^{-1}`` for ``log det K``, ``-K^{-1} A K^{-1}`` for
    ``tr(K^{-1} A)``, ``-K^{-1} m m^T K^{-1}`` for ``m^T K^{-1} m``) that the caller sums
    into ``bar``; the structure makes this contraction O(M^2 r) (r <= 2) instead of forming
    the derivative matrices. For ``log det K`` alone, :func:`vff_log_det_kuu_adjoint` is
    O(M).

    Parameters
    ----------
    a, b, n_frequencies, nu, length_scale, variance
        As in :func:`vff_kuu`.
    bar : ndarray of shape (2F + 1, 2F + 1)
        The adjoint of the dense ``K(u, u)`` (need not be symmetric); entries off the two
        diagonal blocks do not contribute.

    Returns
    -------
    dict
        ``"log_length_scale"`` and ``"log_variance"``, floats.
    """
    bar = np.asarray(bar, dtype=np.float64)
    n_cos = n_frequencies + 1
    g_ls = g_var = 0.0
    for (diag, factor, ddiag, dfactor), sl in zip(
            _kuu_parts(a, b, n_frequencies, nu, length_scale, variance),
            (slice(0, n_cos), slice(n_cos, None))):
        blk = bar[sl, sl]
        sym_factor = (blk + blk.T) @ factor
        g_ls += np.diagonal(blk) @ ddiag + np.sum(sym_factor * dfactor)
        # K(u, u) is proportional to 1 / s2: d K / d log s2 = -K.
        g_var -= np.diagonal(blk) @ diag + np.sum((blk @ factor) * factor)
    return {"log_length_scale": float(g_ls), "log_variance": float(g_var)}


def vff_log_det_kuu_adjoint(a, b, n_frequencies, nu, length_scale, variance):
    """Gradient of ``log det K(u, u)`` in ``log_length_scale`` and ``log_variance``, in O(M).

    ``d log det K = tr(K^{-1} dK)`` with ``dK = diag(dd) + dU U^T + U dU^T`` per block:
    the diagonal of ``K^{-1}`` and ``K^{-1} U`` come from the Woodbury form, so neither
    ``K^{-1}`` nor ``dK`` is formed. The KL's and the collapsed bound's ``log det K(u, u)``
    terms need exactly this.

    Parameters
    ----------
    a, b, n_frequencies, nu, length_scale, variance
        As in :func:`vff_kuu`.

    Returns
    -------
    dict
        ``"log_length_scale"`` and ``"log_variance"`` (the latter is ``-M``: ``K`` is
        proportional to ``1 / s2``).
    """
    g_ls = 0.0
    for diag, factor, ddiag, dfactor in _kuu_parts(a, b, n_frequencies, nu, length_scale, variance):
        blk = DiagonalPlusLowRank(diag, factor)
        g_ls += blk.inverse_diagonal() @ ddiag + 2.0 * np.sum(blk.solve(factor) * dfactor)
    return {"log_length_scale": float(g_ls), "log_variance": -float(2 * n_frequencies + 1)}
