"""The bound of a fitted estimator on given rows: ``elbo`` and ``log_marginal_likelihood``.

Both estimators evaluate it the same way; each says only how its targets become the
likelihood's (``_bound_targets``: normalised columns for the regressor, class indices for
the classifier).
"""

import warnings

import numpy as np
from sklearn.utils.validation import check_is_fitted, validate_data

from .. import backend
from ..fit.search import evaluate_bound_at


class BoundMethods:
    """``elbo`` and ``log_marginal_likelihood`` for an estimator with ``_fitted_model(n)``
    and ``_bound_targets(y)``."""

    def _rows_and_targets(self, X, y):
        check_is_fitted(self, "kernel_")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        Y = self._bound_targets(y)
        if Y.shape[0] != X.shape[0]:
            raise ValueError(f"X has {X.shape[0]} rows but y has {Y.shape[0]}")
        return X, Y

    def elbo(self, X, y):
        """Evidence lower bound of (X, y) at the fitted parameters, in nats (summed over rows).

        For the regressor on the normalised targets when ``normalize_y``, like
        GaussianProcessRegressor.log_marginal_likelihood.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            Targets as given to fit (for the classifier, labels from ``classes_``).

        Returns
        -------
        float
        """
        X, Y = self._rows_and_targets(X, y)
        return self._fitted_model(X.shape[0]).elbo(X, Y)

    def log_marginal_likelihood(self, theta=None, eval_gradient=False, clone_kernel=True, *, X=None, y=None):
        """The bound at kernel hyperparameters ``theta`` with q(u) optimal for them, on the
        training rows (as GaussianProcessRegressor's) or on ``X, y``.

        The sparse counterpart of GaussianProcessRegressor's and GaussianProcessClassifier's
        ``log_marginal_likelihood``: for a Gaussian likelihood and the coupled basis, Titsias'
        collapsed bound (q(u) in closed form); otherwise q(u) is moved to its optimum by damped
        full-batch natural steps. The fitted inducing inputs (and the noise, unless it is a
        WhiteKernel term of theta) are kept. Rows count once each (sample weights and known
        per-row noise are not applied).

        Parameters
        ----------
        theta : array-like of shape (n_kernel_params,), default=None
            Log-hyperparameters in ``kernel_.theta`` order; None means the fitted ones. A
            regressor with ``n_latent`` takes every latent kernel's, concatenated in the
            order of ``latent_kernels_``.
        eval_gradient : bool, default=False
            Also return the gradient in theta; only with ``theta`` given (ValueError
            otherwise, as in GaussianProcessRegressor).
        clone_kernel : bool, default=True
            As in GaussianProcessRegressor: False sets ``kernel_.theta`` to ``theta`` (with
            ``n_latent``, each of ``latent_kernels_`` to its part); the predictions still
            use the fitted model.
        X : array-like of shape (n_samples, n_features), default=None
            Rows on which to evaluate the bound. None: the training rows ``X_train_``, which
            ``fit`` keeps for in-memory data of at most 5,000 rows; pass ``X`` and ``y`` for a
            larger fit.
        y : array-like of shape (n_samples,) or (n_samples, n_targets), default=None
            Targets as given to fit (regression targets on the original scale, normalised
            as in fit; for the classifier, labels from ``classes_``).

        Returns
        -------
        bound : float
        bound_gradient : ndarray of shape (n_kernel_params,), optional
        """
        if np.ndim(theta) == 2:
            # The signature before version 0.2 began with the rows: (X, y, theta, eval_gradient).
            warnings.warn(
                "log_marginal_likelihood(X, y, ...) is deprecated since 0.2 and will be removed in 0.4; the "
                "signature is GaussianProcessRegressor's, log_marginal_likelihood(theta, "
                "eval_gradient, clone_kernel, X=X, y=y)",
                FutureWarning, stacklevel=2,
            )
            X, y, theta = theta, eval_gradient, (None if isinstance(clone_kernel, bool) else clone_kernel)
            eval_gradient, clone_kernel = False, True
        if eval_gradient and theta is None:
            # GPR's rule: the gradient belongs to a theta the caller names (the fitted
            # bound's own gradient is no quantity the caller asked for).
            raise ValueError("Gradient can only be evaluated for theta!=None; pass theta=estimator.kernel_.theta "
                             "for the gradient at the fitted hyperparameters")
        if (X is None) != (y is None):
            raise ValueError("log_marginal_likelihood takes both X and y, or neither (the training rows)")
        if X is None:
            check_is_fitted(self, "kernel_")
            if not hasattr(self, "X_train_"):
                raise ValueError(
                    f"this {type(self).__name__} kept no training rows (fit keeps them for in-memory "
                    "data of at most 5,000 rows, not for larger, Dask or partial_fit fits): pass the "
                    "rows, log_marginal_likelihood(theta, X=X, y=y)")
            # Kept in X's library under array_api_dispatch; the bound is evaluated on the host.
            X, y = backend.to_numpy(self.X_train_), backend.to_numpy(self.y_train_)
        if theta is not None:
            theta = np.asarray(theta, dtype=np.float64)
            kernels = self._fitted_kernels()
            expected = sum(kernel.n_dims for kernel in kernels)
            if theta.shape != (expected,):
                whose = "kernel_.theta" if len(kernels) == 1 else (
                    f"the {len(kernels)} latent kernels' thetas concatenated (latent_kernels_ in order)")
                raise ValueError(f"theta has shape {theta.shape}; it must have {expected} entries, {whose}")
        X, Y = self._rows_and_targets(X, y)
        result = evaluate_bound_at(self._fitted_model(X.shape[0]), X, Y, theta, eval_gradient)
        if not clone_kernel and theta is not None:
            self._set_fitted_theta(theta)
        return result

    def _fitted_kernels(self):
        """The fitted kernels whose hyperparameters ``theta`` concatenates."""
        return [self.kernel_]

    def _set_fitted_theta(self, theta):
        """Each fitted kernel's hyperparameters set to its part of ``theta``."""
        start = 0
        for kernel in self._fitted_kernels():
            kernel.theta = theta[start : start + kernel.n_dims]
            start += kernel.n_dims
