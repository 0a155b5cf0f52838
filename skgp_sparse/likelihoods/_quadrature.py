"""Gauss-Hermite rules for expectations under the Gaussian marginals of a latent function."""

import numpy as np
from numpy.polynomial.hermite import hermgauss

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
    """
    x, w = hermgauss(int(n_points))
    return x, w * _INV_SQRT_PI


def latent_nodes(nodes, mean, var):
    """f at every node, array of shape (n, n_points), for mean and var of shape (n, 1).

    Negative variances (rounding error in a difference of Gram terms) count as zero.
    """
    mean = np.asarray(mean, dtype=float).reshape(-1, 1)
    spread = np.sqrt(2.0 * np.maximum(np.asarray(var, dtype=float).reshape(-1, 1), 0.0))
    return mean + spread * nodes
