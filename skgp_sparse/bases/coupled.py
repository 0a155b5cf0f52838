"""The coupled basis (SVGP; Titsias 2009, Hensman et al. 2013), whitened.

q(u) over u = f(Z) is held in whitened coordinates: u = L_k v with L_k L_k^T = K_zz
(+ jitter), q(v) = N(m_p, S_c) for output p, S_c = L_c L_c^T. Outputs share one
covariance (C = 1) when the likelihood's variance adjoint does not depend on the
output (Gaussian noise), otherwise each output has its own (C = P).

With A = L_k^-1 K_zx (M x B) the latent marginals at the rows x are

    mean_p = A^T m_p,    var_c = k_xx - colsum(A * A) + colsum((L_c^T A)^2),

and the KL to the prior N(0, I) needs no kernel matrix at all. Evaluated this way
(the whitened form) a training step costs four O(B M^2) triangular products and one SYRK.
Folding the M x M terms together first, alpha = L_k^-T m and W_c = L_k^-T (S_c - I) L_k^-1,

    mean_p = K_xz alpha_p,    var_c = k_xx + colsum(K_zx * (W_c K_zx)),

a step costs one SYMM and one SYRK for a few more O(M^3) products (the folded form, used
for large enough batches and a well conditioned K_zz, see :func:`marginals`); the fitted
predictor always uses it, so a test row costs one product. Every formula of the backward
pass below is checked against finite differences, in both forms, in tests/test_coupled.py.

The state's arrays and X may also be arrays of another library (CuPy, PyTorch,
array_api_strict; see :mod:`skgp_sparse.backend`): every function is written once over
the arrays' namespace, and the primitives of :mod:`skgp_sparse.linalg` keep numpy on its
BLAS calls and numba passes (in place where that saves an M x B temporary) while the
other namespaces take the same formulas in Array API operations, answering in the inputs'
namespace and device. tests/test_backend_coupled.py checks them against numpy.
"""

from dataclasses import dataclass

import numpy as np

from . import _collapsed
from .contract import Basis
from .state import VariationalState, cache_field
from .toolkit import (
    blocks,
    cross_and_diagonal,
    factor_kzz,
    join_output_columns,
    output_columns,
    stack_blocks,
    tape_var_adjoint,
)
from .. import backend as be
from ..linalg import (
    CholeskyError,
    add_scaled,
    add_scaled_difference,
    add_to_diagonal,
    column_dots,
    column_products,
    column_variances,
    copy_array,
    diagonal,
    eye,
    gram,
    inverse_cholesky_factor,
    jittered_cholesky_backward,
    mm,
    outer_plus_scaled,
    outer_plus_scaled_difference,
    pending_flags,
    same_values,
    solve_triangular,
    sym_mm,
    tri_inverse,
    tri_mm,
    weighted_gram,
)


#: Fields of the state that Adam moves when the inducing inputs are learned.
INDUCING_FIELDS = ("inducing",)
#: Fields that Adam always moves (none: q(v) is moved by natural steps).
ADAM_FIELDS = ()
#: Fields of q(v) that Adam moves instead of the natural step (variational_optimizer="adam").
VARIATIONAL_FIELDS = ("q_mean", "q_sqrt")
#: A natural step of size one from a Gaussian likelihood's adjoints lands on the optimal q(v).
EXACT_NATURAL_STEP = True
#: ... and on each Gaussian block's optimum given the others (one block here).
CONJUGATE_NATURAL_STEP = True
#: q(v) is one whitened Gaussian: the several-output closed forms set and bound it.
WHITENED_Q = True


def condition_bound(low, inv_low, xp):
    """|L|_F^2 |L^-1|_F^2 (``inv_low`` = L^-1), a 0-d array: an upper bound on cond(L L^T),
    since cond(K) <= trace(K) ||K^-1||_2."""
    return xp.sum(low * low) * xp.sum(inv_low * inv_low)


def too_ill_conditioned_to_fold(low_k, inv_low, xp):
    """Whether :func:`condition_bound` exceeds :data:`FOLDED_FORM_MAX_CONDITION`. Within
    :func:`skgp_sparse.linalg.deferred_checks` the answer is noted rather than read
    (False: the folded form is kept, and a step that should not have folded is replayed
    on the careful path)."""
    too_large = condition_bound(low_k, inv_low, xp) > FOLDED_FORM_MAX_CONDITION
    flags = pending_flags()
    if flags is None:
        return bool(too_large)
    flags.note(too_large)
    return False


