"""The orthogonally decoupled basis (Salimbeni, Cheng, Boots and Deisenroth, 2018).

Two sets of inducing inputs: beta (``inducing``, |beta| = n_inducing) carries the
covariance and part of the mean exactly as the coupled basis does, and gamma
(``orthogonal``, |gamma| = n_orthogonal) carries extra mean basis functions projected
orthogonally to span(beta). With K = K_bb + jitter (the same jittered matrix everywhere),
L_k L_k^T = K, whitened beta parameters (m_p, S_c = L_c L_c^T) as in
:mod:`.coupled` and gamma coefficients a_p (column p of the coefficient matrix):

    mean_p(x) = k_xb L_k^-T m_p + (k_xg - k_xb K^-1 K_bg) a_p
              = k_xb L_k^-T (m_p - w_p) + k_xg a_p,        w_p = L_k^-1 K_bg a_p
    var_c(x)  = as in the coupled basis (gamma does not touch the covariance)
    KL        = KL_coupled + 1/2 sum_p a_p^T (K_gg - K_gb K^-1 K_bg) a_p
              = KL_coupled + 1/2 sum_p (a_p^T K_gg a_p - |w_p|^2)

(spec_orth_decoupled.md 2.5, the corrected marginals of the paper's App. A.2). The gamma
part of the mean vanishes at the beta points and adds no (a, m) cross term to the KL.

Updates: q(v) of beta by the coupled natural step (the orthogonal natural parameters
make it independent of gamma; its "u" is the beta part of the mean only, which is what
the coupled tape holds); the gamma coefficients by Adam, with the kernel
hyperparameters and both point sets, as in the paper's experiments ("OrthNat"). The
paper's diagonally preconditioned step for gamma (eq. 17) and its code's rescaling of
the coefficients by the residual variances fitted worse than this and are not offered
(docs/constants.md).

Cost of a training step beyond the coupled one over beta: the kernel matrix
K(gamma, [X; beta]) with its reverse pass, O((B + |beta|) |gamma| D), taken in one call
so that one product with a gives both K_Xg a and K_bg a; K(beta, gamma) again for the
gradient in beta; and the KL's a^T K_gg a. That term is O(|gamma|^2 D) exactly; with
``kl_columns = c`` (an argument of :func:`init_state`, kept on the state) the training
steps use the paper's unbiased estimate from c random columns of K_gg (App. A.3,
O(c |gamma| D)), drawn from the state's own generator. The reported ELBO
(:func:`kl_divergence` without a tape) is always exact; its a^T K_gg a is cached on the
state until the kernel, gamma or a change, so evaluations that only report a value or
feed a natural step (``need_grad`` False or "natural") build no kernel derivatives and
do not recompute it.

With n_orthogonal = 0 every function hands over to :mod:`.coupled` unchanged, so the model
is exactly the coupled one.

The state's arrays and X may also be arrays of another library (CuPy, PyTorch,
array_api_strict; see :mod:`skgp_sparse.backend`): as in the coupled basis, every function
is written once over the arrays' namespace, and the primitives of :mod:`skgp_sparse.linalg`
keep numpy on its BLAS calls (and on in-place writes over kernel matrices,
:func:`~skgp_sparse.linalg.outer_over`) while the other namespaces take the same formulas in
Array API operations, answering in the inputs' namespace and device. The sampled columns of
a^T K_gg a are drawn on the host from the state's numpy generator (the same stream whatever
the library) and sent to the arrays' device as one index array; the rows they select are
taken with ``take`` and their adjoints put back by
:func:`~skgp_sparse.linalg.add_to_rows`. tests/test_backend_orth_decoupled.py checks the
other libraries against numpy.
"""

from dataclasses import dataclass, field

import numpy as np

from . import coupled
from .contract import Basis
from .state import VariationalState, cache_field
from .toolkit import summed_var_adjoint
from .. import backend as be
from ..linalg import add_to_rows, copy_array, mm, outer_over, same_values, solve_triangular

