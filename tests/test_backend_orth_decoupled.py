"""The orthogonally decoupled basis on arrays of other libraries: array_api_strict and PyTorch (CPU).

The same small problem (Mb=5 beta points, Mg=7 gamma points, B=20 rows, D=2, P outputs,
C covariances) is built in numpy -- the numba/BLAS path, the reference -- and in the
other library, in the same dtype. Every entry point of
:mod:`skgp_sparse.bases.orth_decoupled` must agree with numpy to 1e-10 relative in
float64 (``close``: relative to the largest entry of the quantity), with the exact
a^T K_gg a and with its column-sampled estimate (``kl_columns=3``, both states' column
generators from one seed, so that they draw the same columns), and answer with arrays of
the input's library on its device. In float32 the other library is compared with the
float64 reference to :data:`RTOL_F32`.

array_api_strict runs on its "device1", which refuses every conversion to numpy; a spy on
numpy's conversion functions checks it explicitly as well.
"""

import copy

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF, ConstantKernel as C

from skgp_sparse import backend as be
from skgp_sparse.bases import coupled, orth_decoupled
from skgp_sparse.elbo import VariationalModel
from skgp_sparse.kernels import compile_kernel
from skgp_sparse.likelihoods import GaussianLikelihood
from skgp_sparse.optim import Adam

from ._array_libs import Lib, close, spy_on_numpy_conversions

RTOL = 1e-10
#: float32 state and data against the float64 reference (relative to each quantity's
#: largest entry). Measured: below 6e-6 for every output of these problems (worst: the
#: KL with the column-sampled term, where the two quadratic terms cancel; every other
#: output below 1e-6); the bound leaves an order of magnitude for other BLAS builds.
RTOL_F32 = 5e-5
JITTER = 1e-6
FIELDS = ("inducing", "orthogonal", "orth_mean", "q_mean", "q_sqrt")
#: kl_columns of the states: the exact a^T K_gg a, and 3 of the 7 columns.
COLUMNS = [None, 3]
COLUMN_IDS = ["exact", "sampled"]
COLUMN_SEED = 11


@pytest.fixture(params=["strict_device1", "torch"])
def lib(request):
    return Lib(request.param)


def _problem(p, n_cov, columns=None, seed=0, mb=5, mg=7, b=20, d=2):
    rng = np.random.default_rng(seed + 10 * p + n_cov)
    kernel = compile_kernel(C(1.4) * RBF([0.9, 1.6]))
    X = rng.uniform(-2, 2, size=(b, d))
    Z = rng.uniform(-2, 2, size=(mb, d))
    O = rng.uniform(-2, 2, size=(mg, d))
    lows = []
    for _ in range(n_cov):
        low = np.tril(0.3 * rng.standard_normal((mb, mb)))
        low[np.diag_indices(mb)] = rng.uniform(0.5, 1.2, mb)
        lows.append(low)
    beta = coupled.CoupledState(Z, rng.standard_normal((mb, p)), np.stack(lows))
    column_rng = None if columns is None else np.random.default_rng(COLUMN_SEED)
    state = orth_decoupled.OrthState(beta, O, rng.standard_normal((mg, p)), columns, column_rng)
    d_mean = rng.standard_normal((b, p))
    # Negative variance adjoints (a log-concave likelihood), different for every row.
    d_var = -rng.uniform(0.5, 2.0, size=(b, p))
    return kernel, X, state, d_mean, d_var


def _in(lib, state, dtype=np.float64):
    """``state`` in ``lib``, with a copy of its column generator (the same stream)."""
    cast = lambda a: None if a is None else lib(np.asarray(a, dtype=dtype))  # noqa: E731
    beta = coupled.CoupledState(cast(state.inducing), cast(state.q_mean), cast(state.q_sqrt),
                                cast(state.beta.precision))
    return orth_decoupled.OrthState(beta, cast(state.orthogonal), cast(state.orth_mean), state.kl_columns,
                                    copy.deepcopy(state.column_rng))


