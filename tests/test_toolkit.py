"""The array helpers the bases share (skgp_sparse.bases.toolkit, and the copies,
comparisons and fused passes of skgp_sparse.linalg), on numpy and on array_api_strict's
no-conversion device, against dense numpy formulas."""

import numpy as np
import pytest

from skgp_sparse import backend, linalg
from skgp_sparse.bases import toolkit
from skgp_sparse.linalg import weighted_gram

from ._array_libs import Lib, close

RTOL = 1e-12


@pytest.fixture(params=["numpy", "strict_device1"])
def lib(request):
    if request.param == "numpy":
        return None
    return Lib(request.param)


def _put(lib, a):
    return np.array(a) if lib is None else lib(a)


def _back(lib, a):
    return a if lib is None else lib.check(a, np.float64)


def test_copy_array_is_independent(lib):
    a = _put(lib, np.arange(6.0).reshape(2, 3))
    b = linalg.copy_array(a)
    b[0, 0] = 7.0
    assert float(a[0, 0]) == 0.0
    close(_back(lib, b), [[7.0, 1.0, 2.0], [3.0, 4.0, 5.0]], RTOL)


def test_blocks_are_the_stack_matrices(lib):
    stack = np.random.default_rng(0).standard_normal((3, 4, 4))
    parts = toolkit.blocks(_put(lib, stack))
    assert len(parts) == 3
    for c, part in enumerate(parts):
        close(_back(lib, part), stack[c], RTOL)


@pytest.mark.parametrize("n_cov", [1, 3])
def test_summed_var_adjoint(lib, n_cov):
    d_var = np.random.default_rng(1).standard_normal((5, 3))
    out = _back(lib, toolkit.summed_var_adjoint(_put(lib, d_var), n_cov))
    expected = d_var.sum(axis=1, keepdims=True) if n_cov == 1 else d_var
    close(out, expected, RTOL)


@pytest.mark.parametrize("sign", ["constant", "negative", "positive", "mixed"])
def test_signed_gram_is_the_dense_product(lib, sign):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((4, 9))
    h = {
        "constant": np.full(9, -0.7),
        "negative": -rng.uniform(0.1, 2.0, 9),
        "positive": rng.uniform(0.1, 2.0, 9),
        "mixed": rng.standard_normal(9),
    }[sign]
    out = _back(lib, weighted_gram(_put(lib, a), _put(lib, h)))
    close(out, a @ np.diag(h) @ a.T, 1e-12)


def test_same_values(lib):
    a = np.arange(6.0).reshape(2, 3)
    assert linalg.same_values(_put(lib, a), _put(lib, a.copy()))
    b = a.copy()
    b[1, 2] += 1e-12
    assert not linalg.same_values(_put(lib, a), _put(lib, b))
    assert not linalg.same_values(_put(lib, a), _put(lib, a[:1]))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_owned_float_copy_is_a_copy_in_the_working_float(lib, dtype):
    points = np.random.default_rng(4).standard_normal((5, 2)).astype(dtype)
    given = _put(lib, points)
    xp, owned = backend.owned_float_copy(given)
    expected = np.float64 if lib is None else dtype
    host = owned if lib is None else lib.check(owned, expected)
    assert host.dtype == expected
    close(host, points, 1e-7)
    owned[0, 0] = 9.0
    assert float(given[0, 0]) == float(points[0, 0])


def test_fused_passes_are_their_dense_formulas(lib):
    """The fused passes of skgp_sparse.linalg (numba loops for numpy, standard operations
    otherwise) against the numpy expressions they stand for."""
    rng = np.random.default_rng(5)
    m, b, p = 4, 7, 2
    s_a, a, w, out = (rng.standard_normal((m, b)) for _ in range(4))
    q_mean, alpha, d_mean = rng.standard_normal((m, p)), rng.standard_normal((m, p)), rng.standard_normal((b, p))
    h, base = rng.standard_normal(b), rng.standard_normal(b)
    lt = [rng.standard_normal((m, b)) for _ in range(2)]
    put = lambda x: _put(lib, x.copy())  # noqa: E731 (the numpy passes overwrite their first argument)
    cases = [
        (linalg.outer_plus_scaled_difference(put(s_a), put(a), put(q_mean), put(d_mean), put(h)),
         q_mean @ d_mean.T + 2 * (s_a - a) * h),
        (linalg.add_scaled_difference(put(out), put(s_a), put(a), put(h)), out + 2 * (s_a - a) * h),
        (linalg.outer_plus_scaled(put(w), put(alpha), put(d_mean), put(h)), alpha @ d_mean.T + 2 * w * h),
        (linalg.add_scaled(put(out), put(w), put(h)), out + 2 * w * h),
        (linalg.column_products(put(base), put(a), put(w)), base + (a * w).sum(axis=0)),
        (linalg.minus_column_squares(put(base), put(a)), base - (a * a).sum(axis=0)),
        (linalg.column_variances(put(base), put(a), [put(x) for x in lt]),
         np.column_stack([base - (a * a).sum(axis=0) + (x * x).sum(axis=0) for x in lt])),
    ]
    for got, expected in cases:
        close(_back(lib, got), expected, RTOL)
