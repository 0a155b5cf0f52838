"""partial_fit, Ctrl-C during a fit, and thread limits.

These are tests of the minibatch stream: its continuation across calls and its Ctrl-C
handling, step by step. Fresh fits here skip the exact search that starts them (it is
tested in tests/test_fit_trust.py): the search leaves an unused feature's length scale
where its gradient is nearly zero, and Adam's first steps move such a coordinate by the
learning rate in the direction of its gradient's rounding, so two fits whose kernels
differ by a round trip through scikit-learn part by 1e-3 there.
"""

import os

import numpy as np
import pytest
from sklearn.model_selection import cross_validate
from threadpoolctl import threadpool_info, threadpool_limits

from skgp_sparse import SparseGPClassifier, SparseGPRegressor
from skgp_sparse.fit.training import CONJUGATE_WARMUP_STEPS, FitInterruptedWarning
from skgp_sparse.elbo import VariationalModel
from skgp_sparse.fit.plan import starts_with_search as SEARCH_RULE

from ._fit_checks import without_search

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


@pytest.fixture(autouse=True)
def stream_only(monkeypatch):
    without_search(monkeypatch)


def data(n=400, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 2))
    return X, np.sin(X[:, 0]) + 0.1 * rng.standard_normal(n), (X[:, 0] > 0).astype(int)


SETTINGS = dict(n_inducing=10, batch_size=100, random_state=0)


def regressor(**kw):
    return SparseGPRegressor(**{**SETTINGS, **kw})


def classifier(**kw):
    return SparseGPClassifier(**{**SETTINGS, **kw})


def fitted_outputs(est, X):
    if isinstance(est, SparseGPRegressor):
        return np.column_stack(est.predict(X, return_std=True))
    return est.predict_proba(X)


def trained_parameters(est):
    """Everything the training steps move but q(u): a completed fit's last pass over the
    data (settling q(u) at the final hyperparameters) moves q alone, and neither an
    interrupted fit nor a partial_fit pass takes it."""
    noise = [est.noise_variance_] if isinstance(est, SparseGPRegressor) else []
    return np.concatenate([est.kernel_.theta, est.inducing_points_.ravel(), noise])


# --- partial_fit ------------------------------------------------------------------------
def test_partial_fit_calls_continue_one_optimisation_exactly_as_fit_epochs():
    """Two partial_fit passes over all rows are fit's two epochs: the same minibatches,
    natural-step schedule and Adam moments (only the float round trip of the fitted
    kernel through scikit-learn separates them)."""
    X, y, labels = data()
    for make, target, kwargs in ((regressor, y, {}), (classifier, labels, {"classes": [0, 1]})):
        one_epoch = make(max_iter=1).fit(X, target)
        streamed = make().partial_fit(X, target, **kwargs)
        np.testing.assert_array_equal(trained_parameters(streamed), trained_parameters(one_epoch))
        two_epochs = make(max_iter=2, tol=0).fit(X, target)
        streamed.partial_fit(X, target, n_data=len(X))
        np.testing.assert_allclose(trained_parameters(streamed), trained_parameters(two_epochs), rtol=1e-8)
        assert streamed.n_steps_ == two_epochs.n_steps_ == 8 and streamed.n_iter_ == 2
        assert streamed.loss_curve_ == pytest.approx(two_epochs.loss_curve_, rel=1e-8)


def test_partial_fit_scales_the_elbo_by_rows_seen_or_n_data(monkeypatch):
    seen = []
    original = VariationalModel.evaluate

    def spy(self, X, Y, need_grad=True):
        seen.append(self.n_data)
        return original(self, X, Y, need_grad)

    monkeypatch.setattr(VariationalModel, "evaluate", spy)
    X, y, _ = data()
    reg = regressor().partial_fit(X[:200], y[:200])
    reg.partial_fit(X[200:], y[200:])
    assert reg.n_rows_seen_ == 400 and set(seen[:2]) == {200} and set(seen[2:]) == {400}
    seen.clear()
    reg.partial_fit(X[:100], y[:100], n_data=400)
    assert seen == [400] and reg.n_rows_seen_ == 500
    with pytest.raises(ValueError, match="n_data"):
        reg.partial_fit(X[:100], y[:100], n_data=0)


