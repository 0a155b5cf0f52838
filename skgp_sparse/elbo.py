"""The evidence lower bound of a sparse variational GP, assembled from its three layers.

    ELBO = sum_n E_q[log p(y_n | f(x_n))] - KL(q(u) || p(u))

A :class:`VariationalModel` joins a basis (the variational family), latent groups (each a
compiled kernel and a basis state), an output map (:mod:`skgp_sparse.outputs`: the
identity, or a mixing of several outputs) and a likelihood. On a minibatch of B of the N
rows it returns the unbiased estimate ``(N / B) * sum_batch ELL - KL`` with its gradient in
every parameter Adam moves, plus what the basis needs for its natural step. It also packs
and unpacks those parameters as a dict of arrays, so the optimiser never needs to know what
they mean.
"""

import copy
from dataclasses import dataclass

import numpy as np

from . import backend
from .bases import SEARCH_BASIS, as_basis
from .features import InducingPoints, covariances
from .linalg import pending_flags


class TargetLayout:
    """How the columns of a training target array are laid out.

    The rows of a fit travel through minibatching, Dask chunking and monitoring as one
    array, so whatever belongs to a row travels in it: first the ``n_targets`` target
    columns the likelihood reads, then (``weighted``) the row's sample weight, then
    (``known_noise``) its known noise variance (the regressor's ``alpha``), which a
    Gaussian likelihood adds to the learned noise of that row.
    """

    def __init__(self, n_targets, weighted=False, known_noise=False, mean_weight=1.0):
        self.n_targets = int(n_targets)
        self.weighted = bool(weighted)
        self.known_noise = bool(known_noise)
        #: Mean sample weight of the training rows: a row counts this much on average.
        self.mean_weight = float(mean_weight)

    def join(self, Y, weights=None, known_noise=None):
        """The training array of targets ``Y`` (n, n_targets) and the per-row extras."""
        columns = [Y]
        if self.weighted:
            columns.append(np.reshape(weights, (-1, 1)))
        if self.known_noise:
            columns.append(np.reshape(known_noise, (-1, 1)))
        return np.hstack(columns) if len(columns) > 1 else Y

    def split(self, Y):
        """(targets, weights (n, 1) or None, likelihood keyword arguments) of a training array."""
        if Y.shape[1] == self.n_targets:
            return Y, None, {}
        k = self.n_targets
        weights = Y[:, k : k + 1] if self.weighted else None
        extra = {"extra_noise": Y[:, -1:]} if self.known_noise else {}
        return Y[:, :k], weights, extra


@dataclass
class BatchResult:
    """One minibatch's ELBO estimate and its derivatives (all for maximisation)."""

    elbo: float
    grads: dict
    tape: object
    d_mean: np.ndarray
    d_var: np.ndarray