CASES = [(1, 1), (2, 1), (2, 2)]
CASE_IDS = ["P1", "P2C1", "P2C2"]


@pytest.fixture(params=CASES, ids=CASE_IDS)
def case(request):
    return request.param


@pytest.fixture(params=COLUMNS, ids=COLUMN_IDS)
def columns(request):
    return request.param


@pytest.mark.parametrize("need_grad", [False, True, "natural"], ids=["nograd", "grad", "natural"])
def test_marginals_and_tape_kl(lib, case, columns, need_grad):
    kernel, X, state, _, _ = _problem(*case, columns=columns)
    xstate = _in(lib, state)
    mean, var, tape = orth_decoupled.marginals(kernel, X, state, JITTER, need_grad)
    xmean, xvar, xtape = orth_decoupled.marginals(kernel, lib(X), xstate, JITTER, need_grad)
    close(lib.check(xmean, np.float64), mean, RTOL)
    close(lib.check(xvar, np.float64), var, RTOL)
    assert (xtape is None) == (tape is None)
    if tape is not None:
        assert type(xtape.quad) is type(tape.quad)
        if columns is not None and need_grad is True:
            # the same columns, from the same generator stream
            np.testing.assert_array_equal(xtape.quad.cols, tape.quad.cols)
        kl = orth_decoupled.kl_divergence(kernel, state, JITTER, tape)
        xkl = orth_decoupled.kl_divergence(kernel, xstate, JITTER, xtape)
        close(lib.check(xkl, np.float64), kl, RTOL)


def test_kl_divergence_exact_and_its_cache(lib, case, columns):
    kernel, _, state, _, _ = _problem(*case, columns=columns)
    xstate = _in(lib, state)
    kl = orth_decoupled.kl_divergence(kernel, state, JITTER)
    xkl = orth_decoupled.kl_divergence(kernel, xstate, JITTER)
    close(lib.check(xkl, np.float64), kl, RTOL)
    assert xstate.quadratic_cache is not None
    # The cached a^T K_gg a is reused while kernel, gamma and a are unchanged ...
    close(lib.check(orth_decoupled.kl_divergence(kernel, xstate, JITTER), np.float64), kl, RTOL)
    # ... and recomputed once a moves.
    state.orth_mean = 2.0 * state.orth_mean
    xstate.orth_mean = 2.0 * xstate.orth_mean
    kl2 = orth_decoupled.kl_divergence(kernel, state, JITTER)
    assert abs(kl2 - kl) > 1e-3 * abs(kl)
    close(lib.check(orth_decoupled.kl_divergence(kernel, xstate, JITTER), np.float64), kl2, RTOL)


def test_backward(lib, case, columns):
    kernel, X, state, d_mean, d_var = _problem(*case, columns=columns)
    xstate = _in(lib, state)
    _, _, tape = orth_decoupled.marginals(kernel, X, state, JITTER, True)
    _, _, xtape = orth_decoupled.marginals(kernel, lib(X), xstate, JITTER, True)
    theta_bar, bars = orth_decoupled.backward(tape, state, d_mean, d_var, FIELDS)
    xtheta_bar, xbars = orth_decoupled.backward(xtape, xstate, lib(d_mean), lib(d_var), FIELDS)
    close(lib.check(xtheta_bar, np.float64), theta_bar, RTOL)
    assert set(xbars) == set(FIELDS)
    for name in FIELDS:
        close(lib.check(xbars[name], np.float64), bars[name], RTOL)
    # A second backward pass over the same tape (it recomputes K(gamma, [X; beta])).
    theta_bar2, bars2 = orth_decoupled.backward(tape, state, d_mean, d_var, ("orthogonal",))
    xtheta_bar2, xbars2 = orth_decoupled.backward(xtape, xstate, lib(d_mean), lib(d_var), ("orthogonal",))
    close(lib.check(xtheta_bar2, np.float64), theta_bar2, RTOL)
    close(lib.check(xbars2["orthogonal"], np.float64), bars2["orthogonal"], RTOL)


