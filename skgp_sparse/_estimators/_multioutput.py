"""Targets of several outputs: missing entries, their normalisation and their score.

Plain functions of arrays for the regressor's multi-output options (``n_latent``,
``missing_targets``); the model itself is :mod:`skgp_sparse.multioutput`.
"""

import numpy as np

from .. import backend
from ..kernels import compile_kernel
from ..fit.placement import is_dask_collection


def split_missing(y, policy):
    """y with NaN entries replaced by zeros (for scikit-learn's validation, which refuses
    them), and where they were; ``(y, None)`` when y has none.

    ``policy`` is ``missing_targets``: "error" raises a ValueError that names it on a NaN,
    "mask" lets NaN through; inf is refused under both.
    """
    if y is None:
        return y, None  # validation says y is required
    if is_dask_collection(y):
        y = y.compute()
    try:
        values = np.asarray(backend.to_numpy(y) if backend.is_foreign(y) else y, dtype=np.float64)
    except (TypeError, ValueError):
        return y, None  # not numeric: validation says so
    if np.isinf(values).any():
        raise ValueError("y contains inf; only NaN can stand for a missing target (missing_targets='mask')")
    missing = np.isnan(values)
    if not missing.any():
        return y, None
    if policy != "mask":
        raise ValueError(
            f"y contains NaN ({int(missing.sum())} entries). If they are targets nobody observed, "
            "set missing_targets='mask': each then drops out of the fit entry by entry"
        )
    return np.where(missing, 0.0, values), missing


def check_observed_columns(Y):
    """A ValueError naming every column of Y (n, P) with no observed entry."""
    empty = np.flatnonzero(np.all(np.isnan(Y), axis=0))
    if empty.size:
        raise ValueError(
            f"target column(s) {empty.tolist()} of y have no observed entry (all NaN): a missing column "
            "cannot be fitted; drop it from y"
        )


def observed_moments(Y, weights):
    """Weighted mean and standard deviation of each column of Y over its observed entries."""
    observed = ~np.isnan(Y)
    w = np.where(observed, weights[:, None], 0.0)
    total = w.sum(axis=0)
    mean = np.where(observed, Y, 0.0).T @ weights / total
    resid = np.where(observed, Y - mean, 0.0)
    std = np.sqrt((w * resid**2).sum(axis=0) / total)
    return mean, std


def observed_r2(y_true, y_pred, sample_weight=None):
    """The coefficient of determination of each column over its observed entries,
    averaged over the columns (scikit-learn's "uniform_average")."""
    y_true = np.asarray(y_true, dtype=np.float64).reshape(len(y_pred), -1)
    y_pred = np.asarray(y_pred, dtype=np.float64).reshape(y_true.shape)
    w = np.ones(y_true.shape[0]) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    scores = []
    for p in range(y_true.shape[1]):
        seen = ~np.isnan(y_true[:, p])
        wp, yt, yp = w[seen], y_true[seen, p], y_pred[seen, p]
        total = np.sum(wp * (yt - np.average(yt, weights=wp)) ** 2)
        residual = np.sum(wp * (yt - yp) ** 2)
        scores.append(1.0 - residual / total if total > 0 else (1.0 if residual == 0 else 0.0))
    return float(np.mean(scores))


#: The latents' starting length scales span this many decades around the kernel's, evenly
#: in log scale (latent 0 the shortest). Latents that start alike tend to fit alike
#: (docs/constants.md).
LENGTH_SCALE_SPREAD_DECADES = 1.0


def latent_kernels(kernel, n_latent):
    """``n_latent`` copies of the compiled ``kernel``, their length scales (hyperparameters
    named ``length_scale``) spread over :data:`LENGTH_SCALE_SPREAD_DECADES` around the
    kernel's and clipped to their bounds."""
    sk_kernel = kernel.to_sklearn()
    kernels = []
    for l in range(n_latent):
        shift = 0.0 if n_latent == 1 else LENGTH_SCALE_SPREAD_DECADES * (l / (n_latent - 1) - 0.5)
        theta, start = sk_kernel.theta.copy(), 0
        for hyper in sk_kernel.hyperparameters:
            if hyper.fixed:
                continue
            if hyper.name.endswith("length_scale"):
                theta[start : start + hyper.n_elements] += shift * np.log(10.0)
            start += hyper.n_elements
        theta = np.clip(theta, sk_kernel.bounds[:, 0], sk_kernel.bounds[:, 1])
        kernels.append(compile_kernel(sk_kernel.clone_with_theta(theta), white_as_noise=True))
    return kernels
