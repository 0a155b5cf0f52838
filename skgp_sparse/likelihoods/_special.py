"""Special functions of the likelihoods, in the namespace of their argument.

The likelihoods need scipy's special functions (``log_ndtr``, ``erfcx``, ``gammaln``,
``wrightomega``, ``logsumexp``, ...), which the Array API standard lacks. Each has an
entry here with a branch per library: scipy for numpy, ``torch.special`` for torch and
``cupyx.scipy.special`` for CuPy where they have the function, and otherwise a formula
in standard operations accurate to about 1e-14 in float64 (the table below lists them
with their measured accuracy); none makes a host round trip. Only the likelihoods use
them, so they live beside the likelihoods rather than in :mod:`skgp_sparse.backend`,
whose namespace lookups they use.
"""

import math

import numpy as np
import scipy.special

from ..backend import is_numpy, library, namespace

__all__ = [
    "erfc",
    "erfcx",
    "ndtr",
    "log_ndtr",
    "expit",
    "gammaln",
    "digamma",
    "wrightomega",
    "logsumexp",
    "softmax",
    "log_softmax",
]

# Each function below takes a real floating array of any supported library and returns
# one of the same namespace, device, shape and dtype. What computes it:
#
#   numpy   scipy.special itself (the same call as before, bit for bit)
#   torch   torch.special (torch.logsumexp for logsumexp) where torch has the function;
#           the formulas below for wrightomega (torch has none) and logsumexp with
#           weights b; erfc for ndtr (see ndtr)
#   cupy    cupyx.scipy.special where CuPy has the function, the formulas otherwise;
#           erfc for ndtr
#   other   (array_api_strict, JAX, ...) the formulas below, in standard operations
#
# The formulas, and their worst difference from scipy.special in float64 on the grids
# of tests/test_backend_likelihoods.py (which checks these bounds):
#
#   erfc, erfcx  Cody's rational Chebyshev approximations (Math. Comp. 23, 1969; the
#                CALERF coefficients), with exp(+-x^2) split as CALERF does so that x^2
#                is never rounded: 6e-14 relative, which is scipy's own rounding of x^2
#                in the tails (the formulas agree with 40-digit values to 4e-16 there)
#   ndtr         erfc(-x / sqrt(2)) / 2: 6e-14 relative, the same tails
#   log_ndtr     scipy's split: log(erfcx(-t) / 2) - t^2 below x = -1, log1p(-erfc(t) / 2)
#                above, t = x / sqrt(2): 6e-14 relative
#   expit        1 / (1 + e) or e / (1 + e) with e = exp(-|x|): 4e-16 relative
#   gammaln      Cephes' lgam: below 13 the recurrence into [2, 3) and a rational
#                function there (exact at 1 and 2, relative around them), Stirling's
#                series from 13, the reflection formula below 0: 4e-15 max(1, |value|)
#   digamma      the recurrence up to 10 and the asymptotic series, the reflection
#                formula below 0: 1e-14 max(1, |value|) at least 0.01 from a pole
#                (closer to a negative pole scipy and torch lose digits the reflection
#                keeps: 2e-12 at -3.99995)
#   wrightomega  scipy's starting values and two Fritsch-Shafer-Crowley steps (fourth
#                order): 4e-15 relative
#   logsumexp, softmax, log_softmax  shifted by the finite maximum: 1e-15 relative
#
# In float32 the formulas run in float32, within 2e-5 of scipy's float64 value of the
# float32 argument (in the tails, float32's rounding of x^2 costs x^2 * 6e-8).
# None of them makes a host round trip.

