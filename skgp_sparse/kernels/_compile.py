"""From a scikit-learn kernel to a compiled evaluator with reverse-mode derivatives."""

import numpy as np
from sklearn.base import clone
from sklearn.gaussian_process import kernels as skk

from ._base import DENSE, densify, kind_of, reduce_bar
from ._combinators import ExponentiationNode, ProductNode, SumNode
from ._other import ConstantNode, DotProductNode, WhiteNode
from ._stationary import make_expsine, make_matern, make_rbf, make_rq

__all__ = ["compile_kernel", "CompiledKernel", "SUPPORTED_KERNELS"]

# Exact classes only: a user subclass may change __call__, and silently evaluating the
# parent's formula instead would be wrong.
_LEAF_FACTORIES = {
    skk.RBF: make_rbf,
    skk.Matern: make_matern,
    skk.RationalQuadratic: make_rq,
    skk.ExpSineSquared: make_expsine,
    skk.DotProduct: DotProductNode,
    skk.ConstantKernel: ConstantNode,
    skk.WhiteKernel: WhiteNode,
}

#: Names of the sklearn kernel classes that :func:`compile_kernel` accepts.
SUPPORTED_KERNELS = tuple(c.__name__ for c in _LEAF_FACTORIES) + ("Sum", "Product", "Exponentiation")


def compile_kernel(kernel, white_as_noise=False):
    """Compile a scikit-learn kernel into an evaluator with analytic derivatives.

    Parameters
    ----------
    kernel : sklearn.gaussian_process.kernels.Kernel
        A tree of RBF, Matern, RationalQuadratic, ExpSineSquared, DotProduct,
        ConstantKernel and WhiteKernel joined by Sum, Product and Exponentiation.
    white_as_noise : bool, default=False
        Take the WhiteKernel terms that are top-level summands (reached from the root
        through Sum nodes only) out of every kernel matrix, so that a Gaussian
        likelihood can treat them as observation noise. They stay in ``theta``,
        ``bounds`` and :meth:`CompiledKernel.to_sklearn`; their total is
        :attr:`CompiledKernel.white_noise_level`.

    Returns
    -------
    CompiledKernel

    Raises
    ------
    TypeError
        If the tree contains a kernel class that is not supported (named in the
        message), including subclasses of the supported ones.
    ValueError
        If ``white_as_noise`` leaves nothing but white noise, or if a kernel that is
        isotropic in sklearn (RationalQuadratic, ExpSineSquared) has a vector length
        scale.
    """
    return CompiledKernel(kernel, white_as_noise=white_as_noise)


