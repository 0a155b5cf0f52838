"""SparseGPClassifier: probabilities, labels, errors, persistence, and the multi-latent maths."""

import io
import pickle

import joblib
import numpy as np
import pytest
from scipy.special import ndtr
from sklearn.base import clone
from sklearn.datasets import make_blobs, make_moons
from sklearn.gaussian_process.kernels import RBF, ConstantKernel
from sklearn.metrics import log_loss
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skgp_sparse import SparseGPClassifier
from skgp_sparse._estimators.classifier import SHARED_LENGTH_SCALE_FEATURES
from skgp_sparse.bases import coupled
from skgp_sparse.elbo import VariationalModel
from skgp_sparse.fit.training import inducing_step_scale
from skgp_sparse.kernels import FeatureScaledRBF, compile_kernel
from skgp_sparse.likelihoods import BernoulliLikelihood, RobustMaxLikelihood, SoftmaxLikelihood

from ._reference_kernel import ReferenceRBF
from ._gradcheck import assert_adam_gradients_match

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


def moons(n=300, seed=0):
    return make_moons(n, noise=0.2, random_state=seed)


def blobs(n=400, k=4, seed=0):
    X, y = make_blobs(n, centers=k, cluster_std=0.8, random_state=seed)
    return StandardScaler().fit_transform(X), y


def small(**params):
    return SparseGPClassifier(**{"n_inducing": 20, "batch_size": 128, "max_iter": 30, "random_state": 0, **params})


# --- predictions ------------------------------------------------------------------
def test_binary_probit_probability_is_the_closed_form():
    X, y = moons()
    clf = small().fit(X, y)
    mean, var = clf.latent_mean_and_variance(X)
    assert mean.shape == var.shape == (X.shape[0],) and np.all(var > 0)
    proba = clf.predict_proba(X)
    np.testing.assert_allclose(proba[:, 1], ndtr(mean / np.sqrt(1.0 + var)), rtol=1e-12)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_allclose(clf.predict_log_proba(X), np.log(proba))


@pytest.mark.parametrize("likelihood", ["probit", "logit"])
def test_binary_accuracy_on_moons(likelihood):
    X, y = moons(600)
    clf = small(likelihood=likelihood, max_iter=60).fit(X[:400], y[:400])
    assert clf.likelihood_ == likelihood
    assert clf.score(X[400:], y[400:]) > 0.9
    # The fit is far above the prior q(u) from its first epoch on (the stream starts from
    # the exact search's q): under the prior each row's expected log-likelihood is at most
    # log E[p(y | f)] = log(1/2) (Jensen; f is symmetric about zero), 400 rows in all.
    prior_at_most = -400 * np.log(2.0)
    assert clf.loss_curve_[0] > prior_at_most + 150
    assert clf.loss_curve_[-1] > prior_at_most + 150


@pytest.mark.parametrize("class_covariance, n_covariances", [("shared", 1), ("per_class", 4)])
@pytest.mark.parametrize("likelihood", ["robustmax", "softmax"])
def test_multiclass_predicts_every_class(likelihood, class_covariance, n_covariances):
    X, y = blobs(500)
    clf = small(likelihood=likelihood, class_covariance=class_covariance, max_iter=40).fit(X[:400], y[:400])
    assert clf.variational_state_.q_sqrt.shape[0] == n_covariances
    assert clf.variational_state_.q_mean.shape[1] == 4  # one mean per class either way
    pred = clf.predict(X[400:])
    assert set(pred) == {0, 1, 2, 3}
    assert clf.score(X[400:], y[400:]) > 0.9
    proba = clf.predict_proba(X[400:])
    assert proba.shape == (100, 4)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(pred, clf.classes_[proba.argmax(axis=1)])
    mean, var = clf.latent_mean_and_variance(X[:5])
    assert mean.shape == var.shape == (5, 4)
    if class_covariance == "shared":
        # One covariance: every class has the same predictive variance at a row.
        np.testing.assert_array_equal(var, np.broadcast_to(var[:, :1], var.shape))


def test_class_covariance_plays_no_part_with_one_latent():
    X, y = moons(200)
    shared = small(max_iter=3).fit(X, y)
    per_class = small(max_iter=3, class_covariance="per_class").fit(X, y)
    assert per_class.variational_state_.q_sqrt.shape[0] == 1
    np.testing.assert_array_equal(shared.predict_proba(X), per_class.predict_proba(X))