#: W. J. Cody's coefficients (CALERF): A/B erf on |x| <= 0.46875, C/D erfcx on
#: [0.46875, 4], P/Q erfcx on (4, inf) in powers of 1/x^2.
_ERF_A = (
    3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02, 3.20937758913846947e03,
    1.85777706184603153e-1,
)  # fmt: skip
_ERF_B = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03, 2.84423683343917062e03)
_ERF_C = (
    5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01, 2.98635138197400131e02,
    8.81952221241769090e02, 1.71204761263407058e03, 2.05107837782607147e03, 1.23033935479799725e03,
    2.15311535474403846e-8,
)  # fmt: skip
_ERF_D = (
    1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02, 1.62138957456669019e03,
    3.29079923573345963e03, 4.36261909014324716e03, 3.43936767414372164e03, 1.23033935480374942e03,
)  # fmt: skip
_ERF_P = (
    3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1, 1.60837851487422766e-2,
    6.58749161529837803e-4, 1.63153871373020978e-2,
)  # fmt: skip
_ERF_Q = (
    2.56852019228982242e00, 1.87295284992346047e00, 5.27905102951428412e-1, 6.05183413124413191e-2,
    2.33520497626869185e-3,
)  # fmt: skip
_ERF_SMALL = 0.46875
_ERF_MID = 4.0
_INV_SQRT_PI = 1.0 / math.sqrt(math.pi)
_SQRT1_2 = math.sqrt(0.5)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
#: Cephes' lgam on [2, 3): log Gamma(2 + t) = t B(t) / C(t), C monic (S. L. Moshier).
_LGAMMA_B = (
    -1.37825152569120859100e3, -3.88016315134637840924e4, -3.31612992738871184744e5,
    -1.16237097492762307383e6, -1.72173700820839662146e6, -8.53555664245765465627e5,
)  # fmt: skip
_LGAMMA_C = (
    -3.51815701436523470549e2, -1.70642106651881159223e4, -2.20528590553854454839e5,
    -1.13933444367982507207e6, -2.53252307177582951285e6, -2.01889141433532773231e6,
)  # fmt: skip
#: log Gamma takes Stirling's series from here on (Cephes' threshold).
_LGAMMA_STIRLING_FROM = 13.0
#: Stirling's series of log Gamma, B_2k / (2k (2k - 1)) for k = 1..8.
_STIRLING = (
    1.0 / 12, -1.0 / 360, 1.0 / 1260, -1.0 / 1680, 1.0 / 1188, -691.0 / 360360, 1.0 / 156, -3617.0 / 122400,
)  # fmt: skip
#: Asymptotic series of digamma, B_2k / (2k) for k = 1..7.
_DIGAMMA_SERIES = (1.0 / 12, -1.0 / 120, 1.0 / 252, -1.0 / 240, 1.0 / 132, -691.0 / 32760, 1.0 / 12)
#: The digamma series is used from this argument on; smaller ones are shifted up to it.
_DIGAMMA_SERIES_FROM = 10.0


def _native(name, xp):
    """The library's own ``scipy.special.<name>``, or None where it has none."""
    lib = library(xp)
    if lib == "numpy":
        return getattr(scipy.special, name)
    if lib == "torch":
        import torch

        return getattr(torch.special, name, None)
    if lib == "cupy":
        import cupyx.scipy.special

        return getattr(cupyx.scipy.special, name, None)
    return None


def _elementwise(name, generic, x, xp):
    """``name`` of ``x`` by its library's own function, else by the formula ``generic``."""
    xp = namespace(x) if xp is None else xp
    native = _native(name, xp)
    if native is not None:
        return native(x)
    return generic(x, xp)


def _horner(coefficients, x):
    """sum_i c_i x^(n - i) for coefficients given from the highest power down."""
    acc = coefficients[0]
    for c in coefficients[1:]:
        acc = acc * x + c
    return acc


def _erf_small(x):
    """erf(x) for |x| <= 0.46875 (CALERF's first interval and evaluation order)."""
    t = x * x
    num = _ERF_A[4] * t
    den = t
    for a, b in zip(_ERF_A[:3], _ERF_B[:3]):
        num = (num + a) * t
        den = (den + b) * t
    return x * (num + _ERF_A[3]) / (den + _ERF_B[3])


def _erfcx_mid(y):
    """erfcx(y) for 0.46875 <= y <= 4."""
    num = _ERF_C[8] * y
    den = y
    for c, d in zip(_ERF_C[:7], _ERF_D[:7]):
        num = (num + c) * y
        den = (den + d) * y
    return (num + _ERF_C[7]) / (den + _ERF_D[7])


