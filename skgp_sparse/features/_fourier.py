"""Fourier features: inducing variables in the frequency domain, on a box around the data.

Two constructions, chosen by the kernel and the number of input dimensions when a fit
binds the features to its rows (:meth:`FourierFeatures.bind`):

- **VFF** (Hensman, Durrande and Solin 2018; :mod:`._vff`): one input dimension and a
  Matern of order 1/2, 3/2 or 5/2. The features are the function's inner products, in the
  kernel's RKHS on the box [a, b], with 1, cos(w_m (x - a)) and sin(w_m (x - a)):
  M = 2F + 1 of them. Inside the box K(u, f) is the sinusoids themselves (free of the
  hyperparameters); outside it decays with the kernel's own tails, so rows outside the
  box are predicted correctly (towards the prior, as the kernel says).
- **IFF** (Cheema and Rasmussen 2023; :mod:`._iff`): one to three dimensions and an RBF
  (per-feature length scales, or :class:`~skgp_sparse.kernels.FeatureScaledRBF`) or
  scikit-learn's Matern, whose spectral densities are known. The features average the
  spectral process over small boxes of frequencies around a grid; K(u, f) is a cosine or a
  sine of the grid frequency at x, and K(u, u) is taken as diagonal (the method's
  midpoint approximation). They are defined at every x: the box only sets the grid's
  spacing (eps = 0.95 over the box's width in each dimension, the paper's choice).

Both are used here in a scaled form: each feature is divided by its prior standard
deviation, so that K(u, u) has a unit diagonal (the identity, for IFF). The scaling
changes nothing in the model (q(u) absorbs it) but keeps the relative jitter of the
factorisations meaningful: the raw diagonals span many decades (a Matern 5/2's VFF
diagonal grows as the sixth power of the frequency, an RBF's IFF diagonal as an
exponential).

The inducing array holds each feature's index in the bound grid, one column: the
features are not learned (``learn_inducing`` leaves them), and a second inducing set
(``n_orthogonal``) takes the grid's next features in order of frequency.
"""

import copy

import numpy as np
import scipy.linalg

from ._forms import MaternForm, StationaryForm, kernel_form, stationary_length_scales
from ._iff import iff_frequencies, iff_kuf, iff_log_density
from ._kinds import InducingFeatures
from ._registry import Covariances
from ._vff import vff_frequencies, vff_kuf, vff_kuf_adjoint, vff_kuu, vff_kuu_adjoint

__all__ = ["FourierFeatures", "FourierCovariances"]

#: The most input dimensions Fourier features take (their count grows as a power of it).
MAX_DIMENSIONS = 3
#: The Matern orders of the VFF construction.
VFF_ORDERS = (0.5, 1.5, 2.5)
#: The IFF grid's spacing, over the box's width in each dimension (Cheema and Rasmussen).
IFF_SPACING = 0.95
#: The default widening of the box on each side, in the kernel's length scales: VFF's
#: K(f, u) K(u, u)^-1 K(u, f) reaches k(x, x) to 0.2% at three length scales from the ends
#: (Matern 3/2 and 5/2; it is 35% and 45% short at half a length scale).
MARGIN_LENGTH_SCALES = 3.0


