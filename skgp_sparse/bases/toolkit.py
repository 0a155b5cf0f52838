"""Array helpers shared by the bases, for numpy and any Array API library.

Every basis holds its q(u) factors as stacks (C, M, M) and receives the likelihood's
adjoints per row and output; these helpers are the pieces several bases need on those
arrays. They keep numpy on numpy's own calls (in place where it saves a temporary) and
use only the Array API standard elsewhere, so a result stays in its library and on its
device.
"""

import numpy as np

from .. import backend as be
from ..linalg import gram, jittered_cholesky, mm


def copy_array(a):
    """An independent copy of ``a``, in its library and on its device."""
    if isinstance(a, np.ndarray):
        return a.copy()
    return be.namespace(a).asarray(a, copy=True)


def own_points(points):
    """The namespace of ``points`` and a copy the state can own: numpy float64 for numpy
    (or array-like) input; otherwise an array of the points' library, on their device, in
    their floating dtype (float32 stays float32)."""
    xp = be.input_namespace(points)
    if be.is_numpy(xp):
        return xp, np.array(points, dtype=np.float64)
    return xp, xp.asarray(xp.astype(points, be.working_float(xp, points)), copy=True)


def same_values(a, b):
    """Whether two arrays of one library hold the same values (``np.array_equal`` for
    numpy; one bool read back from another library): the cache keys of the bases."""
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a.shape == b.shape and bool(be.namespace(a, b).all(a == b))


def blocks(stack):
    """The matrices of a stack (C, M, M) as a list, indexed as every library allows
    (array_api_strict does not iterate over an array's first axis)."""
    return [stack[c, ...] for c in range(stack.shape[0])]


def summed_var_adjoint(d_var, n_covariances):
    """dF/dvar per covariance factor: with one factor shared by every output, the
    outputs' adjoints summed, shape (B, 1); with one factor per output, ``d_var``."""
    if n_covariances != 1:
        return d_var
    if isinstance(d_var, np.ndarray):
        return d_var.sum(axis=1, keepdims=True)
    return be.namespace(d_var).sum(d_var, axis=1, keepdims=True)


def signed_gram(a, h):
    """A diag(h) A^T for A of shape (M, B): one SYRK when h has one sign (always, for
    a log-concave likelihood), a scaled gram when h is constant (Gaussian noise), a
    GEMM otherwise."""
    if isinstance(h, np.ndarray):
        if h[0] == h.min() == h.max():
            return h[0] * gram(a)
        if np.all(h <= 0):
            return -gram(a * np.sqrt(-h))
        if np.all(h >= 0):
            return gram(a * np.sqrt(h))
        return mm(a * h, a, trans_b=True)
    xp = be.namespace(a, h)
    if bool(xp.min(h) == xp.max(h)):
        return h[0] * gram(a)
    if bool(xp.all(h <= 0)):
        return -gram(a * xp.sqrt(-h))
    if bool(xp.all(h >= 0)):
        return gram(a * xp.sqrt(h))
    return mm(a * h, a, trans_b=True)


def factor_kzz(kernel, Z, jitter, need_grad):
    """Jittered Cholesky of K_zz; returns (L_k, relative jitter used, backward or None)."""
    if need_grad:
        kzz, back = kernel.vjp(Z)
    else:
        kzz, back = kernel(Z), None
    low_k, used = jittered_cholesky(kzz, jitter, what="K(Z, Z) of the inducing inputs")
    return low_k, used, back
