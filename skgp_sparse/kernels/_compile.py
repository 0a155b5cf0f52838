"""From a scikit-learn kernel to an evaluator with reverse-mode derivatives.

The tree is walked from the root. A kernel of a class listed in :data:`COMPILED_KERNELS`
(or of a subclass that changes nothing in its evaluation, see :func:`_compiled_class`)
becomes a node of this package's own BLAS/numba code. Any other kernel, with the whole
subtree under it, becomes a :class:`~._generic.GenericNode` evaluated through
scikit-learn's API.
"""

import numpy as np
from sklearn.base import clone
from sklearn.gaussian_process import kernels as skk

from .. import backend
from ._points import PointCovariances
from ._base import DENSE, densify, kind_of, reduce_bar
from ._combinators import ExponentiationNode, ProductNode, SumNode
from ._generic import GenericNode
from ._other import ConstantNode, DotProductNode, WhiteNode
from ._scaled_rbf import FeatureScaledRBF
from ._stationary import make_expsine, make_feature_scaled_rbf, make_matern, make_rbf, make_rq

__all__ = ["compile_kernel", "CompiledKernel", "COMPILED_KERNELS"]

_LEAF_FACTORIES = {
    skk.RBF: make_rbf,
    FeatureScaledRBF: make_feature_scaled_rbf,
    skk.Matern: make_matern,
    skk.RationalQuadratic: make_rq,
    skk.ExpSineSquared: make_expsine,
    skk.DotProduct: DotProductNode,
    skk.ConstantKernel: ConstantNode,
    skk.WhiteKernel: WhiteNode,
}
_OPERATORS = (skk.Sum, skk.Product, skk.Exponentiation)
_KNOWN = frozenset(_LEAF_FACTORIES) | frozenset(_OPERATORS)

#: Names of the sklearn kernel classes that :func:`compile_kernel` evaluates with its own
#: code (analytic derivatives, in theta and in the inputs). Any other kernel is
#: evaluated through scikit-learn's API (see :func:`compile_kernel`).
COMPILED_KERNELS = tuple(c.__name__ for c in _LEAF_FACTORIES) + tuple(c.__name__ for c in _OPERATORS)

# Special names that change how a kernel is evaluated. Other special names (__init__,
# __repr__, __eq__, and the class bookkeeping Python and abc add: __module__, __doc__,
# __abstractmethods__, __slotnames__ after pickling, ...) do not: the compiled node reads
# the same attributes that the parent's __call__ reads.
_EVALUATION_DUNDERS = frozenset({"__call__", "__getattribute__", "__getattr__"})


def _redefines(name, base):
    """Whether a class attribute ``name`` of a subclass of ``base`` may change its values."""
    if name.startswith("__") and name.endswith("__"):
        return name in _EVALUATION_DUNDERS
    # abc's per-class cache, not a kernel attribute.
    return name != "_abc_impl" and hasattr(base, name)


def _compiled_class(k):
    """The class in :data:`_KNOWN` that ``k`` evaluates as, or None for a generic kernel.

    An exact known class is itself. A subclass is its nearest known ancestor when no
    class of the subclass chain redefines anything that ancestor has (see
    :func:`_redefines`): then sklearn would run the ancestor's ``__call__`` and
    ``diag`` with the ancestor's helpers, which is what the compiled node reproduces.
    A new name (a new method, or a ``hyperparameter_*`` the ancestor does not read) is
    harmless for the same reason, and so are ``__init__`` and ``__repr__``. Anything
    redefined, be it ``__call__``, ``diag`` or a helper such as ``anisotropic`` or
    ``hyperparameter_length_scale``, sends the kernel to the generic path.
    """
    cls = type(k)
    mro = cls.__mro__
    base = next((c for c in mro if c in _KNOWN), None)
    if base is None:
        return None
    for c in mro[: mro.index(base)]:
        if any(_redefines(name, base) for name in vars(c)):
            return None
    # Instance attributes need no check: the kernel compiled is a clone, rebuilt from
    # get_params, as in every scikit-learn estimator.
    return base


