"""A fixed list of small fits whose predictions and bounds are kept in tests/data/same_fits.npz.

A change that moves code must not move results: tests/test_same_fits.py refits every
configuration here and compares with the arrays saved from the commit before the change. A
change that alters results on purpose regenerates the file, in a commit of its own that says
why::

    python -m tests._same_fits

Each fit is small (a few hundred rows, 16 inducing inputs, a few epochs), but takes the
paths a real fit takes: the exact search, then the minibatch stream (or one batch), every
basis with every likelihood family, both estimators, one output, independent outputs, the
LMC with and without missing entries, float32, and arrays of another library under
scikit-learn's ``array_api_dispatch``.
"""

import contextlib
import os
import warnings
from pathlib import Path

import numpy as np
import sklearn
from threadpoolctl import threadpool_limits

from skgp_sparse import SparseGPClassifier, SparseGPRegressor

SAVED = Path(__file__).parent / "data" / "same_fits.npz"

#: Rows fitted and rows predicted.
N_TRAIN, N_TEST = 600, 40

_SMALL = {"n_inducing": 16, "max_iter": 3, "random_state": 0}

#: name -> (estimator class, its parameters, target kind, array library or None).
CONFIGS = {
    **{
        f"regressor_{basis}_{batch}": (
            SparseGPRegressor,
            {**_SMALL, "basis": basis, "batch_size": size,
             **({"n_orthogonal": 8} if basis in ("orth_decoupled", "solve") else {})},
            "real", None,
        )
        for basis in ("coupled", "orth_decoupled", "solve", "inverse_free")
        for batch, size in (("minibatch", 128), ("full_batch", None))
    },
    "regressor_float32": (SparseGPRegressor, {**_SMALL, "batch_size": 128, "dtype": "float32"}, "real", None),
    "regressor_student_t": (SparseGPRegressor, {**_SMALL, "batch_size": 128, "likelihood": "student_t"}, "real", None),
    "classifier_binary": (SparseGPClassifier, {**_SMALL, "batch_size": 128}, "binary", None),
    "classifier_binary_solve": (SparseGPClassifier, {**_SMALL, "batch_size": 128, "basis": "solve", "n_orthogonal": 8}, "binary", None),
    "classifier_ten_classes": (SparseGPClassifier, {**_SMALL, "batch_size": 128}, "ten_classes", None),
    "independent_outputs": (SparseGPRegressor, {**_SMALL, "batch_size": 128}, "outputs", None),
    "lmc": (SparseGPRegressor, {**_SMALL, "batch_size": 128, "n_latent": 2}, "outputs", None),
    "lmc_masked": (SparseGPRegressor, {**_SMALL, "batch_size": 128, "n_latent": 2, "missing_targets": "mask"}, "masked", None),
    "lmc_full_batch": (SparseGPRegressor, {**_SMALL, "batch_size": None, "n_latent": 2}, "outputs", None),
    "regressor_strict": (SparseGPRegressor, {**_SMALL, "batch_size": 128}, "real", "array_api_strict"),
    "classifier_strict": (SparseGPClassifier, {**_SMALL, "batch_size": 128}, "binary", "array_api_strict"),
    "regressor_torch": (SparseGPRegressor, {**_SMALL, "batch_size": 128}, "real", "torch"),
    "classifier_torch": (SparseGPClassifier, {**_SMALL, "batch_size": 128}, "binary", "torch"),
    # Every basis with every likelihood family, on minibatches and on one batch.
    **{
        f"{name}_{basis}": (
            cls,
            {**_SMALL, "basis": basis, "batch_size": size, **params,
             **({"n_orthogonal": 8} if basis in ("orth_decoupled", "solve") else {})},
            kind, None,
        )
        for basis in ("coupled", "orth_decoupled", "solve", "inverse_free")
        for name, cls, params, kind, size in (
            ("two_outputs", SparseGPRegressor, {}, "two_outputs", 128),
            ("student_t", SparseGPRegressor, {"likelihood": "student_t"}, "heavy_tailed", 128),
            ("poisson", SparseGPRegressor, {"likelihood": "poisson"}, "counts", 128),
            ("binary_minibatch", SparseGPClassifier, {}, "binary", 128),
            ("binary_full_batch", SparseGPClassifier, {}, "binary", None),
            ("three_classes", SparseGPClassifier, {}, "three_classes", 128),
        )
    },
}


