"""The SOLVE basis (Shi, Titsias and Mnih 2020): SVGP plus an orthogonal inducing set.

The prior splits as f = f_par + f_perp with f_par(x) = k(x, Z) K_uu^-1 u, u = f(Z), and
f_perp an independent GP with the residual covariance
c(x, x') = k(x, x') - k(x, Z) K_uu^-1 k(Z, x'). A second set of inducing inputs O carries
v = f_perp(O), whose prior is N(0, C_vv) with the Schur complement
C_vv = K_vv - K_vu K_uu^-1 K_uv. The variational family is q(u) q(v) p_perp(f_perp | v):
two independent Gaussian blocks, each whitened by its own prior factor,

    u = L_u u',  L_u L_u^T = K_uu (+ jitter),   q(u') = N(m_u, S_u)
    v = L_v v',  L_v L_v^T = C_vv (+ its own jitter),   q(v') = N(m_v, S_v).

With A = L_u^-1 K_uv (M x M2), B = L_u^-1 K_ux and D = L_v^-1 (K_vx - A^T B) the latent
marginals at the rows x are

    mean_p = B^T m_u,p + D^T m_v,p
    var_c  = k_xx - colsum(B^2) + colsum((L_u,c^T B)^2) - colsum(D^2) + colsum((L_v,c^T D)^2)

and the KL is the sum of the two whitened KLs to N(0, I). Each block is therefore a
coupled basis in its own features (B for u, D for v): the ELBO's Fisher is block diagonal
over q(u) and q(v), so the natural step is the coupled step on each block, both from the
same minibatch adjoints (:func:`skgp_sparse.bases.coupled.natural_step`).

Cost per step: two Cholesky factorisations, of sizes M and M2, instead of one of size
M + M2 (2x instead of 8x the work of one when M2 = M), plus O(B (M^2 + M M2 + M2^2)).
Training steps fold L_u^-1 and L_v^-1 into M x M matrices as the coupled basis does
(:func:`marginals`, ``form``): each block is then a coupled folded tape over K_ux or
C_vx = K_vx - K_vu K_uu^-1 K_ux, and a step does the multiply-adds of coupled(M + M2)'s
folded step, in a little less time (docs/constants.md).
With ``n_orthogonal=0`` every function hands over to the coupled basis, so the model is
exactly SVGP. Every formula of the backward pass is checked by finite differences in
tests/test_solve.py.

The state's arrays and X may also be arrays of another library (CuPy, PyTorch,
array_api_strict; see :mod:`skgp_sparse.backend`): as in the coupled basis, every
function is written once over the arrays' namespace, and the primitives of
:mod:`skgp_sparse.linalg` keep numpy on its BLAS calls and numba passes while the other
namespaces take the same formulas in Array API operations, answering in the inputs'
namespace and device. tests/test_backend_solve.py checks them against numpy.
"""

from dataclasses import dataclass

import numpy as np

from . import coupled
from .contract import Basis
from .state import VariationalState, cache_field
from .toolkit import blocks, cross_and_diagonal, summed_var_adjoint
from .. import backend as be
from ..linalg import (
    column_products,
    eye,
    gram,
    jittered_cholesky,
    jittered_cholesky_backward,
    minus_column_squares,
    mm,
    solve_triangular,
    sym_mm,
    tri_inverse,
    tri_mm,
)

#: Fields of the state that Adam moves when the inducing inputs are learned.
INDUCING_FIELDS = ("inducing", "orthogonal")
#: Fields that Adam always moves (none: both q blocks are moved by natural steps).
ADAM_FIELDS = ()
#: Fields of q(u') and q(v') that Adam moves instead of the natural steps
#: (variational_optimizer="adam").
VARIATIONAL_FIELDS = ("q_mean", "q_sqrt", "q_mean_orthogonal", "q_sqrt_orthogonal")
#: A natural step of size one from a Gaussian likelihood lands on each block's optimum given
#: the other block as it was (not on the joint optimum: the blocks are stepped together).
CONJUGATE_NATURAL_STEP = True