class FourierFeatures(InducingFeatures):
    """Fourier features on a box around the training rows (see :mod:`skgp_sparse.features`
    and the module notes for the two constructions).

    Parameters
    ----------
    n_frequencies : int or None, default=None
        VFF: the number F of nonzero frequencies (M = 2F + 1 features). IFF: the number of
        grid frequencies along each dimension's positive half, before the grid is cut to
        a sphere. None: the count nearest to ``n_inducing + n_orthogonal`` that the grid
        can make. Set, it wins over ``n_inducing``.
    box : array-like of shape (2, n_features) or None, default=None
        The lower and upper corners of the box; None: the training rows' range, widened
        on each side by ``margin``.
    margin : float or None, default=None
        The widening of the rows' range, where ``box`` is None: a fraction of the range;
        None: :data:`MARGIN_LENGTH_SCALES` of the kernel's length scale at the start of
        the fit in each dimension, and at least a tenth of the range. VFF's features
        explain the kernel less well within a few length scales of the box's ends (they
        are periodic on the box, and a function of the kernel's space need not be), so
        the rows must sit that far inside; IFF's covariance is periodic with a period of
        the box's width over 0.95, so rows at opposite ends of a box without margin
        would be correlated as close neighbours.

    Attributes
    ----------
    construction_ : {"vff", "iff"}
        Set by :meth:`bind`, as are ``box_`` (2, d), ``n_features_`` (the number of
        features) and, for IFF, ``frequencies_`` (K, d) in cycles per unit and
        ``spacing_`` (d,); for VFF, ``n_frequencies_`` (F).
    """

    name = "fourier"
    learnable = False
    placed_in_input_space = False

    def __init__(self, n_frequencies=None, box=None, margin=None):
        if n_frequencies is not None and int(n_frequencies) < 1:
            raise ValueError(f"FourierFeatures(n_frequencies=...) must be a positive integer; got {n_frequencies!r}")
        if margin is not None and not margin >= 0:
            raise ValueError(f"FourierFeatures(margin=...) must be None or >= 0; got {margin!r}")
        self.n_frequencies = n_frequencies
        self.box = box
        self.margin = None if margin is None else float(margin)

    def __repr__(self):
        return f"FourierFeatures(n_frequencies={self.n_frequencies!r}, box={self.box!r}, margin={self.margin!r})"

    def __eq__(self, other):
        return type(self) is type(other) and _same_settings(vars(self), vars(other))

    __hash__ = InducingFeatures.__hash__

    def n_columns(self, n_features):
        return 1

    def bind(self, X, n_features, kernel):
        """A copy bound to the training rows ``X`` (a sample of them suffices: their range
        sets the box), with about ``n_features`` features for the compiled ``kernel``."""
        X = np.asarray(X, dtype=np.float64)
        d = X.shape[1]
        if d > MAX_DIMENSIONS:
            raise ValueError(
                f"Fourier features take at most {MAX_DIMENSIONS} input dimensions (their number grows as a "
                f"power of it); X has {d}: use inducing_features='points' (or 'multiscale')")
        form = kernel_form(kernel.to_sklearn())
        bound = copy.copy(self)
        bound.box_ = self._box(X, stationary_length_scales(kernel, d))
        vff = d == 1 and isinstance(form, MaternForm) and form.nu in VFF_ORDERS
        if vff:
            bound.construction_ = "vff"
            bound.n_frequencies_ = int(self.n_frequencies or max(1, round((n_features - 1) / 2)))
            bound.n_features_ = 2 * bound.n_frequencies_ + 1
        elif isinstance(form, StationaryForm) and (not isinstance(form, MaternForm) or form.nu in VFF_ORDERS):
            bound.construction_ = "iff"
            bound.spacing_ = IFF_SPACING / (bound.box_[1] - bound.box_[0])
            n = self.n_frequencies or _grid_size(n_features, bound.spacing_)
            bound.frequencies_ = iff_frequencies(np.full(d, int(n)), bound.spacing_)
            bound.n_features_ = 2 * bound.frequencies_.shape[0]
        else:
            raise ValueError(
                f"Fourier features need an RBF or a Matern (nu 0.5, 1.5 or 2.5), times a ConstantKernel, plus a "
                f"WhiteKernel; got {kernel.to_sklearn()!r}: use inducing_features='points' with this kernel")
        return bound

    def _box(self, X, length_scales):
        if self.box is not None:
            box = np.asarray(self.box, dtype=np.float64).reshape(2, -1)
            if box.shape[1] != X.shape[1] or np.any(box[1] <= box[0]):
                raise ValueError(f"FourierFeatures(box=...) must be (2, {X.shape[1]}) with lows below highs; got {box}")
            return box
        low, high = X.min(axis=0), X.max(axis=0)
        width = np.where(high > low, high - low, 1.0)
        if self.margin is not None:
            margin = self.margin * width
        else:
            reach = 0.0 if length_scales is None else MARGIN_LENGTH_SCALES * length_scales
            margin = np.maximum(0.1 * width, reach)
        return np.stack([low - margin, high + margin])

    def start(self, points, length_scales):
        """Every feature of the bound grid, lowest frequencies first."""
        return _frequency_order(self)[:, None].astype(np.float64)

    def raw_features(self, X):
        """phi(x) of every feature of the bound grid at the rows X (n_features_, n), as
        K(u, f) is inside the box whatever the hyperparameters: VFF's 1, cosines and
        sines; IFF's cosines and sines. None where a row lies outside VFF's box (K(u, f)
        depends on the length scale there, so no statistics of the rows would hold for
        other hyperparameters)."""
        X = np.asarray(X, dtype=np.float64)
        if self.construction_ == "vff":
            if self.outside_the_box(X):
                return None
            a, b = self.box_[:, 0]
            angles = np.outer(vff_frequencies(a, b, self.n_frequencies_)[1:], X[:, 0] - a)
            return np.concatenate([np.ones((1, X.shape[0])), np.cos(angles), np.sin(angles)])
        return iff_kuf(X - self.box_.mean(axis=0), self.frequencies_, self.spacing_)

    def outside_the_box(self, X):
        """Whether a row of X lies outside the bound box."""
        return bool(np.any(X < self.box_[0]) or np.any(X > self.box_[1]))

    def centres(self, inducing):
        """Fourier features sit nowhere in input space: no centres (an empty (M, 0) array)."""
        return np.zeros((inducing.shape[0], 0))

    def step_units(self, x_scale):
        return np.ones(1)

    def fitted_attributes(self, inducing):
        return {}


