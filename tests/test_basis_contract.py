"""The basis contract (skgp_sparse/bases/contract.py): every registered basis keeps it, a
basis that leaves out a required member is refused when its module is imported, and what a
basis may leave out has its default."""

import dataclasses
import importlib.util
import inspect
import pickle
import re
import sys

import numpy as np
import pytest

from skgp_sparse import SparseGPRegressor
from skgp_sparse.bases import BASES, ORTHOGONAL_BASES, Basis, VariationalState, as_basis, coupled, orth_decoupled
from skgp_sparse.elbo import VariationalModel

#: The members a basis must define (the abstract ones of Basis).
REQUIRED = ("name", "INDUCING_FIELDS", "ADAM_FIELDS", "VARIATIONAL_FIELDS", "init_state", "marginals",
            "kl_divergence", "backward", "natural_step", "make_predictor")


def _members(basis_class, leave_out=()):
    """The class body of a basis defining what ``basis_class`` defines, but ``leave_out``."""
    return {name: value for name, value in vars(basis_class).items()
            if not name.startswith("_") and name not in leave_out}


def test_the_required_members_are_the_abstract_ones():
    assert Basis.__abstractmethods__ == frozenset(REQUIRED)


@pytest.mark.parametrize("name", list(BASES))
def test_every_registered_basis_keeps_the_contract(name):
    basis = BASES[name]
    assert isinstance(basis, Basis) and not inspect.isabstract(type(basis))
    assert basis.name == name
    module = sys.modules[type(basis).__module__]
    assert module.BASIS is basis and as_basis(module) is basis and as_basis(name) is basis and as_basis(basis) is basis
    # Its members are its module's functions and field tuples (members=globals()).
    for member in ("INDUCING_FIELDS", "ADAM_FIELDS", "VARIATIONAL_FIELDS", "init_state", "marginals",
                   "kl_divergence", "backward", "natural_step", "make_predictor"):
        assert getattr(type(basis), member) is vars(module)[member], member
    # One instance per basis: a pickle refers to it.
    assert pickle.loads(pickle.dumps(basis)) is basis
    points = np.random.default_rng(0).normal(size=(7, 2))
    n_orthogonal = 3 if basis.ORTHOGONAL_SET else 0
    state = basis.init_state(points, n_outputs=2, n_covariances=1, n_orthogonal=n_orthogonal)
    assert isinstance(state, VariationalState) and dataclasses.is_dataclass(state)
    for field in basis.INDUCING_FIELDS + basis.ADAM_FIELDS + basis.VARIATIONAL_FIELDS + ("inducing", "q_mean"):
        assert hasattr(state, field), field
    if basis.ORTHOGONAL_SET:
        assert state.orthogonal.shape == (3, 2) and state.inducing.shape == (4, 2)
    else:
        with pytest.raises(ValueError, match="orthogonal"):
            basis.init_state(points, n_outputs=2, n_covariances=1, n_orthogonal=2)
    if name != "inverse_free":  # the only basis with diagnostics
        assert basis.diagnostics(None, state, 1e-6) == {}
    assert basis.has_collapsed_bound == (name == "coupled")
    assert basis.WHITENED_Q == (name == "coupled")
    # The shape it was made with, (P, C), read back from the state.
    assert basis.latent_shape(state) == (2, 1)
    assert basis.latent_shape(basis.init_state(points, n_outputs=3, n_covariances=3, n_orthogonal=n_orthogonal)) == (3, 3)


def test_orthogonal_bases_are_those_that_declare_a_second_set():
    assert ORTHOGONAL_BASES == ("orth_decoupled", "solve")


@pytest.mark.parametrize("member", REQUIRED)
def test_a_basis_without_a_required_member_is_refused(member):
    incomplete = type("Incomplete", (Basis,), _members(type(coupled.BASIS), leave_out=(member,)))
    with pytest.raises(TypeError, match=re.escape(member)):
        incomplete()


def test_a_basis_module_without_a_required_member_fails_at_import(tmp_path):
    source = (
        "from skgp_sparse.bases import coupled\n"
        "from skgp_sparse.bases.contract import Basis\n\n"
        "class NoKL(Basis):\n"
        "    name = 'no_kl'\n"
        "    INDUCING_FIELDS = ('inducing',)\n"
        "    ADAM_FIELDS = ()\n"
        "    VARIATIONAL_FIELDS = ('q_mean', 'q_sqrt')\n"
        "    init_state = staticmethod(coupled.init_state)\n"
        "    marginals = staticmethod(coupled.marginals)\n"
        "    backward = staticmethod(coupled.backward)\n"
        "    natural_step = staticmethod(coupled.natural_step)\n"
        "    make_predictor = staticmethod(coupled.make_predictor)\n\n"
        "BASIS = NoKL()\n"
    )
    path = tmp_path / "no_kl_basis.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("no_kl_basis", path)
    with pytest.raises(TypeError, match="kl_divergence"):
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


