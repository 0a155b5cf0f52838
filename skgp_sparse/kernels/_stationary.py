"""Stationary kernels of a squared distance: RBF, Matern, RationalQuadratic, ExpSineSquared.

The BLAS plumbing shared by all of them. With ``A_s = (A - c) / l`` and ``B_s = (B - c) / l``
(``c`` a common centre, which changes no difference but keeps the norms small and so
limits cancellation), the squared distances are ``r2 = |a_s|^2 + |b_s|^2 - 2 A_s B_s^T``:
one GEMM plus an elementwise pass. The elementwise pass (:mod:`._profiles`) also
evaluates ``f(r2)`` and ``f'(r2)``.

Backward, with ``W = K_bar * f'(r2)`` (elementwise), every derivative is a GEMM or a
reduction over ``W`` -- no ``(M, N, D)`` tensor is ever formed:

* ``d F / d A = (2 / l) * (A_s * rowsum(W) - W B_s)``,
* ``d F / d log l_d = -2 sum_ij W_ij (a_s,id - b_s,jd)^2
  = -2 (A_s^2 . rowsum(W) + B_s^2 . colsum(W) - 2 sum_i a_s,id (W B_s)_id)``
  (summed over ``d`` for an isotropic length scale).

In gram mode ``A`` sits in both arguments and ``W^T`` joins ``W`` (see
:meth:`Stationary._finish_gram`).

Arrays of another library than numpy take the same steps in Array API operations
(:meth:`Stationary._evaluate_xp`, with the elementwise part in :mod:`._array_api`).
"""

import math

import numpy as np
from scipy.special import gamma, kv

from .. import backend
from ..linalg import mm
from . import _array_api as X
from . import _profiles as P
from ._base import Leaf, value_for

__all__ = ["Stationary", "GenericMatern", "make_rbf", "make_feature_scaled_rbf", "make_matern", "make_rq",
           "make_expsine"]


def _row_sq(x):
    # Squared row norms; einsum's 'ij,ij->i' is a plain loop, not a BLAS call.
    return np.einsum("ij,ij->i", x, x)


def _held_copy(held, host, xp, device, dtype):
    """``held`` (a ``(host, device, dtype, copy)`` tuple or None) if it holds ``host`` (a
    host float64 vector) as an array on ``device`` in ``dtype``, else a new such tuple made
    with ``xp``: a node copies a host vector to a device once per value, not per call. The
    library is not held (a module would make the kernel impossible to deep-copy, as the
    bases' searches do); a library's dtype tells it apart."""
    if held is None or held[0] is not host or held[1:3] != (device, dtype):
        # The values are host floats: a list of Python floats is the one form every
        # library's asarray takes on any device.
        held = (host, device, dtype, xp.asarray([float(v) for v in host], dtype=dtype, device=device))
    return held



def _weigh(K_bar, fp, dtype):
    """W = K_bar * f'(r2) with its row and column sums: what every derivative of a
    squared-distance kernel is built from."""
    K_bar = np.ascontiguousarray(K_bar, dtype=dtype)
    W = np.empty_like(K_bar)
    rs = np.empty(W.shape[0], dtype=W.dtype)
    cs = np.empty(W.shape[1], dtype=W.dtype)
    P.weigh_cross(K_bar, fp, W, rs, cs)
    return K_bar, W, rs, cs

