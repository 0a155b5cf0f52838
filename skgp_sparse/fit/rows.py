"""Training rows: where they live and how a fit reads them.

A fit reads its rows through one protocol, :class:`Rows`, whatever holds them: a numpy
array (:class:`InMemoryRows`), an array of another Array API library on its device or a
float32 copy (:class:`DeviceRows`), or a Dask array streamed chunk by chunk
(:class:`DaskRows`; Dask is imported only when a Dask collection arrives).

The estimator validates (X, y) (scikit-learn's ``validate_data`` sets its
``n_features_in_``) and builds the kind :func:`.placement.fit_device` says; the
functions here take the arrays, never the estimator: :func:`host_copies` and
:func:`device_rows` around the validation of rows fitted on a device,
:func:`stream_inputs` and :func:`stream_sample` before that of a Dask array's sample.
"""

import abc

import numpy as np
from sklearn.utils import check_array
from sklearn.utils.validation import column_or_1d

from .. import backend
from ..inducing import MAX_ROWS
from ..optim.loop import array_batches


def random_rows(n_total, n_rows, rng):
    """``n_rows`` of ``n_total`` row indices drawn without replacement, in order; None when
    ``n_rows`` covers them all (take every row, draw nothing)."""
    if n_rows >= n_total:
        return None
    return np.sort(rng.choice(n_total, n_rows, replace=False))


class Rows(abc.ABC):
    """What the fit pipeline reads of its training rows.

    Attributes
    ----------
    sample : ndarray
        float64 numpy rows to initialise from (inducing inputs, feature scales): every
        row, or a random sample of a streamed set.
    n_rows : int
        Rows in the training set.
    converts : bool
        Whether the model's state and the targets must pass through :meth:`to_device`
        to train on these rows (False for float64 numpy rows).
    dtype : dtype
        The floating dtype of the arrays the training steps read.
    """

    converts = False

    def to_device(self, a):
        """A host array ``a`` (targets, state) as the training steps take it."""
        return a

    def of_sample(self, values):
        """The entries of ``values`` (one per training row: weights, labels) at the rows
        of ``sample`` (None when ``values`` is None)."""
        return values

    @abc.abstractmethod
    def batches(self, Y, batch_size):
        """``batches(rng)``: one epoch of shuffled minibatches of ``batch_size`` rows of (X, Y)."""

    @abc.abstractmethod
    def all_rows(self, Y):
        """(X, Y), every row in order (a full-batch fit)."""

    @abc.abstractmethod
    def monitor_rows(self, Y, n_rows, rng):
        """A fixed random sample of at most ``n_rows`` rows of (X, Y) for the stopping
        rule, or None where the rows are not held in memory."""

    @abc.abstractmethod
    def search_rows(self, Y, n_rows, rng):
        """At most ``n_rows`` random rows of (X, Y) as float64 numpy arrays (``Y`` is the
        host target array), for the exact search that starts a fit: all of them when
        there are no more."""


class InMemoryRows(Rows):
    """Training rows held as one float64 numpy array; ``sample`` is all of them."""

    def __init__(self, X):
        self.X = X
        self.sample = X
        self.n_rows = X.shape[0]
        self.dtype = X.dtype

    def batches(self, Y, batch_size):
        return array_batches(self.X, Y, batch_size)

    def all_rows(self, Y):
        return self.X, Y

    def monitor_rows(self, Y, n_rows, rng):
        rows = random_rows(self.n_rows, n_rows, rng)
        return (self.X, Y) if rows is None else (self.X[rows], Y[rows])

    def search_rows(self, Y, n_rows, rng):
        rows = random_rows(self.sample.shape[0], n_rows, rng)
        return (self.sample, Y) if rows is None else (self.sample[rows], Y[rows])


class DeviceRows(InMemoryRows):
    """Training rows held as one array of another Array API library (torch, CuPy,
    array_api_strict, ...), on its device, or as a float32 numpy array (a float32 fit
    on the CPU).

    Minibatches are cut there with ``xp.take``; their rows are those the numpy path draws
    (the same Generator permutation, each batch's rows sorted), sent to the device once
    per epoch as one index array. ``sample`` is a host (numpy) copy of the rows, used
    only to initialise (inducing inputs by k-means, feature scales).
    """

    converts = True

    def __init__(self, X, sample, xp, dtype):
        self.X = X
        self.sample = sample
        self.n_rows = X.shape[0]
        self.xp = xp
        self.dtype = dtype
        self.device = backend.device_of(X)

    def _take(self, a, rows):
        return self.xp.take(a, rows, axis=0)

    def batches(self, Y, batch_size):
        X, n = self.X, self.n_rows

        def batches(rng):
            if batch_size >= n:
                yield X, Y
                return
            order = rng.permutation(n)
            starts = range(0, n, batch_size)
            host_rows = np.concatenate([np.sort(order[start : start + batch_size]) for start in starts])
            rows = backend.to_namespace(host_rows, self.xp, device=self.device)
            for start in starts:
                part = rows[start : min(start + batch_size, n)]
                yield self._take(X, part), self._take(Y, part)

        return batches

    def monitor_rows(self, Y, n_rows, rng):
        rows = random_rows(self.n_rows, n_rows, rng)
        if rows is None:
            return self.X, Y
        rows = backend.to_namespace(rows, self.xp, device=self.device)
        return self._take(self.X, rows), self._take(Y, rows)

    def to_device(self, a):
        """A host array ``a`` (targets, state) in the rows' library, on their device, in
        their floating dtype."""
        return backend.to_namespace(a, self.xp, device=self.device, dtype=self.dtype)


