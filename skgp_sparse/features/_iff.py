"""Integrated variational Fourier features for stationary kernels in one to three dimensions.

Cheema and Rasmussen, "Integrated Variational Fourier Features for Fast Spatial Modelling
with Gaussian Processes" (arXiv 2308.14142).

Fourier convention: frequencies ``xi`` are in cycles per unit of ``x`` and the spectral
density is ``S(xi) = int k(tau) exp(-2 pi i xi . tau) d tau``, so that
``k(tau) = int S(xi) exp(2 pi i xi . tau) d xi`` and ``int S = k(0)``, the variance.

Features. Write the process in its real spectral form over the half-space ``H`` of
frequencies with a positive first coordinate,
``f(x) = int_H cos(2 pi xi . x) dA(xi) + sin(2 pi xi . x) dB(xi)``, where ``A`` and ``B``
are independent with ``E[dA(xi)^2] = E[dB(xi)^2] = 2 S(xi) d xi``. For a grid frequency
``z`` in ``H`` with the box ``Q = z + [-eps/2, eps/2]^D`` around it, the two features are

    u_cos = (1 / vol) int_Q dA(xi) / (sqrt(2) S(xi)),   u_sin the same with dB,

``vol = prod_d eps_d`` (the reference implementation weights by ``1/S`` too; the paper's
analysis weights by ``1/sqrt(S)``, which leads to the same approximations below). Then,
exactly, ``cov(u_cos, f(x)) = sqrt(2) / vol int_Q cos(2 pi xi . x) d xi
= sqrt(2) cos(2 pi z . x) prod_d sinc(pi eps_d x_d)`` (``sinc(t) = sin(t) / t``) and
``cov(u_cos, u_cos) = (1 / vol^2) int_Q 1 / S``; features of different boxes, or a cosine
and a sine, are uncorrelated. The method replaces both integrals by their midpoint values:

* :func:`iff_kuf`: ``sqrt(2) cos(2 pi z . x)`` and ``sqrt(2) sin(2 pi z . x)``, free of
  hyperparameters and of ``eps`` (exact up to the factor ``prod_d sinc(pi eps_d x_d)``,
  close to 1 while ``|x_d| << 1 / eps_d``: hence ``eps`` about 0.95 over the data's width);
* :func:`iff_kuu_diagonal`: ``1 / (S(z) vol)``, the same for the cosine and the sine.

With these, ``sum_m K_uf[m, x] K_uf[m, x'] / K_uu[m] = 2 sum_z S(z) vol cos(2 pi z . (x - x'))``,
a midpoint sum for ``k(x - x')`` over the grid (both halves of frequency space).

Layout: :func:`iff_frequencies` returns ``K`` frequencies; the ``M = 2K`` features are the
``K`` cosines followed by the ``K`` sines of those frequencies, in both :func:`iff_kuf` and
:func:`iff_kuu_diagonal`.

Kernels: ``"rbf"`` (``s2 exp(-1/2 sum_d tau_d^2 / l_d^2)``) and ``"matern"`` (scikit-learn's
``Matern`` times ``s2``, a function of the scaled Euclidean distance
``r = sqrt(sum_d tau_d^2 / l_d^2)``, so its density is the D-dimensional Matern density in
scaled coordinates, not a product of one-dimensional ones). Length scales are of shape
``(D,)`` or ``(1,)`` (isotropic); gradients in ``log_length_scales`` keep that shape.
"""

import numpy as np
from scipy.special import gammaln

__all__ = [
    "iff_frequencies",
    "iff_log_density",
    "iff_kuf",
    "iff_kuu_diagonal",
    "iff_kuu_diagonal_adjoint",
    "spectral_density",
]

_KINDS = ("rbf", "matern")
_ORDERS = (0.5, 1.5, 2.5)


def _check_kernel(kind, nu):
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
    if kind == "matern" and (nu is None or float(nu) not in _ORDERS):
        raise ValueError(f"a Matern kernel needs nu in {_ORDERS}, got {nu!r}")


def _as_frequencies(frequencies):
    freq = np.asarray(frequencies, dtype=np.float64)
    return freq[:, None] if freq.ndim == 1 else freq


def _scaled_squares(freq, length_scales):
    """``(xi_d l_d)^2`` (K, D) and the length scales as given (1-D) and broadcast to (D,)."""
    ls = np.atleast_1d(np.asarray(length_scales, dtype=np.float64))
    n_dims = freq.shape[1]
    if ls.ndim != 1 or ls.size not in (1, n_dims):
        raise ValueError(f"length_scales must have shape (1,) or ({n_dims},), got {ls.shape}")
    ls_full = np.broadcast_to(ls, (n_dims,))
    return (freq * ls_full) ** 2, ls, ls_full


