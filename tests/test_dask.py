"""Dask input: streamed training, lazy prediction, and model selection on a cluster."""

import joblib
import numpy as np
import pytest

da = pytest.importorskip("dask.array", reason="the dask extra is part of the test extra")
distributed = pytest.importorskip("distributed")

from sklearn.model_selection import GridSearchCV  # noqa: E402

from skgp_sparse import SparseGPClassifier, SparseGPRegressor  # noqa: E402
from skgp_sparse.fit import rows as fit_rows  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


def data(n=600, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 2))
    return X, np.sin(X[:, 0]) + 0.1 * rng.standard_normal(n), (X[:, 0] > 0).astype(int)


SETTINGS = dict(n_inducing=10, random_state=0)


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as c:
        yield c


def test_a_single_chunk_full_batch_fit_is_the_in_memory_fit():
    """Same rows, same steps: the streamed fit is the same optimisation (up to the order of a sum)."""
    X, y, labels = data()
    for est, target in ((SparseGPRegressor(**SETTINGS, batch_size=None, max_iter=5, tol=0), y),
                        (SparseGPClassifier(**SETTINGS, batch_size=None, max_iter=5, tol=0), labels)):
        in_memory = est.fit(X, target).predict(X)
        streamed = est.fit(da.from_array(X, chunks=(600, 2)), da.from_array(target, chunks=100)).predict(X)
        np.testing.assert_allclose(streamed, in_memory, rtol=1e-8, atol=1e-10)


def test_weighted_streamed_fit_is_the_weighted_in_memory_fit():
    """Sample weights (numpy or Dask) reach a streamed fit as they reach an in-memory one."""
    X, y, labels = data()
    weights = np.random.default_rng(1).integers(0, 3, size=600).astype(float)
    for est, target in ((SparseGPRegressor(**SETTINGS, batch_size=None, max_iter=5, tol=0), y),
                        (SparseGPClassifier(**SETTINGS, batch_size=None, max_iter=5, tol=0), labels)):
        # The classifier's probabilities, not its labels: weights move them, not always a label.
        outputs = (lambda e: e.predict(X)) if isinstance(est, SparseGPRegressor) else (lambda e: e.predict_proba(X))
        in_memory = outputs(est.fit(X, target, sample_weight=weights))
        streamed = outputs(est.fit(
            da.from_array(X, chunks=(600, 2)), da.from_array(target, chunks=100),
            sample_weight=da.from_array(weights, chunks=100),
        ))
        np.testing.assert_allclose(streamed, in_memory, rtol=1e-8, atol=1e-10)
        unweighted = outputs(est.fit(X, target))
        assert not np.allclose(unweighted, in_memory)


def test_fit_streams_one_chunk_at_a_time(monkeypatch):
    """No computation ever covers more rows than one chunk (the initial sample excepted,
    capped here at 150 rows), and every minibatch but an epoch's last is full."""
    monkeypatch.setattr(fit_rows, "MAX_ROWS", 150)
    X, y, _ = data()
    computed = []
    original = da.Array.compute

    def recording(self, **kwargs):
        computed.append(self.shape[0])
        return original(self, **kwargs)

    monkeypatch.setattr(da.Array, "compute", recording)
    sizes = []
    original_batches = fit_rows.DaskRows.batches

    def recording_batches(self, Y, batch_size):
        epoch = original_batches(self, Y, batch_size)

        def wrapped(rng):
            for xb, yb in epoch(rng):
                sizes.append(xb.shape[0])
                yield xb, yb

        return wrapped

    monkeypatch.setattr(fit_rows.DaskRows, "batches", recording_batches)
    reg = SparseGPRegressor(**SETTINGS, batch_size=64, max_iter=2, tol=0).fit(da.from_array(X, chunks=(130, 2)), y)
    # 4 full chunks per pass: two epochs, the pass that settles q(u), the pass of the final bound.
    assert max(computed) <= 150 and computed.count(130) == 4 * 4
    per_epoch = int(np.ceil(600 / 64))
    assert reg.n_steps_ == 2 * per_epoch and len(sizes) == 2 * per_epoch + 2 and sizes[-2:] == [600, 600]
    assert sizes[: per_epoch - 1] == [64] * (per_epoch - 1) and sum(sizes[:per_epoch]) == 600
    assert reg.score(X, y) > 0.9


