"""Covariances of the interdomain inducing features against independent computations.

Every closed form of :mod:`skgp_sparse.features` is checked against the integral that
defines it, evaluated by quadrature with scikit-learn's kernels (or, for the Fourier
features, with the kernel's RKHS inner product written out here): Gauss-Hermite rules for
the Gaussian windows, composite Gauss-Legendre rules (split at the kernel's kinks) for the
Matern inner products, Gauss-Legendre rules over the frequency boxes and QUADPACK for the
spectral densities. Every adjoint is checked against central finite differences.
"""

import numpy as np
import pytest
from numpy.polynomial import Polynomial
from numpy.polynomial.hermite import hermgauss
from numpy.polynomial.legendre import leggauss
from scipy import integrate
from scipy.special import comb
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Matern

from skgp_sparse.features import _iff, _multiscale, _vff

ORDERS = (0.5, 1.5, 2.5)


def central_differences(fun, x, h=1e-6):
    """Gradient of the scalar ``fun`` at the float array ``x`` by central differences."""
    x = np.array(x, dtype=np.float64)
    grad = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[idx] += h
        down[idx] -= h
        grad[idx] = (fun(up) - fun(down)) / (2 * h)
    return grad


def sk_rbf(A, B, length_scales, variance):
    return (ConstantKernel(variance) * RBF(np.asarray(length_scales, dtype=float)))(A, B)


def sk_matern(A, B, length_scales, variance, nu):
    return (ConstantKernel(variance) * Matern(np.asarray(length_scales, dtype=float), nu=nu))(A, B)


# --------------------------------------------------------------------------------------
# Multiscale (Gaussian windows)
# --------------------------------------------------------------------------------------

def window_nodes(z, delta, n_nodes):
    """Gauss-Hermite nodes and weights of the normalised Gaussian window N(z, diag(delta^2))."""
    t, w = hermgauss(n_nodes)
    grids = np.meshgrid(*([t] * z.size), indexing="ij")
    nodes = z + np.sqrt(2.0) * delta * np.stack([g.ravel() for g in grids], axis=1)
    weights = np.prod(np.meshgrid(*([w] * z.size), indexing="ij"), axis=0).ravel() / np.pi ** (z.size / 2)
    return nodes, weights


def multiscale_case(n_dims, seed, n_features=4):
    rng = np.random.default_rng(seed)
    Z = rng.uniform(-1.0, 1.0, (n_features, n_dims))
    delta = rng.uniform(0.1, 0.9, (n_features, n_dims))
    ls = np.array([0.7, 1.2, 0.9][:n_dims])
    return Z, delta, ls, 1.7


@pytest.mark.parametrize("n_dims", [1, 2])
def test_multiscale_kuf_matches_window_quadrature(n_dims):
    Z, delta, ls, s2 = multiscale_case(n_dims, seed=0)
    X = np.random.default_rng(1).uniform(-2.0, 2.0, (7, n_dims))
    expected = np.empty((Z.shape[0], X.shape[0]))
    for m in range(Z.shape[0]):
        nodes, weights = window_nodes(Z[m], delta[m], 40)
        expected[m] = weights @ sk_rbf(nodes, X, ls, s2)
    got = _multiscale.multiscale_kuf(Z, delta, X, ls, s2)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("n_dims", [1, 2])
def test_multiscale_kuu_matches_window_quadrature(n_dims):
    Z, delta, ls, s2 = multiscale_case(n_dims, seed=2)
    n_nodes = 40 if n_dims == 1 else 24
    rules = [window_nodes(Z[m], delta[m], n_nodes) for m in range(Z.shape[0])]
    expected = np.array([[wi @ sk_rbf(pi, pj, ls, s2) @ wj for pj, wj in rules] for pi, wi in rules])
    np.testing.assert_allclose(_multiscale.multiscale_kuu(Z, delta, ls, s2), expected, rtol=1e-6, atol=1e-12)
    # Two different sets: the first two windows against the last two, widths changed.
    Z2, delta2 = Z[2:] + 0.3, delta[2:] * 0.5
    rules2 = [window_nodes(Z2[m], delta2[m], n_nodes) for m in range(Z2.shape[0])]
    expected = np.array([[wi @ sk_rbf(pi, pj, ls, s2) @ wj for pj, wj in rules2] for pi, wi in rules[:2]])
    got = _multiscale.multiscale_kuu_cross(Z[:2], delta[:2], Z2, delta2, ls, s2)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("ls", [np.array([0.8]), np.array([0.5, 1.3])])
