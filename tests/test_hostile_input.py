"""Hostile and awkward input: a clear error that names the problem, or a correct model.

Cases already covered elsewhere (not repeated here): NaN/inf in the regressor's X and y,
unknown basis, n_inducing < 1 and n_orthogonal without an orthogonal set, n_inducing
above n_samples, a wrong-length length_scale and a non-finite ELBO (test_regressor.py);
a single class, continuous targets and a binary likelihood on three classes
(test_classifier.py).
"""

import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.gaussian_process.kernels import RBF

from skgp_sparse import SparseGPClassifier, SparseGPRegressor

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


def data(n=300, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, d))
    return X, np.sin(X[:, 0]) + 0.1 * rng.standard_normal(n), (X[:, 0] + 0.3 * X[:, 1] > 0).astype(int)


def regressor(**kw):
    return SparseGPRegressor(**{"n_inducing": 15, "max_iter": 10, "random_state": 0, **kw})


def classifier(**kw):
    return SparseGPClassifier(**{"n_inducing": 15, "max_iter": 10, "random_state": 0, **kw})


ESTIMATORS = {"regressor": (regressor, 1), "classifier": (classifier, 2)}


def make(kind, **kw):
    """(estimator, X, y) of one kind: y index 1 is the regression target, 2 the labels."""
    factory, target = ESTIMATORS[kind]
    d = data()
    return factory(**kw), d[0], d[target]


both = pytest.mark.parametrize("kind", sorted(ESTIMATORS))


def outputs(est, X):
    return est.predict(X) if isinstance(est, SparseGPRegressor) else est.predict_proba(X)


# --- errors that name the problem -------------------------------------------------------
@both
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_X_is_refused_at_fit_and_predict(kind, bad):
    est, X, y = make(kind)
    Xbad = X.copy()
    Xbad[5, 1] = bad
    with pytest.raises(ValueError, match="NaN" if np.isnan(bad) else "infinity"):
        est.fit(Xbad, y)
    est.fit(X, y)
    with pytest.raises(ValueError, match="NaN" if np.isnan(bad) else "infinity"):
        outputs(est, Xbad[:10])


@both
def test_one_dimensional_X_asks_for_a_reshape(kind):
    est, X, y = make(kind)
    with pytest.raises(ValueError, match="(?s)Expected 2D array.*reshape"):
        est.fit(X[:, 0], y)


@both
def test_mismatched_lengths_are_named(kind):
    est, X, y = make(kind)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        est.fit(X, y[:-1])


@both
def test_zero_rows_are_refused(kind):
    est, X, y = make(kind)
    with pytest.raises(ValueError, match="0 sample"):
        est.fit(X[:0], y[:0])


@both
def test_sparse_matrices_are_refused_with_the_fix(kind):
    est, X, y = make(kind)
    with pytest.raises(TypeError, match="dense data is required.*toarray"):
        est.fit(sp.csr_matrix(X), y)
    est.fit(X, y)
    with pytest.raises(TypeError, match="dense data is required"):
        outputs(est, sp.csr_matrix(X))


@both
def test_wrong_number_of_features_at_predict_is_named(kind):
    est, X, y = make(kind)
    est.fit(X, y)
    with pytest.raises(ValueError, match="X has 3 features, but .* is expecting 2 features"):
        outputs(est, np.ones((4, 3)))


@both
def test_every_method_before_fit_raises_not_fitted(kind):
    """Every method that needs a fit says so (the Gaussian regressor's predict and sample_y
    give the prior instead, as GaussianProcessRegressor's: tests/test_regressor.py)."""
    est, X, y = make(kind)
    methods = ["latent_mean_and_variance"] + (
        ["predict", "predict_proba", "predict_log_proba"] if kind == "classifier" else []
    )
    for name in methods:
        with pytest.raises(NotFittedError):
            getattr(est, name)(X[:3])
    with pytest.raises(NotFittedError):
        est.elbo(X, y)


@both
@pytest.mark.parametrize("param, value", [("max_iter", 0), ("n_inducing", 0), ("batch_size", 0)])
def test_counts_below_one_are_refused_by_name(kind, param, value):
    est, X, y = make(kind, **{param: value})
    with pytest.raises(ValueError, match=param):
        est.fit(X, y)


