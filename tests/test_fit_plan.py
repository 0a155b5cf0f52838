"""The plan of a fit (skgp_sparse/fit/plan.py): one batch or the stream, the rows of a
step, whether and on how many rows the exact search runs, how q(u) is settled, decided
once and as the pipeline decided them before the plan existed."""

import types
import warnings

import numpy as np
import pytest

from skgp_sparse import SparseGPClassifier, SparseGPRegressor
from skgp_sparse.bases import BASES, SEARCH_BASIS
from skgp_sparse.fit import pipeline
from skgp_sparse.fit.plan import (AUTO_BATCH_SIZE, AUTO_FULL_BATCH_ROWS, SEARCH_ROWS, batch_rows, feature_scale,
                                  plan_fit, plan_pass)
from skgp_sparse.fit.rows import InMemoryRows
from skgp_sparse.fit.settings import FitSettings
from skgp_sparse.fit.training import MONITOR_MIN_ROWS, MONITOR_ROWS, MONITOR_SHARE, monitor_size


def settings(batch_size="auto"):
    return FitSettings(name="Test", batch_size=batch_size, max_iter=1, tol=1e-3, n_iter_no_change=3,
                       natural_step_size=0.1, learning_rate=0.02, optimizer="fmin_l_bfgs_b", n_restarts_optimizer=0,
                       jitter="auto", verbose=0, backend="numpy", dtype="float64")


def model(closed_form=True, exact=True, conjugate=True, natural=True, joint=False, learns=True, basis=SEARCH_BASIS):
    """What the plan reads of a model: its capabilities, as plain answers (``closed_form``:
    the bound with q optimal in one pass); its search's model is itself."""
    fake = types.SimpleNamespace(
        basis=basis,
        collapses=lambda: closed_form,
        natural_step_is_exact=lambda jointly=True: exact,
        takes_pseudo_observations=lambda: False,
        solves_q_in_closed_form=lambda: joint,
        outputs=types.SimpleNamespace(learned=False),
        natural=natural, learn_hyperparameters=learns, n_data=0,
        likelihood=types.SimpleNamespace(conjugate=conjugate),
    )
    fake.search_model = lambda n_rows: fake
    return fake


def rows(n, d=2):
    return InMemoryRows(np.random.default_rng(0).standard_normal((n, d)))


def test_batch_rows_auto_none_and_int():
    assert batch_rows("auto", AUTO_FULL_BATCH_ROWS, collapses=True) == AUTO_FULL_BATCH_ROWS
    assert batch_rows("auto", AUTO_FULL_BATCH_ROWS + 1, collapses=True) == AUTO_BATCH_SIZE
    assert batch_rows("auto", 300, collapses=False) == 300  # min(1024, 300)
    assert batch_rows("auto", 5000, collapses=False) == AUTO_BATCH_SIZE
    assert batch_rows(None, 5000, collapses=False) == 5000
    assert batch_rows(64, 5000, collapses=True) == 64
    assert batch_rows(64, 10, collapses=True) == 10


def test_small_gaussian_data_is_one_collapsed_batch_without_a_search():
    plan = plan_fit(settings(), model(), rows(300))
    assert (plan.batch_rows, plan.one_batch, plan.collapsed, plan.steps_per_epoch) == (300, True, True, 1)
    assert not plan.search and not plan.hand_over


def test_large_data_streams_after_a_search_on_search_rows():
    plan = plan_fit(settings(), model(), rows(3000))
    assert (plan.batch_rows, plan.one_batch, plan.collapsed, plan.steps_per_epoch) == (AUTO_BATCH_SIZE, False, False, 3)
    assert plan.search and plan.search_rows == SEARCH_ROWS and not plan.hand_over


def test_one_batch_without_a_closed_form_is_searched_then_handed_over():
    # A classifier's one batch: full-batch steps, started where the search on every row ended.
    plan = plan_fit(settings(None), model(closed_form=False, exact=False, conjugate=False), rows(500))
    assert plan.one_batch and not plan.collapsed
    assert plan.search and plan.hand_over and plan.search_rows == 500
    assert plan.settle == "damped" and not plan.check_q


@pytest.mark.parametrize("basis", list(BASES))
def test_the_plan_says_whether_the_model_trains_the_search_basis(basis):
    # Only then can the model's q(u) start from the search's (fit/training.py asks the plan).
    plan = plan_fit(settings(), model(basis=BASES[basis]), rows(3000))
    assert plan.on_search_basis == (BASES[basis] is SEARCH_BASIS) == (basis == "coupled")