@dataclass
class CoupledState(VariationalState):
    """Variational parameters of the coupled basis (arrays as :class:`VariationalState` says).

    Attributes
    ----------
    inducing : ndarray of shape (M, D)
        Inducing inputs Z.
    q_mean : ndarray of shape (M, P)
        Whitened means, one column per output.
    q_sqrt : ndarray of shape (C, M, M)
        Lower triangular factors of the whitened covariances (C is 1 or P).
    precision : ndarray of shape (C, M, M) or None
        S_c^-1 when known (the natural step produces it), to save recomputing it.
    """

    inducing: np.ndarray
    q_mean: np.ndarray
    q_sqrt: np.ndarray
    precision: np.ndarray = cache_field()

    def precisions(self):
        """S_c^-1 for every covariance."""
        if self.precision is None:
            xp = be.namespace(self.q_sqrt)
            self.precision = xp.stack([gram(tri_inverse(low), trans=True) for low in blocks(self.q_sqrt)])
        return self.precision


def init_state(inducing, n_outputs, n_covariances, n_orthogonal=0):
    """q(v) equal to the whitened prior N(0, I): zero KL, the usual starting point."""
    if n_orthogonal != 0:
        raise ValueError("the coupled basis has no orthogonal inducing set")
    m = inducing.shape[0]
    # The inputs' library, on their device, in their floating dtype (numpy: float64).
    xp, Z = be.owned_float_copy(inducing)
    q_sqrt = xp.stack([eye(m, Z)] * n_covariances)
    return CoupledState(Z, xp.zeros((m, n_outputs), dtype=Z.dtype, device=be.device_of(Z)), q_sqrt)


#: The folded form evaluates k_xz W k_zx with W holding -K_zz^-1; its rounding error is about
#: eps * cond(K_zz) times the prior variance. Above this bound on the condition number the
#: training step keeps the whitened form, whose error does not grow with cond(K_zz).
FOLDED_FORM_MAX_CONDITION = 1e10
#: The folded form saves two O(B M^2) products and pays about four O(M^3) ones: it is the
#: faster one from about two rows per inducing point up (docs/constants.md).
FOLDED_FORM_MIN_ROWS_PER_POINT = 2

#: The bound with q(v) at its optimum under Gaussian noise, and its gradient, in one pass
#: (:mod:`._collapsed`): what an exact search evaluates instead of a natural step and two
#: passes of the functions below.
collapsed_bound = _collapsed.collapsed_bound


class TapeBase:
    """What the backward pass and the natural step need from one forward pass.

    Two forms hold the same model: :class:`WhitenedTape` keeps A = L_k^-1 K_zx,
    :class:`FoldedTape` keeps K_zx and folds L_k^-1 into M x M matrices. Both answer
    the same questions: A v, A^T w, A diag(h) A^T and dF/dK_zx.
    """

    __slots__ = ("low_k", "mean", "back_zz", "back_zx", "back_diag", "jitter", "h_key", "whitened_gram",
                 "d_var_key", "h_sum")

    def whitened_grams(self, h_sum):
        """A diag(h_c) A^T per covariance (h summed over the outputs sharing it), cached:
        the O(B M^2) product shared by the backward pass and the natural step."""
        if self.h_key is None or not (self.h_key is h_sum or same_values(self.h_key, h_sum)):
            self.whitened_gram = [self._gram(h_sum[:, c]) for c in range(h_sum.shape[1])]
            # The array itself: h_sum is a fresh array of the caller's, never written.
            self.h_key = h_sum
        return self.whitened_gram


