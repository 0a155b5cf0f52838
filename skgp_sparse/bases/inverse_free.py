"""The inverse-free basis: the improved bound of van der Wilk, Artemev and Hensman, in the
likelihood parameterisation, trained by matrix products only, with the training recipe of
its successor (Cortinovis, Aitchison, Eleftheriadis and van der Wilk, AISTATS 2026).

The bound
---------
q(u) is written through pseudo-observations (the likelihood parameterisation): with
K = K(Z, Z), a site covariance Sigma (SPD) and P = K + Sigma, the latent function at x
has mean k_x^T mu and variance k_xx - k_x^T P^-1 k_x. The inverse P^-1 is replaced by a
free SPD matrix T and the bound

    var_x = k_xx + k_x^T W k_x,     W = T P T - 2 T                       (paper eq. 19)
    KL_b  = 1/2 [ tr(W K) + mu^T K mu + tr(P T) - M - log|T| - log|Sigma| ]   (eq. 21)
    L     = sum_n E_{N(mean_n, var_n)} log p(y_n | f_n) - KL_b             (eq. 20)

is a lower bound on the ELBO for every SPD T and every mu, with equality at T = P^-1
(then it is the usual SVGP ELBO of q(u) = N(K mu, K - K P^-1 K)). Sigma = L_s L_s^T and
T = L_t L_t^T are held as lower triangular factors, so both log-determinants are sums of
log-diagonals and no kernel matrix is ever factorised, inverted or solved against: a
training step and a prediction are matrix products only (tests/test_inverse_free.py
proves it by making every decomposition raise).

The mean, preconditioned through T
----------------------------------
By default the free mean parameter is not mu but pseudo-targets m~ (``q_mean``), with

    mu = (2 T - T P T) m~ = -W m~ ~ P^-1 m~,

one Newton-Schulz step from T towards P^-1 m~. The bound holds for any mu, so for any
(m~, T). With T = P^-1 the latent mean k_x^T P^-1 m~ is the GP posterior mean given
targets m~ at Z observed with noise Sigma: it moves with its inducing inputs when Adam
moves Z, and it does not scale with the kernel's amplitude in the directions the data
inform (Sigma << K there). With mu itself held fixed, an Adam step on the kernel's
variance scales the whole mean and a step on Z drags the coefficients mu (entries of
K^-1 m_u, large and of alternating sign) to new places, which cost accuracy against the
coupled basis with learned Z (docs/constants.md). ``preconditioned_mean=False`` keeps the
2022 mean.

The price is that the mean depends on T: with E = L_t^T P L_t - I,
mu - P^-1 m~ = -L_t E^2 (I + E)^-1 L_t^T m~, second order in E but amplified by the
conditioning of L_t (P has eigenvalues down to those of Sigma). So T must follow K and
Sigma closely, which the inner loop below does.

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
L^T grad L = -E/2, whose steepest lower Y is -eta Phi(E). The step size is capped by an
upper bound g >= lambda_max(E), the smaller of Gershgorin's and ||E||_F:
eta = min(eta, 1/g), so eta E_ii <= 1 and every diagonal at least halves rather than
changes sign. (After an Adam step E is dominated by a few directions, where the
Frobenius norm is the tighter bound and the inner loop below takes fewer factor steps;
docs/constants.md.)

*T: an inner loop.* In T the bound is maximised at T = P^-1 for any data (the derivative
(P T - I) A_d + A_d (T P - I) + 1/2 (T^-1 - P), A_d = K/2 - W_h, vanishes there). So T
is moved only by the factor step with A = P (the natural gradient of the
-1/2 tr(P T) + 1/2 log|T| part of eq. 21, whose maximiser P^-1 is shared with the whole
T-problem); the data-weighted part would only rescale the step. A state made by
:func:`natural_step` treats T as a function of K + Sigma: every evaluation of it first
runs the factor step against the current K + Sigma until ||L_t^T P L_t - I||_F <
``t_tol``, at most ``t_max_iter`` times (:func:`refine_t`). Once there, so at the start
of each training step, the loop follows both the natural step's new Sigma and Adam's new
K; on diamonds at M = 256 that takes about 3 factor steps per training step (an Adam
step moves some eigenvalues of L_t^T P L_t by a factor of 2: in the directions where
Sigma is small, P is K's nearly singular part). The bound is valid for every T, so the
loop never invalidates it.

*Sigma.* With T fixed the bound in Sigma is tr(Sigma G) + 1/2 log|Sigma| with
G = T W_h T - 1/2 (T K T + T), W_h = K_zb diag(h) K_zb^T (h = dF/dvar): a Gaussian
entropy plus a linear term, maximised at Sigma^-1 = Omega = T (K - 2 W_h) T + T. The
factor step with A = Omega is exactly its natural-gradient step, with the schedule's
step size (1 then 1/t to ``natural_step_size`` for a Gaussian likelihood, a warm-up
otherwise) capped as above.

*The mean.* The natural gradient in mu needs (K + K Sigma^-1 K)^-1 = K^-1 - P^-1, a K^-1
that no product gives. We precondition instead with Pi = T Sigma T ~ P^-1 Sigma P^-1
= (K^-1 - P^-1) K P^-1: the natural gradient damped by K P^-1, whose eigenvalues lie
in (0, 1) (near 1 where the data dominate Sigma, small in prior-dominated directions,
where mu matters little). With the Hessian H = K - 2 W_h of a Gaussian likelihood,
T H T = Omega - T, so the eigenvalues of Pi H are at most 1 + lambda_max(E_Sigma) with
E_Sigma = L_s^T Omega L_s - I; the step mu' = mu + rho Pi (K_zb g - K mu) with
rho = min(step, 1/(1 + g_Sigma)) therefore never overshoots the quadratic's maximum.
(In m~ = P mu this is the step Sigma (2 T - T P T) dF/dmu: Sigma-preconditioned, the
damped natural gradient of the pseudo-targets.) With the preconditioned mean the new mu'
is stored as the pseudo-targets that give it under the new Sigma, m~' = (K + Sigma') mu',
so the step is that of the 2022 parameterisation, and only Adam's moves of Z and the
hyperparameters see the difference.

All three steps use the same minibatch evaluation as the Adam step. Their fixed points
are T = P^-1 and the stationary points of the SVGP ELBO in (mu, Sigma) (at T = P^-1 the
T-derivative vanishes, so the Sigma- and mu-derivatives are those of the exact ELBO).
``diagnostics`` reports ||(K + Sigma) T - I||_F, the quality of T, once per epoch (after
the epoch's last Adam step, before the loop has followed it).

*Z.* :func:`adam_field_scales` tells the training loop to move the inducing inputs at
``inducing_rate_scale`` (0.1) times Adam's learning rate, after
``inducing_warmup_steps`` (0) steps in which they stay put: the 2026 recipe's separate,
slower optimiser for Z (its warm-up gained nothing here; docs/constants.md).

Settings (``init_state`` options, stored on the state as :class:`InverseFreeSettings`,
so they pickle with a fitted model): ``preconditioned_mean``, ``t_max_iter``, ``t_tol``,
``sigma_init``, ``inducing_warmup_steps``, ``inducing_rate_scale``.

Array libraries
---------------
The state's arrays and X may also be arrays of another library (CuPy, PyTorch,
array_api_strict; see :mod:`skgp_sparse.backend`): as in the coupled basis, every function
is written once over the arrays' namespace, and the primitives of :mod:`skgp_sparse.linalg`
keep numpy on its BLAS calls and numba passes (in place where that saves an M x B
temporary) while the other namespaces take the same formulas in Array API operations,
answering in the inputs' namespace and device, still with products only. The step-size
caps stay on the device (0-d arrays, numpy scalars for numpy); the host reads one float
per factor step of the inner loop (its stopping test) and a few booleans (the sign of the
variance adjoints, the finiteness of a natural step). tests/test_backend_inverse_free.py
checks them against numpy.
"""

