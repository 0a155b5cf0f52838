"""Tests of the generic kernel path of skgp_sparse.kernels: any scikit-learn kernel compiles.

A kernel the compiler does not know is evaluated through scikit-learn's own API (values,
diagonal, and theta gradients from ``eval_gradient``). These tests compare it with the
compiled twin of the same function, with scikit-learn, and with finite differences.
"""

import pickle

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import (
    RBF,
    CompoundKernel,
    ConstantKernel as C,
    DotProduct,
    ExpSineSquared,
    Hyperparameter,
    Kernel,
    Matern,
    PairwiseKernel,
    RationalQuadratic,
    Sum,
    WhiteKernel,
)

from skgp_sparse.kernels import COMPILED_KERNELS, compile_kernel
from skgp_sparse.kernels import _generic


# --------------------------------------------------------------------------------------
# user kernels (module level, so that they pickle)
# --------------------------------------------------------------------------------------
class _CallsSuper:
    """Mixin: redefines __call__ with the parent's maths, which makes the kernel generic."""

    def __call__(self, X, Y=None, eval_gradient=False):
        return super().__call__(X, Y, eval_gradient)


class CallRBF(_CallsSuper, RBF):
    pass


class CallMatern(_CallsSuper, Matern):
    pass


class CallRQ(_CallsSuper, RationalQuadratic):
    pass


class CallExpSine(_CallsSuper, ExpSineSquared):
    pass


class CallDot(_CallsSuper, DotProduct):
    pass


class CallConst(_CallsSuper, C):
    pass


class CallWhite(_CallsSuper, WhiteKernel):
    pass


class DiagRBF(RBF):
    """Redefines only ``diag`` (same values): generic as well."""

    def diag(self, X):
        return np.ones(np.asarray(X).shape[0])


class MyConst(C):
    pass


class MyRBF(RBF):
    def __init__(self, length_scale=1.0, length_scale_bounds=(1e-5, 1e5)):
        super().__init__(length_scale, length_scale_bounds)

    def describe(self):  # a new method the parent does not have: still compiled
        return "mine"


class MyWhite(WhiteKernel):
    pass


class MySum(Sum):
    pass


class ScaledCosine(Kernel):
    """A kernel written from scratch on sklearn's API: ``v * cos(w . (a - b))`` summed over features."""

    def __init__(self, variance=1.0, frequency=1.0, variance_bounds=(1e-5, 1e5), frequency_bounds=(1e-5, 1e5)):
        self.variance = variance
        self.frequency = frequency
        self.variance_bounds = variance_bounds
        self.frequency_bounds = frequency_bounds

    @property
    def hyperparameter_variance(self):
        return Hyperparameter("variance", "numeric", self.variance_bounds)

    @property
    def hyperparameter_frequency(self):
        return Hyperparameter("frequency", "numeric", self.frequency_bounds)

    def __call__(self, X, Y=None, eval_gradient=False):
        X = np.atleast_2d(X)
        Z = X if Y is None else np.atleast_2d(Y)
        diff = X[:, None, :] - Z[None, :, :]
        c = np.cos(self.frequency * diff).sum(axis=-1)
        K = self.variance * c
        if not eval_gradient:
            return K
        grads = []
        # theta order: sklearn sorts hyperparameters by name (frequency, variance)
        if not self.hyperparameter_frequency.fixed:
            s = -(np.sin(self.frequency * diff) * diff).sum(axis=-1)
            grads.append(self.variance * self.frequency * s)
        if not self.hyperparameter_variance.fixed:
            grads.append(K)
        return K, np.stack(grads, axis=-1) if grads else np.empty(K.shape + (0,))

    def diag(self, X):
        return np.full(np.asarray(X).shape[0], self.variance * np.asarray(X).shape[1])

    def is_stationary(self):
        return True


class BadGradient(RBF):
    def __call__(self, X, Y=None, eval_gradient=False):
        if eval_gradient:
            K, G = super().__call__(X, Y, True)
            return K, G[:, :, :1]  # one column too few for an ARD length scale
        return super().__call__(X, Y)


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------
def _data(seed=0, m=6, n=8, d=3):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(m, d)), rng.normal(size=(n, d)), rng


