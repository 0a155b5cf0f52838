"""Likelihoods and special functions on arrays of other libraries: array_api_strict and
PyTorch (CPU).

Every method that training and prediction call is run on numpy (the reference: scipy's
special functions, the code the package always ran) and on the other library, from the
same data, and the results must agree:

* float64: to 1e-12, relative to the scale of each output (see ``close``);
* float32: to ``RTOL_F32`` (2e-5; 5e-6 measured) relative to the scale of each output, against the
  float64 numpy result of the same float32-rounded inputs. The likelihoods compute in
  the inputs' dtype; what float32 loses is its own rounding, amplified by the conditioning
  of the sums (a quadrature sum of log-densities, exp(-x^2/2) in a tail).

Each output must be an array of the input's library, on its device, of the input's
floating dtype. array_api_strict runs on its "device1", which refuses every conversion
to numpy; a second instrument wraps numpy's conversion functions and records any call
on a strict array.

The special functions of :mod:`skgp_sparse.likelihoods._special` are checked on dense grids against
scipy with the tolerances its table states: the array-API formulas (what
array_api_strict gets, and torch for wrightomega) and the torch dispatch.
"""

import numpy as np
import pytest
import scipy.special as sp

from skgp_sparse import backend as be
from skgp_sparse.likelihoods import _special as special
from skgp_sparse.likelihoods import (
    BernoulliLikelihood,
    GaussianLikelihood,
    PoissonLikelihood,
    RobustMaxLikelihood,
    SoftmaxLikelihood,
    StudentTLikelihood,
)

from ._array_libs import Lib, StrictArray, close, spy_on_numpy_conversions, xs

RTOL = {np.float64: 1e-12, np.float32: 2e-5}
RTOL_F32 = RTOL[np.float32]
DTYPES = [np.float64, np.float32]
DTYPE_IDS = ["f64", "f32"]


@pytest.fixture(params=["strict_device1", "torch"])
def lib(request):
    return Lib(request.param)


# --------------------------------------------------------------------------------------
# the cases: a likelihood, a method and its arguments
# --------------------------------------------------------------------------------------
N = 40


def _regression_rows(rng, n=N):
    mean = rng.normal(size=(n, 1))
    var = np.exp(rng.normal(size=(n, 1)))
    var[0], var[1], var[2] = 0.0, 1e-9, 30.0  # the point mass, the small-v branch, wide
    return mean, var


def _student_data(rng):
    mean, var = _regression_rows(rng)
    y = mean + 0.5 * rng.standard_t(4, size=(N, 1))
    y[3] = 40.0  # an outlier
    return y, mean, var


def _poisson_data(rng):
    mean, var = _regression_rows(rng)
    var = np.minimum(var, 4.0)
    y = rng.poisson(np.exp(mean + 1.0)).astype(float)
    y[:2, 0] = [0.0, 25.0]
    return y, mean, var


def _gaussian_data(rng, P=3):
    y = rng.normal(size=(N, P))
    mean = rng.normal(size=(N, P))
    var = np.exp(rng.normal(size=(N, 1)))
    extra = np.exp(rng.normal(size=(N, 1)) - 1.0)
    return y, mean, var, extra


def _binary_data(rng):
    mean = 2.0 * rng.normal(size=(N, 1))
    mean[:4, 0] = [-9.0, 9.0, -30.0, 30.0]  # both tails of both links, for both labels
    var = np.exp(rng.normal(size=(N, 1)))
    var[4] = 0.0
    y = (rng.uniform(size=(N, 1)) < 0.5).astype(float)
    y[:4, 0] = [1.0, 0.0, 0.0, 1.0]
    return y, mean, var


def _multiclass_data(rng, K=4):
    mean = 1.5 * rng.normal(size=(N, K))
    var = np.exp(rng.normal(size=(N, K)))
    var[0] = 0.0  # at the floor
    var[1, 1] = 1e-12
    labels = rng.integers(0, K, size=N).astype(float)
    return labels, mean, var


def _covariance(rng, m=12):
    a = rng.normal(size=(m, m))
    return rng.normal(size=m), 0.1 * (a @ a.T / m + np.eye(m))


