"""How q(u) reaches its optimum is chosen once per model (skgp_sparse/optim/qsolver.py), and
the fit's plan carries the answer for its model and for its exact search's model."""

import warnings

import numpy as np
import pytest

from skgp_sparse import SparseGPClassifier, SparseGPRegressor
from skgp_sparse.elbo import TargetLayout
from skgp_sparse.fit.plan import plan_fit
from skgp_sparse.fit.rows import InMemoryRows
from skgp_sparse.optim.qsolver import QSolver, q_solver

rng = np.random.default_rng(5)
X = rng.uniform(-2, 2, size=(200, 2))
f = np.sin(2 * X[:, 0]) + X[:, 1]


def fitted_model(estimator, target, **fit_params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        estimator.fit(X, target, **fit_params)
    return estimator._fitted_model(X.shape[0])


SMALL = {"n_inducing": 8, "max_iter": 1, "random_state": 0}


@pytest.mark.parametrize("estimator, target, expected", [
    (SparseGPRegressor(**SMALL), f, QSolver.COLLAPSED),
    (SparseGPRegressor(basis="orth_decoupled", n_orthogonal=4, **SMALL), f, QSolver.EXACT),
    (SparseGPRegressor(basis="solve", n_orthogonal=4, **SMALL), f, QSolver.DAMPED),
    (SparseGPRegressor(likelihood="student_t", **SMALL), f, QSolver.DAMPED),
    (SparseGPRegressor(n_latent=2, **SMALL), np.column_stack([f, -f, f * f]), QSolver.JOINT),
    (SparseGPClassifier(**SMALL), f > 0, QSolver.PSEUDO),
    (SparseGPClassifier(**SMALL), np.digitize(f, [-1, 1]), QSolver.DAMPED),
], ids=["coupled", "orth_decoupled", "solve", "student_t", "lmc", "binary", "three_classes"])
def test_each_model_has_its_solver(estimator, target, expected):
    model = fitted_model(estimator, target)
    assert q_solver(model) is expected
    # Rounds on pseudo-observations need L-BFGS-B; without it that search is damped.
    assert q_solver(model, lbfgs=False) is (QSolver.DAMPED if expected is QSolver.PSEUDO else expected)


def test_known_per_row_noise_leaves_an_exact_step_without_the_one_pass_bound():
    model = fitted_model(SparseGPRegressor(alpha=0.01, **SMALL), f)
    assert q_solver(model) is QSolver.COLLAPSED
    model.layout = TargetLayout(1, known_noise=True)  # the rows carry a known noise column
    assert q_solver(model) is QSolver.EXACT


def test_the_solver_properties_partition_the_cases():
    assert [s for s in QSolver if s.in_one_move] == [QSolver.COLLAPSED, QSolver.JOINT, QSolver.EXACT]
    assert [s for s in QSolver if s.one_pass_bound] == [QSolver.COLLAPSED, QSolver.JOINT]
    assert [s for s in QSolver if s.exact_step] == [QSolver.COLLAPSED, QSolver.EXACT]


@pytest.mark.parametrize("basis, model_solver", [("coupled", QSolver.COLLAPSED), ("solve", QSolver.DAMPED)])
def test_the_plan_carries_the_model_and_search_solvers(basis, model_solver):
    # Whatever basis the fit trains, its search runs on the coupled basis: the collapsed bound.
    extra = {"n_orthogonal": 4} if basis == "solve" else {}
    estimator = SparseGPRegressor(basis=basis, **SMALL, **extra)
    model = fitted_model(estimator, f)
    # A fresh minibatch fit (3,000 rows): it searches, so its plan holds the search's solver.
    plan = plan_fit(estimator._fit_settings(), model, InMemoryRows(np.tile(X, (15, 1))))
    assert plan.search
    assert plan.q_solver is model_solver and plan.search_q_solver is QSolver.COLLAPSED
