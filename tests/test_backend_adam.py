"""Adam on arrays of other libraries: the same steps as on numpy, moments where the parameter lives."""

import numpy as np
import pytest

from skgp_sparse import backend as be
from skgp_sparse.optim import Adam

from ._array_libs import Lib, close


@pytest.fixture(params=["strict_device1", "torch"])
def lib(request):
    return Lib(request.param)


def _problem(seed=0):
    rng = np.random.default_rng(seed)
    params = {"inducing": rng.standard_normal((5, 3)), "theta": rng.standard_normal(4)}
    grads = [{name: rng.standard_normal(value.shape) for name, value in params.items()} for _ in range(6)]
    return params, grads


def _run(params, grads, convert):
    adam = Adam(0.1, step_scales={"inducing": np.array([0.5, 2.0, 1.0])})
    bounds = {"theta": (np.full(4, -0.3), 0.4)}
    current = {"inducing": convert(params["inducing"]), "theta": params["theta"]}
    for step, g in enumerate(grads):
        scales = {"inducing": 0.0} if step < 2 else {"inducing": 0.1}
        current = adam.step(current, {"inducing": convert(g["inducing"]), "theta": g["theta"]}, bounds, scales)
    return current


def test_adam_on_device_parameters_matches_numpy(lib):
    """Inducing inputs in another library (with host step scales), theta on the host."""
    params, grads = _problem()
    reference = _run(params, grads, lambda a: a)
    moved = _run(params, grads, lib)
    close(lib.check(moved["inducing"], np.float64), reference["inducing"], 1e-15)
    assert isinstance(moved["theta"], np.ndarray)
    np.testing.assert_array_equal(moved["theta"], reference["theta"])


def test_bounds_hold_on_device(lib):
    adam = Adam(1.0)
    value = lib(np.zeros(3))
    out = adam.step({"z": value}, {"z": lib(np.array([1.0, -1.0, 1.0]))}, {"z": (np.array([-0.5, -0.5, -0.5]), 0.25)})
    np.testing.assert_allclose(be.to_numpy(lib.check(out["z"], np.float64)), [0.25, -0.5, 0.25])