def _erfcx_large(y):
    """erfcx(y) for y >= 4, finite y (0 for y = inf)."""
    r = 1.0 / y
    t = r * r  # not 1 / (y * y), which would overflow for y > 1e154
    num = _ERF_P[5] * t
    den = t
    for p, q in zip(_ERF_P[:4], _ERF_Q[:4]):
        num = (num + p) * t
        den = (den + q) * t
    return (_INV_SQRT_PI - t * (num + _ERF_P[4]) / (den + _ERF_Q[4])) / y


def _exp_square(x, xp, sign):
    """exp(sign * x^2) with the argument split as CALERF does: x^2 = s^2 + (x - s)(x + s)
    with s = x truncated to sixteenths, so s^2 is exact and the rounding of x^2 (an error
    of x^2 ulps in the result) never happens."""
    s = xp.trunc(16.0 * x) / 16.0
    return xp.exp(sign * (s * s)) * xp.exp(sign * ((x - s) * (x + s)))


def _erfcx_positive(y, xp):
    """erfcx on |x| > 0.46875 for y = |x| (any y >= 0 is accepted, and clipped)."""
    mid = _erfcx_mid(xp.clip(y, _ERF_SMALL, _ERF_MID))
    large = _erfcx_large(xp.clip(y, min=_ERF_MID))
    return xp.where(y <= _ERF_MID, mid, large)


def _generic_erfcx(x, xp):
    y = xp.abs(x)
    small = y <= _ERF_SMALL
    xs = xp.clip(x, -_ERF_SMALL, _ERF_SMALL)
    near_zero = xp.exp(xs * xs) * (1.0 - _erf_small(xs))
    positive = _erfcx_positive(y, xp)
    # erfcx(-y) = 2 exp(y^2) - erfcx(y), infinite once exp(y^2) overflows.
    x_neg = -math.sqrt(math.log(xp.finfo(x.dtype).max / 2.0))
    xn = xp.clip(x, x_neg, 0.0)
    twice = 2.0 * _exp_square(xn, xp, 1.0)
    negative = xp.where(x < x_neg, xp.inf, twice - positive)
    return xp.where(small, near_zero, xp.where(x > 0.0, positive, negative))


def _generic_erfc(x, xp):
    y = xp.abs(x)
    small = y <= _ERF_SMALL
    xs = xp.clip(x, -_ERF_SMALL, _ERF_SMALL)
    # 0 once exp(-y^2) passes below the smallest normal number, as in scipy's (Cephes')
    # erfc; the clip keeps inf - inf out of the split exponential.
    y_big = math.sqrt(math.log(xp.finfo(x.dtype).max))
    yc = xp.clip(y, _ERF_SMALL, y_big)
    tail = _exp_square(yc, xp, -1.0) * _erfcx_positive(yc, xp)
    tail = xp.where(y > y_big, 0.0, tail)
    return xp.where(small, 1.0 - _erf_small(xs), xp.where(x > 0.0, tail, 2.0 - tail))


def _generic_log_ndtr(x, xp):
    t = x * _SQRT1_2
    # Left of -1 the Gaussian factor is taken out analytically (no underflow, no
    # cancellation); right of it log1p keeps the tiny tail mass 1 - Phi(x).
    left_t = xp.minimum(t, 0.0)
    left = xp.log(_generic_erfcx(-left_t, xp) / 2.0) - left_t * left_t
    right = xp.log1p(-_generic_erfc(xp.clip(t, min=-1.0), xp) / 2.0)
    return xp.where(x < -1.0, left, right)


def _generic_expit(x, xp):
    e = xp.exp(-xp.abs(x))  # never overflows
    return xp.where(x >= 0.0, 1.0 / (1.0 + e), e / (1.0 + e))


