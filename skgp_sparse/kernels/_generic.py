"""Any scikit-learn kernel as a node of a compiled kernel, through sklearn's own API.

The compiler (:mod:`._compile`) evaluates the kernels it knows with its own BLAS/numba
code. Every other kernel -- a user subclass that redefines ``__call__``, PairwiseKernel,
a third-party kernel -- becomes a :class:`GenericNode`, which uses only what every
sklearn kernel offers:

* values: ``k(A, B)``, ``k(A)`` and ``k.diag(A)``;
* theta derivatives: ``k(S, eval_gradient=True)``, which sklearn defines for Gram
  matrices only, ``dK(S, S) / d theta`` of shape ``(n, n, n_theta)``.

So the derivative of a cross-covariance ``K(A, B)`` is read off the off-diagonal block of
the Gram gradient of the stacked inputs ``S = [A_i; B_j]``, tile by tile so that the
``(n, n, n_theta)`` arrays stay within :data:`TILE_BYTES`. A tile of ``a`` rows of A and
``b`` rows of B costs ``(a + b)^2`` gradient entries for ``a b`` useful ones, which is
why the tiles are kept about square (four times the useful work at best). A Gram matrix
``K(A, A)`` takes one call up to :data:`GRAM_CALL_BYTES`. The derivative of the diagonal
takes the diagonals of Gram gradients of small row chunks (:data:`DIAG_CHUNK` rows).

sklearn offers no derivative in the inputs, so ``back`` returns None for the gradient
in ``A`` and :attr:`CompiledKernel.has_input_gradient <._compile.CompiledKernel>` is
False for a tree with a generic node.

Everything is computed in float64 and the results cast to the dtype of the inputs, as
the compiled nodes do.

Arrays of another library than numpy (CuPy, PyTorch, ``array_api_strict``): scikit-learn
kernels compute with numpy, so this node is a **host round trip** -- the inputs are
copied to host memory, sklearn evaluates them there, and the matrix (and in ``back``
the theta gradient) is copied back to the inputs' namespace and device. The compiled
nodes around it stay on the device.
"""

import numpy as np

from .. import backend
from ._base import Leaf

__all__ = ["GenericNode", "TILE_BYTES", "GRAM_CALL_BYTES", "DIAG_CHUNK"]

#: Target size in bytes of one ``(n, n, n_theta)`` Gram gradient requested from sklearn.
#: sklearn makes several temporaries of that size per call, so tiles that stay in a
#: core's cache beat larger ones, the Python overhead per call included (docs/constants.md).
TILE_BYTES = 2 * 2**20
#: Largest Gram gradient requested in one call for ``K(A, A)``. Unlike a cross tile, one
#: call wastes nothing there, while tiles recompute their diagonal blocks; so a Gram
#: matrix is tiled (by :data:`TILE_BYTES`) only above this size.
GRAM_CALL_BYTES = 64 * 2**20
#: Rows per sklearn Gram-gradient call when differentiating the diagonal: the call costs
#: ``DIAG_CHUNK^2`` entries for ``DIAG_CHUNK`` useful ones, against a fixed Python
#: overhead per call (docs/constants.md).
DIAG_CHUNK = 32
# Below this many rows a tile is dominated by the Python overhead of the sklearn call.
_MIN_TILE = 128