@dataclass
class SolveState(VariationalState):
    """Variational parameters of the SOLVE basis.

    Attributes
    ----------
    inducing, orthogonal : ndarrays of shape (M, D) and (M2, D)
        Inducing inputs Z of u = f(Z) and orthogonal inducing inputs O of v = f_perp(O).
    q_mean, q_sqrt : ndarrays of shape (M, P) and (C, M, M)
        Whitened mean and lower covariance factors of q(u').
    q_mean_orthogonal, q_sqrt_orthogonal : ndarrays of shape (M2, P) and (C, M2, M2)
        Whitened mean and lower covariance factors of q(v').
    residual_jitter : float
        Relative jitter that the Cholesky of C_vv needed so far (0: the model's jitter).
        Kept here, not in the model, because C_vv is a Schur complement whose
        conditioning has nothing to do with that of K_uu.
    precision, precision_orthogonal : ndarray or None
        Cached S_u^-1 and S_v^-1 (the natural step produces them).
    """

    inducing: np.ndarray
    orthogonal: np.ndarray
    q_mean: np.ndarray
    q_sqrt: np.ndarray
    q_mean_orthogonal: np.ndarray
    q_sqrt_orthogonal: np.ndarray
    residual_jitter: float = 0.0
    precision: np.ndarray = cache_field()
    precision_orthogonal: np.ndarray = cache_field()

    @property
    def n_orthogonal(self):
        return self.orthogonal.shape[0]

    def block_u(self):
        """q(u') as a coupled state over Z (sharing the arrays)."""
        return coupled.CoupledState(self.inducing, self.q_mean, self.q_sqrt, self.precision)

    def block_v(self):
        """q(v') as a coupled state over O (sharing the arrays)."""
        return coupled.CoupledState(self.orthogonal, self.q_mean_orthogonal, self.q_sqrt_orthogonal,
                                    self.precision_orthogonal)


def split_inducing(points, n_orthogonal):
    """Split k-means centres into Z (first returned) and O, both spread over the data.

    Z is picked by farthest-point traversal from the centre nearest the mean, so that the
    M standard points cover the input space and the orthogonal points fill the gaps
    between them rather than clustering on one side (which would leave parts of the
    space to the residual process alone). The centres are distinct, so no point of O
    coincides with one of Z, which would make C_vv singular.

    Parameters
    ----------
    points : ndarray of shape (M + M2, D)
    n_orthogonal : int
        M2.

    Returns
    -------
    Z : ndarray of shape (M, D)
    O : ndarray of shape (M2, D)
    """
    if n_orthogonal == 0:
        return points, points[:0, ...]
    xp = be.namespace(points)
    n_total = points.shape[0]

    def sq_dist(row):
        diff = points - row
        return xp.sum(diff * diff, axis=1)

    first = int(xp.argmin(sq_dist(xp.mean(points, axis=0))))
    chosen = [first]
    dist = sq_dist(points[first, ...])
    for _ in range(n_total - n_orthogonal - 1):
        nxt = int(xp.argmax(dist))
        chosen.append(nxt)
        dist = xp.minimum(dist, sq_dist(points[nxt, ...]))
    # Keep the input order within each set (reproducible, and the k-means order).
    in_z = set(chosen)
    z_rows = [i for i in range(n_total) if i in in_z]
    o_rows = [i for i in range(n_total) if i not in in_z]
    return _rows(points, z_rows), _rows(points, o_rows)


def _rows(points, indices):
    """The rows ``indices`` of ``points``, a new array in their namespace and on their device."""
    xp = be.namespace(points)
    return xp.take(points, xp.asarray(indices, dtype=xp.int64, device=be.device_of(points)), axis=0)


