"""The coupled basis's bound with q(v) at its optimum under Gaussian noise (Titsias 2009),
and its gradient, in one pass over the rows.

The exact searches (:mod:`skgp_sparse.optim.fullbatch`) maximise this bound over the
hyperparameters and the inducing inputs. Reached through the minibatch machinery, an
evaluation is a forward pass for the natural step, the step, then a forward and a
backward pass at the new q. Written directly, in the folded form (K_zx kept, L_k^-1
folded into M x M matrices) it costs one SYRK and one SYMM of O(n M^2), besides the
kernel, and is faster on the default search's rows (docs/constants.md).

With A = L_k^-1 K_zx (M x n), per-row precisions beta_i (the row's weight over its noise
variance) and D = diag(beta), the optimal q(v) of every output p is

    S = B^-1,  B = I + A D A^T,    m_p = B^-1 c_p,  c_p = A D y_p,

and the bound, less the noise's normaliser -1/2 sum_i w_i P log(2 pi sigma_i^2), is

    Q = sum_p [c_p^T m_p - y_p^T D y_p] / 2 - (P / 2) log|B| - (P / 2) sum_i beta_i (k_ii - |a_i|^2)

with c_p^T m_p - y_p^T D y_p = -(sum_i beta_i (y_ip - mu_ip)^2 + m_p^T m_p), mu_p = A^T m_p.

Its derivatives (mu_p is the posterior mean at the rows):

    dQ/dA   = [sum_p m_p (y_p - mu_p)^T + P (I - B^-1) A] D
    L_k^T dQ/dL_k = -(dQ/dA) A^T = -(sum_p m_p m_p^T + P (B + B^-1 - 2 I))
    dQ/dk_ii = -(P / 2) beta_i
    sum_i beta_i dQ/dbeta_i = -1/2 sum_ip beta_i (y_ip - mu_ip)^2
                              - (P / 2) [sum_i beta_i k_ii - tr(B - I) + M - tr(B^-1)]

The last one gives the noise's gradient (the caller's): every row's beta_i is its weight
over one noise variance, so d/d log sigma^2 moves them all by -beta_i. The value and
each derivative are checked against the minibatch machinery at q's optimum and against
finite differences in tests/test_collapsed.py.
"""

from dataclasses import dataclass

import numpy as np

from .. import backend as be
from ..linalg import cho_solve, cholesky, jittered_cholesky_backward, mm, solve_triangular, sym_mm, tri_inverse, tri_mm
from ..linalg import add_to_diagonal, diagonal, eye, weighted_gram
from .toolkit import cross_and_diagonal, factor_kzz


#: Where the folded form is used, as in the coupled basis's training steps (its
#: ``FOLDED_FORM_*`` constants; docs/constants.md): at least this many rows per inducing
#: point, and K_zz no worse conditioned than this.
FOLD_MIN_ROWS_PER_POINT = 2
FOLD_MAX_CONDITION = 1e10


@dataclass
class CollapsedBound:
    """The bound Q (without the noise's normaliser), its derivatives, and the relative
    jitter the factorisation of K_zz needed."""

    value: float
    theta_bar: np.ndarray
    #: Gradient of each of the state's inducing fields (the coupled basis: ``inducing``).
    field_bars: dict
    #: sum_i beta_i dQ/dbeta_i: the derivative along a scaling of every precision.
    beta_scaling_bar: float
    jitter: float