def _gammaln_positive(z, xp):
    """log Gamma(z) for z > 0, as Cephes' lgam takes it: below 13, z is shifted into
    [2, 3) by the recurrence and log Gamma(2 + t) = t B(t) / C(t) there, so the zeros at
    1 and 2 come out exact and keep a relative accuracy around them; from 13 on, Stirling.
    """
    small = z < _LGAMMA_STIRLING_FROM
    u = xp.where(small, z, 2.5)  # rows for Stirling take a harmless value here
    above = xp.ones_like(z)  # Gamma(z) = above * Gamma(u) / below
    below = xp.ones_like(z)
    for _ in range(math.ceil(_LGAMMA_STIRLING_FROM) - 3):
        down = u >= 3.0
        u = xp.where(down, u - 1.0, u)  # exact: |u| < 13
        above = xp.where(down, above * u, above)
    for _ in range(2):
        up = u < 2.0
        below = xp.where(up, below * u, below)  # a product, not a quotient: no overflow
        u = xp.where(up, u + 1.0, u)
    t = u - 2.0
    rational = t * _horner(_LGAMMA_B, t) / _horner((1.0,) + _LGAMMA_C, t)
    near = xp.log(above) - xp.log(below) + rational
    w = xp.clip(z, min=_LGAMMA_STIRLING_FROM)
    inv = 1.0 / w
    series = inv * _horner(_STIRLING[::-1], inv * inv)
    stirling = (w - 0.5) * xp.log(w) - w + _HALF_LOG_2PI + series
    stirling = xp.where(w == xp.inf, xp.inf, stirling)
    return xp.where(small, near, stirling)


def _generic_gammaln(x, xp):
    positive = _gammaln_positive(xp.where(x > 0.0, x, 1.0 - x), xp)
    # Reflection, Gamma(x) Gamma(1 - x) = pi / sin(pi x), with sin(pi x) taken at the
    # distance of x to the nearest integer (exact) so that large |x| keep their digits;
    # at the poles (x = 0, -1, ...) the sine is 0 and the result +inf.
    # (Rows of x > 0 take frac = 1/2 and no positive part, so that the branch they do not
    # use stays finite.)
    frac = xp.where(x > 0.0, 0.5, x - xp.round(x))
    with np.errstate(divide="ignore"):  # the poles, for libraries computing with numpy
        log_sine = xp.log(xp.abs(xp.sin(math.pi * frac)))
    reflected = math.log(math.pi) - log_sine - xp.where(x > 0.0, 0.0, positive)
    return xp.where(x > 0.0, positive, reflected)


def _generic_digamma(x, xp):
    z = xp.where(x > 0.0, x, 1.0 - x)
    # psi(z) = psi(w) - sum_{k < n} 1 / (z + k) with w = z + n >= 10 (fixed masked steps:
    # no data-dependent loop), then the asymptotic series at w.
    w = z
    shifted = xp.zeros_like(z)
    for _ in range(math.ceil(_DIGAMMA_SERIES_FROM)):
        up = w < _DIGAMMA_SERIES_FROM
        shifted = xp.where(up, shifted - 1.0 / w, shifted)
        w = xp.where(up, w + 1.0, w)
    inv = 1.0 / w
    inv2 = inv * inv
    series = inv2 * _horner(_DIGAMMA_SERIES[::-1], inv2)
    positive = shifted + (xp.log(w) - 0.5 * inv - series)
    positive = xp.where(w == xp.inf, xp.inf, positive)
    # Reflection: psi(x) = psi(1 - x) - pi / tan(pi x); tan has period 1, so the distance
    # to the nearest integer keeps the digits. Poles: -inf at 0 (scipy's value), NaN at
    # the negative integers.
    frac = xp.where(x > 0.0, 0.5, x - xp.round(x))  # 1/2: a finite unused branch
    with np.errstate(divide="ignore"):  # the poles, for libraries computing with numpy
        reflected = xp.where(x > 0.0, 0.0, positive) - math.pi / xp.tan(math.pi * frac)
    reflected = xp.where(x == 0.0, -xp.inf, xp.where(frac == 0.0, xp.nan, reflected))
    return xp.where(x > 0.0, positive, reflected)


