"""GPyTorch multi-output SVGP peers: an LMC model and independent outputs.

Both follow GPyTorch's "SVGP multitask" recipe, set up to match our estimator's knobs:

* a batch of ``L`` latent GPs, each a whitened ``VariationalStrategy`` with a
  ``CholeskyVariationalDistribution`` (``batch_shape=[L]``) and ONE set of ``M`` inducing
  inputs shared by all latents (an ``(M, D)`` tensor broadcast over the batch; learned),
  started at ``M`` random training rows (:func:`_data.init_inducing`, as the single-output
  peer does);
* zero prior mean and ``ScaleKernel(MaternKernel(nu=2.5, ard_num_dims=D))`` batched over the
  latents, started at outputscale 1 and length scales 1: our default kernel
  (``ConstantKernel(1) * Matern(ones(D), nu=2.5)``) on standardised inputs;
* ``MultitaskGaussianLikelihood(num_tasks=P, rank=0, has_global_noise=False)``: one noise
  variance per output and nothing shared, started at 0.1 (our ``noise_variance`` default);
* LMC: ``LMCVariationalStrategy`` mixes the ``L`` latents into ``P`` outputs with a learned
  ``L x P`` coefficient matrix (GPyTorch draws it from N(0, 1) at construction; seeded);
  independent: ``IndependentMultitaskVariationalStrategy`` with ``L = P``, latent ``p`` is
  output ``p``;
* missing targets: ``gpytorch.settings.observation_nan_policy("fill")`` during training --
  NaN entries are replaced by a dummy value and their expected-log-likelihood terms are
  multiplied by 0, so a row with some outputs missing still trains the others (``"mask"``
  drops an output from the WHOLE minibatch as soon as one row misses it, and builds a
  masked covariance each step);
* one Adam (lr 0.01, GPyTorch's example) over all parameters for ``n_steps`` minibatch
  steps: consecutive slices of a fresh seeded permutation each epoch, the last partial batch
  kept; ``VariationalELBO(num_data=N)`` with N the number of ROWS, so each minibatch is
  scaled to the full data;
* float64 and ``threads`` intra-op threads (set for the duration and restored, via
  :func:`_gpytorch_peer._torch_env`, the single-output peer's convention).

Peak memory: growth of the process's peak resident set size over the fit
(:class:`_peak_memory.PeakRSS`: ``VmHWM`` reset through ``/proc/self/clear_refs``, else the
``ru_maxrss`` delta), the same measure the benchmark applies to our estimator and the exact
GP. Not tracemalloc: it does not see torch's allocations.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch
import gpytorch
from gpytorch.distributions import MultivariateNormal
from gpytorch.kernels import MaternKernel, RBFKernel, ScaleKernel
from gpytorch.likelihoods import MultitaskGaussianLikelihood
from gpytorch.means import ZeroMean
from gpytorch.mlls import VariationalELBO
from gpytorch.models import ApproximateGP
from gpytorch.variational import (
    CholeskyVariationalDistribution,
    IndependentMultitaskVariationalStrategy,
    LMCVariationalStrategy,
    VariationalStrategy,
)

from _data import init_inducing
from _gpytorch_peer import _torch_env
from _peak_memory import PeakRSS

__all__ = ["MultitaskSVGP", "FittedMultitask", "fit_gpytorch_lmc", "fit_gpytorch_independent"]


class MultitaskSVGP(ApproximateGP):
    """``L`` latent SVGPs with shared inducing inputs, mixed (LMC) or one per output.

    Parameters
    ----------
    Z0 : ndarray, shape (M, D)
        Initial inducing inputs, shared by every latent.
    n_tasks : int
        Number of outputs ``P``.
    n_latent : int
        Number of latent GPs ``L`` (must equal ``n_tasks`` when ``independent``).
    independent : bool
        True: latent ``p`` is output ``p``. False: a learned linear mix (LMC).
    kernel : {"matern52", "rbf"}
        Base kernel (ARD), times a learned scale, one per latent.
    """

    def __init__(self, Z0, n_tasks, n_latent, independent=False, kernel="matern52"):
        Z = torch.as_tensor(np.asarray(Z0, dtype=np.float64))
        M, D = Z.shape
        latents = torch.Size([n_latent])
        q_u = CholeskyVariationalDistribution(M, batch_shape=latents)
        # Z without a batch dimension: broadcast over the latents, i.e. shared (and its
        # gradient is the sum over latents), as our estimator shares one inducing set.
        base = VariationalStrategy(self, Z, q_u, learn_inducing_locations=True)
        if independent:
            if n_latent != n_tasks:
                raise ValueError("independent outputs need n_latent == n_tasks")
            strategy = IndependentMultitaskVariationalStrategy(base, num_tasks=n_tasks)
        else:
            strategy = LMCVariationalStrategy(base, num_tasks=n_tasks, num_latents=n_latent, latent_dim=-1)
        super().__init__(strategy)
        self.mean_module = ZeroMean(batch_shape=latents)
        if kernel == "matern52":
            k = MaternKernel(nu=2.5, ard_num_dims=D, batch_shape=latents)
        elif kernel == "rbf":
            k = RBFKernel(ard_num_dims=D, batch_shape=latents)
        else:
            raise ValueError(f"kernel must be 'matern52' or 'rbf', got {kernel!r}")
        self.covar_module = ScaleKernel(k, batch_shape=latents)

    def forward(self, x):
        # x arrives broadcast to the latent batch: (L, n, D) -> an (L,)-batch of MVNs.
        return MultivariateNormal(self.mean_module(x), self.covar_module(x))


@dataclass
class FittedMultitask:
    """A trained peer: ``predict(X) -> (mean, var)``, both ``(n, P)``, noise included."""

    model: MultitaskSVGP
    likelihood: MultitaskGaussianLikelihood
    threads: int
    fit_seconds: float
    peak_mib: float
    peak_method: str
    n_steps: int
    elbo_last: float  # mean per-row minibatch ELBO over the last 50 steps (a noisy estimate)
    params: dict = field(default_factory=dict)

    def predict(self, X, batch_size=1024):
        """Predictive mean and variance of every output (latent variance + its noise)."""
        means, variances = [], []
        with _torch_env(self.threads), torch.no_grad():
            Xq = torch.as_tensor(np.ascontiguousarray(X, dtype=np.float64))
            for start in range(0, Xq.shape[0], batch_size):
                pred = self.likelihood(self.model(Xq[start:start + batch_size]))
                means.append(pred.mean)
                variances.append(pred.variance)
        return torch.cat(means).numpy(), torch.cat(variances).numpy()


def _fit(X, Y_nan, n_latent, n_inducing, batch_size, n_steps, lr, seed, threads, independent,
         kernel, init_noise):
    X = np.ascontiguousarray(X, dtype=np.float64)
    Y_nan = np.ascontiguousarray(Y_nan, dtype=np.float64)
    N, P = Y_nan.shape
    M = min(int(n_inducing), N)
    Z0 = init_inducing(X, M, random_state=seed)
    batch_size = min(int(batch_size), N)
    with _torch_env(threads), PeakRSS() as mem:
        t0 = time.perf_counter()
        torch.manual_seed(seed)  # the LMC coefficients are drawn at construction
        Xt, Yt = torch.as_tensor(X), torch.as_tensor(Y_nan)
        model = MultitaskSVGP(Z0, P, P if independent else n_latent, independent, kernel)
        likelihood = MultitaskGaussianLikelihood(num_tasks=P, rank=0, has_global_noise=False)
        likelihood.task_noises = torch.full((P,), float(init_noise))
        elbo = VariationalELBO(likelihood, model, num_data=N)
        opt = torch.optim.Adam([{"params": model.parameters()}, {"params": likelihood.parameters()}], lr=lr)
        model.train()
        likelihood.train()
        gen = torch.Generator().manual_seed(seed)  # shuffling independent of the init RNG
        history, step = [], 0
        with gpytorch.settings.observation_nan_policy("fill"):
            while step < n_steps:
                perm = torch.randperm(N, generator=gen)
                for start in range(0, N, batch_size):
                    if step >= n_steps:
                        break
                    idx = perm[start:start + batch_size]
                    opt.zero_grad(set_to_none=True)
                    loss = -elbo(model(Xt[idx]), Yt[idx])
                    loss.backward()
                    opt.step()
                    history.append(-loss.item())
                    step += 1
        model.eval()
        likelihood.eval()
        fit_seconds = time.perf_counter() - t0
    with torch.no_grad():
        params = dict(
            noise=likelihood.task_noises.tolist(),
            outputscale=model.covar_module.outputscale.tolist(),
            lengthscale=model.covar_module.base_kernel.lengthscale.squeeze(-2).tolist(),
        )
        if not independent:
            params["lmc_coefficients"] = model.variational_strategy.lmc_coefficients.tolist()
    return FittedMultitask(model, likelihood, threads, fit_seconds, mem.peak_mib, mem.method, n_steps,
                           float(np.mean(history[-50:])), params)


def fit_gpytorch_lmc(X, Y_nan, n_latent, n_inducing=256, batch_size=1024, n_steps=500, lr=0.01, seed=0,
                     threads=2, kernel="matern52", init_noise=0.1):
    """Train GPyTorch's LMC SVGP on ``X`` (n, D) and ``Y_nan`` (n, P), NaN = not observed.

    Parameters
    ----------
    X : ndarray, shape (n, D)
    Y_nan : ndarray, shape (n, P)
        Targets; NaN entries are left out of the likelihood.
    n_latent : int
        Number of latent GPs mixed into the ``P`` outputs.
    n_inducing : int, default=256
        Shared inducing inputs (clipped to n).
    batch_size : int, default=1024
        Rows per minibatch (clipped to n: full-batch steps on small sets).
    n_steps : int, default=500
        Adam steps.
    lr : float, default=0.01
    seed : int, default=0
        Seeds Z0, the LMC coefficients and the shuffling.
    threads : int, default=2
    kernel : {"matern52", "rbf"}, default="matern52"
    init_noise : float, default=0.1
        Initial noise variance of every output.

    Returns
    -------
    FittedMultitask
        ``predict(X) -> (mean, var)`` (noise included), ``fit_seconds`` (model construction
        plus training) and ``peak_mib`` (growth of the peak RSS over the fit).
    """
    return _fit(X, Y_nan, n_latent, n_inducing, batch_size, n_steps, lr, seed, threads, False, kernel, init_noise)


def fit_gpytorch_independent(X, Y_nan, n_inducing=256, batch_size=1024, n_steps=500, lr=0.01, seed=0,
                             threads=2, kernel="matern52", init_noise=0.1, n_latent=None):
    """Train GPyTorch's independent multitask SVGP: one latent GP per output.

    As :func:`fit_gpytorch_lmc` with ``L = P`` latents and no mixing; ``n_latent`` is
    accepted and ignored, so both functions take the same keywords.
    """
    return _fit(X, Y_nan, None, n_inducing, batch_size, n_steps, lr, seed, threads, True, kernel, init_noise)