class WhitenedTape(TapeBase):
    """The whitened form: A = L_k^-1 K_zx and L_c^T A, five O(B M^2) products a step."""

    __slots__ = ("a", "lt_a")

    def s_minus_i_times(self, state, c, w):
        low = state.q_sqrt[c, ...]
        return tri_mm(low, tri_mm(low, w, trans=True)) - w

    def cholesky_adjoint(self, lt_low_bar):
        return jittered_cholesky_backward(self.low_k, lt_low_bar, self.jitter)

    def a_times(self, v):
        return mm(self.a, v)

    def at_times(self, w):
        return mm(self.a, w, trans_a=True)

    def _gram(self, h):
        return weighted_gram(self.a, h)

    @classmethod
    def of_features(cls, a, lt_a, mean):
        """A tape over given whitened features (the solve basis keeps one per block)."""
        tape = cls()
        tape.a, tape.lt_a, tape.mean = a, lt_a, mean
        tape.h_key = tape.whitened_gram = None
        return tape

    def a_adjoint(self, state, d_mean, h):
        """dF/dA = m g^T + 2 sum_c (S_c - I) A diag(h_c)."""
        a = self.a
        # Accumulated over S_0 A, a fresh array the fused passes may overwrite.
        a_bar = outer_plus_scaled_difference(tri_mm(state.q_sqrt[0, ...], self.lt_a[0]), a, state.q_mean, d_mean,
                                             h[:, 0])
        for c in range(1, state.q_sqrt.shape[0]):
            a_bar = add_scaled_difference(a_bar, tri_mm(state.q_sqrt[c, ...], self.lt_a[c]), a, h[:, c])
        return a_bar

    def kzx_adjoint(self, state, d_mean, h):
        """dF/dK_zx = L_k^-T dF/dA."""
        return solve_triangular(self.low_k, self.a_adjoint(state, d_mean, h), trans=True)


class FoldedTape(TapeBase):
    """The folded form: K_zx and W_c K_zx with W_c = L_k^-T (S_c - I) L_k^-1, three
    O(B M^2) products a step (one SYMM, one SYRK) for a few more O(M^3) ones."""

    __slots__ = ("inv_low", "kzx", "s_minus_i", "middle", "middle_kzx")

    def s_minus_i_times(self, state, c, w):
        return mm(self.s_minus_i[c, ...], w)

    def cholesky_adjoint(self, lt_low_bar):
        return jittered_cholesky_backward(self.low_k, lt_low_bar, self.jitter, inv_low=self.inv_low)

    # inv_low comes from tri_inverse: its upper triangle is zero (zeros_above).
    def a_times(self, v):
        return tri_mm(self.inv_low, mm(self.kzx, v), zeros_above=True)

    def at_times(self, w):
        return mm(self.kzx, tri_mm(self.inv_low, w, trans=True, zeros_above=True), trans_a=True)

    def _gram(self, h):
        # A diag(h) A^T = L_k^-1 (K_zx diag(h) K_xz) L_k^-T
        inner = tri_mm(self.inv_low, weighted_gram(self.kzx, h), zeros_above=True)
        return tri_mm(self.inv_low, inner, trans=True, right=True, zeros_above=True)

    def whitened_grams_of_features(self, h_sum):
        """A diag(h_c) A^T from A = L_k^-1 K_zx formed explicitly: one more O(B M^2)
        product, but a gram of one matrix, so semi-definite to rounding whatever
        cond(K_zz) and the scale of h (the natural step falls back to it)."""
        a = tri_mm(self.inv_low, self.kzx, zeros_above=True)
        self.whitened_gram = [weighted_gram(a, h_sum[:, c]) for c in range(h_sum.shape[1])]
        self.h_key = h_sum
        return self.whitened_gram

    def kzx_adjoint(self, state, d_mean, h):
        """dF/dK_zx = L_k^-T m g^T + 2 sum_c W_c K_zx diag(h_c)."""
        if self.middle_kzx is None:
            # A second backward pass over the same tape: the first one consumed W K_zx.
            self.middle_kzx = [sym_mm(w, self.kzx) for w in blocks(self.middle)]
        alpha = tri_mm(self.inv_low, state.q_mean, trans=True, zeros_above=True)
        # The fused passes may overwrite W_0 K_zx: the tape lets go of all of them.
        kzx_bar = outer_plus_scaled(self.middle_kzx[0], alpha, d_mean, h[:, 0])
        for c in range(1, state.q_sqrt.shape[0]):
            kzx_bar = add_scaled(kzx_bar, self.middle_kzx[c], h[:, c])
        self.middle_kzx = None
        return kzx_bar