def test_predictions_on_dask_arrays_are_lazy_and_equal_to_numpy():
    # Equal up to rounding: Dask predicts in chunks of 250 rows, numpy in chunks of 4096
    # (latent variances near the data are differences of O(1) terms: atol).
    X, y, labels = data()
    Xd = da.from_array(X, chunks=(250, 2))
    reg = SparseGPRegressor(**SETTINGS, max_iter=5).fit(X, y)
    mean = reg.predict(Xd)
    assert isinstance(mean, da.Array) and mean.chunks == ((250, 250, 100),)
    np.testing.assert_allclose(mean.compute(), reg.predict(X), rtol=1e-9, atol=1e-10)
    for lazy, eager in zip(reg.predict(Xd, return_std=True), reg.predict(X, return_std=True)):
        np.testing.assert_allclose(lazy.compute(), eager, rtol=1e-9, atol=1e-10)
    for lazy, eager in zip(reg.latent_mean_and_variance(Xd), reg.latent_mean_and_variance(X)):
        np.testing.assert_allclose(lazy.compute(), eager, rtol=1e-9, atol=1e-10)
    with pytest.raises(ValueError, match="return_cov"):
        reg.predict(Xd, return_cov=True)
    clf = SparseGPClassifier(**SETTINGS, max_iter=5).fit(X, np.array(["neg", "pos"])[labels])
    for name in ("predict_proba", "predict_log_proba", "predict", "latent_mean_and_variance"):
        lazy, eager = getattr(clf, name)(Xd), getattr(clf, name)(X)
        lazy, eager = (lazy, eager) if name != "latent_mean_and_variance" else (lazy[0], eager[0])
        assert isinstance(lazy, da.Array)
        result = lazy.compute()
        if name == "predict":
            np.testing.assert_array_equal(result, eager)
        else:
            np.testing.assert_allclose(result, eager, rtol=1e-9, atol=1e-10)


def test_dask_input_errors_name_the_problem(monkeypatch):
    X, y, _ = data()
    Xbad = X.copy()
    Xbad[400, 0] = np.nan
    reg = SparseGPRegressor(**SETTINGS, batch_size=64, max_iter=1)
    with pytest.raises(ValueError, match="NaN"):  # found in the initial sample
        reg.fit(da.from_array(Xbad, chunks=(100, 2)), y)
    monkeypatch.setattr(fit_rows, "MAX_ROWS", 20)
    with pytest.raises(ValueError, match=r"X contains NaN or inf \(rows \[400\]"):  # found when streamed
        reg.set_params(n_inducing=5).fit(da.from_array(Xbad, chunks=(100, 2)), y)
    monkeypatch.undo()
    with pytest.raises(ValueError, match="2D"):
        reg.fit(da.from_array(X[:, 0], chunks=100), y)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        reg.fit(da.from_array(X, chunks=(100, 2)), y[:-1])
    unknown = da.from_array(X, chunks=(100, 2))
    unknown = unknown[unknown[:, 0] > -10]
    with pytest.raises(ValueError, match="compute_chunk_sizes"):
        reg.fit(unknown, y)
    reg.fit(X, y)
    with pytest.raises(ValueError, match="X has 3 features"):
        reg.predict(da.ones((10, 3), chunks=5))


def test_partial_fit_takes_dask_chunks():
    X, y, labels = data()
    clf = SparseGPClassifier(**SETTINGS, batch_size=100)
    for _ in range(4):
        clf.partial_fit(da.from_array(X, chunks=(200, 2)), labels, classes=[0, 1], n_data=600)
    assert clf.n_rows_seen_ == 2400 and clf.score(X, labels) > 0.9


