"""Exact GP with a linear-model-of-coregionalisation prior, for small multi-output sets.

The reference the sparse methods approximate: no inducing points, no variational family,
no minibatches. For ``P`` outputs and ``L`` latent GPs,

    cov(f_p(x), f_q(x')) = sum_l W[p, l] W[q, l] k_l(x, x'),    y_p(x) = f_p(x) + e_p,

with ``k_l`` a unit-variance ARD kernel (Matern 5/2 by default, our estimator's default;
its amplitude lives in ``W``) and ``e_p ~ N(0, noise_p)``. Only OBSERVED entries enter the
likelihood: with ``NP`` observed (row, output) pairs ``(r_a, o_a)`` the dense ``NP x NP``
covariance is

    K[a, b] = sum_l W[o_a, l] W[o_b, l] k_l(X[r_a], X[r_b]) + noise[o_a] [a == b],

so a row with some outputs missing still informs the others, and nothing is imputed.
Zero prior mean (the targets are standardised).

Fit: the length scales (log), ``W`` and the noise variances (log) maximise the log
marginal likelihood with scipy's L-BFGS-B; the gradient comes from torch autograd (float64,
CPU) through the Cholesky factor. One O(NP^3) factorisation per evaluation: fine for a few
thousand entries (``economics``: 2,440 -- about a second per evaluation on 2 threads),
hopeless for ten thousand.

Start: ``W`` from the leading ``L`` eigenpairs of the outputs' pairwise correlation over the
training entries (``W W^T`` = 0.9 of its rank-``L`` part, leaving 0.1 for noise), length
scales 1 (the standardised inputs' spread, as the sparse models start), noise 0.1.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.optimize import minimize

from _gpytorch_peer import _torch_env
from _peak_memory import PeakRSS

__all__ = ["ExactLMC", "fit_exact_lmc"]

_LOG_LENGTHSCALE_BOUNDS = (math.log(1e-3), math.log(1e3))
_LOG_NOISE_BOUNDS = (math.log(1e-6), math.log(10.0))


def _unit_kernel(A, B, log_ls, kind):
    """Unit-variance ARD kernel matrix k(A, B) for one latent."""
    ls = torch.exp(log_ls)
    d2 = torch.cdist(A / ls, B / ls).square()
    if kind == "rbf":
        return torch.exp(-0.5 * d2)
    # Matern 5/2; the clamp keeps sqrt differentiable at distance 0 (the diagonal).
    r = torch.sqrt(5.0 * d2.clamp_min(1e-30))
    return (1.0 + r + r.square() / 3.0) * torch.exp(-r)


def _initial_W(Y_nan, n_latent):
    """``L`` leading scaled eigenvectors of the pairwise correlation of the observed targets."""
    import pandas as pd

    C = pd.DataFrame(Y_nan).corr().to_numpy()
    C = np.nan_to_num(C, nan=0.0)
    np.fill_diagonal(C, 1.0)
    vals, vecs = np.linalg.eigh(C)
    order = np.argsort(vals)[::-1][:n_latent]
    vals = np.clip(vals[order], 1e-2, None)
    return vecs[:, order] * np.sqrt(0.9 * vals)


@dataclass
class ExactLMC:
    """A fitted exact LMC GP: ``predict(X) -> (mean, var)``, both ``(n, P)``, noise included."""

    X_obs: torch.Tensor  # (NP, D) input of each observed entry
    out_obs: torch.Tensor  # (NP,) output index of each observed entry
    log_ls: torch.Tensor  # (L, D)
    W: torch.Tensor  # (P, L)
    noise: torch.Tensor  # (P,)
    chol: torch.Tensor  # (NP, NP) Cholesky factor of K at the optimum
    alpha: torch.Tensor  # (NP,) K^{-1} y
    kernel: str
    threads: int
    fit_seconds: float = 0.0
    peak_mib: float = 0.0
    peak_method: str = ""
    n_evals: int = 0
    log_marginal_likelihood: float = float("nan")
    message: str = ""
    params: dict = field(default_factory=dict)

    def predict(self, X, batch_size=256):
        """Predictive mean and variance of every output at ``X`` (latent variance + noise)."""
        P, L = self.W.shape
        means, variances = [], []
        with _torch_env(self.threads), torch.no_grad():
            Xq = torch.as_tensor(np.ascontiguousarray(X, dtype=np.float64))
            prior_var = (self.W ** 2).sum(dim=1)  # k_l(x, x) = 1
            for start in range(0, Xq.shape[0], batch_size):
                xb = Xq[start:start + batch_size]
                # Ks[i, p, a] = cov(f_p(x_i), f_{o_a}(X_obs[a])), built latent by latent.
                Ks = torch.zeros(xb.shape[0], P, self.X_obs.shape[0])
                for l in range(L):
                    k = _unit_kernel(xb, self.X_obs, self.log_ls[l], self.kernel)  # (b, NP)
                    Ks += self.W[:, l][None, :, None] * (self.W[self.out_obs, l][None, None, :] * k[:, None, :])
                Ks = Ks.reshape(-1, self.X_obs.shape[0])
                mean = Ks @ self.alpha
                v = torch.linalg.solve_triangular(self.chol, Ks.T, upper=False)
                var = prior_var.repeat(xb.shape[0]) - v.square().sum(dim=0)
                var = var.clamp_min(0.0) + self.noise.repeat(xb.shape[0])
                means.append(mean.reshape(-1, P))
                variances.append(var.reshape(-1, P))
        return torch.cat(means).numpy(), torch.cat(variances).numpy()


def fit_exact_lmc(X, Y_nan, n_latent, kernel="matern52", max_iter=300, threads=2, jitter=1e-8):
    """Fit the exact LMC GP to the observed (non-NaN) entries of ``Y_nan``.

    Parameters
    ----------
    X : ndarray, shape (n, D)
    Y_nan : ndarray, shape (n, P)
        Targets; NaN entries are left out.
    n_latent : int
        Number of latent GPs ``L``.
    kernel : {"matern52", "rbf"}, default="matern52"
    max_iter : int, default=300
        L-BFGS-B iterations.
    threads : int, default=2
        torch intra-op threads during the fit and prediction.
    jitter : float, default=1e-8
        Added to the diagonal of K (raised tenfold, up to 1e-3, if the factorisation fails).

    Returns
    -------
    ExactLMC
        With ``fit_seconds`` and ``peak_mib`` (growth of the peak RSS over the fit,
        :class:`_peak_memory.PeakRSS`).
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    Y_nan = np.asarray(Y_nan, dtype=np.float64)
    n, P = Y_nan.shape
    D, L = X.shape[1], int(n_latent)
    rows, outs = np.nonzero(np.isfinite(Y_nan))
    with _torch_env(threads), PeakRSS() as mem:
        t0 = time.perf_counter()
        Xo = torch.as_tensor(X[rows])
        oo = torch.as_tensor(outs)
        y = torch.as_tensor(Y_nan[rows, outs])
        NP = y.shape[0]
        sizes = [L * D, P * L, P]  # log length scales, W, log noise

        def unpack(theta):
            log_ls, W, log_noise = torch.split(theta, sizes)
            return log_ls.reshape(L, D), W.reshape(P, L), log_noise

        def covariance(log_ls, W, log_noise):
            K = torch.diag(torch.exp(log_noise)[oo])
            for l in range(L):
                w = W[oo, l]
                K = K + (w[:, None] * w[None, :]) * _unit_kernel(Xo, Xo, log_ls[l], kernel)
            return K

        def factor(K):
            eye = torch.eye(NP)
            jit = jitter
            while True:
                C, info = torch.linalg.cholesky_ex(K + jit * eye)
                if info == 0 or jit >= 1e-3:
                    return C, info == 0
                jit *= 10.0

        state = {"evals": 0}

        def neg_mll(theta_np):
            state["evals"] += 1
            theta = torch.tensor(theta_np, requires_grad=True)
            C, ok = factor(covariance(*unpack(theta)))
            if not ok:  # a numerically indefinite K: steer L-BFGS-B away from it
                return 1e10, np.zeros_like(theta_np)
            alpha = torch.cholesky_solve(y[:, None], C)[:, 0]
            nll = 0.5 * y @ alpha + torch.log(torch.diagonal(C)).sum() + 0.5 * NP * math.log(2 * math.pi)
            nll.backward()
            # Per entry, so the scale of the objective does not depend on the set size.
            return nll.item() / NP, theta.grad.numpy() / NP

        theta0 = np.concatenate([np.zeros(L * D), _initial_W(Y_nan, L).ravel(), np.full(P, math.log(0.1))])
        bounds = [_LOG_LENGTHSCALE_BOUNDS] * (L * D) + [(None, None)] * (P * L) + [_LOG_NOISE_BOUNDS] * P
        res = minimize(neg_mll, theta0, jac=True, method="L-BFGS-B", bounds=bounds,
                       options=dict(maxiter=max_iter))

        with torch.no_grad():
            log_ls, W, log_noise = unpack(torch.as_tensor(res.x))
            C, _ = factor(covariance(log_ls, W, log_noise))
            alpha = torch.cholesky_solve(y[:, None], C)[:, 0]
        fit_seconds = time.perf_counter() - t0
    noise = torch.exp(log_noise)
    params = dict(lengthscale=torch.exp(log_ls).tolist(), W=W.tolist(), noise=noise.tolist(),
                  output_covariance=(W @ W.T).tolist())
    return ExactLMC(Xo, oo, log_ls, W, noise, C, alpha, kernel, threads, fit_seconds, mem.peak_mib, mem.method,
                    state["evals"], float(-res.fun * NP), str(res.message), params)
