"""
Choosing n_inducing with GridSearchCV in a Pipeline
===================================================

:class:`~skgp_sparse.SparseGPRegressor` is an ordinary scikit-learn estimator: it clones,
sits in a :class:`~sklearn.pipeline.Pipeline` behind a
:class:`~sklearn.preprocessing.StandardScaler` (the default length scales of 1 assume
standardised inputs), and its parameters are searched by
:class:`~sklearn.model_selection.GridSearchCV`. Here the search is over the number of
inducing points on Friedman's first function (10 features, 5 of them noise). Accuracy
grows with ``n_inducing`` and so does the fit time (as M^2 per row): the plot shows where
more points stop paying.

Saves ``grid_search.png``. ``SKGP_EXAMPLES_QUICK=1`` uses fewer rows, epochs and grid points.
"""

import os
import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import make_friedman1
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

from skgp_sparse import SparseGPRegressor

QUICK = bool(os.environ.get("SKGP_EXAMPLES_QUICK"))
X, y = make_friedman1(n_samples=800 if QUICK else 6000, noise=0.5, random_state=0)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, random_state=0)

pipe = Pipeline([
    ("scale", StandardScaler()),
    ("gp", SparseGPRegressor(batch_size=512, max_iter=30 if QUICK else 100, random_state=0)),
])
grid = {"gp__n_inducing": [8, 32] if QUICK else [4, 8, 16, 32, 64, 128]}
search = GridSearchCV(pipe, grid, cv=3, scoring="neg_root_mean_squared_error")
with warnings.catch_warnings():
    warnings.simplefilter("ignore", ConvergenceWarning)  # short fits: the point is the comparison
    search.fit(X_train, y_train)

results = search.cv_results_
sizes = np.array(results["param_gp__n_inducing"], dtype=int)
rmse = -results["mean_test_score"]
for m, r, s in zip(sizes, rmse, results["mean_fit_time"]):
    print(f"n_inducing={m:4d}: CV RMSE {r:.3f}, fit {s:.1f} s")
best = search.best_params_["gp__n_inducing"]
test_rmse = np.sqrt(np.mean((search.predict(X_test) - y_test) ** 2))
print(f"best n_inducing={best}; refitted on all training rows, test RMSE {test_rmse:.3f} (noise std 0.5)")

fig, ax = plt.subplots(figsize=(5.5, 4))
ax.errorbar(sizes, rmse, yerr=results["std_test_score"], marker="o", label="3-fold CV RMSE")
ax.axhline(0.5, color="k", ls=":", lw=1, label="noise std (best possible)")
ax.set_xscale("log", base=2)
ax.set_xlabel("n_inducing")
ax.set_ylabel("RMSE")
twin = ax.twinx()
twin.plot(sizes, results["mean_fit_time"], "s--", color="C1", label="fit time")
twin.set_ylabel("mean fit time (s)", color="C1")
ax.set_title(f"Friedman #1: best n_inducing={best}, test RMSE {test_rmse:.3f}", fontsize=10)
ax.legend(loc="upper center", fontsize=8)
fig.tight_layout()
fig.savefig("grid_search.png", dpi=110)
print("saved grid_search.png")