def _refuse_compound(k):
    if isinstance(k, skk.CompoundKernel):
        raise TypeError(
            "CompoundKernel is not supported by skgp_sparse.kernels.compile_kernel: it "
            "stacks several kernels into one (n, n, n_kernels) array, one covariance per "
            "output, while a sparse GP needs a single covariance function; pass one of "
            "its kernels (or their Sum) instead"
        )


def compile_kernel(kernel, white_as_noise=False):
    """Compile a scikit-learn kernel into an evaluator with reverse-mode derivatives.

    Parameters
    ----------
    kernel : sklearn.gaussian_process.kernels.Kernel
        Any scikit-learn kernel. The parts built from the classes in
        :data:`COMPILED_KERNELS` (RBF, Matern, RationalQuadratic, ExpSineSquared,
        DotProduct, ConstantKernel, WhiteKernel joined by Sum, Product and
        Exponentiation), and from subclasses of them that redefine nothing of the
        evaluation (``class MyRBF(RBF): pass``), are evaluated by this package's own
        code, with analytic derivatives. Any other kernel -- a subclass that overrides
        ``__call__`` or ``diag``, PairwiseKernel, a kernel of another library --
        becomes a generic node (with the subtree under it) evaluated through
        scikit-learn's ``k(A, B)``, ``k.diag(A)`` and ``k(S, eval_gradient=True)``:
        slower, and without a derivative in the inputs (see
        :attr:`CompiledKernel.has_input_gradient`). Sums, products and powers mix both
        kinds freely.
    white_as_noise : bool, default=False
        Take the WhiteKernel terms that are top-level summands (reached from the root
        through Sum nodes only) out of every kernel matrix, so that a Gaussian
        likelihood can treat them as observation noise. They stay in ``theta``,
        ``bounds`` and :meth:`CompiledKernel.to_sklearn`; their total is
        :attr:`CompiledKernel.white_noise_level`. A subclass of WhiteKernel counts only
        if it is compiled (redefines nothing); otherwise it is an ordinary generic
        summand. Generic summands elsewhere in the sum do not affect this.

    Returns
    -------
    CompiledKernel

    Raises
    ------
    TypeError
        If ``kernel`` is not a scikit-learn kernel, or contains a CompoundKernel (one
        covariance per output, which a single-covariance sparse GP cannot use).
    ValueError
        If ``white_as_noise`` leaves nothing but white noise, or if a compiled kernel
        that is isotropic in sklearn (RationalQuadratic, ExpSineSquared) has a vector
        length scale.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.gaussian_process.kernels import RBF, PairwiseKernel
    >>> k = compile_kernel(RBF(1.0) + PairwiseKernel(metric="laplacian"))
    >>> k.has_input_gradient
    False
    >>> k(np.zeros((2, 3))).shape
    (2, 2)
    """
    return CompiledKernel(kernel, white_as_noise=white_as_noise)


