"""Per-channel sums of a uint8 image's values and of their squares, exact, as one hand-written
TIR kernel for the host CPU: gdp.cv2's meanStdDev of uint8 images finishes them on the host with
gdp.ops' arithmetic. A second kernel (channel_sums, below) sums the values alone, for sumElems
and mean.

Why by hand: as a graph, each row is summed in int64, the rows in float64, and the call pays the
compiled program's fixed cost: at 1080p BGR it took 1.7-2.9 ms, OpenCV 1.7-2.0 ms. Here each
strip of the image accumulates LANES consecutive values as int32 vector lanes (lane i holds
channel i % C, LANES a multiple of C), squares in uint32, and adds them into int64 lanes every
FLUSH vectors, before either could overflow; the host adds the strips' lanes by channel.
"""

from __future__ import annotations

import functools

import numpy as np

from gdp.errors import InputError
from gdp.runtime.launch import run_strips, strips_for
from gdp.runtime.tir_text import describe

# Vectors between two flushes into int64: FLUSH * 255^2 < 2^32 (the squares, uint32).
FLUSH = 1 << 16
# Values per strip at least (fewer strips for a small image) and strips at most.
STRIP_VALUES = 1 << 18
MAX_STRIPS = 16
MAX_VALUES = (1 << 31) - 1

_SOURCE = """
@T.prim_func
def {name}(img_handle: T.handle, totals_handle: T.handle, strips: T.int32):
    T.func_attr({{"global_symbol": "{name}", "tir.noalias": True}})
    n = T.int32()
    m = T.int32()
    img = T.match_buffer(img_handle, (n,), "uint8", align=1)
    totals = T.match_buffer(totals_handle, (m,), "int64", align=8)
    for s in T.parallel(strips):
        sums = T.alloc_buffer(({lanes},), "int32", scope="local")
        squares = T.alloc_buffer(({lanes},), "uint32", scope="local")
        for i in range({lanes}):
            totals[s * {twice} + i] = T.int64(0)
            totals[s * {twice} + {lanes} + i] = T.int64(0)
        # strip s: vectors [first, last); the last strip also takes the values past them
        for c in range(
            (n // strips * (s + 1) // {lanes} - n // strips * s // {lanes} + {flush} - 1) // {flush}
        ):
            for i in T.vectorized({lanes}):
                sums[i] = 0
                squares[i] = T.uint32(0)
            for k in range(
                T.min(
                    n // strips * (s + 1) // {lanes},
                    n // strips * s // {lanes} + (c + 1) * {flush},
                )
                - (n // strips * s // {lanes} + c * {flush})
            ):
                for i in T.vectorized({lanes}):
                    sums[i] = sums[i] + T.Cast(
                        "int32", img[(n // strips * s // {lanes} + c * {flush} + k) * {lanes} + i]
                    )
                    squares[i] = squares[i] + T.Cast(
                        "uint32", img[(n // strips * s // {lanes} + c * {flush} + k) * {lanes} + i]
                    ) * T.Cast(
                        "uint32", img[(n // strips * s // {lanes} + c * {flush} + k) * {lanes} + i]
                    )
            for i in T.vectorized({lanes}):
                totals[s * {twice} + i] = totals[s * {twice} + i] + T.Cast("int64", sums[i])
                totals[s * {twice} + {lanes} + i] = totals[s * {twice} + {lanes} + i] + T.Cast(
                    "int64", squares[i]
                )
        if s == strips - 1:
            for e in range(n // strips * strips // {lanes} * {lanes}, n):
                totals[s * {twice} + e % {lanes}] = totals[s * {twice} + e % {lanes}] + T.Cast(
                    "int64", img[e]
                )
                totals[s * {twice} + {lanes} + e % {lanes}] = totals[
                    s * {twice} + {lanes} + e % {lanes}
                ] + T.Cast("int64", img[e]) * T.Cast("int64", img[e])
"""


def lanes(channels: int) -> int:
    """A vector's values: 64 bytes' worth, a multiple of the channel count."""
    return 48 if channels == 3 else 64


@functools.cache
def source(channels: int) -> tuple[str, str]:
    count = lanes(channels)
    name = f"moments_u8_x{count}"
    text = _SOURCE.format(name=name, lanes=count, twice=2 * count, flush=FLUSH)
    return name, text


