"""Sparse variational Gaussian processes as scikit-learn estimators."""

from ._estimators import SparseGPClassifier, SparseGPRegressor

__version__ = "0.1.0"
__all__ = ["SparseGPClassifier", "SparseGPRegressor", "__version__"]
