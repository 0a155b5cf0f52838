"""Shared vocabulary of the compiled kernel nodes.

Every node of a compiled kernel answers one call,
``node.evaluate(A, B, mode, grad) -> (out, back)``, where ``mode`` is

* ``"cross"``: ``K(A, B)`` with ``B`` given,
* ``"gram"``: ``K(A, A)`` as sklearn's ``k(A)`` computes it (``B`` is None),
* ``"diag"``: the diagonal of ``K(A, A)``.

To keep constants and white noise from being expanded into full matrices and then
multiplied or summed entry by entry, ``out`` comes in three kinds:

* a number: every entry has that value ("scalar"): a Python float, or a 0-d device
  array while the kernel holds its hyperparameters on a device (see below),
* a :class:`Diagonal`: ``value * I`` (only in gram mode: a WhiteKernel),
* an ndarray: the dense ``(M, N)`` matrix, or the ``(M,)`` diagonal in diag mode.

``back(bar, theta_bar)`` (only when ``grad`` is true) takes the adjoint of ``out`` in the
same reduced form: the full adjoint array for a dense ``out``, ``sum(K_bar)`` for a
scalar and ``trace(K_bar)`` for a :class:`Diagonal`. It adds the log-hyperparameter
gradient into ``theta_bar`` (a float64 array over the whole kernel's theta) and returns
the gradient with respect to ``A`` (both arguments in gram mode), or None when it is
zero. In diag mode it returns None (only theta gradients are part of the contract).

Ownership: a dense ``out`` belongs to the caller, who may modify it in place; a node
never keeps a reference to an array it returned. An adjoint handed to ``back`` is
read-only, since a Sum hands the same array to both children.

Array libraries: ``A`` and ``B`` are numpy arrays (the BLAS/numba code) or arrays of one
other Array API library (CuPy, PyTorch, ``array_api_strict``; every node then takes its
Array API path). In the second case a dense ``out`` and every adjoint are arrays of that
library on the inputs' device, a reduced adjoint is a 0-d array of it (not a Python
float, which would synchronise with the device), and ``theta_bar`` is a 1-D array of it
(float64 where the device has it). Scalar and :class:`Diagonal` outputs are
hyperparameter values: Python floats, or, while a training loop holds the hyperparameters
on the inputs' device (:meth:`Leaf.load` of a device theta), 0-d arrays there, in the
inputs' dtype (:func:`value_for`), so that no evaluation reads one back to the host.
"""

import numpy as np

from .. import backend, linalg

__all__ = ["Diagonal", "Leaf", "densify", "reduce_bar", "kind_of"]


def value_for(value, like):
    """A hyperparameter's value to combine with the array ``like``: a host number as it is,
    a device value in ``like``'s dtype (a float64 value would promote float32 arrays)."""
    if not backend.on_device(value) or value.dtype == like.dtype:
        return value
    return backend.namespace(value).astype(value, like.dtype)


