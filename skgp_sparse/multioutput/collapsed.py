"""The LMC bound with the joint q(u_1, ..., u_L) at its optimum under Gaussian noise, and
its gradient: the objective of the exact search that starts a multi-output fit.

With whitened inducing values v_l = L_l^-1 u_l (prior N(0, I)), A_l = L_l^-1 K(Z, X) of
latent l's kernel (M x n), and per-entry precisions beta[n, p] (a row's count over output
p's noise variance, zero where the entry is missing), the outputs at the rows are
f[n, p] = sum_l W[p, l] a_{l,n}^T v_l plus the part of each latent that the inducing
values do not explain. Jointly Gaussian over the L x M values, the optimal q(v) is

    S = B^-1,   B = I + [A_l diag(c_ll') A_l'^T]_{l,l'},   m = B^-1 [A_l r_l]_l

with c_ll'[n] = sum_p beta[n, p] W[p, l] W[p, l'] and r_l[n] = sum_p beta[n, p] W[p, l] y[n, p],
and the bound, less the noise's normaliser, is

    Q = -1/2 (sum_np beta (y - mu)^2 + m^T m) - 1/2 log|B| - 1/2 sum_{n,l} c_ll[n] t_l[n]

where mu = mean_g W^T, mean_g[:, l] = A_l^T m_l and t_l[n] = k_l(x_n, x_n) - |a_{l,n}|^2.
Q is the maximum over q of F(q) = -1/2 sum_np beta ((y - mu)^2 + var_np) - KL(q || p), so
its gradient in any parameter is F's partial gradient at the optimal q (the envelope
theorem), which is what is written below, with T_ll'[n] = a_{l,n}^T S_ll' a_{l',n}:

    dQ/dA_l    = m_l e_l^T + A_l diag(c_ll) - sum_l' S_ll' A_l' diag(c_ll'),  e = (beta * (y - mu)) W
    dQ/dk_l    = -1/2 c_ll
    dQ/dW[p,l] = sum_n [e'_np mean_g[n,l] - beta_np W[p,l] t_l[n] - beta_np sum_l' W[p,l'] T_ll'[n]]
    beta_p dQ/dbeta_p = -1/2 sum_n beta_np ((y - mu)^2 + var_np)

with e' = beta * (y - mu) and var_np = sum_l W[p,l]^2 t_l[n] + sum_ll' W[p,l] W[p,l'] T_ll'[n].
It costs O(L^3 M^3 + L^2 n M^2): the search runs on a few thousand rows, so this is paid
there and never in a training step. tests/test_multioutput.py checks the value against
the dense Gaussian of all L x M values and each derivative against finite differences.
"""

from dataclasses import dataclass

import numpy as np

from .. import backend as be
from ..bases.toolkit import cross_and_diagonal, factor_kzz
from ..linalg import (add_to_diagonal, cho_solve, cholesky, copy_array, diagonal, jittered_cholesky_backward, mm,
                      solve_triangular, tri_inverse, tri_mm)


@dataclass
class LMCCollapsedBound:
    """The bound Q (without the noise's normaliser), its derivatives, and the relative
    jitter the factorisations of K_zz needed."""

    value: float
    #: Gradient in every distinct kernel's log-hyperparameters, concatenated (numpy).
    theta_bar: np.ndarray
    inducing_bar: object
    mixing_bar: object
    #: -dQ/dy summed over the rows, sum_n beta[n, p] (y[n, p] - mu[n, p]): the gradient in a
    #: constant subtracted from output p's targets.
    target_bar: object
    #: sum_n beta[n, p] dQ/dbeta[n, p] for each output p (numpy, (P,)).
    beta_scaling_bar: np.ndarray
    jitter: float