def test_classifier_clips_n_inducing_and_checks_the_length_scale():
    est, X, y = make("classifier", n_inducing=50, max_iter=2)
    with pytest.warns(UserWarning, match="n_inducing=50"):
        est.fit(X[:30], y[:30])
    assert est.inducing_points_.shape[0] == 30
    with pytest.raises(ValueError, match="length_scale"):
        classifier(kernel=RBF([1.0, 1.0, 1.0])).fit(X, y)


# --- a correct model -------------------------------------------------------------------
def test_one_row_fits_and_predicts_its_target():
    X, y, _ = data()
    with pytest.warns(UserWarning, match="n_inducing"):
        reg = regressor().fit(X[:1], y[:1])
    mean, std = reg.predict(X[:3], return_std=True)
    assert np.all(np.isfinite(mean)) and np.all(std > 0)
    # With one observation and normalize_y, the prior mean is that observation.
    np.testing.assert_allclose(mean, y[0], rtol=1e-6)


@both
def test_duplicated_rows_give_a_correct_model(kind):
    est, X, y = make(kind)
    # 6 distinct rows, each 50 times: fewer distinct rows than n_inducing.
    Xd, yd = np.repeat(X[:6], 50, axis=0), np.repeat(y[:6], 50)
    if kind == "classifier":
        yd = np.repeat(np.array([0, 1, 0, 1, 1, 0]), 50)
    est.fit(Xd, yd)
    assert est.inducing_points_.shape[0] == 6
    assert np.all(np.isfinite(est.loss_curve_))
    if kind == "regressor":
        np.testing.assert_allclose(est.predict(X[:6]), y[:6], atol=0.1)
    else:
        np.testing.assert_array_equal(est.predict(X[:6]), yd[::50])


@both
def test_a_constant_feature_changes_nothing_that_matters(kind):
    est, X, y = make(kind, max_iter=20)
    Xt, yt = data(200, seed=1)[0], data(200, seed=1)[1 if kind == "regressor" else 2]
    base = est.fit(X, y).score(Xt, yt)
    with_constant = est.fit(np.column_stack([X, np.full(len(X), 7.0)]), y).score(
        np.column_stack([Xt, np.full(len(Xt), 7.0)]), yt
    )
    assert np.isfinite(with_constant) and abs(with_constant - base) < 0.02


@both
@pytest.mark.parametrize("scale", [1e-6, 1e6])
def test_feature_scale_does_not_matter(kind, scale):
    """The default kernel's length scales and the inducing steps follow each feature's spread."""
    est, X, y = make(kind, max_iter=20)
    Xt, yt = data(200, seed=1)[0], data(200, seed=1)[1 if kind == "regressor" else 2]
    unit = est.fit(X, y).score(Xt, yt)
    scaled = est.fit(X * scale, y).score(Xt * scale, yt)
    assert unit > 0.9 and scaled == pytest.approx(unit, abs=0.01)
    # y depends on the first feature alone: its length scale follows the features' unit
    # (the second one's may run to its upper bound, as in GaussianProcessRegressor).
    # The default kernel: amplitude * RBF, plus a constant for the binary classifier.
    rbf = est.kernel_.k1.k2 if kind == "classifier" else est.kernel_.k2
    length = rbf.length_scale
    assert 1e-2 * scale < length[0] < 1e2 * scale