class Stationary(Leaf):
    """``k(a, b) = f(|a - b|^2 / l^2)`` for one of the numba profiles of :mod:`._profiles`.

    Parameters
    ----------
    sk_kernel : sklearn kernel
    offset : int
        Start of this kernel's hyperparameters in the global theta.
    kind : int
        Profile id (``_profiles.RBF``, ...).
    scale_name : str or None
        Hyperparameter that scales the inputs (``"length_scale"``), or None when the
        inputs are used as they are (ExpSineSquared).
    profile_names : tuple of str
        Hyperparameters passed to the profile as ``p0, p1``, in that order.
    feature_scale : ndarray of shape (n_features,) or None
        Fixed factors of the per-feature length scales, which are then
        ``length_scale * feature_scale`` for one learned ``length_scale``
        (:class:`~._scaled_rbf.FeatureScaledRBF`); None: the length scales as they are.
    """

    def __init__(self, sk_kernel, offset, kind, scale_name="length_scale", profile_names=(), feature_scale=None):
        self.kind = kind
        self.scale_name = scale_name
        self.profile_names = tuple(profile_names)
        self.inv_feature_scale = None if feature_scale is None else 1.0 / np.asarray(feature_scale, dtype=np.float64)
        self._device_inv_feature_scale = None
        super().__init__(sk_kernel, offset)

    # -- hyperparameters ---------------------------------------------------------------
    def refresh(self):
        self._device_inv_l = None
        if self.scale_name is None:
            self.inv_l = np.ones(1)
            self.ard = self.learns_per_feature = False
            self._refresh_profile()
            return
        ls = self.values[self.scale_name]
        # ``learns_per_feature``: a length scale per feature in theta; ``ard``: one per
        # feature in the evaluation (the same, or one shared factor times fixed scales).
        self.learns_per_feature = np.ndim(ls) == 1
        self.ard = self.learns_per_feature or self.inv_feature_scale is not None
        # Device values (a training loop on a device's arrays) stay there: 0-d or 1-d.
        on_device = backend.on_device(ls)
        inv_l = 1.0 / ls if on_device else 1.0 / np.atleast_1d(np.asarray(ls, dtype=np.float64))
        if self.inv_feature_scale is not None:
            inv_l = inv_l * (self._inv_feature_scale_like(inv_l) if on_device else self.inv_feature_scale)
        self.inv_l = inv_l
        self._refresh_profile()

    def _refresh_profile(self):
        p = [v if backend.on_device(v) else float(v) for v in (self.values[name] for name in self.profile_names)]
        self.p0, self.p1 = (p + [0.0, 0.0])[:2]

    def _per_feature_name(self):
        """The parameter that gives each feature its own scale (for messages)."""
        return "length_scale" if self.inv_feature_scale is None else "feature_scale"

    def _inv_feature_scale_like(self, value):
        """The fixed inverse feature scales as an array of ``value``'s library, device and
        dtype, copied there once."""
        self._device_inv_feature_scale = _held_copy(self._device_inv_feature_scale, self.inv_feature_scale,
                                                    backend.namespace(value), backend.device_of(value), value.dtype)
        return self._device_inv_feature_scale[3]

    def _accumulate_scale(self, theta_bar, sq_sums):
        """``sq_sums[d] = sum_ij W_ij (a_s,id - b_s,jd)^2``; d r2 / d log l_d = -2 (..)^2,
        summed over the features that share a length scale."""
        if self.scale_name is None or not self.free(self.scale_name):
            return
        g = -2.0 * np.asarray(sq_sums, dtype=np.float64)
        self.accumulate(theta_bar, self.scale_name, g if self.learns_per_feature else g.sum())

    # -- inputs ------------------------------------------------------------------------
    def _scaled(self, A, B):
        n_features = A.shape[1]
        if self.ard and self.inv_l.size != n_features:
            raise ValueError(
                f"{self.name}: {self._per_feature_name()} has {self.inv_l.size} entries but X has "
                f"{n_features} features"
            )
        inv_l = self.inv_l.astype(A.dtype, copy=False)
        n = A.shape[0] + (0 if B is None else B.shape[0])
        if n == 0:
            centre = np.zeros(n_features, dtype=A.dtype)
        elif B is None:
            centre = A.mean(axis=0)
        else:
            centre = (A.sum(axis=0) + B.sum(axis=0)) / n
        As = (A - centre) * inv_l
        Bs = None if B is None else (B - centre) * inv_l
        return As, Bs, inv_l

    # -- evaluation ----------------------------------------------------------------------
    def evaluate(self, A, B, mode, grad):
        if mode == "diag":
            # f(0) = 1 for every profile here, whatever the hyperparameters.
            return 1.0, (_no_grad if grad else None)
        if not isinstance(A, np.ndarray):
            return self._evaluate_xp(A, B, mode, grad)
        if mode == "gram":
            return self._gram(A, grad)
        return self._cross(A, B, grad)

    def _cross(self, A, B, grad):
        As, Bs, inv_l = self._scaled(A, B)
        r2 = mm(As, Bs, trans_b=True)
        P.cross_sqdist(r2, _row_sq(As), _row_sq(Bs), As, Bs)
        K, fp = self._profile(r2, grad)
        if not grad:
            return K, None
        p0, p1 = self.p0, self.p1  # back differentiates the kernel that made K

        def back(K_bar, theta_bar):
            K_bar, W, rs, cs = _weigh(K_bar, fp, K.dtype)
            self._profile_params_back(theta_bar, K_bar, r2, fp, p0, p1)
            return self._finish_cross(theta_bar, W, rs, cs, As, Bs, inv_l)

        return K, back

    def _finish_cross(self, theta_bar, W, rs, cs, As, Bs, inv_l):
        Wb = mm(W, Bs)
        if self.scale_name is not None and self.free(self.scale_name):
            sq = mm(rs, As * As) + mm(cs, Bs * Bs) - 2.0 * np.einsum("ij,ij->j", As, Wb)
            self._accumulate_scale(theta_bar, sq)
        Wb -= As * rs[:, None]
        Wb *= -2.0 * inv_l
        return Wb

    def _gram(self, A, grad):
        As, _, inv_l = self._scaled(A, None)
        r2 = mm(As, As, trans_b=True)
        P.gram_sqdist(r2, _row_sq(As), As)
        K, fp = self._profile(r2, grad)
        if not grad:
            return K, None
        p0, p1 = self.p0, self.p1  # back differentiates the kernel that made K

        def back(K_bar, theta_bar):
            K_bar, W, rs, cs = _weigh(K_bar, fp, K.dtype)
            self._profile_params_back(theta_bar, K_bar, r2, fp, p0, p1)
            return self._finish_gram(theta_bar, W, rs, cs, As, inv_l)

        return K, back

    def _profile(self, r2, grad):
        """``K = f(r2)`` and ``fp = f'(r2)`` (None without ``grad``); may overwrite r2."""
        K = np.empty_like(r2)
        fp = P.forward(self.kind, r2, self.p0, self.p1, K, grad)
        return K, fp

    def _profile_params_back(self, theta_bar, K_bar, r2, fp, p0, p1):
        if self.profile_names:
            q = P.param_sums(self.kind, K_bar, r2, fp, p0, p1)
            for k, name in enumerate(self.profile_names):
                self.accumulate(theta_bar, name, q[k])

    def _finish_gram(self, theta_bar, W, rs, cs, As, inv_l):
        # A sits in both arguments: with W = K_bar * fp (not symmetric),
        #   d F / d a_i = (2 / l) (a_i (rs_i + cs_i) - (W A)_i - (W^T A)_i),
        #   sum_ij W_ij (a_i - a_j)^2 = sum_i a_i^2 (rs_i + cs_i) - 2 sum_i a_i (W A)_i.
        # The W^T product is a second thin GEMM rather than a transposed pass over W,
        # which would be strided. The diagonal of W multiplies zero differences; it
        # cancels up to rounding.
        rc = rs + cs
        Wa = mm(W, As)
        if self.scale_name is not None and self.free(self.scale_name):
            sq = mm(rc, As * As) - 2.0 * np.einsum("ij,ij->j", As, Wa)
            self._accumulate_scale(theta_bar, sq)
        Wa += mm(W, As, trans_a=True)
        Wa -= As * rc[:, None]
        Wa *= -2.0 * inv_l
        return Wa

    # -- any other Array API library -----------------------------------------------------
    def _evaluate_xp(self, A, B, mode, grad):
        """The steps of :meth:`_cross` / :meth:`_gram` in Array API operations: the
        arrays (and every derivative) stay in ``A``'s namespace and on its device."""
        xp = backend.namespace(A, B)
        As, Bs, inv_l = self._scaled_xp(A, B, xp)
        gram = mode == "gram"
        r2 = X.sqdist_gram(As, xp) if gram else X.sqdist_cross(As, Bs, xp)
        # back differentiates the kernel that made K
        p0, p1 = value_for(self.p0, A), value_for(self.p1, A)
        K, fp = self._profile_xp(r2, grad, xp, p0, p1)
        if not grad:
            return K, None

        def back(K_bar, theta_bar):
            if K_bar.dtype != K.dtype:
                K_bar = xp.astype(K_bar, K.dtype)
            W, rs, cs = X.weigh(K_bar, fp, xp)
            if self.profile_names:
                q = X.param_sums(self.kind, K_bar, r2, fp, p0, p1, xp)
                for k, name in enumerate(self.profile_names):
                    self.accumulate(theta_bar, name, q[k])
            if gram:
                return self._finish_gram_xp(theta_bar, W, rs, cs, As, inv_l, xp)
            return self._finish_cross_xp(theta_bar, W, rs, cs, As, Bs, inv_l, xp)

        return K, back

    def _scaled_xp(self, A, B, xp):
        n_features = A.shape[1]
        if self.ard and self.inv_l.shape[0] != n_features:
            raise ValueError(
                f"{self.name}: {self._per_feature_name()} has {self.inv_l.shape[0]} entries but X has "
                f"{n_features} features"
            )
        device = backend.device_of(A)
        inv_l = self._inv_l_on(xp, device, A.dtype)
        n = A.shape[0] + (0 if B is None else B.shape[0])
        if n == 0:
            centre = xp.zeros(n_features, dtype=A.dtype, device=device)
        elif B is None:
            centre = xp.mean(A, axis=0)
        else:
            centre = (xp.sum(A, axis=0) + xp.sum(B, axis=0)) / n
        As = (A - centre) * inv_l
        Bs = None if B is None else (B - centre) * inv_l
        return As, Bs, inv_l

    def _inv_l_on(self, xp, device, dtype):
        """The inverse length scales for arrays of ``xp`` on ``device``: a Python float
        for an isotropic one (no copy to the device), else a device copy made once per
        value of the hyperparameters (the gram and the cross matrix of a step share it).
        Device values (see :meth:`Leaf.load`) are used where they are, in ``dtype``."""
        if backend.on_device(self.inv_l):
            return self.inv_l if self.inv_l.dtype == dtype else xp.astype(self.inv_l, dtype)
        if not self.ard:
            return float(self.inv_l[0])
        # The host array itself is part of the key: refresh() makes a new one.
        self._device_inv_l = _held_copy(self._device_inv_l, self.inv_l, xp, device, dtype)
        return self._device_inv_l[3]

    def _profile_xp(self, r2, grad, xp, p0, p1):
        return X.forward(self.kind, r2, p0, p1, grad, xp)

    def _accumulate_scale_xp(self, theta_bar, sq_sums, xp):
        if self.scale_name is None or not self.free(self.scale_name):
            return
        g = -2.0 * sq_sums
        self.accumulate(theta_bar, self.scale_name, g if self.learns_per_feature else xp.sum(g))

    def _finish_cross_xp(self, theta_bar, W, rs, cs, As, Bs, inv_l, xp):
        Wb = W @ Bs
        if self.scale_name is not None and self.free(self.scale_name):
            sq = rs @ (As * As) + cs @ (Bs * Bs) - 2.0 * xp.sum(As * Wb, axis=0)
            self._accumulate_scale_xp(theta_bar, sq, xp)
        return (Wb - As * xp.reshape(rs, (-1, 1))) * (-2.0 * inv_l)

    def _finish_gram_xp(self, theta_bar, W, rs, cs, As, inv_l, xp):
        # As _finish_gram.
        rc = rs + cs
        Wa = W @ As
        if self.scale_name is not None and self.free(self.scale_name):
            sq = rc @ (As * As) - 2.0 * xp.sum(As * Wa, axis=0)
            self._accumulate_scale_xp(theta_bar, sq, xp)
        Wa = Wa + xp.matrix_transpose(W) @ As
        return (Wa - As * xp.reshape(rc, (-1, 1))) * (-2.0 * inv_l)