def marginals(kernel, X, state, jitter, need_grad=True, form="auto"):
    """Latent marginals at the rows of X: the contract's :meth:`Basis.marginals <skgp_sparse.bases.contract.Basis.marginals>`,
    with one more argument.

    Parameters
    ----------
    form : {"auto", "whitened", "folded"}
        How they are evaluated (the model is the same): "whitened" through
        A = L_k^-1 K_zx, "folded" through W_c = L_k^-T (S_c - I) L_k^-1, with two fewer
        O(B M^2) products. "auto" folds float64 training steps (``need_grad``) with
        at least :data:`FOLDED_FORM_MIN_ROWS_PER_POINT` rows per inducing point whose
        K_zz is well enough conditioned (:data:`FOLDED_FORM_MAX_CONDITION`) and keeps
        the whitened form for everything else (the reported ELBO included).
    """
    Z = state.inducing
    # "natural": a tape for natural_step only, without the kernel's derivatives.
    with_vjp = need_grad and need_grad != "natural"
    low_k, used, back_zz = factor_kzz(kernel, Z, jitter, with_vjp)
    kzx, back_zx, kdiag, back_diag = cross_and_diagonal(kernel, Z, X, with_vjp)
    xp = be.namespace(kzx)
    inv_low = None
    fold_if_stable = need_grad and kzx.dtype == xp.float64 and X.shape[0] >= FOLDED_FORM_MIN_ROWS_PER_POINT * Z.shape[0]
    if form == "folded" or (form == "auto" and fold_if_stable):
        inv_low = tri_inverse(low_k)
        # cond(K) <= trace(K) ||K^-1||_2 <= |L|_F^2 |L^-1|_F^2
        if form == "auto" and too_ill_conditioned_to_fold(low_k, inv_low, xp):
            inv_low = None
    if inv_low is None:
        tape = WhitenedTape()
        tape.a = solve_triangular(low_k, kzx)
        tape.lt_a = [tri_mm(low, tape.a, trans=True) for low in blocks(state.q_sqrt)]
        mean = mm(tape.a, state.q_mean, trans_a=True)
        var = column_variances(kdiag, tape.a, tape.lt_a)
    else:
        tape = FoldedTape()
        tape.inv_low, tape.kzx = inv_low, kzx
        tape.s_minus_i = s_minus_identity(state.q_sqrt)
        tape.middle = folded_middle(inv_low, tape.s_minus_i)
        tape.middle_kzx = [sym_mm(w, kzx) for w in blocks(tape.middle)]
        mean = mm(kzx, tri_mm(inv_low, state.q_mean, trans=True, zeros_above=True), trans_a=True)
        var = xp.stack([column_products(kdiag, kzx, w_k) for w_k in tape.middle_kzx], axis=1)
    # The positive and negative parts cancel almost exactly far from the data; a tiny
    # negative result is rounding, not a model property.
    var = xp.clip(var, 0.0, None)
    if not need_grad:
        return mean, var, None
    tape.low_k, tape.mean = low_k, mean
    tape.back_zz, tape.back_zx, tape.back_diag = back_zz, back_zx, back_diag
    tape.jitter = used
    tape.h_key = None
    tape.whitened_gram = None
    return mean, var, tape


def s_minus_identity(q_sqrt):
    """S_c - I = L_c L_c^T - I for every covariance, (C, M, M)."""
    # The factors' strict upper parts are not part of the model (tri_mm ignores them only
    # in its triangular operand).
    xp = be.namespace(q_sqrt)
    return stack_blocks([add_to_diagonal(tri_mm(low, xp.tril(low), trans=True, right=True), -1.0, xp)
                         for low in blocks(q_sqrt)], xp)


def folded_middle(inv_low, s_minus_i):
    """W_c = L_k^-T (S_c - I) L_k^-1, (C, M, M), from L_k^-1 (of :func:`tri_inverse`:
    zeros above its diagonal) and S_c - I."""
    xp = be.namespace(s_minus_i)
    return stack_blocks([tri_mm(inv_low, tri_mm(inv_low, s, trans=True, zeros_above=True), right=True,
                                zeros_above=True) for s in blocks(s_minus_i)], xp)