class VariationalModel:
    """A sparse variational GP with its parameters, evaluated minibatch by minibatch.

    Parameters
    ----------
    basis : Basis, str or module
        The variational family (:class:`skgp_sparse.bases.Basis`), or its name in
        :data:`skgp_sparse.bases.BASES`, or its module (see :func:`skgp_sparse.bases.as_basis`).
    kernel : compiled kernel (:func:`skgp_sparse.kernels.compile_kernel`) or list of them
        One per latent group of ``state``; the same object twice ties those groups'
        hyperparameters.
    likelihood : likelihood object (:mod:`skgp_sparse.likelihoods`)
    state : VariationalState
        The basis's state (one latent group: variational parameters and inducing
        inputs), or a state of several groups and their output map
        (:class:`skgp_sparse.multioutput.MixedState`).
    n_data : int
        Number of training rows N (scales the minibatch data term).
    noise : NoiseParameter, OutputNoise or None
        The Gaussian noise (one per output for several mixed outputs), for a Gaussian
        likelihood.
    learn_inducing : bool
        Whether Adam moves the inducing inputs (``basis.INDUCING_FIELDS``).
    jitter : float
        Relative jitter of the K_zz Cholesky; raised for good when a factorisation fails.
    natural : bool
        Move q(u) by natural steps (True) or by Adam with everything else (False).
    latent_noise : NoiseParameter or None
        White noise of the latent function (top-level WhiteKernel terms of a non-Gaussian
        likelihood, as GaussianProcessClassifier reads them): its variance adds to the
        latent marginal variance of every row.
    learn_hyperparameters : bool
        Whether Adam moves the kernel hyperparameters and the noise (``optimizer=None``
        keeps them fixed).
    features : InducingFeatures or None
        What the inducing variables are (:mod:`skgp_sparse.features`; None: inducing
        points). Its covariances under each kernel are resolved here, once; the basis
        computes with them (``covariances``) wherever it needs K(u, u), K(u, f) or K(f, f).

    Notes
    -----
    Adam's parameters: ``theta`` (every distinct kernel's log-hyperparameters, in group
    order), ``log_noise``, ``likelihood`` (Student-t's), the output map's (``mixing`` and
    ``offset`` of a learned mixing), the inducing sets under their basis names (shared by
    the groups), and any other basis field, as ``name[g]`` where there are several groups.
    """

    def __init__(
        self, basis, kernel, likelihood, state, n_data, noise=None, learn_inducing=True, jitter=1e-6, natural=True,
        latent_noise=None, learn_hyperparameters=True, features=None,
    ):
        basis = as_basis(basis)
        if not natural and not basis.VARIATIONAL_FIELDS:
            raise ValueError(f"the {basis.name} basis has no Adam-only mode")
        self.basis = basis
        #: How the latent groups' marginals become the outputs' (:mod:`skgp_sparse.outputs`).
        self.outputs = state.output_map()
        #: One compiled kernel per latent group (the same object for tied groups).
        self._kernels = list(kernel) if isinstance(kernel, (list, tuple)) else [kernel]
        n_groups = len(self.outputs.groups(state))
        if len(self._kernels) != n_groups:
            raise ValueError(f"{len(self._kernels)} kernels for {n_groups} latent groups")
        self.features = InducingPoints() if features is None else features
        #: The seam's covariances of the features under each group's kernel (for inducing
        #: points, the compiled kernel itself); tied groups share one object.
        self.covariances = _resolved(self.features, self._kernels)
        if not self.features.learnable:
            learn_inducing = False
        self.likelihood = likelihood
        self.state = state
        self.n_data = n_data
        self.noise = noise
        self.latent_noise = latent_noise
        self.learn_hyperparameters = learn_hyperparameters
        self.natural = natural
        self.learn_fields = (
            basis.ADAM_FIELDS
            + (basis.INDUCING_FIELDS if learn_inducing else ())
            + (() if natural else basis.VARIATIONAL_FIELDS)
        )
        self.jitter = jitter
        #: Layout of the target arrays handed to :meth:`evaluate` (targets only unless a
        #: fit sets per-row weights or known noise).
        self.layout = None
        #: The dtype of the device rows a training loop holds the hyperparameters next
        #: to (:meth:`hold_hyperparameters_on`), None while they are on the host.
        self.device_rows_dtype = None
        self._sync_noise()

    @property
    def kernel(self):
        """The first latent group's compiled kernel (the model's only one but for several
        outputs)."""
        return self._kernels[0]

    @property
    def groups(self):
        """The basis state of each latent group."""
        return self.outputs.groups(self.state)

    @property
    def search_memory(self):
        """The number of past steps the quasi-Newton search of the bound keeps (scipy's
        ``maxcor``), as the output map asks."""
        return self.outputs.SEARCH_MEMORY

    @property
    def kernels(self):
        """The compiled kernel of each latent group (one, ``kernel``, but for several-output
        models; the same object for groups whose hyperparameters are tied)."""
        return self._kernels

    def distinct_kernels(self):
        """The kernels with their own hyperparameters, in group order, and each group's
        index among them."""
        distinct, index = [], []
        for kernel in self.kernels:
            for i, seen in enumerate(distinct):
                if seen is kernel:
                    index.append(i)
                    break
            else:
                index.append(len(distinct))
                distinct.append(kernel)
        return distinct, index

    # --- the model of the exact search -------------------------------------------------
    def search_model(self, n_rows, learn_inducing=False):
        """The model of a stage of the exact search that starts a fresh fit.

        A copy of this model's kernel and likelihood (their current parameters) on
        :data:`~skgp_sparse.bases.SEARCH_BASIS`, whatever basis this model trains: there
        the bound with q(u) optimal is the collapsed bound under a Gaussian likelihood. It
        sits at every inducing input of this model (the second set too, stacked after the
        first: 10 + 10 SOLVE points carry the hyperparameters of about 20 points, not 10),
        with q(u) at the prior, its data term counting ``n_rows`` rows, and it moves the
        inducing inputs where ``learn_inducing`` and this model learns them.
        """
        # Copied together, so that a noise carried by the kernel's WhiteKernel stays tied to
        # it, and tied groups stay tied.
        kernels, likelihood, noise, latent_noise = copy.deepcopy((self.kernels, self.likelihood, self.noise,
                                                                  self.latent_noise))
        inducing = self.stacked_inducing()
        groups = []
        for group in self.groups:
            n_outputs, n_covariances = self.basis.latent_shape(group)
            groups.append(SEARCH_BASIS.init_state(inducing, n_outputs=n_outputs, n_covariances=n_covariances))
        state = self.outputs.search_state(self.state, groups)
        search = VariationalModel(
            SEARCH_BASIS, kernels, likelihood, state, n_rows, noise=noise,
            learn_inducing=learn_inducing and self.learns_inducing(), jitter=self.jitter, natural=self.natural,
            latent_noise=latent_noise, learn_hyperparameters=self.learn_hyperparameters, features=self.features,
        )
        search.layout = self.layout
        return search

    def learns_inducing(self):
        """Whether Adam moves the inducing inputs."""
        return any(field in self.learn_fields for field in self.basis.INDUCING_FIELDS)

    def stacked_inducing(self):
        """Every inducing input of the state, its sets stacked, as a float64 host array."""
        sets = [getattr(self.state, name) for name in self.basis.INDUCING_FIELDS]
        return np.concatenate([np.array(backend.to_numpy(z), dtype=np.float64) for z in sets if z is not None])

    @property
    def rows_counted(self):
        """The number of rows the data term counts: N, times the mean sample weight.

        Per-row figures (stopping rule, plateau) divide by it, so that weights and the
        repeated rows they stand for give the same figures."""
        return self.n_data * (1.0 if self.layout is None else self.layout.mean_weight)

    # --- parameters seen by Adam ---------------------------------------------------
    def adam_params(self):
        """The parameters Adam moves, by name (see the class notes), as arrays."""
        params = {}
        if self.learn_hyperparameters:
            distinct = self.distinct_kernels()[0]
            # One kernel's theta may be held on a device (hold_hyperparameters_on).
            params["theta"] = distinct[0].held_theta if len(distinct) == 1 else \
                np.concatenate([kernel.theta for kernel in distinct])
            if self.noise is not None and self.noise.learned:
                params["log_noise"] = self.noise.packed_log_value()
            if self._learns_likelihood():
                params["likelihood"] = self.likelihood.log_params
            params.update(self.outputs.adam_params(self.state))
        groups = self.groups
        for field in self.learn_fields:
            for g, group in enumerate(groups if field not in self.basis.INDUCING_FIELDS else groups[:1]):
                params[self._field_name(field, g)] = getattr(group, field)
        return params

    def _field_name(self, field, g):
        """The name under which Adam sees the field of group ``g``: a shared inducing set's
        own, else with the group's index where there are several groups."""
        shared = field in self.basis.INDUCING_FIELDS or len(self._kernels) == 1
        return field if shared else f"{field}[{g}]"

    def adam_bounds(self):
        # theta packs the distinct kernels' log-hyperparameters in group order.
        distinct = self.distinct_kernels()[0]
        bounds = {"theta": tuple(np.concatenate([kernel.bounds[:, side] for kernel in distinct]) for side in (0, 1))}
        if self.noise is not None and self.noise.learned:
            bounds["log_noise"] = self.noise.log_bounds
        if self._learns_likelihood():
            bounds["likelihood"] = self.likelihood.log_bounds
        return bounds

    def _learns_likelihood(self):
        """Whether Adam moves hyperparameters of the likelihood (Student-t's df and scale)."""
        return self.learn_hyperparameters and getattr(self.likelihood, "n_params", 0) > 0

    def adam_rate_scales(self, step):
        """Multipliers of Adam's learning rate per state field for training step ``step``
        (counted from the model's first step), as the basis's ``adam_field_scales`` gives
        them for each group (None, all ones, by default)."""
        out = {}
        for g, group in enumerate(self.groups):
            for field, value in (self.basis.adam_field_scales(group, step) or {}).items():
                out[self._field_name(field, g)] = value
        return out or None

    def set_adam_params(self, params):
        """Set the parameters Adam moves from ``params`` (:meth:`adam_params`' names), in
        place: the loop's snapshot of a step restores them through this method."""
        if "theta" in params:
            distinct = self.distinct_kernels()[0]
            if len(distinct) == 1:
                distinct[0].set_theta(params["theta"])
            else:
                start = 0
                for kernel in distinct:
                    n = kernel.theta.shape[0]
                    kernel.set_theta(np.asarray(params["theta"][start : start + n], dtype=np.float64))
                    start += n
        if "log_noise" in params:
            self.noise.set_packed_log_value(params["log_noise"])
        if "likelihood" in params:
            self.likelihood.set_log_params(params["likelihood"])
        for g, group in enumerate(self.groups):
            for field in self.learn_fields:
                name = self._field_name(field, g)
                if name in params:
                    setattr(group, field, params[name])
            if not self.natural:
                # Caches derived from q(u) (its precision) are stale once Adam has moved it.
                group.drop_caches()
        self.outputs.set_adam_params(self.state, params)
        self._sync_noise()

    def set_noise_variance(self, value):
        """Set the Gaussian noise variance (a no-op when a WhiteKernel carries it)."""
        if self.noise is not None:
            self.noise.set_variance(value)
            self._sync_noise()

    def _sync_noise(self):
        if self.noise is not None:
            value = self.noise.value
            if backend.on_device(value) and value.dtype != self.device_rows_dtype:
                # In the rows' dtype: a float64 noise would promote float32 rows.
                value = backend.namespace(value).astype(value, self.device_rows_dtype)
            self.likelihood.noise_variance = value

    # --- hyperparameters on a device ------------------------------------------------------
    def can_hold_hyperparameters_on_device(self):
        """Whether a training loop on a device's arrays can move the hyperparameters by Adam
        there (:meth:`hold_hyperparameters_on`): they are learned, the kernel can hold them
        (:attr:`~skgp_sparse.kernels.CompiledKernel.holds_device_values`) and the noise is
        its own log-parameter. Student-t's parameters, latent white noise and the mixing of
        several outputs keep their gradients on the host (one packed read a step)."""
        return (
            self.learn_hyperparameters
            and not self.outputs.mixes
            and self.features.computes_on_device
            and self.kernel.holds_device_values
            and self.latent_noise is None
            and not self._learns_likelihood()
            and (self.noise is None or not self.noise.from_kernel)
        )

    def hold_hyperparameters_on(self, like):
        """Hold the hyperparameters Adam moves on the device of the array ``like`` (float64
        where the device has it), so that a training step reads nothing back: the kernel's
        nodes and the noise then evaluate with device values, Adam's moments live there,
        and :meth:`evaluate` returns their gradients there. Undone by
        :meth:`hold_hyperparameters_on_host`.

        Returns
        -------
        bool
            Whether they moved (see :meth:`can_hold_hyperparameters_on_device`).
        """
        if not (backend.on_device(like) and self.can_hold_hyperparameters_on_device()):
            return False
        self.kernel.set_theta(self.kernel.theta_on(like))
        if self.noise is not None and self.noise.learned:
            xp, device = backend.namespace(like), backend.device_of(like)
            self.noise.log_value = backend.to_namespace(
                np.asarray(self.noise.log_value), xp, device=device, dtype=backend.widest_float(xp, device))
        self.device_rows_dtype = like.dtype
        self._sync_noise()
        return True

    def hold_hyperparameters_on_host(self):
        """Bring the hyperparameters back to the host after :meth:`hold_hyperparameters_on`
        (one read each of theta and the noise)."""
        self.kernel.hold_on_host()
        if self.noise is not None and backend.on_device(self.noise.log_value):
            self.noise.log_value = float(backend.to_numpy(self.noise.log_value))
        self.device_rows_dtype = None
        self._sync_noise()

    # --- evaluation ------------------------------------------------------------------
    def latent_marginals(self, X, need_grad=False):
        """Every latent function's marginal mean and variance at the rows X, (n, L) each
        (latent white noise included), and each group's tape."""
        means, variances, tapes = [], [], []
        for kernel, group in zip(self.covariances, self.groups):
            mean, var, tape = self.basis.marginals(kernel, X, group, self.jitter, need_grad)
            if tape is not None:
                # Jitter that was needed once is kept: the next step's K_zz is almost the same.
                self.jitter = max(self.jitter, tape.jitter)
            # One variance column per latent function (the mean's columns): latents sharing
            # one covariance (C = 1) broadcast it. The number of latents is not that of the
            # target columns: a K-class label is one column for K latents.
            if var.shape[1] != mean.shape[1]:
                var = backend.namespace(var).broadcast_to(var, mean.shape)
            means.append(mean)
            variances.append(var)
            tapes.append(tape)
        if len(means) == 1:
            mean, var = means[0], variances[0]
        else:
            xp = backend.namespace(means[0])
            mean, var = xp.concat(means, axis=1), xp.concat(variances, axis=1)
        return mean, (var if self.latent_noise is None else var + self.latent_noise.value), tapes

    def output_marginals(self, X):
        """The outputs' marginal means and variances at the rows X (the joint q's variances
        where a finished fit of several mixed outputs holds it)."""
        mean_g, var_g, _ = self.latent_marginals(X)
        mean, var = self.outputs.mix(self.state, mean_g, var_g)
        joint = self.outputs.joint_variances(self, X)
        return mean, (var if joint is None else joint)

    def natural_step_is_exact(self, jointly=True):
        """Whether a full-data natural step of size one lands on q's optimum: natural steps
        on q, a conjugate likelihood, a basis whose step is exact (``jointly``: for all its
        Gaussian blocks at once, ``EXACT_NATURAL_STEP``; otherwise for each block given the
        others, ``CONJUGATE_NATURAL_STEP``), and latents that the output map keeps apart."""
        exact = self.basis.EXACT_NATURAL_STEP if jointly else self.basis.CONJUGATE_NATURAL_STEP
        return self.natural and self.likelihood.conjugate and exact and not self.outputs.couples(self.state)

    def evaluate(self, X, Y, need_grad=True):
        """ELBO estimate from the rows (X, Y) of the training set, and its gradients.

        Parameters
        ----------
        X : ndarray of shape (B, D)
        Y : ndarray of shape (B, T)
            Targets as the likelihood takes them: T = P columns for P Gaussian outputs (NaN
            where an entry of several outputs is missing), one column of class indices for
            K latent functions.
        need_grad : bool, "natural" or "adam"
            "natural": only what :meth:`natural_step` needs (no gradients). "adam": the
            gradients of what Adam moves (:meth:`adam_params`) only, so that a training
            step of a model that does not learn its hyperparameters does not bring their
            gradients back from a device. True: every gradient.

        Returns
        -------
        BatchResult
            Its ``d_mean`` and ``d_var`` are the latents' adjoints (B, L).
        """
        # Rows of another Array API library keep the data, the state and the state fields'
        # gradients there; the ELBO comes back as a float (within
        # linalg.deferred_checks it stays a 0-d array), and the hyperparameters' gradients
        # stay there where the training loop holds them there (hold_hyperparameters_on),
        # else come to the host in one transfer.
        xp = backend.namespace(X)
        scale = self.n_data / X.shape[0]
        self.outputs.forget_joint(self.state)
        mean_g, var_g, tapes = self.latent_marginals(X, need_grad)
        mean, var = self.outputs.mix(self.state, mean_g, var_g)
        Y, weights, var, extra = self._split(Y, var)
        ell, d_mean, d_var = self._likelihood_terms(Y, mean, var, weights, extra)
        elbo = _elbo_estimate(scale, xp.sum(ell), self._group_kl(tapes))
        if not need_grad:
            return BatchResult(elbo, {}, None, None, None)
        d_mean = scale * d_mean
        d_var = scale * d_var
        d_mean_g, d_var_g = self.outputs.unmix(self.state, d_mean, d_var)
        rows = SweepRows(X, Y, weights, extra, scale, mean_g, var_g) if self.outputs.couples(self.state) else None
        tape = ModelTape(tapes, rows)
        if need_grad == "natural":
            return BatchResult(elbo, {}, tape, d_mean_g, d_var_g)
        theta_bar, grads = self._backward(tapes, d_mean_g, d_var_g)
        if need_grad != "adam" or self.learn_hyperparameters:
            grads.update(self._hyperparameter_grads(theta_bar, Y, mean, var, d_var_g, weights, extra, scale))
            grads.update(self.outputs.gradients(self.state, d_mean, d_var, mean_g, var_g))
        return BatchResult(elbo, grads, tape, d_mean_g, d_var_g)

    def _likelihood_terms(self, Y, mean, var, weights, extra):
        """The expected log-likelihood of each entry and its weighted adjoints in the
        outputs' marginals (in the marginals' float)."""
        ell, d_mean, d_var = self._weighted(weights, *self.likelihood.expected_log_lik(Y, mean, var, **extra))
        d_mean, d_var = in_float_of(mean, d_mean, d_var)
        return ell, d_mean, d_var

    def _backward(self, tapes, d_mean_g, d_var_g):
        """Every group's reverse pass: theta's gradient (the one kernel's as the basis gives
        it, else the distinct kernels' summed over their groups on the host, concatenated)
        and the learned fields' (a shared inducing set's summed over the groups)."""
        distinct, index = self.distinct_kernels()
        theta_bars = [None] * len(distinct)
        grads = {}
        groups = self.groups
        for g, (tape, group, cols) in enumerate(zip(tapes, groups, self.outputs.columns(self.state))):
            theta_bar, field_bars = self.basis.backward(tape, group, _columns(d_mean_g, cols),
                                                        _columns(d_var_g, cols), self.learn_fields)
            i = index[g]
            if theta_bars[i] is None:
                theta_bars[i] = theta_bar
            else:
                theta_bars[i] = backend.host_float64(theta_bars[i]) + backend.host_float64(theta_bar)
            for field in self.learn_fields:
                name = self._field_name(field, g)
                grads[name] = field_bars[field] if name not in grads else grads[name] + field_bars[field]
        if len(distinct) > 1:
            theta_bar = np.concatenate([backend.host_float64(t) for t in theta_bars])
        else:
            theta_bar = theta_bars[0]
        return theta_bar, grads

    def _hyperparameter_grads(self, theta_bar, Y, mean, var, d_var, weights, extra, scale):
        """The gradients of the hyperparameters Adam moves, where the hyperparameters are
        held: on the device while a training loop holds them there
        (:meth:`hold_hyperparameters_on`), else on the host, brought back from another
        library in one transfer. ``d_var``: the latents' adjoints in their variances."""
        xp = backend.namespace(mean)
        latent_sum = noise_sum = likelihood_sums = 0.0
        if self.latent_noise is not None:
            latent_sum = xp.sum(d_var)
        if self.noise is not None:
            noise_sum = self.noise.total(xp, self._weighted(weights, self.likelihood.d_log_noise(Y, mean, var,
                                                                                                **extra))[0])
        if self._learns_likelihood():
            per_row = self._weighted(weights, self.likelihood.d_log_params(Y, mean, var))[0]
            likelihood_sums = xp.sum(per_row, axis=0)
        if self.device_rows_dtype is not None:
            # Held on the device (hold_hyperparameters_on): the gradients stay there.
            grads = {"theta": theta_bar}
            if self.noise is not None and self.noise.learned:
                grads["log_noise"] = xp.reshape(xp.astype(scale * noise_sum, theta_bar.dtype), (1,))
            return grads
        theta_bar, latent_sum, noise_sum, likelihood_sums = backend.to_host(
            theta_bar, latent_sum, noise_sum, likelihood_sums)
        # A float64 copy (a few entries), which the noise gradients below update.
        theta_bar = np.array(theta_bar, dtype=np.float64)
        grads = {"theta": theta_bar}
        if self.latent_noise is not None:
            # d var / d log(level) = level for each white term carrying the latent noise.
            self.latent_noise.scatter_gradient(float(latent_sum) * self.latent_noise.value, theta_bar)
        if self.noise is not None:
            self._add_noise_gradient(grads, scale * np.asarray(noise_sum, dtype=np.float64))
        if self._learns_likelihood():
            grads["likelihood"] = scale * likelihood_sums
        return grads

    def search_noise_floor(self):
        """The smallest noise variance a one-batch fit's search may reach, where it should
        set the jitter from the start, or None: the jitter then follows the noise the
        search finds (:func:`skgp_sparse.fit.search.run_collapsed`).

        Several outputs mixed through a learned W with learned noises answer a floor. The
        jitter that follows the noise costs them a second search: their noises fall from
        their start (0.1) to near the floor (1e-3 under ``n_latent``), so the first
        search's jitter is a hundred times what the noise found allows, and the search is
        run again from its end with a fresh quasi-Newton memory. Set for the floor at the
        start, the jitter is small against every noise the search can reach and one search
        does, in less time and with steadier results (docs/constants.md).
        """
        if not self.outputs.learned or self.noise is None or not self.noise.learned:
            return None
        return float(np.min(np.exp(np.asarray(self.noise.log_bounds[0], dtype=np.float64))))

    def collapses(self):
        """Whether :meth:`collapsed_evaluate` answers: the bound with q(u) optimal exists in
        closed form (:meth:`natural_step_is_exact`, or the joint q of mixed outputs:
        :meth:`solves_q_in_closed_form`), the basis writes it in one pass
        (``has_collapsed_bound``), and every row's noise is the learned variance (no known
        per-row noise, no latent white noise)."""
        return (
            (self.natural_step_is_exact() or self.solves_q_in_closed_form())
            and self.basis.has_collapsed_bound
            and self.noise is not None
            and self.latent_noise is None
            and not (self.layout is not None and self.layout.known_noise)
        )

    def collapsed_evaluate(self, X, Y):
        """The bound on the rows (X, Y), counted as all N, with q(u) at its optimum there,
        and its gradient in every parameter Adam moves (q(u) itself is not set: see
        :meth:`natural_step`). The value and gradient of :meth:`evaluate` after a natural
        step of size one on the same rows, in one pass (see :meth:`collapses`); for mixed
        outputs the bound of the joint q over the latents, which the output map writes
        (:meth:`skgp_sparse.multioutput.outputs.LinearMixing.collapsed_evaluate`).

        Returns
        -------
        BatchResult
            Without a tape or adjoints.
        """
        if self.solves_q_in_closed_form():
            return self.outputs.collapsed_evaluate(self, X, Y)
        xp = backend.namespace(X)
        Y, weights, _ = (Y, None, {}) if self.layout is None else self.layout.split(Y)
        scale = self.n_data / X.shape[0]
        counts = scale if weights is None else scale * xp.reshape(weights, (-1,))
        variance = self.noise.value
        # One precision per row, in the rows' library, device and dtype.
        beta = xp.ones_like(X[:, 0]) * (counts / variance)
        bound, grads = self._collapsed_bound(X, Y, beta)
        n_outputs = Y.shape[1]
        total_count = scale * X.shape[0] if weights is None else float(xp.sum(counts))
        elbo = bound.value - 0.5 * n_outputs * total_count * float(np.log(2.0 * np.pi * variance))
        # Every precision is count / variance: d/d log(variance) scales each by -1.
        self._add_noise_gradient(grads, -bound.beta_scaling_bar - 0.5 * n_outputs * total_count)
        return BatchResult(elbo, grads, None, None, None)

    def _collapsed_bound(self, X, targets, beta):
        """The basis's collapsed bound of Gaussian ``targets`` with per-row precisions
        ``beta`` (the jitter raised to what it needed), and its gradient in the kernel's
        hyperparameters and the learned inducing inputs."""
        bound = self.basis.collapsed_bound(self.covariances[0], X, targets, beta, self.state, self.jitter)
        self.jitter = max(self.jitter, bound.jitter)
        grads = {"theta": bound.theta_bar}
        for field in self.learn_fields:
            grads[field] = bound.field_bars[field]
        return bound, grads

    def pseudo_observations(self, X, Y):
        """The Gaussian pseudo-observations that stand for the likelihood at the current
        q on the rows (X, Y), counted as all N (conjugate-computation VI, Khan & Lin 2017).

        Each row's expected log-likelihood E_q[log p(y | f)], a function of its latent
        marginal (mean m, variance v), is replaced by that of a Gaussian observation
        ``t`` of f with precision ``beta`` plus a constant,

            c - beta / 2 ((m - t)^2 + v),  beta = -2 dELL/dv,  t = m + (dELL/dm) / beta,

        which has the same value and first derivatives in m and v at the current q. A
        natural step of size one is the optimum of q under these observations; at q's
        optimum they make the bound with q optimal of the Gaussian pseudo-model (the
        collapsed bound) touch the true one with the same gradient in the hyperparameters.

        Returns
        -------
        targets : array of shape (n, 1)
        beta : array of shape (n,)
            Per-row precisions, the rows' count (N / n, times the sample weight)
            included. A row whose precision is not positive (an exhausted tail of a
            log-concave likelihood) gets precision 0 and target m: it drops out.
        constant : float
            sum_i c_i: the pseudo-model's bound plus it is the ELBO at the current q.

        Only for one latent function without latent white noise or known per-row noise
        (:meth:`takes_pseudo_observations`).
        """
        xp = backend.namespace(X)
        scale = self.n_data / X.shape[0]
        mean, var = self.output_marginals(X)
        Y, weights, var, extra = self._split(Y, var)
        ell, d_mean, d_var = self._weighted(weights, *self.likelihood.expected_log_lik(Y, mean, var, **extra))
        mean, d_mean, d_var = (xp.reshape(a, (-1,)) for a in in_float_of(mean, mean, d_mean, d_var))
        var = xp.reshape(var, (-1,))
        beta = -2.0 * scale * d_var
        positive = beta > 0.0
        safe = xp.where(positive, beta, xp.ones_like(beta))
        targets = xp.where(positive, mean + scale * d_mean / safe, mean)
        beta = xp.where(positive, beta, xp.zeros_like(beta))
        quadratic = 0.5 * beta * ((mean - targets) ** 2 + var)
        constant = scale * _total(ell) + _total(quadratic)
        return xp.reshape(targets, (-1, 1)), beta, constant

    def takes_pseudo_observations(self):
        """Whether :meth:`pseudo_observations` and :meth:`pseudo_collapsed_evaluate`
        answer: natural steps on a basis with a collapsed bound, a likelihood that asks
        for them (``pseudo_observation_search``) of one latent function, and no latent
        white noise or known per-row noise (which the pseudo-model's variance would
        leave out)."""
        return (
            self.natural
            and self.basis.has_collapsed_bound
            and getattr(self.likelihood, "pseudo_observation_search", False)
            and self.likelihood.n_latent == 1
            and self.latent_noise is None
            and not (self.layout is not None and self.layout.known_noise)
        )

    def land_on_pseudo_optimum(self, X, targets, beta):
        """Move q to its optimum under the Gaussian pseudo-observations ``targets`` and
        ``beta`` (:meth:`pseudo_observations`, perhaps taken at other hyperparameters) on
        the rows X, at the current hyperparameters: the q of
        :meth:`pseudo_collapsed_evaluate` there.

        It is a natural step of size one (exact under Gaussian observations) on the
        pseudo-model's derivatives in each row's marginal mean and variance,
        beta (t - m) and -beta / 2, which at the q and hyperparameters where the
        observations were taken are the likelihood's own.
        """
        xp = backend.namespace(X)
        mean, _, tapes = self.latent_marginals(X, need_grad="natural")
        beta = xp.reshape(beta, (-1, 1))
        # One latent function: beta, targets and mean are all (n, 1).
        d_mean = beta * (targets - mean)
        d_var = -0.5 * beta
        self.state = self.natural_step(BatchResult(None, {}, ModelTape(tapes), d_mean, d_var), 1.0)

    def pseudo_collapsed_evaluate(self, X, targets, beta, constant):
        """The collapsed bound of the Gaussian pseudo-model of :meth:`pseudo_observations`
        (``targets``, per-row precisions ``beta``, ``constant``) on the rows X, with q(u)
        at its optimum there, and its gradient in the kernel's hyperparameters and the
        learned inducing inputs (q(u) itself is not set).

        Returns
        -------
        BatchResult
            Without a tape or adjoints.
        """
        bound, grads = self._collapsed_bound(X, targets, beta)
        return BatchResult(constant + bound.value, grads, None, None, None)

    def _add_noise_gradient(self, grads, d_log_noise):
        """Send d ELBO / d log(noise variance) (one per output for several outputs) to the
        parameter that carries the noise: its own entry of ``grads`` when learned, or the
        WhiteKernel terms of ``grads["theta"]``."""
        d_log_noise = self.noise.scatter_gradient(d_log_noise, grads["theta"])
        if d_log_noise is not None and self.noise.learned:
            grads["log_noise"] = np.array(d_log_noise, dtype=np.float64).reshape(-1)

    def _split(self, Y, var):
        """Targets, weights, latent variances and likelihood keyword arguments of a training
        array (see :class:`TargetLayout`): a known per-row noise goes to a likelihood that
        takes it (Gaussian: observation noise), or else into the latent variance of its row
        (it is then white noise of the latent function, a kernel-diagonal term)."""
        if self.layout is None:
            return Y, None, var, {}
        Y, weights, extra = self.layout.split(Y)
        if extra and not getattr(self.likelihood, "takes_known_noise", False):
            var = var + extra.pop("extra_noise")
        return Y, weights, var, extra

    @staticmethod
    def _weighted(weights, *per_row):
        """Each per-row array times the rows' sample weights (unchanged when unweighted)."""
        if weights is None:
            return per_row
        return tuple(a * weights for a in per_row)

    def natural_step(self, result, step):
        """Natural-gradient steps of size ``step`` on every group's Gaussian blocks from a
        :class:`BatchResult` (the state unchanged when Adam moves q): all at once where the
        output map keeps the latents apart, otherwise a sweep over the groups in turn (see
        :mod:`skgp_sparse.multioutput.outputs`)."""
        if not self.natural:
            return self.state
        tape = result.tape
        groups, columns = list(self.groups), self.outputs.columns(self.state)
        if tape.rows is None:
            for g, cols in enumerate(columns):
                groups[g] = self.basis.natural_step(tape.groups[g], groups[g], _columns(result.d_mean, cols),
                                                    _columns(result.d_var, cols), step)
            return self.outputs.with_groups(self.state, groups)
        rows = tape.rows
        xp = backend.namespace(rows.mean_g)
        means = [rows.mean_g[:, cols] for cols in columns]
        d_mean_g = result.d_mean
        for g, cols in enumerate(columns):
            if g > 0:
                # The outputs as the earlier groups' steps left them.
                mean_f, var_f = self.outputs.mix(self.state, xp.concat(means, axis=1), rows.var_g)
                d_mean_f = self._likelihood_terms(rows.Y, mean_f, var_f, rows.weights, rows.extra)[1]
                d_mean_g = rows.scale * self.outputs.unmix(self.state, d_mean_f, None)[0]
            groups[g] = self.basis.natural_step(tape.groups[g], groups[g], d_mean_g[:, cols], result.d_var[:, cols],
                                                step)
            if g + 1 < len(columns):
                means[g] = self.basis.marginals(self.covariances[g], rows.X, groups[g], self.jitter, False)[0]
        return self.outputs.with_groups(self.state, groups)

    def solves_q_in_closed_form(self):
        """Whether q's optimum over many rows has a closed form that sets it in one pass
        (:meth:`optimal_q_over`): the joint q of latents mixed into several outputs, on a
        basis whose q is one whitened Gaussian (``WHITENED_Q``), by natural steps."""
        return self.natural and self.basis.WHITENED_Q and self.outputs.mixes

    def optimal_q_over(self, chunks, scale=1.0, joint=False):
        """Set q to its optimum on the rows of ``chunks`` (an iterable of (X, Y) in the
        training layout), each row counted ``scale`` times, hyperparameters fixed, in
        closed form (:meth:`solves_q_in_closed_form`; see
        :meth:`skgp_sparse.multioutput.outputs.LinearMixing.optimal_q_over`, and ``joint``
        there)."""
        self.outputs.optimal_q_over(self, chunks, scale, joint)

    def land_on_optimal_q(self, X, Y):
        """q at its optimum on the rows (X, Y), counted as all N: in closed form where the
        model has one, else one natural step of size one (the optimum where the step is
        exact, :meth:`natural_step_is_exact`)."""
        if self.solves_q_in_closed_form():
            self.optimal_q_over([(X, Y)], scale=self.n_data / X.shape[0])
        else:
            self.state = self.natural_step(self.evaluate(X, Y, need_grad="natural"), 1.0)

    def start_q(self, X, Y):
        """Set q before the stream from the rows of the exact search (X, Y): at its optimum
        there where the closed form gives it (the sweeps of the stream's warm-up would take
        long to get there); otherwise nothing, the stream's first natural steps land on it."""
        if self.solves_q_in_closed_form():
            self.land_on_optimal_q(X, Y)

    def expected_log_lik_sum(self, chunks):
        """sum_n E_q[log p(y_n | f(x_n))] over the rows of ``chunks``, an iterable of (X, Y)."""
        total = 0.0
        for xb, yb in chunks:
            mean, var = self.output_marginals(xb)
            yb, weights, var, extra = self._split(yb, var)
            total += _total(self._weighted(weights, self.likelihood.expected_log_lik(yb, mean, var, **extra)[0])[0])
        return total

    def elbo(self, X, Y, chunk_size=4096):
        """The exact ELBO over the rows (X, Y), in nats."""
        return self.elbo_of_chunks(_row_chunks(X, Y, chunk_size))

    def sample_elbo(self, X, Y, chunk_size=4096):
        """The ELBO estimated from the rows (X, Y) of the training set: their expected
        log-likelihood scaled to ``n_data`` rows, minus the KL (nats)."""
        return self.elbo_of_chunks(_row_chunks(X, Y, chunk_size), scale=self.n_data / X.shape[0])

    def elbo_of_chunks(self, chunks, scale=1.0):
        """``scale`` times the expected log-likelihood of the rows of ``chunks`` (an
        iterable of (X, Y)) minus the KL, in nats: the exact ELBO when they are every row.
        Each chunk is cut as :func:`rows_per_kernel` cuts it for the model's kernels."""
        pieces = rows_per_kernel(chunks, len(self.distinct_kernels()[0]))
        return scale * self.expected_log_lik_sum(pieces) - self._kl()

    def _group_kl(self, tapes=None):
        """The sum over the groups of KL(q || prior) (one group's as the basis answers it:
        a float, or a 0-d array of the state's library); tapes of the current parameters
        save recomputing kernel matrices."""
        tapes = [None] * len(self._kernels) if tapes is None else tapes
        kls = [self.basis.kl_divergence(kernel, group, self.jitter, tape)
               for kernel, group, tape in zip(self.covariances, self.groups, tapes)]
        return kls[0] if len(kls) == 1 else sum(float(kl) for kl in kls)

    def _kl(self):
        """KL(q || prior) as a float (for a 0-d array of another library, one float back
        to the host; within :func:`skgp_sparse.linalg.deferred_checks` it stays there): the
        joint q's where a finished fit of mixed outputs holds it, else the groups'."""
        joint = self.outputs.joint_kl(self.state)
        if joint is not None:
            return joint
        kl = self._group_kl()
        return kl if pending_flags() is not None else float(kl)

    def diagnostics(self):
        """The basis's diagnostics of every group (``{}`` when it offers none), named as
        Adam names the group's fields."""
        out = {}
        for g, (kernel, group) in enumerate(zip(self.covariances, self.groups)):
            for name, value in self.basis.diagnostics(kernel, group, self.jitter).items():
                out[self._field_name(name, g)] = value
        return out

    def predictor(self):
        """The fitted model frozen into arrays: the basis's predictor of each group, as the
        output map joins them."""
        parts = [self.basis.make_predictor(kernel, group, self.jitter)
                 for kernel, group in zip(self.covariances, self.groups)]
        return self.outputs.predictor(self, parts)


