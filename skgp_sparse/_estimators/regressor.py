"""SparseGPRegressor: the scikit-learn face of sparse variational GP regression."""

from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
from sklearn.base import RegressorMixin, _fit_context
from sklearn.exceptions import DataConversionWarning
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.exceptions import NotFittedError
from sklearn.utils import check_array
from sklearn.utils.validation import check_is_fitted, validate_data

from .. import backend
from ..kernels import compile_kernel
from ..likelihoods import (GaussianLikelihood, NoiseParameter, OutputGaussianLikelihood, OutputNoise,
                           PoissonLikelihood, StudentTLikelihood)
from ..multioutput import MixedPredictor, MixedState, initial_mixing
from ._base import SparseGPBase
from ._multioutput import check_observed_columns, latent_kernels, observed_moments, observed_r2, split_missing
from ._docs import fill_docstring
from ..fit.placement import is_dask_collection
from ._common import COMMON_CONSTRAINTS, KernelForm, default_kernel, outputs_follow_input
from .._warnings import warn

#: The bounds of the noise variance that ``noise_variance_bounds="auto"`` stands for (on
#: the normalised scale under ``normalize_y``).
NOISE_FLOOR, NOISE_CEILING = 1e-6, 1e3
#: The floor of each output's noise variance under ``n_latent`` with "auto" bounds (on the
#: normalised scale under ``normalize_y``: a noise standard deviation of about 3% of the
#: output's spread). With a vanishing noise the LMC declares an output an exact combination
#: of latents that the other outputs pin down, and it is overconfident wherever that output
#: is unseen; the search's bound is then also so sharp along those outputs that L-BFGS-B
#: crawls and stops at ``max_iter`` where it happens to be. The floor trades that against
#: outputs whose noise lies below it (docs/constants.md).
LMC_NOISE_FLOOR = 1e-3

#: The default kernel's Matern smoothness (see ``_default_kernel_form``).
DEFAULT_MATERN_NU = 2.5


@dataclass(frozen=True)
class TargetScaling:
    """The normalisation of the training targets: y = mean + std * (targets of the fit),
    per column. Held together as one host object (not two fitted arrays): it is applied
    to the numpy predictions, on whichever library the model was fitted."""

    mean: np.ndarray
    std: np.ndarray


def _parses_as_float(value):
    try:
        float(value)
    except ValueError:
        return False
    return True


