"""The inverse-free basis: the improved bound of van der Wilk, Artemev and Hensman, in the
likelihood parameterisation, trained by matrix products only.

The bound
---------
q(u) is written through pseudo-observations (the likelihood parameterisation): with
K = K(Z, Z), a site covariance Sigma (SPD) and P = K + Sigma, the latent function at x
has mean k_x^T mu and variance k_xx - k_x^T P^-1 k_x. The inverse P^-1 is replaced by a
free SPD matrix T and the bound

    var_x = k_xx + k_x^T W k_x,     W = T P T - 2 T                       (paper eq. 19)
    KL_b  = 1/2 [ tr(W K) + mu^T K mu + tr(P T) - M - log|T| - log|Sigma| ]   (eq. 21)
    L     = sum_n E_{N(mean_n, var_n)} log p(y_n | f_n) - KL_b             (eq. 20)

is a lower bound on the ELBO for every SPD T, with equality at T = P^-1 (then it is the
usual SVGP ELBO of q(u) = N(K mu, K - K P^-1 K)). Sigma = L_s L_s^T and T = L_t L_t^T are
held as lower triangular factors, so both log-determinants are sums of log-diagonals
and no kernel matrix is ever factorised, inverted or solved against: a training step
and a prediction are matrix products only (tests/test_inverse_free.py proves it by
making every decomposition raise).

Training: product-only natural steps
------------------------------------
The paper moves (mu, L_s, L_t) by Adam with the hyperparameters and reports that this
crawls. Here Adam moves only the hyperparameters, the noise and Z; the three variational
blocks get product-only steps derived from the structure of the bound (kept available
as Adam fields with ``variational_optimizer="adam"``, the paper's way).

*One step for a Cholesky factor.* For a lower factor L of an SPD matrix X = L L^T and a
target SPD matrix A, let E = L^T A L - I and Phi(E) its lower triangle with the
diagonal halved. The update

    L <- L (I - eta Phi(E))

(i) keeps L lower triangular with a positive diagonal whenever eta E_ii < 2, so X stays
SPD without any check; (ii) at eta = 1 is Newton's method on L^T A L = I with the
Jacobian frozen at the solution (X + X^T = -E has the lower solution X = -Phi(E)), so
the new residual is O(E^2): quadratic convergence to X = A^-1, a triangular version of
the Newton-Schulz iteration X <- 2X - X A X; (iii) is the natural-gradient step of
size eta for f(X) = -1/2 tr(A X) + 1/2 log|X| under the Fisher metric of N(0, X):
with dL = L Y, the metric is 1/2 tr((Y + Y^T)^2) and df = tr(L^T grad L (Y + Y^T)),
L^T grad L = -E/2, whose steepest lower Y is -eta Phi(E). The step size is capped by a
Gershgorin bound g >= lambda_max(E): eta = min(eta, 1/g), so eta E_ii <= 1 and every
diagonal at least halves rather than changes sign.

*T.* In T the bound is maximised at T = P^-1 for any data (the derivative
(P T - I) A_d + A_d (T P - I) + 1/2 (T^-1 - P), A_d = K/2 - W_h, vanishes there). So T
is moved by the factor step with A = P (the natural gradient of the -1/2 tr(P T) +
1/2 log|T| part of eq. 21, whose maximiser P^-1 is shared with the whole T-problem);
the data-weighted part would only rescale the step. Each training evaluation first runs
it up to ``T_ITERATIONS`` times against the current K + Sigma, until
||L^T P L - I||_F < ``T_TOLERANCE`` (at the start of the evaluation, not the end of the
natural step, so that T also follows the Adam step that moved K in between). The bound
is valid for every T, so this inner solve never invalidates it.

*Sigma.* With T fixed the bound in Sigma is tr(Sigma G) + 1/2 log|Sigma| with
G = T W_h T - 1/2 (T K T + T), W_h = K_zb diag(h) K_zb^T (h = dF/dvar): a Gaussian
entropy plus a linear term, maximised at Sigma^-1 = Omega = T (K - 2 W_h) T + T. The
factor step with A = Omega is exactly its natural-gradient step, with the schedule's
step size (1 then 1/t to ``natural_step_size`` for a Gaussian likelihood, a warm-up
otherwise) capped as above.

*mu.* The natural gradient in mu needs (K + K Sigma^-1 K)^-1 = K^-1 - P^-1, a K^-1
that no product gives. We precondition instead with Pi = T Sigma T ~ P^-1 Sigma P^-1
= (K^-1 - P^-1) K P^-1: the natural gradient damped by K P^-1, whose eigenvalues lie
in (0, 1) (near 1 where the data dominate Sigma, small in prior-dominated directions,
where mu matters little). With the Hessian H = K - 2 W_h of a Gaussian likelihood,
T H T = Omega - T, so the eigenvalues of Pi H are at most 1 + lambda_max(E_Sigma) with
E_Sigma = L_s^T Omega L_s - I; the step mu <- mu + rho Pi (K_zb g - K mu) with
rho = min(step, 1/(1 + g_Sigma)) therefore never overshoots the quadratic's maximum.

All three steps use the same minibatch evaluation as the Adam step. Their fixed points
are T = P^-1 and the stationary points of the SVGP ELBO in (mu, Sigma) (at T = P^-1 the
T-derivative vanishes, so the Sigma- and mu-derivatives are those of the exact ELBO).
``diagnostics`` reports ||(K + Sigma) T - I||_F, the quality of T, once per epoch.
"""

