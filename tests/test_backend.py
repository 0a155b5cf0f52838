"""skgp_sparse.backend and the array-library dispatch of skgp_sparse.linalg.

Every operation is run on numpy, on array_api_strict (the stand-in for a GPU library in
CI; its "device1" refuses any conversion to numpy, so a test on it fails if a value
leaks to the host) and on PyTorch's CPU tensors when torch is installed, and compared
with the numpy result: to 1e-12 in float64, to the stated tolerance in float32.
"""

import sys
import types
import warnings

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF

from skgp_sparse import backend as be
from skgp_sparse import linalg as la
from skgp_sparse.linalg import _array_api

xs = pytest.importorskip("array_api_strict")

NAMESPACES = ["numpy", "strict", "strict_device1", "torch"]
FOREIGN = [n for n in NAMESPACES if n != "numpy"]


class Lib:
    """Puts numpy test data into one library (and device)."""

    def __init__(self, name):
        self.name = name
        if name == "torch":
            self.torch = pytest.importorskip("torch")
        self.device = xs.Device("device1") if name == "strict_device1" else None

    def __call__(self, x, dtype=None):
        x = np.asarray(x) if dtype is None else np.asarray(x, dtype=dtype)
        if self.name == "numpy":
            return x
        if self.name == "torch":
            return self.torch.asarray(x.copy())
        return xs.asarray(x, device=self.device)

    @property
    def array_type(self):
        if self.name == "numpy":
            return np.ndarray
        if self.name == "torch":
            return self.torch.Tensor
        return type(xs.asarray(0.0))

    def check(self, out, like=None):
        """``out`` is an array of this library (on the device of ``like``)."""
        assert type(out) is self.array_type, type(out)
        if like is not None and self.name != "numpy":
            assert be.device_of(out) == be.device_of(like)
        return be.to_numpy(out)


@pytest.fixture(params=NAMESPACES)
def lib(request):
    return Lib(request.param)


@pytest.fixture(params=FOREIGN)
def foreign(request):
    return Lib(request.param)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def spd(rng, n):
    a = rng.standard_normal((n, n))
    return a @ a.T + n * np.eye(n)


def close(actual, expected, rtol=1e-12):
    """Entrywise relative agreement, with an absolute floor at rtol * max|expected|."""
    expected = np.asarray(expected)
    scale = np.max(np.abs(expected)) if expected.size else 1.0
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * scale)


# --------------------------------------------------------------------------------------
# namespaces, conversions, devices
# --------------------------------------------------------------------------------------
def test_namespace_of_numpy_is_numpy_itself():
    assert be.namespace(np.zeros(2), None, 1.0) is np
    assert be.namespace() is np
    assert be.is_numpy(np) and be.library(np) == "numpy"
    assert not be.is_foreign(np.zeros(2)) and not be.is_foreign([1.0, 2.0])


def test_namespace_of_other_libraries(foreign):
    a = foreign(np.ones(3))
    xp = be.namespace(a, None)
    assert be.is_foreign(a)
    assert not be.is_numpy(xp)
    assert be.library(xp) == ("torch" if foreign.name == "torch" else "array_api_strict")


def test_arrays_that_declare_no_namespace_are_foreign(monkeypatch):
    """CuPy 14's ndarray, like a torch tensor, declares no ``__array_namespace__``: it is
    recognised by its class, read from sys.modules (nothing is imported for the test)."""

    class FakeCupyArray:  # no __array_namespace__, as cupy.ndarray
        pass

    fake_cupy = types.ModuleType("cupy")
    fake_cupy.ndarray = FakeCupyArray
    assert not be.is_foreign(FakeCupyArray())  # the library is not imported: no such array
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    assert be.is_foreign(FakeCupyArray())
    assert not be.is_foreign(object()) and not be.is_foreign(np.zeros(1))


def test_mixing_libraries_is_refused(foreign):
    with pytest.raises(TypeError):
        be.namespace(np.ones(2), foreign(np.ones(2)))


