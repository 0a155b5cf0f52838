"""The inducing features' seam: the registry, Multiscale features in every basis and in the
estimators, and inducing points unchanged through it.

The closed forms themselves are checked against quadrature in test_feature_covariances.py;
here the model is: every basis computes with the seam's covariances, its bound and
gradients agree with dense formulas and finite differences, and the estimators take the
features as a parameter like any other.
"""

import pickle

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Matern, WhiteKernel
from sklearn.model_selection import GridSearchCV

from skgp_sparse import SparseGPClassifier, SparseGPRegressor
from skgp_sparse.bases import BASES
from skgp_sparse.elbo import VariationalModel
from skgp_sparse.features import (
    Covariances,
    FourierFeatures,
    InducingPoints,
    Multiscale,
    MultiscaleCovariances,
    RBFForm,
    covariances,
    register_features,
)
from skgp_sparse.features import _registry
from skgp_sparse.features._multiscale import multiscale_kuf, multiscale_kuu
from skgp_sparse.kernels import FeatureScaledRBF, compile_kernel
from skgp_sparse.likelihoods import GaussianLikelihood, NoiseParameter

from ._gradcheck import assert_adam_gradients_match

BASIS_NAMES = ["coupled", "orth_decoupled", "solve", "inverse_free"]


def _data(n=40, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, (n, d))
    y = np.sin(X.sum(axis=1)) + 0.1 * rng.standard_normal(n)
    return X, y[:, None]


def _kernel(d=2):
    return compile_kernel(ConstantKernel(1.3) * RBF(np.linspace(0.8, 1.2, d)), white_as_noise=True)


def _model(basis, features, inducing, X, noise=0.05, seed=0):
    kernel = _kernel(X.shape[1])
    rng = np.random.default_rng(seed)
    options = BASES[basis].init_options({"random_state": seed, "n_inducing": 4, "n_orthogonal": 3,
                                         "kl_columns": "auto"}, rng)
    n_orthogonal = 3 if BASES[basis].ORTHOGONAL_SET else 0
    state = BASES[basis].init_state(inducing, 1, 1, n_orthogonal=n_orthogonal, **options)
    return VariationalModel(basis, kernel, GaussianLikelihood(noise), state, X.shape[0],
                            noise=NoiseParameter(kernel, noise, (-6.0, 2.0)), jitter=1e-8, features=features)


def _windows(X, m, log_width, seed=1):
    rng = np.random.default_rng(seed)
    centres = X[rng.choice(X.shape[0], m, replace=False)]
    return np.hstack([centres, np.full_like(centres, log_width)])


# --- the registry ------------------------------------------------------------------------
class SubPoints(InducingPoints):
    pass


class SubMultiscale(Multiscale):
    pass


class ReparameterisedRBF(RBF):
    """An RBF subclass: its form is not the RBF's (it could mean anything)."""


def test_points_resolve_to_the_compiled_kernel_itself_for_any_kernel():
    for sk in (ConstantKernel(2.0) * RBF(1.0), Matern(nu=0.5), RBF(1.0) + ConstantKernel(0.5)):
        kernel = compile_kernel(sk, white_as_noise=True)
        assert covariances(InducingPoints(), kernel) is kernel
        # A subclass of a kind inherits its parent's pair.
        assert covariances(SubPoints(), kernel) is kernel


def test_multiscale_resolves_for_rbf_forms_and_a_subclass_inherits_it():
    for sk in (RBF([1.0, 2.0]), ConstantKernel(2.0) * RBF(1.0) + WhiteKernel(0.1),
               RBF(1.0) * ConstantKernel(0.5), FeatureScaledRBF(1.0, feature_scale=[1.0, 3.0])):
        kernel = compile_kernel(sk, white_as_noise=True)
        assert type(covariances(Multiscale(), kernel)) is MultiscaleCovariances
        assert type(covariances(SubMultiscale(), kernel)) is MultiscaleCovariances


