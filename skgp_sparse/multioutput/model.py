"""The bound of a multi-output model, minibatch by minibatch: :class:`MixedModel`."""

import copy
import dataclasses
from dataclasses import dataclass

import numpy as np

from .. import backend
from ..elbo import BatchResult, VariationalModel, in_float_of, rows_per_kernel
from ..bases import SEARCH_BASIS
from ..bases.toolkit import factor_kzz
from ..linalg import inverse_cholesky_factor
from .collapsed import joint_optimal_q, joint_output_variances, lmc_collapsed_bound, projections
from .mixing import mix, mixing_gradient, unmix
from .predictor import JointCovariance, MixedPredictor
from .state import MixedState


@dataclass
class MixedTape:
    """What the natural steps and the reverse pass need of a minibatch's forward pass."""

    X: object
    Y: object
    weights: object
    extra: dict
    scale: float
    mean_g: object
    var_g: object
    tapes: list


class MixedModel(VariationalModel):
    """P outputs ``f = W g`` of latent GPs, each latent group on its own basis state and
    kernel, with per-output Gaussian noise and missing entries (NaN targets).

    It answers the minibatch loop, the exact searches and the estimators as a
    :class:`~skgp_sparse.elbo.VariationalModel` does; what differs is said here.

    Parameters
    ----------
    basis : Basis, str or module
    kernels : list of compiled kernels
        One per latent group; the same object twice ties those groups' hyperparameters.
    likelihood : OutputGaussianLikelihood
    state : MixedState
    n_data : int
    noise : OutputNoise
    learn_inducing, jitter, natural, learn_hyperparameters
        As for :class:`~skgp_sparse.elbo.VariationalModel`.

    Notes
    -----
    Adam's parameters: ``theta`` (every distinct kernel's log-hyperparameters, in group
    order), ``log_noise`` (P,), ``mixing`` (P, L) and ``offset`` (P,) when learned, the shared inducing sets
    under their basis names, and any other basis field per group as ``name[g]`` (when
    there are several groups).

    With a learned mixing the latents meet in the expected log-likelihood, so a natural
    step of size one on one latent lands on its optimum *given the others*, not on the
    joint one. :meth:`natural_step` therefore sweeps over the groups in turn (block
    coordinate ascent, Gauss-Seidel): each group steps with the adjoints of the outputs as
    the previous groups' steps left them, one more forward pass of that group per step.
    On a full batch under Gaussian noise the bound is a concave quadratic in the means
    and separable in the covariances, so the sweeps of size one rise monotonically to the
    joint optimum of the mean-field family (tests/test_multioutput.py checks it against
    the dense joint posterior). With a fixed identity mixing (independent outputs) the
    groups do not meet, and a step of size one is exact as for one output.
    """

    #: Past steps the quasi-Newton search keeps. The LMC's bound couples the mixing, each
    #: latent's kernel and the noises, and with scipy's default of 10 its search crawls
    #: (docs/constants.md).
    SEARCH_MEMORY = 50

    def __init__(self, basis, kernels, likelihood, state, n_data, noise, learn_inducing=True, jitter=1e-6,
                 natural=True, learn_hyperparameters=True):
        super().__init__(basis, kernels[0], likelihood, state, n_data, noise=noise, learn_inducing=learn_inducing,
                         jitter=jitter, natural=natural, learn_hyperparameters=learn_hyperparameters)
        if len(kernels) != len(state.groups):
            raise ValueError(f"{len(kernels)} kernels for {len(state.groups)} latent groups")
        self._kernels = list(kernels)
        self._fixed_mixing_couples = None

    def search_model(self, n_rows, learn_inducing=False):
        """The exact search's model (see :meth:`VariationalModel.search_model`): each
        latent group on the search's basis at every inducing input, a covariance per
        latent, the mixing and offsets as they stand, tied kernels still tied."""
        kernels, likelihood, noise = copy.deepcopy((self.kernels, self.likelihood, self.noise))
        inducing = self.stacked_inducing()
        groups = tuple(SEARCH_BASIS.init_state(inducing, n_outputs=w, n_covariances=w) for w in self.state.widths)
        host = lambda a: np.array(backend.to_numpy(a), dtype=np.float64)  # noqa: E731
        state = MixedState(groups, host(self.state.mixing), self.state.mixing_learned, host(self.state.offset))
        search = MixedModel(SEARCH_BASIS, kernels, likelihood, state, n_rows, noise,
                            learn_inducing=learn_inducing and self.learns_inducing(), jitter=self.jitter,
                            natural=self.natural, learn_hyperparameters=self.learn_hyperparameters)
        search.layout = self.layout
        return search

    # --- the kernels ---------------------------------------------------------------------
    def kernel_columns(self):
        """The distinct kernels, and the index among them of each latent column's kernel."""
        distinct, index = self.distinct_kernels()
        return distinct, [index[g] for g, width in enumerate(self.state.widths) for _ in range(width)]

    @property
    def coupled(self):
        """Whether the mixing couples the latents: a learned W, or a fixed one in which an
        output loads on two latents (read once: a fixed W does not change)."""
        if self.state.mixing_learned:
            return True
        if self._fixed_mixing_couples is None:
            W = np.asarray(backend.to_numpy(self.state.mixing))
            self._fixed_mixing_couples = bool(np.any(np.count_nonzero(W, axis=1) > 1))
        return self._fixed_mixing_couples

    # --- parameters seen by Adam ---------------------------------------------------------
    def _field_name(self, field, g):
        return field if len(self.state.groups) == 1 else f"{field}[{g}]"

    def adam_params(self):
        params = {}
        if self.learn_hyperparameters:
            distinct, _ = self.distinct_kernels()
            params["theta"] = np.concatenate([k.theta for k in distinct])
            if self.noise.learned:
                params["log_noise"] = self.noise.log_value.copy()
            if self.state.mixing_learned:
                params["mixing"] = self.state.mixing
                params["offset"] = self.state.offset
        for field in self.learn_fields:
            if field in self.basis.INDUCING_FIELDS:
                params[field] = getattr(self.state.groups[0], field)
            else:
                for g, group in enumerate(self.state.groups):
                    params[self._field_name(field, g)] = getattr(group, field)
        return params

    def can_hold_hyperparameters_on_device(self):
        """False: the latent groups' kernels, the mixing and the per-output noise are
        moved by Adam on the host (one packed read of their gradients a step)."""
        return False

    def adam_rate_scales(self, step):
        out = {}
        for g, group in enumerate(self.state.groups):
            scales = self.basis.adam_field_scales(group, step)
            for field, value in (scales or {}).items():
                out[field if field in self.basis.INDUCING_FIELDS else self._field_name(field, g)] = value
        return out or None

    def set_adam_params(self, params):
        if "theta" in params:
            distinct, _ = self.distinct_kernels()
            start = 0
            for kernel in distinct:
                n = kernel.theta.shape[0]
                kernel.set_theta(np.asarray(params["theta"][start : start + n], dtype=np.float64))
                start += n
        if "log_noise" in params:
            self.noise.log_value = np.array(backend.to_numpy(params["log_noise"]), dtype=np.float64).reshape(-1)
        # In place, as VariationalModel sets its state's fields (the loop's snapshot of a
        # step restores them through this method).
        for g, group in enumerate(self.state.groups):
            for field in self.learn_fields:
                name = field if field in self.basis.INDUCING_FIELDS else self._field_name(field, g)
                if name in params:
                    setattr(group, field, params[name])
            if not self.natural:
                group.drop_caches()
        if "mixing" in params:
            self.state.mixing = params["mixing"]
        if "offset" in params:
            self.state.offset = params["offset"]
        self._sync_noise()

    # --- evaluation ----------------------------------------------------------------------
    def _group_marginals(self, X, need_grad):
        """Each group's latent marginals at X: lists of means, variances and tapes."""
        means, variances, tapes = [], [], []
        for kernel, group in zip(self.kernels, self.state.groups):
            mean, var, tape = self.basis.marginals(kernel, X, group, self.jitter, need_grad)
            if tape is not None:
                self.jitter = max(self.jitter, tape.jitter)
            xp = backend.namespace(mean)
            means.append(mean)
            variances.append(var if var.shape[1] == mean.shape[1] else xp.broadcast_to(var, mean.shape))
            tapes.append(tape)
        return means, variances, tapes

    def _mixing(self, like):
        """W in the namespace, device and dtype of ``like``."""
        return _like(self.state.mixing, like)

    def _mix(self, mean_g, var_g, W):
        """The outputs' marginals: the latents' mixed through W, plus the offsets."""
        mean_f, var_f = mix(mean_g, var_g, W)
        xp = backend.namespace(mean_g)
        return mean_f + xp.reshape(_like(self.state.offset, mean_g), (1, -1)), var_f

    def latent_marginals(self, X, need_grad=False):
        """The latent marginals (n, L) at X, and the group tapes."""
        means, variances, tapes = self._group_marginals(X, need_grad)
        xp = backend.namespace(means[0])
        return xp.concat(means, axis=1), xp.concat(variances, axis=1), tapes

    def _marginals(self, X, need_grad):
        mean_g, var_g, tapes = self.latent_marginals(X, need_grad)
        mean_f, var_f = self._mix(mean_g, var_g, self._mixing(mean_g))
        if self.state.joint_inverse_factor is not None:
            var_f = self._joint_variances(X)
        return mean_f, var_f, tapes

    def _joint_variances(self, X):
        """The outputs' variances (n, P) under the joint q (``joint_inverse_factor``)."""
        distinct, kernel_of_column = self.kernel_columns()
        Z = self.state.inducing
        lows = [factor_kzz(kernel, Z, self.jitter, False)[0] for kernel in distinct]
        A, t = projections(distinct, kernel_of_column, lows, Z, X)
        return joint_output_variances(A, t, self._mixing(X), self.state.joint_inverse_factor)

    def natural_step_is_exact(self, jointly=True):
        """Whether a full-data natural step of size one lands on q's optimum: as for one
        output, and only while the mixing leaves the latents apart."""
        return super().natural_step_is_exact(jointly) and not self.coupled

    def _kl(self, tapes=None):
        if self.state.joint_inverse_factor is not None:
            # KL(N(m, S) || N(0, I)) of the joint q, S = F^T F with F = joint_inverse_factor.
            F = self.state.joint_inverse_factor
            xp = backend.namespace(F)
            means = [g.q_mean for g in self.state.groups]
            quadratic = sum(float(xp.sum(m * m)) for m in means)
            log_det = 2.0 * float(xp.sum(xp.log(xp.abs(xp.linalg.diagonal(F)))))
            return 0.5 * (float(xp.sum(F * F)) + quadratic - F.shape[0] - log_det)
        tapes = [None] * len(self.kernels) if tapes is None else tapes
        return sum(float(self.basis.kl_divergence(kernel, group, self.jitter, tape))
                   for kernel, group, tape in zip(self.kernels, self.state.groups, tapes))

    def _adjoints(self, Y, mean_f, var_f, weights, extra):
        """The expected log-likelihood (n, P) and its weighted adjoints in the output marginals."""
        ell, d_mean, d_var = self._weighted(weights, *self.likelihood.expected_log_lik(Y, mean_f, var_f, **extra))
        d_mean, d_var = in_float_of(mean_f, d_mean, d_var)
        return ell, d_mean, d_var

    def evaluate(self, X, Y, need_grad=True):
        """ELBO estimate from the rows (X, Y) of the training set and its gradients, as
        :meth:`VariationalModel.evaluate`; Y (B, P) may hold NaN where an entry is missing.
        ``d_mean`` and ``d_var`` of the result are the latents' adjoints (B, L)."""
        xp = backend.namespace(X)
        scale = self.n_data / X.shape[0]
        # Training moves the mean-field q: the joint covariance of a finished fit is stale.
        self.state.joint_inverse_factor = None
        mean_g, var_g, tapes = self.latent_marginals(X, need_grad)
        W = self._mixing(mean_g)
        mean_f, var_f = self._mix(mean_g, var_g, W)
        Y, weights, _, extra = self._split(Y, var_f)
        ell, d_mean_f, d_var_f = self._adjoints(Y, mean_f, var_f, weights, extra)
        elbo = scale * float(xp.sum(ell)) - self._kl(tapes)
        if not need_grad:
            return BatchResult(elbo, {}, None, None, None)
        d_mean_f, d_var_f = scale * d_mean_f, scale * d_var_f
        d_mean_g, d_var_g = unmix(d_mean_f, d_var_f, W)
        tape = MixedTape(X, Y, weights, extra, scale, mean_g, var_g, tapes)
        if need_grad == "natural":
            return BatchResult(elbo, {}, tape, d_mean_g, d_var_g)
        grads = self._backward(tape, d_mean_g, d_var_g)
        if self.noise.learned:
            per_entry = self._weighted(weights, self.likelihood.d_log_noise(Y, mean_f, var_f, **extra))[0]
            grads["log_noise"] = scale * np.array(backend.to_numpy(xp.sum(per_entry, axis=0)), dtype=np.float64)
        if self.state.mixing_learned:
            grads["mixing"] = xp.astype(mixing_gradient(d_mean_f, d_var_f, mean_g, var_g, W),
                                        self.state.mixing.dtype, copy=False)
            grads["offset"] = xp.astype(xp.sum(d_mean_f, axis=0), self.state.offset.dtype, copy=False)
        return BatchResult(elbo, grads, tape, d_mean_g, d_var_g)

    def _backward(self, tape, d_mean_g, d_var_g):
        """Every group's reverse pass: theta's gradient (numpy) and the fields' (summed over
        the groups for the shared inducing sets)."""
        distinct, index = self.distinct_kernels()
        theta_bars = [np.zeros(k.theta.shape[0]) for k in distinct]
        grads = {}
        for g, (group, cols) in enumerate(zip(self.state.groups, self.state.columns())):
            theta_bar, field_bars = self.basis.backward(tape.tapes[g], group, d_mean_g[:, cols], d_var_g[:, cols],
                                                        self.learn_fields)
            theta_bars[index[g]] += np.asarray(backend.to_numpy(theta_bar), dtype=np.float64)
            for field in self.learn_fields:
                if field in self.basis.INDUCING_FIELDS:
                    grads[field] = field_bars[field] if field not in grads else grads[field] + field_bars[field]
                else:
                    grads[self._field_name(field, g)] = field_bars[field]
        grads["theta"] = np.concatenate(theta_bars)
        return grads

    def natural_step(self, result, step):
        """Natural steps of size ``step`` on every group: all at once where the mixing
        keeps the latents apart, otherwise a sweep over the groups in turn (see the class
        notes)."""
        if not self.natural:
            return self.state
        tape = result.tape
        groups, columns = list(self.state.groups), self.state.columns()
        if not self.coupled:
            for g, cols in enumerate(columns):
                groups[g] = self.basis.natural_step(tape.tapes[g], groups[g], result.d_mean[:, cols],
                                                    result.d_var[:, cols], step)
            return dataclasses.replace(self.state, groups=tuple(groups))
        xp = backend.namespace(tape.mean_g)
        W = self._mixing(tape.mean_g)
        means = [tape.mean_g[:, cols] for cols in columns]
        d_mean_g = result.d_mean
        for g, cols in enumerate(columns):
            if g > 0:
                # The outputs as the earlier groups' steps left them.
                mean_f, var_f = self._mix(xp.concat(means, axis=1), tape.var_g, W)
                d_mean_f = self._adjoints(tape.Y, mean_f, var_f, tape.weights, tape.extra)[1]
                d_mean_g = tape.scale * (d_mean_f @ W)
            groups[g] = self.basis.natural_step(tape.tapes[g], groups[g], d_mean_g[:, cols], result.d_var[:, cols],
                                                step)
            if g + 1 < len(columns):
                means[g] = self.basis.marginals(self.kernels[g], tape.X, groups[g], self.jitter, False)[0]
        return dataclasses.replace(self.state, groups=tuple(groups))

    def learns_mixing(self):
        return self.state.mixing_learned

    def search_noise_floor(self):
        """The smallest noise variance a one-batch fit's search may reach, where it should
        set the jitter from the start: an LMC's (a learned mixing) with learned noises, else
        None (the jitter then follows the noise found, :func:`~skgp_sparse.fit.search.run_collapsed`).

        The jitter that follows the noise costs an LMC a second search: its noises fall from
        their start (0.1) to near the floor (1e-3 under ``n_latent``), so the first search's
        jitter is a hundred times what the noise found allows, and the search is run again
        from its end with a fresh quasi-Newton memory. Set for the floor at the start, the
        jitter is small against every noise the search can reach and one search does, in
        less time and with steadier results (docs/constants.md).
        """
        if not self.learns_mixing() or self.noise is None or not self.noise.learned:
            return None
        return float(np.min(np.exp(np.asarray(self.noise.log_bounds[0], dtype=np.float64))))

    # --- q at its optimum in closed form ----------------------------------------------------
    def solves_q_in_closed_form(self):
        """Whether :meth:`optimal_q_over` applies: natural steps on a basis whose q is one
        whitened Gaussian (``WHITENED_Q``), which the closed form sets."""
        return self.natural and self.basis.WHITENED_Q

    def optimal_q_over(self, chunks, scale=1.0, joint=False):
        """Set q to the optimum of the mean-field family on the rows of ``chunks`` (an
        iterable of (X, Y) in the training layout), each row counted ``scale`` times,
        hyperparameters fixed (:func:`.collapsed.joint_optimal_q`); ``joint``: also keep the
        joint optimum's covariance (``joint_inverse_factor``), which the bound and the
        predictions then use. Sweeps of natural
        steps reach the same q, but slowly where the mixing couples the latents tightly
        (a small noise, outputs nearly collinear; docs/constants.md)."""
        distinct, kernel_of_column = self.kernel_columns()
        Z = self.state.inducing
        W = self._mixing(Z)
        pieces = rows_per_kernel(chunks, len(distinct))
        means, precisions, joint_inverse_factor, used = joint_optimal_q(
            distinct, kernel_of_column, (self._precisions(X, Y, scale) for X, Y in pieces), W, Z, self.jitter,
            self.coupled)
        self.jitter = max(self.jitter, used)
        xp = backend.namespace(Z)
        groups = []
        for group, cols in zip(self.state.groups, self.state.columns()):
            blocks = precisions[cols]
            groups.append(dataclasses.replace(
                group, q_mean=xp.concat(means[cols], axis=1),
                q_sqrt=xp.stack([inverse_cholesky_factor(p) for p in blocks]), precision=xp.stack(blocks)))
        self.state = dataclasses.replace(self.state, groups=tuple(groups),
                                         joint_inverse_factor=joint_inverse_factor if joint else None)

    def _precisions(self, X, Y, scale):
        """(X, targets less the offsets with zeros where missing, per-entry precisions) of
        rows in the training layout, each counted ``scale`` times."""
        xp = backend.namespace(X)
        Y, weights, extra = (Y, None, {}) if self.layout is None else self.layout.split(Y)
        counts = scale * (xp.ones_like(X[:, :1]) if weights is None else weights)
        observed = xp.astype(~xp.isnan(Y), X.dtype)
        noise = xp.reshape(xp.asarray(self.noise.value, dtype=X.dtype, device=backend.device_of(X)), (1, -1))
        noise = noise + extra.get("extra_noise", 0.0)
        targets = xp.where(observed > 0, Y - xp.reshape(_like(self.state.offset, X), (1, -1)), xp.zeros_like(Y))
        return X, targets, counts * observed / noise

    def land_on_optimal_q(self, X, Y):
        """q at its optimum on the rows (X, Y) counted as all N: in closed form on the
        coupled basis, else by the base class's natural step."""
        if not self.solves_q_in_closed_form():
            return super().land_on_optimal_q(X, Y)
        self.optimal_q_over([(X, Y)], scale=self.n_data / X.shape[0])

    def start_q(self, X, Y):
        """Before the stream: q at its optimum on the exact search's rows, where the closed
        form gives it (the sweeps of the stream's warm-up would take long to get there)."""
        if self.solves_q_in_closed_form():
            self.land_on_optimal_q(X, Y)

    # --- the bound with q optimal ----------------------------------------------------------
    def collapses(self):
        """Whether :meth:`collapsed_evaluate` answers: natural steps, a basis whose q is one
        whitened Gaussian (``WHITENED_Q``: the bound is written for it), and no known
        per-row noise."""
        return (
            self.natural and self.basis.WHITENED_Q
            and not (self.layout is not None and self.layout.known_noise)
        )

    def collapsed_evaluate(self, X, Y):
        """The bound on the rows (X, Y), counted as all N, with the joint q(u_1..u_L) at
        its optimum (:func:`.collapsed.lmc_collapsed_bound`), and its gradient in every
        parameter Adam moves. The mean-field q the stream trains is within this family,
        so its bound is at most this one."""
        xp = backend.namespace(X)
        # Known per-row noise never reaches here (collapses), so beta * s2 counts each entry.
        X, Y0, beta = self._precisions(X, Y, self.n_data / X.shape[0])
        s2 = self.noise.value
        distinct, kernel_of_column = self.kernel_columns()
        bound = lmc_collapsed_bound(distinct, kernel_of_column, X, Y0, beta, self._mixing(X), self.state.inducing,
                                    self.jitter, self.coupled)
        self.jitter = max(self.jitter, bound.jitter)
        s2_row = xp.reshape(xp.asarray(s2, dtype=X.dtype, device=backend.device_of(X)), (1, -1))
        entry_counts = np.asarray(backend.to_numpy(xp.sum(beta * s2_row, axis=0)), dtype=np.float64)
        elbo = bound.value - 0.5 * float(np.sum(entry_counts * np.log(2.0 * np.pi * s2)))
        grads = {"theta": bound.theta_bar, "inducing": bound.inducing_bar}
        if self.noise.learned:
            # Every precision of output p is count / s2_p: d/d log s2_p scales them by -1.
            grads["log_noise"] = -bound.beta_scaling_bar - 0.5 * entry_counts
        if self.state.mixing_learned:
            grads["mixing"] = bound.mixing_bar
            grads["offset"] = bound.target_bar
        grads = {name: value for name, value in grads.items() if name != "inducing" or "inducing" in self.learn_fields}
        return BatchResult(elbo, grads, None, None, None)

    # --- what the fit reports ------------------------------------------------------------
    def diagnostics(self):
        out = {}
        for g, (kernel, group) in enumerate(zip(self.kernels, self.state.groups)):
            for name, value in self.basis.diagnostics(kernel, group, self.jitter).items():
                out[self._field_name(name, g)] = value
        return out

    def predictor(self):
        distinct, index = self.distinct_kernels()
        parts = tuple(self.basis.make_predictor(kernel, group, self.jitter)
                      for kernel, group in zip(self.kernels, self.state.groups))
        host = lambda a: None if a is None else np.array(backend.to_numpy(a), dtype=np.float64)  # noqa: E731
        joint = None
        if self.state.joint_inverse_factor is not None:
            Z = self.state.inducing
            joint = JointCovariance(host(Z), np.stack([host(factor_kzz(k, Z, self.jitter, False)[0]) for k in distinct]),
                                    host(self.state.joint_inverse_factor))
        return MixedPredictor(parts, tuple(k.to_sklearn() for k in distinct), tuple(index),
                              host(self.state.mixing), host(self.state.offset), joint)


def _like(a, like):
    """The array ``a`` in the namespace, device and dtype of ``like``."""
    xp = backend.namespace(like)
    if backend.namespace(a) is not xp:
        a = backend.to_namespace(backend.to_numpy(a), xp, device=backend.device_of(like))
    return xp.astype(a, like.dtype, copy=False)
