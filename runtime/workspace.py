"""Scratch arrays of gdp.runtime's hand-written kernels, one set per thread, kept between calls
(a new 1 MB array a call cost its page faults every time)."""

from __future__ import annotations

import threading

import numpy as np

_workspace = threading.local()


def scratch(name: str, size: int, dtype) -> np.ndarray:
    """This thread's scratch array `name` of at least `size` values of `dtype`, its first
    `size`."""
    array = getattr(_workspace, name, None)
    if array is None or array.size < size or array.dtype != dtype:
        array = np.empty(size, dtype)
        setattr(_workspace, name, array)
    return array[:size]