def assert_close(actual, expected, rtol=1e-12):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape
    scale = max(np.max(np.abs(expected)), 1e-300) if expected.size else 1.0
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * scale)


def _theta_fd(ev, f, h=1e-6):
    theta0 = ev.theta
    g = np.zeros(theta0.size)
    for k in range(theta0.size):
        e = np.zeros_like(theta0)
        e[k] = h
        ev.set_theta(theta0 + e)
        fp = f()
        ev.set_theta(theta0 - e)
        fm = f()
        g[k] = (fp - fm) / (2 * h)
    ev.set_theta(theta0)
    return g


def _check_fd(analytic, numeric, tol=2e-6):
    scale = max(1.0, np.max(np.abs(numeric)) if numeric.size else 1.0)
    np.testing.assert_allclose(analytic, numeric, rtol=tol, atol=tol * scale)


def _all_vjps(ev, A, B, rng):
    """theta gradients of the cross, Gram and diagonal products for fixed random adjoints."""
    K_bar = rng.normal(size=(A.shape[0], B.shape[0]))
    G_bar = rng.normal(size=(A.shape[0], A.shape[0]))  # not symmetric on purpose
    d_bar = rng.normal(size=A.shape[0])
    cross = ev.vjp(A, B)[1](K_bar)[0]
    gram = ev.vjp(A)[1](G_bar)[0]
    diag = ev.diag_vjp(A)[1](d_bar)
    return (cross, gram, diag), (K_bar, G_bar, d_bar)


def _fd_vjps(ev, A, B, bars):
    K_bar, G_bar, d_bar = bars
    return (
        _theta_fd(ev, lambda: np.sum(K_bar * ev(A, B))),
        _theta_fd(ev, lambda: np.sum(G_bar * ev(A))),
        _theta_fd(ev, lambda: np.sum(d_bar * ev.diag(A))),
    )


def _is_generic(ev):
    return not ev.has_input_gradient


# (generic subclass instance, compiled twin) pairs with the same hyperparameters
TWINS = {
    "rbf": lambda: (CallRBF(1.3), RBF(1.3)),
    "rbf_ard": lambda: (CallRBF([0.7, 1.9, 1.2]), RBF([0.7, 1.9, 1.2])),
    "matern25_ard": lambda: (CallMatern([0.8, 1.5, 2.0], nu=2.5), Matern([0.8, 1.5, 2.0], nu=2.5)),
    "matern05": lambda: (CallMatern(1.1, nu=0.5), Matern(1.1, nu=0.5)),
    "rq": lambda: (CallRQ(1.3, alpha=0.8), RationalQuadratic(1.3, alpha=0.8)),
    "expsine": lambda: (CallExpSine(1.1, periodicity=2.7), ExpSineSquared(1.1, periodicity=2.7)),
    "dot": lambda: (CallDot(sigma_0=0.6), DotProduct(sigma_0=0.6)),
    "const": lambda: (CallConst(1.7), C(1.7)),
    "white": lambda: (CallWhite(0.3), WhiteKernel(0.3)),
    "c_times_generic_rbf": lambda: (C(2.0) * CallRBF([1.0, 2.0, 0.5]), C(2.0) * RBF([1.0, 2.0, 0.5])),
    "generic_c_times_rbf": lambda: (CallConst(2.0) * RBF([1.0, 2.0, 0.5]), C(2.0) * RBF([1.0, 2.0, 0.5])),
    "generic_pow": lambda: (CallRBF(1.3) ** 1.5, RBF(1.3) ** 1.5),
    "fixed_parts": lambda: (
        C(2.0, constant_value_bounds="fixed") * CallRBF([1.0, 2.0, 0.5]) + CallRQ(1.1, 0.9, alpha_bounds="fixed"),
        C(2.0, constant_value_bounds="fixed") * RBF([1.0, 2.0, 0.5]) + RationalQuadratic(1.1, 0.9, alpha_bounds="fixed"),
    ),
    "all_fixed": lambda: (CallRBF(1.2, length_scale_bounds="fixed"), RBF(1.2, length_scale_bounds="fixed")),
}


