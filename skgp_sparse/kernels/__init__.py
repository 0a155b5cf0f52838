"""Compiled scikit-learn kernels with reverse-mode derivatives.

:func:`compile_kernel` turns a kernel of :mod:`sklearn.gaussian_process.kernels` into a
:class:`CompiledKernel` that evaluates ``K(A, B)``, ``K(A)`` and the diagonal exactly as
sklearn does, plus vector-Jacobian products with respect to the log-hyperparameters
(sklearn's ``theta``) and the first input (to learn inducing inputs).

Layout: :mod:`._compile` walks the sklearn tree and keeps the theta bookkeeping,
:mod:`._stationary` holds the BLAS plumbing of distance-based kernels,
:mod:`._profiles` their elementwise (numba) part, :mod:`._other` the constant, white
and dot-product kernels, and :mod:`._combinators` Sum, Product and Exponentiation.
"""

from ._compile import SUPPORTED_KERNELS, CompiledKernel, compile_kernel

__all__ = ["compile_kernel", "CompiledKernel", "SUPPORTED_KERNELS"]
