"""GPyTorch SVGP peer that ``skgp_sparse`` is benchmarked against.

Set up to match our estimators on every knob that matters for a fair
comparison: the same data arrays, the same initial inducing inputs ``Z0``
(learned afterwards), the same number of inducing points, minibatch size,
float64 and thread count.  On a GPU (``bench_gpu.py``) the timing helper takes
``device="cuda"`` and ``dtype="float32"`` or ``"float64"``; the defaults (CPU, float64)
are what the CPU benchmarks have always run.

Model: ``ApproximateGP`` with a whitened ``VariationalStrategy``
(``learn_inducing_locations=True``), zero prior mean (sklearn's GP prior mean is
zero; the data are standardised) and ``ScaleKernel(RBFKernel(ard_num_dims=d))``,
i.e. sklearn's ``ConstantKernel() * RBF(np.ones(d))``.  Hyperparameters start at
the sklearn defaults (outputscale 1, lengthscales 1) and noise variance 1 (see
``init_*`` arguments), rather than GPyTorch's softplus(0) = 0.693 defaults.

Two training modes:

* ``"adam"``: one Adam (lr 0.01) over everything, variational parameters of a
  ``CholeskyVariationalDistribution`` included (GPyTorch SVGP tutorial);
* ``"ngd"``: ``NaturalVariationalDistribution`` stepped by
  ``gpytorch.optim.NGD`` (lr 0.1), and Adam (lr 0.01) on kernel, likelihood and
  inducing inputs (GPyTorch natural-gradient tutorial).

Gotchas handled here: ``torch.set_num_threads`` is process-wide, so the helpers
set it for their duration and restore it; models are built and run under a
float64 default dtype, so that tensors GPyTorch creates internally are float64
too; the last, partial minibatch of an epoch is kept (as ``DataLoader`` does),
and the ELBO's ``num_data`` is the full N so each minibatch is scaled correctly.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np
import torch
import gpytorch
from gpytorch.distributions import MultivariateNormal
from gpytorch.kernels import MaternKernel, RBFKernel, ScaleKernel
from gpytorch.likelihoods import BernoulliLikelihood, GaussianLikelihood
from gpytorch.means import ConstantMean, ZeroMean
from gpytorch.mlls import VariationalELBO
from gpytorch.models import ApproximateGP
from gpytorch.variational import (
    CholeskyVariationalDistribution,
    NaturalVariationalDistribution,
    VariationalStrategy,
)

__all__ = [
    "SVGPModel",
    "fit_gpytorch",
    "predict_gpytorch",
    "time_gpytorch_step",
    "fit_gpytorch_classifier",
    "predict_gpytorch_classifier",
    "versions",
]

_MODES = ("adam", "ngd")


def versions():
    """Versions of the peer stack, for the results file."""
    import linear_operator

    return {
        "torch": torch.__version__,
        "gpytorch": gpytorch.__version__,
        "linear_operator": linear_operator.__version__,
    }


@contextlib.contextmanager
def _torch_env(threads, dtype=torch.float64):
    """``dtype`` as the default dtype and ``threads`` intra-op threads, restored on exit."""
    old_dtype, old_threads = torch.get_default_dtype(), torch.get_num_threads()
    torch.set_default_dtype(dtype)
    if threads is not None:
        torch.set_num_threads(int(threads))
    try:
        yield
    finally:
        torch.set_default_dtype(old_dtype)
        torch.set_num_threads(old_threads)


class SVGPModel(ApproximateGP):
    """Single-output SVGP: whitened strategy, learned Z, zero (or constant) mean, ARD RBF."""

    def __init__(self, Z0, natural=False, mean="zero", kernel="rbf"):
        Z0 = torch.as_tensor(np.asarray(Z0), dtype=torch.float64)
        M, d = Z0.shape
        # The natural parametrisation is what NGD needs; Cholesky is the Adam default.
        q_cls = NaturalVariationalDistribution if natural else CholeskyVariationalDistribution
        q_u = q_cls(M)
        strategy = VariationalStrategy(self, Z0, q_u, learn_inducing_locations=True)
        super().__init__(strategy)
        self.mean_module = ConstantMean() if mean == "constant" else ZeroMean()
        base = MaternKernel(nu=2.5, ard_num_dims=d) if kernel == "matern52" else RBFKernel(ard_num_dims=d)
        self.covar_module = ScaleKernel(base)

    def forward(self, x):
        return MultivariateNormal(self.mean_module(x), self.covar_module(x))


def _as_tensor(a, device=None, dtype=torch.float64):
    out = torch.as_tensor(np.ascontiguousarray(a, dtype=np.float64))
    # The CPU float64 default returns the tensor as it was always made (no copy).
    return out if device is None and dtype == torch.float64 else out.to(device=device, dtype=dtype)


def _torch_dtype(dtype):
    """A torch floating dtype from ``"float64"``/``"float32"``, a numpy dtype or a torch dtype."""
    if isinstance(dtype, torch.dtype):
        return dtype
    return {"float64": torch.float64, "float32": torch.float32}[np.dtype(dtype).name]


def synchronize(device):
    """Wait for the kernels queued on ``device`` (a no-op on the CPU): GPU calls return as
    soon as their kernels are queued, so the clock is read only after this barrier."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _build(X, y, Z0, likelihood, mode, seed, init_lengthscale, init_outputscale, kernel="rbf",
           device=None, dtype=torch.float64):
    """Model, likelihood, ELBO and a ``step(idx) -> elbo`` closure; call inside ``_torch_env``.

    ``device``/``dtype``: where the data, model and likelihood live (default: CPU, float64).
    """
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
    torch.manual_seed(seed)
    Xt, yt = _as_tensor(X, device, dtype), _as_tensor(y, device, dtype)
    N = Xt.shape[0]
    model = SVGPModel(Z0, natural=(mode == "ngd"), kernel=kernel).to(device=device, dtype=dtype)
    model.covar_module.outputscale = init_outputscale
    model.covar_module.base_kernel.lengthscale = init_lengthscale
    likelihood = likelihood.to(device=device, dtype=dtype)
    elbo = VariationalELBO(likelihood, model, num_data=N)  # full N: minibatch ELBO is rescaled

    if mode == "adam":
        optimizers = [
            torch.optim.Adam(
                [{"params": model.parameters()}, {"params": likelihood.parameters()}], lr=0.01
            )
        ]
    else:
        # NGD takes the natural parameters only; Adam gets kernel, Z and noise
        # (model.hyperparameters() excludes the variational parameters).
        optimizers = [
            gpytorch.optim.NGD(model.variational_parameters(), num_data=N, lr=0.1),
            torch.optim.Adam(
                [{"params": model.hyperparameters()}, {"params": likelihood.parameters()}],
                lr=0.01,
            ),
        ]

    def step(idx):
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        out = model(Xt[idx])
        loss = -elbo(out, yt[idx])
        loss.backward()
        for opt in optimizers:
            opt.step()
        return -loss.item()

    model.train()
    likelihood.train()
    return model, likelihood, step, N


