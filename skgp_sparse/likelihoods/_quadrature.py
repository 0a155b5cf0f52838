"""Gauss-Hermite rules for expectations under the Gaussian marginals of a latent function,
and the preparation of a method's inputs in any array namespace."""

import numpy as np
from numpy.polynomial.hermite import hermgauss

from .. import backend, linalg

_INV_SQRT_PI = 1.0 / np.sqrt(np.pi)


def check_n_points(n_points):
    """``n_points`` as an int, or ValueError unless it is a whole number >= 1."""
    try:
        count = int(n_points)
    except (TypeError, ValueError):
        count = None
    if count is None or count != n_points or count < 1 or isinstance(n_points, bool):
        raise ValueError(f"n_points must be a positive integer, got {n_points!r}")
    return count


def gauss_hermite(n_points):
    """Nodes x and weights w with E_{N(f | m, v)}[g(f)] ~= sum_i w_i g(m + sqrt(2 v) x_i).

    The weights sum to one: the physicists' weight exp(-x^2) is divided by sqrt(pi).
    Both are numpy float64 arrays; :func:`rule_like` puts them next to other arrays.
    """
    x, w = hermgauss(int(n_points))
    return x, w * _INV_SQRT_PI


def rule_like(nodes, weights, like):
    """Host ``nodes`` and ``weights`` in the namespace, on the device and of the dtype of
    the array ``like`` (the host arrays themselves for numpy; cached per device and
    dtype otherwise, see :func:`skgp_sparse.backend.constant`)."""
    return backend.constant(nodes, like), backend.constant(weights, like)


def latent_nodes(nodes, mean, var, xp=np):
    """f at every node, array of shape (n, n_points), for mean and var of shape (n, 1).

    Negative variances (rounding error in a difference of Gram terms) count as zero.
    ``mean`` and ``var`` are arrays of the namespace ``xp`` as the likelihood's entry
    made them (:meth:`skgp_sparse.likelihoods.Likelihood._inputs`), ``nodes`` of theirs.
    """
    mean = xp.reshape(mean, (-1, 1))
    spread = xp.sqrt(2.0 * xp.clip(xp.reshape(var, (-1, 1)), min=0.0))
    return mean + spread * nodes


def variance_derivative(slope_moment, var, floor, half_curvature, *operands):
    """Per-row derivative in v of the quadrature sum sum_i w_i g(m + sqrt(2 v) x_i).

    It is sum_i w_i g'(f_i) x_i / sqrt(2 v), the exact derivative of the value the
    likelihood reports, so that a gradient assembled from it matches finite differences
    of the bound at any number of nodes. That form divides by sqrt(v), and cancels
    between symmetric nodes as v shrinks, so rows with v <= ``floor`` take instead
    d/dv E[g(f)] = 0.5 E[g''(f)] (Opper & Archambeau, 2009), which stays finite at v = 0;
    below a floor where the quadrature is exact to rounding the two forms agree.

    Parameters
    ----------
    slope_moment : array of shape (n,)
        sum_i w_i g'(f_i) x_i per row, g' the derivative in f.
    var : array of shape (n,) or (n, 1)
        The rows' variances; negative ones count as zero.
    floor : float
        The variance at and below which a row takes ``half_curvature``.
    half_curvature : callable
        ``half_curvature(*row_operands)`` -> array of shape (k,): 0.5 E[g''(f)] of the
        rows given, written in operators (:func:`skgp_sparse.linalg.update_rows`).
    *operands : arrays whose first axis has length n

    Returns
    -------
    array of shape (n,)
    """
    xp = backend.namespace(slope_moment)
    var = xp.reshape(var, (-1,))
    d_var = slope_moment / xp.sqrt(2.0 * xp.clip(var, min=floor))
    return linalg.update_rows(d_var, var <= floor, half_curvature, *operands)
