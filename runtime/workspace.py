"""Scratch arrays of gdp.runtime's hand-written kernels, one set per thread, kept between calls
(a new 1 MB array a call cost its page faults every time), and their output arrays."""

from __future__ import annotations

import ctypes
import math
import threading
from sys import getrefcount

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


# Outputs of ALIGNED_FROM to MOST_KEPT bytes: the last KEPT made on a thread are kept, and one
# handed out again once nothing but the keeping holds it (the caller dropped that result: a
# loop that calls again has dropped the one before last). Making an aligned array is four
# NumPy and ctypes calls, 25-30 us on a 2-core VM right after a call that swept the caches
# (OpenCV's, a kernel's), where reusing one is a few lookups, and its pages are mapped and
# warm. At most KEPT * MOST_KEPT bytes a thread stay allocated (clear_outputs frees them).
KEPT = 4
MOST_KEPT = 1 << 24


def empty(shape: tuple, dtype) -> np.ndarray:
    """A C-contiguous array of `shape` and `dtype`, new to the caller (no other live reference
    to it or its memory), starting at an ALIGN-byte boundary where it has ALIGNED_FROM bytes or
    more."""
    dtype = np.dtype(dtype)
    size = math.prod(shape) * dtype.itemsize  # np.prod of a tuple: 3 us, this 0.2
    if size < ALIGNED_FROM:
        return np.empty(shape, dtype)
    if size > MOST_KEPT:
        return _aligned(shape, dtype, size)
    kept = getattr(_workspace, "outputs", None)
    if kept is None:
        kept = _workspace.outputs = []
    for array in kept:
        if (
            array.shape == shape
            and array.dtype == dtype
            and getrefcount(array) == _ONLY_KEPT
            and getrefcount(array.base) == _ONLY_VIEWED
        ):
            return array
    array = _aligned(shape, dtype, size)
    kept.append(array)
    if len(kept) > KEPT:
        del kept[0]
    return array


def clear_outputs() -> None:
    """Drop this thread's kept outputs (those the caller still holds stay the caller's)."""
    _workspace.outputs = []


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


def _free_counts() -> tuple[int, int]:
    """sys.getrefcount of a kept array nothing else holds, in a loop as empty's (the keeping
    list's, the loop's, the call's: 3 on CPython 3.11), and of the memory under it that no view
    holds (NumPy makes a view's base the array that owns the memory, not the kept one: 2).
    Measured, not assumed: on an interpreter that counted a loop's or a call's reference
    differently, fixed numbers could hand out an array its caller still holds."""
    kept = [_aligned((1,), np.dtype(np.uint8), ALIGNED_FROM)]
    counts = (0, 0)
    for array in kept:
        counts = getrefcount(array), getrefcount(array.base)
    return counts


_ONLY_KEPT, _ONLY_VIEWED = _free_counts()


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
