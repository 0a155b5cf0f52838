"""Fits compared with the float64 numpy fit: data, estimator settings and the comparison
shared by the tests of fits on other array libraries and in float32."""

import pickle
import warnings

import numpy as np
import sklearn
from sklearn.exceptions import ConvergenceWarning

from skgp_sparse import SparseGPClassifier, SparseGPRegressor
from skgp_sparse.bases import BASES

from ._array_libs import close

#: float64: the bound of the numpy fit, relative.
RTOL = 1e-8
#: float32 against the float64 numpy fit, relative: the bound (measured below 2e-6 for
#: every case here).
RTOL_F32 = 2e-5
#: The full L-BFGS-B search of the collapsed bound: its path depends on the last bits of
#: every gradient, and its plateau rule ends it where the bound has stopped rising, so
#: two runs that differ by rounding stop at nearby points (measured: 4e-7 relative in
#: float64, 2e-4 in float32 which ends sooner).
RTOL_SEARCH = 1e-5
RTOL_F32_SEARCH = 2e-3
#: float32 predictions, relative to their largest entry (measured below 2e-6).
RTOL_F32_PREDICT = 1e-4


#: Likelihoods and options beyond the Gaussian regressor and the binary classifier, as
#: ``(kind, estimator parameters)``, and their test ids.
OTHER_LIKELIHOODS = [
    ("regressor", dict(likelihood="student_t")), ("regressor", dict(likelihood="poisson")),
    ("multiclass", {}), ("multiclass", dict(likelihood="softmax")),
    ("regressor", dict(kernel=None, normalize_y=False, alpha=1e-3)),
]
OTHER_LIKELIHOOD_IDS = ["student_t", "poisson", "multiclass_robustmax", "softmax", "alpha"]


def data(n=160, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, d))
    y = np.sin(X[:, 0]) + 0.5 * np.cos(2 * X[:, 1]) + 0.1 * rng.standard_normal(n)
    return X, y


def settings(basis, batch_size, **params):
    chosen = dict(basis=basis, n_inducing=10, batch_size=batch_size, max_iter=3, random_state=3)
    if basis in ("solve", "orth_decoupled"):
        chosen["n_orthogonal"] = 6
    chosen.update(params)
    return chosen


def estimator(kind, basis, batch_size, **params):
    if kind == "regressor":
        return SparseGPRegressor(**settings(basis, batch_size, **params))
    return SparseGPClassifier(**settings(basis, batch_size, **params))


def targets(kind, y, params=None):
    """The targets of an estimator ``kind`` from :func:`data`'s y (counts for Poisson)."""
    if params is not None and params.get("likelihood") == "poisson":
        return np.round(np.exp(y))
    if kind == "regressor":
        return y
    if kind == "binary":
        return (y > 0).astype(np.int64)
    return np.digitize(y, [-0.5, 0.5]).astype(np.int64)


def fit(model, X, y, dispatch, **fit_params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        with sklearn.config_context(array_api_dispatch=dispatch):
            return model.fit(X, y, **fit_params)


def assert_numpy_model(fitted):
    state = fitted.variational_state_
    for name in BASES[fitted.basis].VARIATIONAL_FIELDS + BASES[fitted.basis].INDUCING_FIELDS:
        assert type(getattr(state, name)) is np.ndarray, name
        assert getattr(state, name).dtype == np.float64, name


def gradient_steps(objective, start, bounds, n_steps=8, size=0.05):
    """A deterministic stand-in for L-BFGS-B (``optimizer=`` callable): a few clipped
    steps down the normalised gradient, so that the numpy and the device searches take
    the same path and the collapsed bound and its gradient are compared along it."""
    low = np.array([-np.inf if b[0] is None else b[0] for b in bounds])
    high = np.array([np.inf if b[1] is None else b[1] for b in bounds])
    x = np.array(start)
    for _ in range(n_steps):
        value, grad = objective(x)
        x = np.clip(x - size * grad / max(1.0, np.max(np.abs(grad))), low, high)
    return x, objective(x, eval_gradient=False)


def assert_same_fit(fitted, reference, dtype, X_test, searched=False):
    lml, ref = fitted.log_marginal_likelihood_value_, reference.log_marginal_likelihood_value_
    if dtype == "float64":
        assert fitted.n_steps_ == reference.n_steps_ or searched
        tolerance = RTOL_SEARCH if searched else RTOL
    else:
        tolerance = RTOL_F32_SEARCH if searched else RTOL_F32
    assert abs(lml - ref) <= tolerance * abs(ref), (lml, ref)
    assert_numpy_model(fitted)
    restored = pickle.loads(pickle.dumps(fitted))
    # inducing_points_ follows the input's library (tests/test_backend_sklearn.py), and is
    # pickled as numpy.
    assert type(restored.inducing_points_) is np.ndarray
    if not searched:
        # (The search's end point is not pinned down in Z, where the bound is flattest.)
        close(restored.inducing_points_, reference.inducing_points_, 1e-8 if dtype == "float64" else RTOL_F32_PREDICT)
    if isinstance(fitted, SparseGPClassifier):
        close(restored.predict_proba(X_test), reference.predict_proba(X_test),
              1e-8 if dtype == "float64" else RTOL_F32_PREDICT, scale=1.0)
        return
    mean, std = restored.predict(X_test, return_std=True)
    ref_mean, ref_std = reference.predict(X_test, return_std=True)
    # Near the search's end the bound is flat: a bound 4e-7 apart moved the noise and the
    # predictive std by 2e-4 (measured).
    rtol = 100 * tolerance if searched else (1e-8 if dtype == "float64" else RTOL_F32_PREDICT)
    close(mean, ref_mean, rtol)
    close(std, ref_std, rtol)


def without_search(monkeypatch):
    """Fresh fits skip the exact search of their hyperparameters: for tests of what the
    minibatch stream does from a given start (the Ctrl-C tests count the stream's calls;
    the float32 and array-library tests compare its arithmetic with numpy's).

    The search is float64 numpy code whatever the fit's library and dtype, and it leaves
    the hyperparameters near their optimum, where Adam's first steps move any coordinate
    whose gradient is small against rounding by the learning rate, in the direction of
    the rounding: from there two fits that differ by rounding part visibly along the
    flattest directions (measured, float32 against float64: 0.13 on inducing inputs,
    the bound within 6.4e-5, the predictions within 2.4e-4). From the kernel's initial
    hyperparameters every gradient is large, and the fits agree to rounding."""
    from skgp_sparse.fit import plan

    monkeypatch.setattr(plan, "starts_with_search", lambda *args, **kwargs: False)
