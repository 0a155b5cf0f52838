"""Compiled kernels on arrays of other libraries: array_api_strict and PyTorch (CPU).

Each kernel is evaluated -- K(A, B), K(A), the diagonal, and the vector-Jacobian
products in theta and in A -- on numpy (the BLAS/numba path, the reference) and on the
other library, from the same data in the same dtype. The results must agree to 1e-12 in
float64 and 1e-5 in float32, relative to the scale of the quantity (see ``close``), and
every output must be an array of the input's library, on its device.

array_api_strict runs on its "device1", which refuses every conversion to numpy: an
``np.asarray`` on the data anywhere in the path raises there. A second, explicit
instrument wraps numpy's conversion functions and records any call on a strict array.
"""

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import (
    RBF,
    ConstantKernel as C,
    DotProduct,
    ExpSineSquared,
    Matern,
    PairwiseKernel,
    RationalQuadratic,
    WhiteKernel,
)

from skgp_sparse import backend as be
from skgp_sparse.kernels import FeatureScaledRBF, compile_kernel

from ._array_libs import Lib, StrictArray, close, spy_on_numpy_conversions, xs

KERNELS = {
    "rbf": lambda: RBF(1.3),
    "rbf_ard": lambda: RBF([0.7, 1.9, 1.2]),
    "feature_scaled_rbf": lambda: FeatureScaledRBF(1.3, feature_scale=[0.7, 1.9, 1.2]),
    "c_feature_scaled_rbf_plus_c": lambda: C(1.4) * FeatureScaledRBF(0.8, feature_scale=[2.0, 0.5, 1.0]) + C(0.6),
    "matern05": lambda: Matern(1.1, nu=0.5),
    "matern05_ard": lambda: Matern([0.8, 1.5, 2.0], nu=0.5),
    "matern15": lambda: Matern(0.9, nu=1.5),
    "matern15_ard": lambda: Matern([0.8, 1.5, 2.0], nu=1.5),
    "matern25": lambda: Matern(1.4, nu=2.5),
    "matern25_ard": lambda: Matern([0.8, 1.5, 2.0], nu=2.5),
    "matern_inf": lambda: Matern(1.2, nu=np.inf),
    "matern35_ard": lambda: Matern([0.8, 1.5, 2.0], nu=3.5),  # closed form on the device
    "matern45": lambda: Matern(1.1, nu=4.5),
    "matern07": lambda: Matern(1.2, nu=0.7),  # kv: host round trip of the profile
    "rq": lambda: RationalQuadratic(length_scale=1.3, alpha=0.8),
    "expsine": lambda: ExpSineSquared(length_scale=1.1, periodicity=2.7),
    "dot": lambda: DotProduct(sigma_0=0.6),
    "constant": lambda: C(1.7),
    "white": lambda: WhiteKernel(0.3),
    "c_matern_ard_plus_c_rbf": lambda: C(1.5) * Matern([0.8, 1.5, 2.0], nu=2.5) + C(0.7) * RBF(2.0),
    "dot_plus_c_squared": lambda: (DotProduct(0.5) + C(0.8)) ** 2,
    "rbf_times_expsine": lambda: RBF(1.5) * ExpSineSquared(0.9, 3.1),
    "rq_plus_white": lambda: RationalQuadratic(1.1, 1.7) + WhiteKernel(0.2),
    "c_rbf_plus_white": lambda: C(2.0) * RBF([1.0, 2.0, 0.5]) + WhiteKernel(0.1),
    "rbf_pow": lambda: RBF(1.3) ** 1.5,
    "white_times_rbf": lambda: WhiteKernel(0.4) * RBF(1.0),
    "c_plus_white": lambda: C(0.9) + WhiteKernel(0.3),
    "c_times_white": lambda: C(0.9) * WhiteKernel(0.3),
    "c_times_c": lambda: C(0.9) * C(1.3),
    "c_times_dot": lambda: C(1.3) * DotProduct(0.5),
    "matern_times_matern": lambda: Matern(1.3, nu=0.5) * Matern([0.8, 1.5, 2.0], nu=1.5),
    "white_pow": lambda: (WhiteKernel(0.5) + C(0.2)) ** 2,
    "fixed_parts": lambda: C(2.0, constant_value_bounds="fixed") * RBF([1.0, 2.0, 0.5])
    + RationalQuadratic(1.1, 0.9, alpha_bounds="fixed"),
}
#: Kernels whose evaluation leaves the device on purpose (documented host round trips).
HOST_ROUND_TRIP = {"matern07"}


