"""The regressor under the Student-t and Poisson likelihoods: recovery, predictions, errors."""

import pickle

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from skgp_sparse import SparseGPRegressor


def _latent(X):
    return np.sin(1.5 * X[:, 0]) + 0.5 * np.cos(X[:, 1])


@pytest.fixture
def inputs():
    rng = np.random.default_rng(0)
    return rng.uniform(-3, 3, size=(1500, 2)), rng.uniform(-3, 3, size=(500, 2)), rng


def test_student_t_recovers_the_function_and_its_noise_from_the_model(inputs):
    """y = f + 0.1 t_3: the fit finds f, a scale near 0.1 and few degrees of freedom."""
    X, X_test, rng = inputs
    y = _latent(X) + 0.1 * rng.standard_t(3.0, size=X.shape[0])
    reg = SparseGPRegressor(likelihood="student_t", n_inducing=40, normalize_y=False, random_state=0).fit(X, y)
    rmse = np.sqrt(np.mean((reg.predict(X_test) - _latent(X_test)) ** 2))
    assert rmse < 0.05
    assert 0.06 < reg.likelihood_params_["scale"] < 0.15
    assert reg.likelihood_params_["df"] < 10
    assert not hasattr(reg, "noise_variance_")


def test_student_t_ignores_gross_outliers_where_the_gaussian_cannot(inputs):
    X, X_test, rng = inputs
    y = _latent(X) + 0.1 * rng.standard_normal(X.shape[0])
    outliers = rng.random(X.shape[0]) < 0.05
    y[outliers] += rng.choice([-1.0, 1.0], outliers.sum()) * rng.uniform(5, 10, outliers.sum())
    errors = {}
    for likelihood in ("gaussian", "student_t"):
        reg = SparseGPRegressor(likelihood=likelihood, n_inducing=40, random_state=0).fit(X, y)
        errors[likelihood] = np.sqrt(np.mean((reg.predict(X_test) - _latent(X_test)) ** 2))
    assert errors["student_t"] < 0.5 * errors["gaussian"]


def test_poisson_recovers_the_rate_from_the_model(inputs):
    X, X_test, rng = inputs
    y = rng.poisson(np.exp(1.0 + _latent(X)))
    reg = SparseGPRegressor(likelihood="poisson", n_inducing=40, random_state=0).fit(X, y)
    mean, std = reg.predict(X_test, return_std=True)
    rate = np.exp(1.0 + _latent(X_test))
    assert np.median(np.abs(mean - rate) / rate) < 0.1
    # Predictive spread of a count: at least the Poisson part, sqrt(rate).
    assert np.all(std >= np.sqrt(mean) * 0.999)
    assert reg.likelihood_params_ == {}


def test_poisson_predictions_are_consistent(inputs):
    X, X_test, rng = inputs
    y = rng.poisson(np.exp(0.5 + _latent(X)))
    reg = SparseGPRegressor(likelihood="poisson", n_inducing=30, random_state=0, max_iter=30).fit(X, y)
    mean, std = reg.predict(X_test[:10], return_std=True)
    mean_c, cov = reg.predict(X_test[:10], return_cov=True)
    np.testing.assert_allclose(mean_c, mean, rtol=1e-10)
    np.testing.assert_allclose(np.sqrt(np.diag(cov)), std, rtol=1e-8)
    draws = reg.sample_y(X_test[:3], n_samples=4000, random_state=1)
    assert draws.shape == (3, 4000)
    np.testing.assert_array_equal(draws, np.round(draws))
    np.testing.assert_allclose(draws.mean(axis=1), mean[:3], rtol=0.1)
    # Same random_state, same model; and the model survives a pickle.
    again = SparseGPRegressor(likelihood="poisson", n_inducing=30, random_state=0, max_iter=30).fit(X, y)
    np.testing.assert_array_equal(again.predict(X_test[:10]), mean)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(reg)).predict(X_test[:10]), mean)


def test_student_t_std_and_covariance_agree(inputs):
    X, X_test, rng = inputs
    y = _latent(X) + 0.2 * rng.standard_t(5.0, size=X.shape[0])
    reg = SparseGPRegressor(likelihood="student_t", n_inducing=30, random_state=0, max_iter=30).fit(X, y)
    _, std = reg.predict(X_test[:8], return_std=True)
    _, cov = reg.predict(X_test[:8], return_cov=True)
    np.testing.assert_allclose(np.sqrt(np.diag(cov)), std, rtol=1e-8)
    assert reg.sample_y(X_test[:8], n_samples=2).shape == (8, 2)


def test_partial_fit_under_student_t(inputs):
    X, _, rng = inputs
    y = _latent(X) + 0.1 * rng.standard_t(3.0, size=X.shape[0])
    reg = SparseGPRegressor(likelihood="student_t", n_inducing=20, batch_size=500, random_state=0)
    for _ in range(3):
        reg.partial_fit(X, y, n_data=X.shape[0])
    assert np.isfinite(reg.predict(X[:5])).all()
    assert set(reg.likelihood_params_) == {"df", "scale"}


@pytest.mark.parametrize(
    "settings, y_change, message",
    [
        ({"likelihood": "poisson"}, lambda y: y - 10.0, "negative values"),
        ({"likelihood": "student_t"}, lambda y: np.column_stack([y, y]), "one target column"),
        ({"likelihood": "student_t", "noise_variance": 1e5}, lambda y: y, "outside noise_variance_bounds"),
    ],
)
def test_likelihood_misuse_is_refused(inputs, settings, y_change, message):
    X, _, rng = inputs
    y = rng.poisson(2.0, size=X.shape[0]).astype(float)
    with pytest.raises(ValueError, match=message):
        SparseGPRegressor(n_inducing=5, **settings).fit(X, y_change(y))


@pytest.mark.parametrize("likelihood", ["gaussian", "student_t", "poisson"])
def test_log_predictive_density_is_a_normalised_density(inputs, likelihood):
    """Summed (Poisson) or integrated (the others) over y, the predictive density is one."""
    X, X_test, rng = inputs
    y = rng.poisson(np.exp(1.0 + _latent(X))).astype(float)
    reg = SparseGPRegressor(likelihood=likelihood, n_inducing=20, random_state=0, max_iter=20).fit(X, y)
    x = X_test[:1]
    if likelihood == "poisson":
        grid = np.arange(0.0, 200.0)
        mass = np.exp(reg.log_predictive_density(np.repeat(x, grid.size, axis=0), grid)).sum()
    else:
        mean = reg.predict(x)[0]
        grid = np.linspace(mean - 200.0, mean + 200.0, 80_001)
        density = np.exp(reg.log_predictive_density(np.repeat(x, grid.size, axis=0), grid))
        mass = density.sum() * (grid[1] - grid[0])
    assert mass == pytest.approx(1.0, abs=2e-3)


def test_student_t_scale_on_its_bound_is_reported(inputs):
    X, _, rng = inputs
    y = _latent(X) + 0.1 * rng.standard_t(3.0, size=X.shape[0])
    reg = SparseGPRegressor(
        likelihood="student_t", n_inducing=10, noise_variance=1.0, noise_variance_bounds=(0.5, 10.0),
        normalize_y=False, max_iter=30, random_state=0,
    )
    with pytest.warns(ConvergenceWarning, match="Student-t scale .* lower bound .* noise_variance_bounds"):
        reg.fit(X, y)