import math
from dataclasses import dataclass, field

import numpy as np

from .contract import Basis
from .coupled import CoupledPredictor
from .state import VariationalState
from .toolkit import blocks, cross_and_diagonal, join_output_columns, output_columns, tape_var_adjoint
from .. import backend as be
from ..linalg import (
    CholeskyError,
    add_scaled,
    add_to_diagonal,
    column_dots,
    copy_array,
    diagonal,
    eye,
    gram,
    mm,
    pending_flags,
    same_values,
    trace,
    tri_mm,
    tril_halved_diagonal,
    weighted_gram,
)

#: Fields of the state that Adam moves when the inducing inputs are learned.
INDUCING_FIELDS = ("inducing",)
#: Fields that Adam always moves (none: q and T are moved by product-only steps).
ADAM_FIELDS = ()
#: Fields that Adam moves instead of the product-only steps (variational_optimizer="adam").
VARIATIONAL_FIELDS = ("q_mean", "sigma_sqrt", "t_sqrt")

#: Defaults of the init_state options (see :class:`InverseFreeSettings`), chosen on
#: diamonds (docs/constants.md). Plain constants: nothing reassigns them; a model's own
#: values live on its state.
T_MAX_ITER = 50
T_TOL = 1e-3
SIGMA_INIT = 0.01
INDUCING_WARMUP_STEPS = 0
INDUCING_RATE_SCALE = 0.1
#: Factor steps of T at initialisation, from T = I / (Gershgorin bound of lambda_max(P)),
#: and the residual at which they stop: from there the steps first grow T by a factor of
#: about 2.25 per step, then converge quadratically, so 200 covers a condition number of
#: 1e60.
T_INIT_MAX_ITER = 200
T_INIT_TOL = 1e-10


