"""A kernel as the covariances of inducing points.

The bases, the collapsed bounds and the predictors ask the covariances of inducing
features (the seam of :mod:`skgp_sparse.features`): K(u, u), K(u, f), K(u, u') and K(f, f).
For inducing points each of them is the kernel between points, so a kernel with the
compiled kernels' calls (``k(A, B)``, ``k.vjp(A, B)``, ``k.diag(A)``, ``k.diag_vjp(A)``)
answers them through this mixin, at no cost over calling it directly.
"""

from .. import backend

__all__ = ["PointCovariances"]


class PointCovariances:
    """The seam's methods for inducing points, on top of a kernel's own calls."""

    def kuu(self, Z):
        """K(u, u) of inducing points Z: ``K(Z, Z)``."""
        return self(Z)

    def kuu_vjp(self, Z):
        return self.vjp(Z)

    def kuf(self, Z, X):
        """K(u, f) between inducing points Z and the rows X: ``K(Z, X)``."""
        return self(Z, X)

    def kuf_vjp(self, Z, X):
        return self.vjp(Z, X)

    def kuu_diag(self, Z):
        """The prior variance of each inducing variable: ``diag K(Z, Z)``."""
        return self.diag(Z)

    def kuu_cross(self, Z1, Z2):
        """K(u, u') between two sets of inducing points: ``K(Z1, Z2)``."""
        return self(Z1, Z2)

    def kuu_cross_vjp(self, Z1, Z2):
        return self.vjp(Z1, Z2)

    def kuf_with_set(self, Z, X, Z2):
        """K(u, f) at the rows X beside K(u, u') of a second set Z2, as one matrix
        ``K(Z, [X; Z2])`` (one evaluation over the stacked rows)."""
        return self(Z, _stacked(X, Z2))

    def kuf_with_set_vjp(self, Z, X, Z2):
        return self.vjp(Z, _stacked(X, Z2))

    def kff(self, X):
        """The prior covariance of f at the rows X."""
        return self(X)

    def kff_diag(self, X):
        """The prior variance of f at each row of X."""
        return self.diag(X)

    def kff_diag_vjp(self, X):
        return self.diag_vjp(X)


def _stacked(top, bottom):
    return backend.namespace(top, bottom).concat([top, bottom], axis=0)
