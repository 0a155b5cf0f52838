"""The estimator core: everything SparseGPRegressor and SparseGPClassifier share.

Fitting, continuing a fit (``warm_start``, ``partial_fit``), assembling the variational
model, recording the fitted attributes and the latent predictions are written here once.
A subclass says only what differs, through these methods:

- ``_fit_targets(y, sample_weight, warm)`` and ``_stream_targets(y, first, classes)``:
  the targets as the likelihood takes them (float array of shape (n, T)), setting the
  target attributes (``classes_``, the normalisation of ``y``);
- ``_make_likelihood(kernel)``: the likelihood object and, for a Gaussian likelihood,
  the :class:`~skgp_sparse.likelihoods.NoiseParameter` that carries its noise;
- ``_latent_shape()``: the number of latent functions and of covariances of q(u);
- ``_latent_groups()``, ``_group_state(groups)`` and ``_group_kernels(kernel, n)``: where
  the model has several latent groups (the regressor's several outputs), their shapes,
  the state that joins them to the outputs and each group's kernel; by default one group
  of ``_latent_shape()`` with the kernel as given;
- ``_known_noise(n_rows)``: the per-row known noise variance (None when there is none);
- ``_record_targets(model)``: fitted attributes of the subclass's own.

It also declares ``_data_checks``, the keyword arguments that ``validate_data`` applies to
y (multi-output, numeric).
"""

import dataclasses
import inspect

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted, validate_data

from .. import backend
from ..bases import BASES
from ..elbo import TargetLayout, VariationalModel
from ..features import FITTED_ATTRIBUTES, InducingPoints, as_features, covariances, stationary_length_scales
from ..kernels import compile_kernel
from ._common import (
    check_basis_options,
    check_n_data,
    check_sample_weight,
    consistent_covariance,
    device_rows_for_prediction,
    generator_from,
    initial_inducing_points,
    KernelForm,
    latent_in_chunks,
    latent_on_device,
    latent_white_noise,
    resolve_kernel,
)
from ..fit.jitter import starting_jitter
from ..fit.pipeline import run_fit, run_partial_fit
from ..fit.placement import dispatch_namespace, fit_device, is_dask_collection
from ..fit.plan import feature_scale
from ..fit.rows import DaskRows, InMemoryRows, device_rows, host_copies, stream_inputs, stream_sample
from ..fit.settings import FitSettings
from .._warnings import warn
from ._objective import BoundMethods

#: ``fit`` keeps its training rows (``X_train_``) up to this many, GaussianProcessRegressor's
#: practical size: a pickle then grows by at most 5,000 rows, and above it a model's size
#: does not depend on its data.
KEEP_TRAINING_ROWS = 5000