@dataclass(frozen=True)
class InverseFreeSettings:
    """How the inverse-free basis trains (stored on the state, so it pickles with a model).

    Attributes
    ----------
    preconditioned_mean : bool
        Hold the mean through T: the free parameter is m~ (``q_mean``) and the latent
        mean is K(x, Z) mu with mu = (2 T - T P T) m~ (~ P^-1 m~: m~ are pseudo-targets
        at Z). False: ``q_mean`` is mu itself (the 2022 parameterisation).
    t_max_iter : int
        Most factor steps of T towards (K + Sigma)^-1 at the start of each evaluation of a
        state made by a natural step (the inner loop, :func:`refine_t`).
    t_tol : float
        They stop once ||L_t^T (K + Sigma) L_t - I||_F < t_tol.
    sigma_init : float
        Initial Sigma, times the mean prior variance at the inducing inputs, times I.
    inducing_warmup_steps : int
        Training steps during which the inducing inputs stay put (see
        :func:`adam_field_scales`).
    inducing_rate_scale : float
        After them, the multiplier of Adam's learning rate for the inducing inputs.
    """

    preconditioned_mean: bool = True
    t_max_iter: int = T_MAX_ITER
    t_tol: float = T_TOL
    sigma_init: float = SIGMA_INIT
    inducing_warmup_steps: int = INDUCING_WARMUP_STEPS
    inducing_rate_scale: float = INDUCING_RATE_SCALE


#: The settings equivalent to states pickled before settings were stored on the state.
LEGACY_SETTINGS = InverseFreeSettings(preconditioned_mean=False, t_max_iter=4, inducing_rate_scale=1.0)


@dataclass
class InverseFreeState(VariationalState):
    """Variational parameters of the inverse-free basis (arrays as :class:`VariationalState`
    says).

    Attributes
    ----------
    inducing : ndarray of shape (M, D)
        Inducing inputs Z.
    q_mean : ndarray of shape (M, P)
        The mean parameter, one column per output: the pseudo-targets m~ with
        ``settings.preconditioned_mean`` (latent mean K(x, Z) (2 T - T P T) m~), else mu
        (latent mean K(x, Z) mu).
    sigma_sqrt : ndarray of shape (C, M, M) or None
        Lower factors of the site covariances Sigma_c (None until first used with a kernel).
    t_sqrt : ndarray of shape (C, M, M) or None
        Lower factors of the auxiliary T_c ~ (K + Sigma_c)^-1 (None until first used).
    n_covariances : int
    refine_t : bool
        Whether T is a function of K + Sigma rather than a free parameter: every
        evaluation then first refines it towards (K + Sigma)^-1 for the current K (set on
        states made by :func:`natural_step`; with Adam on T it stays False).
    settings : InverseFreeSettings
    """

    inducing: np.ndarray
    q_mean: np.ndarray
    sigma_sqrt: np.ndarray = None
    t_sqrt: np.ndarray = None
    n_covariances: int = 1
    refine_t: bool = False
    settings: InverseFreeSettings = field(default_factory=InverseFreeSettings)

    def __setstate__(self, saved):
        # A state pickled before the settings existed holds mu itself and was trained with
        # at most 4 factor steps of T per evaluation and Z at Adam's full rate.
        saved.setdefault("settings", LEGACY_SETTINGS)
        self.__dict__.update(saved)


def latent_shape(state):
    """(P, C) of the state (its factors are made at the first evaluation)."""
    return state.q_mean.shape[1], state.n_covariances


def init_state(points, n_outputs, n_covariances, n_orthogonal=0, **options):
    """The starting state: zero mean; Sigma and T are set on first use with a kernel.

    Parameters
    ----------
    points : ndarray of shape (M, D)
        Initial inducing inputs: numpy (the state is float64) or an array of another
        library (the state's arrays are then of that library, on its device, in the
        points' floating dtype).
    n_outputs, n_covariances : int
    n_orthogonal : int
        Must be 0 (no second inducing set).
    **options
        Fields of :class:`InverseFreeSettings` (``preconditioned_mean``, ``t_max_iter``,
        ``t_tol``, ``sigma_init``, ``inducing_warmup_steps``, ``inducing_rate_scale``);
        the others keep their defaults.
    """
    if n_orthogonal != 0:
        raise ValueError("the inverse_free basis has no orthogonal inducing set; use n_orthogonal=0")
    settings = InverseFreeSettings(**options)
    if (
        settings.t_max_iter < 0
        or not settings.t_tol >= 0
        or not settings.sigma_init > 0
        or settings.inducing_warmup_steps < 0
        or not settings.inducing_rate_scale >= 0
    ):
        raise ValueError(f"invalid inverse_free settings: {settings}")
    m = points.shape[0]
    # The inputs' library, on their device, in their floating dtype (numpy: float64).
    xp, Z = be.owned_float_copy(points)
    q_mean = xp.zeros((m, n_outputs), dtype=Z.dtype, device=be.device_of(Z))
    return InverseFreeState(Z, q_mean, n_covariances=n_covariances, settings=settings)


def adam_field_scales(state, step):
    """Multipliers of Adam's learning rate per state field for one training step.

    The contract with the training loop: for the training step numbered ``step`` (0 for
    the first step the model ever took, counting earlier fits of a warm start), the loop
    passes this dict as ``rate_scales`` to :meth:`skgp_sparse.optim.Adam.step`, which
    multiplies the learning rate of each field named here by its value; a field with 0
    is left where it is, and its Adam moments and step count are not advanced (it then
    starts as a fresh Adam when it first moves). Fields not named keep the plain rate;
    named fields that Adam does not move (Z with ``learn_inducing=False``) are ignored.

    Here: the inducing inputs wait ``inducing_warmup_steps`` steps while q and T settle,
    then move at ``inducing_rate_scale`` times the learning rate.

    Parameters
    ----------
    state : InverseFreeState
    step : int

    Returns
    -------
    dict of str -> float
    """
    settings = state.settings
    if step < settings.inducing_warmup_steps:
        return {"inducing": 0.0}
    return {"inducing": float(settings.inducing_rate_scale)}


