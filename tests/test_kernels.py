"""Tests of skgp_sparse.kernels: values and derivatives against scikit-learn and finite differences."""

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import (
    RBF,
    CompoundKernel,
    ConstantKernel as C,
    DotProduct,
    ExpSineSquared,
    Matern,
    PairwiseKernel,
    RationalQuadratic,
    WhiteKernel,
)

from skgp_sparse.kernels import FeatureScaledRBF, compile_kernel

# --------------------------------------------------------------------------------------
# kernels under test (factories: every test gets fresh objects)
# --------------------------------------------------------------------------------------
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
    "matern_inf_ard": lambda: Matern([0.8, 1.5, 2.0], nu=np.inf),
    "matern07": lambda: Matern(1.2, nu=0.7),
    "matern07_ard": lambda: Matern([0.8, 1.5, 2.0], nu=0.7),
    "matern32_generic": lambda: Matern(1.2, nu=3.2),
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
    "rbf_times_rbf": lambda: RBF(1.3) * Matern([0.8, 1.5, 2.0], nu=1.5),
    "fixed_parts": lambda: C(2.0, constant_value_bounds="fixed") * RBF([1.0, 2.0, 0.5])
    + RationalQuadratic(1.1, 0.9, alpha_bounds="fixed"),
    "all_fixed": lambda: RBF(1.2, length_scale_bounds="fixed"),
}
IDS = list(KERNELS)
# sklearn differentiates Matern with a generic nu by finite differences (step 1e-10).
NUMERIC_SKLEARN_GRADIENT = {"matern07", "matern07_ard", "matern32_generic"}


def _data(seed=0, m=5, n=7, d=3):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(m, d)), rng.normal(size=(n, d)), rng


