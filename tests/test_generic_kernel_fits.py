"""Estimators with kernels outside the compiler: the same model as the compiled twin."""

import warnings

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, PairwiseKernel

from skgp_sparse import SparseGPClassifier, SparseGPRegressor


class OverridingRBF(RBF):
    """The RBF's maths, but with ``__call__`` redefined: only sklearn's API can evaluate it."""

    def __call__(self, X, Y=None, eval_gradient=False):
        return super().__call__(X, Y, eval_gradient)


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, size=(150, 2))
    y = np.sin(2 * X[:, 0]) + 0.5 * np.cos(2 * X[:, 1]) + 0.1 * rng.standard_normal(150)
    return X, y


def _fit(kernel, X, y, **settings):
    base = dict(n_inducing=15, inducing_init=X[:15], learn_inducing=False, random_state=0)
    return SparseGPRegressor(kernel, **{**base, **settings}).fit(X, y)


def test_overriding_subclass_fits_the_compiled_twin(data):
    """Full batch (collapsed bound, L-BFGS-B): the same search, so the same model."""
    X, y = data
    generic = _fit(ConstantKernel(1.0) * OverridingRBF([1.0, 1.0]), X, y)
    compiled = _fit(ConstantKernel(1.0) * RBF([1.0, 1.0]), X, y)
    assert type(generic.kernel_.k2) is OverridingRBF
    assert generic.log_marginal_likelihood_value_ == pytest.approx(compiled.log_marginal_likelihood_value_, rel=1e-8)
    np.testing.assert_allclose(generic.kernel_.theta, compiled.kernel_.theta, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(generic.predict(X[:20]), compiled.predict(X[:20]), atol=1e-7)


def test_pairwise_kernel_at_fixed_hyperparameters_is_the_rbf(data):
    """PairwiseKernel(rbf, gamma) is RBF(1 / sqrt(2 gamma)): with the hyperparameters fixed
    both fits optimise q(u) and the noise alone, and land on the same model."""
    X, y = data
    gamma = 0.4
    generic = _fit(ConstantKernel(1.5, "fixed") * PairwiseKernel(gamma, "fixed", metric="rbf"), X, y)
    compiled = _fit(ConstantKernel(1.5, "fixed") * RBF(1 / np.sqrt(2 * gamma), "fixed"), X, y)
    assert generic.log_marginal_likelihood_value_ == pytest.approx(compiled.log_marginal_likelihood_value_, rel=1e-8)
    mean_g, std_g = generic.predict(X[:20], return_std=True)
    mean_c, std_c = compiled.predict(X[:20], return_std=True)
    np.testing.assert_allclose(mean_g, mean_c, atol=1e-7)
    np.testing.assert_allclose(std_g, std_c, atol=1e-7)


def test_generic_bound_gradient_matches_finite_differences(data):
    X, y = data
    reg = _fit(ConstantKernel(1.0) * OverridingRBF([0.8, 1.3]), X, y, optimizer=None)
    theta = reg.kernel_.theta
    value, grad = reg.log_marginal_likelihood(theta, eval_gradient=True, X=X, y=y)
    h = 1e-5
    for i in range(theta.size):
        step = np.zeros_like(theta)
        step[i] = h
        fd = (reg.log_marginal_likelihood(theta + step, X=X, y=y) - reg.log_marginal_likelihood(theta - step, X=X, y=y)) / (2 * h)
        assert grad[i] == pytest.approx(fd, rel=1e-5, abs=1e-6)


def test_generic_kernel_keeps_the_inducing_inputs_and_says_so(data):
    X, y = data
    kernel = ConstantKernel(1.0) * OverridingRBF([1.0, 1.0])
    with pytest.warns(UserWarning, match="inducing inputs stay at their initial values"):
        reg = SparseGPRegressor(kernel, n_inducing=15, inducing_init=X[:15], random_state=0).fit(X, y)
    np.testing.assert_array_equal(reg.inducing_points_, X[:15])
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*inducing inputs stay.*")
        SparseGPRegressor(kernel, n_inducing=15, learn_inducing=False, random_state=0).fit(X, y)


def test_classifier_with_a_generic_kernel_matches_the_compiled_twin(data):
    X, y = data
    labels = (y > 0).astype(int)
    settings = dict(n_inducing=12, inducing_init=X[:12], learn_inducing=False, random_state=0, max_iter=20)
    generic = SparseGPClassifier(ConstantKernel(1.0) * OverridingRBF(1.0), **settings).fit(X, labels)
    compiled = SparseGPClassifier(ConstantKernel(1.0) * RBF(1.0), **settings).fit(X, labels)
    # The exact search that starts both fits follows the last bits of its gradient (the two
    # kernels round differently), and ends where the bound is flat: 1e-5 apart (measured).
    np.testing.assert_allclose(generic.predict_proba(X[:20]), compiled.predict_proba(X[:20]), atol=1e-4)


def test_the_fixed_inducing_inputs_warning_comes_once_per_fit(data):
    X, y = data
    reg = SparseGPRegressor(ConstantKernel(1.0) * OverridingRBF([1.0, 1.0]), n_inducing=15, random_state=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reg.fit(X, y)
        reg.elbo(X, y)
        reg.log_marginal_likelihood(X=X, y=y)
        reg.predict(X[:5])
    assert sum("inducing inputs stay" in str(w.message) for w in caught) == 1