# --- the product-only factor step -----------------------------------------------------
def residual(low, target):
    """E = L^T A L - I (symmetric), by two triangular products."""
    xp = be.namespace(low, target)
    left = tri_mm(low, target, trans=True)  # L^T A
    e = tri_mm(low, xp.matrix_transpose(left), trans=True)  # L^T (A L)
    return add_to_diagonal(0.5 * (e + xp.matrix_transpose(e)), -1.0, xp)


def _frobenius(a):
    """||a||_F as a Python float (one read from a device)."""
    xp = be.namespace(a)
    return float(xp.sqrt(xp.sum(a * a)))


def eigenvalue_bound(e):
    """An upper bound on the largest eigenvalue of the symmetric e, products-free.

    The smaller of Gershgorin's bound (max row sum) and the Frobenius norm: the first is
    tight for a diagonally dominant e, the second when one eigenvalue dominates, as after
    an Adam step that moved K along one near-null direction of K + Sigma.

    Returns
    -------
    0-d array of ``e``'s namespace (a numpy scalar for numpy), left on the device: the
    callers only cap step sizes with it.
    """
    xp = be.namespace(e)
    diag = diagonal(e, xp)
    off = xp.sum(xp.abs(e), axis=1) - xp.abs(diag)
    return xp.minimum(xp.max(diag + off), xp.sqrt(xp.sum(e * e)))


def factor_step(low, e, eta):
    """L (I - eta' Phi(E)) with eta' = min(eta, 1 / eigenvalue_bound(E)); returns (L_new, eta').

    eta' is a 0-d array on ``e``'s device (the cap is decided there, no read to the host).
    """
    xp = be.namespace(low, e)
    bound = eigenvalue_bound(e)
    device = be.device_of(e)
    # A number fills a 0-d array on the device (asarray would copy it from the host).
    eta = xp.asarray(eta, dtype=e.dtype, device=device) if be.on_device(eta) else \
        xp.full((), eta, dtype=e.dtype, device=device)
    over = bound * eta > 1.0
    # 1 / bound where the cap applies (bound > 0 there); the inner where keeps a zero or
    # negative bound out of the division where it does not.
    eta = xp.where(over, 1.0 / xp.where(over, bound, xp.ones_like(bound)), eta)
    return xp.tril(low - eta * tri_mm(low, tril_halved_diagonal(e))), eta


def refine_inverse_factor(low, target, max_iter, tol):
    """Factor steps of size 1 (capped) towards L L^T = target^-1: the inner loop on T.

    Stops as soon as ||L^T A L - I||_F < tol (checked before every step, so a factor
    that already meets it is returned unchanged), or after ``max_iter`` steps.

    Returns
    -------
    low : ndarray
        The new factor.
    norm : float
        ||L^T A L - I||_F at the returned factor.
    n_steps : int
        Factor steps taken.

    Raises
    ------
    CholeskyError
        If a step produced non-finite values.
    """
    low, _, norm, n_steps = _refine(low, target, max_iter, tol)
    return low, norm, n_steps


def _refine(low, target, max_iter, tol):
    """:func:`refine_inverse_factor` that also returns E = L^T A L - I at the result.

    In float32 ||E||_F meets a rounding floor that grows with m and cond(A)
    (docs/constants.md) and can lie above ``tol``: there a step that does not lower it
    ends the loop, with the better factor, instead of spending every remaining step on
    rounding.
    """
    e = residual(low, target)
    norm = _frobenius(e)
    n_steps = 0
    at_rounding_floor = target.dtype == be.namespace(target).float32
    while norm >= tol and n_steps < max_iter:
        new_low, _ = factor_step(low, e, 1.0)
        n_steps += 1
        new_e = residual(new_low, target)
        new_norm = _frobenius(new_e)
        if not math.isfinite(new_norm):
            raise CholeskyError("the factor step of T produced non-finite values")
        if at_rounding_floor and new_norm >= norm:
            break
        low, e, norm = new_low, new_e, new_norm
    return low, e, norm, n_steps


def initial_factors(kzz, n_cov, sigma_init=SIGMA_INIT):
    """Sigma = sigma_init mean(diag K) I and T ~ (K + Sigma)^-1 by factor steps."""
    m = kzz.shape[0]
    xp = be.namespace(kzz)
    # The scale and the bound stay on the device (0-d arrays).
    scale = sigma_init * xp.clip(xp.mean(diagonal(kzz, xp)), 1e-12, None)
    identity = eye(m, kzz)
    p = kzz + scale * identity
    # I / lambda_max(P) has L^T P L - I in (-1, 0]: the factor steps grow T monotonically.
    bound = xp.max(xp.sum(xp.abs(p), axis=1))
    # In float32 the residual cannot fall to T_INIT_TOL: stop at a few units of its
    # rounding instead of running all T_INIT_MAX_ITER steps (float64: T_INIT_TOL).
    tol = max(T_INIT_TOL, 64.0 * float(xp.finfo(p.dtype).eps))
    t_sqrt, _, _ = refine_inverse_factor(identity / xp.sqrt(bound), p, T_INIT_MAX_ITER, tol)
    return xp.stack([xp.sqrt(scale) * identity] * n_cov), xp.stack([t_sqrt] * n_cov)


