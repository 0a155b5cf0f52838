"""The numpy back end of the fused passes: elementwise passes over (M x B) arrays, one
numba loop each.

A step of the coupled basis touches several M x B arrays; done with numpy expressions
each term costs a temporary and a pass over memory, which at M=256, B=1024 adds up to
about a millisecond per step. Each function states its numpy equivalent, which is what the
Array API back end (:mod:`._array_api`) evaluates for every other library. The bases call
them through the front door (:mod:`skgp_sparse.linalg`).
"""

import numba
import numpy as np


@numba.njit(cache=True, fastmath=False)
def a_adjoint_inplace(s_a, a, q_mean, d_mean, h):
    """Overwrite ``s_a`` (holding S A) with dF/dA of the coupled marginals.

    numpy equivalent: ``q_mean @ d_mean.T + 2 * (s_a - a) * h`` with ``h`` of shape (B,).
    """
    m, b = s_a.shape
    p = q_mean.shape[1]
    for i in range(m):
        for j in range(b):
            acc = 2.0 * (s_a[i, j] - a[i, j]) * h[j]
            for k in range(p):
                acc += q_mean[i, k] * d_mean[j, k]
            s_a[i, j] = acc
    return s_a


@numba.njit(cache=True)
def add_scaled_difference_inplace(out, s_a, a, h):
    """``out += 2 * (s_a - a) * h``: the extra covariances of a multi-covariance state."""
    m, b = out.shape
    for i in range(m):
        for j in range(b):
            out[i, j] += 2.0 * (s_a[i, j] - a[i, j]) * h[j]
    return out


@numba.njit(cache=True)
def folded_adjoint_inplace(w_k, alpha, d_mean, h):
    """Overwrite ``w_k`` (holding W K_zx) with dF/dK_zx of the folded coupled marginals.

    numpy equivalent: ``alpha @ d_mean.T + 2 * w_k * h`` with ``h`` of shape (B,).
    """
    m, b = w_k.shape
    p = alpha.shape[1]
    for i in range(m):
        for j in range(b):
            acc = 2.0 * w_k[i, j] * h[j]
            for k in range(p):
                acc += alpha[i, k] * d_mean[j, k]
            w_k[i, j] = acc
    return w_k


@numba.njit(cache=True)
def add_scaled_inplace(out, w_k, h):
    """``out += 2 * w_k * h``: the extra covariances of a multi-covariance folded state."""
    m, b = out.shape
    for i in range(m):
        for j in range(b):
            out[i, j] += 2.0 * w_k[i, j] * h[j]
    return out


@numba.njit(cache=True)
def add_column_products(base, a, b, out_col):
    """``base + colsum(a * b)`` written into ``out_col``."""
    m, n = a.shape
    for j in range(n):
        out_col[j] = base[j]
    for i in range(m):
        for j in range(n):
            out_col[j] += a[i, j] * b[i, j]
    return out_col


@numba.njit(cache=True)
def prior_minus_squares(kdiag, a):
    """``kdiag - colsum(a * a)`` for a of shape (M, B)."""
    m, b = a.shape
    out = kdiag.copy()
    for i in range(m):
        for j in range(b):
            out[j] -= a[i, j] * a[i, j]
    return out


def column_variances(kdiag, a, lt_a_list):
    """var_c = kdiag - colsum(A^2) + colsum((L_c^T A)^2) for each covariance, (B, C)."""
    prior = prior_minus_squares(kdiag, a)
    var = np.empty((len(lt_a_list), a.shape[1]), dtype=a.dtype)
    for c, lta in enumerate(lt_a_list):
        add_column_products(prior, lta, lta, var[c])
    return var.T
