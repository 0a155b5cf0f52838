"""The training step keeps its checks on the device (issue 34).

On rows of a library other than numpy, :func:`skgp_sparse.optim.loop.train` reads nothing
of the device between two checks: Adam moves the hyperparameters there too, and each
check reads the interval's ELBO estimates, the stopping rule's hyperparameter gradients
and the status flags in one packed transfer. Watched here:

* on torch CPU tensors, under a dispatch mode that fails on any other read of a device
  value, on a data-dependent shape (``nonzero``, a boolean assignment) and on a copy of
  host data, after the first steps (which build caches); and a budget of M x M arrays a
  step;
* on ``array_api_strict``, with data-dependent shapes off and ``bool`` / ``float`` of an
  array refused after the first steps, so that it runs where torch is absent;
* the failure paths: a NaN at step s raises at the next check naming the epoch, with the
  model of step s - 1; a singular K(Z, Z) warns through the replay and gets more jitter;
  a clean run equals the careful path (every step checked at once) to rounding.
"""

import contextlib
import warnings

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF
from sklearn.gaussian_process.kernels import ConstantKernel as C

from skgp_sparse import backend
from skgp_sparse.bases import coupled
from skgp_sparse.elbo import VariationalModel
from skgp_sparse.kernels import compile_kernel
from skgp_sparse.likelihoods import GaussianLikelihood, NoiseParameter
from skgp_sparse.linalg import JitterWarning
from skgp_sparse.optim import Adam, NaturalStepSchedule, loop
from skgp_sparse.optim.loop import NonFiniteELBOError, train
from skgp_sparse.optim.stopping import StoppingRule

from ._array_libs import Lib, StrictArray, require_gpu

#: Rows, features, inducing inputs, rows of a step: M differs from every other size, so
#: that an (M, M) array is one of the step's M x M matrices.
N, D, M, B = 600, 3, 24, 100
#: Steps an epoch.
STEPS = N // B
#: Steps before the watch starts (the first ones build caches and copy settings once).
FIRST_STEPS = 3
#: M x M arrays a step may build on the deferred path (coupled basis, Gaussian
#: likelihood, folded form, Adam on the inducing inputs), views excepted: measured 65.7
#: here with the checkpoints' copies; the same step built 95 before issue 34's changes.
MM_BUDGET = 68


def _rows():
    rng = np.random.default_rng(0)
    X = rng.uniform(-2.0, 2.0, size=(N, D))
    y = np.sin(X.sum(axis=1)) + 0.1 * rng.standard_normal(N)
    return X, y.reshape(-1, 1)


def make_model(lib, *, learn_hyperparameters=True, length_scale=1.0, jitter=1e-6):
    """A coupled model on ``lib``'s arrays whose inducing inputs sit on training rows
    (so that the refinement of near-coincident pairs is in play from the first step)."""
    X, _ = _rows()
    Z = X[np.random.default_rng(1).choice(N, M, replace=False)]
    kernel = compile_kernel(C(1.0) * RBF(length_scale))
    noise = NoiseParameter(kernel, 0.1, (np.log(1e-6), np.log(1e3)))
    state = coupled.init_state(lib(Z), n_outputs=1, n_covariances=1)
    return VariationalModel(coupled, kernel, GaussianLikelihood(0.1), state, N, noise=noise, jitter=jitter,
                            learn_hyperparameters=learn_hyperparameters)


def epoch_batches(lib, nan_at_step=None, epochs=3):
    """``batches(rng)`` of :func:`train`: the same minibatches each epoch (made on the
    device beforehand, as a data loader would), with a NaN target in step ``nan_at_step``
    (counted from 1 over the whole fit)."""
    X, Y = _rows()
    steps = []
    for step in range(1, epochs * STEPS + 1):
        k = (step - 1) % STEPS
        yb = Y[k * B : (k + 1) * B].copy()
        if step == nan_at_step:
            yb[0, 0] = np.nan
        steps.append((lib(X[k * B : (k + 1) * B]), lib(yb)))
    epoch = [0]

    def batches(rng):
        epoch[0] += 1
        yield from steps[(epoch[0] - 1) * STEPS : epoch[0] * STEPS]

    return batches