@pytest.mark.parametrize("scale", [1e-6, 1e6])
def test_target_scale_does_not_matter(scale):
    X, y, _ = data()
    unit = regressor().fit(X, y)
    scaled = regressor().fit(X, y * scale)
    # Full-batch fits stop at L-BFGS-B's tolerance, so rounding in the normalised targets
    # moves the fitted hyperparameters (and the predictions) by about that much.
    # The tolerance is relative to the predictions' scale: a prediction near zero moves by
    # as much as the others in absolute terms.
    expected = unit.predict(X[:20]) * scale
    np.testing.assert_allclose(scaled.predict(X[:20]), expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def _as_memmap(X, tmp_path):
    mm = np.lib.format.open_memmap(tmp_path / "X.npy", mode="w+", dtype=X.dtype, shape=X.shape)
    mm[:] = X
    mm.flush()
    return np.load(tmp_path / "X.npy", mmap_mode="r")


@both
@pytest.mark.parametrize("form", ["int", "float32", "memmap", "read_only"])
def test_array_types_fit_the_same_model_as_float64(kind, form, tmp_path):
    est, X, y = make(kind)
    X = np.round(X * 10)  # integral values so that the int form holds the same numbers
    if form == "int":
        Xf = X.astype(np.int32)
    elif form == "float32":
        Xf = X.astype(np.float32)
    elif form == "memmap":
        Xf = _as_memmap(X, tmp_path)
    else:
        Xf = X.copy()
        Xf.setflags(write=False)
    reference = outputs(est.fit(X, y), X[:20])
    other = outputs(est.fit(Xf, y), Xf[:20])
    assert other.dtype == np.float64
    np.testing.assert_allclose(other, reference, rtol=1e-9, atol=1e-12)


@both
def test_pandas_input_keeps_feature_names(kind):
    est, X, y = make(kind)
    frame = pd.DataFrame(X, columns=["age", "height"])
    est.fit(frame, pd.Series(y))
    np.testing.assert_array_equal(est.feature_names_in_, ["age", "height"])
    np.testing.assert_allclose(outputs(est, frame.iloc[:5]), outputs(est.fit(X, y), X[:5]))
    est.fit(frame, y)
    with pytest.raises(ValueError, match="feature names"):
        outputs(est, frame.rename(columns={"age": "weight"}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        outputs(est, frame.iloc[:5])


def test_classifier_with_pandas_string_labels():
    X, _, labels = data()
    y = pd.Series(np.array(["no", "yes"])[labels], dtype="category")
    clf = classifier().fit(pd.DataFrame(X, columns=["a", "b"]), y)
    assert list(clf.classes_) == ["no", "yes"]
    assert np.mean(clf.predict(pd.DataFrame(X, columns=["a", "b"])) == y.to_numpy()) > 0.9


def test_string_regression_targets_get_gprs_message():
    """numpy string targets: converted where they are numbers, refused as
    GaussianProcessRegressor refuses them where they are not (not a matmul error)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 2))
    with pytest.raises(ValueError, match="could not convert string to float: 'a'"):
        SparseGPRegressor(n_inducing=5, max_iter=2).fit(X, np.array(["a", "b"] * 10))
    numbers = np.array(["1.5", "2"] * 10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        as_text = SparseGPRegressor(n_inducing=5, max_iter=2, random_state=0).fit(X, numbers)
        as_float = SparseGPRegressor(n_inducing=5, max_iter=2, random_state=0).fit(X, numbers.astype(float))
    np.testing.assert_array_equal(as_text.predict(X), as_float.predict(X))


def test_labels_of_mixed_types_are_refused_by_name():
    X = np.random.default_rng(0).normal(size=(20, 2))
    mixed = np.array([1, "a"] * 10, dtype=object)
    with pytest.raises(ValueError, match=r"y mixes labels of types \['int', 'str'\]"):
        SparseGPClassifier(n_inducing=5, max_iter=2).fit(X, mixed)
    with pytest.raises(ValueError, match=r"classes mixes labels of types"):
        SparseGPClassifier(n_inducing=5).partial_fit(X, mixed.astype(str), classes=np.array([1, "a"], dtype=object))


@pytest.mark.parametrize("make_estimator", [SparseGPRegressor, SparseGPClassifier])
def test_the_default_n_inducing_adapts_to_small_data_without_a_warning(make_estimator):
    """Fewer rows than the default 256 inducing inputs: every row is one, and no warning
    about a value the user never chose (a chosen value still warns: tests above)."""
    X, y, labels = data()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="n_inducing", category=UserWarning)
        est = make_estimator(max_iter=2, random_state=0)
        est.fit(X[:40], (y if make_estimator is SparseGPRegressor else labels)[:40])
    assert est.inducing_points_.shape[0] == 40


def test_warnings_name_the_users_line():
    """A warning about a fit names the line that called it, through scikit-learn's model
    selection too, not a line of the library."""
    from sklearn.model_selection import cross_val_score

    X, y, _ = data()
    with pytest.warns(UserWarning) as caught:
        SparseGPRegressor(n_inducing=500, batch_size=20, max_iter=1, random_state=0).fit(X, y)
    with pytest.warns(UserWarning) as through_cv:
        cross_val_score(SparseGPRegressor(n_inducing=500, batch_size=20, max_iter=1, random_state=0), X, y, cv=2)
    for record in list(caught) + list(through_cv):
        assert record.filename == __file__, (record.category.__name__, record.filename)
    assert {r.category for r in caught} >= {UserWarning, ConvergenceWarning}
