"""Adam and the natural-step schedule with its back-off."""

import numpy as np
import pytest

from skgp_sparse.linalg import CholeskyError
from skgp_sparse.optim import Adam, NaturalStepSchedule


def test_adam_first_step_is_learning_rate_in_the_gradient_sign_and_bounds_clip():
    adam = Adam(learning_rate=0.1)
    out = adam.step({"a": np.array([0.0, 0.0]), "b": np.array([1.0])},
                    {"a": np.array([3.0, -0.5]), "b": np.array([2.0])},
                    bounds={"b": (0.0, 1.05)})
    np.testing.assert_allclose(out["a"], [0.1, -0.1], rtol=1e-6)
    np.testing.assert_allclose(out["b"], [1.05])


def test_adam_maximises_a_concave_quadratic():
    adam = Adam(learning_rate=0.05)
    x = {"x": np.array([3.0, -2.0])}
    for _ in range(2000):
        x = adam.step(x, {"x": -2 * (x["x"] - np.array([0.5, 1.0]))})
    np.testing.assert_allclose(x["x"], [0.5, 1.0], atol=1e-3)


def test_conjugate_schedule_starts_at_one_and_decays_to_the_floor():
    schedule = NaturalStepSchedule(0.1, conjugate=True, full_batch=False)
    sizes = [schedule.apply(lambda s: s)[1] for _ in range(30)]
    assert sizes[0] == 1.0 and sizes[1] == 0.5 and sizes[-1] == 0.1
    full = NaturalStepSchedule(0.1, conjugate=True, full_batch=True)
    assert all(full.apply(lambda s: s)[1] == 1.0 for _ in range(5))


def test_non_conjugate_schedule_warms_up():
    schedule = NaturalStepSchedule(0.2, conjugate=False, full_batch=False, warmup_steps=10)
    sizes = [schedule.apply(lambda s: s)[1] for _ in range(12)]
    assert sizes[0] == pytest.approx(0.02) and sizes[9] == pytest.approx(0.2) and sizes[11] == pytest.approx(0.2)


def test_failed_step_is_halved_counted_and_remembered():
    schedule = NaturalStepSchedule(0.5, conjugate=True, full_batch=True)
    tried = []

    def step(size):
        tried.append(size)
        if size > 0.3:
            raise CholeskyError("not positive definite")
        return "ok"

    result, size = schedule.apply(step)
    assert result == "ok" and tried == [1.0, 0.5, 0.25] and size == 0.25
    assert schedule.n_backoffs == 2
    # the reduction persists and recovers slowly
    assert schedule.current() == pytest.approx(0.25 * 1.1)


def test_a_step_that_always_fails_raises_a_clear_error():
    schedule = NaturalStepSchedule(0.5, conjugate=True, full_batch=True)

    def broken(size):
        raise CholeskyError("no")

    with pytest.raises(CholeskyError, match="natural_step_size"):
        schedule.apply(broken)


def test_a_falling_elbo_halves_later_steps_for_good():
    schedule = NaturalStepSchedule(0.2, conjugate=False, full_batch=False, warmup_steps=1, elbo_drop_tol=0.01)
    assert not schedule.end_epoch(-0.50)  # nothing to compare with yet
    assert not schedule.end_epoch(-0.40)  # rose
    assert not schedule.end_epoch(-0.405)  # fell, but within the tolerance
    assert schedule.current() == pytest.approx(0.2)
    assert schedule.end_epoch(-0.45)  # fell by more than the tolerance
    assert schedule.n_backoffs == 1 and schedule.current() == pytest.approx(0.1)
    # successful steps do not undo it (unlike a Cholesky back-off)
    for _ in range(50):
        schedule.apply(lambda s: s)
    assert schedule.current() == pytest.approx(0.1)


def test_the_elbo_back_off_is_off_by_default():
    schedule = NaturalStepSchedule(0.2, conjugate=True, full_batch=True)
    schedule.end_epoch(0.0)
    assert not schedule.end_epoch(-100.0) and schedule.n_backoffs == 0