def test_conversions_round_trip(lib, rng):
    x = rng.standard_normal((4, 3))
    a = lib(x)
    xp = be.namespace(a)
    back = be.to_numpy(a)
    assert isinstance(back, np.ndarray)
    np.testing.assert_array_equal(back, x)
    # numpy -> library on the array's device, in float32
    b = be.to_namespace(x, xp, device=be.device_of(a), dtype=xp.float32)
    np.testing.assert_array_equal(lib.check(b, like=a), x.astype(np.float32))
    assert b.dtype == xp.float32
    # library -> itself: untouched
    assert be.to_namespace(a, xp) is a
    # library -> numpy
    np.testing.assert_array_equal(be.to_namespace(a, np), x)


def test_to_namespace_between_two_libraries(rng):
    torch = pytest.importorskip("torch")
    x = rng.standard_normal((3, 2))
    t = be.to_namespace(xs.asarray(x), be.namespace(torch.zeros(1)))
    assert isinstance(t, torch.Tensor)
    np.testing.assert_array_equal(t.numpy(), x)
    s = be.to_namespace(t, xs)
    assert type(s) is type(xs.asarray(0.0))
    np.testing.assert_array_equal(be.to_numpy(s), x)


def test_widest_float_follows_the_device():
    assert be.widest_float(np) is np.float64
    assert be.widest_float(xs) == xs.float64
    assert be.widest_float(xs, xs.Device("no_float64")) == xs.float32


def test_working_float(lib):
    a32, a64, ints = lib(np.ones(2, np.float32)), lib(np.ones(2)), lib(np.ones(2, np.int64))
    xp = be.namespace(a32)
    if xp is np:
        pytest.skip("numpy's products keep numpy's own rule (result_type with float32)")
    assert be.working_float(xp, a32, a32) == xp.float32
    assert be.working_float(xp, a32, a64) == xp.float64
    assert be.working_float(xp, ints, a32) == xp.float64


def test_diagonal_helpers(lib, rng):
    x = rng.standard_normal((5, 5))
    a = lib(x)
    np.testing.assert_array_equal(lib.check(la.diagonal(a), like=a), np.diag(x))
    assert float(la.trace(a)) == pytest.approx(np.trace(x), rel=1e-14)
    shifted = la.add_to_diagonal(a, 2.5)
    np.testing.assert_array_equal(lib.check(shifted, like=a), x + 2.5 * np.eye(5))
    np.testing.assert_array_equal(be.to_numpy(a), x)  # the input is not modified
    np.testing.assert_array_equal(lib.check(la.eye(3, a), like=a), np.eye(3))


# --------------------------------------------------------------------------------------
# Cholesky, jitter, float64 policy
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 7, 70])
def test_cholesky_matches_numpy(lib, rng, n):
    K = spd(rng, n)
    a = lib(K)
    low = la.cholesky(a)
    close(lib.check(low, like=a), np.linalg.cholesky(K))


def test_cholesky_float32(lib, rng):
    K = spd(rng, 30).astype(np.float32)
    low = la.cholesky(lib(K))
    assert low.dtype == be.namespace(low).float32
    close(be.to_numpy(low), np.linalg.cholesky(K.astype(np.float64)), rtol=1e-5)


def test_cholesky_refuses_indefinite_and_nan(lib):
    with pytest.raises(la.CholeskyError, match="not positive definite"):
        la.cholesky(lib(np.diag([1.0, -1.0, 1.0])))
    bad = np.eye(3)
    bad[0, 1] = bad[1, 0] = np.nan
    with pytest.raises(la.CholeskyError, match="NaN or inf"):
        la.cholesky(lib(bad))


def _needs_ten_times_the_jitter(rng, n=8):
    """Symmetric, one eigenvalue -5e-6: 1e-6 relative jitter fails, 1e-5 succeeds."""
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    lam = np.ones(n)
    lam[-1] = -5e-6
    return (q * lam) @ q.T


def test_jitter_retry_warns_and_matches_numpy(lib, rng):
    K = _needs_ten_times_the_jitter(rng)
    with pytest.warns(la.JitterWarning, match="1e-05"):
        low, rel = la.jittered_cholesky(lib(K), what="test matrix")
    assert rel == pytest.approx(1e-5)
    with pytest.warns(la.JitterWarning):
        ref, ref_rel = la.jittered_cholesky(K, what="test matrix")
    assert rel == ref_rel
    close(lib.check(low), ref)


