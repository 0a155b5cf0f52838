"""Initial inducing inputs placed class by class (issue 35)."""

import numpy as np
import pytest

from skgp_sparse.inducing import class_shares, initial_inducing, kmeans_centres, stratified_kmeans_centres


def wide_and_compact(n_per_class=500, seed=0):
    """One feature: class 0 spread over [-100, 0], class 1 packed into [1, 2]. k-means over
    all rows places points by a power of the density that favours the wide class, so the
    compact one gets about one point in twenty."""
    rng = np.random.default_rng(seed)
    X = np.concatenate([rng.uniform(-100, 0, n_per_class), rng.uniform(1, 2, n_per_class)])[:, None]
    return X, np.repeat([0, 1], n_per_class)


@pytest.mark.parametrize("counts, n_points, expected", [
    ([692] * 26, 256, [10] * 22 + [9] * 4),
    ([900, 100], 20, [17, 3]),
    ([1, 1, 100], 3, [1, 1, 1]),
    ([5, 3, 2], 7, [3, 2, 2]),
])
def test_class_shares_give_each_class_one_point_and_the_rest_by_size(counts, n_points, expected):
    shares = class_shares(counts, n_points)
    assert shares.tolist() == expected
    assert shares.sum() == n_points


def test_each_class_gets_its_share_of_the_points():
    X, y = wide_and_compact()
    rng = np.random.default_rng(0)
    Z = stratified_kmeans_centres(X, y, 20, rng)
    assert Z.shape == (20, 1)
    assert np.unique(Z, axis=0).shape[0] == 20
    assert np.sum(Z[:, 0] > 0.5) == 10
    # What the stratification changes: k-means over all rows leaves the compact class few.
    assert np.sum(kmeans_centres(X, 20, np.random.default_rng(0))[:, 0] > 0.5) <= 3


def test_a_class_with_fewer_distinct_rows_than_its_share_gives_them_all_and_the_rest_is_made_up():
    X, y = wide_and_compact()
    X[y == 1] = np.round(X[y == 1])  # class 1: 500 rows, 2 distinct (1.0 and 2.0); share 10
    Z = stratified_kmeans_centres(X, y, 20, np.random.default_rng(0))
    assert Z.shape == (20, 1)
    assert np.unique(Z, axis=0).shape[0] == 20
    assert sorted(Z[Z[:, 0] > 0.5, 0].tolist()) == [1.0, 2.0]


def test_more_classes_than_points_fall_back_to_kmeans_over_all_rows():
    X, y = wide_and_compact()
    labels = np.arange(X.shape[0]) % 30
    Z = stratified_kmeans_centres(X, labels, 20, np.random.default_rng(0))
    assert np.array_equal(Z, kmeans_centres(X, 20, np.random.default_rng(0)))


def test_strata_change_only_kmeans_and_the_same_seed_gives_the_same_points():
    X, y = wide_and_compact()
    first = initial_inducing(X, 20, "kmeans", None, np.random.default_rng(1), strata=y)
    again = initial_inducing(X, 20, "kmeans", None, np.random.default_rng(1), strata=y)
    assert np.array_equal(first, again)
    assert np.sum(first[:, 0] > 0.5) == 10
    random = initial_inducing(X, 20, "random", None, np.random.default_rng(1), strata=y)
    assert np.array_equal(random, initial_inducing(X, 20, "random", None, np.random.default_rng(1)))


def test_the_classes_are_interleaved_so_that_every_prefix_holds_each_class():
    # A basis with a second set takes the first n_inducing rows for one set and the rest for
    # the other: each set must hold every class.
    X, y = wide_and_compact()
    Z = stratified_kmeans_centres(X, y, 20, np.random.default_rng(0))
    assert [int(np.sum(Z[:n, 0] > 0.5)) for n in (2, 10, 20)] == [1, 5, 10]
