"""The smallest and largest value of a uint8 or float32 array and where each first occurs, as
two hand-written TIR kernels for the host CPU: gdp.cv2's minMaxLoc, and normalize's NORM_MINMAX
and NORM_INF of uint8 images.

Why by hand: as a graph, the minimum, the maximum and the two ArgMin/ArgMax ran as four
reductions through the compiled program: minMaxLoc of a 1080p gray image took 6.2 ms against
OpenCV's 0.09, normalize of a 480p gray one 0.73 ms against 0.04. Here each strip of the array
runs in blocks of BLOCK vectors: a block's lane-wise minima and maxima, then each lane's running
extreme and the block where it was first reached (a strictly smaller value moves it, an equal
one does not); a second kernel picks the extremes and, among the lanes that hold one, the
first such block, which the host scans for the first position. A float32 NaN is
counted, and an array holding one has no extremes here: the caller decides what it means
(OpenCV's own answers for NaN differ by version).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from gdp.errors import InputError
from gdp.runtime.launch import run_serial, run_strips, strips_for
from gdp.runtime.tir_text import describe, indent

# Values a vector (64 bytes), by dtype.
LANES = {"uint8": 64, "float32": 16}
_NAMES = {np.dtype(name): name for name in LANES}  # dtype.name costs 3 us
# Vectors a block: a block's minima and maxima are plain vector minima and maxima (no
# positions: 2 instructions a vector), then each lane's running extreme and the block where it
# was first reached move; the host finds the position in the first such block (BLOCK vectors).
BLOCK = 256
# Values per strip at least (fewer strips for a small array), and strips at most.
STRIP_VALUES = 1 << 18
MAX_STRIPS = 16
# Positions are int32.
MAX_VALUES = (1 << 31) - 1

_NAN = 'nan[{lane}] = nan[{lane}] + T.Cast("int32", T.isnan(img[{e}]))'
# A value into the block's extremes of lane {lane}.
_BLOCK_UPDATE = """\
blo[{lane}] = T.Select(img[{e}] < blo[{lane}], img[{e}], blo[{lane}])
bhi[{lane}] = T.Select(img[{e}] > bhi[{lane}], img[{e}], bhi[{lane}])"""
# A block's extremes ({low}, {high}) into lane {lane}'s running ones: the block's index first,
# against the old.
_RUNNING_UPDATE = """\
ilo[{lane}] = T.Select({low} < lo[{lane}], {block}, ilo[{lane}])
lo[{lane}] = T.Select({low} < lo[{lane}], {low}, lo[{lane}])
ihi[{lane}] = T.Select({high} > hi[{lane}], {block}, ihi[{lane}])
hi[{lane}] = T.Select({high} > hi[{lane}], {high}, hi[{lane}])"""

_SOURCE = """
@T.prim_func
def {name}(
    img_handle: T.handle, extremes_handle: T.handle, blocks_handle: T.handle, strips: T.int32
):
    T.func_attr({{"global_symbol": "{name}", "tir.noalias": True}})
    n = T.int32()
    img = T.match_buffer(img_handle, (n,), "{dtype}", align=1)
    # each strip's lanes: their smallest values, then their largest; the blocks where each lane
    # first reached them, then its NaNs. _COMBINE combines them, a kernel of its own: a strip
    # loop that is its kernel's last statement runs on gdp.runtime._strips.
    extremes = T.match_buffer(extremes_handle, ({max_lanes} * 2,), "{dtype}", align=1)
    blocks = T.match_buffer(blocks_handle, ({max_lanes} * 3,), "int32", align=1)
    for s in T.parallel(strips):
        # A strip's buffers in "global" scope: TVM 0.27 puts a small one on the stack, where
        # LLVM keeps it in registers ("local" ones come from TVM's workspace, in memory: the
        # vector loop stored and reloaded them, 3x the time).
        lo = T.alloc_buffer(({lanes},), "{dtype}")
        hi = T.alloc_buffer(({lanes},), "{dtype}")
        blo = T.alloc_buffer(({lanes},), "{dtype}")
        bhi = T.alloc_buffer(({lanes},), "{dtype}")
        ilo = T.alloc_buffer(({lanes},), "int32")
        ihi = T.alloc_buffer(({lanes},), "int32")
        nan = T.alloc_buffer(({lanes},), "int32")
        # the tail's NaNs apart: a buffer indexed by a variable stays in memory
        tail_nan = T.alloc_buffer((1,), "int32")
        tail_nan[0] = 0
        # strip s: vectors [n // strips * s // L, n // strips * (s + 1) // L), at least one,
        # in blocks of {block}; its first vector starts every lane (in block 0)
        for i in T.vectorized({lanes}):
            lo[i] = img[n // strips * s // {lanes} * {lanes} + i]
            hi[i] = img[n // strips * s // {lanes} * {lanes} + i]
            ilo[i] = 0
            ihi[i] = 0
            nan[i] = 0
        for b in range(
            (n // strips * (s + 1) // {lanes} - n // strips * s // {lanes} + {block} - 1) // {block}
        ):
            for i in T.vectorized({lanes}):
                blo[i] = img[(n // strips * s // {lanes} + b * {block}) * {lanes} + i]
                bhi[i] = img[(n // strips * s // {lanes} + b * {block}) * {lanes} + i]
            for k in range(
                T.min(
                    {block},
                    n // strips * (s + 1) // {lanes} - n // strips * s // {lanes} - b * {block},
                )
            ):
                for i in T.vectorized({lanes}):
{vector}
            for i in T.vectorized({lanes}):
{running}
        if s == strips - 1:
            # the values past the last whole vector, each in the block its position falls in
            for e in range(n // strips * strips // {lanes} * {lanes}, n):
{tail}
        for i in T.vectorized({lanes}):
            extremes[s * {lanes} + i] = lo[i]
            extremes[{max_lanes} + s * {lanes} + i] = hi[i]
            blocks[s * {lanes} + i] = ilo[i]
            blocks[{max_lanes} + s * {lanes} + i] = ihi[i]
            blocks[{max_lanes} * 2 + s * {lanes} + i] = nan[i]
        blocks[{max_lanes} * 2 + s * {lanes}] = blocks[{max_lanes} * 2 + s * {lanes}] + tail_nan[0]
"""

# The strips' lanes in order: the extremes, and for each the first block's start among the
# lanes that hold it (a block's start: its strip's first position plus the block's).
_COMBINE = """
@T.prim_func
def {name}(
    extremes_handle: T.handle, blocks_handle: T.handle, result_handle: T.handle, n: T.int32,
    strips: T.int32
):
    T.func_attr({{"global_symbol": "{name}", "tir.noalias": True}})
    extremes = T.match_buffer(extremes_handle, ({max_lanes} * 2,), "{dtype}", align=1)
    blocks = T.match_buffer(blocks_handle, ({max_lanes} * 3,), "int32", align=1)
    # the smallest value, the largest, the first position of the blocks where each first
    # occurs, the NaNs
    result = T.match_buffer(result_handle, (5,), "float64", align=1)
    result[0] = T.Cast("float64", extremes[0])
    result[1] = T.Cast("float64", extremes[{max_lanes}])
    result[2] = T.Cast("float64", blocks[0] * {block_values})
    result[3] = T.Cast("float64", blocks[{max_lanes}] * {block_values})
    result[4] = T.float64(0)
    for j in range(strips * {lanes}):
        if T.Cast("float64", extremes[j]) < result[0]:
            result[0] = T.Cast("float64", extremes[j])
            result[2] = T.Cast("float64", {start} + blocks[j] * {block_values})
        elif T.Cast("float64", extremes[j]) == result[0]:
            result[2] = T.min(result[2], T.Cast("float64", {start} + blocks[j] * {block_values}))
        if T.Cast("float64", extremes[{max_lanes} + j]) > result[1]:
            result[1] = T.Cast("float64", extremes[{max_lanes} + j])
            result[3] = T.Cast("float64", {start} + blocks[{max_lanes} + j] * {block_values})
        elif T.Cast("float64", extremes[{max_lanes} + j]) == result[1]:
            result[3] = T.min(
                result[3], T.Cast("float64", {start} + blocks[{max_lanes} + j] * {block_values})
            )
        result[4] = result[4] + T.Cast("float64", blocks[{max_lanes} * 2 + j])
"""


@functools.cache
def source(dtype: str) -> tuple[str, str]:
    lanes = LANES[dtype]
    name = f"extrema_{dtype}_x{lanes}"
    e = f"(n // strips * s // {lanes} + b * {BLOCK} + k) * {lanes} + i"
    vector = _BLOCK_UPDATE.format(lane="i", e=e)
    tail_block = f"(e - n // strips * s // {lanes} * {lanes}) // {BLOCK * lanes}"
    tail = _RUNNING_UPDATE.format(
        lane=f"e % {lanes}", block=tail_block, low="img[e]", high="img[e]"
    )
    if dtype == "float32":  # a NaN compares false: it never moves an extreme, it is counted
        vector += "\n" + _NAN.format(lane="i", e=e)
        tail += "\n" + 'tail_nan[0] = tail_nan[0] + T.Cast("int32", T.isnan(img[e]))'
    text = _SOURCE.format(
        name=name,
        dtype=dtype,
        lanes=lanes,
        block=BLOCK,
        max_lanes=MAX_STRIPS * lanes,
        vector=indent(vector, 20),
        running=indent(
            _RUNNING_UPDATE.format(lane="i", block="b", low="blo[i]", high="bhi[i]"), 16
        ),
        tail=indent(tail, 16),
    )
    return name, text


@functools.cache
def combine_source(dtype: str) -> tuple[str, str]:
    lanes = LANES[dtype]
    name = f"extrema_combine_{dtype}_x{lanes}"
    text = _COMBINE.format(
        name=name,
        dtype=dtype,
        lanes=lanes,
        max_lanes=MAX_STRIPS * lanes,
        start=f"n // strips * (j // {lanes}) // {lanes} * {lanes}",
        block_values=BLOCK * lanes,
    )
    return name, text


class Extrema(NamedTuple):
    low: float | int  # the smallest value (NaN where nans)
    high: float | int  # the largest
    first_low: int  # the flat position of its first occurrence (-1 where nans)
    first_high: int
    nans: int  # the NaNs of a float32 array


def extrema(values: np.ndarray, positions: bool = True) -> Extrema:
    """The extremes of a non-empty uint8 or float32 array (any shape, read in C order) and the
    flat positions where they first occur (-1 without `positions`: the host's search for them
    cost normalize 20 us after a cache sweep)."""
    dtype = _NAMES.get(values.dtype) if isinstance(values, np.ndarray) else None
    if dtype is None or values.size == 0:
        raise InputError(
            f"extrema: expected a non-empty uint8 or float32 array, got {describe(values)}"
        )
    if values.size > MAX_VALUES:
        raise InputError(f"extrema: {values.size} values, more than the {MAX_VALUES} indexed")
    flat = np.ascontiguousarray(values).reshape(-1)
    lanes = LANES[dtype]
    n = flat.size
    if n < lanes:  # less than a vector: NumPy's argmin and argmax are first occurrences too
        nans = int(np.isnan(flat).sum()) if dtype == "float32" else 0
        if nans:
            return Extrema(float("nan"), float("nan"), -1, -1, nans)
        lo, hi = int(np.argmin(flat)), int(np.argmax(flat))
        return Extrema(flat[lo].item(), flat[hi].item(), lo, hi, 0)
    strips = strips_for(flat.nbytes, max(1, min(MAX_STRIPS, n // STRIP_VALUES)))
    extremes = np.empty(2 * MAX_STRIPS * lanes, flat.dtype)
    blocks = np.empty(3 * MAX_STRIPS * lanes, np.int32)
    result = np.empty(5, np.float64)
    run_strips(*source(dtype), flat, extremes, blocks, strips)
    run_serial(*combine_source(dtype), extremes, blocks, result, n, strips)
    low, high, low_block, high_block, nans = result.tolist()
    if nans:
        return Extrema(float("nan"), float("nan"), -1, -1, int(nans))
    kind = flat.dtype.type
    low, high = kind(low), kind(high)
    if not positions:
        return Extrema(low.item(), high.item(), -1, -1, 0)
    span = BLOCK * lanes
    first_low, first_high = (
        _first(flat, low, int(low_block), span),
        _first(flat, high, int(high_block), span),
    )
    return Extrema(low.item(), high.item(), first_low, first_high, 0)


def _first(flat: np.ndarray, value, start: int, span: int) -> int:
    """The first position of `value` in `flat`, in the block of `span` values from `start` on
    (the first block where a lane that holds it reached it: every position before it holds
    other values). A uint8 block's by memchr (bytes.find: 1 us, NumPy's compare and argmax
    over its 16 KB 4 us)."""
    block = flat[start : start + span]
    if flat.dtype == np.uint8:
        return start + block.tobytes().find(int(value))
    return start + int(np.argmax(block == value))