def test_partial_fit_after_fit_continues_it():
    X, y, _ = data()
    reg = regressor(max_iter=3).fit(X, y)
    before = reg.elbo(X, y)
    steps = reg.n_steps_
    reg.partial_fit(X, y, n_data=len(X))
    assert reg.n_steps_ == steps + 4 and reg.elbo(X, y) > before - 1.0
    with pytest.raises(ValueError, match="target column"):
        reg.partial_fit(X, np.column_stack([y, y]))
    with pytest.raises(ValueError, match="features"):
        reg.partial_fit(X[:, :1], y)


def test_streaming_chunks_learns_the_function():
    X, y, labels = data(2000)
    Xt, yt, lt = data(300, seed=1)
    reg, clf = regressor(), classifier()
    for _ in range(3):
        for start in range(0, 2000, 250):
            rows = slice(start, start + 250)
            reg.partial_fit(X[rows], y[rows], n_data=2000)
            clf.partial_fit(X[rows], labels[rows], classes=[0, 1])
    assert reg.score(Xt, yt) > 0.95 and clf.score(Xt, lt) > 0.95


def test_classifier_partial_fit_needs_classes_first_and_refuses_unseen_labels():
    X, _, labels = data()
    with pytest.raises(ValueError, match="classes must be passed on the first call"):
        classifier().partial_fit(X, labels)
    clf = classifier()
    # The first chunk may miss a class when `classes` names it.
    clf.partial_fit(X[labels == 0][:50], labels[labels == 0][:50], classes=[0, 1])
    assert list(clf.classes_) == [0, 1]
    with pytest.raises(ValueError, match=r"labels not seen in fit: \[2\].*first call"):
        clf.partial_fit(X[:3], [0, 1, 2])
    with pytest.raises(ValueError, match="differs from the classes of the first call"):
        clf.partial_fit(X[:3], [0, 1, 1], classes=[0, 1, 2])
    with pytest.raises(ValueError, match="at least 2 classes"):
        classifier().partial_fit(X[:3], [1, 1, 1], classes=[1])


# --- Ctrl-C -----------------------------------------------------------------------------
def interrupt_on_call(monkeypatch, cls, name, call, after=False):
    """Make ``cls.name`` raise KeyboardInterrupt on its ``call``-th call (before or after running)."""
    original = getattr(cls, name)
    count = [0]

    def patched(self, *args, **kwargs):
        count[0] += 1
        if count[0] == call and not after:
            raise KeyboardInterrupt
        out = original(self, *args, **kwargs)
        if count[0] == call and after:
            raise KeyboardInterrupt
        return out

    monkeypatch.setattr(cls, name, patched)


@pytest.mark.parametrize("make, target", [(regressor, 1), (classifier, 2)])
def test_ctrl_c_between_epochs_keeps_the_model_of_the_completed_epochs(make, target):
    X, y = data()[0], data()[target]
    est = make(max_iter=10, tol=0)

    def stop_after_two(model, history):
        if history.n_epochs == 2:
            raise KeyboardInterrupt

    est._epoch_callback = stop_after_two
    with pytest.warns(FitInterruptedWarning, match="after 8 steps"):
        est.fit(X, y)
    reference = make(max_iter=2, tol=0).fit(X, y)
    assert est.n_iter_ == 2 and est.n_steps_ == 8 and not est.converged_
    np.testing.assert_array_equal(trained_parameters(est), trained_parameters(reference))
    assert np.all(np.isfinite(fitted_outputs(est, X)))


@pytest.mark.parametrize("where, after", [("evaluate", False), ("set_adam_params", False),
                                          ("set_adam_params", True)])
def test_ctrl_c_mid_step_leaves_the_last_completed_step(monkeypatch, where, after):
    """Interrupted while computing step 9, or while storing it (its new q(u) stored but
    not its Adam parameters, or both stored but not yet counted): the model is step 8's."""
    X, y, _ = data()
    reference = regressor(max_iter=2, tol=0).fit(X, y)
    # The first steps move q(u) alone: Adam's parameters are first stored after them.
    call = 9 if where == "evaluate" else 9 - CONJUGATE_WARMUP_STEPS
    interrupt_on_call(monkeypatch, VariationalModel, where, call, after=after)
    est = regressor(max_iter=10, tol=0)
    with pytest.warns(FitInterruptedWarning):
        est.fit(X, y)
    assert est.n_steps_ == 8 and est.n_iter_ == 2
    np.testing.assert_array_equal(trained_parameters(est), trained_parameters(reference))