def fit(model, batches, epochs, check_every=loop.CHECK_EVERY, period_steps=4, monitor_rows=None, stopping=None):
    """Train with a stopping rule that never stops (tol = -inf), so every fit runs its
    epochs."""
    stopping = StoppingRule(-np.inf, 2, period_steps, STEPS) if stopping is None else stopping
    schedule = NaturalStepSchedule(0.1, conjugate=True, full_batch=False)
    return train(model, batches, max_iter=epochs, stopping=stopping, schedule=schedule,
                 adam=Adam(0.01), rng=np.random.default_rng(0), warmup_steps=1,
                 check_every=check_every, monitor_rows=monitor_rows)


@pytest.fixture(params=["torch", "strict"])
def lib(request):
    return Lib(request.param)


# --------------------------------------------------------------------------------------
# what a step may read: a watch over the training loop
# --------------------------------------------------------------------------------------
class PackedReads:
    """Counts the packed transfers (``backend.to_host``) of the steps and of the checks,
    and says whether one is under way (its reads are the allowed ones)."""

    def __init__(self, monkeypatch):
        self.in_transfer = False
        self.in_check = False
        self.from_steps = self.from_checks = 0
        self.steps = 0
        self.checks = 0
        self.deferred = []
        self._patch(monkeypatch)

    def _patch(self, monkeypatch):
        to_host, take_step = backend.to_host, loop.take_step
        watch = self

        def packed(*values):
            if self.armed:
                if self.in_check:
                    self.from_checks += 1
                else:
                    self.from_steps += 1
            self.in_transfer = True
            try:
                return to_host(*values)
            finally:
                self.in_transfer = False

        def step(*args, **kwargs):
            out = take_step(*args, **kwargs)
            self.steps += 1
            return out

        class Recorded(loop.DeferredSteps):
            """The loop's deferred steps, with their checks marked and kept for counting."""

            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                watch.deferred.append(self)

            def check(self, *args, **kwargs):
                watch.checks += watch.armed
                watch.in_check = True
                try:
                    return super().check(*args, **kwargs)
                finally:
                    watch.in_check = False

        monkeypatch.setattr(backend, "to_host", packed)
        monkeypatch.setattr(loop, "to_host", packed)
        monkeypatch.setattr(loop, "take_step", step)
        monkeypatch.setattr(loop, "DeferredSteps", Recorded)

    @property
    def replays(self):
        """Intervals the loop replayed on the careful path."""
        return sum(deferred.n_replays for deferred in self.deferred)

    @property
    def armed(self):
        return self.steps >= FIRST_STEPS

    def allows_a_read(self):
        return not self.armed or self.in_transfer


def torch_watch(packed):
    """A dispatch mode that fails on a read outside the packed transfers, a data-dependent
    shape or a copy of host data once ``packed`` is armed, and counts the M x M arrays
    made while it is (views of one excepted)."""
    torch = pytest.importorskip("torch")
    from torch.utils._python_dispatch import TorchDispatchMode

    reads = {"aten._local_scalar_dense.default", "aten.item.default", "aten.is_nonzero.default"}
    shapes = {"aten.nonzero.default", "aten.masked_select.default"}
    host_copies = {"aten.lift_fresh.default", "aten.lift_fresh_copy.default"}

    class Watch(TorchDispatchMode):
        mm_arrays = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = str(func)
            if packed.armed:
                if name in reads and not packed.allows_a_read():
                    raise AssertionError(f"a host read between checks: {name}")
                if name in shapes or (name.startswith("aten.index_put") and any(
                        isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1] or ())):
                    raise AssertionError(f"a data-dependent shape between checks: {name}")
                if name in host_copies:
                    raise AssertionError(f"a copy of host data between checks: {name}")
            out = func(*args, **(kwargs or {}))
            if (packed.armed and isinstance(out, torch.Tensor) and tuple(out.shape[-2:]) == (M, M)
                    and not func.is_view):
                Watch.mm_arrays += 1
            return out

    return Watch()


