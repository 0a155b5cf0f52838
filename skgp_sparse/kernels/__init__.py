"""Scikit-learn kernels with reverse-mode derivatives.

:func:`compile_kernel` turns any kernel of :mod:`sklearn.gaussian_process.kernels` into a
:class:`CompiledKernel` that evaluates ``K(A, B)``, ``K(A)`` and the diagonal exactly as
sklearn does, plus vector-Jacobian products with respect to the log-hyperparameters
(sklearn's ``theta``) and the first input (to learn inducing inputs).

The kernels named in :data:`COMPILED_KERNELS` (and subclasses that redefine nothing of
their evaluation) run on this package's own BLAS/numba code with analytic derivatives.
Any other kernel is a generic node evaluated through scikit-learn's API, with theta
derivatives from ``eval_gradient`` and no derivative in the inputs
(:attr:`CompiledKernel.has_input_gradient` is then False).

Layout: :mod:`._compile` walks the sklearn tree and keeps the theta bookkeeping,
:mod:`._stationary` holds the BLAS plumbing of distance-based kernels,
:mod:`._profiles` their elementwise (numba) part, :mod:`._other` the constant, white
and dot-product kernels, :mod:`._combinators` Sum, Product and Exponentiation, and
:mod:`._generic` the node for every other kernel. :mod:`._scaled_rbf` holds the one
kernel class of this package, :class:`FeatureScaledRBF` (an RBF whose length scales
share one learned factor), which compiles as the RBF does.
"""

from ._compile import COMPILED_KERNELS, CompiledKernel, compile_kernel
from ._points import PointCovariances
from ._scaled_rbf import FeatureScaledRBF

__all__ = ["compile_kernel", "CompiledKernel", "COMPILED_KERNELS", "FeatureScaledRBF", "PointCovariances"]
