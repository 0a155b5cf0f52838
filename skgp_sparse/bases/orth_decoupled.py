"""The orthogonally decoupled basis (Salimbeni, Cheng, Boots and Deisenroth, 2018).

Two sets of inducing inputs: beta (``inducing``, |beta| = n_inducing) carries the
covariance and part of the mean exactly as the coupled basis does, and gamma
(``orthogonal``, |gamma| = n_orthogonal) carries extra mean basis functions projected
orthogonally to span(beta). With K = K_bb + jitter (the same jittered matrix everywhere),
L_k L_k^T = K, whitened beta parameters (m_p, S_c = L_c L_c^T) as in
:mod:`.coupled` and gamma coefficients a_p (column p of ``orth_mean``):

    mean_p(x) = k_xb L_k^-T m_p + (k_xg - k_xb K^-1 K_bg) a_p
              = k_xb L_k^-T (m_p - w_p) + k_xg a_p,        w_p = L_k^-1 K_bg a_p
    var_c(x)  = as in the coupled basis (gamma does not touch the covariance)
    KL        = KL_coupled + 1/2 sum_p a_p^T (K_gg - K_gb K^-1 K_bg) a_p
              = KL_coupled + 1/2 sum_p (a_p^T K_gg a_p - |w_p|^2)

(spec_orth_decoupled.md 2.5, the corrected marginals of the paper's App. A.2). The gamma
part of the mean vanishes at the beta points and adds no (a, m) cross term to the KL.

Beyond the coupled cost a step costs O(B |gamma| D) for K(X, gamma), O(|beta| |gamma| D)
for K(beta, gamma) and O(|gamma|^2 D) for the exact a^T K_gg a; with
``KL_COLUMNS = c`` the last one is replaced by the paper's unbiased column-sampled
estimate (c random columns of K_gg, O(c |gamma| D)) in the training steps, while the
reported ELBO (:func:`kl_divergence` without a tape) stays exact.

Updates: q(v) of beta by the coupled natural step (the orthogonal natural parameters
make it independent of gamma; its "u" is the beta part of the mean only, which is what
the coupled tape holds). The gamma coefficients by Adam (``GAMMA_STEP = "adam"``, the
default, as in the paper's experiments) or by the paper's diagonally preconditioned step
(eq. 17) a <- a + tau_g (D_g|b + eps)^-1 d(ELBO)/da with D_g|b = diag(K_gg - K_gb K^-1 K_bg)
(``GAMMA_STEP = "diagonal"``, tau_g = ``DIAGONAL_STEP_SIZE``). Both settings are read
when a model is built: change them before ``fit``. docs/bases/orth_decoupled.md gives the
measurement behind the default.

With n_orthogonal = 0 every function hands over to :mod:`.coupled` unchanged, so the model
is exactly the coupled one.
"""

import copy
from dataclasses import dataclass, field

import numpy as np

from . import coupled
from ..linalg import jittered_cholesky_backward, mm, solve_triangular

#: How the gamma coefficients move: "adam" (with the kernel hyperparameters) or
#: "diagonal" (the paper's eq. 17 inside the natural step). Read when a model is built.
GAMMA_STEP = "adam"
#: Step size tau_g of the diagonal step (GAMMA_STEP = "diagonal").
DIAGONAL_STEP_SIZE = 1e-3
#: None: the exact a^T K_gg a in every step (O(|gamma|^2)). An int c: the paper's
#: column-sampled estimate from c random columns (O(c |gamma|)) in the training steps.
#: Read by :func:`init_state`.
KL_COLUMNS = None

#: Fields moved by Adam when the inducing inputs are learned: both sets.
INDUCING_FIELDS = ("inducing", "orthogonal")


def __getattr__(name):
    # The field lists follow GAMMA_STEP (PEP 562 module attributes).
    if name == "ADAM_FIELDS":
        return ("orth_mean",) if GAMMA_STEP == "adam" else ()
    if name == "VARIATIONAL_FIELDS":
        return ("q_mean", "q_sqrt") if GAMMA_STEP == "adam" else ("q_mean", "q_sqrt", "orth_mean")
    if name in ("EXACT_NATURAL_STEP", "CONJUGATE_NATURAL_STEP"):
        # Beta's step is the coupled one, exact for gamma's coefficients held where Adam has them.
        return GAMMA_STEP == "adam"
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _check_gamma_step():
    if GAMMA_STEP not in ("adam", "diagonal"):
        raise ValueError(f"orth_decoupled.GAMMA_STEP must be 'adam' or 'diagonal'; got {GAMMA_STEP!r}")