# --------------------------------------------------------------------------------------
# a subclass that overrides __call__ is generic and agrees with its compiled twin
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(TWINS))
def test_overriding_subclass_matches_compiled_twin(name):
    gen_sk, twin_sk = TWINS[name]()
    gen, twin = compile_kernel(gen_sk), compile_kernel(twin_sk)
    assert _is_generic(gen) and twin.has_input_gradient
    np.testing.assert_array_equal(gen.theta, twin.theta)
    np.testing.assert_array_equal(gen.bounds, twin.bounds)
    A, B, _ = _data()
    assert_close(gen(A, B), twin(A, B))
    assert_close(gen(A), twin(A))
    assert_close(gen.diag(A), twin.diag(A))
    assert_close(gen.vjp(A, B)[0], twin(A, B))
    assert_close(gen.vjp(A)[0], twin(A))
    assert_close(gen.diag_vjp(A)[0], twin.diag(A))
    g_gen, bars = _all_vjps(gen, A, B, np.random.default_rng(1))
    g_twin, _ = _all_vjps(twin, A, B, np.random.default_rng(1))
    for a, b in zip(g_gen, g_twin):
        assert a.shape == gen.theta.shape
        assert_close(a, b, rtol=1e-8)
    for a, fd in zip(g_gen, _fd_vjps(gen, A, B, bars)):
        _check_fd(a, fd)


def test_overriding_subclass_at_other_hyperparameters():
    # set_theta reaches the generic node (a fresh sklearn kernel at the new theta).
    gen, twin = compile_kernel(C(1.5) * CallMatern([0.8, 1.5, 2.0], nu=1.5)), compile_kernel(
        C(1.5) * Matern([0.8, 1.5, 2.0], nu=1.5)
    )
    theta = gen.theta + np.linspace(-0.4, 0.3, gen.theta.size)
    gen.set_theta(theta)
    twin.set_theta(theta)
    A, B, _ = _data(2)
    assert_close(gen(A, B), twin(A, B))
    g_gen, _ = _all_vjps(gen, A, B, np.random.default_rng(3))
    g_twin, _ = _all_vjps(twin, A, B, np.random.default_rng(3))
    for a, b in zip(g_gen, g_twin):
        assert_close(a, b, rtol=1e-8)
    back = gen.to_sklearn()
    assert type(back.k2) is CallMatern
    np.testing.assert_allclose(back.theta, theta, rtol=1e-14)


def test_diag_override_alone_makes_it_generic():
    ev = compile_kernel(DiagRBF(1.2))
    assert _is_generic(ev)
    A, B, _ = _data()
    assert_close(ev.diag(A), np.ones(6))
    assert_close(ev(A, B), RBF(1.2)(A, B))


# --------------------------------------------------------------------------------------
# tiles and chunks of the gradient calls
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("tile_bytes", [2000, 20000, 200000])
def test_tiled_gradients_match_the_compiled_twin(monkeypatch, tile_bytes):
    # Small memory targets force several tiles in both arguments (cross), several blocks
    # (Gram) and several chunks (diagonal); uneven sizes leave ragged last tiles. The
    # largest target takes one call for each product.
    rng = np.random.default_rng(4)
    A, B = rng.normal(size=(37, 3)), rng.normal(size=(23, 3))
    gen = compile_kernel(C(1.3) * CallRBF([0.7, 1.9, 1.2]) + CallConst(0.4))
    twin = compile_kernel(C(1.3) * RBF([0.7, 1.9, 1.2]) + C(0.4))
    monkeypatch.setattr(_generic, "TILE_BYTES", tile_bytes)
    monkeypatch.setattr(_generic, "GRAM_CALL_BYTES", tile_bytes)
    monkeypatch.setattr(_generic, "DIAG_CHUNK", 5)
    assert (_generic._tile_rows(gen.n_theta) < 23) == (tile_bytes < 200000)
    for Bx in (B, None, A[:4]):
        K, back = gen.vjp(A, Bx)
        K_bar = rng.normal(size=K.shape)
        assert_close(back(K_bar)[0], twin.vjp(A, Bx)[1](K_bar)[0], rtol=1e-10)
    d_bar = rng.normal(size=37)
    assert_close(gen.diag_vjp(A)[1](d_bar), twin.diag_vjp(A)[1](d_bar), rtol=1e-10)


