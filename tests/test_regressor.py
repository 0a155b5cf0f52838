"""SparseGPRegressor end to end: exactness against GaussianProcessRegressor, API, errors."""

import io
import pickle
import warnings

import joblib
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Matern, WhiteKernel
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skgp_sparse import SparseGPRegressor

from ._fit_checks import without_search


def toy(n=200, d=2, p=None, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, d))
    f = np.sin(X[:, 0]) + 0.5 * np.cos(2 * X[:, 1 % d])
    if p is None:
        return X, f + 0.1 * rng.standard_normal(n)
    return X, np.column_stack([f * (j + 1) for j in range(p)]) + 0.1 * rng.standard_normal((n, p))


def exact_setting(n=25, p=None):
    """Well-separated 1-D inputs so that K(X, X) is well conditioned without jitter."""
    rng = np.random.default_rng(1)
    X = np.linspace(-6, 6, n)[:, None] + 0.05 * rng.standard_normal((n, 1))
    y = np.sin(X[:, 0]) + 0.2 * rng.standard_normal(n)
    if p is not None:
        y = np.column_stack([y * (j + 1) for j in range(p)])
    kernel = ConstantKernel(1.5, "fixed") * Matern(length_scale=0.9, length_scale_bounds="fixed", nu=2.5)
    noise = 0.05
    sparse = SparseGPRegressor(
        kernel, inducing_init=X, learn_inducing=False, noise_variance=noise, noise_variance_bounds="fixed",
        batch_size=None, max_iter=1, normalize_y=False, jitter=0.0,
    )
    gpr = GaussianProcessRegressor(kernel, alpha=noise, optimizer=None)
    return X, y, sparse, gpr


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("p", [None, 2])
def test_inducing_at_the_data_recovers_the_exact_gp(p):
    X, y, sparse, gpr = exact_setting(p=p)
    sparse.fit(X, y)
    gpr.fit(X, y)
    assert np.isclose(sparse.elbo(X, y), gpr.log_marginal_likelihood_value_, rtol=1e-6)
    Xt = np.linspace(-7, 7, 31)[:, None]
    mean, var = sparse.latent_mean_and_variance(Xt)
    gmean, gstd = gpr.predict(Xt, return_std=True)
    np.testing.assert_allclose(mean, gmean, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(np.sqrt(var), gstd, rtol=1e-5, atol=1e-6)
    _, gcov = gpr.predict(Xt, return_cov=True)
    _, cov = sparse.predict(Xt, return_cov=True)
    noise_eye = 0.05 * np.eye(31) if p is None else (0.05 * np.eye(31))[:, :, None]
    np.testing.assert_allclose(cov - noise_eye, gcov, atol=1e-6)


@pytest.mark.parametrize("p", [None, 1, 3])
def test_output_shapes_follow_gaussian_process_regressor(p):
    X, y = toy(60, p=p)
    reg = SparseGPRegressor(n_inducing=10, max_iter=3, random_state=0).fit(X, y)
    gpr = GaussianProcessRegressor().fit(X, y)
    Xt = X[:7]
    for kwargs in ({}, {"return_std": True}, {"return_cov": True}):
        ours, theirs = reg.predict(Xt, **kwargs), gpr.predict(Xt, **kwargs)
        ours, theirs = (ours,) if not kwargs else ours, (theirs,) if not kwargs else theirs
        assert [a.shape for a in ours] == [b.shape for b in theirs], kwargs
    assert reg.sample_y(Xt, n_samples=4).shape == gpr.sample_y(Xt, n_samples=4).shape
    assert [a.shape for a in reg.latent_mean_and_variance(Xt)] == [reg.predict(Xt).shape] * 2


def test_predictive_std_includes_noise_and_latent_does_not():
    X, y = toy(150)
    reg = SparseGPRegressor(n_inducing=20, max_iter=20, random_state=0).fit(X, y)
    _, std = reg.predict(X[:5], return_std=True)
    _, var = reg.latent_mean_and_variance(X[:5])
    y_scale = np.std(y)
    np.testing.assert_allclose(std**2, var + reg.noise_variance_ * y_scale**2, rtol=1e-10)


def test_fits_a_smooth_function_well():
    X, y = toy(2000)
    reg = SparseGPRegressor(n_inducing=50, batch_size=256, max_iter=30, random_state=0).fit(X, y)
    Xt, yt = toy(500, seed=5)
    assert reg.score(Xt, yt) > 0.97
    # the noise level used to make y is 0.1 (variance 0.01 on the raw scale)
    assert 0.005 < reg.noise_variance_ * np.var(y) < 0.02


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_adam_only_mode_fits_but_natural_steps_get_further_in_the_same_epochs(monkeypatch):
    """Both from the same start, without the exact search: after it (a small noise
    variance), Adam needs more than 10 epochs to bring q(u) from its prior (measured: R^2
    0.78 after 10 epochs, where the natural steps land on q's optimum at once)."""
    without_search(monkeypatch)
    X, y = toy(2000)
    Xt, yt = toy(500, seed=5)
    settings = dict(n_inducing=30, batch_size=256, max_iter=10, tol=0, random_state=0)
    natural = SparseGPRegressor(**settings).fit(X, y)
    adam = SparseGPRegressor(variational_optimizer="adam", learning_rate=0.05, **settings).fit(X, y)
    assert adam.score(Xt, yt) > 0.9
    assert natural.elbo(X, y) > adam.elbo(X, y)


def test_loss_curve_rises_and_counts_epochs(monkeypatch):
    """From the kernel's initial hyperparameters (no exact search) the ELBO climbs for all
    15 epochs, so tol=0 lets the fit run to max_iter."""
    without_search(monkeypatch)
    X, y = toy(1000)
    reg = SparseGPRegressor(n_inducing=30, batch_size=200, max_iter=15, tol=0, random_state=0)
    with pytest.warns(ConvergenceWarning, match="max_iter"):
        reg.fit(X, y)
    assert reg.n_iter_ == 15 == len(reg.loss_curve_)
    assert reg.n_steps_ == 15 * 5
    assert reg.loss_curve_[-1] > reg.loss_curve_[0]


def test_tol_stops_early_without_warning():
    X, y = toy(300)
    reg = SparseGPRegressor(n_inducing=20, batch_size=None, max_iter=2000, tol=1e-3, n_iter_no_change=3, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        reg.fit(X, y)
    assert reg.converged_ and reg.n_iter_ < 2000


def test_same_random_state_same_model():
    X, y = toy(500)
    kw = dict(n_inducing=15, batch_size=64, max_iter=3, random_state=3)
    a = SparseGPRegressor(**kw).fit(X, y)
    b = SparseGPRegressor(**kw).fit(X, y)
    np.testing.assert_array_equal(a.predict(X), b.predict(X))
    c = SparseGPRegressor(**{**kw, "random_state": 4}).fit(X, y)
    assert not np.array_equal(a.predict(X), c.predict(X))


def test_fixed_hyperparameters_stay_fixed_and_bounds_hold():
    X, y = toy(300)
    kernel = ConstantKernel(1.0, "fixed") * RBF([1.0, 1.0], length_scale_bounds=(0.8, 1.2))
    reg = SparseGPRegressor(kernel, n_inducing=20, max_iter=20, learning_rate=0.1, random_state=0).fit(X, y)
    assert reg.kernel_.k1.constant_value == 1.0
    assert np.all((reg.kernel_.k2.length_scale >= 0.8 - 1e-12) & (reg.kernel_.k2.length_scale <= 1.2 + 1e-12))
    reg = SparseGPRegressor(n_inducing=20, max_iter=5, noise_variance=0.3, noise_variance_bounds="fixed").fit(X, y)
    assert reg.noise_variance_ == pytest.approx(0.3)


def test_white_kernel_term_is_the_observation_noise():
    X, y = toy(400)
    kernel = ConstantKernel() * RBF([1.0, 1.0]) + WhiteKernel(0.5)
    reg = SparseGPRegressor(kernel, n_inducing=20, max_iter=200, random_state=0).fit(X, y)
    assert isinstance(reg.kernel_.k2, WhiteKernel)
    assert reg.kernel_.k2.noise_level == pytest.approx(reg.noise_variance_)
    assert reg.noise_variance_ < 0.1  # learned down from 0.5


def test_learned_inducing_points_move_and_fixed_ones_do_not():
    X, y = toy(300)
    Z0 = X[:10].copy()
    moved = SparseGPRegressor(n_inducing=10, inducing_init=Z0, max_iter=5).fit(X, y)
    assert not np.allclose(moved.inducing_points_, Z0)
    kept = SparseGPRegressor(n_inducing=10, inducing_init=Z0, learn_inducing=False, max_iter=5).fit(X, y)
    np.testing.assert_array_equal(kept.inducing_points_, Z0)


@pytest.mark.parametrize("init", ["kmeans", "greedy_variance", "random"])
def test_inducing_initialisations(init):
    X, y = toy(300)
    reg = SparseGPRegressor(n_inducing=25, inducing_init=init, max_iter=10, random_state=0).fit(X, y)
    assert reg.inducing_points_.shape == (25, 2)
    assert reg.score(X, y) > 0.8


def test_warm_start_continues():
    X, y = toy(300)
    reg = SparseGPRegressor(n_inducing=20, max_iter=2, warm_start=True, random_state=0).fit(X, y)
    first = reg.loss_curve_[-1]
    Z = reg.inducing_points_.copy()
    reg.fit(X, y)
    assert reg.loss_curve_[0] >= first - abs(first) * 0.05
    assert reg.inducing_points_.shape == Z.shape


def test_verbose_prints_one_line_per_epoch(capsys):
    X, y = toy(100)
    SparseGPRegressor(n_inducing=10, batch_size=50, max_iter=3, tol=0, verbose=1).fit(X, y)
    lines = [l for l in capsys.readouterr().out.splitlines() if l.startswith("epoch")]
    assert len(lines) == 3 and "ELBO per row" in lines[0] and "elapsed" in lines[0]


def test_verbose_full_batch_fit_prints_one_line_per_optimiser_iteration(capsys):
    X, y = toy(100)
    reg = SparseGPRegressor(n_inducing=10, verbose=1).fit(X, y)
    lines = [l for l in capsys.readouterr().out.splitlines() if l.startswith("iteration")]
    assert len(lines) == reg.n_iter_ > 0 and "bound" in lines[0] and "elapsed" in lines[0]


def test_pickle_and_joblib_round_trips_predict_identically():
    X, y = toy(200)
    reg = SparseGPRegressor(n_inducing=15, max_iter=3, random_state=0).fit(X, y)
    again = pickle.loads(pickle.dumps(reg))
    buf = io.BytesIO()
    joblib.dump(reg, buf)
    buf.seek(0)
    loaded = joblib.load(buf)
    for other in (again, loaded):
        np.testing.assert_array_equal(reg.predict(X, return_std=True)[1], other.predict(X, return_std=True)[1])
    assert len(pickle.dumps(reg)) < 200_000


def test_grid_search_over_n_inducing_and_kernel_in_a_pipeline():
    X, y = toy(300)
    pipe = make_pipeline(StandardScaler(), SparseGPRegressor(max_iter=5, random_state=0))
    grid = GridSearchCV(
        pipe,
        {"sparsegpregressor__n_inducing": [5, 20], "sparsegpregressor__kernel": [None, ConstantKernel() * Matern(nu=1.5)]},
        cv=2,
    ).fit(X, y)
    assert grid.best_params_["sparsegpregressor__n_inducing"] == 20
    clone(grid.best_estimator_)


def test_row_predictions_do_not_depend_on_the_other_rows():
    X, y = toy(300)
    reg = SparseGPRegressor(n_inducing=15, max_iter=3, random_state=0).fit(X, y)
    m_all, s_all = reg.predict(X, return_std=True)
    m_one, s_one = reg.predict(X[17:18], return_std=True)
    np.testing.assert_allclose(m_one, m_all[17:18], rtol=1e-12)
    np.testing.assert_allclose(s_one, s_all[17:18], rtol=1e-12)


def test_elbo_is_below_the_exact_log_marginal_likelihood():
    X, y, sparse, gpr = exact_setting()
    sparse.set_params(inducing_init=X[::3]).fit(X, y)
    assert sparse.elbo(X, y) < gpr.fit(X, y).log_marginal_likelihood_value_


# --- errors that name the problem ---------------------------------------------------
def test_unknown_basis_and_bad_counts():
    with pytest.raises(ValueError, match="basis"):
        SparseGPRegressor(basis="magic").fit(*toy(20))
    with pytest.raises(ValueError, match="n_inducing"):
        SparseGPRegressor(n_inducing=0).fit(*toy(20))
    with pytest.raises(ValueError, match="orth_decoupled"):
        SparseGPRegressor(n_orthogonal=5).fit(*toy(20))


def test_nan_and_inf_are_refused():
    X, y = toy(20)
    X[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        SparseGPRegressor().fit(X, y)
    X, y = toy(20)
    y[2] = np.inf
    with pytest.raises(ValueError, match="inf"):
        SparseGPRegressor().fit(X, y)


def test_n_inducing_above_n_samples_is_clipped_with_a_warning():
    with pytest.warns(UserWarning, match="n_inducing=50"):
        reg = SparseGPRegressor(n_inducing=50, max_iter=2).fit(*toy(20))
    assert reg.inducing_points_.shape[0] == 20


def test_wrong_length_scale_length_is_named():
    with pytest.raises(ValueError, match="length_scale"):
        SparseGPRegressor(kernel=RBF([1.0, 1.0, 1.0]), max_iter=1).fit(*toy(30))


def test_an_elbo_that_turns_non_finite_stops_with_advice():
    X, y = toy(50)
    with pytest.raises(FloatingPointError, match="standardising"):
        SparseGPRegressor(normalize_y=False, noise_variance_bounds="fixed", max_iter=2).fit(X, y * 1e300)


# --- several targets, rank-deficient kernels ---------------------------------------------------
@pytest.mark.parametrize("batch_size", [None, 50])
def test_two_identical_targets_learn_the_single_target_hyperparameters(batch_size):
    """One kernel and one noise serve every target: two copies of y carry the same
    information about them as y, twice, and the optimum of the doubled bound is the same.
    (A fit that left theta at its start would fail: the start is 0 for every entry.)"""
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (200, 1))
    y = np.sin(4 * X[:, 0]) + 0.1 * rng.standard_normal(200)
    settings = dict(n_inducing=30, batch_size=batch_size, random_state=0)
    kernel = ConstantKernel(1.0) * RBF(1.0)
    one = SparseGPRegressor(kernel, **settings).fit(X, y)
    two = SparseGPRegressor(kernel, **settings).fit(X, np.column_stack([y, y]))
    assert np.all(np.abs(one.kernel_.theta) > 0.1)
    np.testing.assert_allclose(two.kernel_.theta, one.kernel_.theta, atol=2e-2)
    assert two.noise_variance_ == pytest.approx(one.noise_variance_, rel=5e-2)


@pytest.mark.parametrize("kernel", [ConstantKernel(1.0) + RBF(1.0), ConstantKernel(1.0, "fixed") + RBF(1e3, "fixed"),
                                    RBF(1.0) + ConstantKernel(10.0)])
def test_return_cov_diagonal_is_return_std_squared_on_rank_deficient_kernels(kernel):
    """Five training rows, a constant kernel (rank one) beside an RBF, predictions at the
    training rows, between them and repeated: the covariance's diagonal is the variance
    return_std gives, never negative."""
    X = np.atleast_2d([1.0, 3.0, 5.0, 6.0, 7.0]).T
    y = (X * np.sin(X)).ravel()
    reg = SparseGPRegressor(kernel, random_state=0).fit(X, y)
    for Xt in (X, np.linspace(0, 10, 7)[:, None], np.vstack([X, X])):
        _, cov = reg.predict(Xt, return_cov=True)
        _, std = reg.predict(Xt, return_std=True)
        assert np.all(np.isfinite(std))
        assert np.all(np.diag(cov) >= 0)
        np.testing.assert_allclose(np.diag(cov), std**2, rtol=1e-8, atol=1e-12)


# --- before fit: the prior, as GaussianProcessRegressor's ----------------------------------
@pytest.mark.parametrize("n_targets", [None, 3])
def test_unfitted_predictions_and_draws_are_gprs_prior(n_targets):
    """Ours with noise_variance s2 against GPR with the same kernel plus WhiteKernel(s2):
    GPR's prior is that of its kernel, ours includes the observation noise as predict does."""
    X = np.random.default_rng(0).uniform(-2, 2, (7, 2))
    kernel = ConstantKernel(1.5) * Matern([0.7, 1.3], nu=2.5)
    ours = SparseGPRegressor(kernel, noise_variance=0.2, n_targets=n_targets)
    gpr = GaussianProcessRegressor(kernel + WhiteKernel(0.2), n_targets=n_targets)
    def outputs(result):
        return result if isinstance(result, tuple) else (result,)

    for flag in ({}, {"return_std": True}, {"return_cov": True}):
        for a, b in zip(outputs(ours.predict(X, **flag)), outputs(gpr.predict(X, **flag))):
            assert a.shape == b.shape
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ours.sample_y(X, 4, random_state=1), gpr.sample_y(X, 4, random_state=1), rtol=1e-8,
                               atol=1e-8)


def test_unfitted_prior_of_a_white_kernel_counts_the_noise_once():
    X = np.linspace(0, 1, 5)[:, None]
    kernel = ConstantKernel(1.0) * RBF(0.5) + WhiteKernel(0.3)
    _, std = SparseGPRegressor(kernel, noise_variance=5.0).predict(X, return_std=True)
    np.testing.assert_allclose(std, np.sqrt(1.3))
    _, default_std = SparseGPRegressor().predict(X, return_std=True)
    np.testing.assert_allclose(default_std, np.sqrt(1.1))  # amplitude 1 plus the default noise 0.1


def test_unfitted_non_gaussian_regressor_says_it_needs_fit():
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError, match="likelihood='gaussian' only"):
        SparseGPRegressor(likelihood="poisson").predict(np.zeros((2, 1)))