@dataclass
class OrthState:
    """Variational parameters of the orthogonally decoupled basis.

    Attributes
    ----------
    beta : CoupledState
        The covariance set beta with its whitened q(v) (shared with :mod:`.coupled`).
    orthogonal : ndarray of shape (Mg, D)
        The gamma inducing inputs.
    orth_mean : ndarray of shape (Mg, P)
        Gamma coefficients a, one column per output.
    kl_columns : int or None
        Column sample size of a^T K_gg a in training steps (None: exact).
    column_rng : numpy Generator or None
        Draws the sampled columns.
    """

    beta: coupled.CoupledState
    orthogonal: np.ndarray
    orth_mean: np.ndarray
    kl_columns: int = None
    column_rng: object = field(default=None, repr=False)

    # The coupled fields, so that the optimiser and the estimators see one flat state.
    @property
    def inducing(self):
        return self.beta.inducing

    @inducing.setter
    def inducing(self, value):
        self.beta.inducing = value

    @property
    def q_mean(self):
        return self.beta.q_mean

    @q_mean.setter
    def q_mean(self, value):
        self.beta.q_mean = value

    @property
    def q_sqrt(self):
        return self.beta.q_sqrt

    @q_sqrt.setter
    def q_sqrt(self, value):
        self.beta.q_sqrt = value

    @property
    def n_orthogonal(self):
        return self.orthogonal.shape[0]

    def copy(self):
        return OrthState(
            self.beta.copy(), self.orthogonal.copy(), self.orth_mean.copy(), self.kl_columns,
            copy.deepcopy(self.column_rng),
        )

    def drop_caches(self):
        """Forget what can be recomputed (before a fitted model is stored and pickled)."""
        self.beta.drop_caches()


def init_state(inducing, n_outputs, n_covariances, n_orthogonal=0):
    """The prior (zero KL): the first ``len(inducing) - n_orthogonal`` rows are beta, the rest gamma.

    With the estimators' k-means initialisation the rows come in k-means++ seeding order,
    so beta is a well spread subset of the centres (see docs/bases/orth_decoupled.md for
    the comparison with the paper's initialisation).
    """
    points = np.array(inducing, dtype=np.float64)
    n_orthogonal = int(n_orthogonal)
    if n_orthogonal < 0 or points.shape[0] - n_orthogonal < 1:
        raise ValueError(
            f"orth_decoupled needs at least one beta point: got {points.shape[0]} inducing inputs "
            f"for n_orthogonal={n_orthogonal}"
        )
    if KL_COLUMNS is not None and (not isinstance(KL_COLUMNS, (int, np.integer)) or KL_COLUMNS < 1):
        raise ValueError(f"orth_decoupled.KL_COLUMNS must be None or a positive int; got {KL_COLUMNS!r}")
    n_beta = points.shape[0] - n_orthogonal
    beta = coupled.init_state(points[:n_beta], n_outputs, n_covariances)
    columns = None if KL_COLUMNS is None or KL_COLUMNS >= n_orthogonal else int(KL_COLUMNS)
    rng = None if columns is None else np.random.default_rng(0)
    return OrthState(beta, points[n_beta:].copy(), np.zeros((n_orthogonal, n_outputs)), columns, rng)


class _Tape:
    """The coupled tape of the beta part plus what the gamma part needs."""

    __slots__ = ("beta", "jitter", "mean", "kgx", "back_gx", "kgb", "back_gb", "c", "w", "quad", "kgg_a",
                 "back_gg", "columns", "kernel")


