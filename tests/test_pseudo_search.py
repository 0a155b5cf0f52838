"""The binary classifier's exact search on Gaussian pseudo-observations (optim/pseudo.py,
VariationalModel.pseudo_observations): the pseudo-model against the true expected
log-likelihood and bound, finite differences, the damped search, and the fit's route."""

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

from skgp_sparse import SparseGPClassifier
from skgp_sparse.bases import coupled
from skgp_sparse.elbo import TargetLayout, VariationalModel
from skgp_sparse.fit import search
from skgp_sparse.likelihoods import BernoulliLikelihood
from skgp_sparse.optim import pseudo
from skgp_sparse.optim.fullbatch import optimal_q, optimise_collapsed
from skgp_sparse.optim.qsolver import QSolver

from ._gradcheck import assert_gradients_match
from ._reference_kernel import ReferenceRBF


def bernoulli_problem(link="probit", n=60, m=8, seed=0, weighted=False, random_q=True, noise=0.5):
    """A Bernoulli model counting n rows as 150, its rows and labels (with weights in the
    training layout when ``weighted``)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, 2))
    Y = (np.sin(2 * X[:, :1]) + X[:, 1:] + noise * rng.standard_normal((n, 1)) > 0).astype(float)
    state = coupled.init_state(X[:m].copy(), n_outputs=1, n_covariances=1)
    if random_q:
        state.q_mean = rng.standard_normal((m, 1))
        low = np.tril(0.3 * rng.standard_normal((m, m)))
        low[np.diag_indices(m)] = rng.uniform(0.5, 1.2, m)
        state.q_sqrt = low[None]
    model = VariationalModel(coupled, ReferenceRBF(1.3, [0.8, 1.1]), BernoulliLikelihood(link), state, 150,
                             learn_inducing=False)
    if weighted:
        w = rng.uniform(0.2, 3.0, n)
        model.layout = TargetLayout(1, weighted=True, mean_weight=w.mean())
        Y = model.layout.join(Y, w)
    return model, X, Y


def settle(model, X, Y):
    """q at its optimum to rounding; the bound there."""
    return optimal_q(model, X, Y, exact=False, max_steps=2000, rtol=1e-15)


def scaled_ell(model, X, Y, mean, var):
    """The data term (N / n) sum_i w_i E[log p(y_i | f_i)] per row, at marginals (mean, var)."""
    targets, weights, _ = (Y, None, {}) if model.layout is None else model.layout.split(Y)
    ell = model.likelihood.expected_log_lik(targets, mean, var)[0]
    ell = ell if weights is None else ell * weights
    return (model.n_data / X.shape[0]) * ell[:, 0]


@pytest.mark.parametrize("link", ["probit", "logit"])
@pytest.mark.parametrize("weighted", [False, True])
def test_pseudo_observations_match_the_likelihood_to_first_order(link, weighted):
    """Each row's Gaussian term has the expected log-likelihood's value and its
    derivatives in the marginal mean and variance (central differences)."""
    model, X, Y = bernoulli_problem(link, weighted=weighted)
    targets, beta, constant = model.pseudo_observations(X, Y)
    mean, var, _ = model.basis.marginals(model.kernel, X, model.state, model.jitter, False)
    t, m, v = targets[:, 0], mean[:, 0], var[:, 0]
    assert np.all(beta > 0)
    ell = scaled_ell(model, X, Y, mean, var)
    # The constants of the rows are not reported one by one: their sum makes the values agree.
    assert np.isclose(constant - np.sum(0.5 * beta * ((m - t) ** 2 + v)), ell.sum(), rtol=1e-12)
    eps = 1e-5
    d_mean = (scaled_ell(model, X, Y, mean + eps, var) - scaled_ell(model, X, Y, mean - eps, var)) / (2 * eps)
    d_var = (scaled_ell(model, X, Y, mean, var + eps) - scaled_ell(model, X, Y, mean, var - eps)) / (2 * eps)
    np.testing.assert_allclose(-beta * (m - t), d_mean, rtol=1e-6, atol=1e-8)
    # The likelihood's variance derivative is 0.5 E[g''] on its quadrature nodes, not the
    # derivative of its quadrature: they differ by the rule's error (about 1e-5 here).
    np.testing.assert_allclose(-0.5 * beta, d_var, rtol=1e-4, atol=1e-8)


@pytest.mark.parametrize("link", ["probit", "logit"])
@pytest.mark.parametrize("weighted", [False, True])
def test_the_pseudo_bound_touches_the_true_bound_at_q_optimum(link, weighted):
    """At q's optimum the pseudo-model's collapsed bound is the ELBO, with the ELBO's
    gradient in the hyperparameters (the rounds' fixed points are the true search's)."""
    model, X, Y = bernoulli_problem(link, weighted=weighted, seed=1)
    settle(model, X, Y)
    result = model.pseudo_collapsed_evaluate(X, *model.pseudo_observations(X, Y))
    true = model.evaluate(X, Y)
    assert np.isclose(result.elbo, true.elbo, rtol=1e-9)
    scale = np.abs(true.grads["theta"]).max()
    np.testing.assert_allclose(result.grads["theta"], true.grads["theta"], rtol=1e-6, atol=1e-6 * scale)


def test_away_from_q_optimum_the_pseudo_bound_is_above_the_elbo_at_that_q():
    """Away from q's optimum the pseudo-model's bound (q optimal for it) exceeds the ELBO
    at the current q, which is its value at that q: a check that the optimum is taken."""
    model, X, Y = bernoulli_problem(seed=2)
    result = model.pseudo_collapsed_evaluate(X, *model.pseudo_observations(X, Y))
    assert result.elbo > model.evaluate(X, Y, need_grad=False).elbo + 1.0


def pseudo_model_elbo(model, X, pseudo):
    """The pseudo-model's ELBO at the model's q: its constant, its Gaussian terms at the
    marginals, less KL(q || p)."""
    targets, beta, constant = pseudo
    mean, var, _ = model.basis.marginals(model.kernel, X, model.state, model.jitter, False)
    gaussian = -0.5 * np.sum(beta * ((mean[:, 0] - targets[:, 0]) ** 2 + var[:, 0]))
    return constant + gaussian - model.basis.kl_divergence(model.kernel, model.state, model.jitter)


def test_landing_on_the_pseudo_optimum_at_other_hyperparameters():
    """At hyperparameters other than those the observations were taken at, q lands where
    the pseudo-model's ELBO is its collapsed bound (q optimal for it), from well below."""
    model, X, Y = bernoulli_problem(seed=8)
    pseudo = model.pseudo_observations(X, Y)
    model.kernel.theta = model.kernel.theta + np.array([0.4, -0.3, 0.2])
    collapsed = model.pseudo_collapsed_evaluate(X, *pseudo).elbo
    assert pseudo_model_elbo(model, X, pseudo) < collapsed - 1.0
    model.land_on_pseudo_optimum(X, *pseudo[:2])
    assert np.isclose(pseudo_model_elbo(model, X, pseudo), collapsed, rtol=1e-10)