def test_first_jitter_does_not_warn(lib, rng):
    K = spd(rng, 10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        low, rel = la.jittered_cholesky(lib(K))
    assert rel == 1e-6
    close(be.to_numpy(low), la.jittered_cholesky(K)[0])


def test_jittered_cholesky_gives_up_with_cholesky_error(lib):
    with pytest.raises(la.CholeskyError, match="even with a relative jitter of 1e-01"):
        la.jittered_cholesky(lib(np.diag([1.0, -1.0, 1.0])))
    nan = np.eye(2)
    nan[0, 0] = np.inf
    with pytest.raises(la.CholeskyError, match="contains NaN or inf"):
        la.jittered_cholesky(lib(nan))


def _ill_conditioned_float32():
    """An RBF Gram matrix that float32 LAPACK/torch needs extra jitter for."""
    Z = np.linspace(0.0, 10.0, 150)[:, None]
    return RBF(4.0)(Z).astype(np.float32)


def test_the_float32_matrix_fails_in_float32_at_the_first_jitter():
    # What makes the next tests able to fail: float32 LAPACK cannot factorise this
    # matrix at the default jitter (float64 can).
    K = _ill_conditioned_float32()
    shifted = K + np.float32(1e-6 * np.mean(np.diag(K))) * np.eye(K.shape[0], dtype=np.float32)
    assert la.potrf(shifted)[1] != 0
    assert la.potrf(shifted.astype(np.float64))[1] == 0
    torch = pytest.importorskip("torch")
    assert int(torch.linalg.cholesky_ex(torch.asarray(shifted))[1]) != 0


# Not array_api_strict: its float32 Cholesky computes in float64 and succeeds here.
@pytest.mark.parametrize("name", ["numpy", "torch"])
def test_float32_factorisation_falls_back_to_float64(name):
    # The float32 policy: a factorisation that fails in float32 is done in float64 at
    # the same jitter, instead of more jitter in float32; the factor comes back in float32.
    lib = Lib(name)
    K = _ill_conditioned_float32()
    a = lib(K)
    xp = be.namespace(a)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no JitterWarning: float64 needs only the default
        low, rel = la.jittered_cholesky(a)
    assert rel == 1e-6
    assert low.dtype == xp.float32
    ref, _ = la.jittered_cholesky(K.astype(np.float64))
    close(lib.check(low, like=a), ref.astype(np.float32), rtol=1e-6)


def test_float32_factorisation_stays_float32_when_it_succeeds(lib, rng):
    K = spd(rng, 12).astype(np.float32)
    low, rel = la.jittered_cholesky(lib(K))
    assert rel == 1e-6 and low.dtype == be.namespace(low).float32
    # A float32 factor: only float32 accuracy against the float64 one.
    ref = np.linalg.cholesky(K.astype(np.float64) + 1e-6 * np.mean(np.diag(K)) * np.eye(12))
    np.testing.assert_allclose(be.to_numpy(low), ref, rtol=1e-4, atol=1e-5)


def test_float32_factorisation_starts_from_its_jitter_floor(lib, rng):
    # Below FLOAT32_MIN_JITTER the rounding of float32 entries decides definiteness.
    K = spd(rng, 12)
    low, rel = la.jittered_cholesky(lib(K.astype(np.float32)), jitter=1e-12)
    assert rel == la.FLOAT32_MIN_JITTER
    assert la.jittered_cholesky(lib(K), jitter=1e-12)[1] == 1e-12


def test_float32_factorisation_without_float64_on_the_device():
    # No float64 to fall back to (a float64 array there raises): float32 throughout.
    dev = xs.Device("no_float64")
    K = spd(np.random.default_rng(1), 6).astype(np.float32)
    low, rel = la.jittered_cholesky(xs.asarray(K, device=dev))
    assert low.dtype == xs.float32 and be.device_of(low) == dev
    close(be.to_numpy(low), np.linalg.cholesky(K.astype(np.float64) + 1e-6 * np.mean(np.diag(K)) * np.eye(6)), rtol=1e-5)


# --------------------------------------------------------------------------------------
# triangular solves and products
# --------------------------------------------------------------------------------------
def _lower_with_garbage_above(rng, n):
    low = np.linalg.cholesky(spd(rng, n))
    # Only the lower triangle may be read: the strict upper one holds noise.
    return low, low + np.triu(rng.standard_normal((n, n)) * 100.0, 1)


@pytest.mark.parametrize("n", [5, 70])
@pytest.mark.parametrize("trans", [False, True])
@pytest.mark.parametrize("right", [False, True])
def test_solve_triangular_both_sides(lib, rng, n, trans, right):
    low, stored = _lower_with_garbage_above(rng, n)
    b = rng.standard_normal((3, n) if right else (n, 4))
    op = low.T if trans else low
    expected = np.linalg.solve(op.T, b.T).T if right else np.linalg.solve(op, b)
    x = la.solve_triangular(lib(stored), lib(b), trans=trans, right=right)
    close(lib.check(x), expected, rtol=1e-11)


@pytest.mark.parametrize("right", [False, True])
def test_solve_triangular_vector(lib, rng, right):
    low, stored = _lower_with_garbage_above(rng, 40)
    b = rng.standard_normal(40)
    x = la.solve_triangular(lib(stored), lib(b), trans=True, right=right)
    expected = np.linalg.solve(low, b) if right else np.linalg.solve(low.T, b)
    assert tuple(x.shape) == (40,)
    close(lib.check(x), expected, rtol=1e-11)


def test_solve_triangular_float32(lib, rng):
    low, stored = _lower_with_garbage_above(rng, 50)
    b = rng.standard_normal((50, 3))
    x = la.solve_triangular(lib(stored, np.float32), lib(b, np.float32), trans=True)
    assert x.dtype == be.namespace(x).float32
    close(be.to_numpy(x), np.linalg.solve(low.T, b), rtol=2e-5)


def test_generic_substitution_is_exercised_on_strict(rng, monkeypatch):
    # array_api_strict has no triangular solve: a broken substitution must fail here.
    calls = []
    original = _array_api._substitute

    def spy(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(_array_api, "_substitute", spy)
    low, _ = _lower_with_garbage_above(rng, 10)
    la.solve_triangular(xs.asarray(low), xs.asarray(np.ones((10, 2))))
    assert calls


@pytest.mark.parametrize("trans", [False, True])
@pytest.mark.parametrize("right", [False, True])
def test_tri_mm(lib, rng, trans, right):
    low, stored = _lower_with_garbage_above(rng, 9)
    b = rng.standard_normal((4, 9) if right else (9, 4))
    op = low.T if trans else low
    out = la.tri_mm(lib(stored), lib(b), trans=trans, right=right)
    close(lib.check(out), b @ op if right else op @ b)


# --------------------------------------------------------------------------------------
# skgp_sparse.linalg on every library
# --------------------------------------------------------------------------------------
def test_linalg_products(lib, rng):
    A, B = rng.standard_normal((5, 7)), rng.standard_normal((7, 6))
    for a, b, ta, tb in [(A, B, 0, 0), (A.T, B, 1, 0), (A, B.T, 0, 1), (A.T, B.T, 1, 1)]:
        out = la.mm(lib(a), lib(b), ta, tb)
        close(lib.check(out), A @ B)
    close(lib.check(la.mm(lib(A), lib(B[:, 0]))), A @ B[:, 0])
    close(lib.check(la.mm(lib(A[0]), lib(B))), A[0] @ B)
    g = la.gram(lib(A))
    close(lib.check(g), A @ A.T)
    gn = be.to_numpy(g)
    np.testing.assert_array_equal(gn, gn.T)  # exactly symmetric, as SYRK's
    close(be.to_numpy(la.gram(lib(A), trans=True)), A.T @ A)
    S = spd(rng, 7)
    close(lib.check(la.sym_mm(lib(S), lib(B))), S @ B)


def test_linalg_products_float32(lib, rng):
    A = rng.standard_normal((5, 7)).astype(np.float32)
    out = la.mm(lib(A), lib(A), trans_b=True)
    assert out.dtype == be.namespace(out).float32
    close(be.to_numpy(out), A.astype(np.float64) @ A.T.astype(np.float64), rtol=1e-5)


def test_linalg_factorisations(lib, rng):
    K = spd(rng, 40)
    a = lib(K)
    close(lib.check(la.cholesky(a), like=a), la.cholesky(K))
    low, rel = la.jittered_cholesky(a)
    ref, ref_rel = la.jittered_cholesky(K)
    assert rel == ref_rel
    close(lib.check(low), ref)
    b = rng.standard_normal((40, 3))
    close(lib.check(la.solve_triangular(low, lib(b), trans=True)), la.solve_triangular(ref, b, trans=True))
    close(lib.check(la.solve_triangular(low, lib(b[:, 0]))), la.solve_triangular(ref, b[:, 0]))
    close(lib.check(la.cho_solve(low, lib(b))), la.cho_solve(ref, b), rtol=1e-11)
    close(lib.check(la.tri_mm(low, lib(b.T), trans=True, right=True)), la.tri_mm(ref, b.T, trans=True, right=True))
    close(lib.check(la.tri_inverse(low)), la.tri_inverse(ref), rtol=1e-11)
    close(lib.check(la.inverse_cholesky_factor(a)), la.inverse_cholesky_factor(K), rtol=1e-11)


def test_linalg_singular_triangle_and_indefinite_precision(lib):
    with pytest.raises(la.CholeskyError, match="singular"):
        la.tri_inverse(lib(np.array([[1.0, 0.0], [2.0, 0.0]])))
    with pytest.raises(la.CholeskyError):
        la.inverse_cholesky_factor(lib(np.diag([1.0, -2.0])))


def test_linalg_jitter_warning_points_at_the_caller(lib, rng):
    K = _needs_ten_times_the_jitter(rng)
    with pytest.warns(la.JitterWarning) as record:
        la.jittered_cholesky(lib(K))
    with pytest.warns(la.JitterWarning) as ref:
        la.jittered_cholesky(K)
    assert record[0].filename == ref[0].filename


def test_linalg_cholesky_backward(lib, rng):
    K = spd(rng, 12)
    low = la.cholesky(K)
    low_bar = rng.standard_normal((12, 12))
    lt = la.tri_mm(low, np.tril(low_bar), trans=True)
    inv = la.tri_inverse(low)
    xl = lib(low)
    close(lib.check(la.cholesky_backward(xl, lib(low_bar))), la.cholesky_backward(low, low_bar), rtol=1e-11)
    close(
        lib.check(la.cholesky_backward(xl, lt_low_bar=lib(lt), inv_low=lib(inv))),
        la.cholesky_backward(low, lt_low_bar=lt, inv_low=inv),
        rtol=1e-11,
    )
    close(
        lib.check(la.jittered_cholesky_backward(xl, lib(lt), 1e-4)),
        la.jittered_cholesky_backward(low, lt, 1e-4),
        rtol=1e-11,
    )
    close(
        be.to_numpy(la.jittered_cholesky_backward(xl, lib(lt), 1e-4, inv_low=lib(inv))),
        la.jittered_cholesky_backward(low, lt, 1e-4, inv_low=inv),
        rtol=1e-11,
    )


def test_numpy_inputs_keep_the_blas_path(rng, monkeypatch):
    # A numpy array must never reach the backend's generic code.
    def refuse(*args, **kwargs):
        raise AssertionError("numpy input routed to the generic path")

    for name in ("_generic_solve", "_substitute"):
        monkeypatch.setattr(_array_api, name, refuse)
    monkeypatch.setattr(be, "working_float", refuse)
    for name in ("mm", "gram", "tri_inverse", "cholesky_backward"):
        monkeypatch.setattr(_array_api, name, refuse)
    K = spd(rng, 6)
    low = la.cholesky(K)
    assert low.flags.c_contiguous
    la.mm(K, K)
    la.gram(K)
    la.solve_triangular(low, K, trans=True)
    la.tri_inverse(low)
    la.cholesky_backward(low, K)
    la.solve_triangular(low, K, right=True)
