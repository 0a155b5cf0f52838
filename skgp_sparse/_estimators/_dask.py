"""Dask input at prediction: every method maps the fitted estimator over X's row chunks
and returns a lazy Dask array; each chunk is predicted where it lives.

Imported only when an estimator is handed a Dask collection, so Dask stays an optional
extra (``pip install -e '.[dask]'``). Training streams Dask rows through
:class:`skgp_sparse.fit.rows.DaskRows`.
"""

import numpy as np

from ..fit.rows import as_dask_matrix


def map_rows(func, X):
    """``func`` (a fitted estimator's method on numpy rows) mapped over X's row chunks.

    Parameters
    ----------
    func : callable
        ndarray (n, D) -> ndarray (n,) or (n, k), or a tuple of such float arrays.
    X : dask.array.Array of shape (n, D)

    Returns
    -------
    dask.array.Array or tuple of them, as ``func`` returns, chunked as X's rows.
    """
    X = as_dask_matrix(X)
    # One row of zeros tells the output shapes and types (and checks the feature count).
    probe = func(np.zeros((1, X.shape[1])))
    single = not isinstance(probe, tuple)
    probes = (probe,) if single else probe
    rows = X.chunks[0]
    if single:
        kind = np.asarray(probe)
        tail = kind.shape[1:]

        def block(b):
            if b.shape[0] == 0:
                return np.empty((0,) + tail, dtype=kind.dtype)
            return func(b)

        if kind.ndim == 1:
            return X.map_blocks(block, dtype=kind.dtype, chunks=(rows,), drop_axis=1,
                                meta=np.empty((0,), dtype=kind.dtype))
        return X.map_blocks(block, dtype=kind.dtype, chunks=(rows, tail),
                            meta=np.empty((0, 0), dtype=kind.dtype))
    # Several outputs: computed once per chunk as side-by-side columns, then split.
    widths = [1 if p.ndim == 1 else p.shape[1] for p in probes]

    def stacked(b):
        if b.shape[0] == 0:
            return np.empty((0, sum(widths)))
        return np.column_stack([np.reshape(a, (b.shape[0], -1)) for a in func(b)])

    columns = X.map_blocks(stacked, dtype=np.float64, chunks=(rows, (sum(widths),)),
                           meta=np.empty((0, 0)))
    edges = np.concatenate([[0], np.cumsum(widths)])
    outs = []
    for p, lo, hi in zip(probes, edges[:-1], edges[1:]):
        part = columns[:, lo:hi]
        outs.append(part[:, 0] if p.ndim == 1 else part)
    return tuple(outs)