class SparseGPBase(BoundMethods, BaseEstimator):
    """Shared machinery of the sparse variational GP estimators (not for direct use)."""

    #: Keyword arguments of ``validate_data`` for the targets.
    _data_checks = {}

    # --- the model ------------------------------------------------------------------
    def _default_kernel_form(self, n_features):
        """What the default kernel (``kernel=None``) on ``n_features`` features is made
        of (a ``_common.KernelForm``): by default an amplitude times an RBF with one
        length scale per feature, each started at its feature's spread."""
        return KernelForm()

    def _default_kernel_form_for(self, features, n_features):
        """The default kernel's form for inducing ``features``: the estimator's, with an
        RBF profile where the features' closed forms need one, and without the learned
        constant where they have no covariances for it (see ``InducingFeatures``)."""
        form = self._default_kernel_form(n_features)
        if features.default_kernel_rbf:
            form = dataclasses.replace(form, matern_nu=None)
        if not features.takes_a_bias:
            form = dataclasses.replace(form, bias=False)
        return form

    def _latent_noise_from_white(self):
        """Whether top-level WhiteKernel terms are white noise of the latent function
        (non-Gaussian likelihoods) rather than observation noise (Gaussian)."""
        return True

    def _build_model(self, kernel, state, n_data, features):
        """The :class:`VariationalModel` of ``state`` over ``n_data`` rows with inducing
        ``features``: ``kernel`` a compiled kernel (a fresh model's, which
        ``_group_kernels`` hands to each group) or the list of the groups' kernels (a
        rebuilt one's)."""
        groups = state.output_map().groups(state)
        kernels = list(kernel) if isinstance(kernel, (list, tuple)) else self._group_kernels(kernel, len(groups))
        likelihood, noise = self._make_likelihood(kernels[0])
        # Without an input derivative (kernels on scikit-learn's API) Z cannot be learned;
        # _initial_model says so once per fit.
        learn_inducing = self.learn_inducing and kernels[0].has_input_gradient
        model = VariationalModel(
            BASES[self.basis], kernels, likelihood, state, n_data, noise=noise,
            learn_inducing=learn_inducing,
            natural=self.variational_optimizer == "natural",
            latent_noise=latent_white_noise(kernels[0]) if self._latent_noise_from_white() else None,
            # optimizer=None (GPR's meaning): the kernel and likelihood stay as given.
            learn_hyperparameters=self.optimizer is not None, features=features,
        )
        smallest_noise = None if noise is None else float(np.min(noise.value))
        model.jitter = starting_jitter(self.jitter, model.covariances[0], state.inducing, smallest_noise)
        return model

    def _fitted_model(self, n_data):
        """The fitted parameters as a :class:`VariationalModel` over ``n_data`` rows."""
        kernels = [compile_kernel(k, white_as_noise=True) for k in self._fitted_kernels()]
        state = self.variational_state_.copy()
        n_groups = len(state.output_map().groups(state))
        # One fitted kernel for several groups: their hyperparameters are tied.
        model = self._build_model(kernels * n_groups if len(kernels) == 1 else kernels, state, n_data,
                                  self._fitted_features())
        self._restore_likelihood(model)
        model.jitter = self.jitter_
        return model

    def _fitted_features(self):
        """The inducing features of the fitted model (points for one fitted before they
        were a choice)."""
        return getattr(self, "inducing_features_", None) or InducingPoints()

    def _fitted_kernels(self):
        """The fitted kernel of each latent group, or one shared by every group."""
        return [self.kernel_]

    def _latent_groups(self):
        """(latent functions, covariances) of each latent group of q(u): one group."""
        return [self._latent_shape()]

    def _group_state(self, groups):
        """The model's state made of the groups' basis states: the one group's own."""
        return groups[0]

    def _group_kernels(self, kernel, n_groups):
        """The compiled kernel of each of a fresh model's ``n_groups`` latent groups."""
        return [kernel] * n_groups

    def _restore_likelihood(self, model):
        """Put the fitted likelihood parameters back into a rebuilt model (none by default)."""

    def _inducing_strata(self, Y):
        """Groups of the rows (one label per row of the targets ``Y``) within which
        ``inducing_init="kmeans"`` places its own share of the points; None: all rows
        as one."""
        return None

    def _initial_model(self, sample, n_data, rng, sample_weight=None, sample_targets=None):
        """A fresh model: kernel, inducing inputs from ``sample`` (whose targets,
        ``sample_targets``, may group its rows: :meth:`_inducing_strata`), q(u) at the
        prior."""
        strata = None if sample_targets is None else self._inducing_strata(sample_targets)
        if sample_weight is not None:
            # Rows of zero weight are absent from the data: they place no inducing input.
            present = sample_weight > 0
            sample, sample_weight = sample[present], sample_weight[present]
            strata = None if strata is None else strata[present]
        features = as_features(self.inducing_features)
        kernel = resolve_kernel(self.kernel, sample.shape[1], feature_scale(sample, sample_weight),
                                self._default_kernel_form_for(features, sample.shape[1]))
        if self.learn_inducing and not kernel.has_input_gradient:
            warn(
                f"{type(self).__name__}: the kernel {kernel.to_sklearn()!r} has parts without an input "
                "derivative in scikit-learn's kernel API, so the inducing inputs stay at their initial "
                "values; set learn_inducing=False to silence this, or use kernels of "
                "skgp_sparse.kernels.COMPILED_KERNELS to learn them",
                UserWarning,
            )
        features = features.bind(sample, self.n_inducing + self.n_orthogonal, kernel)
        if features.placed_in_input_space:
            default = inspect.signature(type(self).__init__).parameters["n_inducing"].default
            Z = initial_inducing_points(self.inducing_init, self.n_inducing, self.n_orthogonal, sample, kernel, rng,
                                        n_inducing_chosen=self.n_inducing != default, strata=strata)
            Z = features.start(Z, stationary_length_scales(kernel, Z.shape[1]))
        else:
            Z = features.start(None, None)
        # With fewer distinct rows than points asked for (clipped, with a warning), the
        # orthogonal set gives way first: the first set needs at least one point.
        n_orthogonal = min(self.n_orthogonal, Z.shape[0] - 1)
        return self._build_model(kernel, self._init_state(Z, n_orthogonal, rng), n_data, features)

    def _init_state(self, Z, n_orthogonal, rng):
        """q(u) at the prior on the inducing inputs Z (the second set's size ``n_orthogonal``),
        for every latent group."""
        basis = BASES[self.basis]
        groups = [
            basis.init_state(Z, n_outputs=n_outputs, n_covariances=n_covariances, n_orthogonal=n_orthogonal,
                             **basis.init_options(self.get_params(deep=False), rng))
            for n_outputs, n_covariances in self._latent_groups()
        ]
        return self._group_state(groups)

    def _missing_entries(self, y):
        """y with its missing entries filled for validation, and where they are (None: y
        has none, or the estimator takes none; the default)."""
        return y, None

    @staticmethod
    def _with_missing(y, missing):
        """The validated y with its missing entries back as NaN."""
        if missing is None:
            return y
        y = np.array(y, dtype=np.float64)
        y[missing.reshape(y.shape)] = np.nan
        return y

    def _layout(self, Y, weights, known_noise):
        """The model's target layout for this call, and the training array it reads."""
        layout = TargetLayout(
            Y.shape[1], weighted=weights is not None, known_noise=known_noise is not None,
            mean_weight=1.0 if weights is None else weights.mean(),
        )
        return layout, layout.join(Y, weights, known_noise)

    # --- fitting --------------------------------------------------------------------
    def _fit(self, X, y, sample_weight):
        settings = self._fit_settings()
        check_basis_options(self.basis, self.n_orthogonal)
        rng = generator_from(self.random_state)
        y, missing = self._missing_entries(y)
        rows, y = self._training_rows(settings, X, y, rng, **self._data_checks)
        y = self._with_missing(y, missing)
        weights = check_sample_weight(sample_weight, rows.n_rows)
        warm = self.warm_start and hasattr(self, "variational_state_")
        Y = self._fit_targets(y, weights, warm)
        if warm:
            model = self._fitted_model(rows.n_rows)
        else:
            model = self._initial_model(rows.sample, rows.n_rows, rng, rows.of_sample(weights), rows.of_sample(Y))
        model.layout, Y = self._layout(Y, weights, self._known_noise(rows.n_rows))
        result = run_fit(settings, model, rows, Y, rng, weights, fresh=not warm,
                         steps_before=self.n_steps_ if warm else 0)
        self._record_fit(result)
        self._keep_training_rows(rows, y)
        self._fitted_arrays_follow(X)
        self.n_rows_seen_ = rows.n_rows
        self._stream_state = None
        return self

    def _partial_fit(self, X, y, sample_weight, n_data, classes=None):
        settings = self._fit_settings()
        first = not hasattr(self, "variational_state_")
        if first:
            check_basis_options(self.basis, self.n_orthogonal)
        stream = getattr(self, "_stream_state", None)
        rng = generator_from(self.random_state) if stream is None else stream.rng
        y, missing = self._missing_entries(y)
        rows, y = self._training_rows(settings, X, y, rng, reset=first, **self._data_checks)
        y = self._with_missing(y, missing)
        weights = check_sample_weight(sample_weight, rows.n_rows)
        Y = self._stream_targets(y, weights, first, classes)
        n_seen = rows.n_rows + (0 if first else self.n_rows_seen_)
        n_total = check_n_data(n_data, n_seen)
        if first:
            model = self._initial_model(rows.sample, n_total, rng, rows.of_sample(weights), rows.of_sample(Y))
        else:
            model = self._fitted_model(n_total)
        model.layout, Y = self._layout(Y, weights, self._known_noise(rows.n_rows))
        result, stream = run_partial_fit(settings, model, rows, Y, rng, weights, stream=stream,
                                         fresh=first,
                                         steps_before=0 if first else self.n_steps_)
        self._record_fit(result, append=not first)
        self._keep_training_rows(None, None)  # a chunk of a stream is not the training set
        self._fitted_arrays_follow(X)
        self.n_rows_seen_ = n_seen
        self._stream_state = stream
        return self

    def _fit_settings(self):
        """The parameters the fit reads, frozen for this call (a parameter set during the
        fit cannot change it)."""
        return FitSettings.from_parameters(type(self).__name__, self.get_params(deep=False),
                                           getattr(self, "_epoch_callback", None))

    def _training_rows(self, settings, X, y, rng, reset=True, **checks):
        """Validate (X, y) for a fit with ``settings``: the rows as a
        :class:`skgp_sparse.fit.rows.Rows`, and y as numpy. Sets ``n_features_in_`` (and
        ``feature_names_in_``) as ``validate_data`` does, with ``reset`` and ``checks``
        (multi-output, numeric y).

        Where :func:`~skgp_sparse.fit.placement.fit_device` says the fit runs on a device
        or in float32, the checks run on host copies and the rows are
        :class:`~skgp_sparse.fit.rows.DeviceRows`; Dask input streams from its chunks
        (:class:`~skgp_sparse.fit.rows.DaskRows`, in the fit's dtype), of which only a
        random sample is computed and checked here; anything else is validated by
        scikit-learn into one float64 array.
        """
        where = fit_device(settings, X)
        if where is not None:
            # y comes to the host: the target transformations are numpy code; the fit
            # sends the finished target array to the device once.
            host_X, host_y = host_copies(X, y)
            host_X, y = validate_data(self, host_X, host_y, dtype=np.float64, order="C", reset=reset, **checks)
            return device_rows(X, host_X, where), y
        if is_dask_collection(X) or is_dask_collection(y):
            X, y = stream_inputs(X, y, **checks)
            sample_rows, sample = stream_sample(X, rng)
            sample = validate_data(self, sample, reset=reset, dtype=np.float64)
            return DaskRows(X, sample, sample_rows, dtype=settings.dtype), y
        X, y = validate_data(self, X, y, dtype=np.float64, order="C", reset=reset, **checks)
        return InMemoryRows(X), y

    def _keep_training_rows(self, rows, y):
        """``X_train_`` and ``y_train_``, as GaussianProcessRegressor keeps them, for a fit on
        in-memory rows (any library) of at most :data:`KEEP_TRAINING_ROWS` (None: keep none).
        They are numpy here; :meth:`_fitted_arrays_follow` moves them to X's library."""
        for name in ("X_train_", "y_train_"):
            self.__dict__.pop(name, None)
        if isinstance(rows, InMemoryRows) and rows.n_rows <= KEEP_TRAINING_ROWS:
            keep = np.array if self.copy_X_train else np.asarray
            # sample: every row as float64 numpy (the rows themselves on the numpy path).
            self.X_train_, self.y_train_ = keep(rows.sample), keep(y)

    def _record_fit(self, result, append=False):
        """Set the fitted attributes from a :class:`skgp_sparse.fit.pipeline.FitResult`.

        ``append`` (``partial_fit``): the epochs and ELBOs add to those already recorded.
        """
        model, history = result.model, result.history
        self._record_targets(model)
        self.log_marginal_likelihood_value_ = np.nan if result.bound is None else float(result.bound)
        self.kernel_ = model.kernel.to_sklearn()
        # Cached matrices are recomputable; dropping them keeps pickles small.
        model.state.drop_caches()
        self.variational_state_ = model.state
        self.inducing_features_ = model.features
        for name in FITTED_ATTRIBUTES:
            self.__dict__.pop(name, None)
        self.__dict__.update(model.features.fitted_attributes(model.state.inducing))
        if model.basis.ORTHOGONAL_SET:
            self.orthogonal_points_ = model.features.centres(model.state.orthogonal)
        self.jitter_ = model.jitter
        self.n_iter_ = history.n_epochs + (self.n_iter_ if append else 0)
        self.n_steps_ = result.steps_before + history.n_steps
        self.loss_curve_ = (list(self.loss_curve_) if append else []) + list(history.elbo)
        self.converged_ = history.converged
        self.n_natural_backoffs_ = result.n_natural_backoffs
        self.diagnostics_ = (list(self.diagnostics_) if append else []) + list(history.diagnostics)
        self.predictor_ = model.predictor()

    #: The fitted array attributes that follow the input's library.
    _FOLLOWING_ATTRIBUTES = ("inducing_points_", "orthogonal_points_", "X_train_", "y_train_")

    def _fitted_arrays_follow(self, X):
        """The inducing inputs' public copies (``inducing_points_``, ``orthogonal_points_``)
        and the kept training rows in X's library and on its device when X is an array of another library under
        ``array_api_dispatch`` (scikit-learn's convention for fitted arrays); the model
        itself stays numpy."""
        xp = dispatch_namespace(X)
        if xp is None:
            return
        for name in self._FOLLOWING_ATTRIBUTES:
            # Class labels that are strings stay numpy, as classes_ does.
            if hasattr(self, name) and getattr(self, name).dtype.kind in "biuf":
                setattr(self, name, backend.to_namespace(getattr(self, name), xp, device=backend.device_of(X)))

    # --- prediction -----------------------------------------------------------------
    def _latent(self, X, full_cov=False):
        """Latent mean (n, L) and variance (n, C) or covariance (C, n, n) of the fitted
        model at X, latent white noise included, on the scale of the fit, as numpy arrays.

        X of another library under ``array_api_dispatch`` is not copied to the host: the
        kernel matrices and products run on its device, and only the (n, L) results come
        back."""
        # By name: check_is_fitted passes any estimator whose tags say it needs no fit
        # (the Gaussian regressor, whose predict gives the prior before fit).
        check_is_fitted(self, "kernel_")
        compiled = compile_kernel(self.kernel_, white_as_noise=True)
        white = compiled.white_noise_level if self._latent_noise_from_white() else 0.0
        # The predictor computes with the features' covariances under the fitted kernel.
        kernel = covariances(self._fitted_features(), compiled)
        xp = dispatch_namespace(X)
        if xp is not None:
            X = device_rows_for_prediction(X, xp, self.n_features_in_, type(self).__name__)
            mean, second = latent_on_device(self.predictor_, kernel, X, xp, full_cov)
        else:
            X = validate_data(self, X, reset=False, dtype=np.float64)
            if full_cov:
                mean, second = self.predictor_.latent(kernel, X, full_cov=True)
            else:
                mean, second = latent_in_chunks(self.predictor_, kernel, X)
        if full_cov:
            return mean, consistent_covariance(second) + white * np.eye(mean.shape[0])
        return mean, second + white

    def __getstate__(self):
        # A model fitted on arrays of another library keeps its model in numpy; only the
        # inducing inputs' public copy follows the input's library (scikit-learn's
        # convention), and it is pickled as numpy so that the model loads anywhere.
        state = super().__getstate__()
        following = {name: backend.to_numpy(state[name]) for name in self._FOLLOWING_ATTRIBUTES
                     if backend.is_foreign(state.get(name))}
        return dict(state, **following) if following else state
