"""Sum, Product and Exponentiation of compiled kernels.

The children's outputs come in three kinds (scalar, :class:`~._base.Diagonal`, dense;
see :mod:`._base`). The combinators keep the cheap kinds cheap -- a ConstantKernel
factor is one multiplication of the other factor, a WhiteKernel summand touches only
the diagonal -- and expand to dense only when the result has to be dense anyway.

With arrays of another library than numpy (see :mod:`._base`), the same algebra runs
without in-place updates (``a = a + b`` where numpy does ``a += b``) and without the numba
helper; reduced adjoints are then 0-d arrays of that library.
"""

import numpy as np

from .. import backend, linalg
from ._base import DENSE, DIAGONAL, SCALAR, Diagonal, densify, kind_of, reduce_bar
from ._profiles import scale_and_dot

__all__ = ["SumNode", "ProductNode", "ExponentiationNode"]


def _shape(A, B, mode):
    if mode == "diag":
        return (A.shape[0],)
    if mode == "gram":
        return (A.shape[0], A.shape[0])
    return (A.shape[0], B.shape[0])


def _add_grads(g1, g2):
    if g1 is None:
        return g2
    if g2 is None:
        return g1
    if not isinstance(g1, np.ndarray):
        return g1 + g2
    g1 += g2  # both are fresh arrays produced by the children's backward passes
    return g1


def _add_into(out, other, kind):
    """``out + other`` for an ``other`` of any kind: in place into ``out`` for numpy,
    a new array otherwise. Returns the sum."""
    if not isinstance(out, np.ndarray):
        if kind == DIAGONAL:
            return linalg.add_to_diagonal(out, other.value)
        return out + other
    if kind == DENSE:
        out += other
    elif kind == SCALAR:
        out += other
    else:
        out.flat[:: out.shape[0] + 1] += other.value
    return out


class SumNode:
    """``k1 + k2``."""

    def __init__(self, k1, k2):
        self.k1, self.k2 = k1, k2

    def evaluate(self, A, B, mode, grad):
        o1, b1 = self.k1.evaluate(A, B, mode, grad)
        o2, b2 = self.k2.evaluate(A, B, mode, grad)
        t1, t2 = kind_of(o1), kind_of(o2)
        if t1 == t2 == SCALAR:
            out = o1 + o2
        elif t1 == t2 == DIAGONAL:
            out = Diagonal(o1.value + o2.value)
        elif t1 == DENSE:
            out = _add_into(o1, o2, t2)  # o1 is owned: the child keeps no reference to it
        elif t2 == DENSE:
            out = _add_into(o2, o1, t1)
        else:  # a scalar and a diagonal
            out = _add_into(densify(o1, _shape(A, B, mode), A.dtype, like=A), o2, t2)
        if not grad:
            return out, None
        dense = kind_of(out) == DENSE

        def back(bar, theta_bar):
            bar1 = reduce_bar(bar, t1) if dense else bar
            bar2 = reduce_bar(bar, t2) if dense else bar
            return _add_grads(b1(bar1, theta_bar), b2(bar2, theta_bar))

        return out, back


class ProductNode:
    """``k1 * k2`` (elementwise)."""

    def __init__(self, k1, k2):
        self.k1, self.k2 = k1, k2

    def evaluate(self, A, B, mode, grad):
        o1, b1 = self.k1.evaluate(A, B, mode, grad)
        o2, b2 = self.k2.evaluate(A, B, mode, grad)
        t1, t2 = kind_of(o1), kind_of(o2)

        if t1 == t2 == SCALAR:
            return o1 * o2, (_scalar_back(b1, b2, o1, o2) if grad else None)

        if {t1, t2} <= {SCALAR, DIAGONAL}:
            # scalar * diagonal or diagonal * diagonal: still a diagonal
            v1 = o1.value if t1 == DIAGONAL else o1
            v2 = o2.value if t2 == DIAGONAL else o2
            return Diagonal(v1 * v2), (_scalar_back(b1, b2, v1, v2) if grad else None)

        if SCALAR in (t1, t2) and DENSE in (t1, t2):
            # constant factor times a dense matrix
            if t1 == SCALAR:
                c, bc, D, bd = o1, b1, o2, b2
            else:
                c, bc, D, bd = o2, b2, o1, b1
            numpy = isinstance(D, np.ndarray)
            if not grad:
                if not numpy:
                    return D * c, None
                D *= c
                return D, None
            out = D * c

            def back_scaled(bar, theta_bar):
                # d/dc sum(bar * c D) = sum(bar * D); the dense child sees c * bar. Both
                # in one pass over the matrices.
                if not numpy:
                    xp = backend.namespace(bar)
                    g = bc(xp.sum(bar * D), theta_bar)
                    return _add_grads(bd(bar * c, theta_bar), g)
                if bar.ndim == 2:
                    child_bar = np.empty(bar.shape, dtype=D.dtype)
                    bar_dot_d = scale_and_dot(np.ascontiguousarray(bar), D, c, child_bar)
                else:
                    child_bar = bar * c
                    bar_dot_d = np.sum(bar * D)
                g = bc(float(bar_dot_d), theta_bar)
                return _add_grads(bd(child_bar, theta_bar), g)

            return out, back_scaled

        shape = _shape(A, B, mode)
        D1 = densify(o1, shape, A.dtype, like=A)
        D2 = densify(o2, shape, A.dtype, like=A)
        if not grad:
            if not isinstance(D1, np.ndarray):
                return D1 * D2, None
            D1 *= D2
            return D1, None
        out = D1 * D2

        def back(bar, theta_bar):
            g1 = b1(reduce_bar(bar * D2, t1), theta_bar)
            g2 = b2(reduce_bar(bar * D1, t2), theta_bar)
            return _add_grads(g1, g2)

        return out, back


def _scalar_back(b1, b2, v1, v2):
    """Backward of ``v1 * v2`` for scalar-like factors; ``bar`` is a reduced adjoint."""

    def back(bar, theta_bar):
        return _add_grads(b1(bar * v2, theta_bar), b2(bar * v1, theta_bar))

    return back


class ExponentiationNode:
    """``k ** exponent`` (elementwise); the exponent is not a hyperparameter."""

    def __init__(self, kernel, exponent):
        self.kernel = kernel
        self.exponent = float(exponent)

    def evaluate(self, A, B, mode, grad):
        o, b = self.kernel.evaluate(A, B, mode, grad)
        t = kind_of(o)
        p = self.exponent
        if t == SCALAR:
            out = o**p
            if not grad:
                return out, None
            return out, (lambda bar, theta_bar: b(bar * p * o ** (p - 1.0), theta_bar))
        # A diagonal is expanded: 0 ** p off the diagonal is 0, 1 or inf depending on p.
        D = densify(o, _shape(A, B, mode), A.dtype, like=A)
        out = D**p
        if not grad:
            return out, None

        def back(bar, theta_bar):
            return b(reduce_bar(bar * (p * D ** (p - 1.0)), t), theta_bar)

        return out, back
