"""SparseGPClassifier: the scikit-learn face of sparse variational GP classification."""

import numpy as np
from sklearn.base import ClassifierMixin, _fit_context
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from ..likelihoods import BernoulliLikelihood, RobustMaxLikelihood, SoftmaxLikelihood
from ._base import SparseGPBase
from ._docs import fill_docstring
from ..fit.placement import is_dask_collection
from ._common import COMMON_CONSTRAINTS, KernelForm, outputs_follow_input

#: Likelihoods with one latent function (two classes only), by link name.
BINARY_LIKELIHOODS = ("probit", "logit")
#: Likelihoods with one latent function per class (any number of classes >= 2).
MULTICLASS_LIKELIHOODS = ("robustmax", "softmax")
#: How the K latent functions of a multi-class likelihood hold q(u)'s covariance.
CLASS_COVARIANCES = ("shared", "per_class")
#: From this many features on, the default kernel of two classes learns one length scale
#: shared by every feature's spread (``FeatureScaledRBF``) rather than one per feature:
#: on wide data a lower log-loss in less time; on narrower data, and where a few of many
#: features carry the label, per-feature scales find the features that matter. Many
#: classes keep a length scale per feature (docs/constants.md).
SHARED_LENGTH_SCALE_FEATURES = 20


def resolve_likelihood(name, n_classes):
    """The likelihood name that ``likelihood=name`` means for ``n_classes`` classes."""
    if name == "auto":
        return "probit" if n_classes == 2 else "robustmax"
    if name in BINARY_LIKELIHOODS and n_classes != 2:
        raise ValueError(
            f"likelihood={name!r} is for two classes but y has {n_classes}; use 'robustmax' "
            "or 'softmax' (or 'auto') for more"
        )
    return name


def make_likelihood(name, n_classes):
    """The likelihood object of a resolved name."""
    if name in BINARY_LIKELIHOODS:
        return BernoulliLikelihood(name)
    if name == "robustmax":
        return RobustMaxLikelihood(n_classes)
    return SoftmaxLikelihood(n_classes)


