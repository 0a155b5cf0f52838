"""
Classification: predict_proba contours
======================================

:class:`~skgp_sparse.SparseGPClassifier` on two synthetic 2-D problems: two interleaved
half-moons (binary, probit likelihood) and three overlapping blobs (multiclass, robust-max
likelihood, one latent function per class). The filled contours are ``predict_proba`` of
the first class (left) and of the most probable class (right); the triangles are the
fitted inducing inputs. Away from the data the probabilities fall back towards the prior
(1/2 and 1/3): the model says that it does not know.

Saves ``classification.png``. ``SKGP_EXAMPLES_QUICK=1`` uses fewer rows and epochs.
"""

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import make_blobs, make_moons
from sklearn.model_selection import train_test_split

from skgp_sparse import SparseGPClassifier

QUICK = bool(os.environ.get("SKGP_EXAMPLES_QUICK"))
N = 600 if QUICK else 3000

problems = {
    "two moons (probit)": make_moons(n_samples=N, noise=0.25, random_state=0),
    "three blobs (robust-max)": make_blobs(n_samples=N, centers=[[-2, -1], [2, -1], [0, 2]], cluster_std=1.2,
                                           random_state=0),
}

fig, axes = plt.subplots(1, 2, figsize=(10, 4.4))
for ax, (title, (X, y)) in zip(axes, problems.items()):
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=0)
    clf = SparseGPClassifier(n_inducing=16, batch_size=256, max_iter=20 if QUICK else 60, random_state=0)
    clf.fit(X_train, y_train)
    accuracy = clf.score(X_test, y_test)
    print(f"{title}: test accuracy {accuracy:.3f}, likelihood {clf.likelihood_ if hasattr(clf, 'likelihood_') else clf.likelihood}")

    lo, hi = X.min(axis=0) - 1.5, X.max(axis=0) + 1.5
    g0, g1 = np.meshgrid(np.linspace(lo[0], hi[0], 150), np.linspace(lo[1], hi[1], 150))
    proba = clf.predict_proba(np.column_stack([g0.ravel(), g1.ravel()]))
    if proba.shape[1] == 2:
        shown, label = proba[:, 0], f"P(class {clf.classes_[0]})"
    else:
        shown, label = proba.max(axis=1), "P(most probable class)"
    filled = ax.contourf(g0, g1, shown.reshape(g0.shape), levels=np.linspace(0, 1, 11), cmap="RdBu", alpha=0.8)
    ax.contour(g0, g1, shown.reshape(g0.shape), levels=[0.5], colors="k", linewidths=1)
    ax.scatter(X_train[:, 0], X_train[:, 1], c=y_train, cmap="viridis", s=6, edgecolors="none")
    ax.plot(clf.inducing_points_[:, 0], clf.inducing_points_[:, 1], "^", color="C3", mec="k", ms=8,
            label="inducing inputs")
    ax.set_title(f"{title}: test accuracy {accuracy:.3f}", fontsize=10)
    ax.legend(loc="lower left", fontsize=8)
    fig.colorbar(filled, ax=ax, label=label)
fig.tight_layout()
fig.savefig("classification.png", dpi=110)
print("saved classification.png")