def test_warm_start_keeps_the_covariances_of_the_fit_it_continues():
    X, y = blobs(200, k=3)
    clf = small(max_iter=2, warm_start=True, class_covariance="per_class").fit(X, y)
    clf.set_params(class_covariance="shared").fit(X, y)
    assert clf.variational_state_.q_sqrt.shape[0] == 3


def test_auto_likelihood_and_latent_counts():
    X, y = blobs(300, k=3)
    assert small(max_iter=2).fit(X, y).likelihood_ == "robustmax"
    binary = small(max_iter=2).fit(X[y < 2], y[y < 2])
    assert binary.likelihood_ == "probit" and binary.variational_state_.q_mean.shape[1] == 1
    # the multi-latent likelihoods also serve two classes, with two latents
    two = small(max_iter=2, likelihood="softmax").fit(X[y < 2], y[y < 2])
    assert two.variational_state_.q_mean.shape[1] == 2 and two.predict_proba(X[:3]).shape == (3, 2)


def test_string_labels_come_back_as_labels():
    X, y = blobs(300, k=3)
    names = np.array(["setosa", "versicolor", "virginica"])[y]
    clf = small(max_iter=20).fit(X, names)
    assert list(clf.classes_) == ["setosa", "versicolor", "virginica"]
    pred = clf.predict(X)
    assert pred.dtype == names.dtype and np.mean(pred == names) > 0.9
    assert np.isfinite(clf.elbo(X, names))
    with pytest.raises(ValueError, match="not seen in fit"):
        clf.elbo(X[:2], ["setosa", "rose"])


def test_one_class_and_continuous_targets_are_refused():
    X, _ = moons(50)
    with pytest.raises(ValueError, match="at least 2 classes"):
        small().fit(X, np.zeros(50))
    with pytest.raises(ValueError, match="Unknown label type"):
        small().fit(X, np.linspace(0, 1, 50))
    X3, y3 = blobs(60, k=3)
    with pytest.raises(ValueError, match="two classes"):
        small(likelihood="logit").fit(X3, y3)


def test_elbo_of_the_training_data_is_close_to_the_last_epoch():
    X, y = moons(256)
    clf = small(batch_size=None, max_iter=20).fit(X, y)
    elbo = clf.elbo(X, y)
    assert elbo < 0 and abs(elbo - clf.loss_curve_[-1]) < 0.05 * abs(elbo)


# --- estimator plumbing ---------------------------------------------------------------
def test_pickle_and_joblib_round_trips_predict_identically():
    X, y = blobs(200, k=3)
    clf = small(max_iter=3).fit(X, y)
    again = pickle.loads(pickle.dumps(clf))
    buf = io.BytesIO()
    joblib.dump(clf, buf)
    buf.seek(0)
    loaded = joblib.load(buf)
    for other in (again, loaded):
        np.testing.assert_array_equal(clf.predict_proba(X), other.predict_proba(X))


def test_grid_search_over_n_inducing_in_a_pipeline():
    X, y = moons(300)
    pipe = make_pipeline(StandardScaler(), small(max_iter=10))
    grid = GridSearchCV(pipe, {"sparsegpclassifier__n_inducing": [3, 20]}, cv=2).fit(X, y)
    assert grid.best_params_["sparsegpclassifier__n_inducing"] == 20
    clone(grid.best_estimator_)


def test_same_random_state_same_model():
    X, y = blobs(200, k=3)
    a = small(max_iter=5).fit(X, y)
    b = small(max_iter=5).fit(X, y)
    np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))
    assert a.loss_curve_ == b.loss_curve_


def test_warm_start_continues_and_needs_the_same_classes():
    X, y = blobs(200, k=3)
    clf = small(max_iter=3, warm_start=True).fit(X, y)
    steps = clf.n_steps_
    clf.fit(X, y)
    assert clf.n_steps_ == 2 * steps
    with pytest.raises(ValueError, match="same classes"):
        clf.fit(X[y < 2], y[y < 2])