def init_state(points, n_outputs, n_covariances, n_orthogonal=0):
    """Both blocks at their whitened priors N(0, I) (zero KL, the paper's start).

    Parameters
    ----------
    points : ndarray of shape (M + M2, D)
        Initial inducing inputs, split by :func:`split_inducing`.
    n_outputs : int
        P, the number of latent functions (columns of the means).
    n_covariances : int
        C, 1 (shared covariance) or P.
    n_orthogonal : int
        M2, the size of the orthogonal set O.
    """
    xp, points = be.owned_float_copy(points)
    if n_orthogonal < 0:
        raise ValueError(f"n_orthogonal must be >= 0; got {n_orthogonal}")
    if points.shape[0] <= n_orthogonal:
        raise ValueError(
            f"the solve basis needs at least one inducing point in Z besides the n_orthogonal={n_orthogonal} "
            f"orthogonal points; got {points.shape[0]} points in all (fewer training rows than "
            "n_inducing + n_orthogonal?)"
        )
    Z, O = split_inducing(points, n_orthogonal)
    m, m2 = Z.shape[0], O.shape[0]
    dtype, device = Z.dtype, be.device_of(Z)
    return SolveState(
        Z, O, xp.zeros((m, n_outputs), dtype=dtype, device=device), xp.stack([eye(m, Z)] * n_covariances),
        xp.zeros((m2, n_outputs), dtype=dtype, device=device), xp.stack([eye(m2, Z)] * n_covariances),
    )


class _Tape:
    """What the backward pass and the natural step need from one forward pass.

    ``u`` and ``v`` are the two blocks' coupled tapes, over the features B and D
    (whitened form) or over K_ux and C_vx with L_u^-1 and L_v^-1 folded into the M x M
    matrices (folded form, ``inv_u`` and ``inv_v`` set; ``r`` = K_uu^-1 K_uv).
    """

    __slots__ = ("u", "v", "low_u", "low_v", "a_uv", "jitter", "jitter_v", "back_all", "back_cross", "back_diag",
                 "n_z", "coupled_tape", "inv_u", "inv_v", "r")


def _factors(kernel, state, jitter, need_grad):
    """K([Z; O]) once, its Cholesky blocks and A = L_u^-1 K_uv.

    Returns (low_u, used_u, a_uv, low_v, used_v, back_all)."""
    Z, O = state.inducing, state.orthogonal
    m = Z.shape[0]
    points = _stack_points(Z, O)
    if need_grad:
        k_all, back_all = kernel.kuu_vjp(points)
    else:
        k_all, back_all = kernel.kuu(points), None
    # The blocks are strided views: the primitives copy them into the layout they need.
    low_u, used_u = jittered_cholesky(k_all[:m, :m], jitter, what="K(Z, Z) of the inducing inputs")
    a_uv = solve_triangular(low_u, k_all[:m, m:])
    cvv = k_all[m:, m:] - gram(a_uv, trans=True)
    # The Schur complement has its own scale and conditioning (O points near Z make it
    # nearly singular): its own relative jitter, remembered in the state once raised.
    first = max(jitter, state.residual_jitter)
    low_v, used_v = jittered_cholesky(
        cvv, first, what="residual covariance C(O, O) of the orthogonal inducing inputs"
    )
    if used_v > first:
        state.residual_jitter = used_v
    return low_u, used_u, a_uv, low_v, used_v, back_all


def _stack_points(Z, O):
    """[Z; O] in the arrays' namespace."""
    return be.namespace(Z, O).concat([Z, O], axis=0)


def _folded_block(low, inv_low, jitter, kzx, q_mean, q_sqrt):
    """A coupled folded tape over the features L^-1 kzx of one block: W_c kzx with
    W_c = L^-T (S_c - I) L^-1, and the block's part of the mean, kzx^T L^-T m."""
    tape = coupled.FoldedTape()
    tape.low_k, tape.inv_low, tape.kzx, tape.jitter = low, inv_low, kzx, jitter
    tape.s_minus_i = coupled.s_minus_identity(q_sqrt)
    tape.middle = coupled.folded_middle(inv_low, tape.s_minus_i)
    tape.middle_kzx = [sym_mm(w, kzx) for w in blocks(tape.middle)]
    tape.mean = mm(kzx, tri_mm(inv_low, q_mean, trans=True), trans_a=True)
    tape.back_zz = tape.back_zx = tape.back_diag = None
    tape.h_key = tape.whitened_gram = None
    return tape