def ensure_initialised(kernel, state, kzz=None):
    """Set Sigma and T on first use (they depend on the kernel's scale)."""
    if state.sigma_sqrt is None:
        kzz = kernel.kuu(state.inducing) if kzz is None else kzz
        state.sigma_sqrt, state.t_sqrt = initial_factors(kzz, state.n_covariances, state.settings.sigma_init)


# --- forward -----------------------------------------------------------------------
class _Tape:
    """One training evaluation: kernel matrices, the bound's middle matrices and caches
    shared by :func:`backward` and :func:`natural_step` (same state, same batch)."""

    __slots__ = ("kzz", "kzx", "p", "w", "w_kzx", "e", "mu", "low_t", "back_zz", "back_zx", "back_diag", "jitter",
                 "_t", "_tkt", "_h_key", "_data", "_t_data_t", "d_var_key", "h_sum")

    def t(self, c):
        """T_c = L_t L_t^T."""
        if self._t is None:
            self._t = [gram(low) for low in blocks(self.low_t)]
        return self._t[c]

    def tkt(self, c):
        """T_c K T_c."""
        if self._tkt is None:
            self._tkt = [None] * self.low_t.shape[0]
        if self._tkt[c] is None:
            self._tkt[c] = _sym(mm(self.t(c), mm(self.kzz, self.t(c))))
        return self._tkt[c]

    def data_grams(self, h):
        """Per covariance, W_h = K_zb diag(h_c) K_zb^T and T_c W_h T_c (cached for this h)."""
        if self._h_key is None or not (self._h_key is h or same_values(self._h_key, h)):
            self._data = [weighted_gram(self.kzx, h[:, c]) for c in range(h.shape[1])]
            self._t_data_t = [_sym(mm(self.t(c), mm(d, self.t(c)))) for c, d in enumerate(self._data)]
            # The array itself (of tape_var_adjoint, never written): the next call with the
            # same adjoints passes the same array.
            self._h_key = h
        return self._data, self._t_data_t


def _lower_factors(state):
    # Only the lower triangles are parameters (finite differences also move the upper).
    xp = be.namespace(state.sigma_sqrt, state.t_sqrt)
    return xp.tril(state.sigma_sqrt), xp.tril(state.t_sqrt)


def _sym(a):
    return 0.5 * (a + a.T)


def _columns(state, c):
    """The outputs (columns of ``q_mean``) of covariance c (:func:`.toolkit.output_columns`)."""
    return output_columns(state.sigma_sqrt.shape[0], c)


def _diagonal_matrix(v, like):
    """diag(v) in the namespace, dtype and device of ``like``."""
    return eye(v.shape[0], like) * v


def middle_matrices(kzz, state):
    """Per covariance: E_c = L_t^T P_c L_t - I and W_c = T P T - 2 T = L_t (E_c - I) L_t^T."""
    _, es, ws = _middle(kzz, state)
    return es, ws


def _middle(kzz, state, known=None):
    """P_c, E_c and W_c per covariance; ``known``: (P_c, E_c) already computed for these factors."""
    xp = be.namespace(kzz, state.t_sqrt)
    ps, es, ws = [], [], []
    low_s, low_t = _lower_factors(state)
    for c, (ls, lt) in enumerate(zip(blocks(low_s), blocks(low_t))):
        if known is None:
            p = kzz + gram(ls)
            e = residual(lt, p)
        else:
            p, e = known[c]
        w = tri_mm(lt, xp.matrix_transpose(tri_mm(lt, add_to_diagonal(e, -1.0, xp))))  # L (E - I) L^T
        ps.append(p)
        es.append(e)
        ws.append(_sym(w))
    return ps, es, ws


def mean_weights(state, ws):
    """mu, the weights of the latent mean K(x, Z) mu, from the state and its W_c.

    Preconditioned: mu = (2 T_c - T_c P_c T_c) m~ = -W_c m~ for the outputs of covariance
    c (one Newton-Schulz step from T_c towards P_c^-1 m~, exact to second order in the
    error of T_c). Otherwise ``q_mean`` itself.
    """
    if not state.settings.preconditioned_mean:
        return state.q_mean
    xp = be.namespace(state.q_mean)
    return join_output_columns([-mm(w, state.q_mean[:, _columns(state, c)]) for c, w in enumerate(ws)], xp)


def refine_t(kzz, state):
    """The inner loop on T: factor steps towards (K + Sigma)^-1 for the current K, in place.

    Run at the start of every evaluation of a state with ``refine_t`` (not at the end of
    the natural step): the natural step moves Sigma and then Adam moves K, and one loop
    follows both. The bound, and the preconditioned mean above all, need T at the
    current K + Sigma.

    Returns
    -------
    int
        Factor steps taken (summed over the covariances).
    """
    return _refine_state(kzz, state)[1]