#: Fields moved by Adam when the inducing inputs are learned: both sets.
INDUCING_FIELDS = ("inducing", "orthogonal")
#: The gamma coefficients are always moved by Adam (spec 3.5: their natural step is not
#: a conjugate one).
ADAM_FIELDS = ("orth_mean",)
#: Fields of beta's q(v) that Adam moves instead of the natural step (variational_optimizer="adam").
VARIATIONAL_FIELDS = ("q_mean", "q_sqrt")
#: Beta's step is the coupled one: from a Gaussian likelihood's adjoints a step of size one
#: lands on the optimal q(v) for the gamma coefficients where Adam holds them.
EXACT_NATURAL_STEP = True
CONJUGATE_NATURAL_STEP = True


def latent_shape(state):
    """(P, C) of the state: beta's q(v) holds the latents' means and covariances."""
    return state.beta.q_mean.shape[1], state.beta.q_sqrt.shape[0]


#: ``kl_columns="auto"``: the exact a^T K_gg a up to this many gamma points (where it
#: costs a small share of a step) ...
AUTO_EXACT_MAX_ORTHOGONAL = 256
#: ... and above it the column-sampled estimate from at least this many columns (the
#: paper's c) ...
AUTO_MIN_COLUMNS = 64
#: ... and at least one column in this many: fewer columns let the estimate's noise cost
#: accuracy in short fits (docs/constants.md).
AUTO_COLUMN_RATIO = 16