def assert_close(actual, expected, rtol=1e-12):
    """Relative agreement, entrywise and against the largest entry (for entries near 0)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape
    scale = max(np.max(np.abs(expected)), 1e-300) if expected.size else 1.0
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * scale)


# --------------------------------------------------------------------------------------
# values
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", IDS)
def test_values_match_sklearn(name):
    k = KERNELS[name]()
    ev = compile_kernel(k)
    A, B, _ = _data()
    assert_close(ev(A, B), k(A, B))
    assert_close(ev(A), k(A))
    assert_close(ev.diag(A), k.diag(A))
    K, _ = ev.vjp(A, B)
    assert_close(K, k(A, B))
    K, _ = ev.vjp(A)
    assert_close(K, k(A))
    d, _ = ev.diag_vjp(A)
    assert_close(d, k.diag(A))
    assert ev(A).shape == (5, 5) and ev(A, B).shape == (5, 7) and ev.diag(A).shape == (5,)


@pytest.mark.parametrize("name", ["rbf_ard", "matern05_ard", "matern25", "rq", "expsine", "matern07"])
def test_values_larger_problem_offset_inputs(name):
    # Inputs far from the origin and a few coincident pairs: the BLAS expansion of the
    # squared distance must not lose accuracy (centring + refinement of close pairs).
    k = KERNELS[name]()
    rng = np.random.default_rng(3)
    A = rng.normal(size=(40, 3)) + 50.0
    B = np.vstack([rng.normal(size=(30, 3)) + 50.0, A[:10]])
    assert_close(ev_of(k)(A, B), k(A, B))
    assert_close(ev_of(k)(A), k(A))
    assert_close(ev_of(k)(A, A), k(A, A))


def ev_of(k):
    return compile_kernel(k)


@pytest.mark.parametrize("name", ["rbf_ard", "matern05", "matern25_ard", "rq", "expsine", "dot", "c_rbf_plus_white"])
def test_gram_exactly_symmetric(name):
    A, _, _ = _data(1, m=70)
    ev = compile_kernel(KERNELS[name]())
    K = ev(A)
    assert np.array_equal(K, K.T)
    K, _ = ev.vjp(A)
    assert np.array_equal(K, K.T)


def test_white_kernel_semantics_like_sklearn():
    A, B, _ = _data()
    ev = compile_kernel(WhiteKernel(0.3) + RBF(1.0))
    # k(A, A) with B given has no noise, k(A) has it on the diagonal
    assert_close(ev(A, A), RBF(1.0)(A, A))
    assert_close(ev(A) - RBF(1.0)(A), 0.3 * np.eye(5))
    assert_close(ev.diag(A), np.full(5, 1.3))


def test_float32_in_float32_out():
    A, B, _ = _data()
    for k in (RBF([1.0, 2.0, 0.5]), Matern(1.2, nu=2.5), C(2.0) * RBF(1.0) + WhiteKernel(0.1)):
        ev = compile_kernel(k)
        A32, B32 = A.astype(np.float32), B.astype(np.float32)
        for K, ref in ((ev(A32, B32), k(A, B)), (ev(A32), k(A)), (ev.diag(A32), k.diag(A))):
            assert K.dtype == np.float32
            np.testing.assert_allclose(K, ref, rtol=1e-5, atol=1e-5)
        K, back = ev.vjp(A32, B32)
        theta_bar, A_bar = back(np.ones_like(K))
        assert K.dtype == np.float32 and A_bar.dtype == np.float32 and theta_bar.dtype == np.float64


# --------------------------------------------------------------------------------------
# hyperparameters
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", IDS)
def test_theta_bounds_to_sklearn(name):
    k = KERNELS[name]()
    ev = compile_kernel(k)
    np.testing.assert_array_equal(ev.theta, k.theta)
    np.testing.assert_array_equal(ev.bounds, np.reshape(k.bounds, (-1, 2)))
    assert ev.bounds.shape == (k.theta.size, 2)
    # theta is a copy
    t = ev.theta
    t += 1.0
    np.testing.assert_array_equal(ev.theta, k.theta)
    # set_theta moves the values exactly as sklearn's clone_with_theta does
    new = k.theta + np.linspace(-0.3, 0.4, k.theta.size)
    ev.set_theta(new)
    np.testing.assert_array_equal(ev.theta, new)
    k2 = k.clone_with_theta(new)
    back_to_sk = ev.to_sklearn()
    assert type(back_to_sk) is type(k)
    assert repr(back_to_sk) == repr(k2)
    np.testing.assert_allclose(back_to_sk.theta, new, rtol=1e-14, atol=1e-15)
    A, B, _ = _data()
    assert_close(ev(A, B), k2(A, B))
    assert_close(ev(A), k2(A))
    assert_close(ev.diag(A), k2.diag(A))


def test_fixed_hyperparameters_not_in_theta():
    k = C(2.0, constant_value_bounds="fixed") * RBF([1.0, 2.0, 0.5]) + RationalQuadratic(
        1.1, 0.9, alpha_bounds="fixed"
    )
    ev = compile_kernel(k)
    # RBF's 3 length scales and RQ's length scale only
    assert ev.theta.size == 4
    np.testing.assert_allclose(np.exp(ev.theta), [1.0, 2.0, 0.5, 1.1])
    ev_fixed = compile_kernel(RBF(1.2, length_scale_bounds="fixed"))
    assert ev_fixed.theta.shape == (0,) and ev_fixed.bounds.shape == (0, 2)
    K, back = ev_fixed.vjp(*_data()[:2])
    theta_bar, A_bar = back(np.ones_like(K))
    assert theta_bar.shape == (0,) and A_bar.shape == (5, 3)


def test_set_theta_wrong_length():
    ev = compile_kernel(RBF(1.0))
    with pytest.raises(ValueError):
        ev.set_theta([0.0, 1.0])


# --------------------------------------------------------------------------------------
# derivatives
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", IDS)
def test_gram_theta_gradient_matches_sklearn(name):
    k = KERNELS[name]()
    ev = compile_kernel(k)
    A, _, rng = _data(2)
    K_bar = rng.normal(size=(5, 5))
    K, grad = k(A, eval_gradient=True)
    _, back = ev.vjp(A)
    theta_bar, _ = back(K_bar)
    expected = np.einsum("ij,ijk->k", K_bar, grad)
    if name in NUMERIC_SKLEARN_GRADIENT:
        np.testing.assert_allclose(theta_bar, expected, rtol=1e-4, atol=1e-5)
    else:
        assert_close(theta_bar, expected, rtol=1e-10)


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


def _input_fd(f, A, h=1e-6):
    g = np.zeros_like(A)
    for idx in np.ndindex(*A.shape):
        Ap, Am = A.copy(), A.copy()
        Ap[idx] += h
        Am[idx] -= h
        g[idx] = (f(Ap) - f(Am)) / (2 * h)
    return g


def _check_fd(analytic, numeric, tol=2e-6):
    scale = max(1.0, np.max(np.abs(numeric)) if numeric.size else 1.0)
    np.testing.assert_allclose(analytic, numeric, rtol=tol, atol=tol * scale)


@pytest.mark.parametrize("name", IDS)
def test_cross_vjp_finite_differences(name):
    A, B, rng = _data(4)
    ev = compile_kernel(KERNELS[name]())
    K_bar = rng.normal(size=(5, 7))
    K, back = ev.vjp(A, B)
    theta_bar, A_bar = back(K_bar)
    assert A_bar.shape == A.shape and theta_bar.shape == ev.theta.shape
    _check_fd(theta_bar, _theta_fd(ev, lambda: np.sum(K_bar * ev(A, B))))
    _check_fd(A_bar, _input_fd(lambda X: np.sum(K_bar * ev(X, B)), A))


@pytest.mark.parametrize("name", IDS)
def test_gram_vjp_finite_differences(name):
    A, _, rng = _data(5)
    ev = compile_kernel(KERNELS[name]())
    K_bar = rng.normal(size=(5, 5))  # deliberately not symmetric
    K, back = ev.vjp(A)
    theta_bar, A_bar = back(K_bar)
    _check_fd(theta_bar, _theta_fd(ev, lambda: np.sum(K_bar * ev(A))))
    _check_fd(A_bar, _input_fd(lambda X: np.sum(K_bar * ev(X)), A))


@pytest.mark.parametrize("name", IDS)
def test_diag_vjp_finite_differences(name):
    A, _, rng = _data(6)
    ev = compile_kernel(KERNELS[name]())
    d_bar = rng.normal(size=5)
    d, back = ev.diag_vjp(A)
    theta_bar = back(d_bar)
    assert theta_bar.shape == ev.theta.shape
    _check_fd(theta_bar, _theta_fd(ev, lambda: np.sum(d_bar * ev.diag(A))))


@pytest.mark.parametrize("name", ["rbf_ard", "matern25_ard", "rq", "expsine", "c_matern_ard_plus_c_rbf"])
def test_vjp_on_a_larger_problem(name):
    # Exercises the tiled symmetric loops (several 64 x 64 tiles) against finite differences
    # in a few random directions.
    rng = np.random.default_rng(7)
    A, B = rng.normal(size=(150, 3)), rng.normal(size=(90, 3))
    ev = compile_kernel(KERNELS[name]())
    for Bx in (B, None):
        K, back = ev.vjp(A, Bx)
        K_bar = rng.normal(size=K.shape)
        theta_bar, A_bar = back(K_bar)
        V = rng.normal(size=A.shape)
        h = 1e-6
        fd = (np.sum(K_bar * ev(A + h * V, Bx)) - np.sum(K_bar * ev(A - h * V, Bx))) / (2 * h)
        np.testing.assert_allclose(np.sum(A_bar * V), fd, rtol=1e-6)
        _check_fd(theta_bar, _theta_fd(ev, lambda: np.sum(K_bar * ev(A, Bx))), tol=1e-5)


@pytest.mark.parametrize("name", ["matern05", "matern05_ard", "matern07", "matern15", "expsine", "rq", "rbf"])
def test_coincident_points_give_finite_derivatives(name):
    A, _, rng = _data(8)
    A = np.vstack([A, A[:2]])  # duplicated rows: zero distances off the diagonal
    ev = compile_kernel(KERNELS[name]())
    for B in (None, A.copy()):
        K, back = ev.vjp(A, B)
        theta_bar, A_bar = back(rng.normal(size=K.shape))
        assert np.all(np.isfinite(K)) and np.all(np.isfinite(theta_bar)) and np.all(np.isfinite(A_bar))
        assert_close(K, KERNELS[name]()(A, B))


def test_generic_matern_derivative_limit_at_zero():
    # For nu > 1 the profile derivative has the finite limit -nu / (2 (nu - 1)) at r = 0:
    # the ARD gradient at a pair of nearly coincident points must match the closed form
    # Matern 5/2 when nu is close to 2.5.
    A = np.array([[0.0, 0.0], [1e-9, 0.0], [1.0, 0.5]])
    K_bar = np.ones((3, 3))
    g_generic = compile_kernel(Matern([1.0, 2.0], nu=2.5 + 1e-9))
    g_closed = compile_kernel(Matern([1.0, 2.0], nu=2.5))
    t1, a1 = g_generic.vjp(A)[1](K_bar)
    t2, a2 = g_closed.vjp(A)[1](K_bar)
    np.testing.assert_allclose(t1, t2, rtol=1e-6)
    np.testing.assert_allclose(a1, a2, rtol=1e-6, atol=1e-9)


def test_back_is_independent_of_later_changes():
    A, B, rng = _data(9)
    ev = compile_kernel(C(1.5) * Matern([0.8, 1.5, 2.0], nu=2.5) + WhiteKernel(0.2))
    K_bar = rng.normal(size=(5, 5))
    K, back = ev.vjp(A)
    first = back(K_bar)
    K += 100.0  # the caller owns K
    ev.set_theta(ev.theta + 0.5)  # back differentiates the kernel that produced K
    second = back(K_bar)
    np.testing.assert_array_equal(first[0], second[0])
    np.testing.assert_array_equal(first[1], second[1])


def test_length_scale_of_wrong_length():
    ev = compile_kernel(RBF([1.0, 2.0, 3.0]))
    X = np.zeros((4, 5))
    with pytest.raises(ValueError, match="length_scale has 3 entries but X has 5 features"):
        ev(X)
    with pytest.raises(ValueError, match="3 entries"):
        ev.vjp(X, X)
    with pytest.raises(ValueError, match="3 entries"):
        compile_kernel(C(1.0) * Matern([1.0, 2.0, 3.0]))(X, X)


def test_isotropic_only_kernels_reject_vectors():
    with pytest.raises(ValueError, match="isotropic"):
        compile_kernel(RationalQuadratic(length_scale=[1.0, 2.0]))


def test_inputs_must_be_2d_and_agree():
    ev = compile_kernel(RBF(1.0))
    with pytest.raises(ValueError):
        ev(np.zeros(3))
    with pytest.raises(ValueError):
        ev(np.zeros((3, 2)), np.zeros((4, 3)))


# --------------------------------------------------------------------------------------
# kernels outside the compiler
# --------------------------------------------------------------------------------------
class OverridingRBF(RBF):
    """Redefines the evaluation (with the same maths), so it cannot be compiled as RBF."""

    def __call__(self, X, Y=None, eval_gradient=False):
        return super().__call__(X, Y, eval_gradient)


def test_compound_kernel_is_refused_with_its_name():
    with pytest.raises(TypeError, match="CompoundKernel"):
        compile_kernel(CompoundKernel([RBF(), RBF()]))


@pytest.mark.parametrize(
    "kernel",
    [PairwiseKernel(metric="laplacian"), OverridingRBF(1.0), C(1.0) * (RBF(1.0) + PairwiseKernel())],
)
def test_kernels_outside_the_compiler_evaluate_as_sklearn_does(kernel):
    """Kernels the compiler does not know run on the generic path, with sklearn's values."""
    A, B, _ = _data(10)
    compiled = compile_kernel(kernel)
    np.testing.assert_allclose(compiled(A, B), kernel(A, B), rtol=1e-12)
    np.testing.assert_allclose(compiled.diag(A), kernel.diag(A), rtol=1e-12)
    assert not compiled.has_input_gradient