def _same_settings(a, b):
    if a.keys() != b.keys():
        return False
    return all(np.array_equal(a[k], b[k]) if isinstance(a[k], np.ndarray) or isinstance(b[k], np.ndarray)
               else a[k] == b[k] for k in a)


def _grid_size(n_features, spacing):
    """The grid's half-width per dimension whose cut grid makes the count nearest to
    ``n_features``."""
    best, n = None, 1
    while True:
        count = 2 * iff_frequencies(np.full(spacing.size, n), spacing).shape[0]
        if best is None or abs(count - n_features) < abs(best[1] - n_features):
            best = (n, count)
        if count >= n_features:
            return best[0]
        n += 1


def _frequency_order(features):
    """The bound grid's feature indices, by the size of their frequency (cosine before
    sine), so that a first set of inducing variables holds the lowest frequencies."""
    if features.construction_ == "vff":
        F = features.n_frequencies_
        size = np.concatenate([np.arange(F + 1), np.arange(1, F + 1)]).astype(np.float64)
        kind = np.concatenate([np.zeros(F + 1), np.ones(F)])
    else:
        size = np.tile(np.linalg.norm(features.frequencies_ / features.spacing_, axis=1), 2)
        kind = np.repeat([0.0, 1.0], features.frequencies_.shape[0])
    return np.lexsort((kind, size))


