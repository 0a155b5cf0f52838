"""scikit-learn estimators: validation, delegation and fitted attributes only."""

from .classifier import SparseGPClassifier
from .regressor import SparseGPRegressor

__all__ = ["SparseGPClassifier", "SparseGPRegressor"]