def marginals(kernel, X, state, jitter, need_grad=True, form="auto"):
    """Latent marginals at the rows of X: the contract's :meth:`Basis.marginals <skgp_sparse.bases.contract.Basis.marginals>`
    (``jitter`` is that of K_uu and the first one tried for C_vv), with one more argument.

    Parameters
    ----------
    form : {"auto", "whitened", "folded"}
        How they are evaluated (the model is the same). "whitened": through the features
        B = L_u^-1 K_ux and D = L_v^-1 C_vx; "folded": through K_ux and C_vx with
        W = L^-T (S - I) L^-1 per block, which saves two of the eight O(B M^2)-sized
        products of a training step (the backward pass needs no triangular products with
        the features). "auto" folds float64 training steps (``need_grad``) with at least
        :data:`~skgp_sparse.bases.coupled.FOLDED_FORM_MIN_ROWS_PER_POINT` rows per point
        of the larger set when both K_uu and C_vv are well enough conditioned
        (:data:`~skgp_sparse.bases.coupled.FOLDED_FORM_MAX_CONDITION`, the coupled
        basis's rule) and keeps the whitened form otherwise (reported values included).
    """
    if state.n_orthogonal == 0:
        mean, var, ctape = coupled.marginals(kernel, X, state.block_u(), jitter, need_grad, form=form)
        if ctape is None:
            return mean, var, None
        tape = _Tape()
        tape.coupled_tape, tape.jitter = ctape, ctape.jitter
        return mean, var, tape
    with_vjp = bool(need_grad) and need_grad != "natural"
    low_u, used_u, a_uv, low_v, used_v, back_all = _factors(kernel, state, jitter, with_vjp)
    m, m2 = state.inducing.shape[0], state.orthogonal.shape[0]
    points = _stack_points(state.inducing, state.orthogonal)
    k_cross, back_cross, kdiag, back_diag = cross_and_diagonal(kernel, points, X, with_vjp)
    xp = be.namespace(k_cross)
    inv_u, inv_v = _folding_inverses(form, need_grad, k_cross.dtype == xp.float64, X.shape[0], m, m2, low_u, low_v)
    tape = _Tape()
    tape.coupled_tape, tape.inv_u, tape.inv_v, tape.r = None, inv_u, inv_v, None
    kux, kvx = k_cross[:m, ...], k_cross[m:, ...]
    if inv_u is None:
        var_rows = _whitened_blocks(tape, state, low_u, a_uv, low_v, kux, kvx, kdiag)
    else:
        var_rows = _folded_blocks(tape, state, low_u, used_u, a_uv, low_v, used_v, kux, kvx, kdiag)
    # One row per covariance, viewed as (B, C): the layout the variances have always had,
    # so that no later reduction over them changes its summation order.
    var = xp.stack(var_rows, axis=0).T
    # Differences of large terms far from the data: a tiny negative is rounding.
    var = xp.clip(var, 0.0, None)
    mean = tape.u.mean + tape.v.mean
    if not need_grad:
        return mean, var, None
    _keep_factors(tape, m, low_u, used_u, a_uv, low_v, used_v, back_all, back_cross, back_diag)
    return mean, var, tape


def _whitened_blocks(tape, state, low_u, a_uv, low_v, kux, kvx, kdiag):
    """Put on ``tape`` the whitened blocks, over B = L_u^-1 K_ux and D = L_v^-1 C_vx;
    return the variances, one (B,) row per covariance."""
    b = solve_triangular(low_u, kux)
    d = solve_triangular(low_v, kvx - mm(a_uv, b, trans_a=True))
    mean_u = mm(b, state.q_mean, trans_a=True)
    mean_v = mm(d, state.q_mean_orthogonal, trans_a=True)
    lt_b = [tri_mm(low, b, trans=True) for low in blocks(state.q_sqrt)]
    lt_d = [tri_mm(low, d, trans=True) for low in blocks(state.q_sqrt_orthogonal)]
    # k_xx - |B|^2 - |D|^2 is the variance left given u and v (>= 0 in exact arithmetic).
    prior = minus_column_squares(minus_column_squares(kdiag, b), d)
    tape.u = coupled.WhitenedTape.of_features(b, lt_b, mean_u)
    tape.v = coupled.WhitenedTape.of_features(d, lt_d, mean_v)
    return [column_products(column_products(prior, lb, lb), ld, ld) for lb, ld in zip(lt_b, lt_d)]