@pytest.mark.parametrize("fresh, learns", [(False, True), (True, False)])
def test_no_search_for_a_warm_start_or_fixed_hyperparameters(fresh, learns):
    plan = plan_fit(settings(), model(learns=learns), rows(3000), fresh=fresh)
    assert not plan.search and not plan.hand_over


def test_how_q_is_settled():
    assert plan_fit(settings(), model(), rows(50)).settle == "exact"
    assert plan_fit(settings(), model(exact=False), rows(50)).settle == "damped"
    assert plan_fit(settings(), model(joint=True), rows(50)).settle == "joint"
    assert plan_fit(settings(), model(natural=False, exact=False), rows(50)).settle is None


def test_the_q_check_runs_where_q_can_fall_short_of_a_conjugate_optimum():
    assert not plan_fit(settings(), model(), rows(50)).check_q
    assert plan_fit(settings(), model(exact=False), rows(50)).check_q
    assert not plan_fit(settings(), model(exact=False), rows(50), fresh=False).check_q


def test_a_partial_fit_pass_is_never_one_batch_and_keeps_the_streams_scales():
    plan = plan_pass(settings(None), model(), rows(300))
    assert (plan.batch_rows, plan.one_batch, plan.collapsed, plan.search) == (300, False, False, True)
    scale = np.array([3.0, 4.0])
    plan = plan_pass(settings(), model(), rows(300), fresh=False, x_scale=scale)
    assert plan.x_scale is scale and not plan.search


def test_scales_are_the_weighted_spread_of_the_rows():
    r = rows(400)
    weights = np.linspace(0.5, 2.0, 400)
    np.testing.assert_array_equal(plan_fit(settings(), model(), r, weights).x_scale, feature_scale(r.X, weights))


@pytest.mark.parametrize("make, n, expected", [
    (lambda: SparseGPRegressor(n_inducing=8, max_iter=1, random_state=0), 300, (300, True, False)),
    (lambda: SparseGPRegressor(n_inducing=8, max_iter=1, random_state=0), 2100, (1024, False, True)),
    (lambda: SparseGPRegressor(n_inducing=8, max_iter=1, random_state=0, alpha=0.01), 300, (300, True, False)),
    (lambda: SparseGPRegressor(n_inducing=8, max_iter=1, random_state=0, likelihood="student_t"), 300,
     (300, False, True)),
    (lambda: SparseGPClassifier(n_inducing=8, max_iter=1, random_state=0), 300, (300, False, True)),
])
def test_the_estimators_plans(monkeypatch, make, n, expected):
    """The plan each estimator's fit makes: (rows per step, collapsed, search). Known noise
    per row (alpha) has no one-pass collapsed bound, but an exact natural step reaches it,
    so its one batch is still the search of that bound; a Student-t one batch is stepped
    after a search."""
    plans = []
    original = pipeline.plan_fit
    monkeypatch.setattr(pipeline, "plan_fit", lambda *a, **k: plans.append(original(*a, **k)) or plans[-1])
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (n, 2))
    y = np.sin(X[:, 0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        make().fit(X, y if isinstance(make(), SparseGPRegressor) else (y > 0).astype(int))
    [plan] = plans
    assert (plan.batch_rows, plan.collapsed, plan.search) == expected
    assert plan.search_rows == min(n, SEARCH_ROWS)


@pytest.mark.parametrize("n, batch, expected", [
    (3_000, 1024, MONITOR_MIN_ROWS),                       # 3 steps an epoch: 3,072 rows a period
    (6_660, 1024, 7 * 1024 // MONITOR_SHARE),              # 7 steps: 7,168 rows
    (18_000, 1024, 18 * 1024 // MONITOR_SHARE),            # 18 steps: 3,072 rows
    (1_000_000, 1024, MONITOR_ROWS),                       # 50-step periods: the cap
    (40_000, 2048, min(MONITOR_ROWS, 20 * 2048 // MONITOR_SHARE)),
])
def test_the_stopping_rules_sample_is_a_share_of_a_periods_rows(n, batch, expected):
    plan = plan_fit(settings(batch_size=batch), model(), rows(n, d=1))
    assert monitor_size(plan) == expected
    assert MONITOR_MIN_ROWS <= monitor_size(plan) <= MONITOR_ROWS
