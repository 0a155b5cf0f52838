"""The output map of several outputs: latent groups mixed through W, plus offsets.

:class:`LinearMixing` answers the interface of :mod:`skgp_sparse.outputs` for a
:class:`~.state.MixedState`, and holds what only mixed latents have: the bound and q(u)
with the joint q(u_1..u_L) at its optimum in closed form (:mod:`.collapsed`), and the
mixed predictor.

With a learned mixing the latents meet in the expected log-likelihood, so a natural step of
size one on one latent lands on its optimum *given the others*, not on the joint one: the
model then sweeps over the groups in turn (block coordinate ascent, Gauss-Seidel; see
:meth:`skgp_sparse.elbo.VariationalModel.natural_step`). On a full batch under Gaussian
noise the bound is a concave quadratic in the means and separable in the covariances, so
the sweeps of size one rise monotonically to the joint optimum of the mean-field family
(tests/test_multioutput.py checks it against the dense joint posterior). With a fixed
identity mixing (independent outputs) the groups do not meet, and a step of size one is
exact as for one output.
"""

import dataclasses

import numpy as np

from .. import backend
from ..bases.toolkit import factor_kzz
from ..elbo import BatchResult, rows_per_kernel
from ..linalg import inverse_cholesky_factor
from .collapsed import joint_optimal_q, joint_output_variances, lmc_collapsed_bound, projections
from .mixing import mix, mixing_gradient, unmix
from .predictor import JointCovariance, MixedPredictor