def test_adam_step_scales_multiply_the_learning_rate_per_parameter():
    adam = Adam(learning_rate=0.1, step_scales={"z": np.array([1e-6, 1e6])})
    out = adam.step({"z": np.zeros((3, 2)), "t": np.zeros(1)}, {"z": np.ones((3, 2)), "t": np.ones(1)})
    np.testing.assert_allclose(out["z"], np.tile([1e-7, 1e5], (3, 1)), rtol=1e-6)
    np.testing.assert_allclose(out["t"], [0.1], rtol=1e-6)


def _inducing_rates_of_fits(monkeypatch, fits):
    """The rate on the inducing inputs each fit's stream takes
    (``training.stream_inducing_rate``): ``fits`` holds (estimator, targets of a function
    of X's rows) pairs."""
    from skgp_sparse.fit import training

    seen = []
    plain = training.stream_inducing_rate

    def recording(*args, **kwargs):
        seen.append(plain(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(training, "stream_inducing_rate", recording)
    X = np.random.default_rng(0).uniform(-2, 2, size=(300, 2))
    f = np.sin(2 * X[:, 0]) + X[:, 1]
    rates = []
    for estimator, targets in fits:
        seen.clear()
        estimator.fit(X, targets(f))
        rates.append(list(seen))
    return rates


def _no_moves(obj_func, initial_theta, bounds):
    """A user's optimiser (GPR's protocol) that stays at its start."""
    return initial_theta, obj_func(initial_theta, eval_gradient=False)


def test_inducing_inputs_move_slower_in_a_stream_from_the_searchs_q(monkeypatch):
    """A minibatch stream that starts from the q(u) of the binary classifier's search on
    pseudo-observations (on the search's coupled basis) moves the inducing inputs at
    SEARCHED_Q_INDUCING_RATE of Adam's rate; the Poisson and Gaussian likelihoods,
    another basis, a one-batch fit, a user's optimiser (the damped search) and a
    many-class stream (no search) keep the full rate. And Adam takes it: its step scale
    on the inducing inputs is that share of the plain one."""
    import warnings

    from skgp_sparse import SparseGPClassifier, SparseGPRegressor
    from skgp_sparse.fit.training import SEARCHED_Q_INDUCING_RATE, make_optimisers

    common = dict(n_inducing=10, batch_size=100, max_iter=2, random_state=0)
    binary, counts = (lambda f: (f > 0).astype(int)), (lambda f: np.round(np.exp(f)))
    fits = [(SparseGPClassifier(**common), binary),
            (SparseGPRegressor(likelihood="poisson", **common), counts),
            (SparseGPRegressor(**common), lambda f: f),
            (SparseGPClassifier(basis="inverse_free", **common), binary),
            (SparseGPClassifier(**{**common, "batch_size": None}), binary),
            (SparseGPClassifier(**common, optimizer=_no_moves), binary),
            (SparseGPClassifier(**common), lambda f: np.digitize(f, [-1.0, 0.0, 1.0]))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rates = _inducing_rates_of_fits(monkeypatch, fits)
    slow = [SEARCHED_Q_INDUCING_RATE]
    assert rates == [slow, [1.0], [1.0], [1.0], [1.0], [1.0], [1.0]]

    # Adam takes it: its step scale on the inducing inputs is that share of the plain one.
    from types import SimpleNamespace

    from sklearn.gaussian_process.kernels import RBF

    from skgp_sparse.bases import coupled
    from skgp_sparse.elbo import VariationalModel
    from skgp_sparse.kernels import compile_kernel
    from skgp_sparse.likelihoods import BernoulliLikelihood
    from skgp_sparse.optim.qsolver import QSolver

    model = VariationalModel(coupled, compile_kernel(RBF([0.5, 2.0])), BernoulliLikelihood("probit"),
                             coupled.init_state(np.zeros((4, 2)), n_outputs=1, n_covariances=1), 100)
    settings = SimpleNamespace(natural_step_size=1.0, learning_rate=0.01, optimizer=None)
    plain, slower = (make_optimisers(settings, model, SimpleNamespace(one_batch=False, x_scale=np.ones(2),
                                                                      search=search, hand_over=False,
                                                                      on_search_basis=True,
                                                                      search_q_solver=QSolver.PSEUDO), 0)[1]
                     for search in (False, True))
    np.testing.assert_allclose(plain.step_scales["inducing"], [0.5, 1.0])
    np.testing.assert_allclose(slower.step_scales["inducing"], [0.15, 0.3])