def _cases():
    rng = np.random.default_rng(1)
    gy, gm, gv, extra = _gaussian_data(rng)
    cm, cov = _covariance(rng)
    by, bm, bv = _binary_data(rng)
    ky, km, kv = _multiclass_data(rng)
    ty, tm, tv = _student_data(rng)
    py, pm, pv = _poisson_data(rng)
    gaussian = lambda: GaussianLikelihood(0.3)  # noqa: E731
    student = lambda: StudentTLikelihood(df=4.0, scale=0.5)  # noqa: E731
    poisson = lambda: PoissonLikelihood(log_offset=1.0)  # noqa: E731
    robustmax = lambda: RobustMaxLikelihood(4)  # noqa: E731
    cases = {
        "gaussian.expected_log_lik": (gaussian, "expected_log_lik", (gy, gm, gv)),
        "gaussian.expected_log_lik_extra_noise": (gaussian, "expected_log_lik", (gy, gm, gv, extra)),
        "gaussian.d_log_noise": (gaussian, "d_log_noise", (gy, gm, gv)),
        "gaussian.d_log_noise_extra_noise": (gaussian, "d_log_noise", (gy, gm, gv, extra)),
        "gaussian.predictive": (gaussian, "predictive", (gm, gv)),
        "gaussian.predictive_covariance": (gaussian, "predictive_covariance", (cm, cov)),
        "gaussian.log_predictive_density": (gaussian, "log_predictive_density", (gy, gm, gv)),
        "robustmax.expected_log_lik": (robustmax, "expected_log_lik", (ky, km, kv)),
        "robustmax.expected_log_lik_column": (robustmax, "expected_log_lik", (ky[:, None], km, kv)),
        "robustmax.argmax_probabilities": (robustmax, "argmax_probabilities", (km, kv)),
        "robustmax.predict_proba": (robustmax, "predict_proba", (km, kv)),
        "softmax.expected_log_lik": (lambda: SoftmaxLikelihood(4, n_samples=16), "expected_log_lik", (ky, km, kv)),
        "softmax.predict_proba": (lambda: SoftmaxLikelihood(4, n_samples=16), "predict_proba", (km, kv)),
        "student_t.expected_log_lik": (student, "expected_log_lik", (ty, tm, tv)),
        "student_t.d_log_params": (student, "d_log_params", (ty, tm, tv)),
        "student_t.d_log_params_scale_only": (
            lambda: StudentTLikelihood(df=4.0, scale=0.5, df_bounds="fixed"), "d_log_params", (ty, tm, tv)),
        "student_t.d_log_params_none": (
            lambda: StudentTLikelihood(df_bounds="fixed", scale_bounds="fixed"), "d_log_params", (ty, tm, tv)),
        "student_t.predictive": (student, "predictive", (tm, tv)),
        "student_t.predictive_covariance": (student, "predictive_covariance", (cm, cov)),
        "student_t.log_predictive_density": (student, "log_predictive_density", (ty, tm, tv)),
        "poisson.expected_log_lik": (poisson, "expected_log_lik", (py, pm, pv)),
        "poisson.d_log_params": (poisson, "d_log_params", (py, pm, pv)),
        "poisson.predictive": (poisson, "predictive", (pm, pv)),
        "poisson.predictive_covariance": (poisson, "predictive_covariance", (cm, cov)),
        "poisson.log_predictive_density": (poisson, "log_predictive_density", (py, pm, pv)),
    }  # fmt: skip
    for link in ("probit", "logit"):
        make = lambda link=link: BernoulliLikelihood(link)  # noqa: E731
        cases[f"bernoulli_{link}.expected_log_lik"] = (make, "expected_log_lik", (by, bm, bv))
        cases[f"bernoulli_{link}.predict_proba"] = (make, "predict_proba", (bm, bv))
    return cases


CASES = _cases()


def _as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


def _reference(name, dtype):
    """The numpy result from the inputs rounded to ``dtype``, computed in float64."""
    make, method, args = CASES[name]
    rounded = [np.asarray(a, dtype=dtype).astype(np.float64) for a in args]
    return _as_tuple(getattr(make(), method)(*rounded))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_likelihood_methods_match_numpy(lib, name, dtype):
    make, method, args = CASES[name]
    out = _as_tuple(getattr(make(), method)(*(lib(np.asarray(a, dtype=dtype)) for a in args)))
    expected = _reference(name, dtype)
    assert len(out) == len(expected)
    for got, want in zip(out, expected):
        close(lib.check(got, dtype), want, RTOL[dtype])