class LinearMixing:
    """The outputs ``f = W g + b`` of the latent columns g of every group of a
    :class:`~.state.MixedState` (W and b are the state's ``mixing`` and ``offset``)."""

    mixes = True
    #: Past steps the quasi-Newton search keeps. The LMC's bound couples the mixing, each
    #: latent's kernel and the noises, and with scipy's default of 10 its search crawls
    #: (docs/constants.md).
    SEARCH_MEMORY = 50

    def __init__(self, learned):
        #: Whether Adam moves W and b (the LMC) or they stay fixed (independent outputs).
        self.learned = learned
        self._fixed_mixing_couples = None

    # --- the groups ------------------------------------------------------------------
    def groups(self, state):
        return state.groups

    def with_groups(self, state, groups):
        return dataclasses.replace(state, groups=tuple(groups))

    def columns(self, state):
        return state.columns()

    def couples(self, state):
        """Whether the mixing couples the latents: a learned W, or a fixed one in which an
        output loads on two latents (read once: a fixed W does not change)."""
        if self.learned:
            return True
        if self._fixed_mixing_couples is None:
            W = np.asarray(backend.to_numpy(state.mixing))
            self._fixed_mixing_couples = bool(np.any(np.count_nonzero(W, axis=1) > 1))
        return self._fixed_mixing_couples

    # --- marginals and adjoints --------------------------------------------------------
    def mix(self, state, mean_g, var_g):
        """The outputs' marginals: the latents' mixed through W, plus the offsets."""
        mean_f, var_f = mix(mean_g, var_g, _like(state.mixing, mean_g))
        xp = backend.namespace(mean_g)
        return mean_f + xp.reshape(_like(state.offset, mean_g), (1, -1)), var_f

    def unmix(self, state, d_mean, d_var):
        """The latents' adjoints from the outputs' (``d_var`` None: the means' only)."""
        W = _like(state.mixing, d_mean)
        return unmix(d_mean, d_var, W) if d_var is not None else (d_mean @ W, None)

    def gradients(self, state, d_mean, d_var, mean_g, var_g):
        """W's and b's gradients from the outputs' (scaled) adjoints, where Adam moves them."""
        if not self.learned:
            return {}
        xp = backend.namespace(d_mean)
        W = _like(state.mixing, mean_g)
        return {"mixing": xp.astype(mixing_gradient(d_mean, d_var, mean_g, var_g, W), state.mixing.dtype, copy=False),
                "offset": xp.astype(xp.sum(d_mean, axis=0), state.offset.dtype, copy=False)}

    def adam_params(self, state):
        return {"mixing": state.mixing, "offset": state.offset} if self.learned else {}

    def set_adam_params(self, state, params):
        if "mixing" in params:
            state.mixing = params["mixing"]
        if "offset" in params:
            state.offset = params["offset"]

    # --- the joint q --------------------------------------------------------------------
    def forget_joint(self, state):
        """Drop the joint covariance of a finished fit: training moves the mean-field q."""
        state.joint_inverse_factor = None

    def joint_kl(self, state):
        """KL(N(m, S) || N(0, I)) of the joint q, S = F^T F with F = ``joint_inverse_factor``,
        or None while the groups' own q holds."""
        F = state.joint_inverse_factor
        if F is None:
            return None
        xp = backend.namespace(F)
        quadratic = sum(float(xp.sum(g.q_mean * g.q_mean)) for g in state.groups)
        log_det = 2.0 * float(xp.sum(xp.log(xp.abs(xp.linalg.diagonal(F)))))
        return 0.5 * (float(xp.sum(F * F)) + quadratic - F.shape[0] - log_det)

    def joint_variances(self, model, X):
        """The outputs' variances (n, P) under the joint q, or None while there is none."""
        if model.state.joint_inverse_factor is None:
            return None
        distinct, kernel_of_column = kernel_columns(model)
        Z = model.state.inducing
        lows = [factor_kzz(kernel, Z, model.jitter, False)[0] for kernel in distinct]
        A, t = projections(distinct, kernel_of_column, lows, Z, X)
        return joint_output_variances(A, t, _like(model.state.mixing, X), model.state.joint_inverse_factor)

    def optimal_q_over(self, model, chunks, scale=1.0, joint=False):
        """Set the model's q to the optimum of the mean-field family on the rows of
        ``chunks`` (an iterable of (X, Y) in the training layout), each row counted
        ``scale`` times, hyperparameters fixed (:func:`.collapsed.joint_optimal_q`);
        ``joint``: also keep the joint optimum's covariance (``joint_inverse_factor``), which
        the bound and the predictions then use. Sweeps of natural steps reach the same q,
        but slowly where the mixing couples the latents tightly (a small noise, outputs
        nearly collinear; docs/constants.md)."""
        state = model.state
        distinct, kernel_of_column = kernel_columns(model)
        Z = state.inducing
        pieces = rows_per_kernel(chunks, len(distinct))
        means, precisions, joint_inverse_factor, used = joint_optimal_q(
            distinct, kernel_of_column, (self.precisions(model, X, Y, scale) for X, Y in pieces),
            _like(state.mixing, Z), Z, model.jitter, self.couples(state))
        model.jitter = max(model.jitter, used)
        xp = backend.namespace(Z)
        groups = []
        for group, cols in zip(state.groups, state.columns()):
            blocks = precisions[cols]
            groups.append(dataclasses.replace(
                group, q_mean=xp.concat(means[cols], axis=1),
                q_sqrt=xp.stack([inverse_cholesky_factor(p) for p in blocks]), precision=xp.stack(blocks)))
        model.state = dataclasses.replace(state, groups=tuple(groups),
                                          joint_inverse_factor=joint_inverse_factor if joint else None)

    def precisions(self, model, X, Y, scale):
        """(X, targets less the offsets with zeros where missing, per-entry precisions) of
        rows in the training layout, each counted ``scale`` times."""
        xp = backend.namespace(X)
        Y, weights, extra = (Y, None, {}) if model.layout is None else model.layout.split(Y)
        counts = scale * (xp.ones_like(X[:, :1]) if weights is None else weights)
        observed = xp.astype(~xp.isnan(Y), X.dtype)
        noise = xp.reshape(xp.asarray(model.noise.value, dtype=X.dtype, device=backend.device_of(X)), (1, -1))
        noise = noise + extra.get("extra_noise", 0.0)
        targets = xp.where(observed > 0, Y - xp.reshape(_like(model.state.offset, X), (1, -1)), xp.zeros_like(Y))
        return X, targets, counts * observed / noise

    def collapsed_evaluate(self, model, X, Y):
        """The bound on the rows (X, Y), counted as all N, with the joint q(u_1..u_L) at
        its optimum (:func:`.collapsed.lmc_collapsed_bound`), and its gradient in every
        parameter Adam moves. The mean-field q the stream trains is within this family,
        so its bound is at most this one."""
        xp = backend.namespace(X)
        # Known per-row noise never reaches here (the model's collapses), so beta * s2
        # counts each entry.
        X, Y0, beta = self.precisions(model, X, Y, model.n_data / X.shape[0])
        s2 = model.noise.value
        distinct, kernel_of_column = kernel_columns(model)
        bound = lmc_collapsed_bound(distinct, kernel_of_column, X, Y0, beta, _like(model.state.mixing, X),
                                    model.state.inducing, model.jitter, self.couples(model.state))
        model.jitter = max(model.jitter, bound.jitter)
        s2_row = xp.reshape(xp.asarray(s2, dtype=X.dtype, device=backend.device_of(X)), (1, -1))
        entry_counts = np.asarray(backend.to_numpy(xp.sum(beta * s2_row, axis=0)), dtype=np.float64)
        elbo = bound.value - 0.5 * float(np.sum(entry_counts * np.log(2.0 * np.pi * s2)))
        grads = {"theta": bound.theta_bar}
        if "inducing" in model.learn_fields:
            grads["inducing"] = bound.inducing_bar
        if model.noise.learned:
            # Every precision of output p is count / s2_p: d/d log s2_p scales them by -1.
            grads["log_noise"] = -bound.beta_scaling_bar - 0.5 * entry_counts
        if self.learned:
            grads["mixing"] = bound.mixing_bar
            grads["offset"] = bound.target_bar
        return BatchResult(elbo, grads, None, None, None)

    # --- the fitted model ---------------------------------------------------------------
    def predictor(self, model, parts):
        """The groups' predictors ``parts`` with the mixing, the offsets and the joint
        covariance, where the fit ended with one."""
        distinct, index = model.distinct_kernels()
        covariances = kernel_columns(model)[0]
        state = model.state
        joint = None
        if state.joint_inverse_factor is not None:
            Z = state.inducing
            joint = JointCovariance(_host(Z), np.stack([_host(factor_kzz(k, Z, model.jitter, False)[0])
                                                        for k in covariances]), _host(state.joint_inverse_factor))
        return MixedPredictor(tuple(parts), tuple(k.to_sklearn() for k in distinct), tuple(index),
                              _host(state.mixing), _host(state.offset), joint, model.features)

    def search_state(self, state, groups):
        """The exact search's state: ``groups`` with the mixing and offsets as they stand."""
        return dataclasses.replace(state, groups=tuple(groups), mixing=_host(state.mixing),
                                   offset=_host(state.offset), joint_inverse_factor=None)


def kernel_columns(model):
    """The covariances (:mod:`skgp_sparse.features`) under the model's distinct kernels,
    and the index among them of each latent column's kernel."""
    distinct, index = model.distinct_kernels()
    covariances = [model.covariances[index.index(k)] for k in range(len(distinct))]
    return covariances, [index[g] for g, width in enumerate(model.state.widths) for _ in range(width)]


def _host(a):
    """A float64 numpy copy of ``a``."""
    return np.array(backend.to_numpy(a), dtype=np.float64)


def _like(a, like):
    """The array ``a`` in the namespace, device and dtype of ``like``."""
    xp = backend.namespace(like)
    if backend.namespace(a) is not xp:
        a = backend.to_namespace(backend.to_numpy(a), xp, device=backend.device_of(like))
    return xp.astype(a, like.dtype, copy=False)
