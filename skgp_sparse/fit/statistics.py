"""A Gaussian fit with Fourier features: one pass over the rows, then a search at O(M^3).

Inside the features' box K(u, f) does not depend on the hyperparameters, so the rows enter
the collapsed bound only through a few sums (:class:`~skgp_sparse.features.FeatureStatistics`):
one pass over the rows gathers them, chunk by chunk, and every iteration of the search
after it costs O(M^3) whatever the number of rows (Hensman, Durrande and Solin 2018). The
search maximises the bound over the kernel's hyperparameters and the noise by L-BFGS-B, as
GaussianProcessRegressor does its log marginal likelihood; q(u) is then set to its optimum
in closed form.
"""

import numpy as np
import scipy.optimize

from ..features import StatisticsBound, feature_statistics
from ..linalg import inverse_cholesky_factor
from ..optim.loop import History
from .rows import DaskRows, InMemoryRows, finite_block

#: Rows per chunk of the statistics' pass: the chunk's features take M x rows floats.
STATISTICS_CHUNK = 8192


def fits_from_statistics(settings, model, rows, fresh):
    """Whether a fit of ``model`` on ``rows`` takes this route: a fresh fit with the
    default batch size, Fourier features (their covariances offer the statistics), a
    Gaussian likelihood whose collapsed bound the model writes, one latent group under the
    identity map, and the coupled basis, whose q(u) the closed form sets."""
    return (
        fresh
        and settings.batch_size == "auto"
        and isinstance(rows, (InMemoryRows, DaskRows))
        and not rows.converts
        and getattr(model.covariances[0], "has_statistics", False)
        and model.noise is not None
        and not model.noise.from_kernel
        and not model.outputs.mixes
        and model.basis.WHITENED_Q
        and model.collapses()
    )


def gather_statistics(model, rows, Y):
    """The rows' :class:`~skgp_sparse.features.FeatureStatistics` in one pass, or None where
    a row lies outside VFF's box. Rows in memory are read in chunks; a Dask array's chunks
    are reduced where they live (each worker sends back its M x M sums), and X is never
    gathered on the client."""
    split = (lambda y: (y, None)) if model.layout is None else (lambda y: model.layout.split(y)[:2])
    if isinstance(rows, DaskRows):
        return _dask_statistics(model.features, rows, Y, split)
    X, Y = rows.all_rows(Y)
    parts = (_chunk_statistics(X[start : start + STATISTICS_CHUNK], *split(Y[start : start + STATISTICS_CHUNK]),
                               model.features) for start in range(0, X.shape[0], STATISTICS_CHUNK))
    return _summed(parts)


def _chunk_statistics(X, targets, weights, features):
    return feature_statistics(features, X, targets, weights)


def _dask_chunk_statistics(block, start, targets, weights, features):
    # A worker's chunk, refused with its rows named if it holds NaN or inf.
    return feature_statistics(features, finite_block(block, start), targets, weights)


def _summed(parts):
    """The sum of chunks' statistics, None where any chunk has none."""
    total = None
    for part in parts:
        if part is None:
            return None
        total = part if total is None else total.add(part)
    return total


def _dask_statistics(features, rows, Y, split):
    import dask

    blocks = rows.X.to_delayed().ravel()
    parts = [dask.delayed(_dask_chunk_statistics)(block, int(rows.starts[i]),
                                                  *split(Y[rows.starts[i] : rows.starts[i + 1]]), features)
             for i, block in enumerate(blocks)]
    return dask.delayed(_summed)(parts).compute()


def fit_from_statistics(settings, model, stats):
    """Search the hyperparameters and the noise on ``stats``, then set q(u) at its optimum.

    Returns
    -------
    History
        The search's iterations as epochs (no minibatch steps), its bound as the ELBO.
    """
    packing = _Packing(model)
    bounds = packing.bounds()
    if not bounds:
        # Nothing to search: q(u) at its optimum for the hyperparameters as given.
        bound = _bound(model, stats)
        _set_q(model, bound)
        return History(elbo=[float(bound.value)], n_epochs=0, n_steps=0, converged=True)

    def negative(x):
        packing.set(x)
        bound = _bound(model, stats)
        return -bound.value / stats.count, -packing.gradient(bound) / stats.count

    result = scipy.optimize.minimize(negative, packing.start(), jac=True, method="L-BFGS-B", bounds=bounds,
                                     options={"maxiter": settings.max_iter})
    packing.set(result.x)
    bound = _bound(model, stats)
    _set_q(model, bound)
    return History(elbo=[float(bound.value)], n_epochs=int(result.nit), n_steps=0, converged=bool(result.success))


def _set_q(model, bound):
    """The coupled basis's whitened q(v) at its optimum (the bound's closed form)."""
    model.state.q_mean = bound.q_mean
    model.state.precision = bound.whitened_precision[None, ...]
    model.state.q_sqrt = inverse_cholesky_factor(bound.whitened_precision)[None, ...]


def _bound(model, stats):
    return StatisticsBound(model.covariances[0], stats, model.state.inducing, model.noise.value, model.jitter)


class _Packing:
    """The search's coordinates: the kernel's theta and, where learned, the log noise."""

    def __init__(self, model):
        self.model = model
        self.learns_noise = model.noise.learned and model.learn_hyperparameters
        self.learns_theta = model.learn_hyperparameters

    def start(self):
        parts = [self.model.kernel.theta] if self.learns_theta else []
        if self.learns_noise:
            parts.append([np.log(self.model.noise.value)])
        return np.concatenate(parts) if parts else np.zeros(0)

    def bounds(self):
        out = [tuple(b) for b in self.model.kernel.bounds] if self.learns_theta else []
        if self.learns_noise:
            out.append(tuple(self.model.noise.log_bounds))
        return out

    def set(self, x):
        n = self.model.kernel.n_theta if self.learns_theta else 0
        if self.learns_theta:
            self.model.kernel.set_theta(np.asarray(x[:n], dtype=np.float64))
        if self.learns_noise:
            self.model.set_noise_variance(float(np.exp(x[n])))

    def gradient(self, bound):
        parts = [bound.theta_bar()] if self.learns_theta else []
        if self.learns_noise:
            parts.append([bound.d_log_noise])
        return np.concatenate(parts) if parts else np.zeros(0)