def backward(tape, state, d_mean, d_var, fields=("inducing",)):
    """Gradient of F(mean, var) - KL in the kernel hyperparameters, Z and q(v).

    With A = L_k^-1 K_zx, g = d_mean and h = d_var:

        dF/dA        = m g^T + 2 sum_c (S_c - I) A diag(h_c)
        dF/dK_zx     = L_k^-T dF/dA
        L_k^T dF/dL_k = -(dF/dA) A^T = -m (A g)^T - 2 sum_c (S_c - I) A diag(h_c) A^T

    and the Cholesky adjoint maps the last one to dF/dK_zz. The whitened KL depends on
    q(v) alone, so it enters only the gradients in q_mean and q_sqrt:

        dF/dm_p = A g_p - m_p,    dF/dL_c = tril(2 A diag(h_c) A^T L_c) - k (L_c - diag(L_c)^-1)

    with k the number of outputs sharing L_c. Arguments and returns: the contract's
    :meth:`Basis.backward <skgp_sparse.bases.contract.Basis.backward>` (``fields`` of
    ``INDUCING_FIELDS`` and ``VARIATIONAL_FIELDS``).
    """
    h = tape_var_adjoint(tape, d_var, state.q_sqrt.shape[0])
    a_g, lt_low_bar = prior_factor_adjoint(tape, state, d_mean, h)
    kzx_bar = tape.kzx_adjoint(state, d_mean, h)
    kzz_bar = tape.cholesky_adjoint(lt_low_bar)
    theta_zz, z_zz = tape.back_zz(kzz_bar)
    theta_zx, z_zx = tape.back_zx(kzx_bar)
    theta_d = tape.back_diag(be.namespace(h).sum(h, axis=1))
    bars = {"inducing": z_zz + z_zx}
    if "q_mean" in fields:
        bars["q_mean"] = a_g - state.q_mean
    if "q_sqrt" in fields:
        bars["q_sqrt"] = q_sqrt_gradient(tape, state, h)
    return theta_zz + theta_zx + theta_d, {name: bars[name] for name in fields}


def prior_factor_adjoint(tape, state, d_mean, h):
    """A g and L_k^T dF/dL_k = -m (A g)^T - 2 sum_c (S_c - I) A diag(h_c) A^T."""
    a_g = tape.a_times(d_mean)
    lt_low_bar = -mm(state.q_mean, a_g, trans_b=True)
    for c, w in enumerate(tape.whitened_grams(h)):
        lt_low_bar -= 2.0 * tape.s_minus_i_times(state, c, w)
    return a_g, lt_low_bar


def q_sqrt_gradient(tape, state, h):
    """d(F - KL)/dL_c, lower triangular (for Adam on q(v))."""
    n_out, n_cov = state.q_mean.shape[1], state.q_sqrt.shape[0]
    outputs_per_cov = n_out if n_cov == 1 else 1
    grams = tape.whitened_grams(h)
    xp = be.namespace(state.q_sqrt)
    bars = []
    for c, low in enumerate(blocks(state.q_sqrt)):
        kl_bar = low - eye(low.shape[0], low) / diagonal(low, xp)
        bars.append(xp.tril(2.0 * mm(grams[c], low) - outputs_per_cov * kl_bar))
    return xp.stack(bars)


def kl_divergence(kernel, state, jitter, tape=None):
    """KL(q(v) || N(0, I)) summed over outputs (whitened: no kernel matrix needed)."""
    n_out = state.q_mean.shape[1]
    n_cov, m = state.q_sqrt.shape[:2]
    xp = be.namespace(state.q_sqrt, state.q_mean)
    # A 0-d array (a numpy scalar) of the state's namespace: no synchronisation with a device.
    per_cov = [
        xp.sum(low * low) - m - 2.0 * xp.sum(xp.log(xp.abs(diagonal(low, xp))))
        for low in blocks(state.q_sqrt)
    ]
    trace_logdet = sum(per_cov[1:], per_cov[0]) * (n_out if n_cov == 1 else 1)
    return 0.5 * (trace_logdet + xp.sum(state.q_mean * state.q_mean))


