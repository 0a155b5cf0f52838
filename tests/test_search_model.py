"""The model builds the exact search's model itself (``VariationalModel.search_model``): a
copy of its kernel and likelihood on the search's basis, at every inducing input, q(u) at
the prior, that shares nothing it could change with the model it came from."""

import warnings

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

from skgp_sparse import SparseGPClassifier, SparseGPRegressor
from skgp_sparse.bases import SEARCH_BASIS
from skgp_sparse.multioutput import MixedState

rng = np.random.default_rng(3)
X = rng.uniform(-2, 2, size=(300, 2))
y = np.sin(2 * X[:, 0]) + 0.1 * rng.standard_normal(300)


def fitted_model(estimator, target):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        estimator.fit(X, target)
    return estimator._fitted_model(X.shape[0])


def every_inducing_input(model):
    sets = [getattr(model.state, name) for name in model.basis.INDUCING_FIELDS]
    return np.concatenate([z for z in sets if z is not None])


@pytest.mark.parametrize("basis", ["coupled", "orth_decoupled", "solve", "inverse_free"])
def test_search_model_is_a_prior_copy_on_the_search_basis(basis):
    extra = {"n_orthogonal": 4} if basis in ("orth_decoupled", "solve") else {}
    model = fitted_model(SparseGPRegressor(basis=basis, n_inducing=8, max_iter=2, random_state=0, **extra), y)
    search = model.search_model(1000)
    assert search.basis is SEARCH_BASIS and type(search) is type(model)
    assert search.n_data == 1000 and search.layout is model.layout and search.jitter == model.jitter
    np.testing.assert_array_equal(search.state.inducing, every_inducing_input(model))
    assert search.basis.latent_shape(search.state) == model.basis.latent_shape(model.state)
    np.testing.assert_array_equal(search.state.q_mean, 0.0)
    np.testing.assert_array_equal(search.kernel.theta, model.kernel.theta)
    assert search.noise.value == model.noise.value
    assert not search.learns_inducing()
    assert model.search_model(1000, learn_inducing=True).learns_inducing()
    # Its parameters are its own.
    theta, noise = model.kernel.theta.copy(), model.noise.value
    search.set_adam_params({"theta": search.kernel.theta + 1.0, "log_noise": np.array([0.5])})
    np.testing.assert_array_equal(model.kernel.theta, theta)
    assert model.noise.value == noise


def test_search_model_of_a_model_that_keeps_its_inducing_inputs_keeps_them():
    model = fitted_model(SparseGPRegressor(n_inducing=8, max_iter=2, learn_inducing=False, random_state=0), y)
    assert not model.search_model(1000, learn_inducing=True).learns_inducing()


def test_a_noise_carried_by_a_white_kernel_stays_with_the_copied_kernel():
    kernel = ConstantKernel() * RBF() + WhiteKernel(0.05)
    model = fitted_model(SparseGPRegressor(kernel, n_inducing=8, max_iter=2, random_state=0), y)
    search = model.search_model(300)
    assert search.noise.from_kernel and search.noise.kernel is search.kernel
    assert search.noise.value == model.noise.value


def test_search_model_of_a_classifier_keeps_its_latents_and_covariances():
    labels = np.digitize(y, [-0.5, 0.5])
    model = fitted_model(SparseGPClassifier(n_inducing=8, max_iter=2, class_covariance="shared", random_state=0),
                         labels)
    search = model.search_model(300)
    assert search.basis.latent_shape(search.state) == (3, 1)
    assert search.likelihood is not model.likelihood


@pytest.mark.parametrize("params", [{"n_latent": 2, "missing_targets": "mask"}, {"missing_targets": "mask"}], ids=["lmc", "masked"])
def test_search_model_of_several_outputs_keeps_the_groups_and_the_ties(params):
    # Masked independent outputs: one group per output, their kernels one object (tied).
    Y = np.column_stack([y, np.cos(X[:, 1]), y + X[:, 1]])
    Y[::7, 1] = np.nan
    model = fitted_model(SparseGPRegressor(n_inducing=8, max_iter=2, random_state=0, **params), Y)
    search = model.search_model(300)
    assert isinstance(search.state, MixedState) and search.basis is SEARCH_BASIS
    assert search.state.widths == model.state.widths
    np.testing.assert_array_equal(search.state.mixing, model.state.mixing)
    assert search.state.mixing_learned == model.state.mixing_learned
    assert search.distinct_kernels()[1] == model.distinct_kernels()[1]
    assert not set(map(id, search.kernels)) & set(map(id, model.kernels))
    np.testing.assert_array_equal(search.adam_params()["theta"], model.adam_params()["theta"])
