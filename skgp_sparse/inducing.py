"""Initial inducing inputs: k-means centres, greedy variance (pivoted Cholesky), random rows.

Every method returns distinct points: coincident inducing inputs make K_zz singular.
"""

import warnings

import numpy as np
from sklearn.cluster import KMeans

#: Rows considered at most; beyond this the methods work on a random subsample, as the
#: extra rows barely move k-means centres or the greedy choice (RobustGP does the same).
MAX_ROWS = 20_000

METHODS = ("kmeans", "greedy_variance", "random")


def _subsample(X, rng, max_rows=MAX_ROWS):
    if X.shape[0] <= max_rows:
        return X
    return X[np.sort(rng.choice(X.shape[0], max_rows, replace=False))]


def distinct_rows(X):
    """The distinct rows of X, in order of first appearance."""
    _, first = np.unique(X, axis=0, return_index=True)
    return X[np.sort(first)]


def kmeans_centres(X, n_inducing, rng):
    """k-means centres (one Lloyd run from k-means++ seeds) of at most MAX_ROWS rows."""
    sample = _subsample(X, rng)
    km = KMeans(n_clusters=n_inducing, n_init=1, max_iter=50, random_state=rng.integers(2**31 - 1))
    with warnings.catch_warnings():
        # Fewer distinct clusters than asked is handled below, by topping up.
        warnings.simplefilter("ignore")
        km.fit(sample)
    centres = distinct_rows(km.cluster_centers_)
    if centres.shape[0] < n_inducing:
        extra = distinct_rows(np.vstack([centres, sample]))[centres.shape[0] :]
        centres = np.vstack([centres, extra[: n_inducing - centres.shape[0]]])
    return centres


def greedy_variance(X, n_inducing, kernel, rng):
    """Rows chosen one by one where the posterior variance given the chosen ones is largest.

    This is the partial pivoted Cholesky of K(X, X) (Burt et al. 2020's "conditional
    variance" initialisation): O(N M^2) time, O(N M) memory, on at most MAX_ROWS rows.

    Parameters
    ----------
    X : ndarray of shape (N, D), distinct rows
    n_inducing : int
    kernel : callable with ``kernel(A, B)`` and ``kernel.diag(A)``
    rng : numpy Generator
    """
    sample = _subsample(X, rng)
    n = sample.shape[0]
    m = min(n_inducing, n)
    residual = np.array(kernel.diag(sample), dtype=np.float64)
    factor = np.zeros((m, n))
    chosen = np.empty(m, dtype=int)
    for j in range(m):
        pivot = int(np.argmax(residual))
        chosen[j] = pivot
        if residual[pivot] <= 1e-12 * max(1.0, float(np.max(kernel.diag(sample[:1])))):
            # The chosen points already explain every row: the remaining ones are picked
            # at random among those not chosen yet.
            rest = np.setdiff1d(np.arange(n), chosen[:j])
            chosen[j:] = rng.choice(rest, m - j, replace=False)
            break
        column = kernel(sample, sample[pivot : pivot + 1])[:, 0] - factor[:j].T @ factor[:j, pivot]
        factor[j] = column / np.sqrt(residual[pivot])
        residual -= factor[j] ** 2
        residual[chosen[: j + 1]] = -np.inf
    return sample[chosen]


def random_rows(X, n_inducing, rng):
    """Distinct training rows chosen uniformly at random."""
    return X[np.sort(rng.choice(X.shape[0], n_inducing, replace=False))]


def initial_inducing(X, n_inducing, method, kernel, rng):
    """Initial inducing inputs for ``inducing_init``.

    Parameters
    ----------
    X : ndarray of shape (N, D)
    n_inducing : int
        Wanted number of points; fewer are returned when X has fewer distinct rows.
    method : {"kmeans", "greedy_variance", "random"} or array of shape (M, D)
    kernel : compiled kernel, for "greedy_variance"
    rng : numpy Generator

    Returns
    -------
    ndarray of shape (M, D)
    """
    if not isinstance(method, str):
        return np.array(method, dtype=np.float64)
    # Subsample before looking for distinct rows: np.unique(axis=0) of all rows would make
    # several copies of X (hundreds of MiB at a million rows).
    unique = distinct_rows(_subsample(X, rng))
    if unique.shape[0] <= n_inducing:
        return unique.astype(np.float64)
    if method == "kmeans":
        return kmeans_centres(unique, n_inducing, rng)
    if method == "greedy_variance":
        return greedy_variance(unique, n_inducing, kernel, rng)
    return random_rows(unique, n_inducing, rng)