def resolve_kl_columns(kl_columns, n_orthogonal):
    """The column sample size that ``kl_columns`` means for ``n_orthogonal`` gamma points.

    Parameters
    ----------
    kl_columns : None, int or "auto"
    n_orthogonal : int

    Returns
    -------
    int or None
        None for the exact term (also when c >= n_orthogonal: sampling would not save work).
    """
    if isinstance(kl_columns, str):
        if kl_columns != "auto":
            raise ValueError(f"kl_columns must be None, a positive int or 'auto'; got {kl_columns!r}")
        if n_orthogonal <= AUTO_EXACT_MAX_ORTHOGONAL:
            return None
        kl_columns = max(AUTO_MIN_COLUMNS, -(-n_orthogonal // AUTO_COLUMN_RATIO))
    elif kl_columns is not None:
        if isinstance(kl_columns, (bool, np.bool_)) or not isinstance(kl_columns, (int, np.integer)) or kl_columns < 1:
            raise ValueError(f"kl_columns must be None, a positive int or 'auto'; got {kl_columns!r}")
        kl_columns = int(kl_columns)
    if kl_columns is not None and kl_columns >= n_orthogonal:
        return None
    return kl_columns


def _field_of_beta(name):
    """A property that reads and writes field ``name`` of the state's coupled part."""
    return property(lambda state: getattr(state.beta, name), lambda state, value: setattr(state.beta, name, value),
                    doc=f"The coupled part's ``{name}``.")


@dataclass
class OrthState(VariationalState):
    """Variational parameters of the orthogonally decoupled basis.

    The arrays are numpy arrays (float64), or all arrays of one other namespace, on one
    device (see :func:`init_state`); the column generator is numpy's in both cases.

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
        Draws the sampled columns (None when the KL is exact).
    """

    beta: coupled.CoupledState
    orthogonal: np.ndarray
    orth_mean: np.ndarray
    kl_columns: int = None
    column_rng: object = field(default=None, repr=False)
    # The exact a^T K_gg a of the last evaluation without gradients, with what it was
    # computed from: the reported ELBO and natural-only evaluations reuse it. Transient:
    # a copy or a pickle starts without it.
    quadratic_cache: object = cache_field(transient=True, repr=False, compare=False)

    # The coupled fields, so that the optimiser and the estimators see one flat state.
    inducing = _field_of_beta("inducing")
    q_mean = _field_of_beta("q_mean")
    q_sqrt = _field_of_beta("q_sqrt")

    @property
    def n_orthogonal(self):
        return self.orthogonal.shape[0]



def init_state(points, n_outputs, n_covariances, n_orthogonal=0, *, kl_columns="auto", seed=None):
    """The prior (zero KL): the first ``len(points) - n_orthogonal`` rows are beta, the rest gamma.

    With the estimators' k-means initialisation the rows come in k-means++ seeding order,
    so beta is a well spread subset of the centres (see docs/bases/orth_decoupled.md for
    the comparison with the paper's initialisation).

    Parameters
    ----------
    points : ndarray of shape (Mb + Mg, D)
        numpy (or array-like): the state is numpy float64. An array of another library:
        the state's arrays are of that library, on the points' device, in their floating
        dtype (float32 points give a float32 state).
    n_outputs : int
        P, the number of latent functions.
    n_covariances : int
        C, 1 (shared covariance) or P.
    n_orthogonal : int
        Mg, the size of gamma.
    kl_columns : None, int or "auto", default="auto"
        How the training steps evaluate a^T K_gg a: None exactly (O(Mg^2)), an int c
        from c random columns (O(c Mg), unbiased), "auto" exactly up to
        :data:`AUTO_EXACT_MAX_ORTHOGONAL` = 256 gamma points and above from
        max(:data:`AUTO_MIN_COLUMNS`, Mg / :data:`AUTO_COLUMN_RATIO`) = max(64, Mg / 16)
        columns (docs/constants.md).
    seed : int or None, default=None
        Seed of the column sampler (None: 0, so that a fit is reproducible whatever the caller).

    Returns
    -------
    OrthState
    """
    xp, points = be.owned_float_copy(points)
    n_orthogonal = int(n_orthogonal)
    if n_orthogonal < 0 or points.shape[0] - n_orthogonal < 1:
        raise ValueError(
            f"orth_decoupled needs at least one beta point: got {points.shape[0]} inducing inputs "
            f"for n_orthogonal={n_orthogonal}"
        )
    columns = resolve_kl_columns(kl_columns, n_orthogonal)
    n_beta = points.shape[0] - n_orthogonal
    rng = None if columns is None else np.random.default_rng(0 if seed is None else seed)
    beta = coupled.init_state(points[:n_beta, ...], n_outputs, n_covariances)
    orth_mean = xp.zeros((n_orthogonal, n_outputs), dtype=points.dtype, device=be.device_of(points))
    return OrthState(beta, copy_array(points[n_beta:, ...]), orth_mean, columns, rng)


def init_options(params, rng):
    """The options of :func:`init_state` for a fit with the estimator's parameters ``params``:
    its ``kl_columns``, and where it asks for a gamma set (``n_orthogonal`` > 0) a ``seed``
    for the column sampler drawn from the fit's generator ``rng`` (only then, so that other
    fits keep their random stream)."""
    options = {"kl_columns": params["kl_columns"]}
    if params["n_orthogonal"] > 0:
        options["seed"] = int(rng.integers(2**32))
    return options


# --- pieces of the forward pass ----------------------------------------------------------
def _reusable(kernel, matrix):
    """``matrix`` (a covariance matrix from ``kernel``'s ``*_vjp``) if its memory may be
    written over, else None: a :class:`~skgp_sparse.kernels.CompiledKernel` and the
    features' covariances hand over the matrices they return (``hands_over_matrices``:
    their reverse passes keep their own copies); other kernels promise nothing.
    Whether the memory is then written over is :func:`~skgp_sparse.linalg.outer_over`'s
    choice (numpy's, with one column: a fresh array of that size costs its page faults on
    every step, about a tenth of an orth(128 + 1024) step at batch 1024)."""
    return matrix if getattr(kernel, "hands_over_matrices", False) else None


def _summed(a):
    """The sum of the entries of ``a``, a 0-d array of its library (a numpy scalar, a
    Python float too; no synchronisation with a device)."""
    return be.namespace(a).sum(a)


def _stacked_rows(top, bottom):
    """[top; bottom] in the namespace of ``bottom`` (an array of the state)."""
    return be.namespace(top, bottom).concat([top, bottom], axis=0)


def _zeros_like(a):
    """Zeros of the shape, dtype, namespace and device of ``a``."""
    return be.namespace(a).zeros_like(a)


def _same_array(x, y):
    """Whether ``x`` and ``y`` hold the same values (arrays of one library on one device;
    anything else, such as a cache key left from before the state moved, is not the
    same)."""
    if type(x) is not type(y) or be.device_of(x) != be.device_of(y):
        return False
    return same_values(x, y)


class _ExactQuadratic:
    """sum_p a_p^T K_gg a_p from the whole K_gg, with its derivatives."""

    def __init__(self, kernel, gamma, a):
        kgg, self.back = kernel.kuu_vjp(gamma)
        self.a, self.kgg_a = a, mm(kgg, a)
        self.value = _summed(a * self.kgg_a)
        # Only its memory is needed any more: the adjoint -1/2 a a^T may be written there.
        self.buffer = _reusable(kernel, kgg)

    def a_gradient(self):
        """d(-1/2 quad)/da."""
        return -self.kgg_a

    def backward(self, kernel, gamma, want_gamma):
        """(theta_bar, gamma_bar) of -1/2 quad."""
        buffer, self.buffer = self.buffer, None
        return self.back(outer_over(buffer, self.a, -0.5 * self.a))


class _SampledQuadratic:
    """(Mg / c) sum_p a_C,p^T K_Cg a_p from c columns C drawn uniformly without replacement:
    unbiased for sum_p a_p^T K_gg a_p, and so are its derivatives (spec 4.4).

    The columns are drawn on the host, from ``rng``, whatever the arrays' library, and go
    to the arrays' device once as an index array (``index``): the sampled rows are taken
    with ``take``, and their adjoints put back into Mg rows by
    :func:`~skgp_sparse.linalg.add_to_rows`."""

    def __init__(self, kernel, gamma, a, columns, rng):
        n = gamma.shape[0]
        self.cols = np.sort(rng.choice(n, columns, replace=False))
        self.scale = n / columns
        self.index = be.to_namespace(self.cols, be.namespace(gamma, a), device=be.device_of(gamma))
        kcg, self.back = kernel.kuu_cross_vjp(self._rows(gamma), gamma)
        self.a, self.kcg, self.kcg_a = a, kcg, mm(kcg, a)
        self.value = self.scale * _summed(self._rows(a) * self.kcg_a)

    def _rows(self, x):
        """The sampled rows of ``x``."""
        return be.namespace(x).take(x, self.index, axis=0)

    def a_gradient(self):
        grad = -0.5 * self.scale * mm(self.kcg, self._rows(self.a), trans_a=True)
        # x - y is x + (-y) exactly: the sampled rows lose (scale / 2) K_Cg a.
        return add_to_rows(grad, self.index, (-0.5 * self.scale) * self.kcg_a)

    def backward(self, kernel, gamma, want_gamma):
        kcg_bar = -0.5 * self.scale * mm(self._rows(self.a), self.a, trans_b=True)
        theta_bar, rows_bar = self.back(kcg_bar)
        if not want_gamma:
            return theta_bar, _zeros_like(gamma)
        # The columns' side of K_Cg (its theta part is counted above), plus the rows' side.
        _, back_cols = kernel.kuu_cross_vjp(gamma, self._rows(gamma))
        return theta_bar, add_to_rows(back_cols(kcg_bar.T)[1], self.index, rows_bar)


class _CachedQuadratic:
    """The exact value only (evaluations without gradients)."""

    def __init__(self, value):
        self.value = value


def _exact_quadratic_value(kernel, state, a):
    """sum_p a_p^T K_gg a_p, reused while the kernel, gamma and a are those of the last call
    (the ELBO reports and the natural-only passes do not move them)."""
    key = (id(kernel), kernel.theta, state.orthogonal, a)
    cache = state.quadratic_cache
    if cache is not None and cache[0][0] == key[0] and all(
        _same_array(x, y) for x, y in zip(cache[0][1:], key[1:])
    ):
        return cache[1]
    value = _summed(a * mm(kernel.kuu(state.orthogonal), a))
    state.quadratic_cache = ((key[0],) + tuple(copy_array(x) for x in key[1:]), value)
    return value


class _Tape:
    """The coupled tape of the beta part plus what the gamma part needs.

    ``k_gamma`` is K(gamma, [X; beta]) (Mg x (B + Mb), ``kuf_with_set``): the two
    covariance matrices of gamma side by side, so that one product with a gives both
    K_Xg a (the mean) and K_bg a (for w), and one product with [G; c_bar] the gradient in
    a; ``rows`` is X.
    """

    __slots__ = ("beta", "jitter", "mean", "a", "k_gamma", "back_gamma", "n_rows", "w", "quad", "kernel", "rows")


def marginals(kernel, X, state, jitter, need_grad=True):
    """Latent marginals at the rows of X: the contract's :meth:`Basis.marginals <skgp_sparse.bases.contract.Basis.marginals>`
    (a "natural" tape also carries the exact KL, without kernel derivatives)."""
    if state.n_orthogonal == 0:
        mean, var, tape_b = coupled.marginals(kernel, X, state.beta, jitter, need_grad)
        if tape_b is None:
            return mean, var, None
        tape = _Tape()
        tape.beta, tape.jitter, tape.mean = tape_b, tape_b.jitter, mean
        return mean, var, tape
    with_vjp = bool(need_grad) and need_grad != "natural"
    # The gamma part needs L_k and A^T w (A = L_k^-1 K_bX) from the coupled forward: its
    # tape without kernel derivatives when none are wanted, and then, for a reported
    # value, the whitened form (the one accurate whatever cond(K_bb)).
    mean_b, var, tape_b = coupled.marginals(kernel, X, state.beta, jitter, True if with_vjp else "natural",
                                            form="auto" if need_grad else "whitened")
    gamma, beta = state.orthogonal, state.inducing
    n_rows = X.shape[0]
    if with_vjp:
        k_gamma, back_gamma = kernel.kuf_with_set_vjp(gamma, X, beta)
    else:
        k_gamma, back_gamma = kernel.kuf_with_set(gamma, X, beta), None
    a = state.orth_mean
    # [K_Xg a; K_bg a] in one product.
    k_a = mm(k_gamma, a, trans_a=True)
    w = solve_triangular(tape_b.low_k, k_a[n_rows:, ...])
    # mean = A^T m + K_Xg a - A^T w
    mean = mean_b + k_a[:n_rows, ...] - tape_b.at_times(w)
    if not need_grad:
        return mean, var, None
    tape = _Tape()
    tape.beta, tape.jitter, tape.mean, tape.kernel, tape.a, tape.w = tape_b, tape_b.jitter, mean, kernel, a, w
    tape.k_gamma, tape.back_gamma, tape.n_rows, tape.rows = k_gamma, back_gamma, n_rows, X
    if not with_vjp:
        tape.quad = _CachedQuadratic(_exact_quadratic_value(kernel, state, a))
    elif state.kl_columns is None:
        tape.quad = _ExactQuadratic(kernel, gamma, a)
    else:
        tape.quad = _SampledQuadratic(kernel, gamma, a, state.kl_columns, state.column_rng)
    return mean, var, tape


def _beta_view(state, q_mean):
    """The coupled state with another mean (same arrays otherwise, caches included)."""
    return coupled.CoupledState(state.inducing, q_mean, state.q_sqrt, state.beta.precision)


def kl_divergence(kernel, state, jitter, tape=None):
    """KL(q || p) summed over outputs: exact without a tape, else the tape's estimate
    (the column-sampled one in training steps with ``kl_columns`` set)."""
    kl = coupled.kl_divergence(kernel, state.beta, jitter)
    if state.n_orthogonal == 0:
        return kl
    if tape is None:
        low_k, _, _ = coupled.factor_kzz(kernel, state.inducing, jitter, need_grad=False)
        a = state.orth_mean
        w = solve_triangular(low_k, mm(kernel.kuu_cross(state.orthogonal, state.inducing), a, trans_a=True))
        quad = _exact_quadratic_value(kernel, state, a)
    else:
        w, quad = tape.w, tape.quad.value
    return kl + 0.5 * (quad - _summed(w * w))


def backward(tape, state, d_mean, d_var, fields=("inducing", "orthogonal", "orth_mean")):
    """Gradient of F(mean, var) - KL in the kernel hyperparameters and the fields asked for.

    The beta part is the coupled backward pass run with the mean weights m - w (the mean
    is A^T (m - w) + K_Xg a). The gamma part adds, with G = d_mean and
    w_bar = w - A G (the gradient in w = L_k^-1 K_bg a, from the mean and the KL),
    c_bar = L_k^-T w_bar:

        dF/dK(gamma, [X; beta]) = a [G; c_bar]^T,    dF/dK_gg = -1/2 a a^T,
        L_k^T dF/dL_k += -w_bar w^T,
        dF/da = K(gamma, [X; beta]) [G; c_bar] - K_gg a,    dF/dm = A G - m,

    with K_gg a and dF/dK_gg replaced by their column-sampled estimates when the tape's
    KL term is sampled. The L_k adjoints of both parts go through one Cholesky adjoint.
    Every term is checked against finite differences in tests/test_orth_decoupled.py.
    """
    if state.n_orthogonal == 0:
        fields_b = tuple(f for f in fields if f not in ("orthogonal", "orth_mean"))
        theta_bar, bars = coupled.backward(tape.beta, state.beta, d_mean, d_var, fields_b)
        for name in fields:
            if name == "orthogonal":
                bars[name] = _zeros_like(state.orthogonal)
            elif name == "orth_mean":
                bars[name] = _zeros_like(state.orth_mean)
        return theta_bar, bars
    tb, kernel = tape.beta, tape.kernel
    a, w = tape.a, tape.w
    # The coupled pass (coupled.backward) over the mean weights m - w, unrolled so that the
    # gamma part's share of L_k^T dF/dL_k joins it before the Cholesky adjoint.
    h = summed_var_adjoint(d_var, state.q_sqrt.shape[0])
    view = _beta_view(state, state.q_mean - w)
    a_g, lt_low_bar = coupled.prior_factor_adjoint(tb, view, d_mean, h)
    kzx_bar = tb.kzx_adjoint(view, d_mean, h)
    w_bar = w - a_g
    c_bar = solve_triangular(tb.low_k, w_bar, trans=True)
    lt_low_bar -= mm(w_bar, w, trans_b=True)
    theta_zz, z_zz = tb.back_zz(tb.cholesky_adjoint(lt_low_bar))
    theta_zx, z_zx = tb.back_zx(kzx_bar)
    theta_d = tb.back_diag(be.namespace(h).sum(h, axis=1))
    joint_bar = _stacked_rows(d_mean, c_bar)
    k_gamma = tape.k_gamma if tape.k_gamma is not None else \
        kernel.kuf_with_set(state.orthogonal, tape.rows, state.inducing)
    a_bar = mm(k_gamma, joint_bar) + tape.quad.a_gradient()
    # K(gamma, [X; beta]) is not needed after a_bar: its adjoint is written over it (a second
    # backward pass over this tape recomputes the matrix).
    tape.k_gamma = None
    k_gamma_bar = outer_over(_reusable(kernel, k_gamma), a, joint_bar)
    theta_gamma, g_gamma = tape.back_gamma(k_gamma_bar)
    theta_gg, g_gg = tape.quad.backward(kernel, state.orthogonal, "orthogonal" in fields)
    theta_bar = theta_zz + theta_zx + theta_d + theta_gamma + theta_gg
    out = {}
    for name in fields:
        if name == "inducing":
            # The beta side of K_gb (the vjp above differentiates its first argument, gamma).
            _, back_bg = kernel.kuu_cross_vjp(state.inducing, state.orthogonal)
            # A transposed view: the kernel's reverse pass lays it out as it needs.
            out[name] = z_zz + z_zx + back_bg(k_gamma_bar[:, tape.n_rows:].T)[1]
        elif name == "orthogonal":
            out[name] = g_gamma + g_gg
        elif name == "orth_mean":
            out[name] = a_bar
        elif name == "q_mean":
            out[name] = a_g - state.q_mean
        elif name == "q_sqrt":
            out[name] = coupled.q_sqrt_gradient(tb, view, h)
        else:
            raise ValueError(f"orth_decoupled has no field {name!r}")
    return theta_bar, out


def natural_step(tape, state, d_mean, d_var, step):
    """The coupled natural step on beta's q(v) (the gamma coefficients are Adam's).

    Raises
    ------
    CholeskyError
        If the new precision of beta is not positive definite (the caller backs off).
    """
    new_beta = coupled.natural_step(tape.beta, state.beta, d_mean, d_var, step)
    new = OrthState(new_beta, state.orthogonal, state.orth_mean, state.kl_columns, state.column_rng)
    # Gamma, a and the kernel are unchanged: the cached a^T K_gg a still holds.
    new.quadratic_cache = state.quadratic_cache
    return new


@dataclass
class OrthPredictor:
    """The fitted model as plain arrays: the coupled predictor of beta (whose mean weights
    include the projection of the gamma part) plus k_xg a.

    Attributes
    ----------
    beta : CoupledPredictor
    orthogonal_points : ndarray of shape (Mg, D)
    orthogonal_weights : ndarray of shape (Mg, P)
        The coefficients a.
    """

    beta: coupled.CoupledPredictor
    orthogonal_points: np.ndarray
    orthogonal_weights: np.ndarray

    def latent(self, kernel, X, full_cov=False):
        """Latent mean (n, P) and variance (n, C), or covariance (C, n, n) with full_cov."""
        mean, second = self.beta.latent(kernel, X, full_cov)
        if self.orthogonal_points.shape[0]:
            mean = mean + mm(kernel.kuf(self.orthogonal_points, X), self.orthogonal_weights, trans_a=True)
        return mean, second


def make_predictor(kernel, state, jitter):
    """Freeze the fitted model into an :class:`OrthPredictor` (O((Mb + Mg)) per row for the mean)."""
    if state.n_orthogonal == 0:
        beta = coupled.make_predictor(kernel, state.beta, jitter)
        return OrthPredictor(beta, copy_array(state.orthogonal), copy_array(state.orth_mean))
    low_k, _, _ = coupled.factor_kzz(kernel, state.inducing, jitter, need_grad=False)
    a = state.orth_mean
    w = solve_triangular(low_k, mm(kernel.kuu_cross(state.orthogonal, state.inducing), a, trans_a=True))
    beta = coupled.make_predictor(kernel, _beta_view(state, state.q_mean - w), jitter)
    return OrthPredictor(beta, copy_array(state.orthogonal), copy_array(a))


class OrthDecoupledBasis(Basis, members=globals()):
    """The orthogonally decoupled basis: this module's functions and field tuples, under the names of the
    :class:`~.contract.Basis` contract."""

    name = "orth_decoupled"
    #: The gamma set, of ``n_orthogonal`` points.
    ORTHOGONAL_SET = True


#: The orthogonally decoupled basis, as :data:`skgp_sparse.bases.BASES` registers it.
BASIS = OrthDecoupledBasis()