class FourierCovariances(Covariances):
    """The seam's covariances of bound :class:`FourierFeatures` (VFF or IFF), in the scaled
    form of the module notes: ``K'(u, u) = s K(u, u) s`` and ``K'(u, f) = s K(u, f)`` with
    ``s = diag(K(u, u))^-1/2``."""

    def __init__(self, features, kernel, form):
        super().__init__(features, kernel, form)
        #: (theta, (raw K(u, u), its diagonal)) of the last theta asked.
        self._raw_kuu_cache = None

    # --- the raw covariances of the whole grid and their adjoints ----------------------
    def _profile(self):
        variance, length_scales = self.form.values(self.kernel.theta)
        return variance, length_scales

    def _raw_kuu(self):
        """The raw K(u, u) of the whole grid (dense) and its diagonal, made once per theta:
        a step asks it of K(u, u) and of K(u, f) alike."""
        theta = self.kernel.theta
        if self._raw_kuu_cache is None or not np.array_equal(self._raw_kuu_cache[0], theta):
            self._raw_kuu_cache = (theta, self._make_raw_kuu())
        return self._raw_kuu_cache[1]

    def _make_raw_kuu(self):
        f = self.features
        variance, ls = self._profile()
        if f.construction_ == "vff":
            K = vff_kuu(*f.box_[:, 0], f.n_frequencies_, self.form.nu, float(ls[0]), variance).dense()
            return K, np.diag(K).copy()
        diag = np.tile(np.exp(-self._log_density()[0]) / np.prod(f.spacing_), 2)
        return np.diag(diag), diag

    def _log_density(self):
        variance, ls = self._profile()
        kind = "matern" if isinstance(self.form, MaternForm) else "rbf"
        nu = self.form.nu if kind == "matern" else None
        return iff_log_density(kind, self.features.frequencies_, ls, variance, nu)

    def _raw_kuu_adjoint(self, bar):
        """(d/d log variance, d/d log length scales (d,)) of sum(bar * raw K(u, u))."""
        f = self.features
        variance, ls = self._profile()
        if f.construction_ == "vff":
            g = vff_kuu_adjoint(*f.box_[:, 0], f.n_frequencies_, self.form.nu, float(ls[0]), variance, bar)
            return g["log_variance"], np.array([g["log_length_scale"]])
        log_s, dlog_s = self._log_density()
        k = log_s.shape[0]
        diag_bar = np.diag(bar)
        # Each entry is 1 / (S vol): its log-derivative is minus that of S.
        weighted = (diag_bar[:k] + diag_bar[k:]) * np.exp(-log_s) / np.prod(f.spacing_)
        return -float(weighted.sum()), -(weighted @ dlog_s)

    def _raw_kuf(self, X):
        """The raw K(u, f): the features' own values, but for VFF's rows outside the box
        (their tails depend on the length scale)."""
        f = self.features
        if f.construction_ == "vff" and f.outside_the_box(X):
            variance, ls = self._profile()
            return vff_kuf(X[:, 0], *f.box_[:, 0], f.n_frequencies_, self.form.nu, float(ls[0]))
        return f.raw_features(X)

    def _raw_kuf_adjoint(self, X, bar):
        """d/d log length scales (d,) of sum(bar * raw K(u, f)): VFF's tails outside the
        box only; IFF's K(u, f) is free of the hyperparameters."""
        f = self.features
        if f.construction_ != "vff":
            return np.zeros(1)
        variance, ls = self._profile()
        return np.array([vff_kuf_adjoint(np.asarray(X, dtype=np.float64)[:, 0], *f.box_[:, 0], f.n_frequencies_,
                                         self.form.nu, float(ls[0]), bar)])

    # --- the scaled covariances of the inducing array's features ------------------------
    def _scaled_kuu(self):
        K, diag = self._raw_kuu()
        s = 1.0 / np.sqrt(diag)
        return K * s[:, None] * s[None, :], diag, s

    def _kuu_theta_bar(self, bar_full, scaled, diag, s):
        """theta_bar of sum(bar * K'(u, u)) over the whole grid (module notes' scaling)."""
        weighted = bar_full * scaled
        c = -0.5 * (weighted.sum(axis=1) + weighted.sum(axis=0)) / diag
        effective = bar_full * s[:, None] * s[None, :] + np.diag(c)
        d_var, d_ls = self._raw_kuu_adjoint(effective)
        return self.form.theta_bar(self.kernel.n_theta, d_var, d_ls)

    def _kuu(self, Z):
        idx = _indices(Z)
        return self._scaled_kuu()[0][np.ix_(idx, idx)]

    def _kuu_vjp(self, Z):
        return self._kuu_cross_vjp(Z, Z)

    def _kuu_cross(self, Z1, Z2):
        return self._scaled_kuu()[0][np.ix_(_indices(Z1), _indices(Z2))]

    def _kuu_cross_vjp(self, Z1, Z2):
        i1, i2 = _indices(Z1), _indices(Z2)
        scaled, diag, s = self._scaled_kuu()

        def back(bar):
            full = np.zeros_like(scaled)
            full[np.ix_(i1, i2)] = np.asarray(bar, dtype=np.float64)
            return self._kuu_theta_bar(full, scaled, diag, s), np.zeros(Z1.shape)

        return scaled[np.ix_(i1, i2)], back

    def _kuf(self, Z, X):
        idx = _indices(Z)
        _, diag = self._raw_kuu()
        kuf = self._raw_kuf(X)[idx] / np.sqrt(diag[idx])[:, None]
        return kuf

    def _kuf_vjp(self, Z, X):
        idx = _indices(Z)
        K, diag = self._raw_kuu()
        s = 1.0 / np.sqrt(diag)
        scaled = self._raw_kuf(X)[idx] * s[idx][:, None]

        def back(bar):
            bar = np.asarray(bar, dtype=np.float64)
            raw_bar = np.zeros((diag.size, bar.shape[1]))
            raw_bar[idx] = bar * s[idx][:, None]
            d_ls = self._raw_kuf_adjoint(X, raw_bar)
            # Through the scale: d s_m / s_m = -1/2 d diag_m / diag_m.
            c = np.zeros(diag.size)
            c[idx] = -0.5 * np.sum(bar * scaled, axis=1) / diag[idx]
            d_var_kuu, d_ls_kuu = self._raw_kuu_adjoint(np.diag(c))
            theta_bar = self.form.theta_bar(self.kernel.n_theta, d_var_kuu, d_ls_kuu + d_ls)
            return theta_bar, np.zeros(Z.shape)

        return scaled, back

    def _kuu_diag(self, Z):
        """Every scaled feature's prior variance: one."""
        return np.ones(Z.shape[0])

    #: The rows enter a Gaussian fit's bound only through FeatureStatistics.
    has_statistics = True