# --------------------------------------------------------------------------------------
# white_as_noise
# --------------------------------------------------------------------------------------
def test_white_as_noise_removes_top_level_white_terms():
    k = C(2.0) * RBF([1.0, 2.0, 0.5]) + WhiteKernel(0.1) + WhiteKernel(0.05, noise_level_bounds="fixed")
    ev = compile_kernel(k, white_as_noise=True)
    latent = C(2.0) * RBF([1.0, 2.0, 0.5])
    A, B, rng = _data(10)
    assert_close(ev(A), latent(A))
    assert_close(ev(A, B), latent(A, B))
    assert_close(ev.diag(A), latent.diag(A))
    assert ev.white_noise_level == pytest.approx(0.15, rel=1e-12)
    # theta = [log c, log l1, log l2, log l3, log noise1]; the fixed one has no index
    assert ev.white_noise_theta_index == [4]
    np.testing.assert_array_equal(ev.theta, k.theta)
    np.testing.assert_array_equal(ev.bounds, k.bounds)
    assert repr(ev.to_sklearn()) == repr(k)
    # the removed terms get no gradient
    K, back = ev.vjp(A)
    theta_bar, _ = back(rng.normal(size=K.shape))
    assert theta_bar[4] == 0.0
    assert back_diag_grad(ev, A)[4] == 0.0
    # the noise level follows theta
    theta = ev.theta
    theta[4] = np.log(0.3)
    ev.set_theta(theta)
    assert ev.white_noise_level == pytest.approx(0.35, rel=1e-12)
    assert "WhiteKernel(noise_level=0.3)" in repr(ev.to_sklearn())


