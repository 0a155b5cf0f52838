"""scikit-learn estimators: validation, delegation and fitted attributes only."""

from .regressor import SparseGPRegressor

__all__ = ["SparseGPRegressor"]