def collapsed_bound(kernel, X, Y, beta, state, jitter):
    """Q and its gradient in theta, the inducing inputs and the precisions' scale.

    Parameters
    ----------
    kernel : compiled kernel
    X : array of shape (n, D)
    Y : array of shape (n, P)
    beta : array of shape (n,)
        Per-row precision: the row's count (weight times N / n) over its noise variance.
    state : CoupledState
        Only its inducing inputs are read.
    jitter : float
        Relative jitter of the K_zz Cholesky.

    Returns
    -------
    CollapsedBound
    """
    low_k, used, back_zz = factor_kzz(kernel, state.inducing, jitter, True)
    kzx, back_zx, kdiag, back_diag = cross_and_diagonal(kernel, state.inducing, X, True)
    xp = be.namespace(kzx)
    m, p = kzx.shape[0], Y.shape[1]
    beta_row = xp.reshape(beta, (1, -1))
    inv_low = _folding_factor(low_k, kzx, xp)
    a = None
    if inv_low is None:
        a = solve_triangular(low_k, kzx)
        b_minus_i = weighted_gram(a, beta)
    else:
        # B - I = L_k^-1 (K_zx D K_xz) L_k^-T: one SYRK on K_zx instead of a TRSM and a SYRK.
        b_minus_i = tri_mm(inv_low, tri_mm(inv_low, weighted_gram(kzx, beta)), trans=True, right=True)
    low_b = cholesky(add_to_diagonal(b_minus_i, 1.0, xp))
    c = _whitened_shift(a, low_k, kzx, beta_row.T * Y)
    q_mean = cho_solve(low_b, c)
    # The posterior mean at the rows, mu_p = A^T m_p = K_xz L_k^-T m_p.
    mean_weights = solve_triangular(low_k, q_mean, trans=True)
    resid = Y - mm(kzx, mean_weights, trans_a=True)
    b_inv = cho_solve(low_b, eye(m, low_b))
    trace_b_minus_i = float(xp.sum(diagonal(b_minus_i, xp)))
    trace_b_inv = float(xp.sum(diagonal(b_inv, xp)))
    log_det_b = 2.0 * float(xp.sum(xp.log(diagonal(low_b, xp))))
    beta_k = float(xp.sum(beta * kdiag))
    # c^T m - y^T D y = -(sum_i beta_i (y_i - mu_i)^2 + m^T m): a sum of squares, which
    # keeps its precision where the two sides are large and nearly equal (little noise).
    weighted_squares = float(xp.sum(beta_row.T * resid * resid))
    value = -0.5 * (weighted_squares + float(xp.sum(q_mean * q_mean))) - 0.5 * p * (
        log_det_b + beta_k - trace_b_minus_i)
    beta_scaling_bar = -0.5 * weighted_squares - 0.5 * p * (beta_k - trace_b_minus_i + m - trace_b_inv)

    # dQ/dK_zx = L_k^-T dQ/dA = [L_k^-T m (y - mu)^T + P L_k^-T (I - B^-1) A] D.
    i_minus_b_inv = add_to_diagonal(-b_inv, 1.0, xp)
    if inv_low is None:
        spread = solve_triangular(low_k, sym_mm(i_minus_b_inv, a), trans=True)
    else:
        spread = sym_mm(tri_mm(inv_low, tri_mm(inv_low, i_minus_b_inv, trans=True), right=True), kzx)
    kzx_bar = (mm(mean_weights, resid, trans_b=True) + p * spread) * beta_row
    # (dQ/dA) A^T = sum_p m_p m_p^T + P (I - B^-1)(B - I), and (I - B^-1)(B - I) = B + B^-1 - 2 I.
    lt_low_bar = -(mm(q_mean, q_mean, trans_b=True) + p * add_to_diagonal(b_minus_i + b_inv, -1.0, xp))
    kzz_bar = jittered_cholesky_backward(low_k, lt_low_bar, used, inv_low=inv_low)
    theta_zz, z_zz = back_zz(kzz_bar)
    theta_zx, z_zx = back_zx(kzx_bar)
    theta_d = back_diag(-0.5 * p * beta)
    theta_bar = theta_zz + theta_zx + theta_d
    # The exact searches work on the host in float64 (an owned copy: n_theta numbers).
    theta_bar = np.array(be.to_numpy(theta_bar), dtype=np.float64)
    return CollapsedBound(value, theta_bar, {"inducing": z_zz + z_zx}, beta_scaling_bar, used)


def _whitened_shift(a, low_k, kzx, weighted_y):
    """c = A D y, from the A that B = I + A D A^T was built from where the whitened form
    has it.

    L_k^-1 (K_zx D y) is the same in exact arithmetic, but its rounding differs from A's
    by up to L_k's condition number; the residual y - A^T B^-1 c, which the bound weighs
    by the precision, is then rounding alone where K_zz is nearly singular and the noise
    small, and the bound jumps by nats for tiny steps (docs/constants.md)."""
    if a is not None:
        return mm(a, weighted_y)
    return solve_triangular(low_k, mm(kzx, weighted_y))


def _folding_factor(low_k, kzx, xp):
    """L_k^-1 where the folded form is safe and pays (see the coupled basis's
    ``marginals``): float64, :data:`FOLD_MIN_ROWS_PER_POINT` rows per inducing point, and
    a K_zz condition number (bounded above by |L_k|_F^2 |L_k^-1|_F^2) of at most
    :data:`FOLD_MAX_CONDITION`; else None (the whitened form)."""
    if kzx.dtype != xp.float64 or kzx.shape[1] < FOLD_MIN_ROWS_PER_POINT * kzx.shape[0]:
        return None
    inv_low = tri_inverse(low_k)
    if float(xp.sum(low_k * low_k) * xp.sum(inv_low * inv_low)) > FOLD_MAX_CONDITION:
        return None
    return inv_low