def back_diag_grad(ev, A):
    d, back = ev.diag_vjp(A)
    return back(np.ones_like(d))


def test_white_as_noise_keeps_nested_white_and_false_keeps_all():
    A, _, _ = _data(11)
    nested = C(2.0) * (RBF(1.0) + WhiteKernel(0.1))
    ev = compile_kernel(nested, white_as_noise=True)
    assert ev.white_noise_level == 0.0 and ev.white_noise_theta_index == []
    assert_close(ev(A), nested(A))
    k = WhiteKernel(0.2) + RBF(1.0)
    ev = compile_kernel(k, white_as_noise=False)
    assert ev.white_noise_level == 0.0 and ev.white_noise_theta_index == []
    assert_close(ev(A), k(A))
    ev = compile_kernel(k, white_as_noise=True)
    assert ev.white_noise_theta_index == [0]
    assert_close(ev(A), RBF(1.0)(A))


def test_white_as_noise_without_latent_part():
    with pytest.raises(ValueError, match="no latent part"):
        compile_kernel(WhiteKernel(0.1), white_as_noise=True)
    with pytest.raises(ValueError, match="no latent part"):
        compile_kernel(WhiteKernel(0.1) + WhiteKernel(0.2), white_as_noise=True)
    # without white_as_noise a lone WhiteKernel is an ordinary kernel
    assert_close(compile_kernel(WhiteKernel(0.1))(np.zeros((3, 2))), 0.1 * np.eye(3))