from dataclasses import dataclass

import numpy as np

from .coupled import CoupledPredictor, covariance_of_output
from ..linalg import CholeskyError, gram, mm, tri_mm

#: Fields of the state that Adam moves when the inducing inputs are learned.
INDUCING_FIELDS = ("inducing",)
#: Fields that Adam always moves (none: q and T are moved by product-only steps).
ADAM_FIELDS = ()
#: Fields that Adam moves instead of the product-only steps (variational_optimizer="adam").
VARIATIONAL_FIELDS = ("q_mean", "sigma_sqrt", "t_sqrt")

#: Most factor steps of T per training evaluation, and the residual ||L_t^T P L_t - I||_F
#: below which they stop early.
T_ITERATIONS = 4
T_TOLERANCE = 1e-3
#: Initial Sigma relative to the kernel's variance. Small: the Sigma step converges in
#: one or two steps from below in the directions the data inform (from far above it
#: only creeps, see the docs), and grows towards the prior in the others.
SIGMA_INIT = 0.01
#: Factor steps of T at initialisation (from T = I / lambda_max bound of P).
T_INIT_ITERATIONS = 200


@dataclass
class InverseFreeState:
    """Variational parameters of the inverse-free basis.

    Attributes
    ----------
    inducing : ndarray of shape (M, D)
        Inducing inputs Z.
    refine_t : bool
        Whether a training evaluation first refines T against the current K + Sigma (set
        on states made by :func:`natural_step`; with Adam on T it stays False).
    q_mean : ndarray of shape (M, P)
        mu, one column per output: the latent mean is K(x, Z) mu.
    sigma_sqrt : ndarray of shape (C, M, M) or None
        Lower factors of the site covariances Sigma_c (None until first used with a kernel).
    t_sqrt : ndarray of shape (C, M, M) or None
        Lower factors of the auxiliary T_c ~ (K + Sigma_c)^-1 (None until first used).
    """

    inducing: np.ndarray
    q_mean: np.ndarray
    sigma_sqrt: np.ndarray = None
    t_sqrt: np.ndarray = None
    n_covariances: int = 1
    refine_t: bool = False

    def copy(self):
        def dup(a):
            return None if a is None else a.copy()

        return InverseFreeState(
            self.inducing.copy(), self.q_mean.copy(), dup(self.sigma_sqrt), dup(self.t_sqrt), self.n_covariances,
            self.refine_t,
        )

    def drop_caches(self):
        """Nothing is cached: every field is a parameter."""


def init_state(inducing, n_outputs, n_covariances, n_orthogonal=0):
    """mu = 0; Sigma and T are set on first use with a kernel (they need its scale)."""
    if n_orthogonal != 0:
        raise ValueError("the inverse_free basis has no orthogonal inducing set; use n_orthogonal=0")
    m = inducing.shape[0]
    return InverseFreeState(np.array(inducing, dtype=np.float64), np.zeros((m, n_outputs)), n_covariances=n_covariances)


