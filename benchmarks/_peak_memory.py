"""Peak memory of a block of code, measured the same way for every library.

``tracemalloc`` would see numpy's buffers but not torch's (torch's CPU allocator does not
report to it), so it cannot compare our numpy fits with GPyTorch's. What every library
shares is the process's resident set, so this measures the growth of the PEAK RESIDENT SET
SIZE over the block: Linux keeps the high-water mark (``VmHWM`` in ``/proc/self/status``,
also ``ru_maxrss``), and writing ``5`` to ``/proc/self/clear_refs`` (Linux >= 4.0) resets it
to the current resident size. So ``peak_mib`` = high-water mark after the block minus
resident size at its start.

Where the reset is not allowed, the fallback is the ``ru_maxrss`` delta, which only sees
growth beyond the process's earlier peak (it can read 0 after a bigger earlier step); the
benchmark therefore runs every fit in a fresh process, where either way means the same.
Resident memory counts pages touched, so memory that an allocator kept from an earlier fit
in the same process is reused without showing up -- one more reason for fresh processes.
"""

from __future__ import annotations

import resource

__all__ = ["PeakRSS"]


def _status_kib(field):
    """A ``kB`` field of /proc/self/status (``VmRSS``, ``VmHWM``), or None off Linux."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_high_water_mark():
    """Reset the peak RSS to the current RSS; False where the kernel does not let us."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return _status_kib("VmHWM") is not None
    except OSError:
        return False


class PeakRSS:
    """Context manager: growth of the peak resident set size over the block, in MiB.

    After the block: ``peak_mib`` (float) and ``method`` (``"VmHWM reset"`` or
    ``"ru_maxrss delta"``, the fallback).
    """

    def __enter__(self):
        if _reset_high_water_mark():
            self.method = "VmHWM reset"
            self._start_kib = _status_kib("VmRSS")
        else:
            self.method = "ru_maxrss delta"
            self._start_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
        return self

    def __exit__(self, *exc):
        if self.method == "VmHWM reset":
            end_kib = _status_kib("VmHWM")
        else:
            end_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        self.peak_mib = max(end_kib - self._start_kib, 0) / 1024.0
        return False
