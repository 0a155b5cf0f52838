"""Kernels that are not a function of a squared distance: constant, white noise, dot product.

ConstantKernel and WhiteKernel never build a matrix: they return a scalar or a
:class:`~._base.Diagonal` and let the combinators fold it in (see :mod:`._base`).
"""

import numpy as np

from .. import backend
from ..linalg import mm
from . import _array_api as X
from ._base import Diagonal, Leaf
from ._profiles import mirror_upper

__all__ = ["ConstantNode", "WhiteNode", "DotProductNode"]


def _none(bar, theta_bar):
    return None


class ConstantNode(Leaf):
    """``k(a, b) = constant_value``; ``d K / d log c = c`` for every entry."""

    def evaluate(self, A, B, mode, grad):
        c = self.value("constant_value", A)
        if not grad:
            return c, None

        def back(bar_sum, theta_bar):
            self.accumulate(theta_bar, "constant_value", c * bar_sum)
            return None

        return c, back


class WhiteNode(Leaf):
    """``k(a, b) = noise_level`` if ``a is b`` (same row of the Gram matrix), else 0.

    As in sklearn, only ``k(A)`` and ``k.diag(A)`` see the noise; ``k(A, B)`` is zero even
    when ``B`` equals ``A``.
    """

    def evaluate(self, A, B, mode, grad):
        noise = self.value("noise_level", A)
        if mode == "cross":
            return 0.0, (_none if grad else None)
        out = Diagonal(noise) if mode == "gram" else noise
        if not grad:
            return out, None

        def back(bar_reduced, theta_bar):
            # bar_reduced is the trace (gram) or the sum (diag) of the adjoint.
            self.accumulate(theta_bar, "noise_level", noise * bar_reduced)
            return None

        return out, back


class DotProductNode(Leaf):
    """``k(a, b) = sigma_0^2 + a . b``; ``d K / d log sigma_0 = 2 sigma_0^2``."""

    def evaluate(self, A, B, mode, grad):
        s2 = self.value("sigma_0", A) ** 2
        if not isinstance(A, np.ndarray):
            return self._evaluate_xp(A, B, mode, grad, s2)
        if mode == "diag":
            d = np.einsum("ij,ij->i", A, A)
            d += s2
            if not grad:
                return d, None

            def back_diag(d_bar, theta_bar):
                self.accumulate(theta_bar, "sigma_0", 2.0 * s2 * float(np.sum(d_bar)))
                return None

            return d, back_diag

        gram = mode == "gram"
        other = A if gram else B
        K = mm(A, other, trans_b=True)
        if gram:
            # A GEMM need not return an exactly symmetric A A^T; downstream Cholesky
            # factorisations want one.
            mirror_upper(K)
        K += s2
        if not grad:
            return K, None

        def back(K_bar, theta_bar):
            self.accumulate(theta_bar, "sigma_0", 2.0 * s2 * float(np.sum(K_bar)))
            A_bar = mm(K_bar, other)
            if gram:
                A_bar += mm(K_bar, A, trans_a=True)
            return A_bar

        return K, back

    def _evaluate_xp(self, A, B, mode, grad, s2):
        """:meth:`evaluate` in Array API operations, for arrays of another library."""
        xp = backend.namespace(A, B)
        if mode == "diag":
            d = xp.sum(A * A, axis=1) + s2
            if not grad:
                return d, None

            def back_diag(d_bar, theta_bar):
                self.accumulate(theta_bar, "sigma_0", 2.0 * s2 * xp.sum(d_bar))
                return None

            return d, back_diag

        gram = mode == "gram"
        other = A if gram else B
        K = A @ xp.matrix_transpose(other)
        if gram:
            K = X.mirror_upper(K, xp)  # exactly symmetric, as in the numpy path
        K = K + s2
        if not grad:
            return K, None

        def back(K_bar, theta_bar):
            self.accumulate(theta_bar, "sigma_0", 2.0 * s2 * xp.sum(K_bar))
            A_bar = K_bar @ other
            if gram:
                A_bar = A_bar + xp.matrix_transpose(K_bar) @ A
            return A_bar

        return K, back
