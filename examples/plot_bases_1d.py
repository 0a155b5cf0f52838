"""
The variational bases side by side in one dimension
===================================================

A 1-D regression problem whose function varies faster than a handful of inducing points
can follow, fitted with every basis that ``skgp_sparse`` implements
(:data:`skgp_sparse.bases.BASES`), in the spirit of Fig. 2 of the SOLVE-GP paper
(Shi, Titsias and Mnih, 2020). Each panel shows the posterior mean of the latent function,
its 95% band, the training data, and the inducing inputs: the covariance (and, for the
coupled basis, mean) set as triangles at the bottom, the extra orthogonal set of the
``"orth_decoupled"`` and ``"solve"`` bases as diamonds.

The bases with an orthogonal set get ``n_orthogonal = M`` extra points; for a fair
comparison the first panel is the coupled basis (SVGP) with the same total, 2M points, and
the second with M points, the covariance set of the others.

Saves ``bases_1d.png``. ``SKGP_EXAMPLES_QUICK=1`` uses fewer rows and epochs.
"""

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

from skgp_sparse import SparseGPRegressor
from skgp_sparse.bases import BASES, ORTHOGONAL_BASES

QUICK = bool(os.environ.get("SKGP_EXAMPLES_QUICK"))
N = 400 if QUICK else 2000
M = 8  # covariance (and coupled-mean) inducing points of every panel

rng = np.random.default_rng(0)
X = np.sort(rng.uniform(-6, 6, size=(N, 1)), axis=0)
f = np.sin(1.7 * X[:, 0]) + 0.5 * np.cos(4.3 * X[:, 0]) * np.exp(-0.05 * X[:, 0] ** 2)
y = f + 0.2 * rng.standard_normal(N)
grid = np.linspace(-7, 7, 400)[:, None]


def fit(basis, n_inducing, n_orthogonal):
    """A full-batch fit: every natural step lands on the optimal q for the current kernel."""
    reg = SparseGPRegressor(
        kernel=ConstantKernel() * RBF(1.0),
        basis=basis,
        n_inducing=n_inducing,
        n_orthogonal=n_orthogonal,
        batch_size=None,
        max_iter=100 if QUICK else 400,
        learning_rate=0.05,
        random_state=0,
    )
    return reg.fit(X, y)


# One panel per implemented basis, plus the coupled basis at 2M as the equal-cost reference.
panels = [("coupled", 2 * M, 0)]
for name in BASES:
    panels.append((name, M, M if name in ORTHOGONAL_BASES else 0))

fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), sharey=True, squeeze=False)
for ax, (name, n_inducing, n_orthogonal) in zip(axes[0], panels):
    reg = fit(name, n_inducing, n_orthogonal)
    mean, var = reg.latent_mean_and_variance(grid)
    mean, std = mean.ravel(), np.sqrt(var.ravel())
    elbo_per_row = reg.elbo(X, y) / N
    ax.plot(X[:, 0], y, ".", color="0.6", ms=2, label="data")
    ax.plot(grid[:, 0], mean, "C0", lw=1.5, label="posterior mean")
    ax.fill_between(grid[:, 0], mean - 1.96 * std, mean + 1.96 * std, color="C0", alpha=0.25, label="95% band")
    bottom = -2.6  # a strip below the data
    ax.plot(reg.inducing_points_[:, 0], np.full(len(reg.inducing_points_), bottom), "^", color="C3",
            ms=7, label="inducing inputs")
    orthogonal = getattr(reg, "orthogonal_points_", None)
    if orthogonal is not None and len(orthogonal):
        ax.plot(orthogonal[:, 0], np.full(len(orthogonal), bottom + 0.25), "D", color="C2", ms=5,
                label="orthogonal inputs")
    size = f"M={n_inducing}" + (f" + {n_orthogonal}" if n_orthogonal else "")
    ax.set_title(f"{name}, {size}\nELBO/row {elbo_per_row:.3f}", fontsize=10)
    ax.set_xlabel("x")
    print(f"{name:15s} {size:10s} ELBO per row {elbo_per_row:.4f}")
axes[0, 0].set_ylabel("y")
axes[0, 0].set_ylim(-2.9, 2.6)
handles, labels = axes[0, -1].get_legend_handles_labels()
fig.legend(handles, labels, loc="lower center", ncol=5, fontsize=9, frameon=False)
fig.tight_layout(rect=(0, 0.08, 1, 1))
fig.savefig("bases_1d.png", dpi=110)
print("saved bases_1d.png")