class _RBFCalledBySklearn(RBF):
    """Redefines __call__: a generic node, evaluated by scikit-learn."""

    def __call__(self, X, Y=None, eval_gradient=False):
        return super().__call__(X, Y, eval_gradient)


GENERIC = {
    "pairwise": lambda: RBF(1.0) + PairwiseKernel(gamma=0.7, metric="laplacian"),
    "subclass_times_c": lambda: C(1.4) * _RBFCalledBySklearn(0.8),
}


@pytest.fixture(params=["strict_device1", "torch"])
def lib(request):
    return Lib(request.param)


def _data(dtype, seed=0, m=6, n=8, d=3):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(m, d))
    B = rng.normal(size=(n, d))
    B[0] = A[0]  # a coincident pair: the refinement of r2 and the f'(0) conventions
    return A.astype(dtype), B.astype(dtype), rng


def _scale_of_theta_grad(k, A, B, K_bar):
    """Scale of the summed terms of a theta gradient: the gradient with |K_bar| (the
    terms of a gradient with random signs cancel; rounding follows the terms)."""
    if B is None:
        _, back = k.vjp(A)
    else:
        _, back = k.vjp(A, B)
    return np.max(np.abs(back(np.abs(K_bar))[0]), initial=0.0)


RTOL = {np.float32: 1e-5, np.float64: 1e-12}