def data(kind):
    """Inputs (train, test) and training targets of one kind, the same on every call."""
    rng = np.random.default_rng(7)
    X = rng.uniform(-2, 2, size=(N_TRAIN + N_TEST, 3))
    f = np.sin(2 * X[:, 0]) * np.cos(X[:, 1]) + 0.3 * X[:, 2]
    noise = 0.1 * rng.standard_normal((N_TRAIN + N_TEST, 3))
    if kind == "real":
        y = f + noise[:, 0]
    elif kind == "binary":
        y = (f + 3 * noise[:, 0] > 0).astype(int)
    elif kind == "ten_classes":
        y = np.digitize(f + noise[:, 0], np.quantile(f, np.linspace(0.1, 0.9, 9)))
    elif kind == "three_classes":
        y = np.digitize(f + 3 * noise[:, 0], [-0.4, 0.4])
    elif kind == "heavy_tailed":
        y = f + 0.2 * rng.standard_t(3, f.shape)
    elif kind == "counts":
        y = rng.poisson(np.exp(0.5 * f))
    elif kind == "two_outputs":
        y = np.column_stack([f + noise[:, 0], -f + noise[:, 1]])
    else:
        y = np.column_stack([f, np.cos(X[:, 0]) - 0.5 * f, X[:, 1] * X[:, 2]]) + noise
        if kind == "masked":
            y[rng.random(y.shape) < 0.25] = np.nan
    return X[:N_TRAIN], X[N_TRAIN:], y[:N_TRAIN]


@contextlib.contextmanager
def _scipy_array_api(on):
    """SCIPY_ARRAY_API=1 while ``on`` (scikit-learn's dispatch requires it), as it was after."""
    before = os.environ.get("SCIPY_ARRAY_API")
    if on:
        os.environ["SCIPY_ARRAY_API"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("SCIPY_ARRAY_API", None)
        else:
            os.environ["SCIPY_ARRAY_API"] = before


def _library_arrays(library):
    """A function putting a numpy array into ``library``'s arrays, and the dispatch flag."""
    if library is None:
        return (lambda a: a), False
    if library == "torch":
        import torch

        return (lambda a: torch.asarray(np.ascontiguousarray(a))), True
    import array_api_strict as xs

    return (lambda a: xs.asarray(a)), True


def run(name):
    """Fit configuration ``name`` and return its predictions and bounds as numpy arrays."""
    from skgp_sparse.backend import to_numpy

    cls, params, kind, library = CONFIGS[name]
    X, X_test, y = data(kind)
    to_library, dispatch = _library_arrays(library)
    out = {}
    # One thread for BLAS and OpenMP: how OpenBLAS splits a product, or k-means its sums,
    # between threads changes their rounding, which a fit carries into its results (1e-9 to
    # 1e-2 relative between one thread and two), so the saved arrays hold on any machine size.
    with warnings.catch_warnings(), _scipy_array_api(dispatch), sklearn.config_context(array_api_dispatch=dispatch), \
            threadpool_limits(limits=1):
        warnings.simplefilter("ignore")
        model = cls(**params).fit(to_library(X), to_library(y) if kind != "masked" else y)
        X_test = to_library(X_test)
        if cls is SparseGPClassifier:
            out["proba"] = to_numpy(model.predict_proba(X_test))
        else:
            mean, std = model.predict(X_test, return_std=True)
            out["mean"], out["std"] = to_numpy(mean), to_numpy(std)
        latent_mean, latent_var = model.latent_mean_and_variance(X_test)
        out["latent_mean"], out["latent_var"] = to_numpy(latent_mean), to_numpy(latent_var)
        if library is None and kind != "masked":
            out["elbo"] = np.asarray(model.elbo(X[:200], y[:200]), dtype=np.float64)
    return {key: np.asarray(value, dtype=np.float64) for key, value in out.items()}


def tolerance(name):
    """Relative tolerance of configuration ``name``: 1e-4 in float32, 1e-10 in float64."""
    return 1e-4 if CONFIGS[name][1].get("dtype") == "float32" else 1e-10


if __name__ == "__main__":
    saved = {}
    for config in CONFIGS:
        for key, value in run(config).items():
            saved[f"{config}/{key}"] = value
        print("fitted", config)
    SAVED.parent.mkdir(exist_ok=True)
    np.savez_compressed(SAVED, **saved)
    print("wrote", SAVED, len(saved), "arrays")