# --- the maths with one covariance per latent -----------------------------------------
def multi_latent_problem(likelihood, n=30, m=5, k=3, seed=0, shared=False):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, 2))
    y = rng.integers(0, k, size=(n, 1)).astype(float)
    n_cov = 1 if shared else k
    state = coupled.init_state(rng.uniform(-2, 2, size=(m, 2)), n_outputs=k, n_covariances=n_cov)
    state.q_mean = rng.standard_normal((m, k))
    for c in range(n_cov):
        low = np.tril(0.2 * rng.standard_normal((m, m)))
        low[np.diag_indices(m)] = rng.uniform(0.4, 1.0, m)
        state.q_sqrt[c] = low
    # The relative jitter (jitter * mean(diag K_zz)) moves with the amplitude but the
    # backward pass holds it fixed: an O(jitter) gap that would be the whole of the
    # amplitude gradient under RobustMax, whose ELBO does not depend on the amplitude.
    model = VariationalModel(coupled, ReferenceRBF(1.1, np.array([0.9, 1.3])), likelihood, state, n,
                             learn_inducing=True, jitter=1e-12)
    return model, X, y


LIKELIHOODS = {
    "robustmax": lambda: RobustMaxLikelihood(3, epsilon=0.05),
    "softmax": lambda: SoftmaxLikelihood(3),
}


@pytest.mark.parametrize("shared", [False, True], ids=["per_class", "shared"])
@pytest.mark.parametrize("name", sorted(LIKELIHOODS))
def test_gradients_through_a_multiclass_likelihood_match_finite_differences(name, shared):
    model, X, Y = multi_latent_problem(LIKELIHOODS[name](), shared=shared)
    assert_adam_gradients_match(model, X, Y)


@pytest.mark.parametrize("name", sorted(LIKELIHOODS))
def test_natural_step_with_one_shared_covariance_is_the_expectation_gradient(name):
    """The tied family q(u_k) = N(m_k, S): natural parameters (P m_k, -P/2), expectation
    parameters (m_k, sum_k S + m_k m_k^T), so that with g_S = dELBO/dS (every latent's part)
    the step moves -P/2 by step * g_S / K and P m_k by step * (dELBO/dm_k - 2 g_S m_k / K)."""
    model, X, Y = multi_latent_problem(LIKELIHOODS[name](), n=20, m=3, shared=True)
    state = model.state.copy()
    k, m = state.q_mean.shape[1], state.q_mean.shape[0]
    S0 = state.q_sqrt[0] @ state.q_sqrt[0].T

    def elbo_at(q_mean, S):
        model.state = coupled.CoupledState(state.inducing, q_mean, np.linalg.cholesky(S)[None])
        return model.evaluate(X, Y, need_grad=False).elbo

    step = 0.3
    model.state = state.copy()
    new = model.natural_step(model.evaluate(X, Y), step)
    eps = 1e-5
    g_S = np.zeros((m, m))  # symmetric gradient: dELBO = tr(g_S dS)
    for i in range(m):
        for j in range(i, m):
            E = np.zeros((m, m))
            E[i, j] = E[j, i] = 1.0
            d = (elbo_at(state.q_mean, S0 + eps * E) - elbo_at(state.q_mean, S0 - eps * E)) / (2 * eps)
            g_S[i, j] = g_S[j, i] = d if i == j else d / 2
    P0 = np.linalg.inv(S0)
    P1 = np.linalg.inv(new.q_sqrt[0] @ new.q_sqrt[0].T)
    np.testing.assert_allclose(-0.5 * P1, -0.5 * P0 + step * g_S / k, rtol=1e-5, atol=1e-6)
    for c in range(k):
        g_mean = np.zeros(m)
        for i, e in enumerate(np.eye(m)):
            up, down = state.q_mean.copy(), state.q_mean.copy()
            up[:, c] += eps * e
            down[:, c] -= eps * e
            g_mean[i] = (elbo_at(up, S0) - elbo_at(down, S0)) / (2 * eps)
        mean0 = state.q_mean[:, c]
        np.testing.assert_allclose(P1 @ new.q_mean[:, c], P0 @ mean0 + step * (g_mean - 2 * g_S @ mean0 / k),
                                   rtol=1e-5, atol=1e-6, err_msg=f"latent {c}")