def test_ctrl_c_mid_epoch_counts_the_partial_epoch(monkeypatch):
    X, y, _ = data()
    interrupt_on_call(monkeypatch, VariationalModel, "evaluate", 7)
    with pytest.warns(FitInterruptedWarning):
        est = regressor(max_iter=10, tol=0).fit(X, y)
    assert est.n_steps_ == 6 and est.n_iter_ == 2 and len(est.loss_curve_) == 2
    assert np.all(np.isfinite(fitted_outputs(est, X)))


def test_ctrl_c_never_corrupts_a_previous_fit_under_warm_start(monkeypatch):
    X, y, _ = data()
    est = regressor(max_iter=2, tol=0, warm_start=True).fit(X, y)
    before = fitted_outputs(est, X)
    # Before the first step of the new fit: the interrupt propagates, the old fit stays.
    interrupt_on_call(monkeypatch, VariationalModel, "evaluate", 1)
    with pytest.raises(KeyboardInterrupt):
        est.fit(X, y)
    assert est.n_steps_ == 8
    np.testing.assert_array_equal(fitted_outputs(est, X), before)
    monkeypatch.undo()
    without_search(monkeypatch)
    # After some steps: the fit continued for those steps, as an uninterrupted one would.
    reference = regressor(max_iter=2, tol=0, warm_start=True).fit(X, y)
    reference.set_params(max_iter=1).fit(X, y)
    interrupt_on_call(monkeypatch, VariationalModel, "evaluate", 5)
    with pytest.warns(FitInterruptedWarning):
        est.fit(X, y)
    assert est.n_steps_ == 12
    np.testing.assert_array_equal(trained_parameters(est), trained_parameters(reference))


# --- threads ------------------------------------------------------------------------------
def blas_threads():
    """Threads of every BLAS loaded, scipy's (the one skgp_sparse.linalg calls) among them."""
    info = [i for i in threadpool_info() if i["user_api"] == "blas"]
    assert any("scipy" in i["filepath"] for i in info), info
    return max(i["num_threads"] for i in info)


class ThreadRecordingRegressor(SparseGPRegressor):
    """Records the BLAS thread count seen between epochs of its own fit."""

    def fit(self, X, y):
        counts = []
        self._epoch_callback = lambda model, history: counts.append(blas_threads())
        super().fit(X, y)
        self.blas_threads_seen_ = counts
        return self


def test_ctrl_c_during_the_exact_search_is_raised_and_fits_nothing(monkeypatch):
    """Before the first step there is no model to keep: an interrupt in the search that
    starts a fit is the user's, raised again, and the estimator stays unfitted."""
    from skgp_sparse.fit import plan

    # The rule itself, as imported before the autouse fixture replaced it.
    monkeypatch.setattr(plan, "starts_with_search", SEARCH_RULE)
    interrupt_on_call(monkeypatch, VariationalModel, "evaluate", 3)
    X, y, _ = data()
    est = regressor(batch_size=100)
    with pytest.raises(KeyboardInterrupt):
        est.fit(X, y)
    assert not hasattr(est, "variational_state_")


def test_fit_honours_threadpool_limits():
    X, y, _ = data()
    with threadpool_limits(1, user_api="blas"):
        est = ThreadRecordingRegressor(**SETTINGS, max_iter=3, tol=0).fit(X, y)
    assert est.blas_threads_seen_ == [1, 1, 1]


def test_parallel_grid_jobs_do_not_oversubscribe():
    """joblib limits each worker's BLAS to cpu_count // n_jobs threads, and fit keeps it."""
    X, y, _ = data(400)  # two folds of 200 rows: minibatch fits (100 rows a batch)
    n_jobs = 2
    out = cross_validate(ThreadRecordingRegressor(**SETTINGS, max_iter=2, tol=0), X, y, cv=2, n_jobs=n_jobs,
                         return_estimator=True)
    cores = os.cpu_count()
    for est in out["estimator"]:
        assert max(est.blas_threads_seen_) * n_jobs <= max(cores, n_jobs)
