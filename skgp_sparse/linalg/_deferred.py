"""Status flags that a training step keeps on the device instead of reading them at once.

On a GPU every ``bool(...)`` or ``float(...)`` of a device value is a synchronisation:
the host waits for the queue to drain before it can decide. A training step asks such
questions in many places (did the Cholesky factorisation succeed, is the input finite,
does any pair of points need its squared distance refined), and the answer is almost
always the same. Within :func:`deferred_checks`, the primitives of :mod:`skgp_sparse.linalg`
and the kernels do not ask: they take the path that is right when nothing is wrong and
record the condition that would have sent them elsewhere as a 0-d boolean array in the
:class:`StatusFlags` of the scope. The training loop reads those flags with the values it
needs anyway, in one packed read every few steps, and replays the steps since its last
check on the careful path when one is raised.

The scope is a context variable (as ``numpy.errstate`` is a scope of error handling): it
holds for the code called inside the ``with`` block in this thread or task only, and
ends with the block.
"""

import contextlib
import contextvars

__all__ = ["StatusFlags", "deferred_checks", "pending_flags"]


class StatusFlags:
    """Conditions raised on the device since the last :meth:`take`, joined by ``|``.

    Each condition is a 0-d boolean array of the step's library and device; their union
    stays there (one elementwise ``|`` per condition), so that recording one never
    synchronises with the host.
    """

    def __init__(self):
        self._raised = None
        self._raised_on_host = False

    def note(self, condition):
        """Record ``condition``: True means the careful path was needed. A 0-d boolean
        array stays on its device; a Python bool (a check of a host value, which costs
        nothing to read) is kept on the host."""
        if isinstance(condition, bool):
            self._raised_on_host = self._raised_on_host or condition
        else:
            self._raised = condition if self._raised is None else self._raised | condition

    def take(self):
        """The union of the conditions noted since the last call, which starts a new
        record: True when one noted on the host was raised (nothing on the device need
        be read then), else a 0-d boolean array, or None when nothing was noted."""
        raised = True if self._raised_on_host else self._raised
        self._raised, self._raised_on_host = None, False
        return raised


_CURRENT = contextvars.ContextVar("skgp_sparse_status_flags", default=None)


@contextlib.contextmanager
def deferred_checks(flags):
    """Within the block, primitives note their checks in ``flags`` instead of reading them.

    Parameters
    ----------
    flags : StatusFlags

    Yields
    ------
    StatusFlags
        ``flags`` itself.
    """
    token = _CURRENT.set(flags)
    try:
        yield flags
    finally:
        _CURRENT.reset(token)


def pending_flags():
    """The :class:`StatusFlags` of the enclosing :func:`deferred_checks` block, or None
    outside one (then every check is read at once, as on the careful path)."""
    return _CURRENT.get()