# --- the product-only factor step -----------------------------------------------------
def residual(low, target):
    """E = L^T A L - I (symmetric), by two triangular products."""
    left = tri_mm(low, target, trans=True)  # L^T A
    e = tri_mm(low, np.ascontiguousarray(left.T), trans=True)  # L^T (A L)
    e = 0.5 * (e + e.T)
    e.flat[:: e.shape[0] + 1] -= 1.0
    return e


def _frobenius(a):
    return float(np.sqrt(np.sum(a * a)))


def gershgorin_max(e):
    """Upper bound on the largest eigenvalue of the symmetric e."""
    off = np.abs(e).sum(axis=1) - np.abs(np.diag(e))
    return float(np.max(np.diag(e) + off))


def factor_step(low, e, eta):
    """L (I - eta' Phi(E)) with eta' = min(eta, 1 / gershgorin_max(E)); returns (L_new, eta')."""
    bound = gershgorin_max(e)
    if bound * eta > 1.0:
        eta = 1.0 / bound
    phi = np.tril(e)
    phi[np.diag_indices_from(phi)] *= 0.5
    new = low - eta * tri_mm(low, np.ascontiguousarray(phi))
    return np.ascontiguousarray(np.tril(new)), eta


def refine_inverse_factor(low, target, iterations, tol):
    """Factor steps of size 1 (capped) towards L L^T = target^-1.

    Returns
    -------
    low : the new factor
    norm : ||L^T A L - I||_F at the returned factor when known, else at the last input
    """
    e = residual(low, target)
    norm = _frobenius(e)
    for _ in range(iterations):
        if norm < tol:
            break
        low, _ = factor_step(low, e, 1.0)
        e = residual(low, target)
        new_norm = _frobenius(e)
        if not np.isfinite(new_norm):
            raise CholeskyError("the factor step of T produced non-finite values")
        norm = new_norm
    return low, norm


def initial_factors(kzz, n_cov):
    """Sigma = SIGMA_INIT mean(diag K) I and T ~ (K + Sigma)^-1 by factor steps."""
    m = kzz.shape[0]
    scale = SIGMA_INIT * max(float(np.mean(np.diag(kzz))), 1e-12)
    sigma_sqrt = np.sqrt(scale) * np.eye(m)
    p = kzz + scale * np.eye(m)
    # I / lambda_max(P) has L^T P L - I in (-1, 0]: the factor steps grow T monotonically.
    bound = float(np.max(np.abs(p).sum(axis=1)))
    t_sqrt, _ = refine_inverse_factor(np.eye(m) / np.sqrt(bound), p, T_INIT_ITERATIONS, 1e-10)
    return (np.broadcast_to(sigma_sqrt, (n_cov, m, m)).copy(), np.broadcast_to(t_sqrt, (n_cov, m, m)).copy())


def ensure_initialised(kernel, state, kzz=None):
    """Set Sigma and T on first use (they depend on the kernel's scale)."""
    if state.sigma_sqrt is None:
        kzz = kernel(state.inducing) if kzz is None else kzz
        state.sigma_sqrt, state.t_sqrt = initial_factors(kzz, state.n_covariances)


# --- forward -----------------------------------------------------------------------
class _Tape:
    __slots__ = ("kzz", "kzx", "w", "w_kzx", "e", "t_kzx", "back_zz", "back_zx", "back_diag", "jitter")


def _lower_factors(state):
    # Only the lower triangles are parameters (finite differences also move the upper).
    return np.tril(state.sigma_sqrt), np.tril(state.t_sqrt)


def _sym(a):
    return 0.5 * (a + a.T)