def test_tile_sizes_balance_the_two_arguments():
    assert _generic._tile_rows(0) > _generic._tile_rows(9) > _generic._tile_rows(100) >= 2
    # a few rows against many: thin tiles of A against about _MIN_TILE rows of B
    calls = []

    class Counting(CallRBF):
        def __call__(self, X, Y=None, eval_gradient=False):
            if eval_gradient:
                calls.append(np.asarray(X).shape[0])
            return super().__call__(X, Y, eval_gradient)

    rng = np.random.default_rng(5)
    ev = compile_kernel(Counting(1.0))
    K, back = ev.vjp(rng.normal(size=(10, 2)), rng.normal(size=(1000, 2)))
    back(np.ones_like(K))
    assert len(calls) == int(np.ceil(1000 / _generic._MIN_TILE))
    assert max(calls) == 10 + _generic._MIN_TILE


# --------------------------------------------------------------------------------------
# PairwiseKernel against the compiled RBF
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("gamma", [0.05, 0.7])
def test_pairwise_rbf_matches_compiled_rbf(gamma):
    length_scale = 1.0 / np.sqrt(2.0 * gamma)
    pair = compile_kernel(PairwiseKernel(metric="rbf", gamma=gamma))
    rbf = compile_kernel(RBF(length_scale))
    assert _is_generic(pair)
    A, B, _ = _data(6)
    assert_close(pair(A, B), rbf(A, B))
    assert_close(pair(A), rbf(A))
    assert_close(pair.diag(A), rbf.diag(A))
    g_pair, bars = _all_vjps(pair, A, B, np.random.default_rng(7))
    g_rbf, _ = _all_vjps(rbf, A, B, np.random.default_rng(7))
    # gamma = 1 / (2 l^2): d/d log l = -2 d/d log gamma. sklearn differentiates
    # PairwiseKernel by finite differences (step 1e-10), hence the tolerance.
    for gp, gr in zip(g_pair, g_rbf):
        np.testing.assert_allclose(-2.0 * gp, gr, rtol=1e-4, atol=1e-6)
    for gp, fd in zip(g_pair, _fd_vjps(pair, A, B, bars)):
        _check_fd(gp, fd, tol=1e-4)


def test_pairwise_laplacian_in_a_product_finite_differences():
    k = C(1.5) * PairwiseKernel(metric="laplacian", gamma=0.4) + RBF([1.0, 0.5, 2.0])
    ev = compile_kernel(k)
    A, B, rng = _data(8)
    assert_close(ev(A, B), k(A, B))
    assert_close(ev(A), k(A))
    assert_close(ev.diag(A), k.diag(A))
    grads, bars = _all_vjps(ev, A, B, rng)
    for g, fd in zip(grads, _fd_vjps(ev, A, B, bars)):
        _check_fd(g, fd, tol=1e-4)


# --------------------------------------------------------------------------------------
# compiled and generic nodes mixed by the combinators
# --------------------------------------------------------------------------------------
MIXED = {
    "product": lambda: RBF([1.0, 2.0, 0.5]) * ScaledCosine(0.8, 0.6),
    "sum": lambda: Matern(1.3, nu=1.5) + ScaledCosine(0.8, 0.6),
    "c_times_sum": lambda: C(1.4) * (ScaledCosine(0.5, 1.2) + DotProduct(0.3)),
    "power_of_sum": lambda: (ScaledCosine(0.5, 1.2) + C(4.0)) ** 2,
    "generic_times_white": lambda: CallRBF(1.1) * WhiteKernel(0.3) + RationalQuadratic(0.9, 1.5),
    "white_in_generic_sum": lambda: MySumOverride(RBF(1.0), WhiteKernel(0.2)) * C(0.7),
    "fixed_generic": lambda: ScaledCosine(0.8, 0.6, frequency_bounds="fixed") * RBF(1.2),
}