def fourier_covariances(features, kernel, form):
    """The registry's implementation for Fourier features (VFF or IFF, as bound)."""
    if not hasattr(features, "construction_"):
        raise ValueError("FourierFeatures must be bound to the training rows (FourierFeatures.bind) before use")
    return FourierCovariances(features, kernel, form)


def _indices(Z):
    return np.asarray(Z, dtype=np.float64)[:, 0].astype(np.int64)


# --- the one pass of a Gaussian fit ---------------------------------------------------------
class FeatureStatistics:
    """Sums over the rows that a Gaussian fit with Fourier features needs, and nothing of
    the rows themselves: with phi(x) the raw features (hyperparameter-free inside the box),
    ``phi_phi`` = sum_n w_n phi(x_n) phi(x_n)^T (M, M), ``phi_y`` = sum_n w_n phi(x_n) y_n^T
    (M, P), ``yy`` = sum_n w_n |y_n|^2, ``count`` = sum_n w_n. Chunks' statistics add
    (:meth:`add`), so a pass may run chunk by chunk, in parallel or where the chunks live."""

    def __init__(self, phi_phi, phi_y, yy, count):
        self.phi_phi, self.phi_y, self.yy, self.count = phi_phi, phi_y, float(yy), float(count)

    def add(self, other):
        return FeatureStatistics(self.phi_phi + other.phi_phi, self.phi_y + other.phi_y, self.yy + other.yy,
                                 self.count + other.count)


def _statistics_bound_parts(covariances, stats, Z, noise_variance, jitter):
    """The pieces of the collapsed bound from the statistics (see
    :meth:`FourierCovariances.statistics_bound`)."""
    idx = _indices(Z)
    scaled, diag, s = covariances._scaled_kuu()
    K = scaled[np.ix_(idx, idx)]
    m = K.shape[0]
    low = np.linalg.cholesky(K + jitter * np.mean(np.diag(K)) * np.eye(m))
    P = stats.phi_phi[np.ix_(idx, idx)] * np.outer(s[idx], s[idx])
    R = stats.phi_y[idx] * s[idx][:, None]
    return idx, scaled, diag, s, low, P, R


