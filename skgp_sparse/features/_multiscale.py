"""Gaussian-window (multiscale) inducing features for an RBF kernel with an amplitude.

Feature ``m`` is a Gaussian-weighted average of the latent function around a centre
``z_m`` with per-dimension widths ``delta_m`` (Lazaro-Gredilla and Figueiras-Vidal, 2009):

.. math::

    u_m = \\int f(x)\\, \\mathcal{N}(x;\\, z_m, \\operatorname{diag}(\\delta_m^2))\\, dx .

For the kernel ``k(x, x') = s2 exp(-1/2 sum_d (x_d - x'_d)^2 / l_d^2)`` both covariances
are Gaussian integrals with closed forms: an RBF whose squared length scales are widened
by the windows' variances, times the factor that keeps the windows normalised,

.. math::

    K_{uf}[m, n] = s_2 \\prod_d \\sqrt{l_d^2 / w_{md}}\\,
        \\exp\\Big(-\\tfrac12 \\sum_d (x_{nd} - z_{md})^2 / w_{md}\\Big),
    \\qquad w_{md} = l_d^2 + \\delta_{md}^2,

and ``K_uu`` the same with ``w = l^2 + delta_m^2 + delta_m'^2`` between two centres.
``K(f, f)`` is the kernel's own: its diagonal is ``s2``. With every width zero the
features are the function's values at the centres (ordinary inducing points).

Length scales are an array of shape ``(d,)`` or, for an isotropic kernel, ``(1,)`` (a
scalar is read as ``(1,)``); the gradients in ``log_length_scales`` have the same shape.
No jitter is added to ``K_uu``: that is the caller's choice.
"""

import numpy as np

from ._kinds import Multiscale
from ._registry import Covariances

__all__ = [
    "MultiscaleCovariances",
    "multiscale_kuf",
    "multiscale_kuf_adjoint",
    "multiscale_kuu",
    "multiscale_kuu_adjoint",
    "multiscale_kuu_cross",
    "multiscale_kuu_cross_adjoint",
]


def _as_length_scales(length_scales, n_dims):
    """The length scales as a float64 array of shape (1,) or (n_dims,), and broadcast to (n_dims,)."""
    ls = np.atleast_1d(np.asarray(length_scales, dtype=np.float64))
    if ls.ndim != 1 or ls.size not in (1, n_dims):
        raise ValueError(f"length_scales must have shape (1,) or ({n_dims},), got {ls.shape}")
    return ls, np.broadcast_to(ls, (n_dims,))


def _as_features(Z, delta):
    Z = np.atleast_2d(np.asarray(Z, dtype=np.float64))
    delta = np.broadcast_to(np.asarray(delta, dtype=np.float64), Z.shape)
    if np.any(delta < 0):
        raise ValueError("window widths delta must be >= 0")
    return Z, delta


def _fold(grad_per_dim, ls):
    """Sum a per-dimension gradient to the shape the length scales were given in."""
    return grad_per_dim if ls.size == grad_per_dim.size else np.array([grad_per_dim.sum()])


def _kuf_parts(Z, delta, X, ls_full, variance):
    """``K(u, f)`` and the widened squared length scales ``w`` (M, d) it was built with.

    The squared distances are expanded into matrix products, so no (M, N, d) array is
    formed; the common shift by the centres' mean keeps the expansion from cancelling
    away the digits of inputs far from the origin.
    """
    X = np.atleast_2d(np.asarray(X, dtype=np.float64))
    if X.shape[1] != Z.shape[1]:
        raise ValueError(f"X has {X.shape[1]} columns, the features {Z.shape[1]}")
    shift = Z.mean(axis=0)
    Zc, Xc = Z - shift, X - shift
    w = ls_full**2 + delta**2
    inv_w = 1.0 / w
    quad = inv_w @ (Xc * Xc).T
    quad -= 2.0 * (Zc * inv_w) @ Xc.T
    quad += np.sum(Zc * Zc * inv_w, axis=1)[:, None]
    np.maximum(quad, 0.0, out=quad)
    log_scale = np.log(variance) + 0.5 * np.sum(np.log(ls_full**2 * inv_w), axis=1)
    quad *= -0.5
    quad += log_scale[:, None]
    return np.exp(quad, out=quad), w, Xc, Zc