def _refine_state(kzz, state):
    """:func:`refine_t`, also returning (P_c, E_c) at the new factors."""
    low_s, low_t = _lower_factors(state)
    settings = state.settings
    xp = be.namespace(kzz, low_t)
    known, lows, total = [], [], 0
    for ls, lt in zip(blocks(low_s), blocks(low_t)):
        p = kzz + gram(ls)
        low, e, _, n_steps = _refine(lt, p, settings.t_max_iter, settings.t_tol)
        known.append((p, e))
        lows.append(low)
        total += n_steps
    # A new array rather than writes into the old one: the state's T changes in place
    # for its holders all the same.
    state.t_sqrt = xp.stack(lows)
    return known, total


def marginals(kernel, X, state, jitter, need_grad=True):
    """Latent marginals at the rows of X under the bound (eq. 19): the contract's
    :meth:`Basis.marginals <skgp_sparse.bases.contract.Basis.marginals>` (``jitter`` is unused: no kernel matrix is factorised).

    Notes
    -----
    With ``state.refine_t`` (a state made by a natural step) T is first brought to the
    settings' tolerance against the current K + Sigma, in place (:func:`refine_t`): T is
    then a function of K + Sigma, and every evaluation sees the same one.
    """
    Z = state.inducing
    kzz, back_zz = kernel.kuu_vjp(Z) if need_grad else (kernel.kuu(Z), None)
    kzx, back_zx, kdiag, back_diag = cross_and_diagonal(kernel, Z, X, need_grad)
    ensure_initialised(kernel, state, kzz)
    known = _refine_state(kzz, state)[0] if state.refine_t else None
    ps, es, ws = _middle(kzz, state, known)
    mu = mean_weights(state, ws)
    mean = mm(kzx, mu, trans_a=True)
    w_kzx = [mm(w, kzx) for w in ws]
    xp = be.namespace(kzx)
    # The variance is that of a valid q(u) (it is >= 0); a tiny negative value is rounding.
    var = xp.clip(xp.stack([kdiag + column_dots(kzx, wk) for wk in w_kzx], axis=1), 0.0, None)
    if not need_grad:
        return mean, var, None
    tape = _Tape()
    tape.kzz, tape.kzx, tape.p, tape.w, tape.w_kzx, tape.e, tape.mu = kzz, kzx, ps, ws, w_kzx, es, mu
    tape.low_t = xp.tril(state.t_sqrt)
    tape._t = tape._tkt = tape._h_key = tape._data = tape._t_data_t = None
    tape.back_zz, tape.back_zx, tape.back_diag = back_zz, back_zx, back_diag
    tape.jitter = jitter
    return mean, var, tape


def _outputs_per_cov(state):
    n_out, n_cov = state.q_mean.shape[1], state.sigma_sqrt.shape[0]
    return n_out if n_cov == 1 else 1


def _cov_part(kzz, w, e, low_s, low_t):
    """tr(W K) + tr(P T) - M - log|T| - log|Sigma| for one covariance (tr(P T) - M = tr E).

    A 0-d array of the namespace (a numpy scalar for numpy; no read from a device).
    """
    xp = be.namespace(kzz, w)
    return (
        xp.sum(w * kzz)
        + trace(e, xp)
        - 2.0 * xp.sum(xp.log(diagonal(low_t, xp)))
        - 2.0 * xp.sum(xp.log(diagonal(low_s, xp)))
    )


def kl_divergence(kernel, state, jitter, tape=None):
    """The KL bound of eq. 21 summed over outputs (an upper bound on the KL of q(u)).

    A 0-d array of the state's namespace (a numpy float64, a float, for numpy states).
    """
    kzz = kernel.kuu(state.inducing) if tape is None else tape.kzz
    ensure_initialised(kernel, state, kzz)
    if tape is None:
        known = _refine_state(kzz, state)[0] if state.refine_t else None
        _, es, ws = _middle(kzz, state, known)
        mu = mean_weights(state, ws)
    else:
        es, ws, mu = tape.e, tape.w, tape.mu
    k = _outputs_per_cov(state)
    low_s, low_t = _lower_factors(state)
    xp = be.namespace(kzz, mu)
    parts = [_cov_part(kzz, w, e, ls, lt) for w, e, ls, lt in zip(ws, es, blocks(low_s), blocks(low_t))]
    cov = sum(parts[1:], parts[0])
    return 0.5 * (k * cov + xp.sum(mu * mm(kzz, mu)))