def _folded_blocks(tape, state, low_u, used_u, a_uv, low_v, used_v, kux, kvx, kdiag):
    """Put on ``tape`` the folded blocks, over K_ux and C_vx (and R = L_u^-T A); return
    the variances, one (B,) row per covariance."""
    # C_vx = K_vx - K_vu K_uu^-1 K_ux = K_vx - R^T K_ux, R = L_u^-T A.
    tape.r = tri_mm(tape.inv_u, a_uv, trans=True)
    cvx = kvx - mm(tape.r, kux, trans_a=True)
    tape.u = _folded_block(low_u, tape.inv_u, used_u, kux, state.q_mean, state.q_sqrt)
    tape.v = _folded_block(low_v, tape.inv_v, used_v, cvx, state.q_mean_orthogonal, state.q_sqrt_orthogonal)
    return [column_products(column_products(kdiag, kux, wu), cvx, wv)
            for wu, wv in zip(tape.u.middle_kzx, tape.v.middle_kzx)]


def _keep_factors(tape, m, low_u, used_u, a_uv, low_v, used_v, back_all, back_cross, back_diag):
    """Put on ``tape`` the factors and derivative closures the backward pass reads."""
    tape.low_u, tape.low_v, tape.a_uv = low_u, low_v, a_uv
    tape.jitter, tape.jitter_v = used_u, used_v
    tape.back_all, tape.back_cross, tape.back_diag = back_all, back_cross, back_diag
    tape.n_z = m


def _folding_inverses(form, need_grad, float64, n_rows, m, m2, low_u, low_v):
    """(L_u^-1, L_v^-1) when the marginals take the folded form, else (None, None).

    "folded" always folds; "auto" folds a float64 training evaluation with enough rows per
    inducing point, unless either factor's condition bound is above coupled's limit."""
    fold_if_stable = need_grad and float64 and n_rows >= coupled.FOLDED_FORM_MIN_ROWS_PER_POINT * max(m, m2)
    if not (form == "folded" or (form == "auto" and fold_if_stable)):
        return None, None
    inv_u, inv_v = tri_inverse(low_u), tri_inverse(low_v)
    if form == "auto":
        # Both asked (within deferred checks each notes its answer and says False).
        too_ill = [coupled.too_ill_conditioned_to_fold(low, inv, be.namespace(low, inv))
                   for low, inv in ((low_u, inv_u), (low_v, inv_v))]
        if any(too_ill):
            return None, None
    return inv_u, inv_v


def _block_adjoint(block, block_state, d_mean, h):
    """dF/da of one block's features, L0^T dF/dL0 of its prior factor and a g, as in the
    coupled basis (:func:`skgp_sparse.bases.coupled.prior_factor_adjoint`)."""
    a_g, lt_bar = coupled.prior_factor_adjoint(block, block_state, d_mean, h)
    return block.a_adjoint(block_state, d_mean, h), lt_bar, a_g