@pytest.mark.parametrize("need_grad", [True, "natural"], ids=["grad", "natural"])
def test_natural_step(lib, case, need_grad):
    kernel, X, state, d_mean, d_var = _problem(*case)
    xstate = _in(lib, state)
    step = 0.7
    _, _, tape = orth_decoupled.marginals(kernel, X, state, JITTER, need_grad)
    _, _, xtape = orth_decoupled.marginals(kernel, lib(X), xstate, JITTER, need_grad)
    new = orth_decoupled.natural_step(tape, state, d_mean, d_var, step)
    xnew = orth_decoupled.natural_step(xtape, xstate, lib(d_mean), lib(d_var), step)
    assert isinstance(xnew, orth_decoupled.OrthState)
    for name in ("q_mean", "q_sqrt"):
        close(lib.check(getattr(xnew, name), np.float64), getattr(new, name), RTOL)
    close(lib.check(xnew.beta.precision, np.float64), new.beta.precision, RTOL)
    assert xnew.orthogonal is xstate.orthogonal and xnew.orth_mean is xstate.orth_mean
    assert xnew.quadratic_cache is xstate.quadratic_cache
    # a second step from the new state
    _, _, tape2 = orth_decoupled.marginals(kernel, X, new, JITTER, need_grad)
    _, _, xtape2 = orth_decoupled.marginals(kernel, lib(X), xnew, JITTER, need_grad)
    new2 = orth_decoupled.natural_step(tape2, new, d_mean, d_var, step)
    xnew2 = orth_decoupled.natural_step(xtape2, xnew, lib(d_mean), lib(d_var), step)
    for name in ("q_mean", "q_sqrt"):
        close(lib.check(getattr(xnew2, name), np.float64), getattr(new2, name), 1e-9)


@pytest.mark.parametrize("full_cov", [False, True], ids=["var", "cov"])
def test_predictor(lib, case, full_cov):
    kernel, X, state, _, _ = _problem(*case)
    pred = orth_decoupled.make_predictor(kernel, state, JITTER)
    xpred = orth_decoupled.make_predictor(kernel, _in(lib, state), JITTER)
    for name in ("inducing_points", "mean_weights", "middle"):
        close(lib.check(getattr(xpred.beta, name), np.float64), getattr(pred.beta, name), RTOL)
    for name in ("orthogonal_points", "orthogonal_weights"):
        close(lib.check(getattr(xpred, name), np.float64), getattr(pred, name), RTOL)
    mean, second = pred.latent(kernel, X, full_cov=full_cov)
    xmean, xsecond = xpred.latent(kernel, lib(X), full_cov=full_cov)
    close(lib.check(xmean, np.float64), mean, RTOL)
    close(lib.check(xsecond, np.float64), second, RTOL)


def test_adam_moves_orth_mean_as_on_numpy(lib, columns):
    """A few training steps through the model (Adam on theta, both point sets and the
    gamma coefficients ``orth_mean``; natural steps on beta): the same trajectory, the
    sampled columns included."""
    kernel, X, state, _, _ = _problem(2, 1, columns=columns)
    Y = np.sin(X[:, :1]) + np.cos(X[:, 1:])
    Y = np.hstack([Y, -Y])
    xkernel = compile_kernel(C(1.4) * RBF([0.9, 1.6]))
    models = []
    for k, s in ((kernel, state), (xkernel, _in(lib, state))):
        models.append(VariationalModel(orth_decoupled, k, GaussianLikelihood(0.3), s, 60, learn_inducing=True))
    assert "orth_mean" in models[0].learn_fields
    adams = [Adam(0.05), Adam(0.05)]
    for _ in range(3):
        (ref, ref_adam), (dev, dev_adam) = zip(models, adams)
        result = ref.evaluate(X, Y)
        xresult = dev.evaluate(lib(X), lib(Y))
        np.testing.assert_allclose(xresult.elbo, result.elbo, rtol=RTOL)
        for name in models[0].learn_fields:
            close(lib.check(xresult.grads[name], np.float64), result.grads[name], RTOL)
        ref.state = ref.natural_step(result, 0.5)
        dev.state = dev.natural_step(xresult, 0.5)
        ref.set_adam_params(ref_adam.step(ref.adam_params(), result.grads))
        dev.set_adam_params(dev_adam.step(dev.adam_params(), xresult.grads))
    np.testing.assert_allclose(dev.kernel.theta, ref.kernel.theta, rtol=RTOL)
    for name in ("orth_mean", "orthogonal", "inducing", "q_mean", "q_sqrt"):
        close(lib.check(getattr(dev.state, name), np.float64), getattr(ref.state, name), 1e-9)