class StatisticsBound:
    """Titsias' collapsed bound of the coupled basis from :class:`FeatureStatistics`, and its
    gradient in the kernel's theta and the log noise variance: O(M^3), whatever the rows.

    With K = K'(u, u) (jittered as the model factorises it, K = L L^T), P = s Phi s and
    R = s Phi_y (the scaled statistics), B = I + L^-1 P L^-T / v and v the noise variance,

        F = -n P_out log(2 pi v) / 2 - yy / (2 v) + tr(R^T L^-T B^-1 L^-1 R) / (2 v^2)
            - P_out log|B| / 2 - P_out (n s2 - tr(K^-1 P)) / (2 v),

    (n the rows' total weight, s2 the kernel's variance, P_out the outputs), the model's
    ``collapsed_evaluate`` on the same rows.
    """

    def __init__(self, covariances, stats, Z, noise_variance, jitter):
        self.covariances, self.stats, self.noise = covariances, stats, float(noise_variance)
        idx, scaled, diag, s, low, P, R = _statistics_bound_parts(covariances, stats, Z, noise_variance, jitter)
        self._parts = (idx, scaled, diag, s, P, R)
        v, n_out, n = self.noise, stats.phi_y.shape[1], stats.count
        whiten = _Whitening(low)
        p_white = whiten.both(P)
        self.whitened_precision = np.eye(low.shape[0]) + p_white / v
        b_low = scipy.linalg.cholesky(self.whitened_precision, lower=True)
        self.whitened_targets = whiten.left(R) / v
        self.q_mean = scipy.linalg.cho_solve((b_low, True), self.whitened_targets)
        variance = covariances.form.values(covariances.kernel.theta)[0]
        trace_q = np.trace(p_white)
        self.value = (-0.5 * n * n_out * np.log(2 * np.pi * v) - stats.yy / (2 * v)
                      + 0.5 * np.sum(self.whitened_targets * self.q_mean)
                      - n_out * np.sum(np.log(np.diag(b_low)))
                      - n_out * (n * variance - trace_q) / (2 * v))
        # Gradients in K, P, R and v (module notes of StatisticsBound): with K^-1 = L^-T L^-1
        # and Sigma^-1 = (K + P / v)^-1 = L^-T B^-1 L^-1, each an unwhitening of a whitened
        # matrix.
        k_inv = whiten.unwhiten_both(np.eye(low.shape[0]))
        sigma_inv = whiten.unwhiten_both(scipy.linalg.cho_solve((b_low, True), np.eye(low.shape[0])))
        sigma_r = sigma_inv @ R
        outer = sigma_r @ sigma_r.T
        g_sigma = -0.5 * n_out * sigma_inv - outer / (2 * v * v)
        self.g_k = g_sigma + 0.5 * n_out * k_inv - n_out * whiten.unwhiten_both(p_white) / (2 * v)
        self.g_p = g_sigma / v + n_out * k_inv / (2 * v)
        self.g_r = sigma_r / (v * v)
        d_v = (-n * n_out / (2 * v) + stats.yy / (2 * v * v) - np.sum(R * sigma_r) / v**3
               + n_out * (n * variance - trace_q) / (2 * v * v) - np.sum(g_sigma * P) / (v * v))
        self.d_log_noise = v * d_v
        self.d_log_variance_direct = -variance * n_out * n / (2 * v)

    def theta_bar(self):
        """The gradient in the kernel's theta."""
        cov = self.covariances
        idx, scaled, diag, s, P, R = self._parts
        full = np.zeros_like(scaled)
        full[np.ix_(idx, idx)] = self.g_k
        theta_bar = cov._kuu_theta_bar(full, scaled, diag, s)
        # P = s Phi s and R = s Phi_y: each scale's log-derivative is -1/2 that of the
        # raw diagonal.
        weighted = self.g_p * P
        c = np.zeros(diag.size)
        c[idx] = -0.5 * (weighted.sum(axis=1) + weighted.sum(axis=0) + np.sum(self.g_r * R, axis=1)) / diag[idx]
        d_var, d_ls = cov._raw_kuu_adjoint(np.diag(c))
        return theta_bar + cov.form.theta_bar(cov.kernel.n_theta, d_var + self.d_log_variance_direct, d_ls)