def test_multiscale_zero_widths_are_inducing_points(ls):
    rng = np.random.default_rng(3)
    Z, X, Z2 = rng.normal(size=(5, 2)), rng.normal(size=(9, 2)), rng.normal(size=(3, 2))
    zero = np.zeros_like(Z)
    np.testing.assert_allclose(_multiscale.multiscale_kuf(Z, zero, X, ls, 2.1), sk_rbf(Z, X, ls, 2.1),
                               rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(_multiscale.multiscale_kuu(Z, zero, ls, 2.1), sk_rbf(Z, Z, ls, 2.1),
                               rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(_multiscale.multiscale_kuu_cross(Z, zero, Z2, np.zeros_like(Z2), ls, 2.1),
                               sk_rbf(Z, Z2, ls, 2.1), rtol=1e-12, atol=1e-14)


def test_multiscale_kuf_far_from_the_origin():
    """Inputs with large coordinates keep their digits (no cancellation in the expansion)."""
    rng = np.random.default_rng(4)
    Z, X = 1e4 + rng.normal(size=(3, 2)), 1e4 + rng.normal(size=(4, 2))
    got = _multiscale.multiscale_kuf(Z, np.zeros_like(Z), X, np.array([0.6, 0.9]), 1.0)
    np.testing.assert_allclose(got, sk_rbf(Z, X, [0.6, 0.9], 1.0), rtol=1e-8)


def _check_adjoint(grads, key, fun, x, rtol=1e-6, atol=1e-8):
    np.testing.assert_allclose(grads[key], central_differences(fun, x), rtol=rtol, atol=atol, err_msg=key)


@pytest.mark.parametrize("ls", [np.array([0.8]), np.array([0.7, 1.2])])
def test_multiscale_kuf_adjoint(ls):
    Z, delta, _, s2 = multiscale_case(2, seed=5)
    X = np.random.default_rng(6).uniform(-2.0, 2.0, (11, 2))
    bar = np.random.default_rng(7).normal(size=(Z.shape[0], X.shape[0]))

    def loss(Z_=Z, delta_=delta, ls_=ls, s2_=s2):
        return np.sum(bar * _multiscale.multiscale_kuf(Z_, delta_, X, ls_, s2_))

    g = _multiscale.multiscale_kuf_adjoint(Z, delta, X, ls, s2, bar)
    assert g["log_length_scales"].shape == ls.shape
    _check_adjoint(g, "Z", lambda v: loss(Z_=v), Z)
    _check_adjoint(g, "delta", lambda v: loss(delta_=v), delta)
    _check_adjoint(g, "log_length_scales", lambda v: loss(ls_=np.exp(v)), np.log(ls))
    _check_adjoint(g, "log_variance", lambda v: loss(s2_=np.exp(v[0])), np.log([s2]))


@pytest.mark.parametrize("ls", [np.array([0.8]), np.array([0.7, 1.2])])
def test_multiscale_kuu_adjoints(ls):
    Z, delta, _, s2 = multiscale_case(2, seed=8, n_features=5)
    rng = np.random.default_rng(9)
    bar = rng.normal(size=(5, 5))
    Z2, delta2 = rng.normal(size=(3, 2)), rng.uniform(0.1, 0.8, (3, 2))
    bar2 = rng.normal(size=(5, 3))

    def loss(Z_=Z, delta_=delta, ls_=ls, s2_=s2):
        return np.sum(bar * _multiscale.multiscale_kuu(Z_, delta_, ls_, s2_))

    g = _multiscale.multiscale_kuu_adjoint(Z, delta, ls, s2, bar)
    _check_adjoint(g, "Z", lambda v: loss(Z_=v), Z)
    _check_adjoint(g, "delta", lambda v: loss(delta_=v), delta)
    _check_adjoint(g, "log_length_scales", lambda v: loss(ls_=np.exp(v)), np.log(ls))
    _check_adjoint(g, "log_variance", lambda v: loss(s2_=np.exp(v[0])), np.log([s2]))

    def cross(Z1_=Z, d1_=delta, Z2_=Z2, d2_=delta2, ls_=ls, s2_=s2):
        return np.sum(bar2 * _multiscale.multiscale_kuu_cross(Z1_, d1_, Z2_, d2_, ls_, s2_))

    g = _multiscale.multiscale_kuu_cross_adjoint(Z, delta, Z2, delta2, ls, s2, bar2)
    _check_adjoint(g, "Z1", lambda v: cross(Z1_=v), Z)
    _check_adjoint(g, "delta1", lambda v: cross(d1_=v), delta)
    _check_adjoint(g, "Z2", lambda v: cross(Z2_=v), Z2)
    _check_adjoint(g, "delta2", lambda v: cross(d2_=v), delta2)
    _check_adjoint(g, "log_length_scales", lambda v: cross(ls_=np.exp(v)), np.log(ls))
    _check_adjoint(g, "log_variance", lambda v: cross(s2_=np.exp(v[0])), np.log([s2]))


# --------------------------------------------------------------------------------------
# Variational Fourier features: the Matern RKHS inner product on [a, b], written out
# --------------------------------------------------------------------------------------

A, B, F, LS, S2 = -0.5, 1.5, 5, 0.6, 1.7


def matern_profile(nu, lam):
    """The polynomial P with rho(r) = P(r) exp(-lam r) for the unit-amplitude Matern."""
    return {0.5: Polynomial([1.0]), 1.5: Polynomial([1.0, lam]),
            2.5: Polynomial([1.0, lam, lam**2 / 3.0])}[nu]


def test_matern_profile_is_sklearns():
    r = np.linspace(0.0, 3.0, 13)
    for nu in ORDERS:
        lam = np.sqrt(2 * nu) / LS
        mine = S2 * matern_profile(nu, lam)(r) * np.exp(-lam * r)
        np.testing.assert_allclose(mine, sk_matern(np.zeros((1, 1)), r[:, None], [LS], S2, nu)[0], rtol=1e-12)


def kernel_section(nu, lam, variance, x):
    """``t -> [d^j/dt^j k(x, t)]_j`` (j = 0..nu + 1/2) for t != x, shape (p + 1, 1, T)."""
    p = int(nu + 0.5)

    def derivs(t):
        s = t - x
        r = np.abs(s)
        out, poly = [], matern_profile(nu, lam)
        for j in range(p + 1):
            out.append(variance * poly(r) * np.exp(-lam * r) * np.sign(s) ** j)
            poly = poly.deriv() - lam * poly  # d/dr [P e^{-lam r}] = (P' - lam P) e^{-lam r}
        return np.array(out)[:, None, :]
    return derivs


def fourier_basis(a, b, n_freq, order):
    """``t -> [d^j/dt^j phi_m(t)]_{j, m}`` for the 2F + 1 functions 1, cos, sin."""
    w = 2 * np.pi * np.arange(n_freq + 1) / (b - a)

    def derivs(t):
        ph = np.outer(w, t - a)
        out = []
        for j in range(order + 1):
            # d^j cos(w s) = w^j cos(w s + j pi/2), d^j sin(w s) = w^j sin(w s + j pi/2)
            c = w[:, None] ** j * np.cos(ph + j * np.pi / 2)
            s = w[1:, None] ** j * np.sin(ph[1:] + j * np.pi / 2)
            out.append(np.vstack([c, s]))
        return np.array(out)
    return derivs


def legendre_rule(breaks, n_nodes=40):
    """Composite Gauss-Legendre nodes and weights over consecutive ``breaks``."""
    t, w = leggauss(n_nodes)
    lo, hi = np.asarray(breaks[:-1]), np.asarray(breaks[1:])
    half = (hi - lo)[:, None] / 2
    return ((lo + hi)[:, None] / 2 + half * t).ravel(), (half * w).ravel()


def rkhs_inner(nu, lam, variance, a, b, g, h, kinks=()):
    """The Matern-nu RKHS inner product on [a, b] of the function families g and h
    (callables as returned by :func:`kernel_section` and :func:`fourier_basis`)."""
    p = int(nu + 0.5)
    breaks = np.unique(np.r_[np.linspace(a, b, 17), [k for k in kinks if a < k < b]])
    t, wt = legendre_rule(breaks)
    binom = comb(p, np.arange(p + 1))[:, None, None] * lam ** (p - np.arange(p + 1))[:, None, None]
    Lg, Lh = np.sum(binom * g(t), axis=0), np.sum(binom * h(t), axis=0)
    integral = (Lg * wt) @ Lh.T
    ga, ha = g(np.array([a]))[..., 0], h(np.array([a]))[..., 0]
    if nu == 0.5:
        return (integral / (2 * lam) + np.outer(ga[0], ha[0])) / variance
    if nu == 1.5:
        boundary = np.outer(ga[0], ha[0]) + np.outer(ga[1], ha[1]) / lam**2
        return (integral / (4 * lam**3) + boundary) / variance
    boundary = (9 / 8 * np.outer(ga[0], ha[0]) + 9 / (8 * lam**4) * np.outer(ga[2], ha[2])
                + 3 / lam**2 * np.outer(ga[1], ha[1])
                + 3 / (8 * lam**2) * (np.outer(ga[2], ha[0]) + np.outer(ga[0], ha[2])))
    return (3 * integral / (16 * lam**5) + boundary) / variance


@pytest.mark.parametrize("nu", ORDERS)
def test_inner_product_reproduces_the_kernel(nu):
    """The inner product written above is the RKHS's: <k(x, .), k(x', .)> = k(x, x') for x'
    in [a, b] and any x (this validates the oracle the next tests use)."""
    lam = np.sqrt(2 * nu) / LS
    inside = [-0.3, 0.4, 1.45]
    for x in [-1.2, -0.3, 0.1, 1.0, 2.2]:
        for xp in inside:
            got = rkhs_inner(nu, lam, S2, A, B, kernel_section(nu, lam, S2, x),
                             kernel_section(nu, lam, S2, xp), kinks=(x, xp))[0, 0]
            want = sk_matern(np.array([[x]]), np.array([[xp]]), [LS], S2, nu)[0, 0]
            np.testing.assert_allclose(got, want, rtol=1e-9, err_msg=f"x={x}, x'={xp}")


@pytest.mark.parametrize("nu", ORDERS)
def test_vff_kuf_is_the_inner_product_with_the_kernel(nu):
    """Inside [a, b]: the reproducing property (the basis itself); outside: the tails."""
    lam = np.sqrt(2 * nu) / LS
    x = np.array([-2.0, -0.9, -0.5001, -0.2, 0.55, 1.4999, 1.7, 3.0])
    got = _vff.vff_kuf(x, A, B, F, nu, LS)
    basis = fourier_basis(A, B, F, int(nu + 0.5))
    for n, xn in enumerate(x):
        want = rkhs_inner(nu, lam, S2, A, B, basis, kernel_section(nu, lam, S2, xn), kinks=(xn,))[:, 0]
        np.testing.assert_allclose(got[:, n], want, rtol=1e-6, atol=1e-9, err_msg=f"x={xn}")
    inside = (x >= A) & (x <= B)
    np.testing.assert_allclose(got[:, inside], basis(x[inside])[0], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("nu", ORDERS)
def test_vff_kuu_is_the_gram_matrix_of_the_basis(nu):
    lam = np.sqrt(2 * nu) / LS
    basis = fourier_basis(A, B, F, int(nu + 0.5))
    want = rkhs_inner(nu, lam, S2, A, B, basis, basis)
    np.testing.assert_allclose(_vff.vff_kuu(A, B, F, nu, LS, S2).dense(), want, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("nu, ranks", [(0.5, (1, 0)), (1.5, (1, 1)), (2.5, (2, 1))])
def test_vff_kuu_structure_and_linear_algebra(nu, ranks):
    K = _vff.vff_kuu(-2.0, 3.0, 30, nu, 0.4, 0.8)
    assert [blk.factor.shape[1] for blk in K.blocks] == list(ranks)
    assert [blk.shape[0] for blk in K.blocks] == [31, 30]
    dense = K.dense()
    assert K.shape == dense.shape == (61, 61)
    np.testing.assert_array_equal(dense, dense.T)
    rng = np.random.default_rng(10)
    Bmat, vec = rng.normal(size=(61, 4)), rng.normal(size=61)
    np.testing.assert_allclose(K.solve(Bmat), np.linalg.solve(dense, Bmat), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(K.solve(vec), np.linalg.solve(dense, vec), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(K.matmul(Bmat), dense @ Bmat, rtol=1e-12)
    sign, logdet = np.linalg.slogdet(dense)
    assert sign == 1
    np.testing.assert_allclose(K.log_det(), logdet, rtol=1e-12)
    np.testing.assert_allclose(K.inverse_diagonal(), np.diag(np.linalg.inv(dense)), rtol=1e-9)


def test_vff_one_frequency_less_is_a_leading_block():
    """F = 0 leaves the constant alone (an empty sine block)."""
    K = _vff.vff_kuu(0.0, 1.0, 0, 1.5, 0.5, 1.0)
    assert K.shape == (1, 1)
    np.testing.assert_allclose(K.solve(np.array([2.0])), 2.0 / K.dense()[0])
    np.testing.assert_allclose(K.log_det(), np.log(K.dense()[0, 0]))


@pytest.mark.parametrize("nu", ORDERS)
def test_vff_adjoints(nu):
    rng = np.random.default_rng(11)
    x = np.r_[rng.uniform(A - 2.0, A, 4), rng.uniform(A, B, 5), rng.uniform(B, B + 2.0, 4)]
    bar = rng.normal(size=(2 * F + 1, x.size))

    def kuf_loss(log_ls):
        return np.sum(bar * _vff.vff_kuf(x, A, B, F, nu, np.exp(log_ls[0])))

    np.testing.assert_allclose(_vff.vff_kuf_adjoint(x, A, B, F, nu, LS, bar),
                               central_differences(kuf_loss, [np.log(LS)])[0], rtol=1e-6, atol=1e-8)
    assert _vff.vff_kuf_adjoint(x[4:9], A, B, F, nu, LS, bar[:, 4:9]) == 0.0

    barK = rng.normal(size=(2 * F + 1, 2 * F + 1))

    def kuu(theta):
        return _vff.vff_kuu(A, B, F, nu, np.exp(theta[0]), np.exp(theta[1])).dense()

    theta = np.log([LS, S2])
    fd = central_differences(lambda t: np.sum(barK * kuu(t)), theta)
    g = _vff.vff_kuu_adjoint(A, B, F, nu, LS, S2, barK)
    np.testing.assert_allclose([g["log_length_scale"], g["log_variance"]], fd, rtol=1e-6)
    fd = central_differences(lambda t: np.linalg.slogdet(kuu(t))[1], theta)
    g = _vff.vff_log_det_kuu_adjoint(A, B, F, nu, LS, S2)
    np.testing.assert_allclose([g["log_length_scale"], g["log_variance"]], fd, rtol=1e-6)


# --------------------------------------------------------------------------------------
# Integrated Fourier features
# --------------------------------------------------------------------------------------

KERNELS = [("rbf", None), ("matern", 0.5), ("matern", 1.5), ("matern", 2.5)]


def density_1d(kind, nu, ls, s2):
    return lambda xi: _iff.spectral_density(kind, np.array([[xi]]), ls, s2, nu)[0]


@pytest.mark.parametrize("kind, nu", KERNELS)
def test_spectral_density_integrates_to_the_variance_and_transforms_to_the_kernel_1d(kind, nu):
    ls, s2 = np.array([0.7]), 1.3
    S = density_1d(kind, nu, ls, s2)
    total = 2 * integrate.quad(S, 0, np.inf, epsabs=0, epsrel=1e-11, limit=200)[0]
    np.testing.assert_allclose(total, s2, rtol=1e-8)
    # k(tau) = 2 int_0^inf S(xi) cos(2 pi xi tau) d xi (QUADPACK's Fourier integral).
    for tau in (0.3, 1.1):
        k = 2 * integrate.quad(S, 0, np.inf, weight="cos", wvar=2 * np.pi * tau, limlst=100)[0]
        want = (sk_rbf([[0.0]], [[tau]], ls, s2) if kind == "rbf"
                else sk_matern([[0.0]], [[tau]], ls, s2, nu))[0, 0]
        np.testing.assert_allclose(k, want, rtol=1e-7, err_msg=f"tau={tau}")


@pytest.mark.parametrize("kind, nu", KERNELS)
def test_spectral_density_integrates_to_the_variance_2d(kind, nu):
    ls, s2 = np.array([0.6, 1.4]), 1.3
    # Polar coordinates: the trapezoid rule in the angle (periodic, spectrally accurate),
    # QUADPACK to infinity in the radius.
    angles = np.linspace(0, 2 * np.pi, 96, endpoint=False)

    def radial(theta):
        direction = np.array([np.cos(theta), np.sin(theta)])
        return integrate.quad(lambda r: r * _iff.spectral_density(kind, (r * direction)[None], ls, s2, nu)[0],
                              0, np.inf, epsabs=0, epsrel=1e-11, limit=200)[0]

    total = np.mean([radial(t) for t in angles]) * 2 * np.pi
    np.testing.assert_allclose(total, s2, rtol=1e-7)


def test_iff_frequencies_layout():
    z = _iff.iff_frequencies(4, 0.25)
    np.testing.assert_allclose(z[:, 0], (np.arange(4) + 0.5) * 0.25)
    full = _iff.iff_frequencies((3, 4), (0.5, 0.2), spherical=False)
    assert full.shape == (6 * 8 // 2, 2) and np.all(full[:, 0] > 0)
    both = np.vstack([full, -full])
    grid = np.stack(np.meshgrid((np.arange(-3, 3) + 0.5) * 0.5, (np.arange(-4, 4) + 0.5) * 0.2,
                               indexing="ij"), axis=-1).reshape(-1, 2)
    assert np.unique(np.round(both, 12), axis=0).shape[0] == grid.shape[0]
    np.testing.assert_allclose(np.sort(both, axis=0), np.sort(grid, axis=0))
    cut = _iff.iff_frequencies((3, 4), (0.5, 0.2))
    keep = np.sum((full / np.array([1.5, 0.8])) ** 2, axis=1) <= 1
    np.testing.assert_array_equal(cut, full[keep])
    assert 0 < cut.shape[0] < full.shape[0]
    assert _iff.iff_frequencies((2, 2, 2), 0.3, spherical=False).shape == (32, 3)


@pytest.mark.parametrize("n_dims", [1, 2, 3])
def test_iff_kuf_against_the_defining_integral(n_dims):
    """The exact covariance (sqrt(2) / vol) int_Q cos|sin(2 pi xi . x) d xi, by quadrature,
    is the midpoint form times prod_d sinc(pi eps x_d): the error is at most
    sqrt(2) sum_d (pi eps x_d)^2 / 6 and falls as eps^2."""
    X = np.random.default_rng(12).uniform(-1.0, 1.0, (6, n_dims))
    t, w = leggauss(12)
    errors = []
    for eps in (0.1, 0.05):
        z = _iff.iff_frequencies([3] * n_dims, eps, spherical=False)
        offsets = np.stack(np.meshgrid(*([t * eps / 2] * n_dims), indexing="ij"), -1).reshape(-1, n_dims)
        weights = np.prod(np.meshgrid(*([w * eps / 2] * n_dims), indexing="ij"), axis=0).ravel()
        phase = 2 * np.pi * (z[:, None, :] + offsets[None]) @ X.T  # (K, Q, N)
        vol = eps**n_dims
        exact = np.sqrt(2) / vol * np.vstack([np.einsum("q,kqn->kn", weights, np.cos(phase)),
                                              np.einsum("q,kqn->kn", weights, np.sin(phase))])
        got = _iff.iff_kuf(X, z, eps)
        sinc = np.prod(np.sinc(eps * X), axis=1)  # numpy's sinc(u) = sin(pi u) / (pi u)
        np.testing.assert_allclose(got * sinc, exact, rtol=1e-10, atol=1e-12)
        bound = np.sqrt(2) * np.sum((np.pi * eps * X) ** 2, axis=1) / 6
        assert np.all(np.abs(got - exact) <= bound + 1e-13)
        errors.append(np.abs(got - exact).max())
    assert 0.2 < errors[1] / errors[0] < 0.3


@pytest.mark.parametrize("kind, nu", KERNELS)
@pytest.mark.parametrize("n_dims", [1, 2])
def test_iff_kuu_diagonal_against_the_exact_covariance(kind, nu, n_dims):
    """The exact variance (1 / vol^2) int_Q 1 / S of each feature, by quadrature, against
    the midpoint form 1 / (S(z) vol): within the midpoint rule's error bound
    vol (eps^2 / 24) sum_d sup_Q |d^2 (1/S) / d xi_d^2|, and falling as eps^2."""
    ls, s2 = np.array([0.6, 1.4][:n_dims]), 1.3
    t, w = leggauss(10)
    rel_errors = []
    # The same band of frequencies, |z_d| < 0.3, split into intervals half as wide.
    for eps, n_freq in ((0.1, 3), (0.05, 6)):
        z = _iff.iff_frequencies([n_freq] * n_dims, eps, spherical=False)
        offsets = np.stack(np.meshgrid(*([t * eps / 2] * n_dims), indexing="ij"), -1).reshape(-1, n_dims)
        weights = np.prod(np.meshgrid(*([w * eps / 2] * n_dims), indexing="ij"), axis=0).ravel()
        vol = eps**n_dims

        def inv_density(xi):
            return 1.0 / _iff.spectral_density(kind, xi.reshape(-1, n_dims), ls, s2, nu).reshape(xi.shape[:-1])

        nodes = z[:, None, :] + offsets[None]
        exact = inv_density(nodes) @ weights / vol**2
        got = _iff.iff_kuu_diagonal(z, eps, kind, ls, s2, nu)
        np.testing.assert_array_equal(got[: z.shape[0]], got[z.shape[0]:])
        # Second derivatives of 1/S by central differences over a grid of each box.
        h = 1e-3
        sample = z[:, None, :] + np.stack(np.meshgrid(*([np.linspace(-eps / 2, eps / 2, 7)] * n_dims),
                                                      indexing="ij"), -1).reshape(-1, n_dims)[None]
        curv = 0.0
        for d in range(n_dims):
            step = np.zeros(n_dims)
            step[d] = h
            second = (inv_density(sample + step) - 2 * inv_density(sample) + inv_density(sample - step)) / h**2
            curv = curv + np.abs(second).max(axis=1)
        bound = curv * eps**2 / 24 / vol  # divided by vol^2, times vol
        err = np.abs(got[: z.shape[0]] - exact)
        assert np.all(err <= 1.05 * bound + 1e-12 * exact)
        rel_errors.append(np.max(err / exact))
    # Second order: a quarter in the limit (an O(eps) error would halve).
    assert rel_errors[1] < 0.35 * rel_errors[0]


@pytest.mark.parametrize("kind, nu, n_freq, tol",
                         [("rbf", None, 30, 1e-7), ("matern", 1.5, 60, 5e-3), ("matern", 2.5, 60, 1e-3)])
def test_iff_features_reproduce_sklearns_kernel_2d(kind, nu, n_freq, tol):
    """The approximate prior K_fu K_uu^{-1} K_uf tends to the kernel as the grid widens and
    eps shrinks: scikit-learn's ARD Matern is a function of the scaled Euclidean distance,
    not a product of 1-D Materns, and so is the density used here. (The errors left are the
    spectral mass outside the grid and the aliases k(x - x' + j / eps), j != 0.)"""
    ls, s2 = np.array([0.6, 1.4]), 1.3
    X = np.random.default_rng(13).uniform(-0.8, 0.8, (6, 2))
    eps = 0.1
    z = _iff.iff_frequencies((n_freq, n_freq), eps)
    kuf = _iff.iff_kuf(X, z, eps)
    approx = kuf.T @ (kuf / _iff.iff_kuu_diagonal(z, eps, kind, ls, s2, nu)[:, None])
    want = sk_rbf(X, X, ls, s2) if kind == "rbf" else sk_matern(X, X, ls, s2, nu)
    np.testing.assert_allclose(approx, want, rtol=0, atol=tol * s2)
    if kind == "matern":
        # A product of one-dimensional Materns is far off: the check can tell them apart.
        product = (s2 * sk_matern(X[:, :1], X[:, :1], ls[:1], 1.0, nu)
                   * sk_matern(X[:, 1:], X[:, 1:], ls[1:], 1.0, nu))
        assert np.abs(product - want).max() > 10 * tol * s2


@pytest.mark.parametrize("kind, nu", KERNELS)
@pytest.mark.parametrize("ls", [np.array([0.8]), np.array([0.6, 1.4])])
def test_iff_kuu_diagonal_adjoint(kind, nu, ls):
    z = _iff.iff_frequencies((3, 3), 0.3)
    bar = np.random.default_rng(14).normal(size=2 * z.shape[0])
    s2 = 1.3

    def loss(ls_=ls, s2_=s2):
        return bar @ _iff.iff_kuu_diagonal(z, 0.3, kind, ls_, s2_, nu)

    g = _iff.iff_kuu_diagonal_adjoint(z, 0.3, kind, ls, s2, nu, bar)
    assert g["log_length_scales"].shape == ls.shape
    fd_ls = central_differences(lambda v: loss(ls_=np.exp(v)), np.log(ls))
    np.testing.assert_allclose(g["log_length_scales"], fd_ls, rtol=1e-6, atol=1e-8)
    fd_var = central_differences(lambda v: loss(s2_=np.exp(v[0])), [np.log(s2)])[0]
    np.testing.assert_allclose(g["log_variance"], fd_var, rtol=1e-6, atol=1e-8)