def _no_grad(bar, theta_bar):
    return None


class GenericMatern(Stationary):
    """Matern kernel for a ``nu`` without a closed form, through ``scipy.special.kv``.

    With ``s = sqrt(2 nu) r`` and ``c = 2^(1 - nu) / Gamma(nu)``::

        f   = c s^nu K_nu(s)
        f'  = d f / d r2 = -c nu s^(nu - 1) K_(nu - 1)(s)

    from ``d/ds [s^nu K_nu(s)] = -s^nu K_(nu - 1)(s)`` and ``ds / dr2 = nu / s``. At
    ``s = 0``: ``f = 1``, and ``f' = -nu / (2 (nu - 1))`` for ``nu > 1``; for ``nu <= 1``
    ``f'`` diverges (a kink, as for nu = 1/2) and the subgradient 0 is used.
    The elementwise work is numpy/scipy here (``kv`` has no numba version); the
    distances and all the derivative plumbing are the same as for the other profiles.

    On arrays of another library, a half-integer ``nu`` (3.5, 4.5, ...) is evaluated on
    the device in closed form (:class:`._array_api.HalfIntegerMatern`); any other ``nu``
    needs ``kv``, which the Array API lacks, so its profile makes a host round trip
    (``r2`` to numpy, ``f`` and ``f'`` back), while the distances and derivative
    products stay on the device.
    """

    def __init__(self, sk_kernel, offset, nu):
        self.nu = float(nu)
        half = self.nu - 0.5
        self._closed_form = X.HalfIntegerMatern(self.nu) if half >= 1 and half == int(half) else None
        super().__init__(sk_kernel, offset, kind=-1)

    def _profile_xp(self, r2, grad, xp, p0, p1):
        if self._closed_form is not None:
            return self._closed_form(r2, grad, xp)
        device = backend.device_of(r2)
        f, fp = self._profile(backend.to_numpy(r2), grad)
        f = backend.to_namespace(f, xp, device=device, dtype=r2.dtype)
        return f, (None if fp is None else backend.to_namespace(fp, xp, device=device, dtype=r2.dtype))

    def _profile(self, r2, grad):
        nu = self.nu
        c = 2.0 ** (1.0 - nu) / gamma(nu)
        s = np.sqrt(2.0 * nu * r2)
        zero = s == 0.0
        with np.errstate(all="ignore"):
            f = c * s**nu * kv(nu, s)
        # s^nu K_nu(s) is 0 * inf at s -> 0 when kv overflows, and inf * 0 for large s
        # with large nu; the limits are 1 and 0.
        bad = ~np.isfinite(f)
        if bad.any():
            f[bad] = np.where(s[bad] < 1.0, 1.0, 0.0)
        f[zero] = 1.0
        f = f.astype(r2.dtype, copy=False)
        if not grad:
            return f, None
        with np.errstate(all="ignore"):
            fp = -c * nu * s ** (nu - 1.0) * kv(nu - 1.0, s)
        limit = -nu / (2.0 * (nu - 1.0)) if nu > 1.0 else 0.0
        bad = ~np.isfinite(fp)
        if bad.any():
            # Only near s = 0 (overflow of K_(nu-1)); large s underflows to 0 cleanly.
            fp[bad] = limit
        fp[zero] = limit
        return f, fp.astype(r2.dtype, copy=False)