@contextlib.contextmanager
def strict_watch(packed, monkeypatch):
    """array_api_strict with data-dependent shapes off, and ``bool`` / ``float`` / ``int``
    of an array refused outside the packed transfers once ``packed`` is armed."""
    import array_api_strict

    for name in ("__bool__", "__float__", "__int__"):
        original = getattr(StrictArray, name)

        def refused(self, _original=original, _name=name):
            if not packed.allows_a_read():
                raise AssertionError(f"{_name} of an array between checks")
            return _original(self)

        monkeypatch.setattr(StrictArray, name, refused)
    with array_api_strict.ArrayAPIStrictFlags(data_dependent_shapes=False):
        yield


def watched_fit(lib, monkeypatch, **model_options):
    """Two epochs of a model on ``lib`` under its watch; the packed-read counts and the
    watch (torch: with its count of M x M arrays)."""
    packed = PackedReads(monkeypatch)
    model = make_model(lib, **model_options)
    batches = epoch_batches(lib)
    if lib.name == "torch":
        watch = torch_watch(packed)
        with watch:
            history = fit(model, batches, epochs=2)
    else:
        watch = None
        with strict_watch(packed, monkeypatch):
            history = fit(model, batches, epochs=2)
    assert history.n_steps == 2 * STEPS
    return packed, watch


def test_fixed_hyperparameters_read_the_device_once_per_check(lib, monkeypatch):
    """With the hyperparameters fixed, a step reads nothing: the only transfers are the
    checks' (one each), and no interval was replayed."""
    packed, _ = watched_fit(lib, monkeypatch, learn_hyperparameters=False)
    assert packed.replays == 0
    assert packed.from_steps == 0
    assert packed.checks > 0 and packed.from_checks == packed.checks


@pytest.mark.parametrize("length_scale", [1.0, [1.0, 0.7, 1.3]], ids=["isotropic", "ard"])
def test_learned_hyperparameters_stay_on_the_device_between_checks(lib, monkeypatch, length_scale):
    """Adam moves learned hyperparameters on the device: a step reads nothing and copies
    nothing of the host (a vector length scale included), and the stopping rule's
    gradients travel in the checks' transfers."""
    packed, _ = watched_fit(lib, monkeypatch, length_scale=length_scale)
    assert packed.replays == 0
    assert packed.from_steps == 0
    assert packed.checks > 0 and packed.from_checks == packed.checks


def _monitor_rows(lib):
    X, Y = _rows()
    return lib(X[::3]), lib(Y[::3])


def test_the_monitor_is_read_with_the_checks(lib, monkeypatch):
    """The stopping rule's monitor (the ELBO on fixed rows at each period's end) is
    evaluated with its checks deferred and read in the check's transfer: a step still reads
    nothing, and the periods' figures are the careful path's."""
    careful = StoppingRule(-np.inf, 2, 4, STEPS)
    fit(make_model(lib), epoch_batches(lib), epochs=2, check_every=None, monitor_rows=_monitor_rows(lib),
        stopping=careful)
    packed = PackedReads(monkeypatch)
    model = make_model(lib)
    stopping = StoppingRule(-np.inf, 2, 4, STEPS)
    watch = torch_watch(packed) if lib.name == "torch" else strict_watch(packed, monkeypatch)
    with watch:
        fit(model, epoch_batches(lib), epochs=2, monitor_rows=_monitor_rows(lib), stopping=stopping)
    assert packed.replays == 0 and packed.from_steps == 0
    assert len(stopping.period_means) == len(careful.period_means) == 2
    np.testing.assert_allclose(stopping.period_means, careful.period_means, rtol=1e-10)