class CompiledKernel(PointCovariances):
    """A scikit-learn kernel with vector-Jacobian products, evaluated with BLAS and numba.

    Built by :func:`compile_kernel`. Inputs are 2-D arrays ``(n_samples, n_features)``;
    float32 inputs give float32 matrices, anything else float64 (generic nodes compute
    in float64 and cast). Hyperparameters live in log space, in sklearn's ``theta``
    order.

    Inputs may also be arrays of another Array API library (CuPy, PyTorch on CPU or
    CUDA, ``array_api_strict``; ``A`` and ``B`` of the same one). Every output then is
    an array of that library on the inputs' device: ``K``, the diagonal, ``A_bar``, and
    ``theta_bar`` too (float64 where the device has it), so that a training step
    synchronises with the host only when it reads them. The compiled kernels stay on
    the device; a generic node is a host round trip (see :mod:`._generic`).

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
    has_input_gradient : bool
        Whether :meth:`vjp` differentiates in the input ``A``; False when a part of the
        kernel is evaluated through scikit-learn (a generic node).

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
        self._generic = []
        root, n_theta = self._build(self._sk, 0, top_sum=True)
        self._theta = np.array(self._sk.theta, dtype=np.float64).reshape(-1)
        #: theta as an array of a device library while a training loop holds it there
        #: (see :meth:`set_theta`); ``_theta`` is then its host copy, made when asked.
        self._device_theta = None
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
        _refuse_compound(k)
        cls = _compiled_class(k)
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
        if cls is None:
            # The generic node evaluates the whole subtree through sklearn; a
            # CompoundKernel inside it would still make no sense.
            for sub in k.get_params(deep=True).values():
                if isinstance(sub, skk.Kernel):
                    _refuse_compound(sub)
            leaf = GenericNode(k, offset)
            self._generic.append(leaf)
        else:
            leaf = _LEAF_FACTORIES[cls](k, offset)
        self._leaves.append(leaf)
        if cls is skk.WhiteKernel and self.white_as_noise and top_sum:
            self._white.append(leaf)
            return None, leaf.n_theta
        return leaf, leaf.n_theta

    # ---------------------------------------------------------------- hyperparameters
    @property
    def theta(self):
        if self._theta is None:
            # The one read of a theta held on a device, when something asks for it.
            self._theta = np.array(backend.to_numpy(self._device_theta), dtype=np.float64).reshape(-1)
        return self._theta.copy()

    @property
    def bounds(self):
        return self._bounds.copy()

    @property
    def n_theta(self):
        """Number of log-hyperparameters."""
        return self._bounds.shape[0]

    def set_theta(self, theta):
        """Set the log-hyperparameters (sklearn's ``theta`` order), in place.

        Parameters
        ----------
        theta : array-like of shape (n_theta,)
            Host values; or a 1-D array of a device library (CuPy, torch,
            ``array_api_strict``), which the kernel then holds there: its nodes evaluate
            with device values and nothing is read back to the host until :attr:`theta`
            is asked for (a training loop on a device's arrays moves the hyperparameters
            by Adam there, see :meth:`theta_on`).
        """
        if backend.is_foreign(theta):
            if tuple(theta.shape) != (self.n_theta,):
                raise ValueError(f"theta has shape {tuple(theta.shape)}, the kernel has {self.n_theta} entries")
            self._theta, self._device_theta = None, theta
        else:
            theta = np.array(theta, dtype=np.float64).reshape(-1)
            if theta.shape != (self.n_theta,):
                raise ValueError(f"theta has {theta.size} entries, the kernel has {self.n_theta}")
            self._theta, self._device_theta = theta, None
        for leaf in self._leaves:
            leaf.load(theta)

    @property
    def holds_device_values(self):
        """Whether the kernel can hold its hyperparameters on a device (:meth:`set_theta`
        of a device array): every node is compiled, and no WhiteKernel summand carries
        the observation noise (a generic node evaluates through scikit-learn on the host,
        and the noise taken out of the kernel is read as a host number)."""
        return not self._generic and not self._white

    @property
    def held_theta(self):
        """theta as the kernel holds it: the device array while it holds one (no read),
        else a host copy (:attr:`theta`)."""
        held = self._device_theta
        return self.theta if held is None else held

    def theta_on(self, like):
        """theta as a 1-D array of ``like``'s library on its device, float64 where the
        device has it: the one it holds there, or a copy of the host theta."""
        held = self._device_theta
        if held is not None and backend.namespace(held) is backend.namespace(like) \
                and backend.device_of(held) == backend.device_of(like):
            return held
        xp = backend.namespace(like)
        device = backend.device_of(like)
        return backend.to_namespace(self.theta, xp, device=device, dtype=backend.widest_float(xp, device))

    def hold_on_host(self):
        """Bring a theta held on a device back to the host (one read): the nodes then hold
        host values again, as outside a training loop."""
        if self._device_theta is not None:
            self.set_theta(self.theta)

    def saved_hyperparameters(self):
        """The hyperparameters as the kernel holds them, for :meth:`restore_hyperparameters`.

        Going back to them by :meth:`set_theta` of the saved theta would compute each as
        ``exp(log v)``, which may differ from ``v`` in its last bit; a training step that
        is replayed (see :class:`skgp_sparse.optim.loop.DeferredSteps`) must start from the
        same values as the first time. A theta held on a device is kept by reference: it
        is replaced, never written in place.
        """
        host = None if self._theta is None else self._theta.copy()
        return host, self._device_theta, [leaf.saved_hyperparameters() for leaf in self._leaves]

    def restore_hyperparameters(self, saved):
        """Hold again the hyperparameters of :meth:`saved_hyperparameters`."""
        theta, device_theta, per_leaf = saved
        self._theta = None if theta is None else theta.copy()
        self._device_theta = device_theta
        for leaf, values in zip(self._leaves, per_leaf):
            leaf.restore_hyperparameters(values)

    def to_sklearn(self):
        """The sklearn kernel (full structure, white terms included) at the current theta.

        Every part keeps its class, user subclasses included, whether it was compiled
        or generic.
        """
        return self._sk.clone_with_theta(self.theta)

    #: The matrices this kernel returns may be written over (its reverse passes keep
    #: their own copies).
    hands_over_matrices = True

    @property
    def has_input_gradient(self):
        """Whether :meth:`vjp` differentiates in ``A`` (False with any generic node).

        scikit-learn's kernel API has no derivative in the inputs. When this is False,
        the ``A_bar`` of :meth:`vjp` is an array of zeros (not a partial gradient from the
        compiled parts), so inducing inputs should be kept fixed.
        """
        return not self._generic

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
        if backend.is_foreign(A) or backend.is_foreign(B):
            A, B = self._inputs_xp(A, B)
            mode = "gram" if B is None else "cross"
            out, _ = self._root.evaluate(A, B, mode, False)
            return densify(out, (A.shape[0], A.shape[0] if B is None else B.shape[0]), A.dtype, like=A)
        A, B = self._inputs(A, B)
        mode = "gram" if B is None else "cross"
        out, _ = self._root.evaluate(A, B, mode, False)
        return densify(out, (A.shape[0], A.shape[0] if B is None else B.shape[0]), A.dtype)

    def diag(self, A):
        """Diagonal of ``K(A, A)`` (sklearn's ``k.diag(A)``), shape ``(M,)``."""
        if backend.is_foreign(A):
            A, _ = self._inputs_xp(A, None)
            out, _ = self._root.evaluate(A, None, "diag", False)
            return densify(out, (A.shape[0],), A.dtype, like=A)
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
            symmetric. ``back`` may be called more than once. Without
            :attr:`has_input_gradient`, ``A_bar`` is zeros of the shape and dtype of ``A``.
        """
        if backend.is_foreign(A) or backend.is_foreign(B):
            return self._vjp_xp(A, B)
        A, B = self._inputs(A, B)
        mode = "gram" if B is None else "cross"
        shape = (A.shape[0], A.shape[0] if B is None else B.shape[0])
        out, back_root = self._root.evaluate(A, B, mode, True)
        kind = kind_of(out)
        K = densify(out, shape, A.dtype)
        n_theta = self.n_theta
        input_gradient = self.has_input_gradient

        def back(K_bar):
            K_bar = np.asarray(K_bar)
            if K_bar.shape != shape:
                raise ValueError(f"K_bar has shape {K_bar.shape}, K has {shape}")
            if kind == DENSE:
                K_bar = np.ascontiguousarray(K_bar, dtype=A.dtype)
            theta_bar = np.zeros(n_theta)
            A_bar = back_root(reduce_bar(K_bar, kind), theta_bar)
            # With a generic node the compiled parts' share would be a wrong gradient:
            # report none at all, in the shape callers add to.
            if A_bar is None or not input_gradient:
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
        if backend.is_foreign(A):
            return self._diag_vjp_xp(A)
        A, _ = self._inputs(A, None)
        out, back_root = self._root.evaluate(A, None, "diag", True)
        kind = kind_of(out)
        n = A.shape[0]
        d = densify(out, (n,), A.dtype)

        def back(d_bar):
            d_bar = np.asarray(d_bar)
            if d_bar.shape != (n,):
                raise ValueError(f"d_bar has shape {d_bar.shape}, expected {(n,)}")
            theta_bar = np.zeros(self.n_theta)
            back_root(reduce_bar(d_bar, kind), theta_bar)
            return theta_bar

        return d, back

    # ---------------------------------------------------------------- other array libraries
    @staticmethod
    def _inputs_xp(A, B):
        """:meth:`_inputs` for arrays of another library: same checks, same dtype rule
        (float32 stays float32, anything else becomes the device's widest float), no
        copy and no transfer."""
        xp = backend.namespace(A, B)
        if A.ndim != 2:
            raise ValueError(f"expected a 2-D array (n_samples, n_features), got shape {tuple(A.shape)}")
        if B is not None:
            if B.ndim != 2:
                raise ValueError(f"expected a 2-D array (n_samples, n_features), got shape {tuple(B.shape)}")
            if B.shape[1] != A.shape[1]:
                raise ValueError(f"A has {A.shape[1]} features but B has {B.shape[1]}")
        float32 = A.dtype == xp.float32 and (B is None or B.dtype == xp.float32)
        dtype = xp.float32 if float32 else backend.widest_float(xp, backend.device_of(A))
        A = xp.astype(A, dtype, copy=False)
        B = None if B is None else xp.astype(B, dtype, copy=False)
        return A, B

    def _theta_bar_xp(self, xp, A):
        device = backend.device_of(A)
        return xp.zeros(self.n_theta, dtype=backend.widest_float(xp, device), device=device)

    @staticmethod
    def _adjoint_xp(bar, xp, shape, name):
        """An adjoint handed to ``back``: of the inputs' namespace (no implicit transfer)."""
        if not backend.is_foreign(bar) or backend.namespace(bar) is not xp:
            raise TypeError(
                f"{name} must be an array of the inputs' library ({xp.__name__}), "
                f"got {type(bar).__name__}"
            )
        if tuple(bar.shape) != shape:
            raise ValueError(f"{name} has shape {tuple(bar.shape)}, expected {shape}")
        return bar

    def _vjp_xp(self, A, B):
        """:meth:`vjp` for arrays of another library; every output stays in it."""
        A, B = self._inputs_xp(A, B)
        xp = backend.namespace(A)
        mode = "gram" if B is None else "cross"
        shape = (A.shape[0], A.shape[0] if B is None else B.shape[0])
        out, back_root = self._root.evaluate(A, B, mode, True)
        kind = kind_of(out)
        K = densify(out, shape, A.dtype, like=A)
        input_gradient = self.has_input_gradient

        def back(K_bar):
            K_bar = self._adjoint_xp(K_bar, xp, shape, "K_bar")
            if kind == DENSE and K_bar.dtype != A.dtype:
                K_bar = xp.astype(K_bar, A.dtype)
            theta_bar = self._theta_bar_xp(xp, A)
            A_bar = back_root(reduce_bar(K_bar, kind), theta_bar)
            if A_bar is None or not input_gradient:
                A_bar = xp.zeros_like(A)
            return theta_bar, A_bar

        return K, back

    def _diag_vjp_xp(self, A):
        """:meth:`diag_vjp` for arrays of another library; every output stays in it."""
        A, _ = self._inputs_xp(A, None)
        xp = backend.namespace(A)
        out, back_root = self._root.evaluate(A, None, "diag", True)
        kind = kind_of(out)
        n = A.shape[0]
        d = densify(out, (n,), A.dtype, like=A)

        def back(d_bar):
            d_bar = self._adjoint_xp(d_bar, xp, (n,), "d_bar")
            theta_bar = self._theta_bar_xp(xp, A)
            back_root(reduce_bar(d_bar, kind), theta_bar)
            return theta_bar

        return d, back