def test_no_orthogonal_hands_over_to_coupled(lib):
    kernel, X, state, d_mean, d_var = _problem(2, 2, mg=0)
    xstate = _in(lib, state)
    mean, var, tape = orth_decoupled.marginals(kernel, X, state, JITTER, True)
    xmean, xvar, xtape = orth_decoupled.marginals(kernel, lib(X), xstate, JITTER, True)
    close(lib.check(xmean, np.float64), mean, RTOL)
    close(lib.check(xvar, np.float64), var, RTOL)
    close(lib.check(orth_decoupled.kl_divergence(kernel, xstate, JITTER, xtape), np.float64),
          orth_decoupled.kl_divergence(kernel, state, JITTER, tape), RTOL)
    theta_bar, bars = orth_decoupled.backward(tape, state, d_mean, d_var, FIELDS)
    xtheta_bar, xbars = orth_decoupled.backward(xtape, xstate, lib(d_mean), lib(d_var), FIELDS)
    close(lib.check(xtheta_bar, np.float64), theta_bar, RTOL)
    for name in FIELDS:
        close(lib.check(xbars[name], np.float64), bars[name], RTOL)
    assert xbars["orthogonal"].shape == (0, 2) and xbars["orth_mean"].shape == (0, 2)
    new = orth_decoupled.natural_step(tape, state, d_mean, d_var, 0.7)
    xnew = orth_decoupled.natural_step(xtape, xstate, lib(d_mean), lib(d_var), 0.7)
    for name in ("q_mean", "q_sqrt"):
        close(lib.check(getattr(xnew, name), np.float64), getattr(new, name), RTOL)
    pred = orth_decoupled.make_predictor(kernel, state, JITTER)
    xpred = orth_decoupled.make_predictor(kernel, xstate, JITTER)
    lib.check(xpred.orthogonal_points, np.float64)
    for a, b in zip(xpred.latent(kernel, lib(X)), pred.latent(kernel, X)):
        close(lib.check(a, np.float64), b, RTOL)


@pytest.mark.parametrize("n_cov", [1, 2])
@pytest.mark.parametrize("kl_columns", [None, 2, "auto"])
def test_init_state_copy_and_caches(lib, n_cov, kl_columns):
    rng = np.random.default_rng(1)
    points = rng.uniform(-2, 2, size=(10, 2))
    options = dict(n_outputs=2, n_covariances=n_cov, n_orthogonal=4, kl_columns=kl_columns, seed=5)
    state = orth_decoupled.init_state(points, **options)
    xstate = orth_decoupled.init_state(lib(points), **options)
    for name in ("inducing", "q_mean", "q_sqrt", "orthogonal", "orth_mean"):
        np.testing.assert_array_equal(lib.check(getattr(xstate, name), np.float64), getattr(state, name))
    assert xstate.kl_columns == state.kl_columns
    if state.column_rng is None:
        assert xstate.column_rng is None
    else:
        np.testing.assert_array_equal(xstate.column_rng.integers(0, 1 << 30, 4), state.column_rng.integers(0, 1 << 30, 4))
    assert xstate.beta.precision is None and xstate.quadratic_cache is None
    xstate.beta.precision = lib(np.ones((n_cov, 6, 6)))
    xstate.quadratic_cache = "cached"
    twin = xstate.copy()
    for name in ("inducing", "q_mean", "q_sqrt", "orthogonal", "orth_mean"):
        a, b = getattr(twin, name), getattr(xstate, name)
        assert a is not b
        np.testing.assert_array_equal(lib.check(a, np.float64), be.to_numpy(b))
    assert twin.quadratic_cache is None
    twin.drop_caches()
    assert twin.beta.precision is None and xstate.beta.precision is not None
    xstate.drop_caches()
    assert xstate.quadratic_cache is None
    # A copy is independent of the original.
    twin.orth_mean[0, 0] = 5.0
    twin.orthogonal[0, 0] = 5.0
    assert float(xstate.orth_mean[0, 0]) == 0.0
    assert float(xstate.orthogonal[0, 0]) == points[6, 0]
    with pytest.raises(ValueError):
        orth_decoupled.init_state(lib(points), 1, 1, n_orthogonal=10)