class _Whitening:
    """Products with L^-1 of a Cholesky factor L, by triangular solves, or by a division
    where L is diagonal (IFF's scaled K(u, u) is the identity, jittered)."""

    def __init__(self, low):
        diagonal = np.diag(low)
        self.diagonal = diagonal if np.array_equal(low, np.diag(diagonal)) else None
        self.low = low

    def left(self, a):
        """L^-1 a."""
        if self.diagonal is not None:
            return a / self.diagonal.reshape((-1,) + (1,) * (a.ndim - 1))
        return scipy.linalg.solve_triangular(self.low, a, lower=True)

    def both(self, a):
        """L^-1 a L^-T of a symmetric a."""
        return self.left(self.left(a).T)

    def unwhiten_both(self, a):
        """L^-T a L^-1 of a symmetric a."""
        if self.diagonal is not None:
            return a / np.outer(self.diagonal, self.diagonal)
        half = scipy.linalg.solve_triangular(self.low, a, lower=True, trans="T")
        return scipy.linalg.solve_triangular(self.low, half.T, lower=True, trans="T")


def feature_statistics(features, X, Y, weights=None):
    """The :class:`FeatureStatistics` of the rows (X, Y) (``weights`` per row, or None)
    under bound :class:`FourierFeatures`; None where a row lies outside VFF's box
    (:meth:`FourierFeatures.raw_features`)."""
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    w = np.ones(X.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64).reshape(-1)
    yy, count = float(np.sum(w[:, None] * Y * Y)), float(w.sum())
    if features.construction_ == "vff":
        a, b = features.box_[:, 0]
        if features.outside_the_box(X):
            return None
        phi_phi, phi_y = _vff_sums(2.0 * np.pi * (X[:, 0] - a) / (b - a), w, Y, features.n_frequencies_)
        return FeatureStatistics(phi_phi, phi_y, yy, count)
    phi = features.raw_features(X)
    weighted = phi * w
    return FeatureStatistics(weighted @ phi.T, weighted @ Y, yy, count)


#: Powers e^(i k theta) of VFF's sums are taken by a recurrence, anchored afresh by a direct
#: evaluation every this many steps (its rounding grows with the steps between anchors).
_RECURRENCE_ANCHOR = 64


def _vff_sums(theta, w, Y, F):
    """VFF's phi phi^T and phi y over the rows at angles ``theta`` (w_1 (x - a)), weights w.

    With phi = (1, cos(m theta), sin(m theta)) for m = 1..F, every entry of phi phi^T is half
    a sum or difference of C_k = sum_n w_n cos(k theta_n) and S_k = sum_n w_n sin(k theta_n)
    for k = 0..2F (cos i cos j = (cos(i-j) + cos(i+j)) / 2, and so on): O(n F) work in place
    of the O(n F^2) of the product of phi with itself.
    """
    n_k = 2 * F + 1
    C, S = np.empty(n_k), np.empty(n_k)
    CY, SY = np.empty((F + 1, Y.shape[1])), np.empty((F + 1, Y.shape[1]))
    step = np.exp(1j * theta)
    wy = w[:, None] * Y
    power = np.ones_like(step)
    for k in range(n_k):
        if k > 0:
            power = np.exp(1j * k * theta) if k % _RECURRENCE_ANCHOR == 0 else power * step
        C[k], S[k] = w @ power.real, w @ power.imag
        if k <= F:
            CY[k], SY[k] = power.real @ wy, power.imag @ wy
    i, j = np.meshgrid(np.arange(F + 1), np.arange(F + 1), indexing="ij")
    cos_cos = 0.5 * (C[np.abs(i - j)] + C[i + j])
    i1, j1 = i[1:, 1:], j[1:, 1:]
    sin_sin = 0.5 * (C[np.abs(i1 - j1)] - C[i1 + j1])
    # cos(i t) sin(j t) = (sin((i + j) t) - sin((i - j) t)) / 2, with sin(-k t) = -sin(k t).
    ic, js = i[:, 1:], j[:, 1:]
    cos_sin = 0.5 * (S[ic + js] - np.sign(ic - js) * S[np.abs(ic - js)])
    phi_phi = np.block([[cos_cos, cos_sin], [cos_sin.T, sin_sin]])
    return phi_phi, np.concatenate([CY, SY[1:]])
