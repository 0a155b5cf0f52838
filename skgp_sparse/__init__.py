"""Sparse variational Gaussian processes as scikit-learn estimators."""

from ._estimators import SparseGPRegressor

__version__ = "0.1.0"
__all__ = ["SparseGPRegressor", "__version__"]