def _quadratic(kernel, gamma, a, need_grad, columns=None, rng=None):
    """sum_p a_p^T K_gg a_p (exact, or the column-sampled estimate) and what its gradient needs.

    Returns (value, K_gg a or its sampled counterpart, backward or None, sampled columns or None).
    """
    if columns is None:
        if need_grad:
            kgg, back = kernel.vjp(gamma)
        else:
            kgg, back = kernel(gamma), None
        kgg_a = mm(kgg, a)
        return float(np.sum(a * kgg_a)), kgg_a, back, None
    n_g = gamma.shape[0]
    cols = np.sort(rng.choice(n_g, columns, replace=False))
    # (Mg / c) a_C^T K_Cg a: unbiased for a^T K_gg a under uniform sampling without replacement.
    kcg, back = kernel.vjp(gamma[cols], gamma) if need_grad else (kernel(gamma[cols], gamma), None)
    kcg_a = mm(kcg, a)
    scale = n_g / columns
    return scale * float(np.sum(a[cols] * kcg_a)), (kcg, kcg_a), back, cols


def marginals(kernel, X, state, jitter, need_grad=True):
    """Latent marginals at the rows of X (see :func:`skgp_sparse.bases.coupled.marginals`).

    Returns
    -------
    mean : ndarray of shape (B, P)
    var : ndarray of shape (B, C)
    tape : object for :func:`backward` and :func:`natural_step` (None without need_grad)
    """
    if state.n_orthogonal == 0:
        mean, var, tape_b = coupled.marginals(kernel, X, state.beta, jitter, need_grad)
        if tape_b is None:
            return mean, var, None
        tape = _Tape()
        tape.beta, tape.jitter, tape.mean = tape_b, tape_b.jitter, mean
        return mean, var, tape
    # The gamma part needs L_k and A = L_k^-1 K_bX, which the coupled forward keeps in its tape.
    mean_b, var, tape_b = coupled.marginals(kernel, X, state.beta, jitter, need_grad=True)
    gamma, beta, a = state.orthogonal, state.inducing, state.orth_mean
    if need_grad:
        kgx, back_gx = kernel.vjp(gamma, X)
        kgb, back_gb = kernel.vjp(gamma, beta)
    else:
        kgx, back_gx = kernel(gamma, X), None
        kgb, back_gb = kernel(gamma, beta), None
    c = mm(kgb, a, trans_a=True)  # K_bg a, (Mb, P)
    w = solve_triangular(tape_b.low_k, c)
    # mean = A^T m + K_Xg a - A^T w
    mean = mean_b + mm(kgx, a, trans_a=True) - tape_b.at_times(w)
    if not need_grad:
        return mean, var, None
    tape = _Tape()
    tape.beta, tape.jitter, tape.mean, tape.kernel = tape_b, tape_b.jitter, mean, kernel
    tape.kgx, tape.back_gx, tape.kgb, tape.back_gb, tape.c, tape.w = kgx, back_gx, kgb, back_gb, c, w
    tape.quad, tape.kgg_a, tape.back_gg, tape.columns = _quadratic(
        kernel, gamma, a, True, state.kl_columns, state.column_rng
    )
    return mean, var, tape


def _beta_view(state, q_mean):
    """The coupled state with another mean (same arrays otherwise, caches included)."""
    return coupled.CoupledState(state.inducing, q_mean, state.q_sqrt, state.beta.precision)


def kl_divergence(kernel, state, jitter, tape=None):
    """KL(q || p) summed over outputs; exact without a tape, else the tape's estimate
    (exact unless ``kl_columns`` is set)."""
    kl = coupled.kl_divergence(kernel, state.beta, jitter)
    if state.n_orthogonal == 0:
        return kl
    if tape is None:
        low_k, _, _ = coupled.factor_kzz(kernel, state.inducing, jitter, need_grad=False)
        c = mm(kernel(state.orthogonal, state.inducing), state.orth_mean, trans_a=True)
        w = solve_triangular(low_k, c)
        quad = _quadratic(kernel, state.orthogonal, state.orth_mean, False)[0]
    else:
        w, quad = tape.w, tape.quad
    return kl + 0.5 * (quad - float(np.sum(w * w)))


def _quadratic_gradient(tape, state):
    """-1/2 d(sum_p a_p^T K_gg a_p)/da, exact or from the sampled columns."""
    a = state.orth_mean
    if tape.columns is None:
        return -tape.kgg_a
    kcg, kcg_a = tape.kgg_a
    scale = state.n_orthogonal / tape.columns.size
    grad = -0.5 * scale * mm(kcg, a[tape.columns], trans_a=True)
    grad[tape.columns] -= 0.5 * scale * kcg_a
    return grad


