"""Scratch arrays of gdp.runtime's hand-written kernels, one set per thread, kept between calls
(a new 1 MB array a call cost its page faults every time)."""

from __future__ import annotations

import threading

import numpy as np

_workspace = threading.local()


# Where scratch arrays start: a cache line, so that a kernel's rows of whole 64-byte vectors
# are stored without splitting a line (a split store costs about two).
ALIGN = 64


def scratch(name: str, size: int, dtype) -> np.ndarray:
    """This thread's scratch array `name` of at least `size` values of `dtype`, its first
    `size`, starting at an ALIGN-byte boundary."""
    array = getattr(_workspace, name, None)
    if array is None or array.size < size or array.dtype != dtype:
        dtype = np.dtype(dtype)
        raw = np.empty(size * dtype.itemsize + ALIGN, np.uint8)
        skip = -raw.ctypes.data % ALIGN
        array = raw[skip : skip + size * dtype.itemsize].view(dtype)
        setattr(_workspace, name, array)
    return array[:size]
