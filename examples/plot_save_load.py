"""
Saving and loading a model with joblib
======================================

A fitted estimator holds the scikit-learn kernel ``kernel_``, the inducing inputs and a few
small numpy arrays, and nothing that depends on the training size: ``joblib.dump`` writes
it in a file of about ``M^2`` numbers (about 1 MB at M=256), and the loaded model predicts
exactly as the original did. Numba's compiled kernels are not pickled; they are found again
(from numba's cache or by compiling) on first use after loading.

Saves ``save_load.png`` (the predictions of both models, which coincide) and removes the
model file it wrote. ``SKGP_EXAMPLES_QUICK=1`` uses fewer rows and epochs.
"""

import os
import tempfile
from pathlib import Path

import joblib
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from skgp_sparse import SparseGPRegressor

QUICK = bool(os.environ.get("SKGP_EXAMPLES_QUICK"))
rng = np.random.default_rng(0)
n = 5_000 if QUICK else 50_000
X = rng.uniform(-3, 3, size=(n, 1))
y = np.sin(2 * X[:, 0]) + 0.3 * rng.standard_normal(n)

reg = SparseGPRegressor(n_inducing=64, max_iter=5 if QUICK else 20, random_state=0).fit(X, y)
grid = np.linspace(-3.5, 3.5, 300)[:, None]
mean, std = reg.predict(grid, return_std=True)

with tempfile.TemporaryDirectory() as folder:
    path = Path(folder) / "sparse_gp.joblib"
    joblib.dump(reg, path)
    size_kb = path.stat().st_size / 1024
    loaded = joblib.load(path)
loaded_mean, loaded_std = loaded.predict(grid, return_std=True)

identical = np.array_equal(mean, loaded_mean) and np.array_equal(std, loaded_std)
print(f"{n:,} training rows, M={len(reg.inducing_points_)}: file {size_kb:.0f} KiB")
print(f"loaded model predicts identically: {identical}; kernel {loaded.kernel_}")
if not identical:
    raise SystemExit("the loaded model's predictions differ from the original's")

fig, ax = plt.subplots(figsize=(6, 4))
ax.plot(X[:2000, 0], y[:2000], ".", color="0.7", ms=2, label="data (2,000 of them)")
ax.plot(grid[:, 0], mean, "C0", lw=3, label="original model")
ax.fill_between(grid[:, 0], mean - 1.96 * std, mean + 1.96 * std, color="C0", alpha=0.2)
ax.plot(grid[:, 0], loaded_mean, "C1--", lw=1.5, label="loaded from joblib")
ax.set_title(f"joblib file {size_kb:.0f} KiB; predictions identical: {identical}", fontsize=10)
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig("save_load.png", dpi=110)
print("saved save_load.png")