class GenericNode(Leaf):
    """A kernel evaluated by scikit-learn, with theta derivatives from ``eval_gradient``.

    Parameters
    ----------
    sk_kernel : sklearn.gaussian_process.kernels.Kernel
        The kernel, any class (a whole subtree when its root is not compiled).
    offset : int
        Index in the global theta of this kernel's first entry; the node owns
        ``sk_kernel.theta.size`` entries from there, in sklearn's ``theta`` order.

    Attributes
    ----------
    kernel : sklearn kernel
        The kernel at the current hyperparameters. :meth:`load` replaces it by a
        new object instead of modifying it, so a ``back`` closure keeps the kernel that
        produced its output.
    n_theta : int
        Number of theta entries (sklearn excludes the fixed hyperparameters).
    """

    def __init__(self, sk_kernel, offset):
        # Not Leaf.__init__: a subtree's hyperparameters are named "k1__length_scale"
        # and so on, which getattr cannot read. The node needs its theta slice only.
        self.name = type(sk_kernel).__name__
        self.kernel = sk_kernel
        self.n_theta = int(np.asarray(sk_kernel.theta).size)
        self.values = {}
        self.slots = {"theta": slice(offset, offset + self.n_theta)}

    def load(self, theta):
        if self.n_theta:
            self.kernel = self.kernel.clone_with_theta(np.asarray(theta[self.slots["theta"]], dtype=np.float64))

    def saved_hyperparameters(self):
        # load replaces the scikit-learn kernel, never changes it: the object is the copy.
        return self.kernel

    def restore_hyperparameters(self, saved):
        self.kernel = saved

    # -- evaluation ------------------------------------------------------------------------
    def evaluate(self, A, B, mode, grad):
        if not isinstance(A, np.ndarray):
            return self._evaluate_round_trip(A, B, mode, grad)
        return self._evaluate_host(A, B, mode, grad)

    def _evaluate_round_trip(self, A, B, mode, grad):
        """:meth:`_evaluate_host` on host copies of arrays of another library; the
        output, and the theta gradient of ``back``, go back to their namespace and device."""
        xp = backend.namespace(A, B)
        device = backend.device_of(A)
        out, back_host = self._evaluate_host(
            backend.to_numpy(A), None if B is None else backend.to_numpy(B), mode, grad
        )
        out = backend.to_namespace(out, xp, device=device, dtype=A.dtype)
        if not grad:
            return out, None
        sl = self.slots["theta"]

        def back(bar, theta_bar):
            if self.n_theta:
                host = np.zeros(sl.stop)
                back_host(backend.to_numpy(bar), host)
                theta_bar[sl] += backend.to_namespace(host[sl], xp, device=device, dtype=theta_bar.dtype)
            return None

        return out, back

    def _evaluate_host(self, A, B, mode, grad):
        k = self.kernel  # the back closures differentiate this very kernel
        A64 = np.asarray(A, dtype=np.float64)
        if mode == "diag":
            out = _checked(k.diag(A64), (A.shape[0],), A.dtype, self.name, "k.diag(A)")
            if not grad:
                return out, None

            def back_diag(d_bar, theta_bar):
                if self.n_theta:
                    theta_bar[self.slots["theta"]] += _diag_theta_grad(k, A64, d_bar, self.n_theta)
                return None

            return out, back_diag

        if mode == "gram":
            out = _checked(k(A64), (A.shape[0], A.shape[0]), A.dtype, self.name, "k(A)")
            B64 = None
        else:
            B64 = np.asarray(B, dtype=np.float64)
            out = _checked(k(A64, B64), (A.shape[0], B.shape[0]), A.dtype, self.name, "k(A, B)")
        if not grad:
            return out, None

        def back(K_bar, theta_bar):
            if self.n_theta:
                K_bar = np.asarray(K_bar, dtype=np.float64)
                if B64 is None:
                    g = _gram_theta_grad(k, A64, K_bar, self.n_theta)
                else:
                    g = _cross_theta_grad(k, A64, B64, K_bar, self.n_theta)
                theta_bar[self.slots["theta"]] += g
            # sklearn has no derivative in the inputs (see has_input_gradient).
            return None

        return out, back


def _checked(K, shape, dtype, name, what):
    """sklearn's result as an array the caller owns, of the expected shape and dtype."""
    K = np.asarray(K)
    if K.shape != shape:
        raise ValueError(f"{name}: {what} returned shape {K.shape}, expected {shape}")
    if K.dtype == dtype and K.flags.owndata and K.flags.writeable and K.flags.c_contiguous:
        return K
    # A view or a read-only array may be shared with the kernel: the contract of the
    # nodes lets the caller modify the output in place.
    return np.array(K, dtype=dtype, order="C")