def lmc_collapsed_bound(kernels, kernel_of_column, X, Y, beta, W, Z, jitter, coupled=True):
    """Q and its gradient (see the module's docstring).

    Parameters
    ----------
    kernels : list of compiled kernels
        The distinct kernels.
    kernel_of_column : list of int
        For each of the L latent columns, the index of its kernel in ``kernels``.
    X : array of shape (n, D)
    Y : array of shape (n, P)
        Targets, zero where missing.
    beta : array of shape (n, P)
        Per-entry precisions, zero where missing.
    W : array of shape (P, L)
    Z : array of shape (M, D)
        The shared inducing inputs.
    jitter : float
    coupled : bool, default=True
        False where W leaves the latents apart (no output loads on two of them): only the
        diagonal blocks of B are then built.

    Returns
    -------
    LMCCollapsedBound
    """
    xp = be.namespace(X)
    n_latent, m = W.shape[1], Z.shape[0]
    factors = []
    for kernel in kernels:
        low_k, used, back_zz = factor_kzz(kernel, Z, jitter, True)
        kzx, back_zx, kdiag, back_diag = cross_and_diagonal(kernel, Z, X, True)
        factors.append((low_k, used, back_zz, back_zx, back_diag, solve_triangular(low_k, kzx), kdiag))
    A = [factors[k][5] for k in kernel_of_column]
    pairs = _pairs(n_latent, coupled)
    c, r, b_minus_i = _row_terms(A, Y, beta, W, pairs, m, xp)
    low_b = cholesky(add_to_diagonal(b_minus_i, 1.0, xp))
    # S = B^-1 = F^T F with F = L_B^-1: its blocks enter only through F's column blocks
    # times the projections, U_l = F[:, l] A_l, so S itself is never formed.
    inv_b = tri_inverse(low_b)
    q_mean = mm(inv_b, mm(inv_b, _shift(A, r)), trans_a=True)
    means = [q_mean[l * m : (l + 1) * m, :] for l in range(n_latent)]
    mean_g = xp.concat([mm(A[l], means[l], trans_a=True) for l in range(n_latent)], axis=1)
    resid = Y - mean_g @ W.T
    weighted = beta * resid
    t = xp.stack([factors[kernel_of_column[l]][6] - xp.sum(A[l] * A[l], axis=0) for l in range(n_latent)], axis=1)
    log_det_b = 2.0 * float(xp.sum(xp.log(diagonal(low_b, xp))))
    value = (-0.5 * (float(xp.sum(weighted * resid)) + float(xp.sum(q_mean * q_mean))) - 0.5 * log_det_b
             - 0.5 * sum(float(xp.sum(c[(l, l)] * t[:, l])) for l in range(n_latent)))

    e_g = weighted @ W
    mixing_bar = weighted.T @ mean_g - W * (beta.T @ t)
    var_f, spread, pull, s_diag = _posterior_terms(A, beta, W, t, inv_b, coupled)
    mixing_bar = mixing_bar - pull.T
    a_bars = [means[l] * xp.reshape(e_g[:, l], (1, -1)) + A[l] * xp.reshape(c[(l, l)], (1, -1)) - spread[l]
              for l in range(n_latent)]
    beta_scaling_bar = -0.5 * xp.sum(beta * (resid * resid + var_f), axis=0)

    theta_parts, inducing_bar = [], None
    for k, (low_k, used, back_zz, back_zx, back_diag, a, _) in enumerate(factors):
        mine = [l for l in range(n_latent) if kernel_of_column[l] == k]
        a_bar = sum(a_bars[l] for l in mine)
        lt_low_bar = -sum(_projection_gram(means[l], a, e_g[:, l], b_minus_i[l * m : (l + 1) * m, l * m : (l + 1) * m],
                                           s_diag[l], xp) for l in mine)
        kzz_bar = jittered_cholesky_backward(low_k, lt_low_bar, used)
        theta_zz, z_zz = back_zz(kzz_bar)
        theta_zx, z_zx = back_zx(solve_triangular(low_k, a_bar, trans=True))
        theta_d = back_diag(-0.5 * sum(c[(l, l)] for l in mine))
        theta_parts.append(np.asarray(be.to_numpy(theta_zz + theta_zx + theta_d), dtype=np.float64))
        inducing_bar = z_zz + z_zx if inducing_bar is None else inducing_bar + z_zz + z_zx
    used = max(f[1] for f in factors)
    return LMCCollapsedBound(value, np.concatenate(theta_parts), inducing_bar, mixing_bar, xp.sum(weighted, axis=0),
                             np.asarray(be.to_numpy(beta_scaling_bar), dtype=np.float64), used)


#: The rows of a chunk of :func:`_posterior_terms` are CHUNK_ENTRIES / (L^2 M), so that its
#: memory does not grow with the rows by L^2 M entries a row (each row block's arrays then
#: hold at most CHUNK_ENTRIES / L entries, 3.2 MiB in float64 at 2^21). Larger chunks cost
#: memory, smaller ones time per evaluation (docs/constants.md).
CHUNK_ENTRIES = 2**21