@pytest.mark.parametrize("name", sorted(LIKELIHOODS))
def test_natural_step_with_one_covariance_per_latent_is_the_expectation_gradient(name):
    """eta_k = (m_k, S_k + m_k m_k^T) per latent: the step moves (P_k m_k, -P_k/2) by step * dELBO/deta_k."""
    model, X, Y = multi_latent_problem(LIKELIHOODS[name](), n=20, m=3)
    state = model.state.copy()
    k, m = state.q_mean.shape[1], state.q_mean.shape[0]
    covs = [low @ low.T for low in state.q_sqrt]

    def elbo_at(c, mean, S):
        q_mean = state.q_mean.copy()
        q_mean[:, c] = mean
        q_sqrt = state.q_sqrt.copy()
        q_sqrt[c] = np.linalg.cholesky(S)
        model.state = coupled.CoupledState(state.inducing, q_mean, q_sqrt)
        return model.evaluate(X, Y, need_grad=False).elbo

    step = 0.3
    model.state = state.copy()
    new = model.natural_step(model.evaluate(X, Y), step)
    eps = 1e-5
    for c in range(k):
        mean0, S0 = state.q_mean[:, c], covs[c]
        g_mean = np.array([(elbo_at(c, mean0 + eps * e, S0) - elbo_at(c, mean0 - eps * e, S0)) / (2 * eps)
                           for e in np.eye(m)])
        g_S = np.zeros((m, m))  # symmetric gradient: dELBO = tr(g_S dS)
        for i in range(m):
            for j in range(i, m):
                E = np.zeros((m, m))
                E[i, j] = E[j, i] = 1.0
                d = (elbo_at(c, mean0, S0 + eps * E) - elbo_at(c, mean0, S0 - eps * E)) / (2 * eps)
                g_S[i, j] = g_S[j, i] = d if i == j else d / 2
        g_eta1 = g_mean - 2 * g_S @ mean0
        P0 = np.linalg.inv(S0)
        P1 = np.linalg.inv(new.q_sqrt[c] @ new.q_sqrt[c].T)
        np.testing.assert_allclose(-0.5 * P1, -0.5 * P0 + step * g_S, rtol=1e-5, atol=1e-6, err_msg=f"latent {c}")
        np.testing.assert_allclose(P1 @ new.q_mean[:, c], P0 @ mean0 + step * g_eta1, rtol=1e-5, atol=1e-6,
                                   err_msg=f"latent {c}")


def test_bernoulli_model_elbo_broadcasts_one_latent():
    """One latent, one label column: the path the regressor takes stays as it was."""
    rng = np.random.default_rng(3)
    X = rng.uniform(-2, 2, size=(15, 2))
    Y = (X[:, :1] > 0).astype(float)
    state = coupled.init_state(X[:4].copy(), n_outputs=1, n_covariances=1)
    model = VariationalModel(coupled, ReferenceRBF(1.0, np.array([1.0, 1.0])), BernoulliLikelihood(), state, 15)
    assert np.isclose(model.elbo(X, Y), model.evaluate(X, Y, need_grad=False).elbo)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("batch_size", [None, 10])
@pytest.mark.parametrize("kernel", [
    RBF(length_scale=0.1),
    ConstantKernel(1.0, (1e-2, 1e2)) * RBF(length_scale=1.0, length_scale_bounds=(1e-3, 1e3)),
    ConstantKernel(0.1, (1e-2, 1e2)) * RBF(length_scale=1.0, length_scale_bounds=(1e-3, 1e3)),
], ids=["rbf", "amplitude_one", "amplitude_small"])
def test_the_fitted_bound_improves_on_the_initial_theta(kernel, batch_size):
    """scikit-learn's GaussianProcessClassifier test (``test_lml_improving``, same data and
    kernels): the bound at the fitted theta beats the bound at the kernel's initial theta
    (measured: by 2.6 to 6.8 nats, full batch and batches of 10; before the exact search
    started the fit, the fitted bound was 0.27 nats below the initial one)."""
    X = np.atleast_2d(np.linspace(0, 10, 30)).T
    y = np.array((X * np.sin(X)).ravel() > 0, dtype=int)
    clf = SparseGPClassifier(kernel, batch_size=batch_size, random_state=0).fit(X, y)
    # GPC's own call, on the training rows the fit kept.
    fitted = clf.log_marginal_likelihood(clf.kernel_.theta)
    initial = clf.log_marginal_likelihood(kernel.theta)
    assert fitted > initial + 1.0
    assert fitted == clf.log_marginal_likelihood(theta=clf.kernel_.theta, X=X, y=y)