# --------------------------------------------------------------------------------------
# constructors from sklearn kernels
# --------------------------------------------------------------------------------------
def _check_scale(sk_kernel, allow_ard):
    ls = np.squeeze(np.asarray(sk_kernel.length_scale, dtype=np.float64))
    if ls.ndim > 1:
        raise ValueError(f"{type(sk_kernel).__name__}: length_scale cannot be of dimension greater than 1")
    if ls.ndim == 1 and not allow_ard:
        raise ValueError(
            f"{type(sk_kernel).__name__} only supports an isotropic (scalar) length_scale, "
            "as in scikit-learn"
        )


def make_rbf(sk_kernel, offset):
    _check_scale(sk_kernel, allow_ard=True)
    return Stationary(sk_kernel, offset, P.RBF)


def make_feature_scaled_rbf(sk_kernel, offset):
    """A :class:`~._scaled_rbf.FeatureScaledRBF`: the feature scales' values are checked
    here, their count against X at the first evaluation."""
    _check_scale(sk_kernel, allow_ard=False)
    return Stationary(sk_kernel, offset, P.RBF, feature_scale=sk_kernel.checked_feature_scale())


_MATERN_KINDS = {0.5: P.MATERN12, 1.5: P.MATERN32, 2.5: P.MATERN52, math.inf: P.RBF}


def make_matern(sk_kernel, offset):
    _check_scale(sk_kernel, allow_ard=True)
    nu = float(sk_kernel.nu)
    if not nu > 0:
        raise ValueError(f"Matern: nu must be positive, got {nu}")
    if nu in _MATERN_KINDS:
        return Stationary(sk_kernel, offset, _MATERN_KINDS[nu])
    return GenericMatern(sk_kernel, offset, nu)


def make_rq(sk_kernel, offset):
    _check_scale(sk_kernel, allow_ard=False)
    return Stationary(sk_kernel, offset, P.RQ, profile_names=("alpha",))


def make_expsine(sk_kernel, offset):
    _check_scale(sk_kernel, allow_ard=False)
    return Stationary(
        sk_kernel, offset, P.EXPSINE, scale_name=None, profile_names=("length_scale", "periodicity")
    )
