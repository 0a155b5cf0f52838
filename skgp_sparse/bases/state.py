"""The base of the bases' states: ``copy`` and ``drop_caches`` derived from the fields.

A basis's state is a dataclass of its variational parameters (arrays of one library, on
one device), the few settings that pickle with a fitted model, and caches of what can be
recomputed from the parameters. How each field is copied follows from what it holds, and
a cache is marked as one where it is declared (:func:`cache_field`), so that a field
added to a state is copied and dropped without a hand-written ``copy`` to update.
"""

import copy
import dataclasses

import numpy as np

from .. import backend as be
from ..linalg import copy_array
from ..outputs import IDENTITY

#: The key of a field's metadata that marks it as a cache ("kept" or "transient").
_CACHE = "skgp_sparse.cache"


def cache_field(transient=False, **field_options):
    """A dataclass field, default None, for what a state can recompute from its other fields.

    :meth:`VariationalState.drop_caches` forgets every cache. A kept cache
    (``transient=False``) is copied by :meth:`VariationalState.copy`: it still holds for
    the copied parameters. A transient one is neither copied nor pickled.

    Parameters
    ----------
    transient : bool, default=False
    **field_options
        Further arguments of :func:`dataclasses.field` (``repr``, ``compare``).
    """
    return dataclasses.field(default=None, metadata={_CACHE: "transient" if transient else "kept"}, **field_options)


class VariationalState:
    """The base class of the bases' states (each a dataclass).

    A state's arrays are numpy arrays, or all arrays of one other namespace on one device
    (a basis's ``init_state`` keeps float32 inducing inputs of another library in float32;
    numpy states are float64).

    :meth:`copy` copies each field by what it holds: an array in its library and on its
    device, a nested state by its own ``copy``, a numpy Generator with its position (the
    copy draws what the original would); immutable values (numbers, frozen settings) are
    shared, and transient caches start empty.
    """

    def copy(self):
        """An independent copy: writing into one's arrays leaves the other's alone."""
        values = {}
        for f in dataclasses.fields(self):
            if f.init and f.metadata.get(_CACHE) != "transient":
                values[f.name] = _copied(getattr(self, f.name), f.name)
        return type(self)(**values)

    def output_map(self):
        """How the state's latents become the outputs (:mod:`skgp_sparse.outputs`): a
        basis's state is one latent group whose latents are the outputs."""
        return IDENTITY

    def drop_caches(self):
        """Forget what can be recomputed (before a fitted model is stored and pickled)."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.metadata.get(_CACHE) is not None:
                setattr(self, f.name, None)
            elif isinstance(value, VariationalState):
                value.drop_caches()
            elif isinstance(value, tuple):
                for nested in value:
                    if isinstance(nested, VariationalState):
                        nested.drop_caches()

    def __getstate__(self):
        state = self.__dict__.copy()
        for f in dataclasses.fields(self):
            if f.metadata.get(_CACHE) == "transient":
                state[f.name] = None
        return state


def _copied(value, name):
    """An independent copy of the value of the state field ``name``."""
    if value is None:
        return None
    if isinstance(value, VariationalState):
        return value.copy()
    if isinstance(value, tuple):
        # Nested states in a fixed order (the latent groups of a multi-output state).
        return tuple(_copied(v, name) for v in value)
    if isinstance(value, np.random.Generator):
        return copy.deepcopy(value)
    if be.is_array(value):
        return copy_array(value)
    if _immutable(value):
        return value
    # A mutable value shared by a state and its copy would let one change the other.
    raise TypeError(f"no copy rule for the state field {name!r} of type {type(value).__name__}")


def _immutable(value):
    """Whether ``value`` can be shared by a state and its copy."""
    if isinstance(value, (bool, int, float, complex, str, np.generic)):
        return True
    return dataclasses.is_dataclass(value) and type(value).__dataclass_params__.frozen