def as_dask_matrix(X, name="X"):
    """A 2-D Dask array with known row chunks and a single column chunk."""
    import dask.array as da

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


def finite_block(block, start, dtype=np.float64):
    """A chunk of X in ``dtype``, refused with the rows named if it holds NaN or inf
    (checked before the conversion, so that a value too large for float32 is not
    reported as an infinity of the input)."""
    block = np.asarray(block, dtype=np.float64)
    if not np.all(np.isfinite(block)):
        rows = start + np.flatnonzero(~np.all(np.isfinite(block), axis=1))
        raise ValueError(f"X contains NaN or inf (rows {rows[:5].tolist()} among others)")
    return block.astype(dtype, copy=False)


class DaskRows(Rows):
    """Training rows held in a Dask array, served as minibatches one chunk at a time.

    X is never in memory: each epoch visits its row chunks in a shuffled order, computes
    one chunk at a time (on the Dask scheduler in use), shuffles its rows and cuts it into
    minibatches; the rows left over at the end of a chunk join the next chunk's, so every
    minibatch has ``batch_size`` rows but the epoch's last. Memory is that of one chunk of
    X plus the model.

    Attributes
    ----------
    sample : ndarray
        At most ``MAX_ROWS`` random rows (inducing inputs, feature scales), float64.
    sample_rows : ndarray of int
        Their row numbers.
    dtype : numpy dtype
        Floating dtype of the minibatches (float32 for a float32 fit).
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

    def of_sample(self, values):
        """The entries of ``values`` (one per training row: weights, labels) at the rows
        of ``sample`` (None when ``values`` is None)."""
        return None if values is None else values[self.sample_rows]

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
        blocks = [finite_block(self.X.blocks[i].compute(), self.starts[i], self.dtype)
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
                xc = finite_block(X.blocks[int(i)].compute(), starts[i], dtype)
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


def host_copies(X, y):
    """(X, y) as numpy arrays, for the checks of ``validate_data`` and the target
    transformations (numpy code) of a fit on a device; numpy input as it is."""
    return (backend.to_numpy(X) if backend.is_foreign(X) else X,
            backend.to_numpy(y) if backend.is_foreign(y) else y)


def device_rows(X, host_X, where):
    """The training rows of a fit on ``where`` (a :class:`.placement.FitDevice`): X in
    the device's library, on its device, in its dtype, beside ``host_X``, its validated
    float64 numpy copy. An array already of that library is converted in place of the
    host copy (no round trip through the host)."""
    xp = where.xp
    if backend.is_foreign(X):
        X = xp.astype(X, where.dtype) if X.dtype != where.dtype else X
    else:
        X = backend.to_namespace(host_X, xp, device=where.device, dtype=where.dtype)
    return DeviceRows(X, host_X, xp, where.dtype)


def stream_inputs(X, y, multi_output=False, y_numeric=False):
    """Dask (X, y) checked for a streamed fit: X as a Dask matrix (see
    :func:`as_dask_matrix`; other input wrapped as one), y as a validated numpy array.

    X stays lazy: NaN or inf in it is reported when its chunk is reached (and in the
    sample by its validation).
    """
    if not hasattr(X, "__dask_graph__"):
        import dask.array as da

        X = da.from_array(np.asarray(X))
    X = as_dask_matrix(X)
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
    return X, y


def stream_sample(X, rng):
    """The row numbers of at most ``MAX_ROWS`` random rows of the Dask matrix X and those
    rows computed as numpy, to validate and initialise from (:class:`DaskRows`'s
    ``sample_rows`` and ``sample``)."""
    n = X.shape[0]
    rows = random_rows(n, MAX_ROWS, rng)
    rows = np.arange(n) if rows is None else rows
    return rows, np.asarray(X[rows].compute())
