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


def _sample_index(n_rows, rng, max_rows=MAX_ROWS):
    """The rows (an index, or a slice of all) that the methods work on."""
    if n_rows <= max_rows:
        return slice(None)
    return np.sort(rng.choice(n_rows, max_rows, replace=False))


def _subsample(X, rng, max_rows=MAX_ROWS):
    return X[_sample_index(X.shape[0], rng, max_rows)]


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


def class_shares(counts, n_points):
    """Points per class: one each, the rest in proportion to the class sizes (largest
    remainders), ``n_points`` in all; needs ``n_points >= len(counts)``."""
    counts = np.asarray(counts, dtype=np.float64)
    ideal = (n_points - counts.size) * counts / counts.sum()
    shares = np.floor(ideal).astype(int)
    # Ties in the remainders go to the earlier class (a stable sort), so that the same
    # data give the same points.
    extra = np.argsort(-(ideal - shares), kind="stable")[: n_points - counts.size - shares.sum()]
    shares[extra] += 1
    return shares + 1


def stratified_kmeans_centres(X, labels, n_inducing, rng):
    """k-means centres within each class of ``labels``, ``class_shares`` points a class.

    With one latent function per class every class needs inducing inputs where its own rows
    lie; k-means over all rows places them by the density of X alone and can leave a small
    or compact class with few (docs/constants.md).
    Falls back to :func:`kmeans_centres` of all rows when there are more classes than
    points or only one class.

    Parameters
    ----------
    X : ndarray of shape (N, D)
    labels : ndarray of shape (N,)
        The class (any sortable value) of each row.
    n_inducing : int
        Points wanted, fewer than the distinct rows of X.
    rng : numpy Generator

    Returns
    -------
    ndarray of shape (n_inducing, D), distinct rows, the classes interleaved in proportion to
    their shares (every leading block of rows holds each class)
    """
    classes, codes, counts = np.unique(labels, return_inverse=True, return_counts=True)
    if not 2 <= classes.size <= n_inducing:
        return kmeans_centres(distinct_rows(X), n_inducing, rng)
    parts = []
    for k, share in enumerate(class_shares(counts, n_inducing)):
        rows = distinct_rows(X[codes == k])
        parts.append(rows if rows.shape[0] <= share else kmeans_centres(rows, share, rng))
    # The classes interleaved, each in proportion to its share, so that the first rows hold
    # every class: a basis with a second set (n_orthogonal) takes the first n_inducing rows
    # for one set and the rest for the other.
    position = np.concatenate([(np.arange(len(part)) + 0.5) / len(part) for part in parts])
    order = np.argsort(position, kind="stable")
    # Rows that appear in two classes can give one centre twice; a class with fewer distinct
    # rows than its share leaves points over: both are made up from the other rows.
    centres = distinct_rows(np.vstack(parts)[order])
    if centres.shape[0] < n_inducing:
        extra = distinct_rows(np.vstack([centres, X]))[centres.shape[0] :]
        centres = np.vstack([centres, extra[: n_inducing - centres.shape[0]]])
    return centres[:n_inducing]


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


def initial_inducing(X, n_inducing, method, kernel, rng, strata=None):
    """Initial inducing inputs for ``inducing_init``.

    Parameters
    ----------
    X : ndarray of shape (N, D)
    n_inducing : int
        Wanted number of points; fewer are returned when X has fewer distinct rows.
    method : {"kmeans", "greedy_variance", "random"} or array of shape (M, D)
    kernel : compiled kernel, for "greedy_variance"
    rng : numpy Generator
    strata : ndarray of shape (N,), optional
        A class label per row: ``"kmeans"`` then places the points by
        :func:`stratified_kmeans_centres`. The other methods ignore it.

    Returns
    -------
    ndarray of shape (M, D)
    """
    if not isinstance(method, str):
        return np.array(method, dtype=np.float64)
    # Subsample before looking for distinct rows: np.unique(axis=0) of all rows would make
    # several copies of X (hundreds of MiB at a million rows).
    rows = _sample_index(X.shape[0], rng)
    unique = distinct_rows(X[rows])
    if unique.shape[0] <= n_inducing:
        return unique.astype(np.float64)
    if method == "kmeans" and strata is not None:
        return stratified_kmeans_centres(X[rows], np.asarray(strata)[rows], n_inducing, rng)
    if method == "kmeans":
        return kmeans_centres(unique, n_inducing, rng)
    if method == "greedy_variance":
        return greedy_variance(unique, n_inducing, kernel, rng)
    return random_rows(unique, n_inducing, rng)