def test_the_hyperparameters_come_back_to_the_host_after_the_loop(lib):
    """After the loop the kernel, the noise and Adam's moments are host values again (the
    fitted estimator pickles and predicts anywhere), and they moved during it."""
    model = make_model(lib, length_scale=[1.0, 0.7, 1.3])
    theta_before = model.kernel.theta
    adam = Adam(0.01)
    stopping = StoppingRule(-np.inf, 2, 4, STEPS)
    train(model, epoch_batches(lib), max_iter=1, stopping=stopping,
          schedule=NaturalStepSchedule(0.1, conjugate=True, full_batch=False), adam=adam,
          rng=np.random.default_rng(0), warmup_steps=1)
    assert isinstance(model.kernel.held_theta, np.ndarray)
    assert isinstance(model.noise.log_value, float)
    assert isinstance(model.likelihood.noise_variance, float)
    assert all(isinstance(adam._m[name], np.ndarray) for name in ("theta", "log_noise"))
    assert not np.allclose(model.kernel.theta, theta_before)
    assert len(stopping.period_gradients) > 0


def test_a_step_builds_at_most_its_budget_of_m_by_m_arrays(monkeypatch):
    packed, watch = watched_fit(Lib("torch"), monkeypatch)
    per_step = watch.mm_arrays / (2 * STEPS - FIRST_STEPS)
    assert 0 < per_step <= MM_BUDGET, per_step


# --------------------------------------------------------------------------------------
# failure paths
# --------------------------------------------------------------------------------------
def _state_arrays(model):
    state = model.state
    return [backend.to_numpy(a) for a in (state.inducing, state.q_mean, state.q_sqrt)] + [model.kernel.theta,
                                                                                            model.noise.log_value]


