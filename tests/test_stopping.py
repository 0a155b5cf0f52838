"""StoppingRule: when a minibatch fit stops, from the trend of its ELBO estimates over windows.

The rule is built positionally as ``StoppingRule(tol, window, period_steps, steps)``, where
``steps`` is the number of steps per unit of ``tol`` (one epoch in the estimators, or fewer
steps on large data), and is read only through ``add``, ``converged`` and ``period_means``.
"""

import numpy as np
import pytest

from skgp_sparse.optim.stopping import StoppingRule


def feed(rule, values, gradients=None):
    """Feed per-step ELBO values (and hyperparameter gradients); the index of the step at
    which the rule first fires (None if never)."""
    gradients = [None] * len(values) if gradients is None else gradients
    for i, (value, gradient) in enumerate(zip(values, gradients)):
        if rule.add(value, gradient=gradient) and rule.converged():
            return i
    return None


def test_periods_are_means_of_their_steps_and_the_rule_waits_for_two_windows():
    rule = StoppingRule(1e9, 2, 3, 6)
    closed = [rule.add(v) for v in [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]
    assert closed == [False, False, True, False, False, True]
    assert rule.period_means == pytest.approx([2.0, 5.0])
    # 2 * window = 4 periods are needed before the rule can say anything, whatever tol
    assert not rule.converged()


@pytest.mark.parametrize("tol, fires", [(5.9, False), (6.1, True)])
def test_the_rise_is_per_unit_of_tol(tol, fires):
    """Windows of periods [2, 5] and [8, 11]: a rise of 6 over two periods of half a unit
    each, i.e. 6 per unit."""
    rule = StoppingRule(tol, 2, 3, 6)
    values = np.arange(1.0, 13.0)
    assert (feed(rule, values) is not None) == fires


def test_fires_on_a_flat_noisy_sequence():
    rng = np.random.default_rng(0)
    rule = StoppingRule(1e-4, 5, 4, 4)
    values = -1.0 + 0.01 * rng.standard_normal(4 * 200)
    assert feed(rule, values) is not None


def test_fires_on_a_climb_slower_than_tol():
    """A noise-free climb of tol / 10 per unit has converged: it fires at the first check."""
    tol, steps = 1e-3, 8
    rule = StoppingRule(tol, 3, 4, steps)
    values = -1.0 + 0.1 * tol * np.arange(400) / steps
    assert feed(rule, values) == 2 * 3 * 4 - 1


def test_does_not_fire_on_a_climb_slower_than_tol_per_period_but_faster_than_tol_per_unit():
    """20 periods per unit, a rise of tol / 10 per period = 2 tol per unit: still climbing."""
    tol = 1e-3
    rule = StoppingRule(tol, 5, 5, 100)
    per_step = 0.1 * tol / 5
    values = -1.0 + per_step * np.arange(5 * 300)
    assert feed(rule, values) is None


def test_does_not_fire_on_a_single_dip_inside_a_climb():
    """One period ten periods' climb below the trend: a rule comparing single periods would stop."""
    tol, climb = 1e-4, 1e-2  # per period (= one unit)
    rule = StoppingRule(tol, 5, 4, 4)
    per_period = -1.0 + climb * np.arange(60)
    per_period[30] -= 10 * climb
    values = np.repeat(per_period, 4)
    assert feed(rule, values) is None
    # the dipping period is below the one before it
    assert rule.period_means[30] < rule.period_means[29]


# --- the hyperparameters' gradient: a plateau is not an optimum ------------------------------
def test_a_flat_elbo_with_a_steady_pull_on_a_hyperparameter_does_not_fire():
    """A plateau: the ELBO is flat to within tol, but one coordinate of the gradient per row
    has a mean of 0.5 standard deviations per step (a window of 150 steps puts it about six
    standard errors from zero), 0.5 nats per row per unit, far steeper than tol: the rule
    does not fire; without the pull it does."""
    rng = np.random.default_rng(0)
    n = 4 * 50 * 6
    values = -1.0 + 1e-6 * rng.standard_normal(n)
    noise = rng.standard_normal((n, 3))
    pulled = noise + np.array([0.0, 0.5, 0.0])
    assert feed(StoppingRule(1e-3, 3, 50, 50), values, pulled) is None
    fired = feed(StoppingRule(1e-3, 3, 50, 50), values, noise)
    assert fired is not None and fired < n // 2


def test_a_steady_pull_flatter_than_tol_is_not_read():
    """The length scale of an unused feature drifts towards its bound with a steady but
    vanishing gradient: 1e-4 nats per row per unit, below tol, is no reason to go on."""
    rng = np.random.default_rng(0)
    n = 4 * 50 * 6
    gradients = 1e-5 * rng.standard_normal((n, 2)) + np.array([1e-4, 0.0])
    rule = StoppingRule(1e-3, 3, 50, 50)
    assert feed(rule, np.full(n, -1.0), gradients) is not None
    assert rule.gradient_snr() == 0.0


def test_a_coordinate_held_on_its_bound_is_not_read():
    """Zero gradient (a parameter on a bound) has no spread and no pull."""
    rng = np.random.default_rng(1)
    n = 600
    gradients = np.column_stack([rng.standard_normal(n), np.zeros(n)])
    rule = StoppingRule(1e-3, 3, 50, 50)
    assert feed(rule, np.full(n, -1.0), gradients) is not None
    assert rule.gradient_snr() < 4.0


def test_the_gradient_is_not_read_when_max_gradient_snr_is_none():
    """Full-batch steps: a deterministic gradient has no noise to measure a pull against."""
    rule = StoppingRule(1e-3, 2, 1, 1, max_gradient_snr=None)
    assert feed(rule, np.full(10, -1.0), np.ones((10, 2))) is not None
    assert rule.gradient_snr() is None


def test_the_reason_names_what_held_the_fit():
    rule = StoppingRule(1e-3, 1, 10, 10)
    assert "too few" in rule.reason_not_converged()
    for i in range(20):
        rule.add(-1.0, gradient=np.array([1.0 + 0.01 * (i % 2)]))
    assert not rule.converged()
    assert "gradient still pulled" in rule.reason_not_converged()
    climbing = StoppingRule(1e-3, 1, 10, 10)
    for i in range(20):
        climbing.add(-1.0 + 0.1 * i)
    assert "still rising" in climbing.reason_not_converged()


# --- a pull along a curved ridge: Adam follows it, the ELBO does not ----------------------------
def _pulled_climb(rise_per_step, pull, n=4 * 50 * 6, seed=0):
    """A noise-free ELBO climbing by ``rise_per_step``, and a gradient whose first
    coordinate has mean ``pull`` (one standard deviation of noise per step)."""
    rng = np.random.default_rng(seed)
    values = -1.0 + rise_per_step * np.arange(n)
    gradients = rng.standard_normal((n, 2)) * pull + np.array([pull, 0.0])
    return values, gradients


def test_a_pull_the_elbo_does_not_follow_is_let_go_given_the_optimisers_reach():
    """The plateau of the test above with a reach: Adam could move the pulled coordinate
    one unit a span, which promises 0.5 nats per row; the ELBO stays flat, so the pull is
    a ridge and the rule fires where it would without the pull."""
    rng = np.random.default_rng(0)
    n = 4 * 50 * 6
    values = -1.0 + 1e-6 * rng.standard_normal(n)
    noise = rng.standard_normal((n, 3))
    pulled = noise + np.array([0.0, 0.5, 0.0])
    assert feed(StoppingRule(1e-3, 3, 50, 50, reach_per_span=1.0), values, pulled) == \
        feed(StoppingRule(1e-3, 3, 50, 50), values, noise)


@pytest.mark.parametrize("rise_per_span, fires", [(3e-4, False), (5e-5, True)])
def test_a_pull_is_followed_while_the_elbo_rises_by_a_share_of_its_promise(rise_per_span, fires):
    """A pull of 2e-3 nats per row per unit with a reach of 0.2 units a span promises 4e-4
    per span: a rise of 3e-4 (below tol, above RIDGE_SHARE of the promise) is a plateau
    being crossed; one of 5e-5 is a ridge."""
    from skgp_sparse.optim.stopping import RIDGE_SHARE

    span = 50
    assert RIDGE_SHARE * 4e-4 < 3e-4 and RIDGE_SHARE * 4e-4 > 5e-5
    values, gradients = _pulled_climb(rise_per_span / span, 2e-3)
    rule = StoppingRule(1e-3, 3, 50, span, reach_per_span=0.2)
    assert (feed(rule, values, gradients) is not None) == fires
    # without the reach the pull holds the fit either way
    assert feed(StoppingRule(1e-3, 3, 50, span), values, gradients) is None