class MySumOverride(Sum):
    """A Sum whose evaluation is redefined: the whole subtree is one generic node."""

    def __call__(self, X, Y=None, eval_gradient=False):
        return super().__call__(X, Y, eval_gradient)


@pytest.mark.parametrize("name", list(MIXED))
def test_mixed_trees_values_and_theta_vjps(name):
    k = MIXED[name]()
    ev = compile_kernel(k)
    assert _is_generic(ev)
    np.testing.assert_array_equal(ev.theta, k.theta)
    A, B, rng = _data(9)
    assert_close(ev(A, B), k(A, B))
    assert_close(ev(A), k(A))
    assert_close(ev.diag(A), k.diag(A))
    grads, bars = _all_vjps(ev, A, B, rng)
    for g, fd in zip(grads, _fd_vjps(ev, A, B, bars)):
        _check_fd(g, fd)
    # the Gram theta gradient also equals sklearn's own
    K, G = k(A, eval_gradient=True)
    assert_close(grads[1], np.einsum("ij,ijk->k", bars[1], G), rtol=1e-10)


def test_input_gradient_is_zeros_with_a_generic_node():
    ev = compile_kernel(C(2.0) * RBF([1.0, 2.0, 0.5]) + ScaledCosine(0.5, 0.7))
    assert ev.has_input_gradient is False
    A, B, rng = _data(10)
    for Bx in (B, None):
        K, back = ev.vjp(A, Bx)
        theta_bar, A_bar = back(rng.normal(size=K.shape))
        # zeros, not the compiled summand's share: that would be a wrong gradient
        assert A_bar.shape == A.shape and A_bar.dtype == A.dtype and not A_bar.any()
        assert np.any(theta_bar != 0.0)
    K, back = ev.vjp(A.astype(np.float32), B.astype(np.float32))
    A_bar = back(np.ones_like(K))[1]
    assert A_bar.dtype == np.float32 and not A_bar.any()


def test_has_input_gradient():
    assert compile_kernel(C(1.0) * RBF(1.0) + WhiteKernel(0.1)).has_input_gradient is True
    assert compile_kernel(MyConst(1.0) * MyRBF(1.0)).has_input_gradient is True
    assert compile_kernel(MySum(RBF(1.0), DotProduct())).has_input_gradient is True
    assert compile_kernel(C(1.0) * CallRBF(1.0)).has_input_gradient is False
    assert compile_kernel(RBF(1.0) + PairwiseKernel()).has_input_gradient is False
    assert compile_kernel(ScaledCosine()).has_input_gradient is False
    # a generic WhiteKernel summand taken as noise would leave no generic node; this one
    # overrides __call__ and stays in the latent kernel
    assert compile_kernel(RBF(1.0) + CallWhite(0.1), white_as_noise=True).has_input_gradient is False
    assert compile_kernel(RBF(1.0) + MyWhite(0.1), white_as_noise=True).has_input_gradient is True


# --------------------------------------------------------------------------------------
# subclasses that change nothing stay compiled and come back as themselves
# --------------------------------------------------------------------------------------
def test_transparent_subclasses_stay_compiled_and_round_trip():
    k = MyConst(1.7) * MyRBF([1.0, 2.0, 0.5])
    ev = compile_kernel(k)
    assert ev.has_input_gradient
    A, B, rng = _data(11)
    assert_close(ev(A, B), k(A, B))
    # the compiled path differentiates in the inputs
    K_bar = rng.normal(size=(6, 8))
    A_bar = ev.vjp(A, B)[1](K_bar)[1]
    h, V = 1e-6, rng.normal(size=A.shape)
    fd = (np.sum(K_bar * ev(A + h * V, B)) - np.sum(K_bar * ev(A - h * V, B))) / (2 * h)
    np.testing.assert_allclose(np.sum(A_bar * V), fd, rtol=1e-6)
    theta = ev.theta + np.array([0.3, -0.2, 0.1, 0.4])
    ev.set_theta(theta)
    back = ev.to_sklearn()
    assert type(back) is type(k)
    assert type(back.k1) is MyConst and type(back.k2) is MyRBF
    np.testing.assert_allclose(back.theta, theta, rtol=1e-14)
    assert back.k2.describe() == "mine"
    assert_close(ev(A, B), back(A, B))