def test_the_cases_cover_every_method():
    # Each likelihood's training and prediction methods appear among the cases.
    regression = {"expected_log_lik", "predictive", "predictive_covariance", "log_predictive_density"}
    classification = {"expected_log_lik", "predict_proba"}
    methods = {
        "gaussian": regression | {"d_log_noise"},
        "student_t": regression | {"d_log_params"},
        "poisson": regression | {"d_log_params"},
        "bernoulli_probit": classification,
        "bernoulli_logit": classification,
        "robustmax": classification | {"argmax_probabilities"},
        "softmax": classification,
    }
    for name, wanted in methods.items():
        assert wanted == {CASES[c][1] for c in CASES if c.split(".")[0] == name}, name


def test_gaussian_per_row_noise_enters(lib):
    # The known noise adds to the observation noise row by row: d_var = -1 / (2 s2_i),
    # unlike the result without it (an independent check of what the cases compare).
    make, _, (y, mean, var, extra) = CASES["gaussian.expected_log_lik_extra_noise"]
    lik = make()
    with_noise = be.to_numpy(lik.expected_log_lik(lib(y), lib(mean), lib(var), lib(extra))[2])
    without = be.to_numpy(lik.expected_log_lik(lib(y), lib(mean), lib(var))[2])
    close(with_noise, np.broadcast_to(-0.5 / (0.3 + extra), y.shape), 1e-12)
    assert not np.allclose(with_noise, without)


def test_integer_labels_and_counts(lib):
    # Labels and counts may come as integer arrays; the outputs take the marginals' dtype.
    _, _, (ky, km, kv) = CASES["robustmax.expected_log_lik"]
    for lik in (RobustMaxLikelihood(4), SoftmaxLikelihood(4, n_samples=16)):
        out = lik.expected_log_lik(lib(ky.astype(np.int64)), lib(km), lib(kv))
        for got, want in zip(out, lik.expected_log_lik(ky, km, kv)):
            close(lib.check(got, np.float64), want, 1e-12)
    _, _, (by, bm, bv) = CASES["bernoulli_probit.expected_log_lik"]
    out = BernoulliLikelihood().expected_log_lik(lib(by.astype(np.int64)), lib(bm), lib(bv))
    close(lib.check(out[0], np.float64), BernoulliLikelihood().expected_log_lik(by, bm, bv)[0], 1e-12)
    _, _, (py, pm, pv) = CASES["poisson.expected_log_lik"]
    out = PoissonLikelihood(1.0).log_predictive_density(lib(py.astype(np.int64)), lib(pm), lib(pv))
    close(lib.check(out, np.float64), PoissonLikelihood(1.0).log_predictive_density(py, pm, pv), 1e-12)


def test_student_t_density_over_several_blocks(lib):
    # More rows than one block of log_predictive_density (4096): each block sizes its
    # own grid from its own rows.
    rng = np.random.default_rng(2)
    n = 5000
    mean, var = rng.normal(size=(n, 1)), np.exp(2.0 * rng.normal(size=(n, 1)))
    y = mean + rng.standard_t(3, size=(n, 1))
    y[4500] = 500.0  # a far outlier in the second block only: a longer grid there
    lik = StudentTLikelihood(df=3.0, scale=0.7)
    out = lik.log_predictive_density(lib(y), lib(mean), lib(var))
    close(lib.check(out, np.float64), lik.log_predictive_density(y, mean, var), 1e-12)


def test_empty_batches(lib):
    empty = np.zeros((0, 1))
    lik = StudentTLikelihood()
    assert lib.check(lik.log_predictive_density(lib(empty), lib(empty), lib(empty)), np.float64).shape == (0, 1)
    assert lib.check(lik.d_log_params(lib(empty), lib(empty), lib(empty)), np.float64).shape == (0, 2)
    assert lib.check(PoissonLikelihood().d_log_params(lib(empty), lib(empty), lib(empty)), np.float64).shape == (0, 0)