# --- backward -------------------------------------------------------------------------
def backward(tape, state, d_mean, d_var, fields=("inducing",)):
    """Gradient of F(mean, var) - KL_b in the kernel hyperparameters, Z and the q fields.

    With h_c = dF/dvar, g = dF/dmean, W_h = K_zb diag(h) K_zb^T, k outputs per covariance,
    mu the mean weights and mu_bar = K_zb g - K mu the derivative in mu:

        dF/dK_zb = mu g^T + 2 sum_c W_c K_zb diag(h_c)
        dF/dk_bb = sum_c h_c

    and every derivative through W_c = T P T - 2 T follows from its adjoint
    A_c = W_h - R_c, where R_c = sym(mu_bar m~^T) over the outputs of covariance c when the
    mean is preconditioned (mu = -W m~; R_c = 0 otherwise):

        dF/dK    = sum_c [T A T - k/2 (T K T + T P T - T)] - 1/2 mu mu^T
        dF/dmu   = mu_bar;     dF/dm~ = -W_c mu_bar (preconditioned)
        dF/dL_s  = tril(2 G_s L_s) + k diag(1/L_s),  G_s = T A T - k/2 (T K T + T)
        dF/dL_t  = tril(2 G_t L_t) + k diag(1/L_t),
                   G_t = P T A + A T P - 2 A - k/2 (P T K + K T P) + k K - k/2 P
    """
    xp = be.namespace(tape.kzx, d_mean)
    n_cov = state.sigma_sqrt.shape[0]
    k = _outputs_per_cov(state)
    h = tape_var_adjoint(tape, d_var, n_cov)
    kzz, kzx, mu = tape.kzz, tape.kzx, tape.mu
    preconditioned = state.settings.preconditioned_mean
    mu_bar = mm(kzx, d_mean) - mm(kzz, mu)
    # A fresh (M, B) array that add_scaled may overwrite (no M x B temporary per covariance).
    kzx_bar = mm(mu, d_mean, trans_b=True)
    kzz_bar = -0.5 * mm(mu, mu, trans_b=True)
    sig_bars, t_bars, mean_bars = [], [], []
    data, t_data_t = tape.data_grams(h)
    low_s_all = xp.tril(state.sigma_sqrt)
    for c in range(n_cov):
        kzx_bar = add_scaled(kzx_bar, tape.w_kzx[c], h[:, c])
        low_s, low_t = low_s_all[c, ...], tape.low_t[c, ...]
        t = tape.t(c)
        t_wh_t = t_data_t[c]
        r = None
        if preconditioned:
            cols = _columns(state, c)
            mean_bars.append(-mm(tape.w[c], mu_bar[:, cols]))
            r = _sym(mm(mu_bar[:, cols], state.q_mean[:, cols], trans_b=True))
            # T R T = sym((T mu_bar)(T m~)^T): rank 2P, products with P columns only.
            t_wh_t = t_wh_t - _sym(mm(mm(t, mu_bar[:, cols]), mm(t, state.q_mean[:, cols]), trans_b=True))
        # T K T + T P T - T = L (2 E + I - L^T Sigma L) L^T, with L^T P L = E + I.
        st = tri_mm(low_s, low_t, trans=True)  # L_s^T L_t
        inner = add_to_diagonal(2.0 * tape.e[c] - gram(st, trans=True), 1.0, xp)
        tkt_tpt_t = _sym(tri_mm(low_t, xp.matrix_transpose(tri_mm(low_t, inner))))
        kzz_bar = kzz_bar + (t_wh_t - 0.5 * k * tkt_tpt_t)
        if "sigma_sqrt" in fields:
            g_s = t_wh_t - 0.5 * k * (tape.tkt(c) + t)
            sig_bars.append(_factor_gradient(g_s, low_s, k))
        if "t_sqrt" in fields:
            p = tape.p[c]
            adj = data[c] if r is None else data[c] - r
            ptw = mm(p, mm(t, adj))
            ptk = mm(p, mm(t, kzz))
            g_t = ptw + ptw.T - 2.0 * adj - 0.5 * k * (ptk + ptk.T) + k * kzz - 0.5 * k * p
            t_bars.append(_factor_gradient(g_t, low_t, k))
    kzz_bar = _sym(kzz_bar)
    theta_zz, z_zz = tape.back_zz(kzz_bar)
    theta_zx, z_zx = tape.back_zx(kzx_bar)
    theta_d = tape.back_diag(xp.sum(h, axis=1))
    bars = {"inducing": z_zz + z_zx}
    if "q_mean" in fields:
        bars["q_mean"] = join_output_columns(mean_bars, xp) if preconditioned else mu_bar
    if "sigma_sqrt" in fields:
        bars["sigma_sqrt"] = xp.stack(sig_bars)
    if "t_sqrt" in fields:
        bars["t_sqrt"] = xp.stack(t_bars)
    return theta_zz + theta_zx + theta_d, {name: bars[name] for name in fields}


def _factor_gradient(g, low, k):
    """dF/dL = tril(2 G L) + k diag(1/L) for a factor L of a bound with k log|L L^T|/2 terms."""
    xp = be.namespace(g, low)
    log_det_bar = _diagonal_matrix(1.0 / diagonal(low, xp), low)
    return xp.tril(2.0 * mm(g, low)) + k * log_det_bar


