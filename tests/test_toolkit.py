"""The array helpers the bases share (skgp_sparse.bases.toolkit), on numpy and on
array_api_strict's no-conversion device, against dense numpy formulas."""

import numpy as np
import pytest

from skgp_sparse.bases import toolkit

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
    b = toolkit.copy_array(a)
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
    out = _back(lib, toolkit.signed_gram(_put(lib, a), _put(lib, h)))
    close(out, a @ np.diag(h) @ a.T, 1e-12)


def test_same_values(lib):
    a = np.arange(6.0).reshape(2, 3)
    assert toolkit.same_values(_put(lib, a), _put(lib, a.copy()))
    b = a.copy()
    b[1, 2] += 1e-12
    assert not toolkit.same_values(_put(lib, a), _put(lib, b))
    assert not toolkit.same_values(_put(lib, a), _put(lib, a[:1]))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_own_points_is_a_copy_in_the_working_float(lib, dtype):
    points = np.random.default_rng(4).standard_normal((5, 2)).astype(dtype)
    given = _put(lib, points)
    xp, owned = toolkit.own_points(given)
    expected = np.float64 if lib is None else dtype
    host = owned if lib is None else lib.check(owned, expected)
    assert host.dtype == expected
    close(host, points, 1e-7)
    owned[0, 0] = 9.0
    assert float(given[0, 0]) == float(points[0, 0])