def test_my_const_alone():
    ev = compile_kernel(MyConst(2.5))
    assert ev.has_input_gradient
    assert type(ev.to_sklearn()) is MyConst
    ev.set_theta([np.log(3.0)])
    out = ev.to_sklearn()
    assert type(out) is MyConst and out.constant_value == pytest.approx(3.0, rel=1e-14)


def test_generic_round_trip_keeps_classes():
    k = C(1.5) * CallRBF([1.0, 2.0]) + PairwiseKernel(gamma=0.3, metric="laplacian") + WhiteKernel(0.1)
    ev = compile_kernel(k, white_as_noise=True)
    theta = ev.theta - 0.25
    ev.set_theta(theta)
    out = ev.to_sklearn()
    assert repr(out) == repr(k.clone_with_theta(theta))
    assert type(out.k1.k1.k2) is CallRBF and type(out.k1.k2) is PairwiseKernel


# --------------------------------------------------------------------------------------
# white_as_noise with generic parts
# --------------------------------------------------------------------------------------
def test_white_as_noise_with_a_generic_summand():
    k = C(2.0) * CallRBF([1.0, 2.0, 0.5]) + PairwiseKernel(gamma=0.2, metric="rbf") + WhiteKernel(0.1)
    ev = compile_kernel(k, white_as_noise=True)
    latent = C(2.0) * RBF([1.0, 2.0, 0.5]) + PairwiseKernel(gamma=0.2, metric="rbf")
    A, B, rng = _data(12)
    assert_close(ev(A), latent(A))
    assert_close(ev(A, B), latent(A, B))
    assert_close(ev.diag(A), latent.diag(A))
    assert ev.white_noise_level == pytest.approx(0.1, rel=1e-12)
    # theta = [log c, log l1..l3, log gamma, log noise]
    assert ev.white_noise_theta_index == [5]
    K, back = ev.vjp(A)
    theta_bar, _ = back(rng.normal(size=K.shape))
    assert theta_bar[5] == 0.0 and np.all(theta_bar[:5] != 0.0)


def test_white_subclasses_and_noise():
    A, _, _ = _data(13)
    # a WhiteKernel subclass that changes nothing is still the noise
    ev = compile_kernel(RBF(1.0) + MyWhite(0.2), white_as_noise=True)
    assert ev.white_noise_level == pytest.approx(0.2) and ev.white_noise_theta_index == [1]
    assert_close(ev(A), RBF(1.0)(A))
    # one that overrides __call__ is an ordinary (generic) summand, with sklearn's
    # semantics: noise on the Gram diagonal, nothing across two inputs
    ev = compile_kernel(RBF(1.0) + CallWhite(0.2), white_as_noise=True)
    assert ev.white_noise_level == 0.0 and ev.white_noise_theta_index == []
    assert_close(ev(A), RBF(1.0)(A) + 0.2 * np.eye(6))
    assert_close(ev(A, A), RBF(1.0)(A, A))
    assert_close(ev.diag(A), np.full(6, 1.2))
    # the generic white summand is latent, so this kernel has a latent part
    ev = compile_kernel(CallWhite(0.2) + WhiteKernel(0.1), white_as_noise=True)
    assert ev.white_noise_level == pytest.approx(0.1)


