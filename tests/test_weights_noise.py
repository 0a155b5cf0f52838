"""Sample weights and known per-row noise (``alpha``).

An integer weight must give the model of the row repeated that many times, a zero weight
the model without the row; ``alpha`` in the exact limit must give GaussianProcessRegressor
with the same ``alpha`` array.
"""

import numpy as np
import pytest
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

from skgp_sparse import SparseGPClassifier, SparseGPRegressor
from skgp_sparse.bases import BASES
from skgp_sparse.elbo import TargetLayout, VariationalModel
from skgp_sparse.kernels import compile_kernel
from skgp_sparse.likelihoods import GaussianLikelihood

from ._fit_checks import without_search


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, size=(60, 2))
    y = np.sin(X[:, 0]) + 0.5 * np.cos(X[:, 1]) + 0.1 * rng.standard_normal(60)
    weights = rng.integers(0, 4, size=60)
    return X, y, weights


def test_weighted_elbo_equals_repeated_rows(data):
    """At fixed parameters the weighted ELBO and its gradients are those of repeated rows."""
    X, y, w = data
    Z = X[:10].copy()
    Y = y.reshape(-1, 1)

    def model(n):
        kernel = compile_kernel(ConstantKernel(1.3) * RBF([0.8, 1.4]))
        state = BASES["coupled"].init_state(Z, n_outputs=1, n_covariances=1, n_orthogonal=0)
        rng = np.random.default_rng(1)
        state.q_mean[:] = rng.standard_normal(state.q_mean.shape)
        return VariationalModel(BASES["coupled"], kernel, GaussianLikelihood(0.05), state, n)

    weighted = model(X.shape[0])
    weighted.layout = TargetLayout(1, weighted=True)
    repeated = model(int(w.sum()))
    a = weighted.evaluate(X, weighted.layout.join(Y, w.astype(float)))
    b = repeated.evaluate(np.repeat(X, w, axis=0), np.repeat(Y, w, axis=0))
    assert a.elbo == pytest.approx(b.elbo, rel=1e-12)
    for name in b.grads:
        np.testing.assert_allclose(a.grads[name], b.grads[name], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("basis", ["coupled", "solve"])
def test_integer_weights_fit_the_model_of_repeated_rows(data, basis):
    """The two fits differ only in the order of their floating-point sums, and their
    stopping rules end them where the bound has stopped rising, so they stop at nearby
    points. The solve basis's fit ends in full-batch Adam steps, which wander about the
    optimum: its bounds were 5.8e-5 and 3.7e-3 apart before and after the exact search
    changed its sums (2e-9 on coupled; predictions within 7e-5), so the bounds may part
    by 1e-4 nats per row counted (here 0.0099; a fit that ignored the weights is 60 nats
    away). The inducing inputs stay fixed: moved by the exact search's L-BFGS-B and by
    Adam, the two paths part along the flattest directions (bounds 0.08 apart on solve)."""
    X, y, w = data
    settings = dict(basis=basis, n_inducing=12, inducing_init=X[w > 0][:12], batch_size=None, max_iter=300,
                    learn_inducing=False, random_state=0)
    kernel = ConstantKernel(1.0) * RBF([1.0, 1.0])
    weighted = SparseGPRegressor(kernel, **settings).fit(X, y, sample_weight=w)
    repeated = SparseGPRegressor(kernel, **settings).fit(np.repeat(X, w, axis=0), np.repeat(y, w))
    assert weighted.log_marginal_likelihood_value_ == pytest.approx(repeated.log_marginal_likelihood_value_,
                                                                     abs=1e-4 * w.sum())
    np.testing.assert_allclose(weighted.predict(X), repeated.predict(X), atol=2e-3)


def test_zero_weight_is_the_model_without_the_row(data):
    X, y, _ = data
    w = np.ones(X.shape[0])
    w[::3] = 0.0
    y_outlier = y.copy()
    y_outlier[::3] += 50.0  # rows of zero weight must not move the model at all
    settings = dict(n_inducing=12, inducing_init=X[1:13], batch_size=None, random_state=0)
    weighted = SparseGPRegressor(**settings).fit(X, y_outlier, sample_weight=w)
    dropped = SparseGPRegressor(**settings).fit(X[w > 0], y[w > 0])
    np.testing.assert_allclose(weighted.predict(X), dropped.predict(X), atol=1e-4)
    assert weighted.log_marginal_likelihood_value_ == pytest.approx(dropped.log_marginal_likelihood_value_, abs=1e-4)


def test_classifier_weights_equal_repeated_rows(data):
    X, y, w = data
    labels = (y > 0).astype(int)
    # Both fits run to a tight tol: the bound is the same function both ways, but where it
    # is flat (this amplitude and the default kernel's constant trade against each other)
    # fits stopped at the default tol end apart by the rounding of their sums.
    settings = dict(n_inducing=10, inducing_init=X[w > 0][:10], batch_size=None, max_iter=60, random_state=0,
                    tol=1e-5)
    weighted = SparseGPClassifier(**settings).fit(X, labels, sample_weight=w)
    repeated = SparseGPClassifier(**settings).fit(np.repeat(X, w, axis=0), np.repeat(labels, w))
    np.testing.assert_allclose(weighted.predict_proba(X), repeated.predict_proba(X), atol=2e-3)


def test_weights_in_partial_fit_scale_the_rows(data, monkeypatch):
    """A minibatch pass with weight 2 on every row moves the model as the rows twice over
    at the same N would in expectation: the first natural step is exactly that of doubled
    targets' data term. (From a fixed start: the exact search of the first call sees the
    same bound both ways, but its end moves with the rounding of the two sums.)"""
    without_search(monkeypatch)
    X, y, _ = data
    one = SparseGPRegressor(n_inducing=8, inducing_init=X[:8], batch_size=None, random_state=0)
    two = SparseGPRegressor(n_inducing=8, inducing_init=X[:8], batch_size=None, random_state=0)
    one.partial_fit(X, y, sample_weight=np.full(60, 2.0), n_data=60)
    two.partial_fit(np.vstack([X, X]), np.concatenate([y, y]), n_data=120)
    np.testing.assert_allclose(one.variational_state_.q_mean, two.variational_state_.q_mean, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize(
    "weights, message",
    [
        (np.full(60, -1.0), "non-negative"),
        (np.zeros(60), "zero for every row"),
        (np.ones(59), "shape"),
        (np.full(60, np.nan), "NaN"),
    ],
)
def test_bad_sample_weight_is_refused(data, weights, message):
    X, y, _ = data
    with pytest.raises(ValueError, match=message):
        SparseGPRegressor(n_inducing=5).fit(X, y, sample_weight=weights)


@pytest.mark.parametrize("normalize_y", [False, True])
@pytest.mark.parametrize("white", [False, True])
def test_per_row_noise_in_the_exact_limit_is_gpr_with_alpha(normalize_y, white):
    """Z = X, full batch, fixed kernel: the posterior is GPR's with the same alpha array."""
    rng = np.random.default_rng(3)
    X = rng.uniform(-2, 2, size=(40, 1))
    alpha = rng.uniform(0.01, 0.3, size=40)
    y = np.sin(2 * X[:, 0]) + np.sqrt(alpha) * rng.standard_normal(40)
    kernel = ConstantKernel(1.0, "fixed") * RBF(0.7, "fixed")
    if white:
        kernel = kernel + WhiteKernel(0.02, "fixed")
    gpr = GaussianProcessRegressor(kernel, alpha=alpha, optimizer=None, normalize_y=normalize_y).fit(X, y)
    ours = SparseGPRegressor(
        kernel, alpha=alpha, noise_variance=1e-12, noise_variance_bounds="fixed", inducing_init=X,
        n_inducing=40, learn_inducing=False, batch_size=None, normalize_y=normalize_y, jitter=1e-12,
    ).fit(X, y)
    X_test = np.linspace(-2.5, 2.5, 30).reshape(-1, 1)
    mean_gpr, std_gpr = gpr.predict(X_test, return_std=True)
    latent_mean, latent_var = ours.latent_mean_and_variance(X_test)
    np.testing.assert_allclose(latent_mean, mean_gpr, atol=1e-6)
    # GPR's std counts a WhiteKernel (as ours does through noise), never alpha.
    white_var = 0.02 * (np.std(y) ** 2 if normalize_y else 1.0) if white else 0.0
    np.testing.assert_allclose(latent_var + white_var, std_gpr**2, atol=1e-6)
    lml = gpr.log_marginal_likelihood_value_
    assert ours.log_marginal_likelihood_value_ == pytest.approx(lml, abs=1e-5 * 40)


def test_alpha_raises_the_noise_of_its_rows():
    """Rows with a large known noise count less: the fit follows the precise rows."""
    rng = np.random.default_rng(4)
    X = np.sort(rng.uniform(-3, 3, size=(200, 1)), axis=0)
    alpha = np.where(X[:, 0] > 0, 4.0, 1e-4)
    y = np.sin(X[:, 0]) + np.sqrt(alpha) * rng.standard_normal(200)
    fit = SparseGPRegressor(n_inducing=30, alpha=alpha, normalize_y=False, random_state=0).fit(X, y)
    plain = SparseGPRegressor(n_inducing=30, normalize_y=False, random_state=0).fit(X, y)
    left = X[:, 0] < 0
    err_alpha = np.abs(fit.predict(X[left]) - np.sin(X[left, 0])).mean()
    err_plain = np.abs(plain.predict(X[left]) - np.sin(X[left, 0])).mean()
    assert err_alpha < 0.5 * err_plain


def test_alpha_under_a_non_gaussian_likelihood_is_latent_white_noise_of_its_rows(data):
    """A constant alpha under the Poisson likelihood is a WhiteKernel term of the latent
    function: the same ELBO as the fit with that white noise, to rounding."""
    X, y, _ = data
    counts = np.round(np.exp(y)).astype(float)
    settings = dict(likelihood="poisson", n_inducing=10, inducing_init=X[:10], optimizer=None, max_iter=5, random_state=0)
    with_alpha = SparseGPRegressor(ConstantKernel(1.0) * RBF(1.0), alpha=0.3, **settings).fit(X, counts)
    white = ConstantKernel(1.0) * RBF(1.0) + WhiteKernel(0.3, "fixed")
    with_white = SparseGPRegressor(white, **settings).fit(X, counts)
    assert with_alpha.log_marginal_likelihood_value_ == pytest.approx(with_white.log_marginal_likelihood_value_, rel=1e-10)
    # Predictions include the WhiteKernel's latent noise but never alpha.
    assert np.all(with_alpha.latent_mean_and_variance(X)[1] < with_white.latent_mean_and_variance(X)[1])


@pytest.mark.parametrize(
    "alpha, message", [(np.ones(3), "shape"), (-np.ones(60), "non-negative"), (np.full(60, np.inf), "finite")]
)
def test_bad_alpha_is_refused(data, alpha, message):
    X, y, _ = data
    with pytest.raises(ValueError, match=message):
        SparseGPRegressor(n_inducing=5, alpha=alpha).fit(X, y)


@pytest.mark.parametrize("likelihood", ["gaussian", "student_t"])
def test_noise_and_likelihood_gradients_with_weights_and_known_noise_match_finite_differences(data, likelihood):
    """The model's gradients in log noise (Gaussian, known per-row noise added) and in the
    Student-t log df and log scale, with sample weights, against central differences."""
    from skgp_sparse.likelihoods import NoiseParameter, StudentTLikelihood

    X, y, w = data
    Y = y.reshape(-1, 1)
    alpha = np.random.default_rng(2).uniform(0.01, 0.2, size=X.shape[0])
    kernel = compile_kernel(ConstantKernel(1.3) * RBF([0.8, 1.4]))
    state = BASES["coupled"].init_state(X[:8].copy(), n_outputs=1, n_covariances=1, n_orthogonal=0)
    state.q_mean[:] = np.random.default_rng(1).standard_normal(state.q_mean.shape)
    if likelihood == "gaussian":
        noise = NoiseParameter(kernel, 0.05, (np.log(1e-6), np.log(1e3)))
        model = VariationalModel(BASES["coupled"], kernel, GaussianLikelihood(0.05), state, 60, noise=noise)
        layout, name = TargetLayout(1, weighted=True, known_noise=True), "log_noise"
    else:
        model = VariationalModel(BASES["coupled"], kernel, StudentTLikelihood(df=3.0, scale=0.3), state, 60)
        layout, name = TargetLayout(1, weighted=True), "likelihood"
    model.layout = layout
    rows = layout.join(Y, w.astype(float), alpha)
    grad = model.evaluate(X, rows).grads[name]
    base = model.adam_params()[name].copy()
    h = 1e-6
    for i in range(base.size):
        values = []
        for sign in (1.0, -1.0):
            moved = base.copy()
            moved[i] += sign * h
            model.set_adam_params({name: moved})
            values.append(model.evaluate(X, rows, need_grad=False).elbo)
        model.set_adam_params({name: base})
        assert grad[i] == pytest.approx((values[0] - values[1]) / (2 * h), rel=1e-6, abs=1e-6)