def _log_density_parts(kind, freq, length_scales, variance, nu):
    """``log S`` (K,) and ``d log S / d log l_d`` (K, D)."""
    _check_kernel(kind, nu)
    sq, _, ls_full = _scaled_squares(freq, length_scales)
    n_dims = freq.shape[1]
    log_norm = np.log(variance) + np.sum(np.log(ls_full))
    if kind == "rbf":
        log_s = log_norm + 0.5 * n_dims * np.log(2 * np.pi) - 2 * np.pi**2 * sq.sum(axis=1)
        dlog_s = 1.0 - 4 * np.pi**2 * sq
        return log_s, dlog_s
    nu = float(nu)
    power = nu + 0.5 * n_dims
    base = 1.0 + 2 * np.pi**2 * sq.sum(axis=1) / nu
    log_const = (n_dims * np.log(2.0) + 0.5 * n_dims * np.log(np.pi) + gammaln(power)
                 - gammaln(nu) - 0.5 * n_dims * np.log(2 * nu))
    log_s = log_norm + log_const - power * np.log(base)
    dlog_s = 1.0 - power * (4 * np.pi**2 / nu) * sq / base[:, None]
    return log_s, dlog_s


def iff_log_density(kind, frequencies, length_scales, variance, nu=None):
    """``log S`` (K,) at the frequencies (K, D) and its derivative in the log length scale
    of each dimension (K, D) (in ``log variance`` it is 1): see :func:`spectral_density`."""
    return _log_density_parts(kind, _as_frequencies(frequencies), length_scales, variance, nu)


def spectral_density(kind, frequencies, length_scales, variance, nu=None):
    """Spectral density of an RBF or Matern kernel with an amplitude.

    Parameters
    ----------
    kind : {"rbf", "matern"}
        The kernel.
    frequencies : ndarray of shape (K, D)
        Frequencies in cycles per unit (a 1-D array is read as (K, 1)).
    length_scales : ndarray of shape (D,) or (1,)
        Length scales (one entry: isotropic).
    variance : float
        Amplitude ``s2 = k(0)``.
    nu : {0.5, 1.5, 2.5}, optional
        Matern order (Matern only).

    Returns
    -------
    ndarray of shape (K,)
        ``S(xi) = int k(tau) exp(-2 pi i xi . tau) d tau``, which integrates to ``s2``:
        ``s2 (2 pi)^(D/2) prod(l) exp(-2 pi^2 sum_d xi_d^2 l_d^2)`` for the RBF, and
        ``s2 prod(l) 2^D pi^(D/2) Gamma(nu + D/2) / (Gamma(nu) (2 nu)^(D/2))
        (1 + 2 pi^2 sum_d xi_d^2 l_d^2 / nu)^(-(nu + D/2))`` for the Matern.
    """
    freq = _as_frequencies(frequencies)
    return np.exp(_log_density_parts(kind, freq, length_scales, variance, nu)[0])


def iff_frequencies(n_per_dim, eps, spherical=True):
    """Grid frequencies of the integrated features, one of each pair ``+-z``.

    Along dimension ``d`` the grid is ``(j + 1/2) eps_d`` for ``j = -n_d, ..., n_d - 1``:
    the centres of ``2 n_d`` intervals of width ``eps_d`` tiling ``[-n_d eps_d, n_d eps_d]``.
    Of the full grid only the half with a positive first coordinate is kept (``-z`` gives
    the same cosine and the opposite sine). With ``spherical``, only the frequencies
    inside the ellipsoid ``sum_d (z_d / (n_d eps_d))^2 <= 1`` are kept (in 1-D this keeps
    all). Row order: C order over the grid indices (last dimension fastest).

    Parameters
    ----------
    n_per_dim : int or sequence of int
        ``n_d``, the number of positive grid values per dimension; an int means D = 1.
    eps : float or sequence of float
        Interval widths ``eps_d`` (cycles per unit); one value for all dimensions, or D.
    spherical : bool, default=True
        Cut the grid to the ellipsoid above.

    Returns
    -------
    ndarray of shape (K, D)
        ``K = n_1`` in 1-D, ``prod_d (2 n_d) / 2`` without the cut. The features number
        ``M = 2K``.
    """
    n = np.atleast_1d(np.asarray(n_per_dim, dtype=np.int64))
    eps = np.broadcast_to(np.asarray(eps, dtype=np.float64), n.shape)
    if np.any(n < 1) or np.any(eps <= 0):
        raise ValueError("n_per_dim must be >= 1 and eps > 0")
    axes = [(np.arange(-nd, nd) + 0.5) * ed for nd, ed in zip(n, eps)]
    axes[0] = axes[0][axes[0] > 0]
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, n.size)
    if spherical:
        grid = grid[np.sum((grid / (n * eps)) ** 2, axis=1) <= 1.0]
    return grid