def natural_step(tape, state, d_mean, d_var, step):
    """One natural-gradient step of size ``step`` on q(v), for an objective to maximise.

    In natural parameters (precision P, shift t = P m) the step is a convex combination
    of the current point and the conjugate optimum built from this batch's adjoints
    (g = d_mean, h = d_var; A = L_k^-1 K_zx):

        P_new = (1 - step) S^-1 + step (I - 2 A diag(h) A^T)
        t_new = (1 - step) S^-1 m + step A (g - 2 h * (A^T m))

    With a Gaussian likelihood, a full batch and step 1 this is the collapsed optimum.

    Raises
    ------
    CholeskyError
        If the new precision is not positive definite (non-log-concave likelihoods, too
        large a step): the caller backs off.
    """
    n_out = state.q_mean.shape[1]
    n_cov = state.q_sqrt.shape[0]
    h_sum = tape_var_adjoint(tape, d_var, n_cov)
    # With a shared covariance the natural gradient of the shared precision averages the
    # outputs' adjoints (the Fisher of the shared block is n_out times one output's).
    outputs_per_cov = n_out if n_cov == 1 else 1
    h = h_sum / outputs_per_cov
    grams = tape.whitened_grams(h_sum)
    precisions = state.precisions()
    xp = be.namespace(state.q_sqrt, state.q_mean)
    means, sqrts, precs = [], [], []
    for c in range(n_cov):
        prec_old = precisions[c, ...]

        def new_precision(gram):
            return add_to_diagonal((1.0 - step) * prec_old - (2.0 * step / outputs_per_cov) * gram, step, xp)

        prec, low_new, grams = _factored_precision(new_precision, grams, c, tape, h_sum)
        cols = output_columns(n_cov, c)
        shift = (1.0 - step) * mm(prec_old, state.q_mean[:, cols])
        target = d_mean[:, cols] - 2.0 * h[:, c : c + 1] * tape.mean[:, cols]
        shift = shift + step * tape.a_times(target)
        # low_new (of inverse_cholesky_factor) has zeros above its diagonal.
        means.append(tri_mm(low_new, tri_mm(low_new, shift, trans=True, zeros_above=True), zeros_above=True))
        sqrts.append(low_new)
        precs.append(prec)
    new_mean = join_output_columns(means, xp)
    return CoupledState(state.inducing, new_mean, stack_blocks(sqrts, xp), stack_blocks(precs, xp))


def _factored_precision(new_precision, grams, c, tape, h_sum):
    """Covariance c's new precision ``new_precision(grams[c])``, its inverse Cholesky
    factor, and the grams used (recomputed when the first ones failed).

    The folded gram L^-1 (K_zx diag(h) K_xz) L^-T loses definiteness when cond(K_zz) times
    |h| is huge (a tiny noise): a failed factorisation of a folded tape's precision is
    redone from grams of A itself; any other failure propagates (the step backs off)."""
    prec = new_precision(grams[c])
    try:
        return prec, inverse_cholesky_factor(prec), grams
    except CholeskyError:
        if not isinstance(tape, FoldedTape):
            raise
    grams = tape.whitened_grams_of_features(h_sum)
    prec = new_precision(grams[c])
    return prec, inverse_cholesky_factor(prec), grams


@dataclass
class CoupledPredictor:
    """The fitted coupled model as plain arrays: O(M) per row for the mean, O(M^2) for the variance.

    Attributes
    ----------
    inducing_points : ndarray of shape (M, D)
    mean_weights : ndarray of shape (M, P)
        L_k^-T m, so that the latent mean is K_xz @ mean_weights.
    middle : ndarray of shape (C, M, M)
        L_k^-T (S_c - I) L_k^-1, so that the latent variance is k_xx + k_xz middle_c k_zx.
    """

    inducing_points: np.ndarray
    mean_weights: np.ndarray
    middle: np.ndarray

    def latent(self, kernel, X, full_cov=False):
        """Latent mean (n, P) and variance (n, C), or covariance (C, n, n) with full_cov."""
        kzx = kernel.kuf(self.inducing_points, X)
        mean = mm(kzx, self.mean_weights, trans_a=True)
        xp = be.namespace(kzx)
        middle = blocks(self.middle)
        if full_cov:
            prior = kernel.kff(X)
            return mean, xp.stack([prior + mm(kzx, mm(w, kzx), trans_a=True) for w in middle])
        kdiag = kernel.kff_diag(X)
        var = xp.stack([kdiag + column_dots(kzx, mm(w, kzx)) for w in middle], axis=1)
        return mean, xp.clip(var, 0.0, None)


def make_predictor(kernel, state, jitter):
    """Freeze the fitted q(v) and hyperparameters into a :class:`CoupledPredictor`."""
    low_k, _, _ = factor_kzz(kernel, state.inducing, jitter, need_grad=False)
    inv_low = tri_inverse(low_k)
    alpha = mm(inv_low, state.q_mean, trans_a=True)
    return CoupledPredictor(copy_array(state.inducing), alpha, folded_middle(inv_low, s_minus_identity(state.q_sqrt)))


class CoupledBasis(Basis, members=globals()):
    """The coupled basis: this module's functions and field tuples, under the names of the
    :class:`~.contract.Basis` contract."""

    name = "coupled"


#: The coupled basis, as :data:`skgp_sparse.bases.BASES` registers it.
BASIS = CoupledBasis()
