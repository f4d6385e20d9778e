"""Process-wide tuning of the C allocator for the columnar hot paths.

Every block of events passes through a few dozen numpy temporaries of
0.1–1 MB each. glibc's ``malloc`` serves blocks that size with ``mmap`` and
hands the pages back on ``free`` (or trims the heap top), so each temporary
pays page faults on first touch: in a virtual machine that was measured at
about 7 % of a replay's time (``benchmarks/bench_replay.py``; a 100 000-row
user-id hash took 100 ns/row with the defaults and 25 ns/row without the
faults).

:func:`tune_allocator` keeps such blocks on the heap and the heap's freed top
in the process (``mallopt``). Memory is still bounded by what the process
uses at its peak (the open timesteps and the reader's blocks); it is just not
returned to the operating system between blocks. ``dpstream`` calls it once
at start-up; elsewhere (other libcs, other systems) it does nothing.
When glibc's own settings are in the environment (``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_TOP_PAD_`` or ``glibc.malloc`` tunables),
they win: an operator who tuned the allocator keeps their choice.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from dataclasses import dataclass

__all__ = ["AllocatorTuning", "tune_allocator"]

_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3
_ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")


@dataclass(frozen=True)
class AllocatorTuning:
    """The settings applied, in bytes (what :func:`tune_allocator` did, for logs and tests)."""

    applied: bool
    mmap_threshold: int = 0
    trim_threshold: int = 0
    top_pad: int = 0
    reason: str = ""


def tune_allocator(
    *,
    mmap_threshold: int = 32 << 20,
    trim_threshold: int = 256 << 20,
    top_pad: int = 64 << 20,
) -> AllocatorTuning:
    """Ask glibc to serve blocks below ``mmap_threshold`` bytes from the heap and keep freed heap.

    Args:
        mmap_threshold: blocks at least this large still get their own
            mapping (glibc's own ceiling for its adaptive threshold is 32 MiB).
        trim_threshold: free memory at the heap top kept before trimming.
        top_pad: extra bytes requested whenever the heap grows.

    Returns what was done; never raises (no glibc → ``applied=False``).
    """
    if not sys.platform.startswith("linux"):
        return AllocatorTuning(False, reason=f"not Linux ({sys.platform})")
    if any(k in os.environ for k in _ENVIRONMENT) or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        return AllocatorTuning(False, reason="the allocator is tuned by the environment; leaving it in charge")
    name = ctypes.util.find_library("c") or "libc.so.6"
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return AllocatorTuning(False, reason=f"{name} has no mallopt (not glibc)")
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = all(
        mallopt(param, value) == 1
        for param, value in ((_M_MMAP_THRESHOLD, mmap_threshold), (_M_TRIM_THRESHOLD, trim_threshold),
                             (_M_TOP_PAD, top_pad))
    )
    if not ok:
        return AllocatorTuning(False, reason="mallopt refused a setting")
    return AllocatorTuning(True, mmap_threshold, trim_threshold, top_pad)
