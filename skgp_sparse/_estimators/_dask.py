"""Dask input: training that streams X chunk by chunk, prediction by ``map_blocks``.

Imported only when an estimator is handed a Dask collection, so Dask stays an optional
extra (``pip install "skgp_sparse[dask]"``).

Training: the targets y (n x targets, small) are brought into memory; X never is. Each
epoch visits X's row chunks in a shuffled order, computes one chunk at a time (on the
Dask scheduler in use: threads, or the workers of a ``dask.distributed`` cluster),
shuffles its rows and cuts it into minibatches; the rows left over at the end of a chunk
join the next chunk's, so every minibatch has ``batch_size`` rows but the epoch's last.
The optimisation itself is sequential and runs in the calling process. Memory is that of
one chunk of X plus the model (O(chunk * D + batch_size * M + M^2)).

Prediction: every method maps the fitted estimator over X's row chunks and returns a
lazy Dask array; each chunk is predicted where it lives.
"""

import numpy as np
import dask.array as da
from sklearn.utils import check_array
from sklearn.utils.validation import column_or_1d, validate_data

from ..inducing import MAX_ROWS
from ._common import random_rows


def _as_dask_matrix(X, name="X"):
    """A 2-D Dask array with known row chunks and a single column chunk."""
    if not isinstance(X, da.Array):
        raise TypeError(
            f"{name} is a Dask {type(X).__name__}, but only Dask arrays are supported; "
            "convert it with .to_dask_array(lengths=True)"
        )
    if X.ndim != 2:
        raise ValueError(
            f"Expected a 2D Dask array for {name}, got {X.ndim}D; reshape it to (n_samples, n_features)"
        )
    if any(np.isnan(c) for c in X.chunks[0]):
        raise ValueError(f"{name} has chunks of unknown size; call {name}.compute_chunk_sizes() first")
    return X.rechunk({1: -1}) if len(X.chunks[1]) > 1 else X


def _finite_block(block, start, dtype=np.float64):
    """A chunk of X in ``dtype``, refused with the rows named if it holds NaN or inf
    (checked before the conversion, so that a value too large for float32 is not
    reported as an infinity of the input)."""
    block = np.asarray(block, dtype=np.float64)
    if not np.all(np.isfinite(block)):
        rows = start + np.flatnonzero(~np.all(np.isfinite(block), axis=1))
        raise ValueError(f"X contains NaN or inf (rows {rows[:5].tolist()} among others)")
    return block.astype(dtype, copy=False)


class DaskRows:
    """Training rows held in a Dask array, served as minibatches one chunk at a time.

    Attributes
    ----------
    sample : ndarray
        At most ``MAX_ROWS`` random rows (inducing inputs, feature scales), float64.
    n_rows : int
    dtype : numpy dtype
        Floating dtype of the minibatches (float32 for a float32 fit).
    converts : bool
        Whether the state and the targets are converted for training (float32).
    """

    def __init__(self, X, sample, sample_rows, dtype=np.float64):
        self.X = X
        self.sample = sample
        self.sample_rows = sample_rows
        self.n_rows = X.shape[0]
        self.starts = np.concatenate([[0], np.cumsum(X.chunks[0])]).astype(int)
        self.dtype = np.dtype(dtype)
        self.converts = self.dtype != np.float64

    def to_device(self, a):
        """A host array ``a`` (targets, state) in the minibatches' dtype."""
        return np.asarray(a, dtype=self.dtype)

    def sample_weights(self, weights):
        """The weights of the rows of ``sample`` (None when ``weights`` is None)."""
        return None if weights is None else weights[self.sample_rows]

    def monitor_rows(self, Y, n_rows, rng):
        """None: a streamed fit has no fixed rows in memory to monitor (the stopping rule
        reads the mean of each period's minibatch estimates instead)."""
        return None

    def search_rows(self, Y, n_rows, rng):
        """At most ``n_rows`` rows of the sample with their targets (``Y`` is in memory),
        for the exact search that starts a fit."""
        take = random_rows(self.sample.shape[0], n_rows, rng)
        if take is None:
            return self.sample, Y[self.sample_rows]
        return self.sample[take], Y[self.sample_rows[take]]

    def all_rows(self, Y):
        """(X, Y), every row in order, as numpy (a full-batch fit holds them all anyway)."""
        blocks = [_finite_block(self.X.blocks[i].compute(), self.starts[i], self.dtype)
                  for i in range(len(self.X.chunks[0]))]
        return np.concatenate(blocks), Y

    def batches(self, Y, batch_size):
        """``batches(rng)``: one epoch of minibatches of (X, Y), streamed chunk by chunk."""
        X, starts, dtype = self.X, self.starts, self.dtype

        def epoch(rng):
            carry_x = carry_y = None
            for i in rng.permutation(len(X.chunks[0])):
                if starts[i + 1] == starts[i]:
                    continue
                xc = _finite_block(X.blocks[int(i)].compute(), starts[i], dtype)
                yc = Y[starts[i] : starts[i + 1]]
                order = rng.permutation(xc.shape[0])
                xc, yc = xc[order], yc[order]
                if carry_x is not None:
                    xc, yc = np.concatenate([carry_x, xc]), np.concatenate([carry_y, yc])
                n_full = (xc.shape[0] // batch_size) * batch_size
                for lo in range(0, n_full, batch_size):
                    yield xc[lo : lo + batch_size], yc[lo : lo + batch_size]
                carry_x, carry_y = (xc[n_full:], yc[n_full:]) if n_full < xc.shape[0] else (None, None)
            if carry_x is not None:
                yield carry_x, carry_y

        return epoch


def training_rows(estimator, X, y, rng, reset=True, multi_output=False, y_numeric=False):
    """Validate Dask (X, y) for fit: a :class:`DaskRows` and y as a numpy array.

    X stays lazy: only a random sample of at most ``MAX_ROWS`` rows is computed here (to
    check it, set ``n_features_in_`` and initialise from); NaN or inf elsewhere is
    reported when its chunk is reached.
    """
    if not hasattr(X, "__dask_graph__"):
        X = da.from_array(np.asarray(X))
    X = _as_dask_matrix(X)
    y = y.compute() if hasattr(y, "__dask_graph__") else y
    y = check_array(
        y, ensure_2d=False, dtype=np.float64 if y_numeric else None, ensure_all_finite=True,
        input_name="y", ensure_min_samples=1,
    )
    if not multi_output or y.ndim == 1:
        y = column_or_1d(y, warn=True)
    n = X.shape[0]
    if y.shape[0] != n:
        raise ValueError(f"Found input variables with inconsistent numbers of samples: [{n}, {y.shape[0]}]")
    if n == 0:
        raise ValueError("Found array with 0 sample(s) (shape=(0, ...)) while a minimum of 1 is required.")
    rows = random_rows(n, MAX_ROWS, rng)
    rows = np.arange(n) if rows is None else rows
    sample = np.asarray(X[rows].compute())
    sample = validate_data(estimator, sample, reset=reset, dtype=np.float64)
    return DaskRows(X, sample, rows, dtype=estimator.dtype), y


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
    X = _as_dask_matrix(X)
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