def test_device_without_float64():
    # float32 throughout: the nodes, the draws and every constant are made in float32.
    lib = Lib("strict_no_float64")
    for name in ("bernoulli_probit.expected_log_lik", "robustmax.expected_log_lik", "softmax.predict_proba",
                 "student_t.log_predictive_density", "poisson.log_predictive_density"):  # fmt: skip
        make, method, args = CASES[name]
        out = _as_tuple(getattr(make(), method)(*(lib(np.asarray(a, dtype=np.float32)) for a in args)))
        for got, want in zip(out, _reference(name, np.float32)):
            close(lib.check(got, np.float32), want, RTOL_F32)
    # Without float64 the softmax variance derivative runs in float32: its symmetric
    # difference with step sqrt(v) is then accurate to about eps32 / sqrt(v), 1e-5 from
    # v = 1e-4 on. (Where float64 exists it is used: test_softmax_float32_in_float64.)
    labels, mean, var = CASES["softmax.expected_log_lik"][2]
    var = np.maximum(var, 1e-4).astype(np.float32)
    mean = mean.astype(np.float32)
    lik = SoftmaxLikelihood(4, n_samples=16)
    out = lik.expected_log_lik(lib(labels.astype(np.float32)), lib(mean), lib(var))
    for got, want in zip(out, lik.expected_log_lik(labels, mean.astype(np.float64), var.astype(np.float64))):
        close(lib.check(got, np.float32), want, RTOL_F32)


def test_softmax_float32_in_float64(lib):
    # At the variance floor (row 0) float32 arithmetic would leave two digits of the
    # variance derivative; computed in float64 and rounded, it keeps float32's.
    labels, mean, var = CASES["softmax.expected_log_lik"][2]
    mean, var = mean.astype(np.float32), var.astype(np.float32)
    lik = SoftmaxLikelihood(4, n_samples=16)
    got = lib.check(lik.expected_log_lik(lib(labels), lib(mean), lib(var))[2], np.float32)
    want = lik.expected_log_lik(labels, mean.astype(np.float64), var.astype(np.float64))[2]
    close(got[0], want[0], 1e-6, scale=0.0)


def test_mixed_namespaces_are_refused(lib):
    y, mean, var, extra = CASES["gaussian.expected_log_lik_extra_noise"][2]
    with pytest.raises(TypeError):
        GaussianLikelihood(0.3).expected_log_lik(lib(y), lib(mean), lib(var), extra)  # numpy noise
    with pytest.raises(TypeError):
        BernoulliLikelihood().expected_log_lik(np.ones((3, 1)), lib(np.zeros((3, 1))), lib(np.ones((3, 1))))


def test_labels_are_checked(lib):
    mean, var = lib(np.zeros((3, 3))), lib(np.ones((3, 3)))
    for lik in (RobustMaxLikelihood(3), SoftmaxLikelihood(3, n_samples=4)):
        for bad in ([0.0, 1.5, 2.0], [0.0, 3.0, 1.0], [-1.0, 0.0, 1.0], [0.0, np.nan, 1.0]):
            with pytest.raises(ValueError, match="labels must be integers"):
                lik.expected_log_lik(lib(np.array(bad)), mean, var)
        with pytest.raises(ValueError, match="expected 3 labels"):
            lik.expected_log_lik(lib(np.zeros(2)), mean, var)


def test_targets_are_checked(lib):
    good = np.array([[0.0], [2.0], [3.5]])
    for cls in (StudentTLikelihood, PoissonLikelihood):
        np.testing.assert_array_equal(lib.check(cls.check_targets(lib(good)), np.float64), good)
        assert lib.check(cls.check_targets(lib(np.array([1, 2]))), np.float64).tolist() == [1.0, 2.0]
    bad = np.array([1.0, np.nan, -np.inf, -2.0, -3.0])
    for cls in (StudentTLikelihood, PoissonLikelihood):
        with pytest.raises(ValueError) as on_numpy:
            cls.check_targets(bad)
        with pytest.raises(ValueError) as on_lib:
            cls.check_targets(lib(bad))
        assert str(on_lib.value) == str(on_numpy.value)


