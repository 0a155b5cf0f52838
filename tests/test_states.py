"""The bases' states copy and drop their caches as the hand-written ``copy`` of each did.

Every state derives ``copy`` and ``drop_caches`` from its fields
(:class:`skgp_sparse.bases.state.VariationalState`). The references below are the
per-basis ``copy`` methods the states had before, written out field by field: the
derived copy must give the same values, share nothing mutable with the original, copy
the kept caches (precisions) and leave out the transient one (orth_decoupled's
a^T K_gg a), copy the column generator with its position and share the frozen settings.
"""

import copy
import dataclasses
import pickle

import numpy as np
import pytest

from skgp_sparse import backend as be
from skgp_sparse.bases import coupled, inverse_free, orth_decoupled, solve
from skgp_sparse.bases.state import VariationalState, cache_field
from skgp_sparse.kernels import compile_kernel
from sklearn.gaussian_process.kernels import RBF

from ._array_libs import Lib


def _random_factor(rng, c, m):
    return np.tril(rng.normal(size=(c, m, m))) + 3.0 * np.eye(m)


def coupled_state(rng, with_caches=True):
    state = coupled.init_state(rng.normal(size=(5, 2)), n_outputs=2, n_covariances=2)
    state.q_mean = rng.normal(size=state.q_mean.shape)
    state.q_sqrt = _random_factor(rng, 2, 5)
    if with_caches:
        state.precisions()
    return state


def solve_state(rng):
    state = solve.init_state(rng.normal(size=(7, 2)), n_outputs=1, n_covariances=1, n_orthogonal=3)
    state.q_mean_orthogonal = rng.normal(size=state.q_mean_orthogonal.shape)
    state.residual_jitter = 1e-7
    state.precision = rng.normal(size=state.q_sqrt.shape)
    state.precision_orthogonal = rng.normal(size=state.q_sqrt_orthogonal.shape)
    return state


def orth_state(rng):
    state = orth_decoupled.init_state(rng.normal(size=(9, 2)), n_outputs=1, n_covariances=1, n_orthogonal=4,
                                      kl_columns=2, seed=3)
    state.orth_mean = rng.normal(size=state.orth_mean.shape)
    state.column_rng.integers(10, size=5)  # a generator that has moved
    state.beta.precisions()
    state.quadratic_cache = (("key",), 1.5)
    return state


def inverse_free_state(rng):
    state = inverse_free.init_state(rng.normal(size=(5, 2)), n_outputs=1, n_covariances=2, t_max_iter=7)
    inverse_free.ensure_initialised(compile_kernel(RBF(1.0)), state)
    state.refine_t = True
    return state


# --- the hand-written copies the states had, as references ------------------------------
def _cp(a):
    return None if a is None else (a.copy() if isinstance(a, np.ndarray) else be.namespace(a).asarray(a, copy=True))


def old_coupled_copy(s):
    return coupled.CoupledState(_cp(s.inducing), _cp(s.q_mean), _cp(s.q_sqrt), _cp(s.precision))


def old_solve_copy(s):
    return solve.SolveState(
        _cp(s.inducing), _cp(s.orthogonal), _cp(s.q_mean), _cp(s.q_sqrt), _cp(s.q_mean_orthogonal),
        _cp(s.q_sqrt_orthogonal), s.residual_jitter, _cp(s.precision), _cp(s.precision_orthogonal),
    )


def old_orth_copy(s):
    return orth_decoupled.OrthState(old_coupled_copy(s.beta), _cp(s.orthogonal), _cp(s.orth_mean), s.kl_columns,
                                    copy.deepcopy(s.column_rng))


def old_inverse_free_copy(s):
    return inverse_free.InverseFreeState(_cp(s.inducing), _cp(s.q_mean), _cp(s.sigma_sqrt), _cp(s.t_sqrt),
                                         s.n_covariances, s.refine_t, s.settings)


CASES = {
    "coupled": (coupled_state, old_coupled_copy),
    "solve": (solve_state, old_solve_copy),
    "orth_decoupled": (orth_state, old_orth_copy),
    "inverse_free": (inverse_free_state, old_inverse_free_copy),
}


def _arrays(state, prefix=""):
    """(name, array) of every array field of ``state`` and of the states it nests."""
    for f in dataclasses.fields(state):
        value = getattr(state, f.name)
        if isinstance(value, VariationalState):
            yield from _arrays(value, f"{prefix}{f.name}.")
        elif isinstance(value, np.ndarray) or be.is_foreign(value):
            yield prefix + f.name, value