def test_fit_and_predict_on_a_local_cluster(client):
    X, y, _ = data()
    Xd = client.persist(da.from_array(X, chunks=(150, 2)))
    reg = SparseGPRegressor(**SETTINGS, batch_size=100, max_iter=10).fit(Xd, y)
    pred = reg.predict(Xd)
    assert isinstance(pred, da.Array)
    np.testing.assert_allclose(pred.compute(), reg.predict(X), rtol=1e-9, atol=1e-10)
    assert reg.score(X, y) > 0.95


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_grid_search_under_the_dask_joblib_backend_matches_sequential(client):
    """Every candidate changes the model (a grid over the learning rate did not: 300 rows
    are one batch, the rates tied to the last bits, and rounding that differs between CPUs
    chose the "best")."""
    X, y, _ = data(300)
    grid = {"n_inducing": [3, 5, 10], "normalize_y": [True, False]}
    est = SparseGPRegressor(random_state=0, max_iter=5)
    sequential = GridSearchCV(est, grid, cv=2).fit(X, y)
    with joblib.parallel_backend("dask"):
        on_cluster = GridSearchCV(est, grid, cv=2, n_jobs=-1).fit(X, y)
    scores = sequential.cv_results_["mean_test_score"]
    np.testing.assert_allclose(on_cluster.cv_results_["mean_test_score"], scores, rtol=1e-9, atol=1e-10)
    best, runner_up = np.sort(scores)[::-1][:2]
    assert best - runner_up > 1e-6, "the best candidate must win by more than rounding"
    assert on_cluster.best_params_ == sequential.best_params_


def test_a_streamed_many_class_fit_places_its_inducing_inputs_class_by_class(monkeypatch):
    # The classes of the streamed sample's rows (DaskRows.of_sample) group its k-means, as
    # in memory: with 600 of the 900 rows sampled, each class has a third of the 30 points.
    from .test_classifier import points_per_class_region, wide_and_compact_classes

    monkeypatch.setattr(fit_rows, "MAX_ROWS", 600)
    X, y = wide_and_compact_classes(3)
    clf = SparseGPClassifier(n_inducing=30, batch_size=128, max_iter=1, learn_inducing=False, random_state=0)
    clf.fit(da.from_array(X, chunks=(200, 1)), da.from_array(y, chunks=200))
    counts = points_per_class_region(clf.inducing_points_, 3)
    assert all(9 <= c <= 11 for c in counts), counts


def test_fourier_statistics_are_reduced_where_the_chunks_live(client, monkeypatch):
    """A Gaussian fit with Fourier features on a Dask array: each chunk's sums are made on
    the cluster and only they come back (X is never gathered: all_rows and the minibatch
    stream are not called), and the fit is the in-memory one."""
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern

    X, y, _ = data(n=2000)
    Xd = client.persist(da.from_array(X[:, :1], chunks=(300, 1)))
    settings = dict(kernel=ConstantKernel() * Matern(nu=1.5), inducing_features="fourier", n_inducing=31,
                    random_state=0)
    in_memory = SparseGPRegressor(**settings).fit(X[:, :1], y)

    def refuse(*args, **kwargs):
        raise AssertionError("X was gathered or streamed")

    monkeypatch.setattr(fit_rows.DaskRows, "all_rows", refuse)
    monkeypatch.setattr(fit_rows.DaskRows, "batches", refuse)
    distributed_fit = SparseGPRegressor(**settings).fit(Xd, y)
    assert distributed_fit.n_steps_ == 0
    np.testing.assert_allclose(distributed_fit.log_marginal_likelihood_value_,
                               in_memory.log_marginal_likelihood_value_, rtol=1e-9)
    np.testing.assert_allclose(distributed_fit.predict(X[:50, :1]), in_memory.predict(X[:50, :1]), rtol=1e-6,
                               atol=1e-8)