def _orth_mean_gradient(tape, state, c_bar, d_mean):
    """d(F - KL)/da = K_gX g + K_gb c_bar - K_gg a  (c_bar = d(F - KL)/d(K_bg a))."""
    return mm(tape.kgx, d_mean) + mm(tape.kgb, c_bar) + _quadratic_gradient(tape, state)


def backward(tape, state, d_mean, d_var, fields=("inducing", "orthogonal", "orth_mean")):
    """Gradient of F(mean, var) - KL in the kernel hyperparameters and the fields asked for.

    The beta part is the coupled backward pass run with the mean weights m - w (the mean
    is A^T (m - w) + K_Xg a). The gamma part adds, with G = d_mean and
    w_bar = w - A G (the gradient in w = L_k^-1 K_bg a, from the mean and the KL),
    c_bar = L_k^-T w_bar:

        dF/dK_gX = a G^T,    dF/dK_gb = a c_bar^T,    dF/dK_gg = -1/2 a a^T,
        L_k^T dF/dL_k += -w_bar w^T,
        dF/da = K_gX G + K_gb c_bar - K_gg a,    dF/dm = (coupled) - w.

    Every term is checked against finite differences in tests/test_orth_decoupled.py.
    """
    if state.n_orthogonal == 0:
        fields_b = tuple(f for f in fields if f not in ("orthogonal", "orth_mean"))
        theta_bar, bars = coupled.backward(tape.beta, state.beta, d_mean, d_var, fields_b)
        for name in fields:
            if name == "orthogonal":
                bars[name] = np.zeros_like(state.orthogonal)
            elif name == "orth_mean":
                bars[name] = np.zeros_like(state.orth_mean)
        return theta_bar, bars
    tb = tape.beta
    a, w = state.orth_mean, tape.w
    fields_b = tuple(f for f in fields if f in ("inducing", "q_mean", "q_sqrt"))
    theta_bar, bars = coupled.backward(tb, _beta_view(state, state.q_mean - w), d_mean, d_var,
                                       fields_b + (() if "inducing" in fields_b else ("inducing",)))
    if "q_mean" in bars:
        # The KL holds m, not m - w: the coupled pass subtracted m - w.
        bars["q_mean"] = bars["q_mean"] - w
    ag = tb.a_times(d_mean)
    w_bar = w - ag
    c_bar = solve_triangular(tb.low_k, w_bar, trans=True)
    # w = L_k^-1 c: L_k^T dF/dL_k = -w_bar w^T, through the Cholesky and the relative jitter.
    kzz_bar = jittered_cholesky_backward(tb.low_k, -mm(w_bar, w, trans_b=True), tb.jitter)
    theta_zz, z_zz = tb.back_zz(kzz_bar)
    kgb_bar = mm(a, c_bar, trans_b=True)
    theta_gb, g_gb = tape.back_gb(kgb_bar)
    theta_gx, g_gx = tape.back_gx(mm(a, d_mean, trans_b=True))
    theta_bar = theta_bar + theta_zz + theta_gb + theta_gx
    orth_bar = g_gb + g_gx
    if tape.columns is None:
        theta_gg, g_gg = tape.back_gg(-0.5 * mm(a, a, trans_b=True))
        orth_bar = orth_bar + g_gg
    else:
        cols, scale = tape.columns, state.n_orthogonal / tape.columns.size
        kcg_bar = -0.5 * scale * mm(a[cols], a, trans_b=True)
        theta_gg, g_rows = tape.back_gg(kcg_bar)
        orth_bar = orth_bar.copy()
        orth_bar[cols] += g_rows
        if "orthogonal" in fields:
            # The columns' side of K_Cg (its theta part is already counted above).
            _, back_gc = tape.kernel.vjp(state.orthogonal, state.orthogonal[cols])
            orth_bar += back_gc(kcg_bar.T)[1]
    theta_bar = theta_bar + theta_gg
    out = {}
    for name in fields:
        if name == "inducing":
            beta_bar = bars["inducing"] + z_zz
            # The beta side of K_gb (the vjp above differentiates its first argument, gamma).
            _, back_bg = tape.kernel.vjp(state.inducing, state.orthogonal)
            out[name] = beta_bar + back_bg(kgb_bar.T)[1]
        elif name == "orthogonal":
            out[name] = orth_bar
        elif name == "orth_mean":
            out[name] = _orth_mean_gradient(tape, state, c_bar, d_mean)
        else:
            out[name] = bars[name]
    return theta_bar, out