def test_landing_on_the_pseudo_optimum_where_it_was_taken_is_a_natural_step():
    """Where the observations were taken, the landing is the likelihood's own natural
    step of size one."""
    model, X, Y = bernoulli_problem(seed=9)
    pseudo = model.pseudo_observations(X, Y)
    expected = model.natural_step(model.evaluate(X, Y, need_grad="natural"), 1.0)
    model.land_on_pseudo_optimum(X, *pseudo[:2])
    np.testing.assert_allclose(model.state.q_mean, expected.q_mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(np.tril(model.state.q_sqrt), np.tril(expected.q_sqrt), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("learn_inducing", [False, True])
def test_pseudo_bound_gradients_match_finite_differences(learn_inducing):
    """The gradient of the pseudo-model's bound at fixed observations, in the kernel's
    log-hyperparameters and the inducing inputs."""
    model, X, Y = bernoulli_problem(seed=3)
    if learn_inducing:
        model.learn_fields = model.learn_fields + coupled.INDUCING_FIELDS
    observations = model.pseudo_observations(X, Y)
    grads = model.pseudo_collapsed_evaluate(X, *observations).grads
    assert set(grads) == set(model.adam_params())
    assert_gradients_match(model, grads, lambda: model.pseudo_collapsed_evaluate(X, *observations).elbo)


@pytest.mark.parametrize("link", ["probit", "logit"])
def test_the_rounds_end_where_the_damped_search_does(link):
    """Both searches maximise the bound with q optimal: the rounds end on a bound as high
    as the damped search's, where the true bound's gradient has all but vanished (one
    length scale is all but flat here, so the hyperparameters are not compared)."""
    ends = []
    for route in ("damped", "pseudo"):
        model, X, Y = bernoulli_problem(link, n=120, m=10, seed=4, random_q=False, noise=1.0)
        if route == "damped":
            optimise_collapsed(model, X, Y, "fmin_l_bfgs_b", 0, np.random.default_rng(0), QSolver.DAMPED,
                               trust_region=True, tol=1e-9)
        else:
            pseudo.optimise_pseudo(model, X, Y, 0, np.random.default_rng(0), tol=1e-9)
        bound = settle(model, X, Y)
        ends.append((bound, np.abs(model.evaluate(X, Y).grads["theta"]).max() / model.rows_counted))
    (damped_bound, _), (pseudo_bound, pseudo_slope) = ends
    # Within 1e-5 nats per row of the 150 counted (the flat length scale creeps on).
    assert pseudo_bound > damped_bound - 1e-5 * 150
    assert pseudo_slope < 1e-3
    # At the start the slope is large: the test can tell a search that did not move.
    model, X, Y = bernoulli_problem(link, n=120, m=10, seed=4, random_q=False, noise=1.0)
    settle(model, X, Y)
    assert np.abs(model.evaluate(X, Y).grads["theta"]).max() / model.rows_counted > 0.05


def test_a_round_whose_bound_falls_is_undone(monkeypatch):
    """A round that lowers the true bound leaves the model where it started, and the next
    round searches a smaller region: the search never ends below its start."""
    model, X, Y = bernoulli_problem(seed=5, random_q=False)
    radii = []
    original = pseudo.lbfgs

    def far_away(objective, initial, bounds, *args, radius, **kwargs):
        # The first round's search "ends" far down the amplitude: the bound falls.
        radii.append(radius)
        if len(radii) == 1:
            x = np.array(initial, copy=True)
            x[0] -= 3.0
            return x, 0.0, 1, True, ""
        return original(objective, initial, bounds, *args, radius=radius, **kwargs)

    monkeypatch.setattr(pseudo, "lbfgs", far_away)
    start = model.kernel.theta.copy()
    probe = bernoulli_problem(seed=5, random_q=False)[0]
    start_bound = optimal_q(probe, X, Y, exact=False, max_steps=pseudo.ROUND_Q_STEPS)
    result = pseudo.optimise_pseudo(model, X, Y, 0, np.random.default_rng(0))
    assert radii[1] == radii[0] * pseudo.RADIUS_SHRINK
    assert result.elbo >= start_bound
    assert not np.allclose(model.kernel.theta, start)


def test_restarts_keep_the_best_search():
    """Each restart is a search of its own from a random start; the model is left at the
    best one's end, with its bound."""
    model, X, Y = bernoulli_problem(seed=6, random_q=False)
    result = pseudo.optimise_pseudo(model, X, Y, 2, np.random.default_rng(0))
    assert len(result.run_elbos) == 3 and len(set(result.run_elbos)) == 3
    assert result.elbo == max(result.run_elbos)
    assert np.isclose(model.evaluate(X, Y, need_grad=False).elbo, result.elbo, rtol=1e-12)


def test_with_nothing_to_search_q_goes_to_its_optimum():
    model, X, Y = bernoulli_problem(seed=7)
    model.learn_hyperparameters = False
    theta = model.kernel.theta.copy()
    result = pseudo.optimise_pseudo(model, X, Y, 0, np.random.default_rng(0))
    assert result.n_iter == 0 and result.converged
    np.testing.assert_array_equal(model.kernel.theta, theta)
    assert np.isclose(result.elbo, settle(model, X, Y), rtol=1e-6)


def fit_routes(monkeypatch, **params):
    """The search routes a default-like binary fit takes (one entry per fresh search)."""
    routes = []
    for name in ("optimise_pseudo", "optimise_collapsed"):
        original = getattr(search, name)

        def spy(*args, _name=name, _original=original, **kwargs):
            routes.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(search, name, spy)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 2))
    y = (X[:, 0] * X[:, 1] > 0).astype(int)
    SparseGPClassifier(**{**dict(n_inducing=10, batch_size=100, max_iter=3, random_state=0), **params}).fit(X, y)
    return routes