def test_n_targets_must_match_y():
    X = np.random.default_rng(0).uniform(-2, 2, (30, 1))
    with pytest.raises(ValueError, match="y has 1 target column.*n_targets=2"):
        SparseGPRegressor(n_targets=2, n_inducing=5, max_iter=2).fit(X, X[:, 0])


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_an_inducing_init_array_sets_n_inducing_or_must_match_it():
    X, y = toy(100)
    reg = SparseGPRegressor(inducing_init=X[:7], max_iter=2, random_state=0).fit(X, y)
    assert reg.inducing_points_.shape[0] == 7  # n_inducing at its default follows the array
    with pytest.raises(ValueError, match=r"inducing_init has 7 rows but n_inducing \+ n_orthogonal = 5 \+ 0 = 5"):
        SparseGPRegressor(n_inducing=5, inducing_init=X[:7]).fit(X, y)


def test_verbose_two_adds_progress_within_an_epoch(capsys, monkeypatch):
    from skgp_sparse.optim import loop

    monkeypatch.setattr(loop, "PROGRESS_SECONDS", 0.0)  # a line after every step
    X, y = toy(100)
    SparseGPRegressor(n_inducing=10, batch_size=25, max_iter=2, tol=0, verbose=2).fit(X, y)
    out = capsys.readouterr().out.splitlines()
    progress = [l for l in out if " step " in l]
    epochs = [l for l in out if l.startswith("epoch") and "ELBO per row " in l and " step " not in l]
    assert len(epochs) == 2 and len(progress) == 8  # 4 steps an epoch
    assert "step 2 of 4" in progress[1] and "ELBO per row so far" in progress[1] and "elapsed" in progress[1]