class Diagonal:
    """``value * I``: the Gram matrix of a WhiteKernel."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value if backend.on_device(value) else float(value)

    def __repr__(self):
        return f"Diagonal({self.value!r})"


SCALAR, DIAGONAL, DENSE = "scalar", "diagonal", "dense"


def kind_of(out):
    if isinstance(out, Diagonal):
        return DIAGONAL
    # An array of any library with at least one dimension; floats (and numpy scalars,
    # ndim 0) are scalars.
    if getattr(out, "ndim", 0) > 0:
        return DENSE
    return SCALAR


def densify(out, shape, dtype, like=None):
    """Expand an ``out`` of any kind into a fresh (or owned) dense array.

    ``like`` (an input array) gives the namespace and device of the expansion when it is
    not a numpy array; ``dtype`` is then a dtype of that namespace.
    """
    kind = kind_of(out)
    if kind == DENSE:
        return out
    if like is not None and not isinstance(like, np.ndarray):
        xp = backend.namespace(like)
        device = backend.device_of(like)
        if kind == SCALAR:
            if backend.on_device(out):
                # A device value fills no array (``full`` would read it on the host).
                return xp.zeros(shape, dtype=dtype, device=device) + xp.astype(out, dtype)
            return xp.full(shape, out, dtype=dtype, device=device)
        value = xp.astype(out.value, dtype) if backend.on_device(out.value) else out.value
        return value * xp.eye(shape[0], shape[1], dtype=dtype, device=device)
    if kind == SCALAR:
        return np.full(shape, out, dtype=dtype)
    dense = np.zeros(shape, dtype=dtype)
    np.fill_diagonal(dense, out.value)
    return dense


def reduce_bar(bar, kind):
    """Adjoint of a dense expansion, reduced to what ``back`` of that kind expects
    (a Python float for numpy, a 0-d array of the adjoint's library otherwise)."""
    if kind == DENSE:
        return bar
    if backend.is_foreign(bar):
        xp = backend.namespace(bar)
        return xp.sum(bar) if kind == SCALAR else linalg.trace(bar, xp)
    if kind == SCALAR:
        return float(np.sum(bar))
    return float(np.trace(bar))


class Leaf:
    """A kernel with hyperparameters of its own, and its share of the global theta.

    Parameters
    ----------
    sk_kernel : sklearn kernel
        The kernel this node evaluates; its hyperparameters are read once.
    offset : int
        Index in the global theta of this kernel's first non-fixed hyperparameter.

    Attributes
    ----------
    values : dict
        Current value of each hyperparameter (linear scale): a float, or a 1-D array
        for a vector length scale.
    slots : dict
        Slice of the global theta for each non-fixed hyperparameter, None if fixed.
    n_theta : int
        Number of theta entries this kernel owns.
    """

    def __init__(self, sk_kernel, offset):
        self.name = type(sk_kernel).__name__
        self.values = {}
        self.slots = {}
        pos = offset
        # sklearn orders hyperparameters by attribute name (``dir``); theta follows it.
        for hp in sk_kernel.hyperparameters:
            raw = np.asarray(getattr(sk_kernel, hp.name), dtype=np.float64)
            self.values[hp.name] = float(raw.reshape(-1)[0]) if hp.n_elements == 1 else raw.reshape(-1).copy()
            if hp.fixed:
                self.slots[hp.name] = None
            else:
                self.slots[hp.name] = slice(pos, pos + hp.n_elements)
                pos += hp.n_elements
        self.n_theta = pos - offset
        self.refresh()

    def load(self, theta):
        """Read this kernel's hyperparameters from the global (log) theta.

        A numpy theta gives host values (Python floats, numpy arrays for a vector length
        scale). A theta of a device library (a training loop on its arrays keeps the
        hyperparameters there, see :meth:`CompiledKernel.set_theta`) gives 0-d and 1-d
        arrays on its device, so that no evaluation reads one back to the host.
        """
        device = not isinstance(theta, np.ndarray)
        xp = backend.namespace(theta) if device else np
        for name, sl in self.slots.items():
            if sl is None:
                continue
            v = xp.exp(theta[sl])
            scalar = np.ndim(self.values[name]) == 0
            if device:
                self.values[name] = xp.reshape(v, ()) if scalar else v
            else:
                self.values[name] = float(v[0]) if v.size == 1 and scalar else v
        self.refresh()

    def value(self, name, like):
        """The value of hyperparameter ``name`` to combine with the array ``like`` (see
        :func:`value_for`)."""
        return value_for(self.values[name], like)

    def refresh(self):
        """Recompute derived quantities after the hyperparameters changed."""

    def saved_hyperparameters(self):
        """A copy of the hyperparameters as this node holds them, for
        :meth:`restore_hyperparameters` (``load`` of their theta computes ``exp(log v)``,
        which may differ from ``v`` in the last bit)."""
        return {name: _copied(v) for name, v in self.values.items()}

    def restore_hyperparameters(self, saved):
        """Hold again the hyperparameters of :meth:`saved_hyperparameters`."""
        self.values = {name: _copied(v) for name, v in saved.items()}
        self.refresh()

    def accumulate(self, theta_bar, name, grad):
        """Add ``d F / d log(name)`` into the global gradient (no-op if fixed)."""
        sl = self.slots[name]
        if sl is not None:
            theta_bar[sl] += grad

    def free(self, name):
        return self.slots[name] is not None


def _copied(value):
    """A copy of a host array value; a number or a device value as it is (device values
    are replaced by :meth:`Leaf.load`, never written in place, so a reference keeps them)."""
    return np.array(value, copy=True) if isinstance(value, np.ndarray) else value
