"""The bound of a fitted estimator on given rows: ``elbo`` and ``log_marginal_likelihood``.

Both estimators evaluate it the same way; each says only how its targets become the
likelihood's (``_bound_targets``: normalised columns for the regressor, class indices for
the classifier).
"""

import numpy as np
from sklearn.utils.validation import check_is_fitted, validate_data

from ._training import evaluate_bound_at


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

    def log_marginal_likelihood(self, X, y, theta=None, eval_gradient=False):
        """The bound on (X, y) at kernel hyperparameters ``theta``, with q(u) optimal for them.

        The sparse counterpart of GaussianProcessRegressor's and GaussianProcessClassifier's
        ``log_marginal_likelihood``: for a Gaussian likelihood and the coupled basis, Titsias'
        collapsed bound (q(u) in closed form); otherwise q(u) is moved to its optimum by damped
        full-batch natural steps. The fitted inducing inputs (and the noise, unless it is a
        WhiteKernel term of theta) are kept. The training data are not stored, so they are
        passed here.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            Targets as given to fit (regression targets on the original scale, normalised
            as in fit; for the classifier, labels from ``classes_``).
        theta : array-like of shape (n_kernel_params,), default=None
            Log-hyperparameters in ``kernel_.theta`` order; None means the fitted ones.
        eval_gradient : bool, default=False
            Also return the gradient in theta.

        Returns
        -------
        bound : float
        bound_gradient : ndarray of shape (n_kernel_params,), optional
        """
        X, Y = self._rows_and_targets(X, y)
        return evaluate_bound_at(self._fitted_model(X.shape[0]), X, Y, theta, eval_gradient)