def backward(tape, state, d_mean, d_var, fields=("inducing", "orthogonal")):
    """Gradient of F(mean, var) - KL in the kernel hyperparameters, Z, O and q.

    Each block contributes its coupled adjoints (:func:`_block_adjoint`): B_bar and
    L_u^T L_u_bar from q(u'), D_bar and L_v^T L_v_bar from q(v'). Then, backwards through
    D = L_v^-1 C_vx, C_vx = K_vx - A^T B, C_vv = K_vv - A^T A, A = L_u^-1 K_uv and
    B = L_u^-1 K_ux:

        C_vx_bar = L_v^-T D_bar,   C_vv_bar = chol_bar(L_v, -D_bar D^T)
        T        = C_vx_bar B^T                  (M2 x M)
        A_bar    = -T^T - 2 A C_vv_bar
        B_bar   += -A C_vx_bar
        L_u^T L_u_bar += E + E^T + 2 A C_vv_bar A^T,   E = A T
        K_ux_bar = L_u^-T B_bar,   K_uv_bar = L_u^-T A_bar,   K_vv_bar = C_vv_bar,
        K_vx_bar = C_vx_bar,       K_uu_bar = chol_bar(L_u, L_u^T L_u_bar)

    (each chol_bar including its relative jitter) in the whitened form;
    :func:`_adjoints_folded` gives the same adjoints from a folded tape. The kernel's
    reverse pass then maps the adjoints of K([Z; O]) and K([Z; O], X) to theta, Z and O.
    The whitened KL depends on q alone. Arguments and returns: the contract's
    :meth:`Basis.backward <skgp_sparse.bases.contract.Basis.backward>` (``fields`` of
    ``INDUCING_FIELDS`` and ``VARIATIONAL_FIELDS``).
    """
    if tape.coupled_tape is not None:
        cfields = tuple(f for f in fields if f in ("inducing", "q_mean", "q_sqrt"))
        theta_bar, bars = coupled.backward(tape.coupled_tape, state.block_u(), d_mean, d_var, cfields)
        zeros_like = be.namespace(state.orthogonal).zeros_like
        empty = {"orthogonal": zeros_like(state.orthogonal),
                 "q_mean_orthogonal": zeros_like(state.q_mean_orthogonal),
                 "q_sqrt_orthogonal": zeros_like(state.q_sqrt_orthogonal)}
        return theta_bar, {name: bars[name] if name in bars else empty[name] for name in fields}
    m = tape.n_z
    h = summed_var_adjoint(d_var, state.q_sqrt.shape[0])
    block_u, block_v = state.block_u(), state.block_v()
    adjoints = _adjoints_whitened if tape.inv_u is None else _adjoints_folded
    kux_bar, kvx_bar, kuu_bar, kuv_bar, cvv_bar, b_g, d_g = adjoints(tape, block_u, block_v, d_mean, h)
    m2 = cvv_bar.shape[0]
    xp = be.namespace(cvv_bar)
    # K([Z; O])'s adjoint: K_vu enters no formula (its transpose K_uv carries the
    # dependence), so its block is zero.
    zeros_vu = xp.zeros((m2, m), dtype=cvv_bar.dtype, device=be.device_of(cvv_bar))
    k_all_bar = xp.concat([xp.concat([kuu_bar, kuv_bar], axis=1), xp.concat([zeros_vu, cvv_bar], axis=1)], axis=0)
    theta_all, points_all = tape.back_all(k_all_bar)
    theta_cross, points_cross = tape.back_cross(xp.concat([kux_bar, kvx_bar], axis=0))
    theta_d = tape.back_diag(xp.sum(h, axis=1))
    points_bar = points_all + points_cross
    bars = {"inducing": points_bar[:m, ...], "orthogonal": points_bar[m:, ...]}
    if "q_mean" in fields:
        bars["q_mean"] = b_g - state.q_mean
    if "q_sqrt" in fields:
        bars["q_sqrt"] = coupled.q_sqrt_gradient(tape.u, block_u, h)
    if "q_mean_orthogonal" in fields:
        bars["q_mean_orthogonal"] = d_g - state.q_mean_orthogonal
    if "q_sqrt_orthogonal" in fields:
        bars["q_sqrt_orthogonal"] = coupled.q_sqrt_gradient(tape.v, block_v, h)
    return theta_all + theta_cross + theta_d, {name: bars[name] for name in fields}


def _adjoints_whitened(tape, block_u, block_v, d_mean, h):
    """Adjoints of K_ux, K_vx, K_uu, K_uv and C_vv through the whitened form (see
    :func:`backward`), with B g and D g."""
    a_uv, low_u, low_v, b = tape.a_uv, tape.low_u, tape.low_v, tape.u.a
    b_bar, lt_lu_bar, b_g = _block_adjoint(tape.u, block_u, d_mean, h)
    d_bar, lt_lv_bar, d_g = _block_adjoint(tape.v, block_v, d_mean, h)
    cvx_bar = solve_triangular(low_v, d_bar, trans=True)
    cvv_bar = jittered_cholesky_backward(low_v, lt_lv_bar, tape.jitter_v)
    t = mm(cvx_bar, b, trans_b=True)
    a_cvv = mm(a_uv, cvv_bar)
    a_bar = -t.T - 2.0 * a_cvv
    b_bar = b_bar - mm(a_uv, cvx_bar)
    e = mm(a_uv, t)
    lt_lu_bar = lt_lu_bar + (e + e.T + 2.0 * mm(a_cvv, a_uv, trans_b=True))
    kux_bar = solve_triangular(low_u, b_bar, trans=True)
    kuv_bar = solve_triangular(low_u, a_bar, trans=True)
    kuu_bar = jittered_cholesky_backward(low_u, lt_lu_bar, tape.jitter)
    return kux_bar, cvx_bar, kuu_bar, kuv_bar, cvv_bar, b_g, d_g