def _posterior_terms(A, beta, W, t, inv_b, coupled):
    """The terms of the gradient that the joint covariance S = F^T F (F = L_B^-1) enters.

    With U_l = F[:, l] A_l (L M x n), H_p = sum_l W[p, l] U_l and G_l = sum_p W[p, l]
    H_p diag(beta_p):

    * var_f[n, p] = sum_l W[p, l]^2 t_l[n] + |H_p[:, n]|^2, the outputs' variance under q;
    * spread_l = F[:, l]^T G_l = sum_l' S_ll' A_l' diag(c_ll') (M x n);
    * pull[l, p] = sum_n beta[n, p] U_l[:, n]^T H_p[:, n] = sum_l' W[p, l'] sum_n beta[n, p] T_ll'[n];
    * s_diag[l] = S_ll = sum_r F[r, l]^T F[r, l], the diagonal blocks of S (M x M each).

    Written with H, the sums over pairs of latents become two products with W (L inner
    terms) instead of L^2 passes over L M x n arrays. F is lower triangular, so U_l is zero
    above its row block l (and, where the mixing leaves the latents apart, below it too):
    the terms go row block by row block, each with only the latents whose U is nonzero
    there (``_row_block_latents``), so that no zero block is written, mixed or summed. The
    rows go in chunks of :data:`CHUNK_ENTRIES`.
    """
    xp = be.namespace(W)
    n_out, n_latent = W.shape
    m, n = A[0].shape
    spans = [_row_block_latents(r, coupled) for r in range(n_latent)]
    # F's nonzero M x M blocks, copied once: every chunk reads each of them twice, and a
    # strided slice would reach BLAS as a fresh copy at each product (numpy).
    blocks = {(r, l): copy_array(inv_b[r * m : (r + 1) * m, l * m : (l + 1) * m])
              for r in range(n_latent) for l in range(*spans[r])}
    chunk = max(1, CHUNK_ENTRIES // (n_latent * n_latent * m))
    squares = W * W
    var_parts, spread_parts, pull = [], [[] for _ in range(n_latent)], 0.0
    for begin in range(0, n, chunk):
        end = min(n, begin + chunk)
        width = end - begin
        weights = xp.reshape(beta[begin:end, :].T, (n_out, 1, width))
        var = t[begin:end, :] @ squares.T
        spread = [None] * n_latent
        # Each latent's columns of the chunk, copied once: row blocks l to L - 1 read them,
        # and a strided slice would reach BLAS as a fresh copy at each product (numpy).
        columns = [copy_array(a[:, begin:end]) for a in A]
        for r, (low, high) in enumerate(spans):
            # Row block r of U_low .. U_high, flattened: (latents, M * width).
            V = xp.reshape(xp.stack([_block_mm(blocks[(r, l)], columns[l], r == l, False, xp)
                                     for l in range(low, high)]), (high - low, m * width))
            mixing = W[:, low:high]
            H = xp.reshape(mm(mixing, V), (n_out, m, width))
            var = var + xp.sum(H * H, axis=1).T
            weighted_h = xp.reshape(H * weights, (n_out, m * width))
            pull = pull + _placed_rows(mm(V, weighted_h, trans_b=True), low, n_latent)
            G = xp.reshape(mm(mixing, weighted_h, trans_a=True), (high - low, m, width))
            for l in range(low, high):
                term = _block_mm(blocks[(r, l)], G[l - low, :, :], r == l, True, xp)
                spread[l] = term if spread[l] is None else spread[l] + term
        var_parts.append(var)
        for l in range(n_latent):
            spread_parts[l].append(spread[l])
    spread = [xp.concat(parts, axis=1) for parts in spread_parts]
    s_diag = [None] * n_latent
    for (r, l), block in blocks.items():
        term = tri_mm(block, block, trans=True, xp=xp, zeros_above=True) if r == l else mm(block, block, trans_a=True)
        s_diag[l] = term if s_diag[l] is None else s_diag[l] + term
    return xp.concat(var_parts, axis=0), spread, pull, s_diag


def _projection_gram(mean, a, e, b_block, s_block, xp):
    """a_bar_l A_l^T (M x M) for latent l's part a_bar_l = m_l e_l^T + A_l diag(c_ll) -
    spread_l of dQ/dA_l, without a product over the rows.

    A_l diag(c_ll) A_l^T is B's diagonal block less I, and spread_l A_l^T =
    sum_l' S_ll' A_l' diag(c_ll') A_l^T = [S (B - I)]_ll = I - S_ll since S = B^-1, so

        a_bar_l A_l^T = m_l (A_l e_l)^T + (B - I)_ll + S_ll - I.

    The product over the rows costs 2 M^2 n flops a latent (weather's 2,048 search rows,
    L = 5, M = 256: 1.3 GFLOP an evaluation); S_ll, from F's blocks, about (L - l) 2 M^3.
    """
    m = a.shape[0]
    moved = mm(a, xp.reshape(e, (-1, 1)))
    return add_to_diagonal(mean * xp.reshape(moved, (1, m)) + b_block + s_block, -1.0, xp)


def _block_mm(block, b, diagonal_block, trans, xp):
    """op(block) @ b for an M x M block of F = L_B^-1: a diagonal block is lower
    triangular (zeros above, from :func:`tri_inverse`), and a triangular product takes half
    the flops of a full one (numpy: TRMM; docs/constants.md)."""
    if diagonal_block:
        return tri_mm(block, b, trans=trans, xp=xp, zeros_above=True)
    return mm(block, b, trans_a=trans)


def _row_block_latents(r, coupled):
    """The latents l whose U_l = F[:, l] A_l is nonzero in row block r, as the range
    (low, high): l <= r (F is lower triangular), only r itself where the mixing leaves the
    latents apart (F is then block diagonal)."""
    return (0 if coupled else r, r + 1)


def _placed_rows(rows, top, size):
    """``rows`` (k x c) placed from row ``top`` of a zero array of ``size`` rows."""
    xp = be.namespace(rows)
    below = size - top - rows.shape[0]
    zeros = [xp.zeros((k, rows.shape[1]), dtype=rows.dtype, device=be.device_of(rows)) for k in (top, below)]
    return xp.concat([part for part in (zeros[0], rows, zeros[1]) if part.shape[0] > 0], axis=0)


def _pairs(n_latent, coupled):
    """The latent pairs (l, l') whose block of B the rows fill (the diagonal only where
    the mixing leaves the latents apart)."""
    return [(l, j) for l in range(n_latent) for j in range(n_latent) if coupled or l == j]


def _row_terms(A, Y, beta, W, pairs, m, xp):
    """c_ll' for every pair, r (n, L) and B - I of the rows whose projections are A."""
    n_latent = W.shape[1]
    c = {(l, j): beta @ (W[:, l] * W[:, j]) for (l, j) in pairs}
    r = (beta * Y) @ W
    blocks = {}
    for (l, j) in pairs:
        # B is symmetric: each block above the diagonal once, its transpose below.
        if l <= j:
            blocks[(l, j)] = mm(A[l] * xp.reshape(c[(l, j)], (1, -1)), A[j], trans_b=True)
    zero = xp.zeros((m, m), dtype=A[0].dtype, device=be.device_of(A[0]))
    rows = [xp.concat([blocks[(l, j)] if (l, j) in blocks else (blocks[(j, l)].T if (j, l) in blocks else zero)
                       for j in range(n_latent)], axis=1) for l in range(n_latent)]
    return c, r, xp.concat(rows, axis=0)


def _shift(A, r):
    """The joint posterior's shift [A_l r_l]_l, (L M, 1)."""
    xp = be.namespace(r)
    return xp.concat([mm(A[l], r[:, l : l + 1]) for l in range(len(A))], axis=0)


def joint_optimal_q(kernels, kernel_of_column, chunks, W, Z, jitter, coupled=True):
    """The optimal q under Gaussian noise, jointly over the L x M values and within the
    mean-field family, in closed form.

    The bound is a concave quadratic in the means, so both optima share the joint
    posterior's means, m = B^-1 [A_l r_l]_l; the joint q's covariance is B^-1, and the
    mean-field q gives each latent the precision of its own block, B_ll (each latent's
    covariance given the rest, which understates its spread where the latents are
    correlated in the posterior). B and the shift are sums over the rows, so ``chunks``
    (an iterable of (X, Y, beta) as :func:`lmc_collapsed_bound` takes them) is read once,
    in pieces: O(n L^2 M^2 + L^3 M^3) for n rows.

    Returns
    -------
    means : list of arrays of shape (M, 1)
        The whitened mean of each latent column.
    precisions : list of arrays of shape (M, M)
        The whitened mean-field precision of each latent column.
    joint_inverse_factor : array of shape (L M, L M)
        L_B^-1, lower triangular: the joint covariance is its Gram matrix L_B^-T L_B^-1.
    jitter : float
        The relative jitter the factorisations of K_zz needed.
    """
    n_latent, m = W.shape[1], Z.shape[0]
    factors = [factor_kzz(kernel, Z, jitter, False) for kernel in kernels]
    pairs = _pairs(n_latent, coupled)
    b_minus_i = shift = None
    for X, Y, beta in chunks:
        xp = be.namespace(X)
        A_k = [solve_triangular(low_k, kernel.kuf(Z, X)) for kernel, (low_k, _, _) in zip(kernels, factors)]
        A = [A_k[k] for k in kernel_of_column]
        _, r, chunk_b = _row_terms(A, Y, beta, W, pairs, m, xp)
        chunk_shift = _shift(A, r)
        b_minus_i = chunk_b if b_minus_i is None else b_minus_i + chunk_b
        shift = chunk_shift if shift is None else shift + chunk_shift
    precision = add_to_diagonal(b_minus_i, 1.0, xp)
    low_b = cholesky(precision)
    means = cho_solve(low_b, shift)
    blocks = [precision[l * m : (l + 1) * m, l * m : (l + 1) * m] for l in range(n_latent)]
    return ([means[l * m : (l + 1) * m, :] for l in range(n_latent)], blocks, tri_inverse(low_b),
            max(f[1] for f in factors))


def projections(kernels, kernel_of_column, low_factors, Z, X):
    """A_l = L_l^-1 K_l(Z, X) of each latent column (M, n), and the prior variance each
    leaves unexplained, t (n, L) = k_l(x, x) - |a_l(x)|^2."""
    A_k = [solve_triangular(low, kernel.kuf(Z, X)) for kernel, low in zip(kernels, low_factors)]
    xp = be.namespace(A_k[0])
    A = [A_k[k] for k in kernel_of_column]
    t = xp.stack([kernels[k].kff_diag(X) - xp.sum(A[l] * A[l], axis=0) for l, k in enumerate(kernel_of_column)], axis=1)
    return A, t


def joint_output_factors(A, W, joint_inverse_factor):
    """G_p = L_B^-1 [W[p, l] A_l]_l (L M, n) for each output p: the joint q's covariance of
    outputs p and q at rows n, n' is G_p[:, n]^T G_q[:, n']."""
    return list(_output_factors(A, W, joint_inverse_factor))


def _output_factors(A, W, joint_inverse_factor):
    """The G_p of :func:`joint_output_factors`, one output at a time (a caller that
    reduces each can drop it before the next is formed)."""
    m = A[0].shape[0]
    U = [mm(joint_inverse_factor[:, l * m : (l + 1) * m], A[l]) for l in range(len(A))]
    for p in range(W.shape[0]):
        yield sum(W[p, l] * U[l] for l in range(len(A)))


def joint_output_variances(A, t, W, joint_inverse_factor):
    """Each output's variance (n, P) under the joint q at the rows of A (M x n per latent
    column) and t (n, L): sum_l W[p, l]^2 t_l[n] + |G_p[:, n]|^2 with G_p of
    :func:`joint_output_factors`. The rows go in chunks of CHUNK_ENTRIES / (L^2 M), and each
    output's G_p is summed and dropped before the next is formed, so that a chunk holds the
    L projections U_l and one G_p, not every output's (docs/constants.md)."""
    xp = be.namespace(t)
    n = t.shape[0]
    chunk = max(1, CHUNK_ENTRIES // (joint_inverse_factor.shape[0] * W.shape[1]))
    parts = []
    for begin in range(0, n, chunk):
        end = min(n, begin + chunk)  # array API slices stop inside the axis
        factors = _output_factors([a[:, begin:end] for a in A], W, joint_inverse_factor)
        parts.append(xp.stack([xp.sum(g * g, axis=0) for g in factors], axis=1))
    return t @ (W * W).T + xp.concat(parts, axis=0)
