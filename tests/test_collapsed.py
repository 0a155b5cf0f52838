"""The coupled basis's collapsed bound in one pass (bases/_collapsed.py) against the
minibatch machinery at q's optimum, a dense formula and finite differences."""

import numpy as np
import pytest

from skgp_sparse.bases import _collapsed, coupled
from skgp_sparse.elbo import TargetLayout, VariationalModel
from skgp_sparse.likelihoods import GaussianLikelihood, NoiseParameter
from skgp_sparse.optim.fullbatch import land_on_optimal_q, optimise_collapsed
from skgp_sparse.optim.qsolver import QSolver

from .test_coupled import collapsed_bound as dense_collapsed_bound
from .test_coupled import make_problem
from ._gradcheck import assert_adam_gradients_match


@pytest.fixture(params=["whitened", "folded"])
def collapsed_form(request, monkeypatch):
    """Run a test with the collapsed bound in one form."""
    if request.param == "whitened":
        monkeypatch.setattr(_collapsed, "FOLD_MIN_ROWS_PER_POINT", np.inf)
    else:
        monkeypatch.setattr(_collapsed, "FOLD_MIN_ROWS_PER_POINT", 0)
        monkeypatch.setattr(_collapsed, "FOLD_MAX_CONDITION", np.inf)
    return request.param


def weighted_problem(p, weighted, seed=0):
    """A model counting 40 rows as 100, with per-row weights or without."""
    model, X, Y = make_problem(n=40, m=7, p=p, seed=seed, random_q=False)
    model.n_data = 100
    if weighted:
        w = np.random.default_rng(seed + 10).uniform(0.2, 3.0, 40)
        model.layout = TargetLayout(p, weighted=True, mean_weight=w.mean())
        Y = model.layout.join(Y, w)
    return model, X, Y


@pytest.mark.parametrize("p", [1, 3])
@pytest.mark.parametrize("weighted", [False, True])
def test_one_pass_equals_a_natural_step_then_evaluate(p, weighted, collapsed_form):
    model, X, Y = weighted_problem(p, weighted, seed=p)
    fast = model.collapsed_evaluate(X, Y)
    land_on_optimal_q(model, X, Y)
    slow = model.evaluate(X, Y)
    assert np.isclose(fast.elbo, slow.elbo, rtol=1e-12)
    assert set(fast.grads) == set(slow.grads) == {"theta", "log_noise", "inducing"}
    for name, value in slow.grads.items():
        np.testing.assert_allclose(fast.grads[name], value, rtol=1e-9, atol=1e-9 * np.abs(value).max(), err_msg=name)


def test_value_is_titsias_bound(collapsed_form):
    model, X, Y = make_problem(random_q=False)
    target = dense_collapsed_bound(model.kernel, model.state.inducing, X, Y[:, 0], model.likelihood.noise_variance,
                                   model.jitter)
    assert np.isclose(model.collapsed_evaluate(X, Y).elbo, target, rtol=1e-10)


@pytest.mark.parametrize("p", [1, 2])
def test_gradients_match_finite_differences(p, collapsed_form):
    model, X, Y = weighted_problem(p, weighted=True, seed=5)
    assert_adam_gradients_match(model, X, Y, rtol=1e-5, atol=1e-5, collapsed=True)


def test_noise_carried_by_a_white_kernel_goes_to_its_theta():
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

    from skgp_sparse.kernels import compile_kernel

    rng = np.random.default_rng(7)
    X = rng.uniform(-2, 2, size=(30, 2))
    Y = np.cos(X[:, :1] * 2) + 0.1 * rng.standard_normal((30, 1))
    kernel = compile_kernel(ConstantKernel(1.2) * Matern([0.7, 1.1], nu=2.5) + WhiteKernel(0.3), white_as_noise=True)
    state = coupled.init_state(rng.uniform(-2, 2, size=(6, 2)), n_outputs=1, n_covariances=1)
    noise = NoiseParameter(kernel, 0.2, (np.log(1e-6), np.log(1e3)))
    model = VariationalModel(coupled, kernel, GaussianLikelihood(0.2), state, 30, noise=noise, learn_inducing=True)
    assert model.collapses() and "log_noise" not in model.adam_params()
    fast = model.collapsed_evaluate(X, Y)
    land_on_optimal_q(model, X, Y)
    slow = model.evaluate(X, Y)
    assert np.isclose(fast.elbo, slow.elbo, rtol=1e-12)
    np.testing.assert_allclose(fast.grads["theta"], slow.grads["theta"], rtol=1e-9, atol=1e-9)


def test_only_models_with_one_learned_noise_collapse():
    model, X, Y = make_problem(random_q=False)
    assert model.collapses()
    model.layout = TargetLayout(1, weighted=True, known_noise=True)
    assert not model.collapses()  # per-row known noise: the search takes the general path
    model.layout = None
    model.natural = False
    assert not model.collapses()


def test_the_search_reaches_the_same_optimum_either_way():
    """Value and gradient agree to rounding, so L-BFGS-B takes the same path."""
    runs = []
    for solver in (QSolver.COLLAPSED, QSolver.EXACT):
        # EXACT: the bound of a natural step of size one and the ELBO's gradient, two passes.
        model, X, Y = make_problem(n=60, m=6, random_q=False)
        result = optimise_collapsed(model, X, Y, "fmin_l_bfgs_b", 0, np.random.default_rng(0), solver, max_iter=30)
        runs.append((result.elbo, model.kernel.theta.copy(), model.state.inducing.copy(), model.state.q_mean.copy()))
    assert np.isclose(runs[0][0], runs[1][0], rtol=1e-9)
    for fast, slow in zip(runs[0][1:], runs[1][1:]):
        np.testing.assert_allclose(fast, slow, rtol=1e-6, atol=1e-8)


def test_integer_weights_are_repeated_rows():
    model, X, Y = make_problem(n=40, m=7, random_q=False)
    w = np.random.default_rng(4).integers(0, 4, size=40)
    model.n_data = int(w.sum())
    repeated = model.collapsed_evaluate(np.repeat(X, w, axis=0), np.repeat(Y, w, axis=0))
    model.n_data = 40
    model.layout = TargetLayout(1, weighted=True, mean_weight=w.mean())
    weighted = model.collapsed_evaluate(X, model.layout.join(Y, w.astype(float)))
    assert weighted.elbo == pytest.approx(repeated.elbo, rel=1e-12)
    for name, value in repeated.grads.items():
        np.testing.assert_allclose(weighted.grads[name], value, rtol=1e-10, atol=1e-10, err_msg=name)