def test_a_nan_raises_at_the_next_check_naming_its_epoch_with_the_model_before_it(lib, monkeypatch):
    nan_at = STEPS + 2  # the second step of epoch 2
    packed = PackedReads(monkeypatch)
    model = make_model(lib)
    with pytest.raises(NonFiniteELBOError, match="at epoch 2"):
        fit(model, epoch_batches(lib, nan_at_step=nan_at), epochs=3, period_steps=100)
    # Reported at the next check (the epoch's end), after a replay of the steps since the
    # last one (the first epoch's end): all of epoch 2's steps, then its first one again.
    assert packed.replays == 1
    assert packed.steps == STEPS + STEPS + (nan_at - STEPS - 1)
    reference = make_model(lib)
    fit(reference, _first_steps(epoch_batches(lib), nan_at - 1), epochs=2, check_every=None)
    for got, want in zip(_state_arrays(model), _state_arrays(reference)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def _first_steps(batches, n_steps):
    """``batches`` cut after ``n_steps`` steps over the fit."""
    taken = [0]

    def cut(rng):
        for batch in batches(rng):
            if taken[0] == n_steps:
                return
            taken[0] += 1
            yield batch

    return cut


def test_a_singular_kzz_warns_through_the_replay_and_gets_more_jitter(lib, monkeypatch):
    """Nearly coincident inducing inputs under a long length scale and no jitter: the
    factorisation fails on the device, the interval is replayed, and the careful path
    warns and keeps the jitter that worked, as a step checked at once does."""
    packed = PackedReads(monkeypatch)
    model = make_model(lib, length_scale=1000.0, jitter=0.0)
    with pytest.warns(JitterWarning, match="K\\(Z, Z\\)"):
        fit(model, epoch_batches(lib), epochs=1)
    assert packed.replays >= 1
    assert model.jitter > 0.0
    careful = make_model(lib, length_scale=1000.0, jitter=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JitterWarning)
        fit(careful, epoch_batches(lib), epochs=1, check_every=None)
    assert model.jitter == careful.jitter


def test_a_persistent_condition_backs_off_to_the_careful_path(lib, monkeypatch):
    """K(Z, Z) under a long length scale stays too ill-conditioned to fold: every deferred
    interval raises its flag. After each replay the loop runs on the careful path for a
    doubling span, so that 36 steps (intervals of at most 5) cost three replays, not one
    per interval, and the fit is the careful path's."""
    packed = PackedReads(monkeypatch)
    model = make_model(lib, length_scale=1000.0, jitter=0.0)
    careful = make_model(lib, length_scale=1000.0, jitter=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JitterWarning)
        fit(model, epoch_batches(lib, epochs=6), epochs=6)
        fit(careful, epoch_batches(lib, epochs=6), epochs=6, check_every=None)
    assert 1 <= packed.replays <= 3
    for got, want in zip(_state_arrays(model), _state_arrays(careful)):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_a_failed_factorisation_is_noted_not_raised(lib):
    """Within deferred checks a factorisation reads nothing: an indefinite matrix (or one
    with a NaN) raises the flag instead of CholeskyError; a positive definite one does
    not, and its factor is the careful path's."""
    from skgp_sparse.linalg import StatusFlags, deferred_checks, jittered_cholesky

    rng = np.random.default_rng(3)
    root = rng.standard_normal((M, M))
    definite = root @ root.T + M * np.eye(M)
    indefinite = definite - 2 * M * np.eye(M)
    with_nan = definite.copy()
    with_nan[3, 1] = with_nan[1, 3] = np.nan
    for matrix, fails in ((definite, False), (indefinite, True), (with_nan, True)):
        flags = StatusFlags()
        with deferred_checks(flags):
            low, _ = jittered_cholesky(lib(matrix), jitter=0.0)
        assert bool(flags.take()) is fails
        if not fails:
            np.testing.assert_allclose(backend.to_numpy(low), np.linalg.cholesky(definite), rtol=1e-12)


def test_a_clean_run_equals_the_careful_path(lib):
    deferred, careful = make_model(lib), make_model(lib)
    history = fit(deferred, epoch_batches(lib), epochs=2)
    reference = fit(careful, epoch_batches(lib), epochs=2, check_every=None)
    np.testing.assert_allclose(history.elbo, reference.elbo, rtol=1e-10)
    for got, want in zip(_state_arrays(deferred), _state_arrays(careful)):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


# --------------------------------------------------------------------------------------
# the refinement of near-coincident pairs in shapes known in advance
# --------------------------------------------------------------------------------------
def _points_on_each_other(lib):
    """Inducing inputs of which some sit on rows of the batch (each pair alone)."""
    rng = np.random.default_rng(2)
    A = rng.uniform(-2.0, 2.0, size=(M, D))
    Bm = rng.uniform(-2.0, 2.0, size=(B, D))
    Bm[[3, 40, 77]] = A[[5, 0, 11]]
    return A, Bm


def _kernel_matrices(lib, A, Bm, deferred):
    """K(A, B) and K([A; B]) of a compiled RBF on ``lib``'s arrays (its Array API path),
    with the checks deferred or not, and the flags raised (None when not deferred)."""
    from skgp_sparse.linalg import StatusFlags, deferred_checks

    kernel = compile_kernel(RBF(1.0))
    a, b = lib(A), lib(Bm)
    xp = backend.namespace(a)
    flags = StatusFlags()
    with deferred_checks(flags) if deferred else contextlib.nullcontext():
        cross = kernel(a, b)
        gram = kernel(xp.concat([a, b], axis=0))
    raised = flags.take()
    return backend.to_numpy(cross), backend.to_numpy(gram), None if raised is None else bool(raised)


def test_the_devices_refinement_equals_the_careful_one(lib):
    """Each pair of points on each other is alone in its row and column: refined on the device
    to the careful path's values exactly, with no flag raised."""
    A, Bm = _points_on_each_other(lib)
    cross, gram, _ = _kernel_matrices(lib, A, Bm, deferred=False)
    cross_d, gram_d, raised = _kernel_matrices(lib, A, Bm, deferred=True)
    assert raised is False
    np.testing.assert_array_equal(cross_d, cross)
    np.testing.assert_array_equal(gram_d, gram)
    # Refined to an exact zero distance: k = 1.
    assert cross[5, 3] == 1.0 and cross[0, 40] == 1.0


def test_a_cluster_of_coincident_points_raises_the_flag(lib):
    """Two inducing inputs on two rows, all four at one point: a flagged pair that is the
    one refined of neither its row nor its column is left to the careful path (the flag)."""
    A, Bm = _points_on_each_other(lib)
    A[1] = A[0]
    Bm[41] = A[0]
    _, _, raised = _kernel_matrices(lib, A, Bm, deferred=True)
    assert raised is True


@pytest.mark.parametrize("likelihood", ["robustmax", "softmax"])
def test_invalid_class_labels_raise_the_flag_within_deferred_checks(lib, likelihood):
    """A multi-class likelihood's label check reads nothing within deferred checks: an
    invalid label raises the flag (the careful path's replay raises the error), a valid one
    does not; outside them it raises at once."""
    from skgp_sparse.likelihoods import RobustMaxLikelihood, SoftmaxLikelihood
    from skgp_sparse.linalg import StatusFlags, deferred_checks

    lik = RobustMaxLikelihood(3) if likelihood == "robustmax" else SoftmaxLikelihood(3)
    mean, var = lib(np.zeros((4, 3))), lib(np.ones((4, 3)))
    for labels, invalid in (([0, 1, 2, 1], False), ([0, 1, 3, 1], True), ([0, 0.5, 2, 1], True)):
        y = lib(np.array(labels, dtype=np.float64).reshape(-1, 1))
        flags = StatusFlags()
        with deferred_checks(flags):
            lik.expected_log_lik(y, mean, var)
        assert bool(flags.take()) is invalid
        if invalid:
            with pytest.raises(ValueError, match="labels must be integers"):
                lik.expected_log_lik(y, mean, var)


# --------------------------------------------------------------------------------------
# on a CUDA device: synchronisations, not just reads
# --------------------------------------------------------------------------------------
class _CudaTorch:
    """Puts numpy test data on torch's CUDA device (as :class:`Lib` does elsewhere)."""

    name = "torch_cuda"

    def __init__(self, torch):
        self.torch = torch

    def __call__(self, x):
        return self.torch.asarray(np.array(x), device="cuda")


@pytest.mark.gpu
def test_a_cuda_step_synchronises_only_in_the_checks_transfers(monkeypatch):
    """The same loop on a CUDA device under ``torch.cuda.set_sync_debug_mode("error")``
    after the first steps: any synchronisation of the host with the device raises, except
    within the checks' packed transfers (where the mode is lifted). Learned
    hyperparameters, an ARD length scale and the stopping rule's monitor included."""
    torch = require_gpu("torch")
    lib = _CudaTorch(torch)
    packed = PackedReads(monkeypatch)
    to_host, take_step = backend.to_host, loop.take_step

    def lifted(*values):
        torch.cuda.set_sync_debug_mode("default")
        try:
            return to_host(*values)
        finally:
            if packed.armed:
                torch.cuda.set_sync_debug_mode("error")

    def step(*args, **kwargs):
        out = take_step(*args, **kwargs)
        if packed.armed:
            torch.cuda.set_sync_debug_mode("error")
        return out

    monkeypatch.setattr(loop, "to_host", lifted)
    monkeypatch.setattr(loop, "take_step", step)
    model = make_model(lib, length_scale=[1.0, 0.7, 1.3])
    try:
        history = fit(model, epoch_batches(lib), epochs=2, monitor_rows=_monitor_rows(lib))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert history.n_steps == 2 * STEPS
    assert packed.replays == 0