def natural_step(tape, state, d_mean, d_var, step):
    """The coupled natural step on beta's q(v); with ``GAMMA_STEP = "diagonal"`` also the
    paper's eq. 17 step on the gamma coefficients,

        a <- a + DIAGONAL_STEP_SIZE * (max(D, 0) + eps)^-1 d(F - KL)/da,
        D = diag(K_gg) - colsum((L_k^-1 K_bg)^2)        (O(|beta|^2 |gamma|)).

    Raises
    ------
    CholeskyError
        If the new precision of beta is not positive definite (the caller backs off).
    """
    _check_gamma_step()
    new_beta = coupled.natural_step(tape.beta, state.beta, d_mean, d_var, step)
    new_orth_mean = state.orth_mean
    if GAMMA_STEP == "diagonal" and state.n_orthogonal > 0:
        tb = tape.beta
        c_bar = solve_triangular(tb.low_k, tape.w - tb.a_times(d_mean), trans=True)
        grad = _orth_mean_gradient(tape, state, c_bar, d_mean)
        new_orth_mean = state.orth_mean + DIAGONAL_STEP_SIZE * grad / _nystrom_residual_diagonal(tape, state)[:, None]
    return OrthState(new_beta, state.orthogonal, new_orth_mean, state.kl_columns, state.column_rng)


def _nystrom_residual_diagonal(tape, state):
    """D_g|b = diag(K_gg - K_gb K^-1 K_bg), clipped at 0, plus a relative eps."""
    kernel = tape.kernel
    kdiag = kernel.diag(state.orthogonal)
    proj = solve_triangular(tape.beta.low_k, np.ascontiguousarray(tape.kgb.T))
    d = kdiag - np.einsum("ij,ij->j", proj, proj)
    # A gamma point on top of a beta point has D ~ 0 (or slightly negative by rounding).
    return np.maximum(d, 0.0) + max(tape.jitter, 1e-6) * float(np.mean(kdiag))


@dataclass
class OrthPredictor:
    """The fitted model as plain arrays: the coupled predictor of beta (whose mean weights
    include the projection of the gamma part) plus k_xg a.

    Attributes
    ----------
    beta : CoupledPredictor
    orthogonal_points : ndarray of shape (Mg, D)
    orthogonal_weights : ndarray of shape (Mg, P)
    """

    beta: coupled.CoupledPredictor
    orthogonal_points: np.ndarray
    orthogonal_weights: np.ndarray

    def latent(self, kernel, X, full_cov=False):
        """Latent mean (n, P) and variance (n, C), or covariance (C, n, n) with full_cov."""
        mean, second = self.beta.latent(kernel, X, full_cov)
        if self.orthogonal_points.shape[0]:
            mean = mean + mm(kernel(self.orthogonal_points, X), self.orthogonal_weights, trans_a=True)
        return mean, second


def make_predictor(kernel, state, jitter):
    """Freeze the fitted model into an :class:`OrthPredictor` (O((Mb + Mg)) per row for the mean)."""
    if state.n_orthogonal == 0:
        beta = coupled.make_predictor(kernel, state.beta, jitter)
        return OrthPredictor(beta, state.orthogonal.copy(), state.orth_mean.copy())
    low_k, _, _ = coupled.factor_kzz(kernel, state.inducing, jitter, need_grad=False)
    w = solve_triangular(low_k, mm(kernel(state.orthogonal, state.inducing), state.orth_mean, trans_a=True))
    beta = coupled.make_predictor(kernel, _beta_view(state, state.q_mean - w), jitter)
    return OrthPredictor(beta, state.orthogonal.copy(), state.orth_mean.copy())