@fill_docstring
class SparseGPRegressor(RegressorMixin, SparseGPBase):
    """Sparse variational Gaussian process regression, fitted by minibatch natural gradients.

    The latent function has a GP prior with the given kernel; a set of inducing inputs
    carries a Gaussian variational posterior q(u) that is moved by natural-gradient steps,
    while the kernel hyperparameters, the noise variance and the inducing inputs are moved
    by Adam. Cost per step is O(B M^2 + M^3) for a batch of B rows and M inducing points;
    prediction costs O(M) per row for the mean and O(M^2) for the variance.

    Most fits need only ``kernel``, ``n_inducing``, ``likelihood``, ``normalize_y``,
    ``random_state`` and ``max_iter`` / ``tol``; the user guide ("Choosing the settings")
    says when to change the others, and "Coming from GaussianProcessRegressor" maps GPR's
    parameters onto these.

    Parameters
    ----------
    kernel : kernel instance from :mod:`sklearn.gaussian_process.kernels`, default=None
        Prior covariance of the latent function. None means ``ConstantKernel(1.0) *
        Matern(length_scale=s, nu=2.5)`` with learnable amplitude and one length scale per
        feature, starting at each feature's standard deviation ``s`` (1 for a constant
        feature) and bounded to ``[1e-5 s, 1e5 s]`` (GaussianProcessRegressor's default is
        a fixed-amplitude RBF; on real data the Matern 5/2 was the more accurate, see
        docs/benchmarks.md, "The default kernel"). Under ``n_latent`` the default's
        amplitude is fixed at 1, since the mixing matrix scales each latent, and its
        length scales start at ``sqrt(d) s`` for d features (see the user guide,
        "Several outputs").
        Hyperparameters with ``"fixed"`` bounds stay fixed and the others stay within
        their bounds. A ``WhiteKernel`` term added at the top
        level (``k + WhiteKernel()``) is taken as the observation noise: it replaces
        ``noise_variance`` and its bounds, and ``kernel_`` reports the fitted level, as in
        :class:`~sklearn.gaussian_process.GaussianProcessRegressor`. Under the other
        likelihoods it is white noise of the latent function. Any scikit-learn kernel is
        accepted; kernels outside ``skgp_sparse.kernels.COMPILED_KERNELS`` are evaluated
        through scikit-learn's kernel API (slower), with the inducing inputs fixed.
    likelihood : {"gaussian", "student_t", "poisson"}, default="gaussian"
        Observation model. ``"gaussian"``: y = f + noise. ``"student_t"``: y = f + scale *
        t, t Student-t with learned degrees of freedom (starting at 4) and scale (starting
        at ``sqrt(noise_variance)``, bounded by the square roots of
        ``noise_variance_bounds``), for data with outliers; expectations by Gauss-Hermite
        quadrature. ``"poisson"``: counts y ~ Poisson(exp(f)), exact expectations; with
        ``normalize_y`` the log-rate is taken relative to the log of the mean count
        instead of scaling y. The two non-Gaussian likelihoods move q(u) by damped natural
        steps with the classifier's warm-up and back-off, and model one target column.
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
    %(n_inducing)s
    %(n_orthogonal)s
    %(kl_columns)s
    batch_size : "auto", int or None, default="auto"
        Rows per training step. None (or a value at least the number of samples) means
        full batch: then, under the Gaussian likelihood, the coupled and orthogonally
        decoupled bases maximise the collapsed bound (q(u) optimal for every
        hyperparameter) with ``optimizer``, as GaussianProcessRegressor maximises its log
        marginal likelihood. "auto": that search on up to 2,048 rows, batches of 1,024
        otherwise (above 2,048 rows, other likelihoods and bases, ``partial_fit``).
    %(max_iter)s
    %(tol)s
    n_iter_no_change : int, default=3
        Periods in each of the two windows the stopping rule compares.
    natural_step_size : float in (0, 1], default=0.1
        Step size of the natural-gradient update of q(u) once training is under way.
        Under this Gaussian likelihood the step starts at 1 and decays as 1/t to this
        value (a running average of the minibatch optima); with a full batch it stays 1,
        so every step lands on the optimal q(u) for the current hyperparameters.
    learning_rate : float, default=0.02
        Adam step size for the log-hyperparameters, the log noise and the inducing inputs.
    %(variational_optimizer)s
    %(learn_inducing)s
    %(inducing_init)s
    %(inducing_features)s
    noise_variance : float, default=0.1
        Initial observation-noise variance (on the normalised scale when ``normalize_y``).
    noise_variance_bounds : pair of floats >= 0, "fixed" or "auto", default="auto"
        Bounds of the noise variance, or "fixed" to keep it at ``noise_variance``.
        "auto": (1e-6, 1e3), and (1e-3, 1e3) for each output under ``n_latent`` (see
        :data:`LMC_NOISE_FLOOR`).
    alpha : float or array-like of shape (n_samples,), default=0.0
        Known noise variance of each training row (measurement errors), added to the
        learned noise (or WhiteKernel), as GaussianProcessRegressor's ``alpha`` is added
        to the diagonal of its kernel matrix: like it, on the normalised scale when
        ``normalize_y``. Under the non-Gaussian likelihoods it is that literally: white
        noise of the latent function at those rows. Predictions do not include it. For
        ``partial_fit`` an array has one entry per row of each call.
    %(optimizer)s
    %(n_restarts_optimizer)s
    normalize_y : bool, default=True
        Centre and scale each target column before fitting (unlike
        GaussianProcessRegressor, on by default: the default kernel and noise assume unit
        scale). The kernel, noise and ELBO then refer to the normalised targets, as in
        GaussianProcessRegressor; predictions are returned on the original scale.
    %(jitter)s
    %(backend)s
    %(dtype)s
    %(random_state)s
    %(verbose)s
    warm_start : bool, default=False
        Continue from the previous fit's inducing inputs, q(u), kernel and noise.
    %(copy_X_train)s
    n_targets : int >= 1, default=None
        The number of target columns, as in GaussianProcessRegressor: the number of
        outputs of predictions and draws from the prior (before ``fit``; None: one), and
        checked against y by ``fit``.
    n_latent : int >= 1, default=None
        Several outputs as mixtures of latent GPs (the linear model of coregionalisation,
        LMC): the P columns of y are ``f = W g`` of ``n_latent`` independent latent GPs,
        each with its own copy of the kernel's hyperparameters and its own q(u) on shared
        inducing inputs. W (``mixing_matrix_``, shape (P, n_latent)) is learned, started
        from the principal directions of the observed targets; the noise is learned per
        output. None: the columns of y are independent outputs sharing one kernel (see
        the user guide, "Several outputs"). Gaussian likelihood only. A minibatch LMC fit
        that starts with the exact search runs its stream for at most 90 steps after it,
        rounded up to whole epochs, when that is fewer than ``max_iter`` epochs: the
        hidden entries of the benchmarks' series got worse as the stream went on. Ending
        there is by design: no ConvergenceWarning, ``converged_`` False unless the
        stopping rule ended the stream first.
    missing_targets : {"error", "mask"}, default="error"
        What a NaN in y means. "error" refuses it. "mask": the entry was not observed; it
        drops out of the bound entry by entry (the row's other outputs still count), each
        output gets its own noise variance, ``normalize_y`` uses each column's observed
        entries and ``score`` scores the observed entries. inf is refused either way.

    Attributes
    ----------
    %(kernel_)s
    %(inducing_points_)s
    %(inducing_features_)s
    %(orthogonal_points_)s
    noise_variance_ : float or ndarray of shape (n_targets,)
        Fitted observation-noise variance (normalised scale when ``normalize_y``); Gaussian
        likelihood only. One per output with ``n_latent`` or ``missing_targets="mask"``.
    mixing_matrix_ : ndarray of shape (n_targets, n_latent)
        The fitted mixing W of the latent GPs into the outputs (with ``n_latent``), on
        the normalised scale when ``normalize_y``.
    latent_kernels_ : list of kernel instances
        The fitted kernel of each latent GP (with ``n_latent``); ``kernel_`` is the first.
    likelihood_params_ : dict
        Fitted likelihood hyperparameters: ``noise_variance`` (Gaussian), ``df`` and
        ``scale`` (Student-t), none (Poisson).
    %(n_iter_)s
    %(n_steps_)s
    %(n_rows_seen_)s
    %(loss_curve_)s
    %(converged_)s
    %(log_marginal_likelihood_value_)s
    %(jitter_)s
    n_natural_backoffs_ : int
        Natural steps that were halved because their precision was not positive definite.
    %(X_train_)s
    %(y_train_)s
    %(diagnostics_)s
    %(predictor_)s
    %(variational_state_)s
    %(n_features_in_)s
    %(feature_names_in_)s

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
        "noise_variance_bounds": [StrOptions({"fixed", "auto"}), tuple, list],
        "normalize_y": ["boolean"],
        "likelihood": [StrOptions({"gaussian", "student_t", "poisson"})],
        "alpha": [Interval(Real, 0, None, closed="left"), "array-like"],
        "n_targets": [Interval(Integral, 1, None, closed="left"), None],
        "n_latent": [Interval(Integral, 1, None, closed="left"), None],
        "missing_targets": [StrOptions({"error", "mask"})],
    }

    def __init__(
        self,
        kernel=None,
        *,
        likelihood="gaussian",
        basis="coupled",
        n_inducing=256,
        n_orthogonal=0,
        kl_columns="auto",
        batch_size="auto",
        max_iter=100,
        tol=1e-3,
        n_iter_no_change=3,
        natural_step_size=0.1,
        learning_rate=0.02,
        variational_optimizer="natural",
        learn_inducing=True,
        inducing_init="kmeans",
        inducing_features="points",
        noise_variance=0.1,
        noise_variance_bounds="auto",
        alpha=0.0,
        normalize_y=True,
        optimizer="fmin_l_bfgs_b",
        n_restarts_optimizer=0,
        jitter="auto",
        backend="numpy",
        dtype="float64",
        random_state=None,
        verbose=0,
        warm_start=False,
        copy_X_train=True,
        n_targets=None,
        n_latent=None,
        missing_targets="error",
    ):
        self.kernel = kernel
        self.likelihood = likelihood
        self.basis = basis
        self.n_inducing = n_inducing
        self.n_orthogonal = n_orthogonal
        self.kl_columns = kl_columns
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.natural_step_size = natural_step_size
        self.learning_rate = learning_rate
        self.variational_optimizer = variational_optimizer
        self.learn_inducing = learn_inducing
        self.inducing_init = inducing_init
        self.inducing_features = inducing_features
        self.noise_variance = noise_variance
        self.noise_variance_bounds = noise_variance_bounds
        self.alpha = alpha
        self.normalize_y = normalize_y
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.jitter = jitter
        self.backend = backend
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose
        self.warm_start = warm_start
        self.copy_X_train = copy_X_train
        self.n_targets = n_targets
        self.n_latent = n_latent
        self.missing_targets = missing_targets

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # The non-Gaussian likelihoods model one target column; Poisson targets are >= 0.
        tags.target_tags.multi_output = self.likelihood == "gaussian"
        tags.target_tags.positive_only = self.likelihood == "poisson"
        # Before fit, predict and sample_y give the prior (GaussianProcessRegressor's tag).
        tags.requires_fit = self.likelihood != "gaussian"
        return tags

    # --- what the shared core asks of the regressor ----------------------------------
    _data_checks = {"multi_output": True, "y_numeric": True}

    def _latent_noise_from_white(self):
        # A WhiteKernel is the observation noise of the Gaussian likelihood (as in GPR);
        # under the other likelihoods it is white noise of the latent function.
        return self.likelihood != "gaussian"

    def _noise_bounds(self):
        """The noise variance's bounds as given, or those "auto" stands for."""
        if self.noise_variance_bounds != "auto":
            return self.noise_variance_bounds
        return (LMC_NOISE_FLOOR if self.n_latent is not None else NOISE_FLOOR, NOISE_CEILING)

    def _log_noise_bounds(self):
        bounds = self._noise_bounds()
        if isinstance(bounds, str):
            return None
        low, high = (float(b) for b in bounds)
        if not (0 < low <= high):
            raise ValueError(f"noise_variance_bounds must satisfy 0 < low <= high; got {bounds}")
        return (np.log(low), np.log(high))

    def _make_likelihood(self, kernel):
        if self._mixes_outputs():
            if NoiseParameter(kernel, 1.0, None).from_kernel:
                raise ValueError(
                    "the kernel has a WhiteKernel term, but with n_latent or missing_targets='mask' each output "
                    "learns its own noise variance (noise_variance_): remove the WhiteKernel and set "
                    "noise_variance (and noise_variance_bounds) instead")
            noise = OutputNoise(np.broadcast_to(self.noise_variance, self._y_train_mean.shape), self._log_noise_bounds())
            return OutputGaussianLikelihood(noise.value), noise
        if self.likelihood == "gaussian":
            noise = NoiseParameter(kernel, self.noise_variance, self._log_noise_bounds())
            return GaussianLikelihood(noise.value), noise
        if self.likelihood == "student_t":
            # The noise settings give the Student-t scale (its variance for large df).
            bounds = self._log_noise_bounds()
            scale_bounds = "fixed" if bounds is None else tuple(np.sqrt(np.exp(bounds)))
            if bounds is not None and not bounds[0] <= np.log(self.noise_variance) <= bounds[1]:
                raise ValueError(
                    f"noise_variance={self.noise_variance} (the square of the initial Student-t scale) lies "
                    f"outside noise_variance_bounds={self._noise_bounds()}; choose one inside them"
                )
            return StudentTLikelihood(scale=np.sqrt(self.noise_variance), scale_bounds=scale_bounds), None
        return PoissonLikelihood(log_offset=self._log_offset), None

    def _restore_likelihood(self, model):
        if self.likelihood == "gaussian":
            model.set_noise_variance(self.noise_variance_)
        elif model.likelihood.n_params:
            model.likelihood.set_log_params(np.array(self._likelihood_log_params))

    # --- several outputs (n_latent, missing_targets="mask") -------------------------
    def _mixes_outputs(self):
        """Whether the outputs have a model of their own: latent GPs mixed into them (LMC),
        or independent outputs with their own noise and missing entries."""
        return self.n_latent is not None or self.missing_targets == "mask"

    def _default_kernel_form(self, n_features):
        # The smoothness: the Matern 5/2 was more accurate than the RBF on most real sets
        # (docs/constants.md, DEFAULT_MATERN_NU).
        # The amplitude: under n_latent each column of the mixing matrix carries its
        # latent's scale (W starts on the targets' spread for latents of unit variance); a
        # learned amplitude would scale the same variance and leave the search a flat
        # direction (docs/constants.md).
        # The start: at length scales of one spread, rows a typical distance apart (about
        # sqrt(2 d) spreads) are all but uncorrelated under the kernel once d reaches ten
        # or so: the latents explain nothing at the start, and under a learned W the search
        # falls to W = 0, all noise, a stationary point it does not leave (the bound is
        # even in W and flat in the kernels there; docs/constants.md). sqrt(d) spreads put
        # that typical distance at a kernel value of about exp(-1) (an RBF).
        mixed = self.n_latent is not None
        return KernelForm(matern_nu=DEFAULT_MATERN_NU, learn_amplitude=not mixed,
                          widen=float(np.sqrt(n_features)) if mixed else 1.0)

    def _missing_entries(self, y):
        return split_missing(y, self.missing_targets)

    def _latent_groups(self):
        # Independent outputs: one group of P latents, each with its own covariance; the
        # LMC: n_latent groups of one latent, each with its own kernel.
        if not self._mixes_outputs():
            return super()._latent_groups()
        n_outputs = self._y_train_mean.shape[0]
        return [(n_outputs, n_outputs)] if self.n_latent is None else [(1, 1)] * self.n_latent

    def _group_state(self, groups):
        if not self._mixes_outputs():
            return super()._group_state(groups)
        n_outputs = self._y_train_mean.shape[0]
        mixing = np.eye(n_outputs) if self.n_latent is None else self._mixing_start
        return MixedState(tuple(groups), mixing, mixing_learned=self.n_latent is not None,
                          offset=np.zeros(n_outputs))

    def _group_kernels(self, kernel, n_groups):
        # A fresh LMC's latents start at spread length scales (a copy for one group).
        return latent_kernels(kernel, n_groups) if self._mixes_outputs() else super()._group_kernels(kernel, n_groups)

    def _fitted_kernels(self):
        """The fitted kernels of the latent groups (one, shared, for independent outputs)."""
        return list(self.latent_kernels_) if self.n_latent is not None else [self.kernel_]

    def _set_fitted_theta(self, theta):
        super()._set_fitted_theta(theta)
        if self.n_latent is not None:
            # kernel_ reports the first latent's kernel, as fit sets it.
            self.kernel_.theta = self.latent_kernels_[0].theta

    def _latent_shape(self):
        # Gaussian noise is shared by the outputs, so they share one covariance.
        return self._y_train_mean.shape[0], 1

    def _known_noise(self, n_rows):
        alpha = np.asarray(self.alpha, dtype=np.float64)
        if alpha.ndim == 0:
            if alpha == 0:
                return None
            alpha = np.full(n_rows, float(alpha))
        if alpha.shape != (n_rows,):
            raise ValueError(
                f"alpha must be a scalar or have shape ({n_rows},) (one variance per training row); got {alpha.shape}"
            )
        if not np.all(np.isfinite(alpha)) or np.any(alpha < 0):
            raise ValueError("alpha must hold finite, non-negative noise variances")
        return alpha

    def _check_targets(self, y):
        if y.dtype.kind in "US":
            # scikit-learn converts object arrays of strings for a numeric y, not numpy's
            # string arrays; GaussianProcessRegressor's message, not a matmul deep inside.
            try:
                y = y.astype(np.float64)
            except ValueError:
                bad = next(str(v) for v in y.ravel() if not _parses_as_float(v))
                raise ValueError(f"{type(self).__name__} needs numeric targets: could not convert "
                                 f"string to float: {bad!r}") from None
        y2 = y.reshape(-1, 1) if y.ndim == 1 else y
        if self.n_targets is not None and y2.shape[1] != self.n_targets:
            raise ValueError(f"y has {y2.shape[1]} target column(s) but n_targets={self.n_targets}; "
                             "set n_targets to the columns of y, or to None")
        if self.likelihood != "gaussian" and y2.shape[1] != 1:
            raise ValueError(
                f"likelihood={self.likelihood!r} models one target column; y has {y2.shape[1]} "
                "(fit one regressor per column, or use likelihood='gaussian')"
            )
        if self.likelihood != "gaussian" and y.ndim == 2:
            warn(
                "A column-vector y was passed when a 1d array was expected (the "
                f"{self.likelihood} likelihood models one target column); predictions will be 1d. "
                "Pass y.ravel() to silence this.",
                DataConversionWarning,
            )
        if self.likelihood == "poisson":
            PoissonLikelihood.check_targets(y2)
        if self._mixes_outputs():
            if self.likelihood != "gaussian":
                raise ValueError(
                    f"n_latent and missing_targets='mask' need likelihood='gaussian' (got {self.likelihood!r}): "
                    "their noise is learned per output; fit one regressor per output for other likelihoods")
            check_observed_columns(y2)
        return y2

    def _fit_targets(self, y, sample_weight, warm):
        y2 = self._check_targets(y)
        if warm and self._y_train_mean.shape[0] != y2.shape[1]:
            raise ValueError("warm_start needs the same number of targets as the previous fit")
        return self._normalise_targets(y2, sample_weight)

    def _stream_targets(self, y, sample_weight, first, classes):
        y2 = self._check_targets(y)
        if first:
            self._normalise_targets(y2, sample_weight)
        return self._scale_targets(y2)

    def _normalise_targets(self, y2, sample_weight):
        """Set the target normalisation from (weighted) y and return y normalised."""
        w = np.ones(y2.shape[0]) if sample_weight is None else sample_weight
        if self.normalize_y and self.likelihood != "poisson":
            mean, std = observed_moments(y2, w)
            # A constant target column has nothing to scale.
            self._target_scaling = TargetScaling(mean, np.where(std > 0, std, 1.0))
        else:
            self._target_scaling = TargetScaling(np.zeros(y2.shape[1]), np.ones(y2.shape[1]))
        # Counts are not shifted or scaled: the latent log-rate is taken relative to the
        # log of the mean count instead, so that the zero-mean prior sits on the data.
        mean_count = float((w @ y2[:, 0]) / w.sum()) if self.likelihood == "poisson" else 1.0
        self._log_offset = np.log(mean_count) if self.normalize_y and mean_count > 0 else 0.0
        y_fit = (y2 - self._y_train_mean) / self._y_train_std
        if self.n_latent is not None:
            self._mixing_start = initial_mixing(y_fit, self.n_latent)
        return y_fit

    def _scale_targets(self, y):
        """y on the scale of the first fit (partial_fit calls after the first)."""
        y2 = y.reshape(-1, 1) if y.ndim == 1 else y
        if y2.shape[1] != self._y_train_mean.shape[0]:
            raise ValueError(
                f"y has {y2.shape[1]} target column(s) but the model was fitted to {self._y_train_mean.shape[0]}"
            )
        return (y2 - self._y_train_mean) / self._y_train_std

    def _record_targets(self, model):
        for name in ("mixing_matrix_", "latent_kernels_"):
            self.__dict__.pop(name, None)
        if model.outputs.learned:
            self.mixing_matrix_ = np.array(backend.to_numpy(model.state.mixing), dtype=np.float64)
            self.latent_kernels_ = [k.to_sklearn() for k in model.kernels]
        if model.noise is not None:
            self.noise_variance_ = model.noise.value
        elif hasattr(self, "noise_variance_"):
            del self.noise_variance_  # left by an earlier fit under the Gaussian likelihood
        self.likelihood_params_ = self._fitted_likelihood_params(model.likelihood)
        # A tuple: host numbers, not a fitted array (scikit-learn's Array API check expects
        # every fitted array to follow the input's library).
        self._likelihood_log_params = tuple(float(v) for v in getattr(model.likelihood, "log_params", ()))

    @staticmethod
    def _fitted_likelihood_params(likelihood):
        if isinstance(likelihood, GaussianLikelihood):
            return {"noise_variance": likelihood.noise_variance}
        names = getattr(likelihood, "param_names", ())
        return dict(zip(names, (float(v) for v in np.exp(likelihood.log_params))))

    def _fitted_likelihood(self):
        """The likelihood of the fitted model (for predictions)."""
        kernel = compile_kernel(self.kernel_, white_as_noise=True)
        likelihood, _ = self._make_likelihood(kernel)
        if isinstance(likelihood, GaussianLikelihood):
            likelihood.noise_variance = self.noise_variance_
        elif likelihood.n_params:
            likelihood.set_log_params(np.array(self._likelihood_log_params))
        return likelihood

    # --- fitting --------------------------------------------------------------------
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, sample_weight=None):
        """Fit the sparse GP to training data.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), or a Dask array
            A Dask array is streamed chunk by chunk and never held in memory whole
            (see the scaling guide).
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            Targets; several columns share the kernel and the inducing inputs, each with
            its own variational mean (Gaussian likelihood only), or are mixtures of
            latent GPs (``n_latent``); NaN marks a missing entry with
            ``missing_targets="mask"``. Non-negative integer
            counts for ``likelihood="poisson"``.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weight of each row: its expected log-likelihood counts that many
            times in the ELBO, so an integer weight fits the model of the row repeated
            that many times and a zero weight the model without the row. None: all ones.

        Returns
        -------
        self : SparseGPRegressor
        """
        return self._fit(X, y, sample_weight)

    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X, y, sample_weight=None, n_data=None):
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
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weight of each row (see :meth:`fit`).
        n_data : int, optional
            N, the number of training rows that scales the data term of the ELBO (a
            minibatch of B rows counts N / B times). By default the number of rows seen
            so far (``n_rows_seen_``, this call's included): right for a stream of new
            rows. When the calls pass over one data set several times, give its size.

        Returns
        -------
        self : SparseGPRegressor
        """
        return self._partial_fit(X, y, sample_weight, n_data)

    # --- prediction -----------------------------------------------------------------
    @property
    def _y_train_mean(self):
        return self._target_scaling.mean

    @property
    def _y_train_std(self):
        return self._target_scaling.std

    def _to_output_shape(self, a):
        """(n, P) -> (n,) for a single target, as GaussianProcessRegressor does."""
        return a[:, 0] if a.shape[1] == 1 else a

    @outputs_follow_input
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

    @outputs_follow_input
    def predict(self, X, return_std=False, return_cov=False):
        """Predictive distribution of y at X (observation noise included); before ``fit``,
        the prior's, as GaussianProcessRegressor's (Gaussian likelihood).

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
            Mean of y under the predictive distribution (for ``"poisson"``, the expected
            count).
        y_std : ndarray of shape (n_samples,) or (n_samples, n_targets), optional
            Its standard deviation (for ``"student_t"``, infinite while the fitted
            degrees of freedom are at most 2).
        y_cov : ndarray of shape (n_samples, n_samples) or (n_samples, n_samples, n_targets), optional
        """
        if return_std and return_cov:
            raise RuntimeError("At most one of return_std or return_cov can be requested.")
        if not hasattr(self, "kernel_") and not is_dask_collection(X):
            return self._prior_predictive(X, return_std, return_cov)
        check_is_fitted(self, "kernel_")
        if is_dask_collection(X):
            if return_cov:
                raise ValueError("return_cov=True is not available for a Dask array (it is n x n); use return_std")
            from ._dask import map_rows

            return map_rows(lambda rows: self.predict(rows, return_std=return_std), X)
        if return_cov:
            return self._joint_predictive(X)
        likelihood = self._fitted_likelihood()
        scale = self._y_train_std
        mean, var = self._latent(X)
        y_mean, y_var = likelihood.predictive(mean, np.broadcast_to(var, mean.shape))
        y_mean_out = self._to_output_shape(y_mean * scale + self._y_train_mean)
        if not return_std:
            return y_mean_out
        return y_mean_out, self._to_output_shape(np.ascontiguousarray(np.sqrt(y_var) * scale))

    def _prior_predictive(self, X, return_std, return_cov):
        """``predict`` before ``fit``: the prior of y at X, as GaussianProcessRegressor's.

        The prior mean is zero and the covariance ``kernel(X)`` plus the observation noise
        (``noise_variance``, unless a top-level WhiteKernel in ``kernel`` carries it), on
        the normalised scale, for each of ``n_targets`` outputs. With ``kernel=None`` the
        kernel is the default family at its start before any data: amplitude 1, every
        length scale 1.
        """
        if self.likelihood != "gaussian":
            raise NotFittedError(
                f"This {type(self).__name__} instance is not fitted yet; its prior predictions "
                f"exist for likelihood='gaussian' only (not {self.likelihood!r}). Call 'fit' first.")
        X = check_array(X, dtype=np.float64)
        kernel = self.kernel
        if kernel is None:
            kernel = default_kernel(X.shape[1], form=KernelForm(matern_nu=DEFAULT_MATERN_NU))
        # sklearn kernels put a WhiteKernel's level on the diagonal of kernel(X); any
        # other kernel leaves the noise to noise_variance.
        carried = NoiseParameter(compile_kernel(kernel, white_as_noise=True), self.noise_variance, None).from_kernel
        noise = 0.0 if carried else self.noise_variance
        n_targets = 1 if self.n_targets is None else self.n_targets
        mean = np.zeros((X.shape[0], n_targets))
        if return_cov:
            cov = kernel(X) + noise * np.eye(X.shape[0])
            return self._to_output_shape(mean), cov if n_targets == 1 else np.repeat(cov[:, :, None], n_targets, -1)
        if not return_std:
            return self._to_output_shape(mean)
        std = np.sqrt(kernel.diag(X) + noise)
        return self._to_output_shape(mean), self._to_output_shape(np.repeat(std[:, None], n_targets, 1))

    def _joint_predictive(self, X):
        """Mean and joint covariance of y at X, as numpy arrays (``predict(return_cov=True)``)."""
        mean, cov = self._latent(X, full_cov=True)
        likelihood = self._fitted_likelihood()
        scale = self._y_train_std
        # Each output (column of the mean) gets the predictive covariance of its own
        # latent column, on its own scale: (n, n, P).
        # Each output's own noise where the outputs have their own (OutputGaussianLikelihood).
        per_output = isinstance(likelihood, OutputGaussianLikelihood)
        parts = [likelihood.predictive_covariance(mean[:, p], cov[min(p, cov.shape[0] - 1)],
                                                  **({"output": p} if per_output else {}))
                 for p in range(mean.shape[1])]
        y_mean = np.column_stack([m for m, _ in parts]) * scale + self._y_train_mean
        y_cov = np.stack([c for _, c in parts], axis=-1) * scale**2
        y_cov = y_cov[:, :, 0] if y_cov.shape[2] == 1 else y_cov
        return self._to_output_shape(y_mean), np.ascontiguousarray(y_cov)

    @outputs_follow_input
    def log_predictive_density(self, X, y):
        """Log density (for ``"poisson"``, log probability) of y under the predictive
        distribution at X, row by row: the negative of the test NLPD's terms.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            Targets on the original scale.

        Returns
        -------
        ndarray of shape (n_samples,) or (n_samples, n_targets)
            In nats, on the scale of y (the normalisation's Jacobian included).
        """
        likelihood = self._fitted_likelihood()
        mean, var = self._latent(X)
        Y = self._scale_targets(np.asarray(backend.to_numpy(y), dtype=np.float64))
        if Y.shape[0] != mean.shape[0]:
            raise ValueError(f"X has {mean.shape[0]} rows but y has {Y.shape[0]}")
        density = likelihood.log_predictive_density(Y, mean, np.broadcast_to(var, mean.shape))
        return self._to_output_shape(density - np.log(self._y_train_std))

    @outputs_follow_input
    def sample_y(self, X, n_samples=1, random_state=0):
        """Draw samples of y from the joint predictive distribution at X.

        Under the Gaussian likelihood the draws are from the joint Gaussian of
        :meth:`predict` (``return_cov=True``), as in GaussianProcessRegressor (before
        ``fit``: from the prior, ``n_targets`` outputs); under the others, the latent
        function is drawn from its joint posterior and y from the likelihood given it.

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
        if isinstance(getattr(self, "predictor_", None), MixedPredictor):
            return self._sample_mixed(X, n_samples, rng)
        if self.likelihood == "gaussian":
            fitted = hasattr(self, "kernel_")
            mean, cov = self._joint_predictive(X) if fitted else self._prior_predictive(X, False, True)
            if mean.ndim == 1:
                return rng.multivariate_normal(mean, cov, n_samples).T
            draws = [rng.multivariate_normal(mean[:, p], cov[..., p], n_samples).T[:, np.newaxis] for p in range(mean.shape[1])]
            return np.hstack(draws)
        mean, cov = self._latent(X, full_cov=True)
        f = rng.multivariate_normal(mean[:, 0], cov[0], n_samples).T
        y = self._fitted_likelihood().sample(f, rng)
        return y * self._y_train_std[0] + self._y_train_mean[0]

    def _sample_mixed(self, X, n_samples, rng):
        """``sample_y`` of a multi-output model: the outputs' latent values drawn jointly
        over the rows and the outputs (correlated across outputs as the model says), plus
        each output's noise; (n, P, n_samples)."""
        X = validate_data(self, X, reset=False, dtype=np.float64)
        mean, cov = self.predictor_.joint_output_covariance(X)
        draws = rng.multivariate_normal(mean.reshape(-1), cov, n_samples)          # (s, n P), index n P + p
        outputs = np.transpose(draws.reshape(n_samples, X.shape[0], -1), (1, 2, 0))
        noise = np.sqrt(self.noise_variance_)[None, :, None] * rng.standard_normal(outputs.shape)
        return (outputs + noise) * self._y_train_std[None, :, None] + self._y_train_mean[None, :, None]

    def predict_output_covariance(self, X):
        """The P x P covariance of the outputs' predictive distribution at each row of X.

        Under ``n_latent`` the outputs share latent GPs, so at one input they are
        correlated: ``W Sigma_g(x) W^T`` plus each output's noise on the diagonal, with
        Sigma_g the latents' covariance at x (diagonal for a mean-field q, the multi-output
        paper's eq. 53; full for the joint q a coupled-basis fit ends with). Independent
        outputs give a diagonal matrix. Its diagonal is the square of
        ``predict(X, return_std=True)[1]``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples, n_targets, n_targets)
            On the scale of y.
        """
        check_is_fitted(self, "kernel_")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        scale = self._y_train_std
        if isinstance(self.predictor_, MixedPredictor):
            cov = self.predictor_.output_covariances(X)
        else:
            _, var = self._latent(X)
            cov = np.einsum("np,pq->npq", np.broadcast_to(var, (X.shape[0], scale.shape[0])), np.eye(scale.shape[0]))
        noise = np.broadcast_to(np.asarray(self.noise_variance_, dtype=np.float64), scale.shape)
        cov = cov + np.diag(noise)[None]
        return cov * scale[None, :, None] * scale[None, None, :]

    def score(self, X, y, sample_weight=None):
        """The coefficient of determination of the predictions, as RegressorMixin's; with
        ``missing_targets="mask"`` over each column's observed entries (NaN skipped).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        float
        """
        if self.missing_targets != "mask":
            return super().score(X, y, sample_weight)
        return observed_r2(backend.to_numpy(y), backend.to_numpy(self.predict(X)), sample_weight)

    def _bound_targets(self, y):
        """y as the likelihood takes it: columns on the scale of the fit."""
        return self._scale_targets(np.asarray(y, dtype=np.float64))