# --------------------------------------------------------------------------------------
# nothing leaves the namespace
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(CASES))
def test_strict_path_never_converts_to_numpy(name, monkeypatch):
    """Instrumented, on array_api_strict's CPU device where a conversion would succeed:
    no method converts an input or an intermediate to numpy. (No likelihood method has a
    documented host round trip; the only exchanges with the host are single scalars: the
    label check, the Student-t grid length.)"""
    make, method, args = CASES[name]
    lik = make()
    inputs = [xs.asarray(np.asarray(a)) for a in args]
    calls = spy_on_numpy_conversions(monkeypatch)
    getattr(lik, method)(*inputs)
    monkeypatch.undo()
    assert calls == []


def test_the_instrument_sees_a_conversion(monkeypatch):
    calls = spy_on_numpy_conversions(monkeypatch)
    be.to_numpy(xs.asarray(np.ones(2)))
    monkeypatch.undo()
    assert calls


def test_numpy_inputs_keep_the_scipy_path(monkeypatch):
    # A numpy array never reaches the array-API formulas, nor the constant cache.
    def refuse(*args, **kwargs):
        raise AssertionError("numpy input routed to an array-API formula")

    for fn in [f for f in dir(special) if f.startswith("_generic_")] + ["_finite_max"]:
        monkeypatch.setattr(special, fn, refuse)
    # ... nor the Array API conversion of the inputs (backend.likelihood_floats' other branch).
    monkeypatch.setattr(be, "working_float", refuse)
    for name, (make, method, args) in CASES.items():
        for out in _as_tuple(getattr(make(), method)(*args)):
            assert isinstance(out, np.ndarray), name


def test_constants_are_cached_per_device_and_dtype(lib):
    nodes = np.linspace(-1.0, 1.0, 7)
    like = lib(np.zeros(3))
    first = be.constant(nodes, like)
    assert be.constant(nodes, like) is first  # converted once
    lib.check(first, np.float64)
    single = be.constant(nodes, lib(np.zeros(3, dtype=np.float32)))
    assert lib.check(single, np.float32).tolist() == nodes.astype(np.float32).tolist()
    assert be.constant(nodes + 1.0, like) is not first  # keyed by content
    assert be.constant(nodes, np.zeros(3)) is nodes  # numpy: the host array itself


def test_input_namespace():
    assert be.input_namespace(np.ones(2), [1.0], 0.5, None, np.float64(1.0)) is np
    strict = be.input_namespace(xs.asarray(np.ones(2)), 0.5)
    assert strict.__name__ == "array_api_strict"
    with pytest.raises(TypeError):
        be.input_namespace(xs.asarray(np.ones(2)), np.ones(2))


# --------------------------------------------------------------------------------------
# special functions
# --------------------------------------------------------------------------------------
def _grid(lo, hi, n=20001):
    return np.linspace(lo, hi, n)


#: name -> (scipy, arguments, float64 tolerance, kind). kind "relative": elementwise;
#: "absolute": |error| <= tol * max(1, |value|) (gammaln and digamma next to their
#: zeros). Arguments where scipy's value is 0 or beyond 1e300 in magnitude are left out
#: of the relative comparisons (denormal results have no relative precision) and checked
#: for exact agreement instead.
SPECIAL = {
    "erfc": (sp.erfc, np.concatenate([_grid(-8.0, 27.5), [-0.46875, 0.46875, 4.0]]), 1e-13, "relative"),
    # scipy itself rounds x^2 in exp(x^2) for x < 0 (an error of 6e-14 at -24); the
    # formula splits it exactly.
    "erfcx": (sp.erfcx, np.concatenate([_grid(-26.6, 30.0), np.geomspace(30.0, 1e300, 500)]), 1e-13, "relative"),
    "ndtr": (sp.ndtr, _grid(-37.5, 9.0), 1e-13, "relative"),
    "log_ndtr": (sp.log_ndtr, np.concatenate([_grid(-1e3, 38.0), _grid(-3.0, 3.0), -np.geomspace(1e3, 1e150, 50)]),
                 1e-13, "relative"),  # fmt: skip
    "expit": (sp.expit, _grid(-745.0, 745.0), 1e-15, "relative"),
    "gammaln": (sp.gammaln, np.concatenate([_grid(1e-6, 30.0), np.geomspace(1e-300, 1e300, 2000),
                                            _grid(-30.0, 0.0)[:-1] + 1e-3]), 1e-14, "absolute"),  # fmt: skip
    # Negative arguments at least 0.01 from a pole: scipy's own digamma loses digits
    # next to them (2e-12 at -3.99995, and torch's alike; the reflection here does not).
    "digamma": (sp.digamma, np.concatenate([_grid(1e-6, 30.0), np.geomspace(1e-300, 1e300, 2000),
                                            (-np.arange(0, 30)[:, None] - np.linspace(0.01, 0.99, 50)).ravel()]),
                1e-14, "absolute"),  # fmt: skip
    "wrightomega": (sp.wrightomega, np.concatenate([_grid(-60.0, 60.0), np.geomspace(60.0, 1e25, 500),
                                                    -np.geomspace(60.0, 1e300, 50)]), 1e-14, "relative"),  # fmt: skip
}
#: float32 tolerances of the same comparisons (from float32 arguments, against scipy in
#: float64): float32 rounding of x^2 in exp(-x^2) costs x^2 * 6e-8 relative in the tails.
SPECIAL_F32 = {"erfc": 1e-5, "erfcx": 1e-5, "ndtr": 2e-5, "log_ndtr": 2e-5, "expit": 1e-6, "gammaln": 1e-5,
               "digamma": 2e-6, "wrightomega": 2e-6}  # fmt: skip