def test_pickle_roundtrip():
    import pickle

    k = C(1.5) * Matern([0.8, 1.5, 2.0], nu=0.7) + WhiteKernel(0.2)
    ev = compile_kernel(k, white_as_noise=True)
    ev.set_theta(ev.theta + 0.1)
    ev2 = pickle.loads(pickle.dumps(ev))
    A, B, _ = _data(12)
    np.testing.assert_array_equal(ev2.theta, ev.theta)
    np.testing.assert_array_equal(ev2(A, B), ev(A, B))
    assert ev2.white_noise_level == ev.white_noise_level


# --------------------------------------------------------------------------------------
# FeatureScaledRBF: an RBF with length scales length_scale * feature_scale
# --------------------------------------------------------------------------------------
def test_feature_scaled_rbf_is_the_rbf_of_the_scaled_length_scales():
    A, B, rng = _data(seed=3)
    scale = np.array([0.5, 2.0, 7.0])
    shared = compile_kernel(C(1.3) * FeatureScaledRBF(0.8, feature_scale=scale))
    per_feature = compile_kernel(C(1.3) * RBF(0.8 * scale))
    assert_close(shared(A, B), per_feature(A, B))
    assert_close(shared(A), per_feature(A))
    K_bar = rng.normal(size=(A.shape[0], B.shape[0]))
    _, back = shared.vjp(A, B)
    theta_bar, A_bar = back(K_bar)
    _, back_ref = per_feature.vjp(A, B)
    theta_ref, A_ref = back_ref(K_bar)
    assert_close(A_bar, A_ref)
    # One length scale moves all three of the RBF's together: its derivative is their sum.
    assert theta_bar.shape == (2,)
    assert_close(theta_bar, [theta_ref[0], theta_ref[1:].sum()])


def test_feature_scaled_rbf_refuses_what_it_cannot_mean():
    X = np.zeros((2, 3))
    with pytest.raises(ValueError, match="feature_scale has 2 entries but X has 3"):
        FeatureScaledRBF(1.0, feature_scale=[1.0, 2.0])(X)
    with pytest.raises(ValueError, match="feature_scale has 2 entries but X has 3"):
        compile_kernel(FeatureScaledRBF(1.0, feature_scale=[1.0, 2.0]))(X)
    with pytest.raises(ValueError, match="positive and finite"):
        compile_kernel(FeatureScaledRBF(1.0, feature_scale=[1.0, 0.0, 2.0]))
    with pytest.raises(ValueError, match="length_scale must be one number"):
        FeatureScaledRBF([1.0, 2.0, 3.0])(X)
