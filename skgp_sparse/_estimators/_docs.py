"""The parameter and attribute paragraphs that both estimators' docstrings share.

Each estimator's docstring names them with ``%(name)s`` markers; :func:`fill_docstring`
puts the text in, so that a shared setting is described once.
"""

#: name -> numpydoc paragraph (its first line without the section's indentation).
SHARED_DOCS = {
    "n_inducing": """n_inducing : int, default=256
        Number of inducing inputs, clipped to the number of distinct training rows: the
        default silently (on fewer than 256 rows every row is an inducing input), a value
        you set with a warning when it exceeds the number of samples.""",
    "n_orthogonal": """n_orthogonal : int, default=0
        Size of the extra orthogonal set of the ``"orth_decoupled"`` and ``"solve"``
        bases; must be 0 for the others.""",
    "kl_columns": """kl_columns : "auto", int or None, default="auto"
        The ``"orth_decoupled"`` basis's KL term of its ``n_orthogonal`` mean-only points:
        None computes it exactly (O(n_orthogonal^2) kernel entries a step), an int c
        estimates it without bias from c sampled columns (Salimbeni et al. 2018), "auto"
        is exact up to 256 points and samples max(64, n_orthogonal / 16) columns above
        (see docs/bases/orth_decoupled.md). The columns are drawn from
        ``random_state``. Other bases ignore it.""",
    "max_iter": """max_iter : int, default=100
        Maximum number of epochs (passes over the data) of a minibatch fit, and of
        L-BFGS-B iterations of a full-batch search of the collapsed bound. A fit that
        reaches it has ``converged_`` False and says so in a ConvergenceWarning.""",
    "tol": """tol : float, default=1e-3
        Minibatch fits stop when the mean ELBO per row of the last ``n_iter_no_change``
        periods of 50 steps (one epoch if shorter) is above that of the periods before
        them by less than ``tol`` nats per epoch, an epoch counting at most 100 steps, and
        no hyperparameter's minibatch gradient pulls it one way (more than 4 standard
        errors from zero and steeper than ``tol`` nats per row per unit of its log) (see
        the user guide, "How the fit moves"). Full-batch searches of the collapsed bound
        (and the exact search that starts a minibatch fit) stop when 20 L-BFGS-B
        iterations raise the bound by less than ``tol`` nats per row.""",
    "variational_optimizer": """variational_optimizer : {"natural", "adam"}, default="natural"
        How q(u) is moved: by natural-gradient steps (see ``natural_step_size``), or by
        Adam at ``learning_rate`` together with the other parameters, as the papers' own
        training code does (slower to converge; offered for comparison).""",
    "learn_inducing": """learn_inducing : bool, default=True
        Whether Adam moves the inducing inputs.""",
    "inducing_init": """inducing_init : {"kmeans", "greedy_variance", "random"} or array of shape (n_inducing + n_orthogonal, n_features), default="kmeans"
        Initial inducing inputs: k-means centres, greedy maximum-variance rows (a partial
        pivoted Cholesky under the initial kernel), random distinct rows, or given points
        (with ``n_inducing`` at its default, the array's rows set it; a value you set must
        match them). A classifier of more than two classes runs k-means within each class:
        one point per class, the rest in proportion to the classes' sizes.""",
    "inducing_features": """inducing_features : {"points", "multiscale"} or feature object, default="points"
        What each inducing variable is (:mod:`skgp_sparse.features`): the latent
        function's value at an inducing input ("points"), or its average under a Gaussian
        window with a learned centre and learned widths ("multiscale", an RBF kernel; see
        :class:`~skgp_sparse.features.Multiscale`, whose object also sets the windows'
        starting width). ``n_inducing`` counts the inducing variables either way, and
        ``inducing_init`` places the windows' centres.""",
    "optimizer": """optimizer : "fmin_l_bfgs_b", callable or None, default="fmin_l_bfgs_b"
        The optimiser of the exact search of the hyperparameters that starts every fresh
        fit (the bound with q(u) optimal for each hyperparameter, on at most 2,048 random
        rows; not the minibatch fit of more than two classes, whose stream starts from
        the kernel as given, since the search did not pay there) and, under a Gaussian
        likelihood with one batch, of the search of the collapsed bound over all rows. It
        has the meaning it has in
        GaussianProcessRegressor: a callable is called as ``optimizer(obj_func,
        initial_theta, bounds)`` and returns ``(theta_opt, func_min)``, where
        ``obj_func(theta, eval_gradient=True)`` gives the negative bound and its gradient
        and theta packs the log-hyperparameters of the kernel and the likelihood (the log
        noise) and, in a full-batch search, the learned inducing inputs (divided by each
        feature's spread). None keeps the kernel and likelihood hyperparameters at their
        initial values, in minibatch fits too.""",
    "n_restarts_optimizer": """n_restarts_optimizer : int, default=0
        Further runs of that search from starts drawn uniformly within the (log-space)
        bounds; the best bound wins.""",
    "jitter": """jitter : "auto" or float, default="auto"
        Jitter added to the diagonal of K(Z, Z) before its Cholesky factorisation.
        ``"auto"``: 1e-6 of its mean diagonal, and (regression) no more than 1e-6 of the
        noise variance, so that it does not bias the bound. A float: the relative
        jitter, ``jitter * mean(diag(K_zz))``. A factorisation that fails is retried with
        ten times more (recorded in ``jitter_`` and reported by a ``JitterWarning``).""",
    "backend": """backend : {"numpy", "cupy", "torch"}, default="numpy"
        Array library of the fit. ``"numpy"``: the CPU path (numba and BLAS), or, with
        scikit-learn's ``array_api_dispatch`` on, the library and device of X when X is
        an array of another library (CuPy, PyTorch, ...). ``"cupy"``: numpy input is
        moved to CuPy's current GPU for the fit; ``"torch"``: to PyTorch's current CUDA
        device. Either fails at once, naming what is missing, without the library or a
        GPU. The training rows, minibatches and q(u) stay on the device for the whole
        fit; the fitted model holds numpy arrays, so it pickles and predicts anywhere.""",
    "dtype": """dtype : {"float64", "float32"} or numpy type, default="float64"
        Floating dtype of the training steps, on every backend (``np.float32`` and
        ``np.float64`` are taken for their names). ``"float32"`` halves the
        memory of the rows and of q(u) and runs the BLAS at its float32 rate (on the
        CPU, steps at M = 1024 take about 0.56 of the float64 time). The factorisation
        of K(Z, Z) starts from a relative jitter of at least float32's epsilon and falls
        back to float64 where float32 fails; the likelihood terms are computed in
        float64 on numpy. The fitted model is float64 either way. Dask input is
        converted chunk by chunk.""",
    "copy_X_train": """copy_X_train : bool, default=True
        As in GaussianProcessRegressor: where ``fit`` keeps the training rows (``X_train_``,
        ``y_train_``), keep a copy of them (True) or a reference (False, which sees later
        changes to the arrays).""",
    "X_train_": """X_train_ : ndarray of shape (n_samples, n_features)
        The training inputs, kept by ``fit`` on in-memory data of at most 5,000 rows (a
        GaussianProcessRegressor-sized set; in X's library under ``array_api_dispatch``):
        ``log_marginal_likelihood()`` then evaluates the bound on them. Absent otherwise
        (larger or Dask fits, ``partial_fit``), where a model's size does not grow with its
        data.""",
    "y_train_": """y_train_ : ndarray of shape (n_samples,) or (n_samples, n_targets)
        The training targets as given to ``fit``, kept with ``X_train_``.""",
    "random_state": """random_state : int, RandomState instance or None, default=None
        Seeds the inducing initialisation and the minibatch order: the same value gives
        the same model.""",
    "verbose": """verbose : int, default=0
        1: print one line per epoch (its mean ELBO per row and the seconds since the start;
        a full-batch search prints its bound after each L-BFGS-B iteration instead, and the
        exact search that starts a fit one summary line). 2 and more: also a progress line
        every 10 seconds within an epoch (steps done and the ELBO per row so far), and the
        exact search's iterations.""",
    "kernel_": """kernel_ : kernel instance
        Clone of ``kernel`` with the fitted hyperparameters.""",
    "inducing_points_": """inducing_points_ : ndarray of shape (n_inducing, n_features)
        Fitted inducing inputs of the covariance (and, for the coupled basis, the mean).""",
    "inducing_features_": """inducing_features_ : InducingFeatures
        The kind of the inducing variables the fit used (an object of
        :mod:`skgp_sparse.features`); with Multiscale features, ``inducing_points_`` holds
        the windows' centres and ``inducing_widths_`` (n_inducing, n_features) their
        fitted widths.""",
    "orthogonal_points_": """orthogonal_points_ : ndarray of shape (n_orthogonal, n_features)
        Fitted inducing inputs of the orthogonal set (bases with ``n_orthogonal``).""",
    "n_iter_": """n_iter_ : int
        Number of epochs run (one more per ``partial_fit`` call); for a full-batch
        Gaussian fit, L-BFGS-B iterations.""",
    "n_steps_": """n_steps_ : int
        Number of minibatch steps run (including earlier fits continued by ``warm_start``
        or ``partial_fit``).""",
    "n_rows_seen_": """n_rows_seen_ : int
        Rows of the last ``fit``, plus those of the ``partial_fit`` calls since.""",
    "loss_curve_": """loss_curve_ : list of float
        Mean minibatch ELBO estimate of each epoch (nats, full-data scale); for a
        full-batch Gaussian fit, the bound reached by each optimiser run.""",
    "converged_": """converged_ : bool
        Whether the stopping rule (``tol``) ended a minibatch fit before ``max_iter``,
        or (full-batch Gaussian fits) whether L-BFGS-B reported convergence.""",
    "log_marginal_likelihood_value_": """log_marginal_likelihood_value_ : float
        The bound (ELBO) of the fitted model on all its training rows, in nats (on the
        normalised targets when ``normalize_y``); NaN after an interrupted fit or a
        ``partial_fit`` pass.""",
    "jitter_": """jitter_ : float
        Relative jitter that the Cholesky of K(Z, Z) needed (``jitter`` unless retries raised it).""",
    "diagnostics_": """diagnostics_ : list of dict
        Per-epoch diagnostics of bases that offer them (``"inverse_free"``:
        ``t_residual`` = ||(K + Sigma) T - I||_F); empty for the others.""",
    "predictor_": """predictor_ : object
        What predictions read: the fitted q(u) folded with the kernel matrices at the
        inducing inputs into the few arrays a test row is multiplied with (numpy arrays,
        whichever library the fit ran on).""",
    "variational_state_": """variational_state_ : object
        The basis's fitted parameters (plain numpy arrays).""",
    "n_features_in_": """n_features_in_ : int""",
    "feature_names_in_": """feature_names_in_ : ndarray of str
        Only when X has string feature names.""",
}


def fill_docstring(cls):
    """Class decorator: the ``%(name)s`` markers of ``cls.__doc__`` replaced by :data:`SHARED_DOCS`."""
    cls.__doc__ = cls.__doc__ % SHARED_DOCS
    return cls