def _train(X, y, Z0, likelihood, batch_size, n_epochs, mode, seed, threads,
           init_lengthscale, init_outputscale, verbose, kernel="rbf", on_epoch=None, max_steps=None):
    """Train for ``n_epochs`` epochs, or until ``max_steps`` minibatch steps if that comes first
    (the last epoch is then a partial one; its ELBO is the mean over the steps it took)."""
    with _torch_env(threads):
        t0 = time.perf_counter()
        model, likelihood, step, N = _build(
            X, y, Z0, likelihood, mode, seed, init_lengthscale, init_outputscale, kernel
        )
        gen = torch.Generator().manual_seed(seed)  # shuffling independent of init RNG
        per_epoch = []
        paused = 0.0  # seconds spent in on_epoch, not counted as training
        steps = 0
        for epoch in range(n_epochs):
            perm = torch.randperm(N, generator=gen)
            tot, seen = 0.0, 0
            for start in range(0, N, batch_size):
                if max_steps is not None and steps >= max_steps:
                    break
                idx = perm[start:start + batch_size]
                tot += step(idx) * idx.numel()  # elbo is per datum: weight by batch size
                seen += idx.numel()
                steps += 1
            if seen == 0:
                break
            per_epoch.append(tot / seen)
            if on_epoch is not None:
                t_pause = time.perf_counter()
                model.eval()
                likelihood.eval()
                on_epoch(model, likelihood, t_pause - t0 - paused)
                model.train()
                likelihood.train()
                paused += time.perf_counter() - t_pause
            if verbose:
                print(f"  [{mode}] epoch {epoch + 1}/{n_epochs}  elbo/N {per_epoch[-1]:.4f}  "
                      f"{time.perf_counter() - t0:.1f}s", flush=True)
            if max_steps is not None and steps >= max_steps:
                break
        fit_seconds = time.perf_counter() - t0 - paused
    model.eval()
    likelihood.eval()
    return model, likelihood, fit_seconds, per_epoch


def fit_gpytorch(X, y, Z0, batch_size, n_epochs, mode="adam", seed=0, threads=2,
                 init_lengthscale=1.0, init_outputscale=1.0, init_noise=1.0, verbose=False,
                 kernel="rbf", max_steps=None):
    """Train a GPyTorch SVGP regressor on float64 numpy data.

    Returns ``(model, likelihood, fit_seconds, per_epoch_elbo)``; ``fit_seconds``
    is the wall time of model construction plus all epochs, ``per_epoch_elbo``
    the per-datum minibatch ELBO averaged over each epoch (a noisy running
    estimate, as logged by the tutorials, not a full-data ELBO). ``kernel``:
    ``"rbf"`` or ``"matern52"`` (ARD, times a scale); ``max_steps``: stop after
    this many minibatch steps even within an epoch (None: whole epochs only).
    """
    with _torch_env(threads):
        lik = GaussianLikelihood()
        lik.noise = init_noise
    return _train(X, y, Z0, lik, batch_size, n_epochs, mode, seed, threads,
                  init_lengthscale, init_outputscale, verbose, kernel, max_steps=max_steps)