def _generic_wrightomega(x, xp):
    # Starting values of scipy's wright_omega_real on (-inf, -2), [-2, 1), [1, inf),
    # then Fritsch-Shafer-Crowley steps (fourth order; scipy takes one or two, the
    # second when a condition number asks for it; two are taken here everywhere).
    # Below -50 omega = exp(x) to working precision; above `big` omega = x (scipy's 1e20,
    # lowered in float32 to 1 / eps^2, where the step's 2 (w + 1)^2 would overflow).
    big = min(1e20, 1.0 / xp.finfo(x.dtype).eps ** 2)
    xc = xp.clip(x, -50.0, big)
    low = xp.exp(xp.minimum(xc, -2.0))
    middle = xp.exp(2.0 * (xp.minimum(xc, 1.0) - 1.0) / 3.0)
    xh = xp.clip(xc, min=1.0)
    log_xh = xp.log(xh)
    high = xh - log_xh + log_xh / xh
    w = xp.where(xc < -2.0, low, xp.where(xc < 1.0, middle, high))
    for _ in range(2):
        r = xc - w - xp.log(w)
        wp1 = w + 1.0
        u = 2.0 * wp1 * (wp1 + (2.0 / 3.0) * r)
        w = w * (1.0 + (r / wp1) * (u - r) / (u - 2.0 * r))
    return xp.where(x < -50.0, xp.exp(xp.minimum(x, -50.0)), xp.where(x > big, x, w))


def erfc(x, xp=None):
    """Complementary error function ``1 - erf(x)``, in ``x``'s namespace.

    Parameters
    ----------
    x : array of real floating dtype
    xp : namespace, optional
        Namespace of ``x`` (found from ``x`` when omitted).

    Returns
    -------
    array
        Namespace, device, shape and dtype of ``x``: scipy's, torch's or CuPy's own
        function, Cody's approximation otherwise (see the table above).
    """
    return _elementwise("erfc", _generic_erfc, x, xp)


def erfcx(x, xp=None):
    """Scaled complementary error function ``exp(x^2) erfc(x)``, in ``x``'s namespace.

    Parameters and returns as :func:`erfc` (Cody's approximation for libraries without
    the function).
    """
    return _elementwise("erfcx", _generic_erfcx, x, xp)


def ndtr(x, xp=None):
    """Standard normal CDF, in ``x``'s namespace.

    numpy: :func:`scipy.special.ndtr`; every other library: ``erfc(-x / sqrt(2)) / 2``
    with its :func:`erfc`. Not ``torch.special.ndtr``, which forms ``(1 + erf) / 2`` and
    so loses the relative accuracy of the left tail (1e-12 at x = -4, all of it by -37):
    scipy's is relative there, and a classifier's probabilities get logged.

    Parameters and returns as :func:`erfc`.
    """
    xp = namespace(x) if xp is None else xp
    if is_numpy(xp):
        return scipy.special.ndtr(x)
    return 0.5 * erfc(-x * _SQRT1_2, xp)


def log_ndtr(x, xp=None):
    """Logarithm of the standard normal CDF, accurate in both tails, in ``x``'s namespace.

    Parameters and returns as :func:`erfc` (the erfcx/erfc formula of the table above
    for libraries without the function).
    """
    return _elementwise("log_ndtr", _generic_log_ndtr, x, xp)


def expit(x, xp=None):
    """Logistic sigmoid ``1 / (1 + exp(-x))``, in ``x``'s namespace.

    Parameters and returns as :func:`erfc`.
    """
    return _elementwise("expit", _generic_expit, x, xp)


def gammaln(x, xp=None):
    """``log |Gamma(x)|``, in ``x``'s namespace.

    Parameters and returns as :func:`erfc` (Cephes' algorithm in standard operations for
    libraries without the function; +inf at the poles 0, -1, -2, ...).
    """
    return _elementwise("gammaln", _generic_gammaln, x, xp)


def digamma(x, xp=None):
    """Digamma function ``d log Gamma(x) / dx``, in ``x``'s namespace.

    Parameters and returns as :func:`erfc` (-inf at 0 and NaN at the negative integers in
    the formula, as in scipy).
    """
    return _elementwise("digamma", _generic_digamma, x, xp)