def middle_matrices(kzz, state):
    """Per covariance: E_c = L_t^T P_c L_t - I and W_c = T P T - 2 T = L_t (E_c - I) L_t^T."""
    es, ws = [], []
    for low_s, low_t in zip(*_lower_factors(state)):
        p = kzz + gram(low_s)
        e = residual(low_t, p)
        inner = e.copy()
        inner.flat[:: inner.shape[0] + 1] -= 1.0
        w = tri_mm(low_t, np.ascontiguousarray(tri_mm(low_t, inner).T))  # L (E - I) L^T
        es.append(e)
        ws.append(_sym(w))
    return es, ws


def refine_t(kzz, state):
    """Factor steps of T towards (K + Sigma)^-1 for the current K, in place.

    Done at the start of a training evaluation rather than at the end of the natural step:
    Adam moves K after the natural step, and a T one Adam step stale loosens the bound.
    """
    low_s, low_t = _lower_factors(state)
    for c in range(low_t.shape[0]):
        p = kzz + gram(low_s[c])
        state.t_sqrt[c], _ = refine_inverse_factor(low_t[c], p, T_ITERATIONS, T_TOLERANCE)


def marginals(kernel, X, state, jitter, need_grad=True):
    """Latent marginals at the rows of X under the bound (eq. 19).

    Parameters
    ----------
    kernel : compiled kernel
    X : ndarray of shape (B, D)
    state : InverseFreeState
    jitter : float
        Unused: no kernel matrix is factorised.
    need_grad : bool

    Returns
    -------
    mean : ndarray of shape (B, P)
    var : ndarray of shape (B, C)
    tape : object for :func:`backward` and :func:`natural_step` (None without need_grad)
    """
    Z = state.inducing
    if need_grad:
        kzz, back_zz = kernel.vjp(Z)
        kzx, back_zx = kernel.vjp(Z, X)
        kdiag, back_diag = kernel.diag_vjp(X)
    else:
        kzz, kzx, kdiag = kernel(Z), kernel(Z, X), kernel.diag(X)
    ensure_initialised(kernel, state, kzz)
    if need_grad and state.refine_t:
        refine_t(kzz, state)
    es, ws = middle_matrices(kzz, state)
    mean = mm(kzx, state.q_mean, trans_a=True)
    w_kzx = [mm(w, kzx) for w in ws]
    var = np.column_stack([kdiag + np.einsum("ij,ij->j", kzx, wk) for wk in w_kzx])
    # The variance is that of a valid q(u) (it is >= 0); a tiny negative value is rounding.
    np.maximum(var, 0.0, out=var)
    if not need_grad:
        return mean, var, None
    tape = _Tape()
    tape.kzz, tape.kzx, tape.w, tape.w_kzx, tape.e = kzz, kzx, ws, w_kzx, es
    tape.t_kzx = [tri_mm(low, tri_mm(low, kzx, trans=True)) for low in state.t_sqrt]
    tape.back_zz, tape.back_zx, tape.back_diag = back_zz, back_zx, back_diag
    tape.jitter = jitter
    return mean, var, tape


def _outputs_per_cov(state):
    n_out, n_cov = state.q_mean.shape[1], state.sigma_sqrt.shape[0]
    return n_out if n_cov == 1 else 1


def _cov_part(kzz, w, e, low_s, low_t):
    """tr(W K) + tr(P T) - M - log|T| - log|Sigma| for one covariance (tr(P T) - M = tr E)."""
    return (
        float(np.sum(w * kzz))
        + float(np.trace(e))
        - 2.0 * float(np.sum(np.log(np.diag(low_t))))
        - 2.0 * float(np.sum(np.log(np.diag(low_s))))
    )


def kl_divergence(kernel, state, jitter, tape=None):
    """The KL bound of eq. 21 summed over outputs (an upper bound on the KL of q(u))."""
    kzz = kernel(state.inducing) if tape is None else tape.kzz
    ensure_initialised(kernel, state, kzz)
    if tape is None:
        es, ws = middle_matrices(kzz, state)
    else:
        es, ws = tape.e, tape.w
    k = _outputs_per_cov(state)
    cov = sum(_cov_part(kzz, w, e, ls, lt) for w, e, ls, lt in zip(ws, es, state.sigma_sqrt, state.t_sqrt))
    mean_part = float(np.sum(state.q_mean * mm(kzz, state.q_mean)))
    return 0.5 * (k * cov + mean_part)