def iff_kuf(X, frequencies, eps):
    """Covariance between the integrated features (midpoint form) and function values.

    Parameters
    ----------
    X : ndarray of shape (N, D)
        Inputs (a 1-D array is read as (N, 1)).
    frequencies : ndarray of shape (K, D)
        From :func:`iff_frequencies`.
    eps : float or ndarray of shape (D,)
        Interval widths. They do not enter: the features' normalisation cancels them
        (the exact covariance has the extra factor ``prod_d sinc(pi eps_d x_d)``).

    Returns
    -------
    ndarray of shape (2K, N)
        ``sqrt(2) cos(2 pi z_k . x_n)`` (rows ``0..K-1``) then ``sqrt(2) sin(2 pi z_k . x_n)``:
        independent of the kernel's hyperparameters. Memory O(K N): one matrix product,
        no (K, N, D) array.
    """
    del eps  # part of the signature shared with the other feature kinds
    X = np.asarray(X, dtype=np.float64)
    X = X[:, None] if X.ndim == 1 else X
    freq = _as_frequencies(frequencies)
    phase = (2.0 * np.pi) * (freq @ X.T)
    k = freq.shape[0]
    out = np.empty((2 * k, X.shape[0]))
    np.cos(phase, out=out[:k])
    np.sin(phase, out=out[k:])
    out *= np.sqrt(2.0)
    return out


def _volume(eps, n_dims):
    return float(np.prod(np.broadcast_to(np.asarray(eps, dtype=np.float64), (n_dims,))))


def iff_kuu_diagonal(frequencies, eps, kind, length_scales, variance, nu=None):
    """Diagonal of ``K(u, u)`` for the integrated features (midpoint form).

    Parameters
    ----------
    frequencies : ndarray of shape (K, D)
        From :func:`iff_frequencies`.
    eps : float or ndarray of shape (D,)
        Interval widths.
    kind, length_scales, variance, nu
        As in :func:`spectral_density`.

    Returns
    -------
    ndarray of shape (2K,)
        ``1 / (S(z_k) prod_d eps_d)``, for the cosines then (the same values) the sines.
        ``K(u, u)`` is this diagonal: features of disjoint frequency boxes are
        uncorrelated; the midpoint value replaces ``(1 / vol^2) int_Q 1 / S``.
        The RBF's density falls as ``exp(-2 pi^2 sum_d xi_d^2 l_d^2)``: beyond about
        ``2 pi^2 sum_d z_d^2 l_d^2 > 700`` it underflows and the entry is ``inf`` (a
        feature with no prior variance, which carries no information); keep the grid
        inside that radius, or drop those frequencies.
    """
    freq = _as_frequencies(frequencies)
    log_s = _log_density_parts(kind, freq, length_scales, variance, nu)[0]
    diag = np.exp(-log_s) / _volume(eps, freq.shape[1])
    return np.concatenate([diag, diag])


def iff_kuu_diagonal_adjoint(frequencies, eps, kind, length_scales, variance, nu, bar):
    """Gradients of ``sum(bar * iff_kuu_diagonal(...))`` in the kernel's log-parameters.

    Parameters
    ----------
    frequencies, eps, kind, length_scales, variance, nu
        As in :func:`iff_kuu_diagonal`.
    bar : ndarray of shape (2K,)
        The adjoint of the diagonal (cosines then sines).

    Returns
    -------
    dict
        ``"log_length_scales"`` (shape of ``length_scales``: summed over dimensions when
        isotropic) and ``"log_variance"`` (float).
    """
    freq = _as_frequencies(frequencies)
    log_s, dlog_s = _log_density_parts(kind, freq, length_scales, variance, nu)
    k = freq.shape[0]
    bar = np.asarray(bar, dtype=np.float64)
    # Each diagonal entry is 1 / (S vol): its log-derivative is minus that of S.
    weighted = (bar[:k] + bar[k:]) * np.exp(-log_s) / _volume(eps, freq.shape[1])
    grad_ls = -(weighted @ dlog_s)
    ls = np.atleast_1d(np.asarray(length_scales, dtype=np.float64))
    if ls.size != grad_ls.size:
        grad_ls = np.array([grad_ls.sum()])
    return {"log_length_scales": grad_ls, "log_variance": -float(weighted.sum())}