def test_init_state_keeps_float32(lib):
    points = np.random.default_rng(2).uniform(-2, 2, size=(9, 2)).astype(np.float32)
    xstate = orth_decoupled.init_state(lib(points), 1, 1, n_orthogonal=3)
    for name in ("inducing", "q_mean", "q_sqrt", "orthogonal", "orth_mean"):
        lib.check(getattr(xstate, name), np.float32)


def test_float32(lib, case, columns):
    """float32 arrays stay float32 and agree with the float64 reference to RTOL_F32."""
    kernel, X, state, d_mean, d_var = _problem(*case, columns=columns)
    f32 = np.float32
    xstate = _in(lib, state, f32)
    xX, xdm, xdv = lib(X.astype(f32)), lib(d_mean.astype(f32)), lib(d_var.astype(f32))
    mean, var, tape = orth_decoupled.marginals(kernel, X, state, JITTER, True)
    xmean, xvar, xtape = orth_decoupled.marginals(kernel, xX, xstate, JITTER, True)
    close(lib.check(xmean, f32), mean, RTOL_F32)
    close(lib.check(xvar, f32), var, RTOL_F32)
    close(lib.check(orth_decoupled.kl_divergence(kernel, xstate, JITTER, xtape), f32),
          orth_decoupled.kl_divergence(kernel, state, JITTER, tape), RTOL_F32)
    close(lib.check(orth_decoupled.kl_divergence(kernel, xstate, JITTER), f32),
          orth_decoupled.kl_divergence(kernel, state, JITTER), RTOL_F32)
    theta_bar, bars = orth_decoupled.backward(tape, state, d_mean, d_var, FIELDS)
    xtheta_bar, xbars = orth_decoupled.backward(xtape, xstate, xdm, xdv, FIELDS)
    close(be.to_numpy(xtheta_bar), theta_bar, RTOL_F32)
    for name in FIELDS:
        close(lib.check(xbars[name], f32), bars[name], RTOL_F32)
    _, _, tape = orth_decoupled.marginals(kernel, X, state, JITTER, "natural")
    _, _, xtape = orth_decoupled.marginals(kernel, xX, xstate, JITTER, "natural")
    new = orth_decoupled.natural_step(tape, state, d_mean, d_var, 0.7)
    xnew = orth_decoupled.natural_step(xtape, xstate, xdm, xdv, 0.7)
    close(lib.check(xnew.q_mean, f32), new.q_mean, RTOL_F32)
    close(lib.check(xnew.q_sqrt, f32), new.q_sqrt, RTOL_F32)
    pred = orth_decoupled.make_predictor(kernel, state, JITTER)
    xpred = orth_decoupled.make_predictor(kernel, xstate, JITTER)
    for full_cov in (False, True):
        m, v = pred.latent(kernel, X, full_cov=full_cov)
        xm, xv = xpred.latent(kernel, xX, full_cov=full_cov)
        close(lib.check(xm, f32), m, RTOL_F32)
        close(lib.check(xv, f32), v, RTOL_F32)