def _others(state, prefix=""):
    """(name, value) of every field that is neither an array nor a nested state."""
    for f in dataclasses.fields(state):
        value = getattr(state, f.name)
        if isinstance(value, VariationalState):
            yield from _others(value, f"{prefix}{f.name}.")
        elif not (isinstance(value, np.ndarray) or be.is_foreign(value)):
            yield prefix + f.name, value


@pytest.mark.parametrize("basis", list(CASES))
def test_copy_does_what_the_hand_written_copy_did(basis):
    make, old_copy = CASES[basis]
    state = make(np.random.default_rng(0))
    new, old = state.copy(), old_copy(state)
    assert type(new) is type(state)
    new_arrays, old_arrays = dict(_arrays(new)), dict(_arrays(old))
    assert new_arrays.keys() == old_arrays.keys() == dict(_arrays(state)).keys()
    originals = dict(_arrays(state))
    for name, value in new_arrays.items():
        np.testing.assert_array_equal(value, old_arrays[name])
        np.testing.assert_array_equal(value, originals[name])
        assert not np.shares_memory(value, originals[name]), name
    new_others, old_others = dict(_others(new)), dict(_others(old))
    assert new_others.keys() == old_others.keys()
    for name, value in new_others.items():
        expected = old_others[name]
        if isinstance(expected, np.random.Generator):
            # Copied with its position: a copy, not the original, drawing what the original would.
            original = dict(_others(state))[name]
            assert value is not original
            assert value.bit_generator.state == original.bit_generator.state
        elif dataclasses.is_dataclass(expected):
            assert value is expected  # frozen settings are shared, as before
        else:
            assert value == expected, name


@pytest.mark.parametrize("basis", list(CASES))
def test_a_copy_is_independent(basis):
    make, _ = CASES[basis]
    state = make(np.random.default_rng(1))
    before = {name: np.array(a) for name, a in _arrays(state)}
    copied = state.copy()
    for name, a in _arrays(copied):
        a[...] = -7.0
    for name, a in _arrays(state):
        np.testing.assert_array_equal(a, before[name])


def test_caches_on_copy_and_drop():
    rng = np.random.default_rng(2)
    state = coupled_state(rng)
    assert state.copy().precision is not None  # a kept cache: copied
    orth = orth_state(rng)
    copied = orth.copy()
    assert copied.quadratic_cache is None and orth.quadratic_cache is not None  # transient: left out
    assert copied.beta.precision is not None
    assert pickle.loads(pickle.dumps(orth)).quadratic_cache is None
    orth.drop_caches()
    assert orth.quadratic_cache is None and orth.beta.precision is None
    assert orth.orth_mean is not None and orth.column_rng is not None
    sol = solve_state(rng)
    sol.drop_caches()
    assert sol.precision is None and sol.precision_orthogonal is None and sol.residual_jitter == 1e-7
    free = inverse_free_state(rng)
    fields = {f.name: getattr(free, f.name) for f in dataclasses.fields(free)}
    free.drop_caches()  # nothing cached: every field stays
    assert all(getattr(free, name) is value for name, value in fields.items())


@pytest.mark.parametrize("lib_name", ["strict_device1", "torch"])
def test_copy_of_another_library_stays_there(lib_name):
    lib = Lib(lib_name)
    rng = np.random.default_rng(3)
    Z = rng.normal(size=(6, 2))
    for state in (coupled.init_state(lib(Z), 1, 2), solve.init_state(lib(Z), 1, 1, n_orthogonal=2),
                  orth_decoupled.init_state(lib(Z), 1, 1, n_orthogonal=2, kl_columns=1),
                  inverse_free.init_state(lib(Z), 1, 1)):
        copied = state.copy()
        for (name, a), (_, b) in zip(_arrays(copied), _arrays(state)):
            assert type(a) is type(b) and a is not b, name
            assert be.device_of(a) == be.device_of(b)
            np.testing.assert_array_equal(be.to_numpy(a), be.to_numpy(b))


def test_a_field_without_a_copy_rule_is_refused():
    @dataclasses.dataclass
    class Odd(VariationalState):
        values: list
        cached: object = cache_field()

    with pytest.raises(TypeError, match="no copy rule for the state field 'values'"):
        Odd([1.0]).copy()
