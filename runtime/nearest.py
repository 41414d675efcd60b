"""cv2.resize with INTER_NEAREST as one hand-written TIR kernel for the host CPU: each output
pixel is the source pixel at (rows[y], cols[x]), the two index tables cv::resize computes
(gdp.ops.resize_tables.axis_taps), made on the host.

Why by hand: as a graph the copy is a gather whose lanes TVM loads one value at a time, and each
call paid the compiled program's fixed cost: 1080p BGR to a third took 0.43 ms, OpenCV 0.17 ms.
Here rows run in parallel. On a CPU with AVX-512 VBMI an output row is copied in chunks of 64
bytes (32 where 64 would reach too far: a downscale by 2 to 4), each one byte permute
(vpermi2b) of the 128 bytes of its source row that hold the chunk's bytes, with the chunk's
picks made on the host (1080p BGR to a third: 0.19 -> 0.07 ms). Elsewhere, and where a chunk's
bytes span more than 128 (a downscale by more than 4) or a source row is narrower, each pixel is
copied whole where it is an integer of 1, 2, 4 or 8 bytes (gray, BGRA, ...), else element by
element (BGR).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from gdp.errors import InputError
from gdp.runtime.launch import alone, run_host_kernel, run_serial
from gdp.runtime.lut import permutes_bytes
from gdp.runtime.tir_text import describe, permute_bytes
from gdp.runtime.workspace import empty

# Flat offsets into the source are int32.
MAX_ELEMENTS = (1 << 31) - 1
_WHOLE = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}

_SOURCE = """
@T.prim_func
def {name}(
    img_handle: T.handle,
    out_handle: T.handle,
    rows_handle: T.handle,
    cols_handle: T.handle,
    reach: T.int32,
):
    T.func_attr({{"global_symbol": "{name}", "tir.noalias": True}})
    n = T.int32()
    m = T.int32()
    H = T.int32()
    W = T.int32()
    img = T.match_buffer(img_handle, (n,), "{unit}", align=1)
    out = T.match_buffer(out_handle, (m,), "{unit}", align=1)
    rows = T.match_buffer(rows_handle, (H,), "int32", align=4)
    cols = T.match_buffer(cols_handle, (W,), "int32", align=4)
    for y in T.parallel(H):
{copy}
"""

# A whole pixel: one value.
_WHOLE_COPY = """\
        for x in range(W):
            out[y * W + x] = img[rows[y] + cols[x]]
"""
# A pixel of {e} values: {e} + 1 moved as one vector (the one past the pixel is the next
# pixel's first, written again by it), but for a row's last pixel, moved value by value, and in
# a row whose vectors could read past the image's end (`reach`: the largest column offset of a
# row's vectors), each vector checked.
_PARTS_COPY = """\
        if rows[y] + reach + {e} < n:
            for x in range(W - 1):
                out[T.Ramp((y * W + x) * {e}, 1, {e} + 1)] = img[
                    T.Ramp(rows[y] + cols[x], 1, {e} + 1)
                ]
        else:
            for x in range(W - 1):
                if rows[y] + cols[x] + {e} < n:
                    out[T.Ramp((y * W + x) * {e}, 1, {e} + 1)] = img[
                        T.Ramp(rows[y] + cols[x], 1, {e} + 1)
                    ]
                else:
                    for k in range({e}):
                        out[(y * W + x) * {e} + k] = img[rows[y] + cols[x] + k]
        for k in range({e}):
            out[(y * W + W - 1) * {e} + k] = img[rows[y] + cols[W - 1] + k]
"""


_PERMUTED = """
@T.prim_func
def {name}(
    img_handle: T.handle,
    out_handle: T.handle,
    rows_handle: T.handle,
    bases_handle: T.handle,
    picks_handle: T.handle,
    row_bytes: T.int32,
):
    T.func_attr({{"global_symbol": "{name}", "tir.noalias": True}})
    n = T.int32()
    m = T.int32()
    H = T.int32()
    chunks = T.int32()
    img = T.match_buffer(img_handle, (n,), "uint8", align=1)
    out = T.match_buffer(out_handle, (m,), "uint8", align=1)
    rows = T.match_buffer(rows_handle, (H,), "int32", align=4)
    bases = T.match_buffer(bases_handle, (chunks,), "int32", align=4)
    picks = T.match_buffer(picks_handle, (chunks * 64,), "uint8", align=1)
    for y in T.parallel(H):
        for j in range(chunks):
            # the last chunk ends with the row (bytes of the chunk before written again)
            start = T.min(j * {chunk}, row_bytes - {chunk})
            out[T.Ramp(y * row_bytes + start, 1, {chunk})] = {value}
