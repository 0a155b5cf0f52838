"""Variational families, one module each, behind one contract.

What a basis provides (its starting state, the latent marginals at a minibatch's rows, the
KL term, their reverse pass, the natural step, the fitted predictor, the state fields Adam
moves, and what it may add: options of its own, a second inducing set, diagnostics, a
collapsed bound, Adam rates per field) is written down once, as the abstract base class
:class:`~skgp_sparse.bases.contract.Basis`, whose docstrings are the contract. Each module
writes its maths as plain functions under the contract's names and ends with a small
subclass of it that takes them (``members=globals()``), and one instance, ``BASIS``; a
member left out fails when the module is imported. Its state is a dataclass deriving from
:class:`~skgp_sparse.bases.state.VariationalState`, which derives ``copy`` and
``drop_caches`` from the fields.

The ELBO, the optimisers and the estimators call a basis's members directly; what differs
between bases (which take ``n_orthogonal``, which options their ``init_state`` takes) is
asked of the basis, not listed elsewhere.
"""

from types import ModuleType

from . import coupled, inverse_free, orth_decoupled, solve
from .contract import Basis
from .state import VariationalState

#: Bases by the name used in ``basis=``.
BASES = {basis.name: basis for basis in (coupled.BASIS, orth_decoupled.BASIS, solve.BASIS, inverse_free.BASIS)}
#: The basis of the exact search that starts a fresh fit, whatever basis the fit trains:
#: on it the bound with q(u) optimal is Titsias' collapsed bound under a Gaussian likelihood
#: (see :meth:`skgp_sparse.elbo.VariationalModel.search_model`).
SEARCH_BASIS = coupled.BASIS
#: Names of the bases that use ``n_orthogonal`` (those that declare ``ORTHOGONAL_SET``).
ORTHOGONAL_BASES = tuple(name for name, basis in BASES.items() if basis.ORTHOGONAL_SET)


def as_basis(basis):
    """The :class:`~skgp_sparse.bases.contract.Basis` that ``basis`` stands for.

    Parameters
    ----------
    basis : Basis, str or module
        A basis itself, its name in :data:`BASES`, or the module that defines it (its
        ``BASIS``).

    Returns
    -------
    Basis
    """
    if isinstance(basis, Basis):
        return basis
    if isinstance(basis, str) and basis in BASES:
        return BASES[basis]
    if isinstance(basis, ModuleType) and isinstance(vars(basis).get("BASIS"), Basis):
        return basis.BASIS
    raise TypeError(f"not a basis: {basis!r}; give a Basis, one of the names {list(BASES)} or a basis module")


__all__ = [
    "BASES", "ORTHOGONAL_BASES", "SEARCH_BASIS", "Basis", "VariationalState", "as_basis", "coupled", "orth_decoupled", "solve",
    "inverse_free",
]
