"""
Several correlated outputs, with a block of one output missing
==============================================================

Three outputs that are linear mixtures of two smooth latent functions, ``f = W g``, plus
noise. Output 0 is not observed on a block of x (its targets there are NaN); the other two
outputs are observed everywhere.

Two regressors are fitted to the same targets with ``missing_targets="mask"``, so that each
NaN drops out of the fit entry by entry:

- ``n_latent=None``: independent outputs sharing one kernel, each with its own noise. Output
  0 learns nothing from outputs 1 and 2, so on the hidden block its prediction falls back
  towards the prior.
- ``n_latent=2``: the linear model of coregionalisation (LMC). The two latent functions are
  learned from all three outputs, and output 0 on the hidden block is read off them through
  the learned mixing ``mixing_matrix_``.

Each panel shows one output: the training data, the hidden block's true values, and both
models' predictions with bands of +-2 standard deviations (of y, noise included). The RMSE
of both models on the hidden block, against the noise-free values of output 0 there, is
printed and shown in the first panel's title.

Saves ``multioutput.png``. ``SKGP_EXAMPLES_QUICK=1`` uses fewer rows.
"""

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from skgp_sparse import SparseGPRegressor

QUICK = bool(os.environ.get("SKGP_EXAMPLES_QUICK"))
N = 200 if QUICK else 400
M = 20 if QUICK else 30

rng = np.random.default_rng(0)
X = np.sort(rng.uniform(-4, 4, size=(N, 1)), axis=0)
x = X[:, 0]
latents = np.column_stack([np.sin(2.5 * x), np.cos(0.8 * x)])
W = np.array([[1.0, 0.6], [0.7, -0.8], [-0.5, 1.0]])  # outputs x latents
F = latents @ W.T
Y = F + 0.1 * rng.standard_normal(F.shape)

# Hide output 0 on a block of x: those entries become NaN.
hidden = (x > 0.5) & (x < 2.5)
Y_train = Y.copy()
Y_train[hidden, 0] = np.nan
print(f"{N} rows, 3 outputs; output 0 hidden on {hidden.sum()} rows with 0.5 < x < 2.5")

models = {
    "independent": SparseGPRegressor(n_inducing=M, missing_targets="mask", random_state=0),
    "LMC, n_latent=2": SparseGPRegressor(n_inducing=M, n_latent=2, missing_targets="mask", random_state=0),
}
grid = np.linspace(-4.2, 4.2, 300)[:, None]
predictions, rmse = {}, {}
for name, reg in models.items():
    reg.fit(X, Y_train)
    predictions[name] = reg.predict(grid, return_std=True)
    rmse[name] = np.sqrt(np.mean((reg.predict(X[hidden])[:, 0] - F[hidden, 0]) ** 2))
    print(f"{name:16s} RMSE of output 0 on the hidden block (against the noise-free values): {rmse[name]:.3f}")
print("LMC mixing matrix (normalised scale):\n", np.round(models["LMC, n_latent=2"].mixing_matrix_, 2))

fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), sharex=True)
colours = {"independent": "C1", "LMC, n_latent=2": "C0"}
for p, ax in enumerate(axes):
    seen = ~np.isnan(Y_train[:, p])
    ax.plot(x[seen], Y_train[seen, p], ".", color="0.6", ms=3, label="training data")
    if p == 0:
        ax.axvspan(0.5, 2.5, color="0.92", zorder=0)
        ax.plot(x[hidden], Y[hidden, 0], "x", color="0.45", ms=3, label="hidden targets")
        ax.plot(x[hidden], F[hidden, 0], "k--", lw=1.2, zorder=5, label="hidden block, noise-free")
    for name, (mean, std) in predictions.items():
        c = colours[name]
        ax.plot(grid[:, 0], mean[:, p], color=c, lw=1.5, label=name)
        ax.fill_between(grid[:, 0], mean[:, p] - 2 * std[:, p], mean[:, p] + 2 * std[:, p], color=c, alpha=0.2)
    title = f"output {p}"
    if p == 0:
        title += " (hidden on the grey block)\nRMSE there: " + ", ".join(f"{n} {e:.3f}" for n, e in rmse.items())
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("x")
axes[0].set_ylabel("y")
handles, labels = axes[0].get_legend_handles_labels()
fig.legend(handles, labels, loc="lower center", ncol=5, fontsize=9, frameon=False)
fig.tight_layout(rect=(0, 0.08, 1, 1))
fig.savefig("multioutput.png", dpi=110)
print("saved multioutput.png")