def wrightomega(x, xp=None):
    """Wright's omega function of a real argument: the solution w of ``w + log w = x``.

    Parameters and returns as :func:`erfc`. torch has no such function: torch arrays take
    the formula, as do CuPy arrays on a CuPy without ``cupyx.scipy.special.wrightomega``.
    """
    return _elementwise("wrightomega", _generic_wrightomega, x, xp)


def _finite_max(a, axis, xp):
    """Maximum along ``axis`` (kept), with non-finite maxima replaced by 0 as scipy does:
    a row of -inf then gives log(0) = -inf rather than NaN."""
    a_max = xp.max(a, axis=axis, keepdims=True)
    return xp.where(xp.isfinite(a_max), a_max, 0.0)


def _drop_axis(a, axis, xp):
    if axis is None:
        return xp.reshape(a, ())
    return xp.squeeze(a, axis=axis)


def logsumexp(a, axis=None, b=None, keepdims=False, xp=None):
    """``log(sum(b * exp(a)))`` along ``axis``, without overflow, in ``a``'s namespace.

    Parameters
    ----------
    a : array
    axis : int, tuple of ints or None
    b : array or float, optional
        Non-negative weights broadcast against ``a`` (scipy's ``b``; negative weights,
        which scipy returns a sign for, are not supported).
    keepdims : bool
    xp : namespace, optional

    Returns
    -------
    array
        numpy: :func:`scipy.special.logsumexp`; torch without ``b``:
        :func:`torch.logsumexp`; cupy: :func:`cupyx.scipy.special.logsumexp`; otherwise
        the shifted sum in standard operations.
    """
    xp = namespace(a) if xp is None else xp
    lib = library(xp)
    if lib == "numpy":
        return scipy.special.logsumexp(a, axis=axis, b=b, keepdims=keepdims)
    if lib == "torch" and b is None:
        import torch

        dim = tuple(range(a.ndim)) if axis is None else axis
        return torch.logsumexp(a, dim=dim, keepdim=keepdims)
    native = _native("logsumexp", xp) if lib == "cupy" else None
    if native is not None:
        return native(a, axis=axis, b=b, keepdims=keepdims)
    a_max = _finite_max(a, axis, xp)
    terms = xp.exp(a - a_max)
    if b is not None:
        terms = b * terms
    with np.errstate(divide="ignore"):  # all-zero sums, for libraries computing with numpy
        out = xp.log(xp.sum(terms, axis=axis, keepdims=True)) + a_max
    return out if keepdims else _drop_axis(out, axis, xp)


def _along_axis(name, generic, a, axis, xp):
    """``name`` of ``a`` along ``axis`` by its library's own function, else by the formula
    ``generic``: the axis-wise counterpart of :func:`_elementwise`."""
    xp = namespace(a) if xp is None else xp
    native = _native(name, xp)
    if native is None:
        return generic(a, axis, xp)
    # torch.special names the axis ``dim`` and takes it by position.
    return native(a, axis) if library(xp) == "torch" else native(a, axis=axis)


def _generic_softmax(a, axis, xp):
    e = xp.exp(a - _finite_max(a, axis, xp))
    return e / xp.sum(e, axis=axis, keepdims=True)


def _generic_log_softmax(a, axis, xp):
    shifted = a - _finite_max(a, axis, xp)
    return shifted - xp.log(xp.sum(xp.exp(shifted), axis=axis, keepdims=True))


def softmax(a, axis, xp=None):
    """``exp(a) / sum(exp(a))`` along ``axis``, in ``a``'s namespace.

    Parameters
    ----------
    a : array
    axis : int
    xp : namespace, optional

    Returns
    -------
    array
        numpy: :func:`scipy.special.softmax`; torch and CuPy: their own; otherwise the
        sum shifted by the finite maximum, in standard operations.
    """
    return _along_axis("softmax", _generic_softmax, a, axis, xp)


def log_softmax(a, axis, xp=None):
    """``a - logsumexp(a)`` along ``axis``, in ``a``'s namespace.

    Parameters and returns as :func:`softmax`.
    """
    return _along_axis("log_softmax", _generic_log_softmax, a, axis, xp)