# --- backward -------------------------------------------------------------------------
def _summed_var_adjoint(d_var, n_cov):
    return d_var.sum(axis=1, keepdims=True) if n_cov == 1 else d_var


def _weighted_gram(a, h):
    """a diag(h) a^T."""
    return mm(a * h, a, trans_b=True)


def backward(tape, state, d_mean, d_var, fields=("inducing",)):
    """Gradient of F(mean, var) - KL_b in the kernel hyperparameters, Z and the q fields.

    With h_c = dF/dvar, g = dF/dmean, W_h = K_zb diag(h) K_zb^T and k outputs per covariance:

        dF/dK_zb = mu g^T + 2 sum_c W_c K_zb diag(h_c)
        dF/dK    = sum_c [T W_h T - k/2 (T K T + T P T - T)] - 1/2 mu mu^T
        dF/dk_bb = sum_c h_c
        dF/dmu   = K_zb g - K mu
        dF/dL_s  = tril(2 G_s L_s) + k diag(1/L_s),  G_s = T W_h T - k/2 (T K T + T)
        dF/dL_t  = tril(2 G_t L_t) + k diag(1/L_t),
                   G_t = P T W_h + W_h T P - 2 W_h - k/2 (P T K + K T P) + k K - k/2 P
    """
    n_cov = state.sigma_sqrt.shape[0]
    k = _outputs_per_cov(state)
    h = _summed_var_adjoint(d_var, n_cov)
    kzz, kzx = tape.kzz, tape.kzx
    kzx_bar = mm(state.q_mean, d_mean, trans_b=True)
    kzz_bar = -0.5 * mm(state.q_mean, state.q_mean, trans_b=True)
    bars = {}
    sig_bars, t_bars = [], []
    for c in range(n_cov):
        kzx_bar += 2.0 * tape.w_kzx[c] * h[:, c]
        low_s, low_t = np.tril(state.sigma_sqrt[c]), np.tril(state.t_sqrt[c])
        t = gram(low_t)
        t_wh_t = _sym(_weighted_gram(tape.t_kzx[c], h[:, c]))
        # T K T + T P T - T = L (2 E + I - L^T Sigma L) L^T, with L^T P L = E + I.
        st = tri_mm(low_s, low_t, trans=True)  # L_s^T L_t
        inner = 2.0 * tape.e[c] - gram(st, trans=True)
        inner.flat[:: inner.shape[0] + 1] += 1.0
        tkt_tpt_t = _sym(tri_mm(low_t, np.ascontiguousarray(tri_mm(low_t, inner).T)))
        kzz_bar += t_wh_t - 0.5 * k * tkt_tpt_t
        if "sigma_sqrt" in fields:
            tkt = _sym(mm(t, mm(kzz, t)))
            g_s = t_wh_t - 0.5 * k * (tkt + t)
            sig_bars.append(np.tril(2.0 * mm(g_s, low_s)) + k * np.diag(1.0 / np.diag(low_s)))
        if "t_sqrt" in fields:
            p = kzz + gram(low_s)
            w_h = _sym(_weighted_gram(kzx, h[:, c]))
            ptw = mm(p, mm(t, w_h))
            ptk = mm(p, mm(t, kzz))
            g_t = ptw + ptw.T - 2.0 * w_h - 0.5 * k * (ptk + ptk.T) + k * kzz - 0.5 * k * p
            t_bars.append(np.tril(2.0 * mm(g_t, low_t)) + k * np.diag(1.0 / np.diag(low_t)))
    kzz_bar = _sym(kzz_bar)
    theta_zz, z_zz = tape.back_zz(kzz_bar)
    theta_zx, z_zx = tape.back_zx(kzx_bar)
    theta_d = tape.back_diag(h.sum(axis=1))
    bars["inducing"] = z_zz + z_zx
    if "q_mean" in fields:
        bars["q_mean"] = mm(kzx, d_mean) - mm(kzz, state.q_mean)
    if "sigma_sqrt" in fields:
        bars["sigma_sqrt"] = np.stack(sig_bars)
    if "t_sqrt" in fields:
        bars["t_sqrt"] = np.stack(t_bars)
    return theta_zz + theta_zx + theta_d, {name: bars[name] for name in fields}