def _adjoints_folded(tape, block_u, block_v, d_mean, h):
    """The same adjoints through the folded form.

    Each block is a coupled folded tape (features K_ux for u, C_vx for v), whose own
    adjoints give dF/dK_ux (direct), dF/dC_vx and L^T dF/dL for both prior factors. Then
    through C_vx = K_vx - R^T K_ux, R = L_u^-T A, C_vv = K_vv - A^T A, A = L_u^-1 K_uv:

        K_ux_bar -= R C_vx_bar,   R_bar = -K_ux C_vx_bar^T,   K_vx_bar = C_vx_bar,
        A_bar = L_u^-1 R_bar - 2 A C_vv_bar,   C_vv_bar = chol_bar(L_v, L_v^T L_v_bar),
        L_u^T L_u_bar += -A (L_u^-1 R_bar)^T - A_bar A^T,   K_uv_bar = L_u^-T A_bar.

    Two O(B M M2) products (for K_ux_bar and R_bar) and the blocks' two grams are all
    the O(B M^2)-sized work; the whitened form needs five.
    """
    tu, tv = tape.u, tape.v
    b_g, lt_lu_bar = coupled.prior_factor_adjoint(tu, block_u, d_mean, h)
    d_g, lt_lv_bar = coupled.prior_factor_adjoint(tv, block_v, d_mean, h)
    kux_bar = tu.kzx_adjoint(block_u, d_mean, h)
    cvx_bar = tv.kzx_adjoint(block_v, d_mean, h)
    kux_bar = kux_bar - mm(tape.r, cvx_bar)
    r_bar = -mm(tu.kzx, cvx_bar, trans_b=True)
    lu_r_bar = tri_mm(tape.inv_u, r_bar)
    cvv_bar = jittered_cholesky_backward(tape.low_v, lt_lv_bar, tape.jitter_v, inv_low=tape.inv_v)
    a_bar = lu_r_bar - 2.0 * mm(tape.a_uv, cvv_bar)
    lt_lu_bar = lt_lu_bar - (mm(tape.a_uv, lu_r_bar, trans_b=True) + mm(a_bar, tape.a_uv, trans_b=True))
    kuv_bar = tri_mm(tape.inv_u, a_bar, trans=True)
    kuu_bar = jittered_cholesky_backward(tape.low_u, lt_lu_bar, tape.jitter, inv_low=tape.inv_u)
    return kux_bar, cvx_bar, kuu_bar, kuv_bar, cvv_bar, b_g, d_g


def kl_divergence(kernel, state, jitter, tape=None):
    """KL(q(u') || N(0, I)) + KL(q(v') || N(0, I)), summed over outputs.

    Whitening makes both priors standard: in the original coordinates these are the KLs
    to N(0, K_uu) and to the residual prior N(0, C_vv) (of dimension M2)."""
    kl = coupled.kl_divergence(kernel, state.block_u(), jitter)
    if state.n_orthogonal:
        kl = kl + coupled.kl_divergence(kernel, state.block_v(), jitter)
    return kl