def multiscale_kuf(Z, delta, X, length_scales, variance):
    """Covariance between Gaussian-window features and function values.

    Parameters
    ----------
    Z : ndarray of shape (M, d)
        Window centres.
    delta : ndarray of shape (M, d)
        Window widths (standard deviations), >= 0; zero gives the point value.
    X : ndarray of shape (N, d)
        Inputs.
    length_scales : ndarray of shape (d,) or (1,)
        RBF length scales (one entry: isotropic).
    variance : float
        Kernel amplitude ``s2`` (``K(f, f)`` has ``s2`` on its diagonal).

    Returns
    -------
    ndarray of shape (M, N)
        ``cov(u_m, f(x_n))``. Memory is O(M N): no (M, N, d) temporary.
    """
    Z, delta = _as_features(Z, delta)
    _, ls_full = _as_length_scales(length_scales, Z.shape[1])
    return _kuf_parts(Z, delta, X, ls_full, variance)[0]


def multiscale_kuf_adjoint(Z, delta, X, length_scales, variance, bar):
    """Gradients of ``sum(bar * K(u, f))`` in the features and the kernel's log-parameters.

    Parameters
    ----------
    Z, delta, X, length_scales, variance
        As in :func:`multiscale_kuf`.
    bar : ndarray of shape (M, N)
        The adjoint of ``K(u, f)``.

    Returns
    -------
    dict
        ``"Z"`` (M, d), ``"delta"`` (M, d), ``"log_length_scales"`` (shape of
        ``length_scales``: summed over dimensions when isotropic) and ``"log_variance"``
        (float). The gradient in X is not computed.
    """
    Z, delta = _as_features(Z, delta)
    ls, ls_full = _as_length_scales(length_scales, Z.shape[1])
    K, w, Xc, Zc = _kuf_parts(Z, delta, X, ls_full, variance)
    G = np.asarray(bar, dtype=np.float64) * K
    g_sum = G.sum(axis=1)[:, None]
    # Moments of the weighted inputs around each centre, by matrix products:
    # sum_n G_mn (x_nd - z_md) and sum_n G_mn (x_nd - z_md)^2.
    GX = G @ Xc
    first = GX - Zc * g_sum
    second = G @ (Xc * Xc) - 2.0 * Zc * GX + Zc * Zc * g_sum
    # d log K / d w = -1/(2w) + (x - z)^2 / (2 w^2)
    grad_w = 0.5 * (second / w - g_sum) / w
    grad_log_ls = g_sum.sum() + 2.0 * ls_full**2 * grad_w.sum(axis=0)
    return {
        "Z": first / w,
        "delta": 2.0 * delta * grad_w,
        "log_length_scales": _fold(grad_log_ls, ls),
        "log_variance": float(G.sum()),
    }


def _cross_parts(Z1, delta1, Z2, delta2, ls_full, variance):
    """``K(u1, u2)``, built one input dimension at a time: the widened length scales differ
    for every pair, and a loop over the few dimensions keeps memory at O(M1 M2)."""
    log_k = np.full((Z1.shape[0], Z2.shape[0]), np.log(variance))
    for d in range(Z1.shape[1]):
        w = ls_full[d] ** 2 + delta1[:, d, None] ** 2 + delta2[None, :, d] ** 2
        r = Z1[:, d, None] - Z2[None, :, d]
        log_k += 0.5 * np.log(ls_full[d] ** 2 / w) - 0.5 * r * r / w
    return np.exp(log_k)