def sums(image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sums of values, sums of squares) per channel of an (H, W) or (H, W, C) uint8 image,
    as int64 (C,) arrays."""
    if not (isinstance(image, np.ndarray) and image.dtype == np.uint8 and image.ndim in (2, 3)):
        raise InputError(
            f"moments: expected an (H, W) or (H, W, C) uint8 image, got {describe(image)}"
        )
    channels = 1 if image.ndim == 2 else int(image.shape[2])
    if image.size > MAX_VALUES:
        raise InputError(f"moments: {image.size} values, more than the {MAX_VALUES} indexed")
    count = lanes(channels)
    if count % channels:
        raise InputError(f"moments: {channels} channels do not divide a vector of {count}")
    if not image.size:
        return np.zeros(channels, np.int64), np.zeros(channels, np.int64)
    strips = strips_for(image.size, max(1, min(MAX_STRIPS, image.size // STRIP_VALUES)))
    totals = np.empty(strips * 2 * count, np.int64)
    name, text = source(channels)
    run_strips(name, text, np.ascontiguousarray(image).reshape(-1), totals, strips)
    by_channel = _by_channel(totals.reshape(strips, 2 * count), channels)
    return by_channel[: count // channels].sum(axis=0), by_channel[count // channels :].sum(axis=0)


# The sums alone (cv2.sumElems, cv2.mean): each 192-byte chunk of a strip is three 64-byte
# vectors added into three uint16 accumulators (192 lanes: lane i holds channel i % C for every
# C that divides 192, 1 to 4), added into the strip's int64 lanes every CHUNKS chunks, before a
# uint16 lane could overflow (CHUNKS * 255 < 2^16). Three 64-lane vectors rather than one of 48
# or 192 lanes: LLVM splits a vector of lanes not a power of two a lane at a time. The 1080p BGR
# sums took 0.46 ms with the squares (the kernel above), OpenCV's 0.25.
CHUNK = 192
CHUNKS = 256

_SUMS = """
@T.prim_func
def sums_u8(img_handle: T.handle, totals_handle: T.handle, strips: T.int32):
    T.func_attr({{"global_symbol": "sums_u8", "tir.noalias": True}})
    n = T.int32()
    m = T.int32()
    img = T.match_buffer(img_handle, (n,), "uint8", align=1)
    totals = T.match_buffer(totals_handle, (m,), "int64", align=8)
    for s in T.parallel(strips):
        # a stack array, kept in registers (scope "local" would be TVM's workspace memory)
        acc = T.alloc_buffer(({chunk},), "uint16")
        for i in range({chunk}):
            totals[s * {chunk} + i] = T.int64(0)
        # strip s: chunks [first, last); the last strip also takes the values past them
        for g in range(
            (n // strips * (s + 1) // {chunk} - n // strips * s // {chunk} + {chunks_less_one})
            // {chunks}
        ):
            for q, i in T.grid({vectors}, 64):
                acc[q * 64 + i] = T.uint16(0)
            for k in range(
                T.min(
                    n // strips * (s + 1) // {chunk},
                    n // strips * s // {chunk} + (g + 1) * {chunks},
                )
                - (n // strips * s // {chunk} + g * {chunks})
            ):
{adds}
            for q in range({vectors}):
                for i in T.vectorized(64):
                    totals[s * {chunk} + q * 64 + i] = totals[s * {chunk} + q * 64 + i] + T.Cast(
                        "int64", acc[q * 64 + i]
                    )
        if s == strips - 1:
            for e in range(n // strips * strips // {chunk} * {chunk}, n):
                totals[s * {chunk} + e % {chunk}] = totals[s * {chunk} + e % {chunk}] + T.Cast(
                    "int64", img[e]
                )
"""
_ADD = (
    "                acc[T.Ramp({lane}, 1, 64)] = acc[T.Ramp({lane}, 1, 64)] + T.Cast("
    '"uint16x64", img[T.Ramp((n // strips * s // {chunk} + g * {chunks} + k) * {chunk} + {lane},'
    " 1, 64)])"
)
SUMS_SOURCE = _SUMS.format(
    chunk=CHUNK,
    chunks=CHUNKS,
    chunks_less_one=CHUNKS - 1,
    vectors=CHUNK // 64,
    adds="\n".join(
        _ADD.format(lane=lane, chunk=CHUNK, chunks=CHUNKS) for lane in range(0, CHUNK, 64)
    ),
)


def channel_sums(image: np.ndarray) -> np.ndarray:
    """The sums of an (H, W) or (H, W, C) uint8 image's values per channel (C of 1 to 4), as an
    int64 (C,) array."""
    if not (isinstance(image, np.ndarray) and image.dtype == np.uint8 and image.ndim in (2, 3)):
        raise InputError(
            f"sums: expected an (H, W) or (H, W, C) uint8 image, got {describe(image)}"
        )
    channels = 1 if image.ndim == 2 else int(image.shape[2])
    if not 1 <= channels <= 4:
        raise InputError(f"sums: expected 1 to 4 channels, got {channels}")
    if image.size > MAX_VALUES:
        raise InputError(f"sums: {image.size} values, more than the {MAX_VALUES} indexed")
    if not image.size:
        return np.zeros(channels, np.int64)
    strips = strips_for(image.size, max(1, min(MAX_STRIPS, image.size // STRIP_VALUES)))
    totals = np.empty(strips * CHUNK, np.int64)
    run_strips("sums_u8", SUMS_SOURCE, np.ascontiguousarray(image).reshape(-1), totals, strips)
    return _by_channel(totals.reshape(strips, CHUNK), channels).sum(axis=0)


def _by_channel(lanes: np.ndarray, channels: int) -> np.ndarray:
    """The strips' lanes, (strips, L), added over the strips, as (L / channels, channels).
    Strips first, along rows: NumPy's sum down a 3-wide column of a (1024, 3) array took
    12-35 us, a 1080p image's sums a tenth of their time."""
    return lanes.sum(axis=0).reshape(-1, channels)