def _count_searches(monkeypatch):
    """The calls of the exact search that starts a fresh fit, counted."""
    from skgp_sparse.fit import pipeline

    calls = []
    search = pipeline.search_hyperparameters

    def counted(*args, **kwargs):
        calls.append(1)
        return search(*args, **kwargs)

    monkeypatch.setattr(pipeline, "search_hyperparameters", counted)
    return calls


@pytest.mark.parametrize("k, batch_size, searches", [(4, 128, 0), (2, 128, 1), (4, None, 1)])
def test_only_a_many_class_stream_starts_without_the_exact_search(monkeypatch, k, batch_size, searches):
    # Issue 35: the search did not pay for many classes (docs/benchmarks.md); a binary
    # stream and a one-batch fit, whose search is its hyperparameter optimiser, keep it.
    calls = _count_searches(monkeypatch)
    X, y = blobs(200, k=k)
    small(batch_size=batch_size, max_iter=2).fit(X, y)
    assert len(calls) == searches


def test_many_class_partial_fit_starts_without_the_exact_search(monkeypatch):
    calls = _count_searches(monkeypatch)
    X, y = blobs(200, k=3)
    small().partial_fit(X, y, classes=np.unique(y))
    assert calls == []


def test_latent_counts_of_the_likelihoods():
    assert BernoulliLikelihood().n_latent == 1
    assert RobustMaxLikelihood(5).n_latent == 5
    assert SoftmaxLikelihood(3).n_latent == 3


def wide_and_compact_classes(k, n_per_class=300, seed=0):
    """One feature: class 0 spread over [-100, 0], classes 1, 2, ... each packed into
    [2j - 1, 2j]: k-means over all rows would leave each compact class about one point."""
    rng = np.random.default_rng(seed)
    parts = [rng.uniform(-100, 0, n_per_class)] + [rng.uniform(2 * j - 1, 2 * j, n_per_class) for j in range(1, k)]
    return np.concatenate(parts)[:, None], np.repeat(np.arange(k), n_per_class)


def points_per_class_region(Z, k):
    return [int(np.sum((Z[:, 0] > 2 * j - 1.5) & (Z[:, 0] < 2 * j + 0.5))) for j in range(1, k)]


@pytest.mark.parametrize("stream", [False, True])
def test_many_classes_place_the_inducing_inputs_class_by_class(stream):
    # Issue 35: one latent per class needs points among each class's rows (KEEL letter
    # 94.85% -> 95.85%, docs/benchmarks.md). 30 points, 3 classes of 300 rows: 10 each.
    X, y = wide_and_compact_classes(3)
    clf = small(n_inducing=30, learn_inducing=False, max_iter=1)
    clf.partial_fit(X, y, classes=[0, 1, 2]) if stream else clf.fit(X, y)
    assert points_per_class_region(clf.inducing_points_, 3) == [10, 10]


def test_two_classes_place_the_inducing_inputs_over_all_rows():
    X, y = wide_and_compact_classes(2)
    clf = small(n_inducing=20, learn_inducing=False, max_iter=1).fit(X, y)
    assert points_per_class_region(clf.inducing_points_, 2)[0] <= 3


def test_rows_of_zero_weight_place_no_inducing_input_in_their_class():
    X, y = wide_and_compact_classes(3)
    weight = np.where((y == 1) & (X[:, 0] < 1.5), 0.0, 1.0)
    clf = small(n_inducing=30, learn_inducing=False, max_iter=1).fit(X, y, sample_weight=weight)
    Z = clf.inducing_points_[:, 0]
    in_class_1 = Z[(Z > 0.5) & (Z < 2.5)]
    assert in_class_1.size >= 5 and np.all(in_class_1 > 1.5)