def multiscale_kuu_cross(Z1, delta1, Z2, delta2, length_scales, variance):
    """Covariance between two sets of Gaussian-window features.

    Parameters
    ----------
    Z1 : ndarray of shape (M1, d)
        Centres of the first set.
    delta1 : ndarray of shape (M1, d)
        Widths of the first set, >= 0.
    Z2 : ndarray of shape (M2, d)
        Centres of the second set.
    delta2 : ndarray of shape (M2, d)
        Widths of the second set, >= 0.
    length_scales : ndarray of shape (d,) or (1,)
        RBF length scales (one entry: isotropic).
    variance : float
        Kernel amplitude ``s2``.

    Returns
    -------
    ndarray of shape (M1, M2)
        ``cov(u1_i, u2_j)``: the RBF with squared length scales
        ``l^2 + delta1_i^2 + delta2_j^2``, scaled by ``prod_d sqrt(l_d^2 / w_ijd)``.
    """
    Z1, delta1 = _as_features(Z1, delta1)
    Z2, delta2 = _as_features(Z2, delta2)
    _, ls_full = _as_length_scales(length_scales, Z1.shape[1])
    return _cross_parts(Z1, delta1, Z2, delta2, ls_full, variance)


def multiscale_kuu(Z, delta, length_scales, variance):
    """Covariance of one set of Gaussian-window features with itself (no jitter).

    Parameters
    ----------
    Z, delta, length_scales, variance
        As in :func:`multiscale_kuf`.

    Returns
    -------
    ndarray of shape (M, M)
        Symmetric; its diagonal is ``s2 prod_d sqrt(l_d^2 / (l_d^2 + 2 delta_md^2))``.
    """
    return multiscale_kuu_cross(Z, delta, Z, delta, length_scales, variance)


def _cross_adjoint(Z1, delta1, Z2, delta2, ls, ls_full, variance, bar):
    G = np.asarray(bar, dtype=np.float64) * _cross_parts(Z1, delta1, Z2, delta2, ls_full, variance)
    n_dims = Z1.shape[1]
    out = {
        "Z1": np.empty_like(Z1), "delta1": np.empty_like(Z1),
        "Z2": np.empty_like(Z2), "delta2": np.empty_like(Z2),
    }
    grad_log_ls = np.empty(n_dims)
    total = G.sum()
    for d in range(n_dims):
        w = ls_full[d] ** 2 + delta1[:, d, None] ** 2 + delta2[None, :, d] ** 2
        r = Z1[:, d, None] - Z2[None, :, d]
        Gr_w = G * r / w
        out["Z1"][:, d] = -Gr_w.sum(axis=1)
        out["Z2"][:, d] = Gr_w.sum(axis=0)
        # G * d log K / d w, with d log K / d w = -1/(2w) + r^2 / (2 w^2)
        GH = 0.5 * (Gr_w * r - G) / w
        out["delta1"][:, d] = 2.0 * delta1[:, d] * GH.sum(axis=1)
        out["delta2"][:, d] = 2.0 * delta2[:, d] * GH.sum(axis=0)
        grad_log_ls[d] = total + 2.0 * ls_full[d] ** 2 * GH.sum()
    out["log_length_scales"] = _fold(grad_log_ls, ls)
    out["log_variance"] = float(total)
    return out


def multiscale_kuu_cross_adjoint(Z1, delta1, Z2, delta2, length_scales, variance, bar):
    """Gradients of ``sum(bar * K(u1, u2))`` in both feature sets and the log-parameters.

    Parameters
    ----------
    Z1, delta1, Z2, delta2, length_scales, variance
        As in :func:`multiscale_kuu_cross`.
    bar : ndarray of shape (M1, M2)
        The adjoint of ``K(u1, u2)``.

    Returns
    -------
    dict
        ``"Z1"``, ``"delta1"`` (M1, d), ``"Z2"``, ``"delta2"`` (M2, d),
        ``"log_length_scales"`` (shape of ``length_scales``) and ``"log_variance"`` (float).
    """
    Z1, delta1 = _as_features(Z1, delta1)
    Z2, delta2 = _as_features(Z2, delta2)
    ls, ls_full = _as_length_scales(length_scales, Z1.shape[1])
    return _cross_adjoint(Z1, delta1, Z2, delta2, ls, ls_full, variance, bar)