def _compare_special(name, got, x, dtype, tol=None):
    ref_fn, _, tol64, kind = SPECIAL[name]
    tol = (tol64 if dtype == np.float64 else SPECIAL_F32[name]) if tol is None else tol
    want = ref_fn(x.astype(np.float64))
    big = 1e300 if dtype == np.float64 else 1e30
    small = 1e-300 if dtype == np.float64 else 1e-30
    measured = np.isfinite(want) & (np.abs(want) < big) & (np.abs(want) > small)
    # Where scipy underflows to 0 (or to a denormal), the result must be as small.
    underflow = np.isfinite(want) & (np.abs(want) <= small)
    assert np.all(np.abs(got[underflow]) <= small), (name, x[underflow][np.abs(got[underflow]) > small])
    if kind == "absolute":
        err = np.abs(got[measured] - want[measured]) / np.maximum(1.0, np.abs(want[measured]))
    else:
        err = np.abs(got[measured] - want[measured]) / np.abs(want[measured])
    assert np.max(err, initial=0.0) <= tol, (name, x[measured][np.argmax(err)], np.max(err))
    # Results scipy gives as inf, or NaN, must match; huge and denormal ones roughly.
    inf = np.isinf(want) & np.isfinite(x)
    np.testing.assert_array_equal(got[inf], want[inf])


def _special_args(name, dtype):
    x = SPECIAL[name][1]
    with np.errstate(over="ignore"):
        x = x.astype(dtype)
    return x[np.isfinite(x)]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", sorted(SPECIAL))
