"""The BLAS/LAPACK wrappers against numpy, and the Cholesky backward pass by finite differences."""

import numpy as np
import pytest

from skgp_sparse import linalg as la


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def spd(rng, n):
    a = rng.standard_normal((n, n))
    return a @ a.T + n * np.eye(n)


def test_mm_handles_every_layout_and_transpose(rng):
    A, B = rng.standard_normal((5, 7)), rng.standard_normal((7, 3))
    cases = [(A, B, 0, 0), (A.T, B, 1, 0), (A, B.T.copy(), 0, 1), (np.asfortranarray(A), B, 0, 0),
             (A.T.copy(), B.T.copy(), 1, 1), (A[:, ::1], np.asfortranarray(B), 0, 0)]
    for a, b, ta, tb in cases:
        out = la.mm(a, b, ta, tb)
        np.testing.assert_allclose(out, (a.T if ta else a) @ (b.T if tb else b), rtol=1e-12)
        assert out.flags.c_contiguous
    np.testing.assert_allclose(la.mm(A, B[:, 0]), A @ B[:, 0], rtol=1e-12)


@pytest.mark.parametrize("n", [3, 40])
def test_gram_is_a_times_a_transpose(rng, n):
    a = rng.standard_normal((n, 9))
    np.testing.assert_allclose(la.gram(a), a @ a.T, rtol=1e-12)
    np.testing.assert_allclose(la.gram(np.asfortranarray(a), trans=True), a.T @ a, rtol=1e-12)


def test_cholesky_solves_and_inverse_factor(rng):
    K = spd(rng, 6)
    L = la.cholesky(K)
    np.testing.assert_allclose(L @ L.T, K, rtol=1e-12)
    b = rng.standard_normal((6, 4))
    for low in (L, np.asfortranarray(L)):
        for trans in (False, True):
            ref = np.linalg.solve(low.T if trans else low, b)
            np.testing.assert_allclose(la.solve_triangular(low, b, trans=trans), ref, rtol=1e-10)
            np.testing.assert_allclose(la.solve_triangular(low, b[:, 0], trans=trans), ref[:, 0], rtol=1e-10)
    np.testing.assert_allclose(la.cho_solve(L, b), np.linalg.solve(K, b), rtol=1e-10)
    np.testing.assert_allclose(la.tri_inverse(L), np.linalg.inv(L), rtol=1e-10, atol=1e-14)
    Ls = la.inverse_cholesky_factor(K)
    np.testing.assert_allclose(Ls @ Ls.T, np.linalg.inv(K), rtol=1e-10, atol=1e-14)
    assert np.allclose(Ls, np.tril(Ls))


def test_cholesky_backward_matches_finite_differences(rng):
    K = spd(rng, 6)
    W = np.tril(rng.standard_normal((6, 6)))
    K_bar = la.cholesky_backward(la.cholesky(K), W)
    E = rng.standard_normal((6, 6))
    E = E + E.T
    eps = 1e-6
    f = lambda A: np.sum(W * np.linalg.cholesky(A))
    fd = (f(K + eps * E) - f(K - eps * E)) / (2 * eps)
    assert np.isclose(np.sum(K_bar * E), fd, rtol=1e-7)


def test_cholesky_backward_through_the_inverse_factor_matches_finite_differences(rng):
    K = spd(rng, 6)
    W = np.tril(rng.standard_normal((6, 6)))
    L = la.cholesky(K)
    K_bar = la.cholesky_backward(L, W, inv_low=la.tri_inverse(L))
    E = rng.standard_normal((6, 6))
    E = E + E.T
    eps = 1e-6
    f = lambda A: np.sum(W * np.linalg.cholesky(A))
    fd = (f(K + eps * E) - f(K - eps * E)) / (2 * eps)
    assert np.isclose(np.sum(K_bar * E), fd, rtol=1e-7)


def test_symmetric_and_right_side_triangular_products(rng):
    S, b = spd(rng, 5), rng.standard_normal((5, 3))
    for sym in (S, np.asfortranarray(S)):
        out = la.sym_mm(sym, b)
        np.testing.assert_allclose(out, S @ b, rtol=1e-12)
        assert out.flags.c_contiguous
    L, c = np.tril(rng.standard_normal((5, 5))), rng.standard_normal((3, 5))
    for low in (L, np.asfortranarray(L)):
        for trans in (False, True):
            np.testing.assert_allclose(la.tri_mm(low, c, trans=trans, right=True), c @ (L.T if trans else L),
                                       rtol=1e-12)


def test_jitter_is_retried_and_reported(rng):
    v = rng.standard_normal((5, 2))
    singular = v @ v.T  # rank 2
    with pytest.warns(la.JitterWarning, match="relative jitter"):
        low, used = la.jittered_cholesky(singular, jitter=0.0)
    assert used > 0
    np.testing.assert_allclose(low @ low.T, singular + used * np.mean(np.diag(singular)) * np.eye(5), atol=1e-12)
    with pytest.raises(la.CholeskyError, match="not positive definite"):
        la.jittered_cholesky(-np.eye(3), max_tries=3)
    with pytest.raises(la.CholeskyError, match="NaN"):
        la.jittered_cholesky(np.full((2, 2), np.nan))