def test_the_more_specific_pair_wins(monkeypatch):
    monkeypatch.setattr(_registry, "_REGISTRY", dict(_registry._REGISTRY))

    class Special(MultiscaleCovariances):
        pass

    register_features(SubMultiscale, RBFForm, Special)
    kernel = compile_kernel(RBF(1.0))
    assert type(covariances(SubMultiscale(), kernel)) is Special
    assert type(covariances(Multiscale(), kernel)) is MultiscaleCovariances


@pytest.mark.parametrize("sk", [Matern(nu=1.5), ReparameterisedRBF(1.0), RBF(1.0) + Matern(), RBF(1.0) * RBF(2.0)],
                         ids=["matern", "rbf-subclass", "sum", "product"])
def test_a_kernel_without_a_pair_is_a_clear_error(sk):
    with pytest.raises(ValueError, match="Multiscale features have no covariances") as info:
        covariances(Multiscale(), compile_kernel(sk))
    assert "Multiscale with RBF" in str(info.value) and "inducing_features='points'" in str(info.value)


def test_register_features_refuses_what_cannot_be_called():
    with pytest.raises(TypeError, match="callable"):
        register_features(Multiscale, RBFForm, "not an implementation")


# --- the covariances in the model ----------------------------------------------------------
@pytest.mark.parametrize("basis", BASIS_NAMES)
def test_multiscale_with_vanishing_widths_is_inducing_points_in_every_basis(basis):
    X, Y = _data()
    windows = _windows(X, 6, log_width=-40.0)
    points = _model(basis, InducingPoints(), windows[:, :2].copy(), X)
    multiscale = _model(basis, Multiscale(), windows, X)
    for model in (points, multiscale):
        model.state = model.natural_step(model.evaluate(X, Y, need_grad="natural"), 0.7)
    a, b = points.evaluate(X, Y), multiscale.evaluate(X, Y)
    np.testing.assert_allclose(b.elbo, a.elbo, rtol=1e-10)
    np.testing.assert_allclose(b.grads["theta"], a.grads["theta"], rtol=1e-8, atol=1e-10)
    # The centres' gradient is the points' gradient; the widths' is zero at zero width.
    np.testing.assert_allclose(b.grads["inducing"][:, :2], a.grads["inducing"], rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(b.grads["inducing"][:, 2:], 0.0, atol=1e-12)


class DenseInterdomain(Covariances):
    """The multiscale covariances as dense matrices from the closed forms, answered to the
    basis's points path: an independent route to every product the seam feeds."""

    def _values(self):
        return self.form.values(self.kernel.theta)

    def kuu(self, Z):
        variance, ls = self._values()
        d = Z.shape[1] // 2
        return multiscale_kuu(Z[:, :d], np.exp(Z[:, d:]), ls, variance)

    def kuf(self, Z, X):
        variance, ls = self._values()
        d = Z.shape[1] // 2
        return multiscale_kuf(Z[:, :d], np.exp(Z[:, d:]), X, ls, variance)


def test_the_coupled_basis_with_multiscale_features_is_the_dense_interdomain_posterior():
    """Whitened q(v) = N(m, S), u = L v with L L^T = K(u, u): the marginals are
    K(f, u) L^-T m and k(x, x) - diag(K(f, u) K(u, u)^-1 K(u, f)) + diag(K(f, u) L^-T S L^-1 K(u, f)),
    and the KL is KL(N(m, S) || N(0, I))."""
    X, Y = _data(n=25)
    windows = _windows(X, 6, log_width=np.log(0.4))
    model = _model("coupled", Multiscale(), windows, X)
    model.state = model.natural_step(model.evaluate(X, Y, need_grad="natural"), 0.6)
    mean, var, _ = model.latent_marginals(X)
    dense = DenseInterdomain(Multiscale(), model.kernel, model.covariances[0].form)
    kuu, kuf = dense.kuu(windows), dense.kuf(windows, X)
    low = np.linalg.cholesky(kuu + model.jitter * np.mean(np.diag(kuu)) * np.eye(6))
    a = np.linalg.solve(low, kuf)
    m, s_low = model.state.q_mean[:, 0], model.state.q_sqrt[0]
    S = s_low @ s_low.T
    np.testing.assert_allclose(mean[:, 0], a.T @ m, rtol=1e-9, atol=1e-11)
    expected_var = 1.3 - np.sum(a * a, axis=0) + np.sum(a * (S @ a), axis=0)
    np.testing.assert_allclose(var[:, 0], expected_var, rtol=1e-8, atol=1e-10)
    kl = 0.5 * (np.trace(S) + m @ m - 6 - np.linalg.slogdet(S)[1])
    np.testing.assert_allclose(model._kl(), kl, rtol=1e-9)


@pytest.mark.parametrize("basis", BASIS_NAMES)
def test_every_basis_computes_through_the_seam(basis):
    """The multiscale covariances handed to a basis as its kernel, once through the seam and
    once as plain dense matrices (every covariance through kuu and kuf alone): the same
    bound, marginals and KL."""
    X, Y = _data(n=25)
    windows = _windows(X, 7, log_width=np.log(0.5))
    seam = _model(basis, Multiscale(), windows, X)
    seam.state = seam.natural_step(seam.evaluate(X, Y, need_grad="natural"), 0.6)
    dense = DenseInterdomain(Multiscale(), seam.kernel, seam.covariances[0].form)
    dense.kuu_cross = lambda Z1, Z2: _cross(dense, Z1, Z2)
    state = seam.state.copy()
    want = seam.evaluate(X, Y, need_grad=False).elbo
    got_mean, got_var, _ = BASES[basis].marginals(dense, X, state, seam.jitter, False)
    mean, var, _ = seam.latent_marginals(X)
    np.testing.assert_allclose(got_mean, mean, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(np.broadcast_to(got_var, var.shape), var, rtol=1e-9, atol=1e-11)
    kl = float(BASES[basis].kl_divergence(dense, state, seam.jitter))
    np.testing.assert_allclose(kl, seam._kl(), rtol=1e-9, atol=1e-11)
    assert np.isfinite(want)


def _cross(dense, Z1, Z2):
    """K(u, u') between two window sets from the dense block of their union."""
    both = np.vstack([Z1, Z2])
    return dense.kuu(both)[: Z1.shape[0], Z1.shape[0]:]


@pytest.mark.parametrize("basis", BASIS_NAMES)
def test_gradients_in_centres_widths_and_hyperparameters_match_finite_differences(basis):
    X, Y = _data(n=20)
    model = _model(basis, Multiscale(), _windows(X, 5, log_width=np.log(0.6)), X)
    model.state = model.natural_step(model.evaluate(X, Y, need_grad="natural"), 0.5)
    assert_adam_gradients_match(model, X, Y, rtol=2e-5, atol=2e-6)


def test_the_collapsed_bound_with_multiscale_features_is_titsias_bound_and_its_gradients_hold():
    """log N(y; 0, Q + s2 I) - tr(K - Q) / (2 s2), Q = K(f, u) K(u, u)^-1 K(u, f)."""
    X, Y = _data(n=30)
    windows = _windows(X, 6, log_width=np.log(0.5))
    model = _model("coupled", Multiscale(), windows, X, noise=0.07)
    dense = DenseInterdomain(Multiscale(), model.kernel, model.covariances[0].form)
    kuu, kuf = dense.kuu(windows), dense.kuf(windows, X)
    Q = kuf.T @ np.linalg.solve(kuu + model.jitter * np.mean(np.diag(kuu)) * np.eye(6), kuf)
    C = Q + 0.07 * np.eye(30)
    y = Y[:, 0]
    log_density = -0.5 * (y @ np.linalg.solve(C, y) + np.linalg.slogdet(C)[1] + 30 * np.log(2 * np.pi))
    want = log_density - (30 * 1.3 - np.trace(Q)) / (2 * 0.07)
    np.testing.assert_allclose(model.collapsed_evaluate(X, Y).elbo, want, rtol=1e-8)
    assert_adam_gradients_match(model, X, Y, rtol=2e-5, atol=2e-6, collapsed=True)


# --- the estimators ------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_estimators_take_the_features_as_a_parameter_and_report_what_they_learned():
    X, Y = _data(n=200)
    y = Y[:, 0]
    model = SparseGPRegressor(RBF([1.0, 1.0]), inducing_features="multiscale", n_inducing=8, max_iter=5,
                              random_state=0).fit(X, y)
    assert isinstance(model.inducing_features_, Multiscale)
    assert model.inducing_points_.shape == (8, 2) and model.inducing_widths_.shape == (8, 2)
    assert np.all(model.inducing_widths_ > 0)
    # Refitted with points, the widths go.
    model.set_params(inducing_features="points").fit(X, y)
    assert isinstance(model.inducing_features_, InducingPoints) and not hasattr(model, "inducing_widths_")
    classifier = SparseGPClassifier(RBF(1.0), inducing_features=Multiscale(initial_width=0.2), n_inducing=6,
                                    max_iter=3, random_state=0).fit(X, (y > 0).astype(int))
    assert classifier.inducing_widths_.shape == (6, 2)
    assert classifier.predict_proba(X).shape == (200, 2)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_same_random_state_same_model_clone_pickle_and_grid_search():
    X, Y = _data(n=150)
    y = Y[:, 0]
    settings = dict(kernel=RBF([1.0, 1.0]), inducing_features="multiscale", n_inducing=6, max_iter=3,
                    random_state=2)
    first, second = SparseGPRegressor(**settings).fit(X, y), clone(SparseGPRegressor(**settings)).fit(X, y)
    np.testing.assert_array_equal(first.predict(X), second.predict(X))
    loaded = pickle.loads(pickle.dumps(first))
    # Unpickled, the predictor resolves the features' covariances again: the same predictions.
    np.testing.assert_array_equal(loaded.predict(X, return_std=True)[1], first.predict(X, return_std=True)[1])
    search = GridSearchCV(SparseGPRegressor(RBF([1.0, 1.0]), max_iter=2, random_state=0),
                          {"inducing_features": ["points", "multiscale"], "n_inducing": [4, 8]}, cv=2).fit(X, y)
    assert len(search.cv_results_["params"]) == 4


def test_clear_errors_for_features_the_kernel_cannot_take():
    X, Y = _data(n=50)
    with pytest.raises(ValueError, match="Multiscale features have no covariances for the kernel"):
        SparseGPRegressor(Matern(nu=2.5), inducing_features="multiscale", max_iter=1).fit(X, Y[:, 0])
    with pytest.raises(ValueError, match="inducing_features"):
        SparseGPRegressor(inducing_features="wavelets", max_iter=1).fit(X, Y[:, 0])
    with pytest.raises(ValueError, match="initial_width"):
        Multiscale(initial_width=0.0)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("kind", ["multiscale", "fourier"])
def test_an_lmc_and_masked_outputs_share_the_features(kind):
    """Each latent has its own kernel on the shared features; the joint q's closed forms and
    predictions go through the seam as the single output's."""
    X, Y = _data(n=120)
    targets = np.column_stack([Y[:, 0], np.cos(X[:, 0]), Y[:, 0] - X[:, 1]])
    targets[::5, 1] = np.nan
    for params in ({"n_latent": 2, "missing_targets": "mask"}, {"missing_targets": "mask"}):
        fits = {features: SparseGPRegressor(ConstantKernel() * RBF([1.0, 1.0]), inducing_features=features,
                                            n_inducing=40, max_iter=10, random_state=0, **params).fit(X, targets)
                for features in ("points", kind)}
        mean, std = fits[kind].predict(X, return_std=True)
        assert mean.shape == (120, 3) and np.all(np.isfinite(std))
        assert fits[kind].score(X, targets) > fits["points"].score(X, targets) - 0.05
        assert fits[kind].predict_output_covariance(X[:5]).shape == (5, 3, 3)


# --- Fourier features ----------------------------------------------------------------------
def _fourier_model(basis, sk_kernel, X, n_features, noise=0.05, n_orthogonal=0):
    kernel = compile_kernel(sk_kernel, white_as_noise=True)
    features = FourierFeatures().bind(X, n_features + n_orthogonal, kernel)
    rng = np.random.default_rng(0)
    options = BASES[basis].init_options({"random_state": 0, "n_inducing": n_features, "n_orthogonal": n_orthogonal,
                                         "kl_columns": "auto"}, rng)
    state = BASES[basis].init_state(features.start(None, None), 1, 1, n_orthogonal=n_orthogonal, **options)
    return VariationalModel(basis, kernel, GaussianLikelihood(noise), state, X.shape[0],
                            noise=NoiseParameter(kernel, noise, (-6.0, 2.0)), jitter=1e-10, features=features)


FOURIER_KERNELS = {
    "vff-matern12": (ConstantKernel(1.2) * Matern(0.7, nu=0.5), 1),
    "vff-matern32": (ConstantKernel(1.2) * Matern(0.7, nu=1.5), 1),
    "vff-matern52": (ConstantKernel(1.2) * Matern(0.7, nu=2.5), 1),
    "iff-rbf-2d": (ConstantKernel(1.2) * RBF([0.8, 1.1]), 2),
    "iff-matern-2d": (ConstantKernel(1.2) * Matern([0.8, 1.1], nu=1.5), 2),
    "iff-scaled-rbf-3d": (ConstantKernel(0.9) * FeatureScaledRBF(0.9, feature_scale=[1.0, 1.5, 0.7]), 3),
}


def test_fourier_features_choose_their_construction_and_count():
    X, _ = _data(n=50, d=1)
    bound = FourierFeatures().bind(X, 21, compile_kernel(Matern(nu=1.5)))
    assert (bound.construction_, bound.n_features_) == ("vff", 21)
    assert FourierFeatures(n_frequencies=5).bind(X, 100, compile_kernel(Matern(nu=0.5))).n_features_ == 11
    assert FourierFeatures().bind(X, 21, compile_kernel(RBF())).construction_ == "iff"
    X2, _ = _data(n=50, d=2)
    bound = FourierFeatures().bind(X2, 64, compile_kernel(RBF([1.0, 1.0])))
    assert bound.construction_ == "iff" and abs(bound.n_features_ - 64) <= 24
    with pytest.raises(ValueError, match="at most 3 input dimensions.*'points'"):
        FourierFeatures().bind(np.zeros((5, 4)), 10, compile_kernel(RBF()))
    with pytest.raises(ValueError, match="RBF or a Matern"):
        FourierFeatures().bind(X, 10, compile_kernel(Matern(nu=0.5) + RBF()))


def test_vff_scaled_kuu_is_the_dense_rkhs_gram_scaled_to_a_unit_diagonal():
    from skgp_sparse.features._vff import vff_kuu

    X, _ = _data(n=30, d=1)
    model = _fourier_model("coupled", ConstantKernel(1.2) * Matern(0.7, nu=2.5), X, 15)
    cov = model.covariances[0]
    f = model.features
    dense = vff_kuu(f.box_[0, 0], f.box_[1, 0], f.n_frequencies_, 2.5, 0.7, 1.2).dense()
    s = 1.0 / np.sqrt(np.diag(dense))
    idx = np.arange(f.n_features_)[:, None].astype(float)
    np.testing.assert_allclose(cov.kuu(idx), dense * s[:, None] * s[None, :], rtol=1e-12)
    np.testing.assert_allclose(np.diag(cov.kuu(idx)), 1.0, rtol=1e-12)


@pytest.mark.parametrize("name", list(FOURIER_KERNELS))
@pytest.mark.parametrize("basis", BASIS_NAMES)
def test_fourier_gradients_match_finite_differences_in_every_basis(name, basis):
    sk, d = FOURIER_KERNELS[name]
    X, Y = _data(n=20, d=d)
    # Rows outside the box too (VFF's tails depend on the length scale).
    model = _fourier_model(basis, sk, X[:14], 9, n_orthogonal=3 if BASES[basis].ORTHOGONAL_SET else 0)
    model.n_data = 20
    model.state = model.natural_step(model.evaluate(X, Y, need_grad="natural"), 0.5)
    X_out = X.copy()
    X_out[-3:] *= 3.0
    assert_adam_gradients_match(model, X_out, Y, rtol=3e-5, atol=3e-6)


@pytest.mark.parametrize("name,sizes,final_gap", [("vff-matern32", (5, 15, 41, 101, 201), 0.2),
                                                   ("vff-matern52", (5, 15, 41, 101), 0.2),
                                                   ("iff-rbf-2d", (5, 15, 41, 101, 201, 401), 0.05)])
def test_the_fourier_bound_approaches_gprs_log_marginal_likelihood_as_m_grows(name, sizes, final_gap):
    """On 60 rows: the gap to the exact log marginal likelihood falls with every M, to a
    few hundredths of a nat (VFF keeps about 0.1 from the box's ends, three length scales
    away; IFF's midpoint approximation vanishes as the grid covers the spectrum)."""
    from sklearn.gaussian_process import GaussianProcessRegressor

    sk, d = FOURIER_KERNELS[name]
    X, Y = _data(n=60, d=d)
    target = GaussianProcessRegressor(sk + WhiteKernel(0.05), optimizer=None).fit(X, Y[:, 0]) \
        .log_marginal_likelihood_value_
    gaps = [target - _fourier_model("coupled", sk, X, m, noise=0.05).collapsed_evaluate(X, Y).elbo for m in sizes]
    assert all(later <= earlier + 1e-6 for earlier, later in zip(gaps, gaps[1:])), gaps
    assert -1e-6 < gaps[-1] < final_gap, gaps


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_estimators_fit_and_predict_with_fourier_features():
    X, Y = _data(n=300, d=1)
    y = Y[:, 0]
    model = SparseGPRegressor(ConstantKernel() * Matern(nu=1.5), inducing_features="fourier", n_inducing=21,
                              random_state=0).fit(X, y)
    assert model.inducing_features_.construction_ == "vff" and model.variational_state_.inducing.shape == (21, 1)
    assert model.score(X, y) > 0.9
    # Far outside the box (VFF's tails have decayed) the prediction is the prior's.
    far = np.array([[50.0]])
    mean, std = model.predict(far, return_std=True)
    prior_std = np.sqrt(model.kernel_.diag(far)[0] + model.noise_variance_) * model._y_train_std[0]
    np.testing.assert_allclose([mean[0], std[0]], [model._y_train_mean[0], prior_std], rtol=1e-6)
    X2, Y2 = _data(n=300, d=2)
    classifier = SparseGPClassifier(inducing_features=FourierFeatures(n_frequencies=4), random_state=0,
                                    max_iter=3).fit(X2, (Y2[:, 0] > 0).astype(int))
    assert classifier.inducing_features_.construction_ == "iff"
    loaded = pickle.loads(pickle.dumps(classifier))
    np.testing.assert_array_equal(loaded.predict_proba(X2), classifier.predict_proba(X2))


# --- the one pass of a Gaussian fit with Fourier features --------------------------------
@pytest.mark.parametrize("name", list(FOURIER_KERNELS))
def test_the_bound_from_the_rows_statistics_is_the_bound_row_by_row(name):
    """One pass of sums (two outputs, weighted rows) gives the collapsed bound and its
    gradient of the model evaluated on every row."""
    from skgp_sparse.elbo import TargetLayout
    from skgp_sparse.features import StatisticsBound, feature_statistics

    sk, d = FOURIER_KERNELS[name]
    X, Y = _data(n=50, d=d)
    Y = np.column_stack([Y[:, 0], np.cos(X[:, 0])])
    weights = np.random.default_rng(4).uniform(0.5, 2.0, 50)
    model = _fourier_model("coupled", sk, X, 13, noise=0.07)
    model.layout = TargetLayout(2, weighted=True, mean_weight=weights.mean())
    halves = [feature_statistics(model.features, X[rows], Y[rows], weights[rows])
              for rows in (slice(0, 20), slice(20, 50))]
    bound = StatisticsBound(model.covariances[0], halves[0].add(halves[1]), model.state.inducing, 0.07, model.jitter)
    row_by_row = model.collapsed_evaluate(X, model.layout.join(Y, weights))
    np.testing.assert_allclose(bound.value, row_by_row.elbo, rtol=1e-10)
    np.testing.assert_allclose(bound.theta_bar(), row_by_row.grads["theta"], rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(bound.d_log_noise, row_by_row.grads["log_noise"][0], rtol=1e-8)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_a_gaussian_fit_with_fourier_features_is_one_pass_and_ends_at_the_bounds_optimum():
    X, Y = _data(n=3000, d=1, seed=3)
    y = Y[:, 0]
    model = SparseGPRegressor(ConstantKernel() * Matern(nu=2.5), inducing_features="fourier", n_inducing=41,
                              random_state=0).fit(X, y)
    assert model.n_steps_ == 0
    fitted = model._fitted_model(X.shape[0])
    Yfit = model._bound_targets(y).reshape(-1, 1)
    result = fitted.collapsed_evaluate(X, Yfit)
    np.testing.assert_allclose(result.elbo, model.log_marginal_likelihood_value_, rtol=1e-9)
    # The bound's gradient vanishes at the search's end (the optimum within the bounds).
    assert np.max(np.abs(result.grads["theta"])) / X.shape[0] < 1e-3
    # q(u) is at its optimum: one more exact natural step does not move the ELBO.
    before = fitted.elbo(X, Yfit)
    fitted.land_on_optimal_q(X, Yfit)
    np.testing.assert_allclose(fitted.elbo(X, Yfit), before, rtol=1e-9)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_rows_outside_a_given_box_fall_back_to_minibatches_with_a_warning():
    X, Y = _data(n=400, d=1)
    features = FourierFeatures(box=[[-1.0], [1.0]])
    with pytest.warns(UserWarning, match="outside the box of the Fourier features"):
        model = SparseGPRegressor(ConstantKernel() * Matern(nu=1.5), inducing_features=features, n_inducing=21,
                                  max_iter=3, random_state=0).fit(X, Y[:, 0])
    assert model.n_steps_ > 0


# --- every array library, float32, partial_fit -------------------------------------------
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("kind", ["multiscale", "fourier"])
@pytest.mark.parametrize("batch_size", [50, None], ids=["minibatch", "full_batch"])
@pytest.mark.parametrize("lib_name", ["torch", "strict_device1"])
def test_interdomain_features_fit_arrays_of_other_libraries_as_numpy(kind, batch_size, lib_name, monkeypatch):
    """The interdomain kinds compute on the host, in one round trip a covariance; the rows,
    minibatches and q(u) stay in the input's library, and the fit is numpy's."""
    import sklearn

    from skgp_sparse import backend as be

    from ._array_libs import Lib

    monkeypatch.setenv("SCIPY_ARRAY_API", "1")
    lib = Lib(lib_name)
    X, Y = _data(n=300)
    y = Y[:, 0]
    settings = dict(kernel=ConstantKernel() * RBF([1.0, 1.0]), inducing_features=kind, n_inducing=16,
                    batch_size=batch_size, max_iter=3, random_state=0)
    reference = SparseGPRegressor(**settings).fit(X, y)
    with sklearn.config_context(array_api_dispatch=True):
        fitted = SparseGPRegressor(**settings).fit(lib(X), lib(y))
        mean = be.to_numpy(fitted.predict(lib(X[:20])))
    np.testing.assert_allclose(mean, reference.predict(X[:20]), rtol=1e-7, atol=1e-8)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("kind", ["multiscale", "fourier"])
def test_float32_and_partial_fit_with_interdomain_features(kind):
    X, Y = _data(n=400)
    y = Y[:, 0]
    settings = dict(kernel=ConstantKernel() * RBF([1.0, 1.0]), inducing_features=kind, n_inducing=16, batch_size=100,
                    max_iter=3, random_state=0)
    wide = SparseGPRegressor(**settings).fit(X, y)
    narrow = SparseGPRegressor(dtype="float32", **settings).fit(X, y)
    np.testing.assert_allclose(narrow.predict(X[:20]), wide.predict(X[:20]), rtol=2e-2, atol=2e-2)
    streamed = SparseGPRegressor(**settings)
    for rows in (slice(0, 200), slice(200, 400)):
        streamed.partial_fit(X[rows], y[rows])
    assert isinstance(streamed.inducing_features_, type(wide.inducing_features_))
    assert np.all(np.isfinite(streamed.predict(X[:20])))


def test_vffs_sums_by_angle_recurrence_equal_the_product_of_the_features():
    """VFF's phi phi^T and phi y from the sums of cos(k theta) and sin(k theta), k <= 2F
    (O(n F)), equal the product of the features with themselves (O(n F^2)), F = 300."""
    from skgp_sparse.features import feature_statistics

    rng = np.random.default_rng(7)
    X = rng.uniform(-3.0, 3.0, (3000, 1))
    Y = np.column_stack([np.sin(X[:, 0]), np.cos(3.0 * X[:, 0])])
    weights = rng.uniform(0.5, 2.0, 3000)
    features = FourierFeatures(n_frequencies=300).bind(X, 0, compile_kernel(Matern(nu=1.5)))
    stats = feature_statistics(features, X, Y, weights)
    phi = features.raw_features(X)
    np.testing.assert_allclose(stats.phi_phi, (phi * weights) @ phi.T, rtol=1e-10, atol=1e-9)
    np.testing.assert_allclose(stats.phi_y, (phi * weights) @ Y, rtol=1e-10, atol=1e-9)
    assert stats.count == pytest.approx(weights.sum()) and stats.yy == pytest.approx(np.sum(weights[:, None] * Y**2))


@pytest.mark.parametrize("name", list(FOURIER_KERNELS))
def test_the_statistics_bounds_gradient_matches_finite_differences(name):
    """StatisticsBound's hand-written gradient in theta and the log noise, against central
    differences of its own value."""
    from skgp_sparse.features import StatisticsBound, feature_statistics

    sk, d = FOURIER_KERNELS[name]
    X, Y = _data(n=40, d=d)
    model = _fourier_model("coupled", sk, X, 11, noise=0.07)
    stats = feature_statistics(model.features, X, np.column_stack([Y[:, 0], np.cos(X[:, 0])]))
    kernel, Z, eps = model.kernel, model.state.inducing, 1e-6

    def value(theta, log_noise):
        kernel.set_theta(theta)
        return StatisticsBound(model.covariances[0], stats, Z, np.exp(log_noise), model.jitter).value

    theta0, log_noise0 = kernel.theta, np.log(0.07)
    bound = StatisticsBound(model.covariances[0], stats, Z, 0.07, model.jitter)
    want_theta, want_noise = bound.theta_bar(), bound.d_log_noise
    fd_theta = np.array([(value(theta0 + eps * e, log_noise0) - value(theta0 - eps * e, log_noise0)) / (2 * eps)
                         for e in np.eye(theta0.size)])
    fd_noise = (value(theta0, log_noise0 + eps) - value(theta0, log_noise0 - eps)) / (2 * eps)
    kernel.set_theta(theta0)
    np.testing.assert_allclose(want_theta, fd_theta, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(want_noise, fd_noise, rtol=1e-5, atol=1e-6)