# --- natural (product-only) step -----------------------------------------------------------
def natural_step(tape, state, d_mean, d_var, step):
    """Product-only steps on the mean, Sigma and T from one minibatch evaluation (module docstring).

    Raises
    ------
    CholeskyError
        If a step produced non-finite values (the schedule then halves ``step``).
    """
    xp = be.namespace(tape.kzx, d_mean)
    n_cov = state.sigma_sqrt.shape[0]
    k = _outputs_per_cov(state)
    settings = state.settings
    kzz, kzx, mu = tape.kzz, tape.kzx, tape.mu
    # With a shared covariance the Sigma-optimum averages the outputs' adjoints.
    _, t_data_t = tape.data_grams(tape_var_adjoint(tape, d_var, n_cov))
    grad_mean = mm(kzx, d_mean) - mm(kzz, mu)
    low_s_all = xp.tril(state.sigma_sqrt)
    mus, sigs, ts = [], [], []
    for c in range(n_cov):
        low_s, low_t = low_s_all[c, ...], tape.low_t[c, ...]
        t = tape.t(c)
        # Omega = T (K - 2 W_h) T + T, the Sigma-optimum's inverse for this T and batch.
        omega = tape.tkt(c) - (2.0 / k) * t_data_t[c] + t
        e_s = residual(low_s, omega)
        # The step sizes stay on the device (0-d arrays): no read to the host.
        g_s = xp.clip(eigenvalue_bound(e_s), 0.0, None)
        # mu: preconditioned by T Sigma T (old Sigma), capped by 1 / (1 + lambda_max bound).
        cols = _columns(state, c)
        rho = xp.clip(1.0 / (1.0 + g_s), None, step)
        direction = mm(t, tri_mm(low_s, tri_mm(low_s, mm(t, grad_mean[:, cols]), trans=True)))
        mus.append(mu[:, cols] + rho * direction)
        sigs.append(factor_step(low_s, e_s, step)[0])
        # T follows the new Sigma, and Adam's new K, when the new state is next evaluated.
        ts.append(low_t)
    new_sig, new_t = xp.stack(sigs), xp.stack(ts)
    if settings.preconditioned_mean:
        # The pseudo-targets whose mean under the new Sigma is the new mu: m~ = (K + Sigma') mu'
        # (products only; exact once T has followed Sigma', see mean_weights).
        new_mean = join_output_columns(
            [mm(kzz, part) + tri_mm(sig, tri_mm(sig, part, trans=True)) for part, sig in zip(mus, sigs)], xp
        )
    else:
        new_mean = join_output_columns(mus, xp)
    # One read for the three checks; within deferred checks none (a flag the careful
    # path's replay meets again).
    finite = xp.all(xp.isfinite(new_mean)) & xp.all(xp.isfinite(new_sig)) & xp.all(xp.isfinite(new_t))
    flags = pending_flags()
    if flags is not None:
        flags.note(~finite)
    elif not bool(finite):
        raise CholeskyError("the product-only natural step produced non-finite values")
    return InverseFreeState(state.inducing, new_mean, new_sig, new_t, state.n_covariances, True, settings)


# --- prediction and diagnostics --------------------------------------------------------
def make_predictor(kernel, state, jitter):
    """Freeze the fitted bound: mean K(x, Z) mu, variance k_xx + k_x^T W_c k_x (eq. 19).

    As in every evaluation, T is first refined against the current K + Sigma (on a copy:
    the state is not changed); the preconditioned mean (2 T - T P T) m~ is only as good
    as T.

    Returns a :class:`skgp_sparse.bases.coupled.CoupledPredictor` (the same two arrays:
    ``mean_weights`` = mu, ``middle`` = W_c), so prediction too is products only.
    """
    kzz = kernel.kuu(state.inducing)
    ensure_initialised(kernel, state, kzz)
    if state.refine_t:
        state = state.copy()
        _refine_state(kzz, state)
    _, ws = middle_matrices(kzz, state)
    xp = be.namespace(kzz, state.q_mean)
    return CoupledPredictor(copy_array(state.inducing), copy_array(mean_weights(state, ws)), xp.stack(ws))


def diagnostics(kernel, state, jitter):
    """Quality of T, products only (worst over the covariances).

    Returns
    -------
    dict
        ``t_residual``: ||(K + Sigma) T - I||_F; ``t_residual_factor``: ||L_t^T (K + Sigma)
        L_t - I||_F, the residual the T steps reduce (same eigenvalues, but not amplified
        by the conditioning of L_t).
    """
    kzz = kernel.kuu(state.inducing)
    ensure_initialised(kernel, state, kzz)
    worst, worst_factor = 0.0, 0.0
    xp = be.namespace(kzz, state.t_sqrt)
    # Python floats (reported per epoch, stored on the fitted model).
    for low_s, low_t in zip(*map(blocks, _lower_factors(state))):
        p = kzz + gram(low_s)
        pt = add_to_diagonal(mm(p, gram(low_t)), -1.0, xp)
        worst = max(worst, _frobenius(pt))
        worst_factor = max(worst_factor, _frobenius(residual(low_t, p)))
    return {"t_residual": worst, "t_residual_factor": worst_factor}


class InverseFreeBasis(Basis, members=globals()):
    """The inverse-free basis: this module's functions and field tuples, under the names of the
    :class:`~.contract.Basis` contract."""

    name = "inverse_free"


#: The inverse-free basis, as :data:`skgp_sparse.bases.BASES` registers it.
BASIS = InverseFreeBasis()