def natural_step(tape, state, d_mean, d_var, step):
    """One natural-gradient step of size ``step`` on q(u') and on q(v').

    The Fisher information of the family q(u') q(v') is block diagonal, so the natural
    gradient is the coupled one per block, in that block's features (B for u', D for v')
    with the other block's contribution to the mean held where it is. Both steps use this
    batch's adjoints: with a Gaussian likelihood, a full batch and step 1 each block lands
    on its optimum given the other block's *previous* value (a block-Jacobi step). The
    covariances are then exact at once (their optimum does not depend on the other
    block); the means converge geometrically to the joint optimum, since block Jacobi
    on a two-block concave quadratic contracts.

    Raises
    ------
    CholeskyError
        If a new precision is not positive definite: the caller backs off.
    """
    if tape.coupled_tape is not None:
        new_u = coupled.natural_step(tape.coupled_tape, state.block_u(), d_mean, d_var, step)
        new = state.copy()
        new.inducing, new.orthogonal = state.inducing, state.orthogonal
        new.q_mean, new.q_sqrt, new.precision = new_u.q_mean, new_u.q_sqrt, new_u.precision
        return new
    block_u, block_v = state.block_u(), state.block_v()
    new_u = coupled.natural_step(tape.u, block_u, d_mean, d_var, step)
    new_v = coupled.natural_step(tape.v, block_v, d_mean, d_var, step)
    return SolveState(
        state.inducing, state.orthogonal, new_u.q_mean, new_u.q_sqrt, new_v.q_mean, new_v.q_sqrt,
        state.residual_jitter, new_u.precision, new_v.precision,
    )


def make_predictor(kernel, state, jitter):
    """Freeze the fitted model into a :class:`~skgp_sparse.bases.coupled.CoupledPredictor`
    over the points [Z; O].

    With R = L_u^-T A (so that K_vu K_uu^-1 = R^T), the residual cross-covariance is
    c_v(x) = [-R^T, I] k([Z; O], x); the mean and variance of f_par + f_perp (spec A4) are

        mean = k_Zx^T (alpha_u - R alpha_v) + k_Ox^T alpha_v,   alpha = L^-T m
        var  = k_xx + k_Zx^T W_u k_Zx + c_v^T W_v c_v,           W = L^-T (S - I) L^-1

    which is one quadratic form in k([Z; O], x) with a (M + M2) square middle matrix.
    """
    if state.n_orthogonal == 0:
        return coupled.make_predictor(kernel, state.block_u(), jitter)
    probe = state.copy()
    low_u, _, a_uv, low_v, _, _ = _factors(kernel, probe, jitter, need_grad=False)
    if probe.residual_jitter > state.residual_jitter:
        state.residual_jitter = probe.residual_jitter
    alpha_u, middle_u = _frozen_block(low_u, state.q_mean, state.q_sqrt)
    alpha_v, middle_v = _frozen_block(low_v, state.q_mean_orthogonal, state.q_sqrt_orthogonal)
    r = solve_triangular(low_u, a_uv, trans=True)  # K_uu^-1 K_uv
    xp = be.namespace(r)
    weights = xp.concat([alpha_u - mm(r, alpha_v), alpha_v], axis=0)
    middle = xp.stack([_joint_middle(r, wu, wv) for wu, wv in zip(blocks(middle_u), blocks(middle_v))])
    return coupled.CoupledPredictor(_stack_points(state.inducing, state.orthogonal), weights, middle)


def _joint_middle(r, middle_u, middle_v):
    """The (M + M2) square middle matrix of one covariance over k([Z; O], x):
    [[W_u + R W_v R^T, -R W_v], [-(R W_v)^T, W_v]]."""
    xp = be.namespace(r)
    r_w = mm(r, middle_v)  # R W_v
    top = xp.concat([middle_u + mm(r_w, r, trans_b=True), -r_w], axis=1)
    return xp.concat([top, xp.concat([-r_w.T, middle_v], axis=1)], axis=0)


def _frozen_block(low0, q_mean, q_sqrt):
    """alpha = L0^-T m and W_c = L0^-T (S_c - I) L0^-1 of one whitened block."""
    inv_low = tri_inverse(low0)
    alpha = mm(inv_low, q_mean, trans_a=True)
    prior_part = gram(inv_low, trans=True)
    xp = be.namespace(inv_low)
    return alpha, xp.stack([gram(tri_mm(low, inv_low, trans=True), trans=True) - prior_part
                            for low in blocks(q_sqrt)])


class SolveBasis(Basis, members=globals()):
    """The SOLVE basis: this module's functions and field tuples, under the names of the
    :class:`~.contract.Basis` contract."""

    name = "solve"
    #: The orthogonal set O, of ``n_orthogonal`` points.
    ORTHOGONAL_SET = True


#: The SOLVE basis, as :data:`skgp_sparse.bases.BASES` registers it.
BASIS = SolveBasis()
