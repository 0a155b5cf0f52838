"""Pieces several bases need, written once over the arrays' namespace.

Every basis holds its q(u) factors as stacks (C, M, M) and receives the likelihood's
adjoints per row and output; these helpers work on those arrays with the primitives of
:mod:`skgp_sparse.linalg` and the Array API standard, so a result stays in its library and
on its device.
"""

from .. import backend as be
from ..linalg import jittered_cholesky


def blocks(stack):
    """The matrices of a stack (C, M, M) as a list, indexed as every library allows
    (array_api_strict does not iterate over an array's first axis)."""
    return [stack[c, ...] for c in range(stack.shape[0])]


def stack_blocks(parts, xp):
    """The matrices ``parts`` as a stack (C, M, M); one matrix becomes a view with a
    leading axis, not a copy."""
    return xp.expand_dims(parts[0], axis=0) if len(parts) == 1 else xp.stack(parts)


def summed_var_adjoint(d_var, n_covariances):
    """dF/dvar per covariance factor: with one factor shared by every output, the
    outputs' adjoints summed, shape (B, 1); with one factor per output, ``d_var``."""
    if n_covariances != 1:
        return d_var
    return be.namespace(d_var).sum(d_var, axis=1, keepdims=True)


def tape_var_adjoint(tape, d_var, n_covariances):
    """:func:`summed_var_adjoint` of ``d_var``, kept on ``tape`` (its ``d_var_key`` and
    ``h_sum``): the same array for the same ``d_var``, so that the backward pass and the
    natural step of one evaluation share the tape's caches keyed on it by identity,
    without comparing values (a read on a device)."""
    if getattr(tape, "d_var_key", None) is not d_var:
        tape.d_var_key, tape.h_sum = d_var, summed_var_adjoint(d_var, n_covariances)
    return tape.h_sum


def output_columns(n_covariances, c):
    """The outputs (columns of a (M, P) mean) that covariance ``c`` serves, as a slice:
    all of them when one covariance is shared, else output ``c`` alone."""
    return slice(None) if n_covariances == 1 else slice(c, c + 1)


def join_output_columns(parts, xp):
    """The (M, P) array whose columns are the parts of each covariance, in order (the
    inverse of :func:`output_columns`)."""
    return parts[0] if len(parts) == 1 else xp.concat(parts, axis=1)


def cross_and_diagonal(kernel, Z, X, need_grad):
    """K(Z, X) and the prior variances k(x, x) of the rows, with their reverse passes
    (``back_cross``, ``back_diag``; None without ``need_grad``).

    Returns
    -------
    k_cross, back_cross, kdiag, back_diag
    """
    if need_grad:
        k_cross, back_cross = kernel.kuf_vjp(Z, X)
        kdiag, back_diag = kernel.kff_diag_vjp(X)
        return k_cross, back_cross, kdiag, back_diag
    return kernel.kuf(Z, X), None, kernel.kff_diag(X), None


def factor_kzz(kernel, Z, jitter, need_grad):
    """Jittered Cholesky of K_zz; returns (L_k, relative jitter used, backward or None)."""
    if need_grad:
        kzz, back = kernel.kuu_vjp(Z)
    else:
        kzz, back = kernel.kuu(Z), None
    low_k, used = jittered_cholesky(kzz, jitter, what="K(Z, Z) of the inducing inputs")
    return low_k, used, back