@pytest.mark.parametrize("likelihood", ["probit", "logit"])
def test_a_binary_fit_searches_on_pseudo_observations(monkeypatch, likelihood):
    assert fit_routes(monkeypatch, likelihood=likelihood) == ["optimise_pseudo"]


def test_latent_white_noise_or_a_callable_optimizer_keep_the_damped_search(monkeypatch):
    """The pseudo-model leaves latent white noise out of its variance, and a user's
    optimiser gets the true bound."""
    white = ConstantKernel(1.0) * RBF(1.0) + WhiteKernel(0.1)
    assert fit_routes(monkeypatch, kernel=white) == ["optimise_collapsed"]

    def optimizer(obj_func, initial_theta, bounds):
        return initial_theta, obj_func(initial_theta, eval_gradient=False)

    monkeypatch.undo()
    assert fit_routes(monkeypatch, optimizer=optimizer) == ["optimise_collapsed"]


def test_a_one_batch_fit_keeps_the_damped_search(monkeypatch):
    """Where the search is the whole fit (every row in one batch) its tighter end stays."""
    assert fit_routes(monkeypatch, batch_size=None) == ["optimise_collapsed"]


def test_same_random_state_same_model():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((300, 3))
    y = (X[:, 0] + np.sin(2 * X[:, 1]) > 0).astype(int)
    probas = [SparseGPClassifier(n_inducing=12, batch_size=100, max_iter=5, random_state=3).fit(X, y).predict_proba(X)
              for _ in range(2)]
    np.testing.assert_array_equal(probas[0], probas[1])