def predict_gpytorch(model, likelihood, Xt, batch_size=4096, threads=2):
    """Predictive mean and variance of y (latent variance + noise) at ``Xt``, numpy float64."""
    means, variances = [], []
    with _torch_env(threads), torch.no_grad():
        Xq = _as_tensor(Xt)
        for start in range(0, Xq.shape[0], batch_size):
            pred = likelihood(model(Xq[start:start + batch_size]))  # adds the noise variance
            means.append(pred.mean)
            variances.append(pred.variance)
    return torch.cat(means).numpy(), torch.cat(variances).numpy()


def time_gpytorch_step(X, y, Z0, batch_size, n_steps, mode="adam", n_warmup=3, seed=0,
                       threads=2, init_lengthscale=1.0, init_outputscale=1.0, init_noise=1.0,
                       return_times=False, kernel="rbf", device="cpu", dtype="float64"):
    """Median wall seconds of one training step (forward, backward, optimizer step(s)).

    Minibatches are consecutive slices of a seeded permutation, as in training.
    The first ``n_warmup`` steps are run but not timed (allocator and thread-pool
    warm-up, first-call overheads, CUDA kernel caches).  ``return_times=True`` also
    returns all timed steps.

    ``device`` (e.g. ``"cuda"``) and ``dtype`` (``"float64"`` or ``"float32"``): where the
    data, model and likelihood live. The permutation is drawn on the CPU (the same rows
    on every device) and sent to the device once; on a GPU the device is synchronised
    before each clock read. The defaults are the CPU benchmarks' setting.
    """
    device = torch.device(device)
    dtype = _torch_dtype(dtype)
    with _torch_env(threads, dtype):
        lik = GaussianLikelihood()
        lik.noise = init_noise
        _, _, step, N = _build(X, y, Z0, lik, mode, seed, init_lengthscale, init_outputscale, kernel,
                               device=None if device.type == "cpu" else device, dtype=dtype)
        gen = torch.Generator().manual_seed(seed)
        total = n_warmup + n_steps
        perm = torch.cat([torch.randperm(N, generator=gen)
                          for _ in range(-(-total * batch_size // N))])
        if device.type != "cpu":
            perm = perm.to(device)
        times = []
        for s in range(total):
            idx = perm[s * batch_size:(s + 1) * batch_size]
            synchronize(device)
            t0 = time.perf_counter()
            step(idx)
            synchronize(device)
            if s >= n_warmup:
                times.append(time.perf_counter() - t0)
    med = float(np.median(times))
    return (med, times) if return_times else med


def fit_gpytorch_classifier(X, y, Z0, batch_size, n_epochs, mode="adam", seed=0, threads=2,
                            init_lengthscale=1.0, init_outputscale=1.0, verbose=False,
                            on_epoch=None, kernel="rbf", max_steps=None):
    """Binary SVGP classifier (``BernoulliLikelihood``, probit link), same recipe as the regressor.

    ``y`` may hold any two labels; they are mapped to 0/1 in ``np.unique`` order and
    kept on ``model.classes_``.  Returns ``(model, likelihood, fit_seconds, per_epoch_elbo)``.
    ``on_epoch(model, likelihood, train_seconds)`` runs after every epoch in eval mode; its
    own time is not counted. ``kernel`` and ``max_steps`` as in :func:`fit_gpytorch`.
    """
    classes, y01 = np.unique(np.asarray(y), return_inverse=True)
    if classes.size != 2:
        raise ValueError(f"binary classification needs exactly 2 classes, got {classes.size}")
    model, lik, secs, elbos = _train(
        X, y01.astype(np.float64), Z0, BernoulliLikelihood(), batch_size, n_epochs, mode,
        seed, threads, init_lengthscale, init_outputscale, verbose, kernel=kernel, on_epoch=on_epoch,
        max_steps=max_steps,
    )
    model.classes_ = classes
    return model, lik, secs, elbos


def predict_gpytorch_classifier(model, likelihood, Xt, batch_size=4096, threads=2):
    """P(y = model.classes_[1]) at ``Xt`` (probit of the latent predictive), numpy float64."""
    probs = []
    with _torch_env(threads), torch.no_grad():
        Xq = _as_tensor(Xt)
        for start in range(0, Xq.shape[0], batch_size):
            probs.append(likelihood(model(Xq[start:start + batch_size])).mean)
    return torch.cat(probs).numpy()
