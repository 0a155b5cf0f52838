"""Test data in another array library: array_api_strict (on a chosen device) or PyTorch on the CPU;
and the check that a GPU library has a usable device.

Shared by the tests that run the package on arrays of libraries other than numpy.
"""

import numpy as np
import pytest

from skgp_sparse import backend as be

xs = pytest.importorskip("array_api_strict")
from array_api_strict._array_object import Array as StrictArray  # noqa: E402

#: The strict devices used: "device1" refuses every conversion to numpy; "no_float64" is a
#: device without float64, like some GPUs.
STRICT_DEVICES = {"strict_device1": "device1", "strict_no_float64": "no_float64"}


class Lib:
    """Puts numpy test data into one library and device."""

    def __init__(self, name):
        self.name = name
        if name == "torch":
            self.torch = pytest.importorskip("torch")
        self.device = xs.Device(STRICT_DEVICES[name]) if name in STRICT_DEVICES else None

    def __call__(self, x):
        x = np.asarray(x)
        if self.name == "torch":
            return self.torch.asarray(x.copy())
        return xs.asarray(x, device=self.device)

    @property
    def array_type(self):
        return self.torch.Tensor if self.name == "torch" else StrictArray

    def check(self, out, dtype):
        """``out`` is an array of this library, on its device, of numpy dtype ``dtype``."""
        assert type(out) is self.array_type, type(out)
        if self.device is not None:
            assert be.device_of(out) == self.device
        host = be.to_numpy(out)
        assert host.dtype == dtype, (host.dtype, dtype)
        return host


def require_gpu(name):
    """The module of GPU library ``name`` (``"cupy"`` or ``"torch"``) when it has a usable
    CUDA device; otherwise a pytest skip that says what is missing."""
    if name == "cupy":
        cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
        try:
            n_devices = cupy.cuda.runtime.getDeviceCount()
            # A device that is listed but unusable (driver mismatch) fails here.
            float(cupy.arange(3.0).sum())
        except Exception as exc:  # CUDARuntimeError and friends when there is no driver
            pytest.skip(f"CuPy is installed but has no usable CUDA device ({type(exc).__name__}: {exc})")
        if n_devices == 0:
            pytest.skip("CuPy is installed but sees no GPU")
        return cupy
    if name == "torch":
        torch = pytest.importorskip("torch", reason="PyTorch is not installed")
        if not torch.cuda.is_available():
            pytest.skip("PyTorch sees no CUDA device")
        return torch
    raise ValueError(name)


def close(actual, expected, rtol, scale=None):
    """Entrywise relative agreement with an absolute floor of ``rtol * scale``; the scale
    defaults to the largest finite entry of ``expected``. Infinite and NaN entries must
    match exactly."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(actual[~finite], expected[~finite])
    if scale is None:
        scale = np.max(np.abs(expected[finite]), initial=0.0)
    np.testing.assert_allclose(actual[finite], expected[finite], rtol=rtol, atol=rtol * scale + 1e-300)


#: numpy functions that would copy an array of another library to the host.
NUMPY_CONVERSIONS = ("asarray", "array", "asanyarray", "ascontiguousarray", "asfortranarray", "from_dlpack", "vstack")


def spy_on_numpy_conversions(monkeypatch):
    """Wrap numpy's conversion functions; the returned list records the name of every call
    whose first argument (or first element of a sequence argument) is a strict array."""
    calls = []
    for fn in NUMPY_CONVERSIONS:
        original = getattr(np, fn)

        def spy(*args, _original=original, _fn=fn, **kwargs):
            first = args[0] if args else None
            if isinstance(first, (list, tuple)) and first:
                first = first[0]
            if isinstance(first, StrictArray):
                calls.append(_fn)
            return _original(*args, **kwargs)

        monkeypatch.setattr(np, fn, spy)
    return calls