@fill_docstring
class SparseGPClassifier(ClassifierMixin, SparseGPBase):
    """Sparse variational Gaussian process classification, fitted by minibatch natural gradients.

    Two classes are modelled by one latent GP through a Bernoulli likelihood (probit or
    logit link); K > 2 classes by K latent GPs that share the kernel and the inducing
    inputs, each with its own mean of q(u) and by default one shared covariance
    (``class_covariance``), through a RobustMax or softmax likelihood.
    The q(u) are moved by natural-gradient steps, the kernel hyperparameters and the
    inducing inputs by Adam. Cost per step is O(B M^2 + M^3 + B M K) for a batch of B rows
    and M inducing points (O(K (B M^2 + M^3)) with ``class_covariance="per_class"``).

    Most fits need only ``kernel``, ``n_inducing``, ``random_state`` and ``max_iter`` /
    ``tol``; the user guide ("Choosing the settings") says when to change the others.

    Parameters
    ----------
    kernel : kernel instance from :mod:`sklearn.gaussian_process.kernels`, default=None
        Prior covariance of the latent functions. None means ``ConstantKernel(1.0) *
        RBF(length_scale=s)`` with learnable amplitude and one length scale per feature,
        starting at each feature's standard deviation ``s`` (1 for a constant feature)
        and bounded to ``[1e-5 s, 1e5 s]``; for two classes plus a learned constant,
        ``+ ConstantKernel(1.0)``, the prior variance of the latent function's offset, and
        from 20 features on one length scale shared by all of them,
        ``FeatureScaledRBF(1.0, feature_scale=s)`` in place of the RBF (length scales
        ``l * s`` for one learned ``l`` in ``[1e-5, 1e5]``; see
        :class:`skgp_sparse.kernels.FeatureScaledRBF`).
        Hyperparameters with ``"fixed"`` bounds stay fixed and the others stay within
        their bounds. A ``WhiteKernel`` added at the top level is white noise of the
        latent functions (as in GaussianProcessClassifier): its level adds to their
        variance in training and prediction.
    likelihood : {"auto", "probit", "logit", "robustmax", "softmax"}, default="auto"
        Observation model. ``"probit"`` and ``"logit"``: Bernoulli with that link, two
        classes only, expectations by Gauss-Hermite quadrature. ``"robustmax"``: the
        argmax of the K latents is the label up to a small error rate (GPflow's RobustMax),
        a deterministic one-dimensional quadrature. ``"softmax"``: expectations on fixed
        Monte Carlo draws, so the ELBO is still a deterministic function. ``"auto"`` is
        ``"probit"`` for two classes and ``"robustmax"`` for more.
    basis : {"coupled", "orth_decoupled", "solve", "inverse_free"}, default="coupled"
        Variational family. ``"coupled"`` is SVGP (Hensman et al. 2015 for
        classification). ``"orth_decoupled"`` (Salimbeni et al. 2018) adds ``n_orthogonal`` mean-only
        inducing inputs orthogonal to the span of the ``n_inducing`` ones (see
        docs/bases/orth_decoupled.md). ``"solve"`` is SOLVE-GP (Shi et al. 2020):
        ``n_inducing`` points Z plus ``n_orthogonal`` points O of the residual process,
        each block with its own natural steps (see docs/bases/solve.md).
        ``"inverse_free"`` is the improved inverse-free bound (van der Wilk et al.):
        matrix products only, no decomposition of a kernel matrix in a training step;
        ``diagnostics_`` records ||(K + Sigma) T - I||_F per epoch (see
        docs/bases/inverse_free.md).
    class_covariance : {"shared", "per_class"}, default="shared"
        Covariance of q(u) under a likelihood of one latent function per class (``"robustmax"``,
        ``"softmax"``); it plays no part with one latent function (``"probit"``, ``"logit"``).
        ``"shared"``: one M x M covariance for all K latents, each with its own mean, so that a
        step costs about what one latent's does (O(B M^2 + M^3), plus O(B M K) for the
        means). ``"per_class"``: one covariance per latent, K times that cost, and each class
        its own predictive variance. A warm start keeps the covariances of the fit it
        continues.
    %(n_inducing)s
    %(n_orthogonal)s
    %(kl_columns)s
    batch_size : int, "auto" or None, default=1024
        Rows per training step; None (or a value at least the number of samples) means
        full batch; "auto" means batches of 1,024 (the regressor's "auto" takes up to 2,048 rows
        as one batch only where that batch is a search of the collapsed bound).
    %(max_iter)s
    %(tol)s
    n_iter_no_change : int, default=5
        Periods in each of the two windows the stopping rule compares.
    natural_step_size : float in (0, 1], default=0.1
        Step size of the natural-gradient update of q(u). These likelihoods are not
        conjugate, so no step lands on the optimum and a large step can leave the
        positive definite cone: the step grows linearly to this value over the first 50
        steps, a step whose precision is not positive definite is retried at half the
        size, and an epoch whose mean ELBO per row falls by more than 0.01 nats halves
        all later steps.
    learning_rate : float, default=0.02
        Adam step size for the log-hyperparameters and the inducing inputs.
    %(variational_optimizer)s
    %(learn_inducing)s
    %(inducing_init)s
    %(inducing_features)s
    %(optimizer)s
    %(n_restarts_optimizer)s
    %(jitter)s
    %(backend)s
    %(dtype)s
    %(random_state)s
    %(verbose)s
    warm_start : bool, default=False
        Continue from the previous fit's inducing inputs, q(u) and kernel (the classes
        must be the same).
    %(copy_X_train)s

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The sorted distinct labels; ``predict`` returns values from it.
    likelihood_ : str
        The likelihood used (``"auto"`` resolved).
    %(kernel_)s
    %(inducing_points_)s
    %(inducing_features_)s
    %(orthogonal_points_)s
    %(n_iter_)s
    %(n_steps_)s
    %(n_rows_seen_)s
    %(loss_curve_)s
    %(converged_)s
    %(log_marginal_likelihood_value_)s
    %(jitter_)s
    n_natural_backoffs_ : int
        Halvings of the natural step: after a precision that was not positive definite,
        or after an epoch whose ELBO fell.
    %(X_train_)s
    %(y_train_)s
    %(diagnostics_)s
    %(predictor_)s
    %(variational_state_)s
    %(n_features_in_)s
    %(feature_names_in_)s

    Examples
    --------
    >>> from sklearn.datasets import make_moons
    >>> from skgp_sparse import SparseGPClassifier
    >>> X, y = make_moons(400, noise=0.2, random_state=0)
    >>> clf = SparseGPClassifier(n_inducing=30, random_state=0).fit(X, y)
    >>> proba = clf.predict_proba(X[:3])
    """

    _parameter_constraints = {
        **COMMON_CONSTRAINTS,
        "likelihood": [StrOptions({"auto", *BINARY_LIKELIHOODS, *MULTICLASS_LIKELIHOODS})],
        "class_covariance": [StrOptions(set(CLASS_COVARIANCES))],
    }

    def __init__(
        self,
        kernel=None,
        *,
        likelihood="auto",
        basis="coupled",
        class_covariance="shared",
        n_inducing=256,
        n_orthogonal=0,
        kl_columns="auto",
        batch_size=1024,
        max_iter=100,
        tol=1e-3,
        n_iter_no_change=5,
        natural_step_size=0.1,
        learning_rate=0.02,
        variational_optimizer="natural",
        learn_inducing=True,
        inducing_init="kmeans",
        inducing_features="points",
        optimizer="fmin_l_bfgs_b",
        n_restarts_optimizer=0,
        jitter="auto",
        backend="numpy",
        dtype="float64",
        random_state=None,
        verbose=0,
        warm_start=False,
        copy_X_train=True,
    ):
        self.kernel = kernel
        self.likelihood = likelihood
        self.basis = basis
        self.class_covariance = class_covariance
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
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.jitter = jitter
        self.backend = backend
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose
        self.warm_start = warm_start
        self.copy_X_train = copy_X_train

    # --- what the shared core asks of the classifier ---------------------------------
    def _n_latents(self):
        return 1 if self.likelihood_ in BINARY_LIKELIHOODS else len(self.classes_)

    def _latent_shape(self):
        # The variance adjoint differs between the latents, so a covariance per latent is the
        # richer family; one shared covariance is the cheaper one (one latent's work per step
        # for the covariance, whatever K), and was as accurate or more on most sets
        # (docs/constants.md).
        n_latents = self._n_latents()
        return n_latents, (1 if self.class_covariance == "shared" else n_latents)

    def _default_kernel_form(self, n_features):
        # One latent function's offset is the log-odds away from the data's length scales:
        # a learned constant carries it for two classes; K latents of a robust-max
        # likelihood lost accuracy with it (docs/constants.md).
        binary = self._n_latents() == 1
        return KernelForm(bias=binary, shared_length_scale=binary and n_features >= SHARED_LENGTH_SCALE_FEATURES)

    def _make_likelihood(self, kernel):
        return make_likelihood(self.likelihood_, len(self.classes_)), None

    def _known_noise(self, n_rows):
        return None

    def _inducing_strata(self, Y):
        # With one latent function per class each class needs points among its own rows;
        # k-means over all rows can leave a class few (docs/constants.md). Two classes share
        # one latent function, whose points k-means over all rows already places.
        return Y[:, 0] if self._n_latents() > 1 else None

    def _record_targets(self, model):
        """Nothing beyond what every estimator records."""

    def _encode(self, y):
        """Labels -> class indices as the (n, 1) float target the likelihoods take."""
        idx = np.searchsorted(self.classes_, y)
        idx = np.minimum(idx, len(self.classes_) - 1)
        unseen = self.classes_[idx] != y
        if np.any(unseen):
            raise ValueError(
                f"y contains labels not seen in fit: {np.unique(y[unseen])[:5].tolist()}; the classes are "
                f"{self.classes_.tolist()} (for partial_fit, pass every class in `classes` on the first call)"
            )
        return idx.astype(np.float64).reshape(-1, 1)

    def _check_classes(self, classes):
        if classes.shape[0] < 2:
            raise ValueError(
                f"{type(self).__name__} needs samples of at least 2 classes in the data, but "
                f"the data contain only one class: {classes[0]!r}"
            )

    @staticmethod
    def _check_label_types(labels, name="y"):
        """Refuse labels of mixed types (numbers and strings), which neither sort nor have a
        type scikit-learn recognises, naming the types."""
        labels = np.asarray(labels)
        if labels.dtype == object:
            kinds = sorted({type(v).__name__ for v in labels.ravel()})
            if len(kinds) > 1:
                raise ValueError(f"{name} mixes labels of types {kinds}; give every label one type "
                                 f"(for example {name}.astype(str))")

    def _fit_targets(self, y, sample_weight, warm):
        self._check_label_types(y)
        check_classification_targets(y)
        present = y if sample_weight is None else y[sample_weight > 0]
        classes = np.unique(present)
        self._check_classes(classes)
        if warm and not np.array_equal(classes, self.classes_):
            raise ValueError(
                f"warm_start needs the same classes as the previous fit ({self.classes_.tolist()}); "
                f"got {classes.tolist()}"
            )
        self.classes_ = classes
        self.likelihood_ = resolve_likelihood(self.likelihood, len(classes))
        return self._encode(y) if sample_weight is None else self._encode_weighted(y, sample_weight)

    def _encode_weighted(self, y, sample_weight):
        """Class indices, with rows of zero weight (whose label may be absent) coded 0."""
        codes = np.zeros((y.shape[0], 1))
        codes[sample_weight > 0] = self._encode(y[sample_weight > 0])
        return codes

    def _stream_targets(self, y, sample_weight, first, classes):
        if first and classes is None:
            raise ValueError("classes must be passed on the first call to partial_fit")
        if classes is not None:
            self._check_label_types(classes, "classes")
            classes = np.unique(np.asarray(classes))
            if not first and not np.array_equal(classes, self.classes_):
                raise ValueError(
                    f"classes={classes.tolist()} differs from the classes of the first call "
                    f"({self.classes_.tolist()})"
                )
            self._check_classes(classes)
        self._check_label_types(y)
        check_classification_targets(y)
        if first:
            self.classes_ = classes
            self.likelihood_ = resolve_likelihood(self.likelihood, len(classes))
        return self._encode(y)

    # --- fitting --------------------------------------------------------------------
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, sample_weight=None):
        """Fit the sparse GP classifier to training data.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), or a Dask array
        y : array-like of shape (n_samples,)
            Class labels of any type that ``np.unique`` sorts (strings included).
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weight of each row: its expected log-likelihood counts that many
            times in the ELBO, so an integer weight fits the model of the row repeated
            that many times and a zero weight the model without the row. None: all ones.

        Returns
        -------
        self : SparseGPClassifier
        """
        return self._fit(X, y, sample_weight)

    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X, y, classes=None, sample_weight=None, n_data=None):
        """One pass of minibatch steps over (X, y), continuing the current fit.

        The first call (on an unfitted estimator) takes every class in ``classes`` and
        initialises the model from these rows (inducing inputs, feature spreads). Later
        calls (or calls after :meth:`fit`) continue the same optimisation: q(u), kernel
        and inducing inputs, the natural-step schedule and Adam's moments carry on.
        ``max_iter``, ``tol`` and ``warm_start`` play no part. The falling-ELBO back-off
        of :meth:`fit` is off (successive calls see different rows); a step whose
        precision is not positive definite is still retried at half the size.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), or a Dask array
        y : array-like of shape (n_samples,)
            Labels, all of them among ``classes``.
        classes : array-like of shape (n_classes,), optional
            Every label the stream will contain; required on the first call, and if
            given later it must be the same.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weight of each row (see :meth:`fit`).
        n_data : int, optional
            N, the number of training rows that scales the data term of the ELBO (a
            minibatch of B rows counts N / B times). By default the number of rows seen
            so far (``n_rows_seen_``, this call's included): right for a stream of new
            rows. When the calls pass over one data set several times, give its size.

        Returns
        -------
        self : SparseGPClassifier
        """
        return self._partial_fit(X, y, sample_weight, n_data, classes=classes)

    # --- prediction -----------------------------------------------------------------
    def _map_dask(self, method, X):
        """``method`` over the row chunks of a Dask array X: Dask arrays, computed lazily."""
        check_is_fitted(self, "kernel_")
        from ._dask import map_rows

        return map_rows(method, X)

    def _latent_per_class(self, X):
        """Latent mean (n, L) and variance (n, L) of the fitted model, white noise included."""
        mean, var = self._latent(X)
        return mean, np.ascontiguousarray(np.broadcast_to(var, mean.shape))

    @outputs_follow_input
    def latent_mean_and_variance(self, X):
        """Mean and variance of the latent functions f at X.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        mean : ndarray of shape (n_samples,) for two classes with a probit or logit link, else (n_samples, n_classes)
        var : ndarray of the same shape as ``mean``
        """
        if is_dask_collection(X):
            return self._map_dask(self.latent_mean_and_variance, X)
        mean, var = self._latent_per_class(X)
        if mean.shape[1] == 1:
            return mean[:, 0], var[:, 0]
        return mean, var

    @outputs_follow_input
    def predict_proba(self, X):
        """Predictive class probabilities, the likelihood averaged over q(f).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
            Columns in the order of ``classes_``; rows sum to one.
        """
        if is_dask_collection(X):
            return self._map_dask(self.predict_proba, X)
        return self._proba(X)

    def _proba(self, X):
        mean, var = self._latent_per_class(X)
        likelihood = make_likelihood(self.likelihood_, len(self.classes_))
        proba = likelihood.predict_proba(mean, var)
        if proba.shape[1] == 1:
            # The Bernoulli likelihood gives p(y = classes_[1]).
            proba = np.hstack([1.0 - proba, proba])
        return proba

    @outputs_follow_input
    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba`.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
        """
        if is_dask_collection(X):
            return self._map_dask(self.predict_log_proba, X)
        with np.errstate(divide="ignore"):
            return np.log(self._proba(X))

    @outputs_follow_input
    def predict(self, X):
        """The most probable class under :meth:`predict_proba`.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples,)
            Labels from ``classes_``.
        """
        if is_dask_collection(X):
            return self._map_dask(self.predict, X)
        proba = self._proba(X)
        return self.classes_[np.argmax(proba, axis=1)]

    def _bound_targets(self, y):
        """Labels as the likelihood takes them: class indices."""
        return self._encode(np.asarray(y).reshape(-1))