def test_both_sets_of_a_two_set_basis_hold_every_class():
    X, y = wide_and_compact_classes(3)
    clf = small(basis="orth_decoupled", n_inducing=15, n_orthogonal=15, learn_inducing=False, max_iter=1).fit(X, y)
    assert points_per_class_region(clf.inducing_points_, 3) == [5, 5]
    assert points_per_class_region(clf.orthogonal_points_, 3) == [5, 5]


# --- the default kernel -----------------------------------------------------------
def two_spreads(n=1200, d=4, seed=0):
    """Class 1 from N(0, I), class 0 from N(0, 4 I): log-odds d log 2 - 3/8 |x|^2, a
    quadratic whose constant part is far from zero (KEEL ring's form)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    X = rng.standard_normal((n, d)) * np.where(y == 1, 1.0, 2.0)[:, None]
    return X, y


def test_wide_binary_default_kernel_shares_one_length_scale_across_feature_spreads():
    # 24 features in units that differ by two decades; the log-odds are isotropic in
    # standardised units, the form a shared length scale describes.
    X, y = two_spreads(n=1600, d=24)
    units = np.logspace(-1.0, 1.0, 24)
    X = X * units
    train, test = slice(0, 1200), slice(1200, None)
    clf = small(n_inducing=40, batch_size=256).fit(X[train], y[train])
    stationary = clf.kernel_.k1.k2
    assert isinstance(stationary, FeatureScaledRBF) and np.ndim(stationary.length_scale) == 0
    # The fixed scales are the features' spreads: proportional to their units.
    ratio = np.asarray(stationary.feature_scale) / units
    assert np.ptp(ratio) < 0.25 * ratio.mean()
    assert clf.score(X[test], y[test]) > 0.97
    # One length scale in the features' own units sees little but the widest features.
    unscaled = small(n_inducing=40, batch_size=256,
                     kernel=ConstantKernel(1.0) * FeatureScaledRBF(1.0) + ConstantKernel(1.0))
    unscaled.fit(X[train], y[train])
    assert log_loss(y[test], unscaled.predict_proba(X[test])) > 0.5
    # Below SHARED_LENGTH_SCALE_FEATURES features, and for K latents, one per feature.
    narrow = small(n_inducing=40, batch_size=256).fit(X[train, :SHARED_LENGTH_SCALE_FEATURES - 1], y[train])
    assert type(narrow.kernel_.k1.k2) is RBF and np.ndim(narrow.kernel_.k1.k2.length_scale) == 1
    Xb, yb = blobs()
    wide_blobs = np.hstack([Xb] + [np.random.default_rng(1).standard_normal((len(Xb), 22))])
    assert type(small().fit(wide_blobs, yb).kernel_.k2) is RBF


def test_inducing_steps_follow_a_feature_scaled_length_scale():
    # Adam's unit on each inducing coordinate: the shorter of the spread and the length
    # scale, here 0.5 times each feature's scale.
    kernel = compile_kernel(ConstantKernel(2.0) * FeatureScaledRBF(0.5, feature_scale=[1.0, 10.0]))
    np.testing.assert_allclose(inducing_step_scale(kernel, np.array([1.0, 10.0])), [0.5, 5.0])
    np.testing.assert_allclose(inducing_step_scale(kernel, np.array([0.2, 10.0])), [0.2, 5.0])


def test_default_kernel_learns_an_offset_for_two_classes_only():
    X, y = two_spreads()
    clf = small(n_inducing=40, batch_size=256).fit(X, y)
    # The default is the amplitude times an RBF, plus a constant: the prior variance of
    # the latent function's offset, here learned well above its start of 1.
    assert isinstance(clf.kernel_.k2, ConstantKernel) and isinstance(clf.kernel_.k1.k2, RBF)
    assert clf.kernel_.k2.constant_value > 1.0
    # It nests the kernel without it (the constant at zero), and its bound is higher.
    no_offset = small(n_inducing=40, batch_size=256, kernel=ConstantKernel(1.0) * RBF(np.ones(4))).fit(X, y)
    assert clf.log_marginal_likelihood_value_ > no_offset.log_marginal_likelihood_value_ + 1.0
    # K latents keep the amplitude times the RBF alone.
    Xb, yb = blobs()
    assert isinstance(small().fit(Xb, yb).kernel_.k2, RBF)