# --- natural (product-only) step -----------------------------------------------------------
def natural_step(tape, state, d_mean, d_var, step):
    """Product-only steps on mu, Sigma and T from one minibatch evaluation (module docstring).

    Raises
    ------
    CholeskyError
        If a step produced non-finite values (the schedule then halves ``step``).
    """
    n_out = state.q_mean.shape[1]
    n_cov = state.sigma_sqrt.shape[0]
    k = _outputs_per_cov(state)
    # With a shared covariance the Sigma-optimum averages the outputs' adjoints.
    h = _summed_var_adjoint(d_var, n_cov) / k
    kzz, kzx = tape.kzz, tape.kzx
    new_mean = state.q_mean.copy()
    new_sig = np.empty_like(state.sigma_sqrt)
    new_t = np.empty_like(state.t_sqrt)
    outputs_of = covariance_of_output(n_out, n_cov)
    grad_mean = mm(kzx, d_mean) - mm(kzz, state.q_mean)
    for c in range(n_cov):
        low_s, low_t = np.tril(state.sigma_sqrt[c]), np.tril(state.t_sqrt[c])
        t = gram(low_t)
        # Omega = T (K - 2 W_h) T + T, the Sigma-optimum's inverse for this T and batch.
        omega = _sym(mm(t, mm(kzz, t)) - 2.0 * _weighted_gram(tape.t_kzx[c], h[:, c]) + t)
        e_s = residual(low_s, omega)
        g_s = max(gershgorin_max(e_s), 0.0)
        # mu: preconditioned by T Sigma T (old Sigma), capped by 1 / (1 + lambda_max bound).
        cols = np.flatnonzero(outputs_of == c)
        rho = min(step, 1.0 / (1.0 + g_s))
        direction = mm(t, tri_mm(low_s, tri_mm(low_s, mm(t, grad_mean[:, cols]), trans=True)))
        new_mean[:, cols] = state.q_mean[:, cols] + rho * direction
        new_sig[c], _ = factor_step(low_s, e_s, step)
        # T follows the new Sigma (and Adam's new K) at the next training evaluation.
        new_t[c] = low_t
    for a in (new_mean, new_sig, new_t):
        if not np.all(np.isfinite(a)):
            raise CholeskyError("the product-only natural step produced non-finite values")
    return InverseFreeState(state.inducing, new_mean, new_sig, new_t, state.n_covariances, refine_t=True)


# --- prediction and diagnostics --------------------------------------------------------
def make_predictor(kernel, state, jitter):
    """Freeze the fitted bound: mean K(x, Z) mu, variance k_xx + k_x^T W_c k_x (eq. 19).

    Returns a :class:`skgp_sparse.bases.coupled.CoupledPredictor` (the same two arrays:
    ``mean_weights`` = mu, ``middle`` = W_c), so prediction too is products only.
    """
    kzz = kernel(state.inducing)
    ensure_initialised(kernel, state, kzz)
    _, ws = middle_matrices(kzz, state)
    return CoupledPredictor(state.inducing.copy(), state.q_mean.copy(), np.stack(ws))


def diagnostics(kernel, state, jitter):
    """Quality of T, products only (worst over the covariances).

    Returns
    -------
    dict
        ``t_residual``: ||(K + Sigma) T - I||_F; ``t_residual_factor``: ||L_t^T (K + Sigma)
        L_t - I||_F, the residual the T steps reduce (same eigenvalues, but not amplified
        by the conditioning of L_t).
    """
    kzz = kernel(state.inducing)
    ensure_initialised(kernel, state, kzz)
    worst, worst_factor = 0.0, 0.0
    for low_s, low_t in zip(*_lower_factors(state)):
        p = kzz + gram(low_s)
        pt = mm(p, gram(low_t))
        pt.flat[:: pt.shape[0] + 1] -= 1.0
        worst = max(worst, _frobenius(pt))
        worst_factor = max(worst_factor, _frobenius(residual(low_t, p)))
    return {"t_residual": worst, "t_residual_factor": worst_factor}
