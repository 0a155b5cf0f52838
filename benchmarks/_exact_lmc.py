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
marginal likelihood with scipy's L-BFGS-B. The gradient is half analytic, half autograd:
d(-log p)/dK = (K^{-1} - a a^T) / 2 with a = K^{-1} y (from the Cholesky factor), scattered
into the full ``nP x nP`` grid and pushed back to the parameters by torch autograd (float64,
CPU) through ``sum_l k_l(X, X) kron W_l W_l^T``. Autograd through the Cholesky itself was
about ten times slower. One O(NP^3) factorisation and inverse per evaluation: fine for a few
thousand entries (``economics``: 2,440, about a second per evaluation on 2 threads),
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


def _sq_dists(A, B):
    """Per-feature squared differences, shape (D, len(A), len(B))."""
    return (A.T[:, :, None] - B.T[:, None, :]).square()


def _unit_kernels(sq, log_ls, kind):
    """Unit-variance ARD kernels of every latent from per-feature squared distances.

    ``sq``: (D, a, b) from :func:`_sq_dists`; ``log_ls``: (L, D). Returns (L, a, b).
    """
    d2 = torch.einsum("dij,ld->lij", sq, torch.exp(-2.0 * log_ls))
    if kind == "rbf":
        return torch.exp(-0.5 * d2)
    # Matern 5/2; the clamp keeps sqrt differentiable at distance 0 (the diagonal).
    r = torch.sqrt(5.0 * d2.clamp_min(1e-30))
    return (1.0 + r + r.square() / 3.0) * torch.exp(-r)


def _inverse_from_cholesky(C):
    """K^{-1} from its lower Cholesky factor, through LAPACK dpotri.

    (torch.cholesky_inverse took 12 s for a 2,440 x 2,440 factor on the 2-core benchmark
    machine, against 0.3 s for dpotri; dpotri fills one triangle, so mirror it.) scipy's
    OpenBLAS runs single-threaded here: torch's OpenMP workers still spin for a while after
    the previous torch call, and two OpenBLAS threads fighting them made a 480 x 480 dpotri
    take 1.3 s instead of 2 ms.
    """
    from scipy.linalg import lapack
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1, user_api="blas"):
        inv, info = lapack.dpotri(C.numpy(), lower=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"dpotri failed with info={info}")
    inv = np.tril(inv) + np.tril(inv, -1).T
    return torch.from_numpy(inv)


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

    X: torch.Tensor  # (n, D) training inputs (all rows)
    entries: torch.Tensor  # (NP,) observed entries as flat indices row * P + output
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
        n = self.X.shape[0]
        B = self.W[:, None, :] * self.W[None, :, :]  # (P, P, L) output covariance per latent
        prior_var = (self.W ** 2).sum(dim=1)  # k_l(x, x) = 1
        means, variances = [], []
        with _torch_env(self.threads), torch.no_grad():
            Xq = torch.as_tensor(np.ascontiguousarray(X, dtype=np.float64))
            for start in range(0, Xq.shape[0], batch_size):
                xb = Xq[start:start + batch_size]
                kx = _unit_kernels(_sq_dists(xb, self.X), self.log_ls, self.kernel)  # (L, b, n)
                # cov(f_p(x_i), f_q(X_j)) on the full grid, then the observed columns only.
                Ks = torch.einsum("lij,pql->ipjq", kx, B).reshape(xb.shape[0] * P, n * P)[:, self.entries]
                mean = Ks @ self.alpha
                v = torch.linalg.solve_triangular(self.chol, Ks.T, upper=False)
                var = prior_var.repeat(xb.shape[0]) - v.square().sum(dim=0)
                var = var.clamp_min(0.0) + self.noise.repeat(xb.shape[0])
                means.append(mean.reshape(-1, P))
                variances.append(var.reshape(-1, P))
        return torch.cat(means).numpy(), torch.cat(variances).numpy()