def test_strict_path_never_converts_to_numpy(monkeypatch):
    """Instrumented: numpy's conversion functions record any call on a strict array."""
    lib = Lib("strict_device1")
    points = lib(np.random.default_rng(3).uniform(-2, 2, size=(12, 2)))
    # (the spy records calls on strict arrays only: building the numpy problem is not one)
    calls = spy_on_numpy_conversions(monkeypatch)
    orth_decoupled.init_state(points, 2, 2, n_orthogonal=5, kl_columns=2)
    for columns in COLUMNS:
        kernel, X, state, d_mean, d_var = _problem(2, 2, columns=columns)
        xstate, xX, xdm, xdv = _in(lib, state), lib(X), lib(d_mean), lib(d_var)
        for need_grad in (False, "natural", True):
            orth_decoupled.marginals(kernel, xX, xstate, JITTER, need_grad)
        _, _, tape = orth_decoupled.marginals(kernel, xX, xstate, JITTER, True)
        orth_decoupled.kl_divergence(kernel, xstate, JITTER, tape)
        orth_decoupled.backward(tape, xstate, xdm, xdv, FIELDS)
        orth_decoupled.backward(tape, xstate, xdm, xdv, FIELDS)
        orth_decoupled.natural_step(tape, xstate, xdm, xdv, 0.5)
        orth_decoupled.kl_divergence(kernel, xstate, JITTER)
        orth_decoupled.kl_divergence(kernel, xstate, JITTER)
        pred = orth_decoupled.make_predictor(kernel, xstate, JITTER)
        pred.latent(kernel, xX), pred.latent(kernel, xX, full_cov=True)
        xstate.copy().drop_caches()
    monkeypatch.undo()
    assert calls == []


def test_mixed_libraries_are_refused(lib):
    kernel, X, state, _, _ = _problem(1, 1)
    with pytest.raises(TypeError):
        orth_decoupled.marginals(kernel, X, _in(lib, state), JITTER, False)
    # gamma of another library than beta and X
    mixed = _in(lib, state)
    mixed.orthogonal = state.orthogonal
    with pytest.raises(TypeError):
        orth_decoupled.marginals(kernel, lib(X), mixed, JITTER, False)


def test_state_to_device_and_back(lib):
    """The estimators move a state with ``state_to`` (nested ``beta`` included); a cache
    computed on the host must not be mistaken for the device state's (nor converted)."""
    from skgp_sparse.fit.placement import state_to

    kernel, X, state, _, _ = _problem(2, 1, columns=3)
    kl = orth_decoupled.kl_divergence(kernel, state, JITTER)  # fills the host cache
    assert state.quadratic_cache is not None
    # state_to shares the column generator with the original (dataclasses.replace): the
    # reference runs on a copy, whose generator is an independent one at the same position.
    reference = state.copy()
    device = lib(np.zeros(1))
    moved = state_to(state, lambda a: be.to_namespace(a, be.namespace(device), device=be.device_of(device)))
    assert isinstance(moved.beta, coupled.CoupledState) and moved.kl_columns == 3
    for name in ("inducing", "q_mean", "q_sqrt", "orthogonal", "orth_mean"):
        lib.check(getattr(moved, name), np.float64)
    close(lib.check(orth_decoupled.kl_divergence(kernel, moved, JITTER), np.float64), kl, RTOL)
    mean, _, tape = orth_decoupled.marginals(kernel, X, reference, JITTER, True)
    xmean, _, xtape = orth_decoupled.marginals(kernel, lib(X), moved, JITTER, True)
    close(lib.check(xmean, np.float64), mean, RTOL)
    np.testing.assert_array_equal(xtape.quad.cols, tape.quad.cols)
    close(lib.check(orth_decoupled.kl_divergence(kernel, moved, JITTER, xtape), np.float64),
          orth_decoupled.kl_divergence(kernel, reference, JITTER, tape), RTOL)
    back = state_to(moved, lambda a: np.array(be.to_numpy(a), dtype=np.float64))
    for name in ("inducing", "q_mean", "q_sqrt", "orthogonal", "orth_mean"):
        assert isinstance(getattr(back, name), np.ndarray)
        np.testing.assert_array_equal(getattr(back, name), getattr(state, name))
    assert orth_decoupled.kl_divergence(kernel, back, JITTER) == kl