def multiscale_kuu_adjoint(Z, delta, length_scales, variance, bar):
    """Gradients of ``sum(bar * K(u, u))`` in the features and the kernel's log-parameters.

    Parameters
    ----------
    Z, delta, length_scales, variance
        As in :func:`multiscale_kuu`.
    bar : ndarray of shape (M, M)
        The adjoint of ``K(u, u)`` (need not be symmetric).

    Returns
    -------
    dict
        ``"Z"`` (M, d), ``"delta"`` (M, d), ``"log_length_scales"`` (shape of
        ``length_scales``) and ``"log_variance"`` (float).
    """
    Z, delta = _as_features(Z, delta)
    ls, ls_full = _as_length_scales(length_scales, Z.shape[1])
    g = _cross_adjoint(Z, delta, Z, delta, ls, ls_full, variance, bar)
    # Both arguments are the same set: its gradient is the sum of the two slots'.
    return {
        "Z": g["Z1"] + g["Z2"],
        "delta": g["delta1"] + g["delta2"],
        "log_length_scales": g["log_length_scales"],
        "log_variance": g["log_variance"],
    }


class MultiscaleCovariances(Covariances):
    """The seam's covariances of :class:`~skgp_sparse.features.Multiscale` features under
    an amplitude times an RBF (its forms :class:`~._forms.RBFForm` and
    :class:`~._forms.ScaledRBFForm`).

    The inducing array holds the centres, then the log widths (the widths stay positive
    as Adam moves them).
    """

    def _parts(self, Z):
        centres, widths = Multiscale.split(Z)
        variance, length_scales = self.form.values(self.kernel.theta)
        return centres, widths, length_scales, variance

    def _theta_bar(self, grads):
        return self.form.theta_bar(self.kernel.n_theta, grads["log_variance"], grads["log_length_scales"])

    @staticmethod
    def _z_bar(d_centres, d_widths, widths):
        # d/d log(width) = width * d/d width.
        return np.concatenate([d_centres, d_widths * widths], axis=1)

    def _kuu(self, Z):
        centres, widths, length_scales, variance = self._parts(Z)
        return multiscale_kuu(centres, widths, length_scales, variance)

    def _kuu_vjp(self, Z):
        centres, widths, length_scales, variance = self._parts(Z)
        K = multiscale_kuu(centres, widths, length_scales, variance)

        def back(bar):
            grads = multiscale_kuu_adjoint(centres, widths, length_scales, variance, bar)
            return self._theta_bar(grads), self._z_bar(grads["Z"], grads["delta"], widths)

        return K, back

    def _kuf(self, Z, X):
        centres, widths, length_scales, variance = self._parts(Z)
        return multiscale_kuf(centres, widths, X, length_scales, variance)

    def _kuf_vjp(self, Z, X):
        centres, widths, length_scales, variance = self._parts(Z)
        K = multiscale_kuf(centres, widths, X, length_scales, variance)

        def back(bar):
            grads = multiscale_kuf_adjoint(centres, widths, X, length_scales, variance, bar)
            return self._theta_bar(grads), self._z_bar(grads["Z"], grads["delta"], widths)

        return K, back

    def _kuu_cross(self, Z1, Z2):
        c1, w1, length_scales, variance = self._parts(Z1)
        c2, w2, _, _ = self._parts(Z2)
        return multiscale_kuu_cross(c1, w1, c2, w2, length_scales, variance)

    def _kuu_cross_vjp(self, Z1, Z2):
        c1, w1, length_scales, variance = self._parts(Z1)
        c2, w2, _, _ = self._parts(Z2)
        K = multiscale_kuu_cross(c1, w1, c2, w2, length_scales, variance)

        def back(bar):
            grads = multiscale_kuu_cross_adjoint(c1, w1, c2, w2, length_scales, variance, bar)
            return self._theta_bar(grads), self._z_bar(grads["Z1"], grads["delta1"], w1)

        return K, back