def fit_exact_lmc(X, Y_nan, n_latent, kernel="matern52", max_iter=200, threads=2, jitter=1e-8):
    """Fit the exact LMC GP to the observed (non-NaN) entries of ``Y_nan``.

    Parameters
    ----------
    X : ndarray, shape (n, D)
    Y_nan : ndarray, shape (n, P)
        Targets; NaN entries are left out.
    n_latent : int
        Number of latent GPs ``L``.
    kernel : {"matern52", "rbf"}, default="matern52"
    max_iter : int, default=200
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
    flat = np.flatnonzero(np.isfinite(Y_nan).ravel())  # row-major: entry (i, p) is i * P + p
    with _torch_env(threads), PeakRSS() as mem:
        t0 = time.perf_counter()
        Xt = torch.as_tensor(X)
        entries = torch.as_tensor(flat)
        outs = entries % P
        y = torch.as_tensor(Y_nan.ravel()[flat])
        NP = y.shape[0]
        sq = _sq_dists(Xt, Xt)  # (D, n, n), fixed: only the length scales move
        sizes = [L * D, P * L, P]  # log length scales, W, log noise

        def unpack(theta):
            log_ls, W, log_noise = torch.split(theta, sizes)
            return log_ls.reshape(L, D), W.reshape(P, L), log_noise

        def full_signal_cov(log_ls, W):
            """sum_l k_l(X, X) kron W_l W_l^T on the full (n P) x (n P) grid."""
            B = W[:, None, :] * W[None, :, :]
            return torch.einsum("lij,pql->ipjq", _unit_kernels(sq, log_ls, kernel), B).reshape(n * P, n * P)

        def factor(K):
            jit = jitter
            while True:
                C, info = torch.linalg.cholesky_ex(K + jit * torch.eye(NP))
                if info == 0 or jit >= 1e-3:
                    return C, info == 0
                jit *= 10.0

        state = {"evals": 0}

        def neg_mll(theta_np):
            state["evals"] += 1
            theta = torch.tensor(theta_np, requires_grad=True)
            log_ls, W, log_noise = unpack(theta)
            Kf = full_signal_cov(log_ls, W)
            noise = torch.exp(log_noise)[outs]
            with torch.no_grad():
                K = Kf[entries][:, entries] + torch.diag(noise)
                C, ok = factor(K)
                if not ok:  # numerically indefinite even with jitter: steer L-BFGS-B away
                    return 1e10, np.zeros_like(theta_np)
                alpha = torch.cholesky_solve(y[:, None], C)[:, 0]
                nll = 0.5 * y @ alpha + torch.log(torch.diagonal(C)).sum() + 0.5 * NP * math.log(2 * math.pi)
                G = 0.5 * (_inverse_from_cholesky(C) - torch.outer(alpha, alpha))  # d nll / dK
                Gf = torch.zeros(n * P, n * P)
                Gf[entries[:, None], entries[None, :]] = G
            torch.autograd.backward([Kf, noise], [Gf, torch.diagonal(G).clone()])
            # Per entry, so the scale of the objective does not depend on the set size.
            return nll.item() / NP, theta.grad.numpy() / NP

        theta0 = np.concatenate([np.zeros(L * D), _initial_W(Y_nan, L).ravel(), np.full(P, math.log(0.1))])
        bounds = [_LOG_LENGTHSCALE_BOUNDS] * (L * D) + [(None, None)] * (P * L) + [_LOG_NOISE_BOUNDS] * P
        res = minimize(neg_mll, theta0, jac=True, method="L-BFGS-B", bounds=bounds,
                       options=dict(maxiter=max_iter))

        with torch.no_grad():
            log_ls, W, log_noise = unpack(torch.as_tensor(res.x))
            noise = torch.exp(log_noise)
            C, _ = factor(full_signal_cov(log_ls, W)[entries][:, entries] + torch.diag(noise[outs]))
            alpha = torch.cholesky_solve(y[:, None], C)[:, 0]
        fit_seconds = time.perf_counter() - t0
    params = dict(lengthscale=torch.exp(log_ls).tolist(), W=W.tolist(), noise=noise.tolist(),
                  output_covariance=(W @ W.T).tolist())
    return ExactLMC(Xt, entries, log_ls, W, noise, C, alpha, kernel, threads, fit_seconds, mem.peak_mib, mem.method,
                    state["evals"], float(-res.fun * NP), str(res.message), params)