def test_members_from_a_namespace_take_the_contract_names_only():
    def marginals(kernel, X, state, jitter, need_grad=True):
        return "mine"

    namespace = dict(vars(coupled), marginals=marginals, helper=lambda: None, EXACT_NATURAL_STEP=False)

    class Taken(Basis, members=namespace):
        name = "taken"
        EXACT_NATURAL_STEP = True  # the class body wins over the namespace

    taken = Taken()
    assert taken.marginals(None, None, None, 0.0) == "mine"
    assert taken.backward is coupled.backward and taken.collapsed_bound is coupled.collapsed_bound
    assert taken.EXACT_NATURAL_STEP is True and not hasattr(taken, "helper")


def test_declarations_and_signatures_are_checked():
    members = _members(type(coupled.BASIS))
    with pytest.raises(TypeError, match="INDUCING_FIELDS must be a tuple"):
        type("Listed", (Basis,), dict(members, INDUCING_FIELDS=["inducing"]))()
    with pytest.raises(TypeError, match="EXACT_NATURAL_STEP must be a bool"):
        type("Flag", (Basis,), dict(members, EXACT_NATURAL_STEP=1))()
    with pytest.raises(TypeError, match=r"backward must take \(tape, state, d_mean, d_var, fields\)"):
        type("Short", (Basis,), dict(members, backward=staticmethod(lambda tape, state: None)))()


def test_what_a_basis_may_leave_out_has_its_default():
    minimal = type("Minimal", (Basis,), _members(type(coupled.BASIS), leave_out=(
        "EXACT_NATURAL_STEP", "CONJUGATE_NATURAL_STEP", "WHITENED_Q", "collapsed_bound")))()
    assert minimal.EXACT_NATURAL_STEP is False and minimal.CONJUGATE_NATURAL_STEP is False
    assert minimal.ORTHOGONAL_SET is False and minimal.WHITENED_Q is False
    assert minimal.latent_shape(coupled.init_state(np.zeros((4, 2)), n_outputs=3, n_covariances=1)) == (3, 1)
    assert minimal.init_options({"kl_columns": 5, "n_orthogonal": 3}, np.random.default_rng(0)) == {}
    assert minimal.diagnostics(None, None, 1e-6) == {}
    assert minimal.adam_field_scales(None, 0) is None
    assert minimal.has_collapsed_bound is False
    with pytest.raises(NotImplementedError, match="the coupled basis has no collapsed bound"):
        minimal.collapsed_bound(None, None, None, None, None, 1e-6)


def test_as_basis_refuses_what_is_not_a_basis():
    with pytest.raises(TypeError, match="not a basis"):
        as_basis("svgp")
    with pytest.raises(TypeError, match="not a basis"):
        as_basis(np)


def test_a_basis_without_an_adam_only_mode_says_so():
    members = _members(type(coupled.BASIS))
    natural_only = type("NaturalOnly", (Basis,), dict(members, name="natural_only", VARIATIONAL_FIELDS=()))()
    with pytest.raises(ValueError, match="^the natural_only basis has no Adam-only mode$"):
        VariationalModel(natural_only, None, None, None, 10, natural=False)


def test_orth_decoupled_declares_its_options():
    basis = BASES["orth_decoupled"]
    rng = np.random.default_rng(0)
    options = basis.init_options({"kl_columns": 7, "n_orthogonal": 4}, rng)
    assert options == {"kl_columns": 7, "seed": int(np.random.default_rng(0).integers(2**32))}
    # Without a gamma set no seed is drawn: the fit's generator keeps its stream.
    rng = np.random.default_rng(0)
    assert basis.init_options({"kl_columns": "auto", "n_orthogonal": 0}, rng) == {"kl_columns": "auto"}
    assert rng.integers(2**32) == np.random.default_rng(0).integers(2**32)
    for name in ("coupled", "solve", "inverse_free"):
        assert BASES[name].init_options({"kl_columns": 7, "n_orthogonal": 4}, rng) == {}
    assert orth_decoupled.init_options is type(basis).init_options


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_the_estimator_passes_the_basis_options():
    X = np.random.default_rng(0).normal(size=(60, 2))
    reg = SparseGPRegressor(basis="orth_decoupled", n_inducing=5, n_orthogonal=4, kl_columns=2, max_iter=1,
                            batch_size=20, random_state=0).fit(X, X[:, 0])
    assert reg.variational_state_.kl_columns == 2 and reg.variational_state_.column_rng is not None


def test_n_orthogonal_for_a_basis_without_a_second_set_is_refused_with_the_same_message():
    X = np.zeros((10, 2))
    message = ("n_orthogonal=3 is only used by the bases ['orth_decoupled', 'solve']; basis='coupled' has no "
               "orthogonal set, so leave n_orthogonal=0")
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        SparseGPRegressor(n_orthogonal=3).fit(X, X[:, 0])