def _gram_gradient(k, S, n_theta):
    """``dK(S, S) / d theta`` from sklearn, shape ``(n, n, n_theta)``."""
    _, G = k(S, eval_gradient=True)
    G = np.asarray(G, dtype=np.float64)
    n = S.shape[0]
    if G.size != n * n * n_theta:
        raise ValueError(
            f"{type(k).__name__}: k(X, eval_gradient=True) returned a gradient of shape "
            f"{G.shape}, expected {(n, n, n_theta)} (one entry per entry of theta)"
        )
    return G.reshape(n, n, n_theta)


def _contract(bar, G):
    """``sum_ij bar_ij G_ijk`` as one matrix-vector product over a contiguous G."""
    return np.tensordot(bar, G, axes=2)


def _tile_rows(n_theta):
    """Rows of a stacked tile ``S`` whose Gram gradient fits in :data:`TILE_BYTES`."""
    per_entry = 8.0 * (n_theta + 1)  # the gradient and the kernel matrix itself
    return max(int(np.sqrt(TILE_BYTES / per_entry)), 2)


def _splits(n, size):
    return [slice(s, min(s + size, n)) for s in range(0, n, size)]


def _cross_theta_grad(k, A, B, K_bar, n_theta):
    """Gradient of ``sum(K_bar * k(A, B))`` in theta from Gram gradients of ``[A_i; B_j]``."""
    n_a, n_b = A.shape[0], B.shape[0]
    rows = _tile_rows(n_theta)
    # About square tiles (the least waste per useful entry), but not so thin that the
    # per-call overhead dominates, and no larger than the memory target.
    small = max(min(n_a, n_b, rows // 2), 1)
    other = max(min(max(small, _MIN_TILE), rows - small), 1)
    ta, tb = (small, min(n_b, other)) if n_a <= n_b else (min(n_a, other), small)
    g = np.zeros(n_theta)
    for ia in _splits(n_a, ta):
        for jb in _splits(n_b, tb):
            a = ia.stop - ia.start
            S = np.concatenate([A[ia], B[jb]])
            G = _gram_gradient(k, S, n_theta)
            bar = np.zeros((S.shape[0], S.shape[0]))
            bar[:a, a:] = K_bar[ia, jb]
            g += _contract(bar, G)
    return g


def _gram_theta_grad(k, A, K_bar, n_theta):
    """Gradient of ``sum(K_bar * k(A))`` in theta, in tiles when one call would be too big."""
    n = A.shape[0]
    if 8.0 * n * n * (n_theta + 1) <= GRAM_CALL_BYTES:
        return _contract(K_bar, _gram_gradient(k, A, n_theta))
    rows = _tile_rows(n_theta)
    # Blocks of half a tile: the pair (i, j) stacked gives both off-diagonal blocks, and
    # the diagonal blocks the first time a block appears.
    blocks = _splits(n, max(rows // 2, 1))
    done = set()
    g = np.zeros(n_theta)
    for i in range(len(blocks)):
        for j in range(i + 1, len(blocks)):
            bi, bj = blocks[i], blocks[j]
            a = bi.stop - bi.start
            S = np.concatenate([A[bi], A[bj]])
            G = _gram_gradient(k, S, n_theta)
            bar = np.zeros((S.shape[0], S.shape[0]))
            bar[:a, a:] = K_bar[bi, bj]
            bar[a:, :a] = K_bar[bj, bi]
            if i not in done:
                bar[:a, :a] = K_bar[bi, bi]
                done.add(i)
            if j not in done:
                bar[a:, a:] = K_bar[bj, bj]
                done.add(j)
            g += _contract(bar, G)
    return g


def _diag_theta_grad(k, A, d_bar, n_theta):
    """Gradient of ``sum(d_bar * k.diag(A))`` from the diagonals of chunked Gram gradients."""
    d_bar = np.asarray(d_bar, dtype=np.float64)
    g = np.zeros(n_theta)
    for sl in _splits(A.shape[0], DIAG_CHUNK):
        G = _gram_gradient(k, A[sl], n_theta)
        idx = np.arange(G.shape[0])
        g += d_bar[sl] @ G[idx, idx, :]
    return g