def test_array_api_formulas_match_scipy(name, dtype):
    """The formulas array_api_strict (and any library without the function) runs."""
    x = _special_args(name, dtype)
    # (numpy under array_api_strict reports the overflows of float32's extreme arguments,
    # whose results, infinities, are checked below.)
    with np.errstate(over="ignore"):
        got = getattr(special, name)(xs.asarray(x, device=xs.Device("device1")))
    assert type(got) is StrictArray and got.dtype == xs.asarray(x).dtype
    _compare_special(name, be.to_numpy(got), x, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", sorted(SPECIAL))
def test_torch_special_functions_match_scipy(name, dtype):
    """torch.special where torch has the function, the formulas otherwise (wrightomega)."""
    torch = pytest.importorskip("torch")
    x = _special_args(name, dtype)
    got = getattr(special, name)(torch.asarray(x.copy()))
    assert isinstance(got, torch.Tensor) and got.dtype == torch.asarray(x).dtype
    _compare_special(name, got.numpy(), x, dtype)


@pytest.mark.parametrize("name", sorted(SPECIAL))
def test_array_api_formulas_run_on_torch(name):
    # The formulas are written in standard operations only: torch runs them to the same
    # accuracy (what a library without the function, or CuPy without wrightomega, gets).
    torch = pytest.importorskip("torch")
    import array_api_compat.torch as xpt

    x = _special_args(name, np.float64)
    got = getattr(special, f"_generic_{name}", None)
    if got is None:  # ndtr is erfc on every library but numpy
        got = lambda t, xp: 0.5 * special._generic_erfc(-t * special._SQRT1_2, xp)  # noqa: E731
    _compare_special(name, got(torch.asarray(x.copy()), xpt).numpy(), x, np.float64)


def test_special_values_of_the_formulas():
    inf, nan = np.inf, np.nan
    expected = {
        "erfc": ([-inf, inf, nan, 30.0, -30.0], [2.0, 0.0, nan, 0.0, 2.0]),
        "erfcx": ([-inf, inf, nan, -27.0, 1e308], [inf, 0.0, nan, inf, sp.erfcx(1e308)]),
        "ndtr": ([-inf, inf, nan, -40.0, 40.0], [0.0, 1.0, nan, 0.0, 1.0]),
        "log_ndtr": ([-inf, inf, nan, 40.0], [-inf, 0.0, nan, 0.0]),
        "expit": ([-inf, inf, nan, 0.0], [0.0, 1.0, nan, 0.5]),
        "gammaln": ([0.0, -1.0, -7.0, inf, nan, 1.0, 2.0, 3e305], [inf, inf, inf, inf, nan, 0.0, 0.0, inf]),
        "digamma": ([0.0, -1.0, -7.0, inf, nan], [-inf, nan, nan, inf, nan]),
        "wrightomega": ([-inf, inf, nan, -800.0, 1e25], [0.0, inf, nan, 0.0, 1e25]),
    }
    for name, (x, want) in expected.items():
        with np.errstate(all="ignore"):
            got = be.to_numpy(getattr(special, name)(xs.asarray(np.array(x))))
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-15, err_msg=name)


def test_torch_ndtr_keeps_its_left_tail():
    # torch.special.ndtr forms (1 + erf) / 2 and returns 0 at -38; special.ndtr goes
    # through erfc there, and keeps scipy's relative accuracy.
    torch = pytest.importorskip("torch")
    x = np.array([-38.0, -20.0, -8.0, -4.0])
    close(special.ndtr(torch.asarray(x)).numpy(), sp.ndtr(x), 1e-13, scale=0.0)
    assert torch.special.ndtr(torch.asarray(x[:1])).item() == 0.0  # what it replaces


LSE_ROWS = np.array([[1.0, 2.0, 3.0], [-np.inf, 0.5, -1.0], [-np.inf, -np.inf, -np.inf], [700.0, 710.0, -5.0]])


@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("keepdims", [False, True])
def test_logsumexp(lib, axis, keepdims):
    a = LSE_ROWS
    b = np.array([0.5, 1.0, 2.0])
    for weights in (None, b):
        with np.errstate(divide="ignore"):
            want = sp.logsumexp(a, axis=axis, b=weights, keepdims=keepdims)
            got = special.logsumexp(lib(a), axis=axis, b=None if weights is None else lib(weights), keepdims=keepdims)
        close(lib.check(got, np.float64), want, 1e-15)


@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_softmax(lib, fn):
    a = np.concatenate([LSE_ROWS[:2], LSE_ROWS[3:]])  # scipy returns NaN for a row of -inf
    for axis in (0, 1):
        close(lib.check(getattr(special, fn)(lib(a), axis), np.float64), getattr(sp, fn)(a, axis=axis), 1e-15)


def test_array_api_softmax_and_logsumexp_on_strict(monkeypatch):
    # strict has no native version: the shifted sums (above they may be torch's own).
    a = np.random.default_rng(3).normal(size=(5, 4)) * 30.0
    x = xs.asarray(a, device=xs.Device("device1"))
    close(be.to_numpy(special.logsumexp(x, axis=1, b=xs.asarray(np.full(4, 0.25), device=x.device))),
          sp.logsumexp(a, axis=1, b=np.full(4, 0.25)), 1e-15)  # fmt: skip
    close(be.to_numpy(special.log_softmax(x, 0)), sp.log_softmax(a, axis=0), 1e-15)
    close(be.to_numpy(special.softmax(x, 1)), sp.softmax(a, axis=1), 1e-15)