@dataclass
class SweepRows:
    """What a sweep of natural steps over coupled groups re-evaluates: a minibatch's rows,
    their targets, weights and likelihood arguments, its scale, and the latents' marginals."""

    X: object
    Y: object
    weights: object
    extra: dict
    scale: float
    mean_g: object
    var_g: object


@dataclass
class ModelTape:
    """What the natural steps and the reverse pass need of a minibatch's forward pass."""

    #: Each group's basis tape.
    groups: list
    #: :class:`SweepRows` where the output map couples the latents, else None.
    rows: SweepRows = None


def _resolved(features, kernels):
    """The covariances of ``features`` under each kernel, one object per distinct kernel."""
    seen = {}
    for kernel in kernels:
        if id(kernel) not in seen:
            seen[id(kernel)] = covariances(features, kernel)
    return [seen[id(kernel)] for kernel in kernels]


def _columns(a, cols):
    """The columns ``cols`` (a slice) of ``a``, or ``a`` itself for None."""
    return a if cols is None else a[:, cols]



def _elbo_estimate(scale, ell_sum, kl):
    """``scale * ell_sum - kl`` as a Python float, from 0-d arrays (or numbers) in
    double precision; within :func:`skgp_sparse.linalg.deferred_checks` a 0-d array in
    the widest float of its device, which the training loop reads with the status flags
    of its interval, in one transfer."""
    if pending_flags() is None:
        return scale * float(ell_sum) - float(kl)
    xp = backend.namespace(ell_sum)
    wide = backend.widest_float(xp, backend.device_of(ell_sum))
    # A basis may answer its KL as a Python number (contract.Basis.kl_divergence).
    return scale * xp.astype(ell_sum, wide) - (kl if isinstance(kl, (int, float)) else xp.astype(kl, wide))