class CompiledKernel:
    """A scikit-learn kernel evaluated with BLAS and numba, with vector-Jacobian products.

    Built by :func:`compile_kernel`. Inputs are 2-D arrays ``(n_samples, n_features)``;
    float32 inputs give float32 matrices, anything else float64. Hyperparameters live
    in log space, in sklearn's ``theta`` order.

    Attributes
    ----------
    theta : ndarray of shape (n_theta,)
        Copy of the current log-hyperparameters (sklearn's ``kernel.theta``).
    bounds : ndarray of shape (n_theta, 2)
        Log-space bounds (sklearn's ``kernel.bounds``).
    white_noise_level : float
        Total ``noise_level`` of the WhiteKernel summands taken out by
        ``white_as_noise=True`` (0.0 if none).
    white_noise_theta_index : list of int
        Indices in ``theta`` of the log ``noise_level`` of those summands (non-fixed
        ones only).

    Notes
    -----
    The closure returned by :meth:`vjp` keeps references to the inputs and to private
    intermediate arrays; modifying ``A`` or ``B`` in place before calling it gives wrong
    derivatives. The returned ``K`` may be modified freely. Changing ``theta`` between
    the forward call and ``back`` does not affect ``back``: it differentiates the
    kernel that produced ``K``.
    """

    def __init__(self, kernel, white_as_noise=False):
        if not isinstance(kernel, skk.Kernel):
            raise TypeError(f"expected a scikit-learn kernel, got {type(kernel).__name__}")
        self._sk = clone(kernel)
        self.white_as_noise = bool(white_as_noise)
        self._leaves = []
        self._white = []
        root, n_theta = self._build(self._sk, 0, top_sum=True)
        self._theta = np.array(self._sk.theta, dtype=np.float64).reshape(-1)
        if n_theta != self._theta.size:  # would mean a bookkeeping bug, not a user error
            raise RuntimeError(f"theta bookkeeping mismatch: {n_theta} != {self._theta.size}")
        self._bounds = np.array(self._sk.bounds, dtype=np.float64).reshape(-1, 2)
        if root is None:
            raise ValueError(
                "the kernel has no latent part: every top-level summand of "
                f"{kernel!r} is a WhiteKernel, which white_as_noise=True turns into "
                "observation noise; add a latent kernel (e.g. RBF) or use white_as_noise=False"
            )
        self._root = root

    # ---------------------------------------------------------------- tree building
    def _build(self, k, offset, top_sum):
        """Return (node or None, number of theta entries under ``k``)."""
        cls = type(k)
        if cls is skk.Sum or cls is skk.Product:
            n1, c1 = self._build(k.k1, offset, top_sum and cls is skk.Sum)
            n2, c2 = self._build(k.k2, offset + c1, top_sum and cls is skk.Sum)
            if n1 is None or n2 is None:  # only possible below Sum nodes from the root
                return (n2 if n1 is None else n1), c1 + c2
            node = SumNode(n1, n2) if cls is skk.Sum else ProductNode(n1, n2)
            return node, c1 + c2
        if cls is skk.Exponentiation:
            child, c = self._build(k.kernel, offset, False)
            return ExponentiationNode(child, k.exponent), c
        factory = _LEAF_FACTORIES.get(cls)
        if factory is None:
            raise TypeError(
                f"{cls.__name__} is not supported by skgp_sparse.kernels.compile_kernel; "
                f"supported kernels: {', '.join(SUPPORTED_KERNELS)} (exact classes, not subclasses)"
            )
        leaf = factory(k, offset)
        self._leaves.append(leaf)
        if cls is skk.WhiteKernel and self.white_as_noise and top_sum:
            self._white.append(leaf)
            return None, leaf.n_theta
        return leaf, leaf.n_theta

    # ---------------------------------------------------------------- hyperparameters
    @property
    def theta(self):
        return self._theta.copy()

    @property
    def bounds(self):
        return self._bounds.copy()

    @property
    def n_theta(self):
        """Number of log-hyperparameters."""
        return self._theta.size

    def set_theta(self, theta):
        """Set the log-hyperparameters (sklearn's ``theta`` order), in place.

        Parameters
        ----------
        theta : array-like of shape (n_theta,)
        """
        theta = np.array(theta, dtype=np.float64).reshape(-1)
        if theta.shape != self._theta.shape:
            raise ValueError(f"theta has {theta.size} entries, the kernel has {self._theta.size}")
        self._theta = theta
        for leaf in self._leaves:
            leaf.load(theta)

    def to_sklearn(self):
        """The sklearn kernel (full structure, white terms included) at the current theta."""
        return self._sk.clone_with_theta(self._theta.copy())

    @property
    def white_noise_level(self):
        return float(sum(leaf.values["noise_level"] for leaf in self._white))

    @property
    def white_noise_theta_index(self):
        return [leaf.slots["noise_level"].start for leaf in self._white if leaf.slots["noise_level"] is not None]

    def __repr__(self):
        extra = ", white_as_noise=True" if self.white_as_noise else ""
        return f"compile_kernel({self.to_sklearn()!r}{extra})"

    # ---------------------------------------------------------------- evaluation
    @staticmethod
    def _inputs(A, B):
        A = np.asarray(A)
        if A.ndim != 2:
            raise ValueError(f"expected a 2-D array (n_samples, n_features), got shape {A.shape}")
        if B is None:
            dtype = np.float32 if A.dtype == np.float32 else np.float64
            return np.ascontiguousarray(A, dtype=dtype), None
        B = np.asarray(B)
        if B.ndim != 2:
            raise ValueError(f"expected a 2-D array (n_samples, n_features), got shape {B.shape}")
        if B.shape[1] != A.shape[1]:
            raise ValueError(f"A has {A.shape[1]} features but B has {B.shape[1]}")
        dtype = np.float32 if (A.dtype == np.float32 and B.dtype == np.float32) else np.float64
        return np.ascontiguousarray(A, dtype=dtype), np.ascontiguousarray(B, dtype=dtype)

    def __call__(self, A, B=None):
        """Kernel matrix ``K(A, B)``; ``B=None`` gives sklearn's ``k(A)``.

        Parameters
        ----------
        A : array-like of shape (M, D)
        B : array-like of shape (N, D), optional

        Returns
        -------
        K : ndarray of shape (M, N), or (M, M) without ``B``
        """
        A, B = self._inputs(A, B)
        mode = "gram" if B is None else "cross"
        out, _ = self._root.evaluate(A, B, mode, False)
        return densify(out, (A.shape[0], A.shape[0] if B is None else B.shape[0]), A.dtype)

    def diag(self, A):
        """Diagonal of ``K(A, A)`` (sklearn's ``k.diag(A)``), shape ``(M,)``."""
        A, _ = self._inputs(A, None)
        out, _ = self._root.evaluate(A, None, "diag", False)
        return densify(out, (A.shape[0],), A.dtype)

    def vjp(self, A, B=None):
        """Kernel matrix and its reverse-mode derivative.

        Parameters
        ----------
        A : array-like of shape (M, D)
        B : array-like of shape (N, D), optional
            Without it, the Gram matrix ``K(A, A)`` (A then sits in both arguments).

        Returns
        -------
        K : ndarray
            As :meth:`__call__`.
        back : callable
            ``back(K_bar) -> (theta_bar, A_bar)`` with ``theta_bar`` the gradient of
            ``sum(K_bar * K)`` in the log-hyperparameters, shape ``(n_theta,)``, and
            ``A_bar`` its gradient in ``A`` (shape of ``A``). ``K_bar`` need not be
            symmetric. ``back`` may be called more than once.
        """
        A, B = self._inputs(A, B)
        mode = "gram" if B is None else "cross"
        shape = (A.shape[0], A.shape[0] if B is None else B.shape[0])
        out, back_root = self._root.evaluate(A, B, mode, True)
        kind = kind_of(out)
        K = densify(out, shape, A.dtype)
        n_theta = self._theta.size

        def back(K_bar):
            K_bar = np.asarray(K_bar)
            if K_bar.shape != shape:
                raise ValueError(f"K_bar has shape {K_bar.shape}, K has {shape}")
            if kind == DENSE:
                K_bar = np.ascontiguousarray(K_bar, dtype=A.dtype)
            theta_bar = np.zeros(n_theta)
            A_bar = back_root(reduce_bar(K_bar, kind), theta_bar)
            if A_bar is None:
                A_bar = np.zeros_like(A)
            return theta_bar, A_bar

        return K, back

    def diag_vjp(self, A):
        """Diagonal of ``K(A, A)`` and its reverse-mode derivative in theta.

        Returns
        -------
        d : ndarray of shape (M,)
        back : callable
            ``back(d_bar) -> theta_bar``, the gradient of ``sum(d_bar * d)`` in the
            log-hyperparameters.
        """
        A, _ = self._inputs(A, None)
        out, back_root = self._root.evaluate(A, None, "diag", True)
        kind = kind_of(out)
        n = A.shape[0]
        d = densify(out, (n,), A.dtype)

        def back(d_bar):
            d_bar = np.asarray(d_bar)
            if d_bar.shape != (n,):
                raise ValueError(f"d_bar has shape {d_bar.shape}, expected {(n,)}")
            theta_bar = np.zeros(self._theta.size)
            back_root(reduce_bar(d_bar, kind), theta_bar)
            return theta_bar

        return d, back
