"""Scratch arrays of gdp.runtime's hand-written kernels, one set per thread, kept between calls
(a new 1 MB array a call cost its page faults every time), and their output arrays."""

from __future__ import annotations

import ctypes
import math
import threading

import numpy as np

from gdp.errors import InputError

_workspace = threading.local()


# Where scratch arrays and large outputs start: a cache line, so that a kernel's rows of whole
# 64-byte vectors are stored without splitting a line (a split store costs about two). numpy's
# own arrays start 16 bytes into one: a 1080p BGR2RGB into them took 0.39 ms, into an aligned
# one 0.33 (OpenCV 0.30-0.52 interleaved), a 4K one 1.56 ms against 1.21.
ALIGN = 64
# Outputs from this size on are aligned; a smaller one is new as numpy makes it (aligning costs
# about 1.5 us a call, a tenth of a 480p copy's time).
ALIGNED_FROM = 1 << 16


def empty(shape: tuple, dtype) -> np.ndarray:
    """A new C-contiguous array, starting at an ALIGN-byte boundary where it has ALIGNED_FROM
    bytes or more."""
    dtype = np.dtype(dtype)
    size = math.prod(shape) * dtype.itemsize  # np.prod of a tuple: 3 us, this 0.2
    if size < ALIGNED_FROM:
        return np.empty(shape, dtype)
    return _aligned(shape, dtype, size)


def aligned_empty(shape: tuple, dtype) -> np.ndarray:
    """A new C-contiguous array starting at an ALIGN-byte boundary, whatever its size (for a
    kernel that reads it in words)."""
    dtype = np.dtype(dtype)
    return _aligned(shape, dtype, math.prod(shape) * dtype.itemsize)


def _aligned(shape: tuple, dtype: np.dtype, size: int) -> np.ndarray:
    raw = np.empty(size + ALIGN, np.uint8)
    # the address without numpy's ctypes object (2 us): ctypes' view of the buffer (0.7)
    skip = -ctypes.addressof(ctypes.c_char.from_buffer(raw)) % ALIGN
    return np.ndarray(shape, dtype, raw, skip)  # a view of raw: raw lives as long as it


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


def output(out: np.ndarray | None, shape: tuple, dtype, what: str) -> np.ndarray:
    """A kernel's output array: `out` (the caller's, e.g. cv2's dst, written in place: a copy
    of a new result into it cost a 1080p threshold 6x its time, the result read back from the
    cores that wrote it) when given, C-contiguous, writable and of `shape` and `dtype`, else a
    new one (aligned: empty)."""
    if out is None:
        return empty(shape, dtype)
    fits = isinstance(out, np.ndarray) and out.shape == tuple(shape) and out.dtype == dtype
    if not (fits and out.flags.c_contiguous and out.flags.writeable):
        from gdp.runtime.tir_text import describe

        got = describe(out)
        raise InputError(
            f"{what}: expected out as a writable {np.dtype(dtype)}{list(shape)}, got {got}"
        )
    return out