def test_constant_times_generic_rbf_in_a_regression_kernel():
    # The estimators' default kernel shape, with the RBF replaced by a generic subclass.
    k = C(1.3) * CallRBF([0.8, 1.1, 1.9]) + WhiteKernel(0.05)
    twin = C(1.3) * RBF([0.8, 1.1, 1.9]) + WhiteKernel(0.05)
    ev, ev_twin = compile_kernel(k, white_as_noise=True), compile_kernel(twin, white_as_noise=True)
    assert ev.white_noise_theta_index == ev_twin.white_noise_theta_index == [4]
    A, B, _ = _data(14, m=20, n=30)
    assert_close(ev(A, B), ev_twin(A, B))
    g, bars = _all_vjps(ev, A, B, np.random.default_rng(15))
    g_twin, _ = _all_vjps(ev_twin, A, B, np.random.default_rng(15))
    for a, b in zip(g, g_twin):
        assert_close(a, b, rtol=1e-8)
        assert a[4] == 0.0


# --------------------------------------------------------------------------------------
# dtypes, ownership, pickling, errors
# --------------------------------------------------------------------------------------
def test_float32_inputs_give_float32_outputs():
    ev = compile_kernel(C(2.0) * CallRBF([1.0, 2.0, 0.5]) + PairwiseKernel(gamma=0.3))
    k = C(2.0) * RBF([1.0, 2.0, 0.5]) + PairwiseKernel(gamma=0.3)
    A, B, _ = _data(16)
    A32, B32 = A.astype(np.float32), B.astype(np.float32)
    for out, ref in ((ev(A32, B32), k(A, B)), (ev(A32), k(A)), (ev.diag(A32), k.diag(A))):
        assert out.dtype == np.float32
        np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6)
    K, back = ev.vjp(A32, B32)
    theta_bar, A_bar = back(np.ones_like(K))
    assert K.dtype == np.float32 and theta_bar.dtype == np.float64 and A_bar.dtype == np.float32
    K64, back64 = ev.vjp(A, B)
    np.testing.assert_allclose(theta_bar, back64(np.ones_like(K64))[0], rtol=1e-5)


def test_outputs_belong_to_the_caller_and_back_keeps_its_kernel():
    ev = compile_kernel(CallRBF(1.2) * CallConst(1.5))
    A, B, rng = _data(17)
    K, back = ev.vjp(A, B)
    ref = ev(A, B)
    K += 100.0
    assert_close(ev(A, B), ref)
    K_bar = rng.normal(size=K.shape)
    first = back(K_bar)[0]
    ev.set_theta(ev.theta + 0.5)  # back differentiates the kernel that produced K
    np.testing.assert_array_equal(back(K_bar)[0], first)


def test_pickle_roundtrip_with_generic_nodes():
    ev = compile_kernel(C(1.5) * CallMatern([0.8, 1.5], nu=2.5) + ScaledCosine() + WhiteKernel(0.2), white_as_noise=True)
    ev.set_theta(ev.theta + 0.1)
    ev2 = pickle.loads(pickle.dumps(ev))
    A, B, _ = _data(18, d=2)
    np.testing.assert_array_equal(ev2.theta, ev.theta)
    np.testing.assert_array_equal(ev2(A, B), ev(A, B))
    assert ev2.has_input_gradient is False and ev2.white_noise_level == ev.white_noise_level


def test_compound_kernel_is_refused():
    for k in (CompoundKernel([RBF(), RBF()]), C(1.0) * CompoundKernel([RBF(), RBF()]),
              MySumOverride(RBF(), CompoundKernel([RBF(), RBF()]))):
        with pytest.raises(TypeError, match="CompoundKernel.*single covariance"):
            compile_kernel(k)


def test_not_a_kernel_is_refused():
    with pytest.raises(TypeError, match="scikit-learn kernel"):
        compile_kernel(lambda a, b: a @ b.T)


def test_wrong_gradient_shape_is_reported():
    ev = compile_kernel(BadGradient([1.0, 2.0]))
    A, B, _ = _data(19, d=2)
    K, back = ev.vjp(A, B)
    with pytest.raises(ValueError, match=r"BadGradient.*eval_gradient=True.*expected"):
        back(np.ones_like(K))


def test_compiled_kernels_names():
    assert {"RBF", "FeatureScaledRBF", "Matern", "RationalQuadratic", "ExpSineSquared", "DotProduct", "ConstantKernel",
            "WhiteKernel", "Sum", "Product", "Exponentiation"} == set(COMPILED_KERNELS)
