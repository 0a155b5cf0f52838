"""
A large 2-D map: inducing points against Fourier features
=========================================================

Elevation over 138,632 cells of a digital elevation model (the Jacksboro fault,
Tennessee, which ships with matplotlib: nothing is downloaded), as a function of the
cell's position: a large set of few columns, where Fourier features pay. Eighty per cent
of the cells train, the rest measure the error.

- ``inducing_features="points"`` (the default, M = 256): an exact search on a sample of
  the rows, then minibatch epochs over all of them.
- ``inducing_features="fourier"`` (M = 512 integrated Fourier features): one pass over the
  rows gathers the features' sums, then the hyperparameters are searched at O(M^3) an
  iteration, whatever the number of rows, and q(u) is set in closed form.

The figure shows the held-out map and both fits, with their fit times and errors.

Saves ``fourier_features.png``. ``SKGP_EXAMPLES_QUICK=1`` uses 4,000 cells and fewer
epochs for the points.
"""

import os
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.cbook as cbook
import matplotlib.pyplot as plt
import numpy as np

from skgp_sparse import SparseGPRegressor

QUICK = bool(os.environ.get("SKGP_EXAMPLES_QUICK"))

dem = cbook.get_sample_data("jacksboro_fault_dem.npz")
elevation = dem["elevation"].astype(np.float64)
rows, cols = np.indices(elevation.shape)
# Position in kilometres (a cell is about 90 m square at this latitude).
X = np.column_stack([cols.ravel() * 0.0745, rows.ravel() * 0.0926])
y = elevation.ravel()

rng = np.random.default_rng(0)
order = rng.permutation(y.size)
if QUICK:
    order = order[:4_000]
n_train = int(0.8 * order.size)
train, test = order[:n_train], order[n_train:]

fits = {}
for name, settings in [("points", dict(n_inducing=256, max_iter=3 if QUICK else 30)),
                       ("fourier", dict(inducing_features="fourier", n_inducing=512))]:
    start = time.perf_counter()
    model = SparseGPRegressor(random_state=0, **settings).fit(X[train], y[train])
    seconds = time.perf_counter() - start
    rmse = float(np.sqrt(np.mean((model.predict(X[test]) - y[test]) ** 2)))
    fits[name] = (model, seconds, rmse)
    print(f"{name:8s} M = {model.variational_state_.inducing.shape[0]:4d}  fit {seconds:6.1f} s  "
          f"test RMSE {rmse:6.2f} m  ({n_train} training cells)")

fig, axes = plt.subplots(1, 3, figsize=(15, 4.6), sharey=True)
extent = (0, elevation.shape[1] * 0.0745, elevation.shape[0] * 0.0926, 0)
levels = dict(vmin=elevation.min(), vmax=elevation.max(), cmap="terrain")
shown = np.full(y.size, np.nan)
shown[test] = y[test]
axes[0].imshow(shown.reshape(elevation.shape), extent=extent, **levels)
axes[0].set_title(f"held-out cells ({test.size})")
for ax, (name, (model, seconds, rmse)) in zip(axes[1:], fits.items()):
    mean = model.predict(X).reshape(elevation.shape)
    ax.imshow(mean, extent=extent, **levels)
    ax.set_title(f"{name}: fit {seconds:.1f} s, test RMSE {rmse:.1f} m")
for ax in axes:
    ax.set_xlabel("east (km)")
axes[0].set_ylabel("south (km)")
fig.tight_layout()
fig.savefig("fourier_features.png", dpi=80)
print("saved fourier_features.png")
