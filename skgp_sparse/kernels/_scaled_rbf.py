"""An RBF kernel whose per-feature length scales share one learned factor."""

import numpy as np
from sklearn.gaussian_process.kernels import RBF

__all__ = ["FeatureScaledRBF"]


class FeatureScaledRBF(RBF):
    """Radial basis function kernel with length scales ``length_scale * feature_scale``.

    ``k(x, x') = exp(-1/2 sum_d ((x_d - x'_d) / (length_scale * feature_scale_d))^2)``:
    scikit-learn's RBF on the features divided by ``feature_scale``, with one (isotropic)
    length scale. ``feature_scale`` is fixed, typically each feature's spread, so the
    kernel is isotropic in standardised units without the estimator standardising X.
    Only ``length_scale`` is a hyperparameter: an anisotropic RBF with this many features
    learns one length scale each, this kernel one in all.

    Parameters
    ----------
    length_scale : float, default=1.0
        The shared factor of every feature's length scale (positive).
    length_scale_bounds : pair of floats >= 0 or "fixed", default=(1e-5, 1e5)
        Bounds of ``length_scale``.
    feature_scale : array-like of shape (n_features,) or None, default=None
        Fixed positive scale of each feature; None treats every feature as of scale 1
        (the plain isotropic RBF).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.gaussian_process.kernels import RBF
    >>> X = np.array([[0.0, 0.0], [1.0, 10.0]])
    >>> k = FeatureScaledRBF(2.0, feature_scale=[1.0, 10.0])
    >>> bool(np.allclose(k(X), RBF([2.0, 20.0])(X)))
    True
    """

    def __init__(self, length_scale=1.0, length_scale_bounds=(1e-5, 1e5), feature_scale=None):
        super().__init__(length_scale=length_scale, length_scale_bounds=length_scale_bounds)
        self.feature_scale = feature_scale

    def checked_feature_scale(self):
        """``feature_scale`` as a float64 vector, or None when it is None.

        Raises
        ------
        ValueError
            If an entry is not positive and finite.
        """
        if self.feature_scale is None:
            return None
        scale = np.asarray(self.feature_scale, dtype=np.float64).reshape(-1)
        if not (np.all(np.isfinite(scale)) and np.all(scale > 0)):
            raise ValueError("FeatureScaledRBF: every entry of feature_scale must be positive and finite")
        return scale

    def scales(self, n_features):
        """Each feature's fixed scale as a float64 vector of ``n_features`` entries.

        Raises
        ------
        ValueError
            If ``length_scale`` is not one number, or ``feature_scale`` is not
            ``n_features`` positive finite numbers.
        """
        if np.ndim(self.length_scale) != 0:
            raise ValueError(
                f"FeatureScaledRBF: length_scale must be one number (the factor shared by every "
                f"feature), got an array of shape {np.shape(self.length_scale)}; put the features' "
                "own scales in feature_scale")
        scale = self.checked_feature_scale()
        if scale is None:
            return np.ones(n_features)
        if scale.shape != (n_features,):
            raise ValueError(
                f"FeatureScaledRBF: feature_scale has {scale.size} entries but X has {n_features} features")
        return scale

    def __call__(self, X, Y=None, eval_gradient=False):
        X = np.atleast_2d(X)
        scale = self.scales(X.shape[1])
        return super().__call__(X / scale, None if Y is None else np.atleast_2d(Y) / scale, eval_gradient)

    def __repr__(self):
        # As scikit-learn's kernels print: three significant digits. A length scale that
        # is not one number (refused at evaluation) prints as it is.
        ls = self.length_scale
        text = f"{ls:.3g}" if np.ndim(ls) == 0 else repr(ls)
        if self.feature_scale is None:
            return f"{type(self).__name__}(length_scale={text})"
        scale = ", ".join(f"{s:.3g}" for s in np.asarray(self.feature_scale, dtype=np.float64).reshape(-1))
        return f"{type(self).__name__}(length_scale={text}, feature_scale=[{scale}])"
