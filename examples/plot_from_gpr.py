"""
Coming from GaussianProcessRegressor: the switch in one line
============================================================

The same kernel, the same data, the same calls: ``GaussianProcessRegressor`` on the 3,000
rows it can afford, and ``SparseGPRegressor`` on those rows and on 30,000. The sparse
model keeps 256 inducing inputs, so its fit grows linearly with the rows where GPR's grows
with their cube.

The script prints each fit's time and test RMSE and saves ``from_gpr.png`` (the three
predictive means and bands). ``SKGP_EXAMPLES_QUICK=1`` uses 600 and 6,000 rows.
"""

import os
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

from skgp_sparse import SparseGPRegressor

QUICK = bool(os.environ.get("SKGP_EXAMPLES_QUICK"))
small, large = (600, 6_000) if QUICK else (3_000, 30_000)
rng = np.random.default_rng(0)


def sample(n):
    X = rng.uniform(-4, 4, size=(n, 1))
    return X, np.sin(3 * X[:, 0]) * np.exp(-0.1 * X[:, 0] ** 2) + 0.2 * rng.standard_normal(n)


X, y = sample(large)
X_test, y_test = sample(2_000)
kernel = ConstantKernel(1.0) * RBF(1.0) + WhiteKernel(0.1)

models = {
    f"GaussianProcessRegressor, {small:,} rows": (GaussianProcessRegressor(kernel, normalize_y=True), small),
    # The one-line switch: the same kernel (its WhiteKernel is the observation noise).
    f"SparseGPRegressor, {small:,} rows": (SparseGPRegressor(kernel, random_state=0), small),
    f"SparseGPRegressor, {large:,} rows": (SparseGPRegressor(kernel, random_state=0), large),
}
grid = np.linspace(-4.5, 4.5, 300)[:, None]
fig, ax = plt.subplots(figsize=(7, 4.2))
ax.plot(X[:1500, 0], y[:1500], ".", color="0.75", ms=2, label="data (1,500 rows)")
for i, (label, (model, n)) in enumerate(models.items()):
    start = time.perf_counter()
    model.fit(X[:n], y[:n])
    seconds = time.perf_counter() - start
    rmse = np.sqrt(np.mean((model.predict(X_test) - y_test) ** 2))
    print(f"{label}: fit {seconds:.1f} s, test RMSE {rmse:.4f}, kernel {model.kernel_}")
    mean, std = model.predict(grid, return_std=True)
    ax.plot(grid[:, 0], mean, f"C{i}", lw=2 - 0.5 * i, label=f"{label}: {seconds:.1f} s, RMSE {rmse:.3f}")
    ax.fill_between(grid[:, 0], mean - 1.96 * std, mean + 1.96 * std, color=f"C{i}", alpha=0.12)
ax.set_title("Same kernel, same calls; noise floor RMSE 0.2", fontsize=10)
ax.legend(fontsize=7, loc="lower left")
fig.tight_layout()
fig.savefig("from_gpr.png", dpi=110)
print("saved from_gpr.png")