def in_float_of(reference, *arrays):
    """``arrays`` in the floating dtype of ``reference``. The likelihoods compute numpy
    inputs in float64 (O(B) work, more accurate quadrature); in a float32 fit their
    adjoints go back to the basis in float32, so that its O(B M^2) products stay there."""
    xp = backend.namespace(reference)
    return tuple(xp.astype(a, reference.dtype, copy=False) for a in arrays)


def _total(a):
    """The sum of the entries of ``a`` as a Python float; within
    :func:`skgp_sparse.linalg.deferred_checks`, a 0-d array in the widest float of its
    device (read later with the interval's checks)."""
    xp = backend.namespace(a)
    if pending_flags() is None:
        return float(xp.sum(a))
    return xp.astype(xp.sum(a), backend.widest_float(xp, backend.device_of(a)))


def _row_chunks(X, Y, size):
    """(X, Y) in consecutive chunks of ``size`` rows."""
    # Stops within the rows and a trailing ellipsis: the Array API's rules of indexing.
    n = X.shape[0]
    return ((X[i : min(i + size, n), ...], Y[i : min(i + size, n), ...]) for i in range(0, n, size))


def rows_per_kernel(chunks, n_kernels):
    """The (X, Y) chunks of a pass over the data, each cut into ``n_kernels`` pieces of
    consecutive rows (the last may be shorter).

    A pass over every row after training (the joint q, the final bound) reads the rows in
    chunks sized for one kernel; each distinct kernel holds an M x rows projection of the
    chunk (and the bound's products as many again), so a chunk's memory would otherwise
    grow with the kernels (docs/constants.md).
    """
    for X, Y in chunks:
        if n_kernels <= 1:
            yield X, Y
            continue
        size = max(1, -(-X.shape[0] // n_kernels))
        for begin in range(0, X.shape[0], size):
            end = min(X.shape[0], begin + size)  # array API slices stop inside the axis
            yield X[begin:end, ...], Y[begin:end, ...]
