"""SparseGPRegressor: the scikit-learn face of sparse variational GP regression."""

from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ..bases import BASES
from ..elbo import VariationalModel
from ..kernels import compile_kernel
from ..likelihoods import GaussianLikelihood, NoiseParameter
from ._common import (
    COMMON_CONSTRAINTS,
    check_basis_options,
    check_n_data,
    feature_scale,
    generator_from,
    initial_inducing_points,
    is_dask_collection,
    latent_in_chunks,
    record_fit,
    resolve_kernel,
    training_rows,
)
from ._objective import BoundMethods
from ._training import (
    StreamState,
    make_optimisers,
    run_partial_pass,
    run_training,
    starting_jitter,
)


class SparseGPRegressor(BoundMethods, RegressorMixin, BaseEstimator):
    """Sparse variational Gaussian process regression, fitted by minibatch natural gradients.

    The latent function has a GP prior with the given kernel; a set of inducing inputs
    carries a Gaussian variational posterior q(u) that is moved by natural-gradient steps,
    while the kernel hyperparameters, the noise variance and the inducing inputs are moved
    by Adam. Cost per step is O(B M^2 + M^3) for a batch of B rows and M inducing points;
    prediction costs O(M) per row for the mean and O(M^2) for the variance.

    Parameters
    ----------
    kernel : kernel instance from :mod:`sklearn.gaussian_process.kernels`, default=None
        Prior covariance of the latent function. None means ``ConstantKernel(1.0) *
        RBF(length_scale=s)`` with learnable amplitude and one length scale per feature,
        starting at each feature's standard deviation ``s`` (1 for a constant feature)
        and bounded to ``[1e-5 s, 1e5 s]``. Hyperparameters with ``"fixed"`` bounds stay fixed
        and the others stay within their bounds. A ``WhiteKernel`` term added at the top
        level (``k + WhiteKernel()``) is taken as the observation noise: it replaces
        ``noise_variance`` and its bounds, and ``kernel_`` reports the fitted level, as in
        :class:`~sklearn.gaussian_process.GaussianProcessRegressor`.
    basis : {"coupled", "orth_decoupled", "solve", "inverse_free"}, default="coupled"
        Variational family. ``"coupled"`` is SVGP (Titsias 2009; Hensman et al. 2013).
        ``"orth_decoupled"`` (Salimbeni et al. 2018) adds ``n_orthogonal`` mean-only
        inducing inputs orthogonal to the span of the ``n_inducing`` ones (see
        docs/bases/orth_decoupled.md). ``"solve"`` is SOLVE-GP (Shi et al. 2020):
        ``n_inducing`` points Z plus ``n_orthogonal`` points O of the residual process,
        each block with its own natural steps (see docs/bases/solve.md).
        ``"inverse_free"`` is the improved inverse-free bound (van der Wilk et al.):
        matrix products only, no decomposition of a kernel matrix in a training step;
        ``diagnostics_`` records ||(K + Sigma) T - I||_F per epoch (see
        docs/bases/inverse_free.md).
    n_inducing : int, default=256
        Number of inducing inputs (clipped to the number of distinct training rows,
        with a warning when it exceeds the number of samples).
    n_orthogonal : int, default=0
        Size of the extra orthogonal set of the ``"orth_decoupled"`` and ``"solve"``
        bases; must be 0 for the others.
    batch_size : "auto", int or None, default="auto"
        Rows per training step. "auto": one batch of all rows up to 4,096 of them, batches
        of 1,024 above. None (or a value at least the number of samples) means full batch: then the coupled and orthogonally decoupled bases maximise the
        collapsed bound (q(u) optimal for every hyperparameter) with ``optimizer``, as
        GaussianProcessRegressor maximises its log marginal likelihood.
    max_iter : int, default=100
        Maximum number of epochs (passes over the data).
    tol : float, default=1e-3
        Minibatch fits stop when the mean ELBO per row of the last ``n_iter_no_change``
        periods of 50 steps (one epoch if shorter) is above that of the periods before
        them by less than ``tol`` nats per epoch, an epoch counting at most 100 steps
        (see the user guide, "How the fit moves").
    n_iter_no_change : int, default=3
        Periods in each of the two windows the stopping rule compares.
    natural_step_size : float in (0, 1], default=0.1
        Step size of the natural-gradient update of q(u) once training is under way.
        Under this Gaussian likelihood the step starts at 1 and decays as 1/t to this
        value (a running average of the minibatch optima); with a full batch it stays 1,
        so every step lands on the optimal q(u) for the current hyperparameters.
    learning_rate : float, default=0.02
        Adam step size for the log-hyperparameters, the log noise and the inducing inputs.
    variational_optimizer : {"natural", "adam"}, default="natural"
        How q(u) is moved: by natural-gradient steps (see ``natural_step_size``), or by
        Adam at ``learning_rate`` together with the other parameters, as the papers' own
        training code does (slower to converge; offered for comparison).
    learn_inducing : bool, default=True
        Whether Adam moves the inducing inputs.
    inducing_init : {"kmeans", "greedy_variance", "random"} or array of shape (n_inducing + n_orthogonal, n_features), default="kmeans"
        Initial inducing inputs: k-means centres, greedy maximum-variance rows (a partial
        pivoted Cholesky under the initial kernel), random distinct rows, or given points.
    noise_variance : float, default=0.1
        Initial observation-noise variance (on the normalised scale when ``normalize_y``).
    noise_variance_bounds : pair of floats >= 0 or "fixed", default=(1e-6, 1e3)
        Bounds of the noise variance, or "fixed" to keep it at ``noise_variance``.
    optimizer : "fmin_l_bfgs_b", callable or None, default="fmin_l_bfgs_b"
        The optimiser of full-batch fits, with GaussianProcessRegressor's meaning: a
        callable is called as ``optimizer(obj_func, initial_theta, bounds)`` and returns
        ``(theta_opt, func_min)``, where ``obj_func(theta, eval_gradient=True)`` gives the
        negative collapsed bound and its gradient and theta packs the log-hyperparameters,
        the log noise and the learned inducing inputs (divided by each feature's spread).
        None keeps the kernel hyperparameters and the noise at their initial values, in
        minibatch fits too.
    n_restarts_optimizer : int, default=0
        Further full-batch optimiser runs from starts drawn uniformly within the
        (log-space) bounds; the best bound wins.
    normalize_y : bool, default=True
        Centre and scale each target column before fitting (unlike
        GaussianProcessRegressor, on by default: the default kernel and noise assume unit
        scale). The kernel, noise and ELBO then refer to the normalised targets, as in
        GaussianProcessRegressor; predictions are returned on the original scale.
    jitter : "auto" or float, default="auto"
        Jitter added to the diagonal of K(Z, Z) before its Cholesky factorisation.
        ``"auto"``: 1e-6 of its mean diagonal, and (regression) no more than 1e-6 of the
        noise variance, so that it does not bias the bound. A float: the relative
        jitter, ``jitter * mean(diag(K_zz))``. A factorisation that fails is retried with
        ten times more (recorded in ``jitter_`` and reported by a ``JitterWarning``).
    backend : {"numpy", "cupy"}, default="numpy"
        Array library of the fit. ``"cupy"`` is announced and raises until it lands.
    random_state : int, RandomState instance or None, default=None
        Seeds the inducing initialisation and the minibatch order: the same value gives
        the same model.
    verbose : int, default=0
        If positive, print one line per epoch (ELBO and elapsed time).
    warm_start : bool, default=False
        Continue from the previous fit's inducing inputs, q(u), kernel and noise.

    Attributes
    ----------
    kernel_ : kernel instance
        Clone of ``kernel`` with the fitted hyperparameters.
    inducing_points_ : ndarray of shape (n_inducing, n_features)
        Fitted inducing inputs of the covariance (and, for the coupled basis, the mean).
    orthogonal_points_ : ndarray of shape (n_orthogonal, n_features)
        Fitted inducing inputs of the orthogonal set (bases with ``n_orthogonal``).
    noise_variance_ : float
        Fitted observation-noise variance (normalised scale when ``normalize_y``).
    n_iter_ : int
        Number of epochs run (one more per ``partial_fit`` call); for a full-batch
        Gaussian fit, L-BFGS-B iterations.
    n_steps_ : int
        Number of minibatch steps run (including earlier fits continued by ``warm_start``
        or ``partial_fit``).
    n_rows_seen_ : int
        Rows of the last ``fit``, plus those of the ``partial_fit`` calls since.
    loss_curve_ : list of float
        Mean minibatch ELBO estimate of each epoch (nats, full-data scale); for a
        full-batch Gaussian fit, the bound reached by each optimiser run.
    converged_ : bool
        Whether the stopping rule (``tol``) ended a minibatch fit before ``max_iter``,
        or (full-batch Gaussian fits) whether L-BFGS-B reported convergence.
    log_marginal_likelihood_value_ : float
        The bound (ELBO) of the fitted model on all its training rows, in nats (on the
        normalised targets when ``normalize_y``); NaN after an interrupted fit or a
        ``partial_fit`` pass.
    jitter_ : float
        Relative jitter that the Cholesky of K(Z, Z) needed (``jitter`` unless retries raised it).
    n_natural_backoffs_ : int
        Natural steps that were halved because their precision was not positive definite.
    diagnostics_ : list of dict
        Per-epoch diagnostics of bases that offer them (``"inverse_free"``:
        ``t_residual`` = ||(K + Sigma) T - I||_F).
    variational_state_ : object
        The basis's fitted parameters (plain numpy arrays).
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when X has string feature names.

    Examples
    --------
    >>> import numpy as np
    >>> from skgp_sparse import SparseGPRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-3, 3, size=(500, 1))
    >>> y = np.sin(2 * X[:, 0]) + 0.1 * rng.standard_normal(500)
    >>> reg = SparseGPRegressor(n_inducing=20, random_state=0, max_iter=200).fit(X, y)
    >>> mean, std = reg.predict(X[:3], return_std=True)
    """

    _parameter_constraints = {
        **COMMON_CONSTRAINTS,
        "noise_variance": [Interval(Real, 0, None, closed="neither")],
        "noise_variance_bounds": [StrOptions({"fixed"}), tuple, list],
        "normalize_y": ["boolean"],
        "optimizer": [StrOptions({"fmin_l_bfgs_b"}), callable, None],
        "n_restarts_optimizer": [Interval(Integral, 0, None, closed="left")],
    }

    def __init__(
        self,
        kernel=None,
        *,
        basis="coupled",
        n_inducing=256,
        n_orthogonal=0,
        batch_size="auto",
        max_iter=100,
        tol=1e-3,
        n_iter_no_change=3,
        natural_step_size=0.1,
        learning_rate=0.02,
        variational_optimizer="natural",
        learn_inducing=True,
        inducing_init="kmeans",
        noise_variance=0.1,
        noise_variance_bounds=(1e-6, 1e3),
        normalize_y=True,
        optimizer="fmin_l_bfgs_b",
        n_restarts_optimizer=0,
        jitter="auto",
        backend="numpy",
        random_state=None,
        verbose=0,
        warm_start=False,
    ):
        self.kernel = kernel
        self.basis = basis
        self.n_inducing = n_inducing
        self.n_orthogonal = n_orthogonal
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.natural_step_size = natural_step_size
        self.learning_rate = learning_rate
        self.variational_optimizer = variational_optimizer
        self.learn_inducing = learn_inducing
        self.inducing_init = inducing_init
        self.noise_variance = noise_variance
        self.noise_variance_bounds = noise_variance_bounds
        self.normalize_y = normalize_y
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.jitter = jitter
        self.backend = backend
        self.random_state = random_state
        self.verbose = verbose
        self.warm_start = warm_start

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    # --- fitting --------------------------------------------------------------------
    def _log_noise_bounds(self):
        bounds = self.noise_variance_bounds
        if isinstance(bounds, str):
            return None
        low, high = (float(b) for b in bounds)
        if not (0 < low <= high):
            raise ValueError(f"noise_variance_bounds must satisfy 0 < low <= high; got {bounds}")
        return (np.log(low), np.log(high))

    def _normalise_targets(self, y):
        y2 = y.reshape(-1, 1) if y.ndim == 1 else y
        if self.normalize_y:
            self._y_train_mean = y2.mean(axis=0)
            std = y2.std(axis=0)
            # A constant target column has nothing to scale.
            self._y_train_std = np.where(std > 0, std, 1.0)
        else:
            self._y_train_mean = np.zeros(y2.shape[1])
            self._y_train_std = np.ones(y2.shape[1])
        return (y2 - self._y_train_mean) / self._y_train_std

    def _fitted_model(self, n_data):
        """The fitted parameters as a :class:`VariationalModel` over ``n_data`` rows."""
        kernel = compile_kernel(self.kernel_, white_as_noise=True)
        model = self._build_model(kernel, self.variational_state_.copy(), n_data)
        model.set_noise_variance(self.noise_variance_)
        model.jitter = self.jitter_
        return model

    def _build_model(self, kernel, state, n_data):
        noise = NoiseParameter(kernel, self.noise_variance, self._log_noise_bounds())
        likelihood = GaussianLikelihood(noise.value)
        return VariationalModel(
            BASES[self.basis], kernel, likelihood, state, n_data, noise=noise,
            learn_inducing=self.learn_inducing,
            jitter=starting_jitter(self, kernel, state.inducing, noise.value),
            natural=self.variational_optimizer == "natural",
            learn_hyperparameters=self.optimizer is not None,
        )

    def _scale_targets(self, y):
        """y on the scale of the first fit (partial_fit calls after the first)."""
        y2 = y.reshape(-1, 1) if y.ndim == 1 else y
        if y2.shape[1] != self._y_train_mean.shape[0]:
            raise ValueError(
                f"y has {y2.shape[1]} target column(s) but the model was fitted to {self._y_train_mean.shape[0]}"
            )
        return (y2 - self._y_train_mean) / self._y_train_std

    def _initial_model(self, sample, n_outputs, n_data, rng):
        """A fresh model: kernel, inducing inputs from ``sample``, q(u) at the prior."""
        kernel = resolve_kernel(self.kernel, sample.shape[1], feature_scale(sample))
        Z = initial_inducing_points(self, sample, kernel, rng)
        # Gaussian noise is shared by the outputs, so they share one covariance.
        state = BASES[self.basis].init_state(
            Z, n_outputs=n_outputs, n_covariances=1, n_orthogonal=self.n_orthogonal
        )
        return self._build_model(kernel, state, n_data)

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Fit the sparse GP to training data.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), or a Dask array
            A Dask array is streamed chunk by chunk and never held in memory whole
            (see the scaling guide).
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            Targets; several columns share the kernel and the inducing inputs, each with
            its own variational mean.

        Returns
        -------
        self : SparseGPRegressor
        """
        check_basis_options(self.basis, self.n_orthogonal, self.backend)
        rng = generator_from(self.random_state)
        rows, y = training_rows(self, X, y, rng, multi_output=True, y_numeric=True)
        Y = self._normalise_targets(y)
        warm = self.warm_start and hasattr(self, "variational_state_")
        if warm:
            if self.variational_state_.q_mean.shape[1] != Y.shape[1]:
                raise ValueError("warm_start needs the same number of targets as the previous fit")
            model = self._fitted_model(rows.n_rows)
        else:
            model = self._initial_model(rows.sample, Y.shape[1], rows.n_rows, rng)
        steps_done = self.n_steps_ if warm else 0
        history, schedule, bound = run_training(self, model, rows, Y, rng, steps_done=steps_done)

        self.noise_variance_ = model.noise.value
        record_fit(self, model, history, schedule, steps_done, bound=bound)
        self.n_rows_seen_ = rows.n_rows
        self._stream_state = None
        return self

    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X, y, n_data=None):
        """One pass of minibatch steps over (X, y), continuing the current fit.

        The first call (on an unfitted estimator) initialises the model from these rows:
        the inducing inputs, the feature spreads and, with ``normalize_y``, the target
        mean and scale, which later calls keep. Later calls (or calls after :meth:`fit`)
        continue the same optimisation: q(u), kernel, noise and inducing inputs, the
        natural-step schedule and Adam's moments carry on. ``max_iter``, ``tol`` and
        ``warm_start`` play no part.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), or a Dask array
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
        n_data : int, optional
            N, the number of training rows that scales the data term of the ELBO (a
            minibatch of B rows counts N / B times). By default the number of rows seen
            so far (``n_rows_seen_``, this call's included): right for a stream of new
            rows. When the calls pass over one data set several times, give its size.

        Returns
        -------
        self : SparseGPRegressor
        """
        first = not hasattr(self, "variational_state_")
        if first:
            check_basis_options(self.basis, self.n_orthogonal, self.backend)
        stream = getattr(self, "_stream_state", None)
        rng = generator_from(self.random_state) if stream is None else stream.rng
        rows, y = training_rows(self, X, y, rng, reset=first, multi_output=True, y_numeric=True)
        n_seen = rows.n_rows + (0 if first else self.n_rows_seen_)
        n_total = check_n_data(n_data, n_seen)
        if first:
            model = self._initial_model(rows.sample, self._normalise_targets(y).shape[1], n_total, rng)
            Y = self._scale_targets(y)
        else:
            Y = self._scale_targets(y)
            model = self._fitted_model(n_total)
        steps_done = 0 if first else self.n_steps_
        if stream is None:
            x_scale = feature_scale(rows.sample)
            schedule, adam = make_optimisers(self, model, x_scale, False, steps_done, falling_elbo_backoff=False)
            stream = StreamState(adam, schedule, rng, x_scale)
        history = run_partial_pass(self, model, rows, Y, stream)
        self.noise_variance_ = model.noise.value
        record_fit(self, model, history, stream.schedule, steps_done, append=not first)
        self.n_rows_seen_ = n_seen
        self._stream_state = stream
        return self

    # --- prediction -----------------------------------------------------------------
    def _latent(self, X, full_cov=False):
        """Latent mean (n, P) and variance (n, C) or covariance (C, n, n), normalised scale."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        kernel = compile_kernel(self.kernel_, white_as_noise=True)
        if full_cov:
            return self.predictor_.latent(kernel, X, full_cov=True)
        return latent_in_chunks(self.predictor_, kernel, X)

    def _to_output_shape(self, a):
        """(n, P) -> (n,) for a single target, as GaussianProcessRegressor does."""
        return a[:, 0] if a.shape[1] == 1 else a

    def latent_mean_and_variance(self, X):
        """Mean and variance of the latent function f (no observation noise).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        mean : ndarray of shape (n_samples,) or (n_samples, n_targets)
        var : ndarray of shape (n_samples,) or (n_samples, n_targets)
            Dask arrays when X is a Dask array.
        """
        if is_dask_collection(X):
            from ._dask import map_rows

            return map_rows(self.latent_mean_and_variance, X)
        mean, var = self._latent(X)
        scale = self._y_train_std
        mean = mean * scale + self._y_train_mean
        var = np.broadcast_to(var, mean.shape) * scale**2
        return self._to_output_shape(mean), self._to_output_shape(np.ascontiguousarray(var))

    def predict(self, X, return_std=False, return_cov=False):
        """Predictive distribution of y at X (observation noise included).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), or a Dask array
            For a Dask array the results are Dask arrays, computed chunk by chunk.
        return_std : bool, default=False
            Also return the predictive standard deviation of y.
        return_cov : bool, default=False
            Also return the joint predictive covariance of y (O(n^2) memory; not for
            Dask input).

        Returns
        -------
        y_mean : ndarray of shape (n_samples,) or (n_samples, n_targets)
        y_std : ndarray of shape (n_samples,) or (n_samples, n_targets), optional
        y_cov : ndarray of shape (n_samples, n_samples) or (n_samples, n_samples, n_targets), optional
        """
        if return_std and return_cov:
            raise RuntimeError("At most one of return_std or return_cov can be requested.")
        check_is_fitted(self)
        if is_dask_collection(X):
            if return_cov:
                raise ValueError("return_cov=True is not available for a Dask array (it is n x n); use return_std")
            from ._dask import map_rows

            return map_rows(lambda rows: self.predict(rows, return_std=return_std), X)
        scale = self._y_train_std
        if return_cov:
            mean, cov = self._latent(X, full_cov=True)
            n = mean.shape[0]
            cov = cov + self.noise_variance_ * np.eye(n)
            # (C, n, n) -> (n, n, P), each output scaled by its own variance
            cov = np.moveaxis(np.broadcast_to(cov, (mean.shape[1], n, n)), 0, -1) * scale**2
            mean = mean * scale + self._y_train_mean
            cov = cov[:, :, 0] if cov.shape[2] == 1 else cov
            return self._to_output_shape(mean), np.ascontiguousarray(cov)
        mean, var = self._latent(X)
        y_mean = self._to_output_shape(mean * scale + self._y_train_mean)
        if not return_std:
            return y_mean
        std = np.sqrt(np.broadcast_to(var + self.noise_variance_, mean.shape)) * scale
        return y_mean, self._to_output_shape(np.ascontiguousarray(std))

    def sample_y(self, X, n_samples=1, random_state=0):
        """Draw samples of y from the joint predictive distribution at X.

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
        n_samples : int, default=1
        random_state : int, RandomState instance or None, default=0
            As in GaussianProcessRegressor.sample_y.

        Returns
        -------
        y_samples : ndarray of shape (n_samples_X, n_samples) or (n_samples_X, n_targets, n_samples)
        """
        from sklearn.utils import check_random_state

        rng = check_random_state(random_state)
        mean, cov = self.predict(X, return_cov=True)
        if mean.ndim == 1:
            return rng.multivariate_normal(mean, cov, n_samples).T
        draws = [rng.multivariate_normal(mean[:, p], cov[..., p], n_samples).T[:, np.newaxis] for p in range(mean.shape[1])]
        return np.hstack(draws)

    def _bound_targets(self, y):
        """y as the likelihood takes it: columns on the scale of the fit."""
        return self._scale_targets(np.asarray(y, dtype=np.float64))