@pytest.mark.parametrize("held", [False, True], ids=["host_theta", "device_theta"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", list(KERNELS))
def test_values_and_vjps_match_numpy(lib, name, dtype, held):
    """``held``: the kernel on the device holds its theta there (a training loop's Adam
    moves it there), so that its nodes evaluate with 0-d and 1-d device values."""
    ref = compile_kernel(KERNELS[name]())
    k = compile_kernel(KERNELS[name]())
    A, B, rng = _data(dtype)
    rtol = RTOL[dtype]
    xA, xB = lib(A), lib(B)
    if held:
        k.set_theta(k.theta_on(xA))
        assert be.on_device(k.held_theta)
    # values
    close(lib.check(k(xA, xB), dtype), ref(A, B), rtol)
    close(lib.check(k(xA), dtype), ref(A), rtol)
    close(lib.check(k.diag(xA), dtype), ref.diag(A), rtol)
    # cross vjp
    K_bar = rng.normal(size=(A.shape[0], B.shape[0]))
    K, back = k.vjp(xA, xB)
    close(lib.check(K, dtype), ref(A, B), rtol)
    theta_bar, A_bar = back(lib(K_bar))
    ref_theta, ref_A = ref.vjp(A, B)[1](K_bar)
    theta_dtype = np.float64 if lib.name != "strict_no_float64" else np.float32
    scale = max(np.max(np.abs(ref_theta), initial=0), _scale_of_theta_grad(ref, A, B, K_bar))
    close(lib.check(theta_bar, theta_dtype), ref_theta, rtol, scale)
    close(lib.check(A_bar, dtype), ref_A, rtol)
    # gram vjp (a non-symmetric adjoint: both arguments are A)
    G_bar = rng.normal(size=(A.shape[0], A.shape[0]))
    G, back = k.vjp(xA)
    close(lib.check(G, dtype), ref(A), rtol)
    theta_bar, A_bar = back(lib(G_bar))
    ref_theta, ref_A = ref.vjp(A)[1](G_bar)
    scale = max(np.max(np.abs(ref_theta), initial=0), _scale_of_theta_grad(ref, A, None, G_bar))
    close(lib.check(theta_bar, theta_dtype), ref_theta, rtol, scale)
    close(lib.check(A_bar, dtype), ref_A, rtol)
    # diag vjp
    d_bar = rng.normal(size=A.shape[0])
    d, back = k.diag_vjp(xA)
    close(lib.check(d, dtype), ref.diag(A), rtol)
    close(lib.check(back(lib(d_bar)), theta_dtype), ref.diag_vjp(A)[1](d_bar), rtol)
    if held:
        # Back on the host: the same theta, host values again.
        np.testing.assert_allclose(k.theta, ref.theta, rtol=1e-15)
        k.hold_on_host()
        assert isinstance(k.held_theta, np.ndarray)
        close(k(A, B), ref(A, B), 1e-14)


@pytest.mark.parametrize(
    "name", ["rbf_ard", "matern05_ard", "rq", "expsine", "dot", "c_rbf_plus_white", "matern35_ard"]
)
def test_gram_exactly_symmetric(lib, name):
    k = compile_kernel(KERNELS[name]())
    A, _, _ = _data(np.float64, m=40)
    G = be.to_numpy(k(lib(A)))
    np.testing.assert_array_equal(G, G.T)


def test_larger_problem_with_offset_inputs(lib):
    # Offset inputs: the centring matters; 120 x 150 exercises the products for real.
    k = compile_kernel(C(1.3) * Matern([0.8, 1.5, 2.0], nu=2.5) + RationalQuadratic(1.1, 0.7))
    rng = np.random.default_rng(3)
    A = rng.normal(size=(120, 3)) + 50.0
    B = np.concatenate([A[:30], rng.normal(size=(120, 3)) + 50.0])
    K_bar = rng.normal(size=(120, 150))
    K, back = k.vjp(lib(A), lib(B))
    close(be.to_numpy(K), k(A, B), 1e-12)
    theta_bar, A_bar = back(lib(K_bar))
    ref_theta, ref_A = k.vjp(A, B)[1](K_bar)
    close(be.to_numpy(theta_bar), ref_theta, 1e-12, _scale_of_theta_grad(k, A, B, K_bar))
    close(be.to_numpy(A_bar), ref_A, 1e-12)


@pytest.mark.parametrize("name", ["matern05", "matern15_ard", "rbf", "rq", "expsine"])
def test_near_coincident_points_are_refined(lib, name):
    # Pairs 1e-9 apart: r2 = |a|^2 + |b|^2 - 2 a.b would be pure rounding (~1e-14 on
    # inputs offset by 30); both paths recompute them as sums of squared differences.
    k = compile_kernel(KERNELS[name]())
    rng = np.random.default_rng(5)
    A = rng.normal(size=(10, 3)) + 30.0
    B = np.concatenate([A[:4] + 1e-9 * rng.normal(size=(4, 3)), rng.normal(size=(5, 3)) + 30.0])
    close(be.to_numpy(k(lib(A), lib(B))), k(A, B), 1e-12)
    K_bar = rng.normal(size=(10, 9))
    theta_bar, A_bar = k.vjp(lib(A), lib(B))[1](lib(K_bar))
    ref_theta, ref_A = k.vjp(A, B)[1](K_bar)
    # f'(r2) ~ 1/r ~ 1e9 for Matern 1/2 there, and the terms of both gradients cancel:
    # both paths are only accurate to about eps * 1e9 relative to the result.
    rtol = 1e-6 if name == "matern05" else 1e-12
    close(be.to_numpy(theta_bar), ref_theta, rtol, _scale_of_theta_grad(k, A, B, K_bar))
    close(be.to_numpy(A_bar), ref_A, rtol)


def test_device_without_float64():
    lib = Lib("strict_no_float64")
    k = compile_kernel(C(1.5) * RBF([0.8, 1.5, 2.0]) + WhiteKernel(0.1))
    A, B, rng = _data(np.float32)
    K_bar = rng.normal(size=(A.shape[0], B.shape[0])).astype(np.float32)
    K, back = k.vjp(lib(A), lib(B))
    close(lib.check(K, np.float32), k(A, B), 1e-5)
    theta_bar, A_bar = back(lib(K_bar))
    ref_theta, ref_A = k.vjp(A, B)[1](K_bar)
    close(lib.check(theta_bar, np.float32), ref_theta, 1e-5, _scale_of_theta_grad(k, A, B, K_bar))
    close(lib.check(A_bar, np.float32), ref_A, 1e-5)


@pytest.mark.parametrize("name", sorted(set(KERNELS) - HOST_ROUND_TRIP))
def test_strict_path_never_converts_to_numpy(name, monkeypatch):
    """Instrumented: numpy's conversion functions record any call on a strict array."""
    calls = spy_on_numpy_conversions(monkeypatch)
    k = compile_kernel(KERNELS[name]())
    A, B, rng = _data(np.float64)
    xA, xB = xs.asarray(A), xs.asarray(B)
    K_bar = xs.asarray(rng.normal(size=(A.shape[0], B.shape[0])))
    k(xA, xB), k(xA), k.diag(xA)
    _, back = k.vjp(xA, xB)
    back(K_bar)
    _, back = k.vjp(xA)
    back(xs.asarray(rng.normal(size=(A.shape[0], A.shape[0]))))
    _, back = k.diag_vjp(xA)
    back(xs.asarray(rng.normal(size=A.shape[0])))
    monkeypatch.undo()
    assert calls == []


def test_the_instrument_sees_a_conversion(monkeypatch):
    # The spy of test_strict_path_never_converts_to_numpy must catch a host round trip.
    calls = []
    original = np.asarray

    def spy(a, *args, **kwargs):
        if isinstance(a, StrictArray):
            calls.append(1)
        return original(a, *args, **kwargs)

    monkeypatch.setattr(np, "asarray", spy)
    k = compile_kernel(KERNELS["matern07"]())
    k(xs.asarray(np.ones((2, 3))))
    monkeypatch.undo()
    assert calls


@pytest.mark.parametrize("name", list(GENERIC))
def test_generic_nodes_round_trip_through_the_host(lib, name):
    k = compile_kernel(GENERIC[name]())
    assert not k.has_input_gradient
    A, B, rng = _data(np.float64)
    close(lib.check(k(lib(A), lib(B)), np.float64), k(A, B), 1e-12)
    close(lib.check(k.diag(lib(A)), np.float64), k.diag(A), 1e-12)
    G_bar = rng.normal(size=(A.shape[0], A.shape[0]))
    G, back = k.vjp(lib(A))
    close(lib.check(G, np.float64), k(A), 1e-12)
    theta_bar, A_bar = back(lib(G_bar))
    close(lib.check(theta_bar, np.float64), k.vjp(A)[1](G_bar)[0], 1e-12)
    np.testing.assert_array_equal(lib.check(A_bar, np.float64), np.zeros_like(A))
    K_bar = rng.normal(size=(A.shape[0], B.shape[0]))
    _, back = k.vjp(lib(A), lib(B))
    close(be.to_numpy(back(lib(K_bar))[0]), k.vjp(A, B)[1](K_bar)[0], 1e-12)
    d_bar = rng.normal(size=A.shape[0])
    _, back = k.diag_vjp(lib(A))
    close(be.to_numpy(back(lib(d_bar))), k.diag_vjp(A)[1](d_bar), 1e-12)


def test_float32_generic_node_keeps_float32(lib):
    k = compile_kernel(GENERIC["pairwise"]())
    A, B, _ = _data(np.float32)
    close(lib.check(k(lib(A), lib(B)), np.float32), k(A, B), 1e-6)


def test_integer_inputs_become_float64(lib):
    k = compile_kernel(RBF(2.0))
    A = np.arange(12).reshape(4, 3)
    close(lib.check(k(lib(A)), np.float64), k(A), 1e-12)


def test_inputs_are_checked(lib):
    k = compile_kernel(RBF(1.0))
    with pytest.raises(ValueError, match="2-D"):
        k(lib(np.ones(3)))
    with pytest.raises(ValueError, match="features"):
        k(lib(np.ones((2, 3))), lib(np.ones((2, 2))))
    with pytest.raises(TypeError):
        k(np.ones((2, 3)), lib(np.ones((2, 3))))  # no implicit transfer
    K, back = k.vjp(lib(np.ones((2, 3))))
    with pytest.raises(TypeError, match="K_bar"):
        back(np.ones((2, 2)))
    with pytest.raises(ValueError, match="shape"):
        back(lib(np.ones((3, 2))))


def test_numpy_inputs_keep_the_numba_path(monkeypatch):
    # A numpy array must never reach the Array API code.
    from skgp_sparse.kernels import _array_api

    def refuse(*args, **kwargs):
        raise AssertionError("numpy input routed to the Array API path")

    for fn in ("sqdist_cross", "sqdist_gram", "forward", "weigh", "param_sums", "mirror_upper"):
        monkeypatch.setattr(_array_api, fn, refuse)
    k = compile_kernel(KERNELS["c_matern_ard_plus_c_rbf"]() + DotProduct(0.3) * RationalQuadratic(1.0, 2.0))
    A, B, rng = _data(np.float64)
    K, back = k.vjp(A, B)
    assert isinstance(K, np.ndarray)
    theta_bar, A_bar = back(rng.normal(size=K.shape))
    assert isinstance(theta_bar, np.ndarray) and isinstance(A_bar, np.ndarray)