"""
# The chunk's bytes from the 128 source bytes at its base (lanes 0-63 the first 64).
_PERMUTE = permute_bytes(
    "img[T.Ramp(rows[y] + bases[j], 1, 64)]",
    "picks[T.Ramp(j * 64, 1, 64)]",
    "img[T.Ramp(rows[y] + bases[j] + 64, 1, 64)]",
)
# Output bytes a chunk, the largest first.
CHUNKS = (64, 32)


@functools.cache
def permuted_source(chunk: int) -> tuple[str, str]:
    """(name, TVMScript) of the permuted copy in chunks of `chunk` bytes."""
    name = f"resize_nearest_permuted_{chunk}"
    value = _PERMUTE
    if chunk < 64:
        value = f"T.Shuffle([{value}], [{', '.join(map(str, range(chunk)))}])"
    return name, _PERMUTED.format(name=name, chunk=chunk, value=value)


@functools.cache
def source(unit: str, elements: int) -> tuple[str, str]:
    """(name, TVMScript) of the kernel copying `elements` values of `unit` a pixel: `rows` holds
    each output row's first source element, `cols` each output column's offset from it."""
    name = f"resize_nearest_{unit}_x{elements}"
    copy = _WHOLE_COPY if elements == 1 else _PARTS_COPY.format(e=elements)
    return name, _SOURCE.format(name=name, unit=unit, copy=copy)


@dataclass(frozen=True)
class Plan:
    """How the kernel copies one source shape and dtype to one output size: the unit it
    copies, the units a pixel is, and each output row's and column's source offset in
    units."""

    unit: str
    elements: int
    shape: tuple[int, ...]
    dtype: np.dtype
    row_offsets: np.ndarray
    col_offsets: np.ndarray
    reach: int  # the largest column offset but the last column's (0 for one column)
    # The permuted copy's, where it runs (chunk 0: it does not): each output row's source row
    # as a byte offset, each chunk's base in its source row and its 64 picks from there.
    chunk: int = 0
    row_bytes: int = 0
    source_rows: np.ndarray | None = None
    bases: np.ndarray | None = None
    picks: np.ndarray | None = None


def plan(shape: tuple[int, ...], dtype, rows: np.ndarray, cols: np.ndarray) -> Plan:
    """The plan for an (H, W) or (H, W, C) source of `shape` and `dtype`, whose output pixel
    (y, x) is source pixel (rows[y], cols[x]) (checked to lie in the image)."""
    dtype = np.dtype(dtype)
    if len(shape) not in (2, 3) or dtype.kind not in "biuf":
        raise InputError(
            f"resize_nearest: expected an (H, W) or (H, W, C) array of numbers, got {dtype} {shape}"
        )
    h, w = shape[:2]
    rows, cols = np.asarray(rows, np.int64), np.asarray(cols, np.int64)
    outside = [t for t, n in ((rows, h), (cols, w)) if t.size and (t.min() < 0 or t.max() >= n)]
    if outside:
        raise InputError(f"resize_nearest: indices outside the {h}x{w} image")
    if int(np.prod(shape)) > MAX_ELEMENTS:
        raise InputError(
            f"resize_nearest: {int(np.prod(shape))} elements, more than {MAX_ELEMENTS}"
        )
    channels = 1 if len(shape) == 2 else int(shape[2])
    whole = _WHOLE.get(channels * dtype.itemsize)
    unit, elements = (whole, 1) if whole else (f"uint{8 * dtype.itemsize}", channels)
    row_offsets = (rows * w * elements).astype(np.int32)
    col_offsets = (cols * elements).astype(np.int32)
    reach = int(col_offsets[:-1].max()) if col_offsets.size > 1 else 0
    pixel = channels * dtype.itemsize
    permuted = _permuted((h, w * pixel), rows, cols, pixel)
    return Plan(unit, elements, tuple(shape), dtype, row_offsets, col_offsets, reach, *permuted)


def _permuted(source: tuple[int, int], rows: np.ndarray, cols: np.ndarray, pixel: int) -> tuple:
    """(chunk, row_bytes, source_rows, bases, picks) of the permuted copy of a source of
    `source` (rows, bytes a row) and pixels of `pixel` bytes, or () where it does not run: no
    VBMI, a source row under the permute's 128 bytes, an output row under a chunk, a chunk
    whose bytes span more than 128, or byte offsets over int32."""
    height, source_row = source
    row_bytes = cols.size * pixel
    too_large = max(height * source_row, rows.size * row_bytes) > MAX_ELEMENTS
    if source_row < 128 or too_large or not permutes_bytes():
        return ()
    taken = (cols[:, None] * pixel + np.arange(pixel)).reshape(-1)  # each output byte's source
    for chunk in CHUNKS:
        if row_bytes < chunk:
            continue
        starts = np.minimum(np.arange(-(-row_bytes // chunk)) * chunk, row_bytes - chunk)
        window = taken[starts[:, None] + np.arange(chunk)]
        low = window.min(1)
        if (window.max(1) - low < 128).all():
            bases = np.minimum(low, source_row - 128)  # the 128 bytes stay in the row
            picks = np.zeros((starts.size, 64), np.uint8)
            picks[:, :chunk] = window - bases[:, None]
            source_rows = (rows * source_row).astype(np.int32)
            return chunk, row_bytes, source_rows, bases.astype(np.int32), picks.reshape(-1)
    return ()


def resize_nearest(image: np.ndarray, plan: Plan) -> np.ndarray:
    """The (len(rows), len(cols)) image of `image`'s pixels at the plan's rows x cols, with
    `image`'s channels and dtype, as a new array."""
    if not isinstance(image, np.ndarray) or image.shape != plan.shape or image.dtype != plan.dtype:
        raise InputError(
            f"resize_nearest: the plan is for {plan.dtype} {plan.shape}, got {describe(image)}"
        )
    rows, cols = plan.row_offsets.size, plan.col_offsets.size
    out = empty((rows, cols, *image.shape[2:]), image.dtype)
    if not out.size:
        return out
    # a small output's rows on this thread (gdp.runtime.launch)
    run = run_serial if alone(2 * out.nbytes) else run_host_kernel
    if plan.chunk:
        name, text = permuted_source(plan.chunk)
        flat = np.ascontiguousarray(image).reshape(-1).view(np.uint8)
        target = out.reshape(-1).view(np.uint8)
        run(name, text, flat, target, plan.source_rows, plan.bases, plan.picks, plan.row_bytes)
        return out
    name, text = source(plan.unit, plan.elements)
    flat = np.ascontiguousarray(image).reshape(-1).view(plan.unit)
    target = out.reshape(-1).view(plan.unit)
    run(name, text, flat, target, plan.row_offsets, plan.col_offsets, plan.reach)
    return out
