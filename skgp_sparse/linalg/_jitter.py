"""The jitter schedule of a Cholesky factorisation, shared by both back ends: its
constants, its warning and error, and the loop that retries with more jitter."""

import warnings

import numpy as np

__all__ = [
    "DEFAULT_JITTER",
    "MAX_JITTER_TRIES",
    "FLOAT32_MIN_JITTER",
    "CholeskyError",
    "JitterWarning",
    "retry_with_jitter",
]

DEFAULT_JITTER = 1e-6
MAX_JITTER_TRIES = 6
#: The smallest relative jitter a float32 matrix is factorised with: float32's machine
#: epsilon. Its entries carry rounding errors of about that much of the largest, which
#: can leave a nearly singular kernel matrix indefinite by as much: a smaller jitter
#: (such as ``jitter="auto"`` with little noise) cannot make it positive definite, in
#: float64 either, and would only spend the schedule's tries.
FLOAT32_MIN_JITTER = float(np.finfo(np.float32).eps)


class CholeskyError(np.linalg.LinAlgError):
    """A matrix stayed indefinite after every jitter retry."""


class JitterWarning(UserWarning):
    """More jitter than the default was needed to factorise a kernel matrix."""


def retry_with_jitter(factor, scale, jitter, max_tries, what, stacklevel, wide_factor=None):
    """The jitter schedule of :func:`skgp_sparse.linalg.jittered_cholesky`, for any
    factorisation.

    ``factor(added)`` factorises the matrix with ``added`` on its diagonal and returns
    ``(low, succeeded)``. It is tried with ``jitter * scale``, then ten times more each
    time (from 1e-10 when a zero jitter fails), at most ``max_tries`` times. A success
    after the first attempt warns (:class:`JitterWarning`, at ``stacklevel``); when every
    attempt fails, :class:`CholeskyError` names the largest jitter tried.

    ``wide_factor`` (float32 matrices): the same factorisation computed in float64, with
    the factor returned in float32. When the first attempt of ``factor`` fails, the
    schedule runs on ``wide_factor`` instead, from the same jitter.

    Returns
    -------
    low, relative : the factor and the relative jitter that succeeded
    """
    if wide_factor is not None:
        low, ok = factor(jitter * scale)
        if ok:
            return low, jitter
        factor = wide_factor
    rel = jitter
    tried = rel
    for attempt in range(max_tries):
        low, ok = factor(rel * scale)
        if ok:
            if attempt > 0:
                warnings.warn(
                    f"{what} needed a relative jitter of {rel:.0e} to be factorised",
                    JitterWarning,
                    stacklevel=stacklevel,
                )
            return low, rel
        tried = rel
        # A zero jitter that fails escalates from a tiny positive one.
        rel = rel * 10.0 if rel > 0 else 1e-10
    raise CholeskyError(
        f"{what} is not positive definite even with a relative jitter of {tried:.0e}; "
        "the kernel hyperparameters are probably degenerate (check for duplicated inducing "
        "points, a vanishing length scale or unscaled inputs)"
    )
