"""cv2.filter2D's correlation with any 2-D kernel as one hand-written TIR kernel for the host CPU,
of any image size and any kernel: the kernel's taps and weights, and the border as index maps,
are run-time inputs, so one compiled kernel per (source, result) type serves every call.

Arithmetic: OpenCV's direct filter (its FilterVec_8u / FilterVec_32f): in float32, each output
value starts at `delta` and takes the non-zero taps in row-major order as fused multiply-adds
(delta + x0 * w0, then + x1 * w1, ...; LLVM contracts each into an fma), then is rounded half to
even and saturated for an integer result. Where OpenCV uses its DFT instead (kernels of 130
taps and more for uint8, 50 and more for float32, its filter.dispatch.cpp), its own result is
approximate, and the two differ by its rounding.

Why by hand: a kernel over 25 taps that is not rank one ran as a program of static sizes (one
compile per image size) whose gather of every tap position took 268 ms for a 13x13 kernel at
480x640 BGR (OpenCV's DFT: 13 ms).

Layout: the rows of a strip are converted to float32 once each into the strip's ring of `kh`
padded rows (`kw - 1` border columns read through the column map; a row outside the image
through the row map, -1 for the constant border's zeros); each output block of BLOCK values
keeps its sums in registers over GROUP taps (gdp.runtime.tir_text.block_sums), one load and
one fma a tap and vector.
"""

from __future__ import annotations

import functools
import threading

import numpy as np

from gdp.errors import InputError
from gdp.runtime.tir_text import block_sums, columns, describe, indent

# Values an output block sums at once (4 AVX-512 registers of float32).
BLOCK = 64
# float32 values a vector converts.
LANES = 16
# Strips of rows run in parallel, at most; each converts kh - 1 rows beyond its own.
MAX_STRIPS = 16
# Flat offsets are int32.
MAX_VALUES = (1 << 31) - 1
# (source, result) types the kernel is made for.
TYPES = {("uint8", "uint8"), ("uint8", "int16"), ("uint8", "float32"), ("float32", "float32")}


def _store(dtype: str, value: str) -> str:
    """`value` (float32) as OpenCV's saturate_cast to `dtype`."""
    if dtype == "float32":
        return value
    info = np.iinfo(dtype)
    return (
        f'T.Cast("{dtype}", T.min(T.max(T.round({value}), T.float32({info.min})),'
        f" T.float32({info.max})))"
    )


def _convert(row: str) -> str:
    """Padded row `row` of the image, as float32, into ring slot row % kh of strip s."""
    at = f"s * kh * wpc + ({row}) % kh * wpc"
    border = (
        f'ring[{at} + {{x}}] = T.Select(cols[{{x}}] < 0, T.float32(0), T.Cast("float32",'
        f" img[rows[{row}], T.max(cols[{{x}}], 0)]))\n"
    )
    return (
        f"if rows[{row}] < 0:\n"
        + indent(columns(f"ring[{at} + {{x}}] = T.float32(0)", "0", "wpc", LANES), 4)
        + "else:\n"
        + indent("for p in range(left):\n" + indent(border.format(x="p"), 4), 4)
        + indent(
            columns(
                f'ring[{at} + left + {{x}}] = T.Cast("float32", img[rows[{row}], {{x}}])',
                "0",
                "wc",
                LANES,
            ),
            4,
        )
        + indent("for p in range(left + wc, wpc):\n" + indent(border.format(x="p"), 4), 4)
    )


_SOURCE = """
@T.prim_func
def {name}(
    img_handle: T.handle,
    out_handle: T.handle,
    rows_handle: T.handle,
    cols_handle: T.handle,
    dys_handle: T.handle,
    dxs_handle: T.handle,
    weights_handle: T.handle,
    ring_handle: T.handle,
    offsets_handle: T.handle,
    left: T.int32,
    delta: T.float32,
    strips: T.int32,
):
    T.func_attr({{"global_symbol": "{name}", "tir.noalias": True}})
    h = T.int32()
    wc = T.int32()
    hp = T.int32()
    wpc = T.int32()
    taps = T.int32()
    n = T.int32()
    img = T.match_buffer(img_handle, (h, wc), "{src}", align=1)
    out = T.match_buffer(out_handle, (h, wc), "{dst}", align=1)
    rows = T.match_buffer(rows_handle, (hp,), "int32", align=4)
    cols = T.match_buffer(cols_handle, (wpc,), "int32", align=4)
    dys = T.match_buffer(dys_handle, (taps,), "int32", align=4)
    dxs = T.match_buffer(dxs_handle, (taps,), "int32", align=4)
    weights = T.match_buffer(weights_handle, (taps,), "float32", align=4)
    ring = T.match_buffer(ring_handle, (n,), "float32", align=4)
    offsets = T.match_buffer(offsets_handle, ({max_strips} * taps,), "int32", align=4)
    kh = hp - h + 1
    for s in T.parallel(strips):
        sums = T.alloc_buffer(({block},), "float32", scope="local")
        y0 = h * s // strips
        y1 = h * (s + 1) // strips
        for r in range(kh - 1):
{convert_first}
        for y in range(y0, y1):
{convert_next}
            for t in range(taps):  # each tap's offset in the ring for this row
                offsets[s * taps + t] = s * kh * wpc + (y + dys[t]) % kh * wpc + dxs[t]
            for xo in range(wc // {block}):
{block_sums}            for x in range(wc // {block} * {block}, wc):
                sums[0] = delta
                for t in range(taps):
                    sums[0] = sums[0] + ring[offsets[s * taps + t] + x] * weights[t]
                out[y, x] = {store_tail}
"""


@functools.cache
def source(src: str, dst: str) -> tuple[str, str]:
    """(name, TVMScript) of the kernel from `src` values to `dst` values."""
    name = f"filter2d_{src}_{dst}"
    text = _SOURCE.format(
        name=name,
        src=src,
        dst=dst,
        block=BLOCK,
        block_sums=indent(
            block_sums(
                f"out[y, xo * {BLOCK} + i] = {_store(dst, 'sums[i]')}",
                f"ring[offsets[s * taps + ({{t}})] + xo * {BLOCK} + i]",
                "weights[{t}]",
                "taps",
                "float32",
                BLOCK,
                start="delta",
            ),
            16,
        ),
        max_strips=MAX_STRIPS,
        convert_first=indent(_convert("y0 + r"), 12),
        convert_next=indent(_convert("y + kh - 1"), 12),
        store_tail=_store(dst, "sums[0]"),
    )
    return name, text


def filter2d(
    image: np.ndarray,
    kernel: np.ndarray,
    anchor_x: int,
    rows: np.ndarray,
    cols: np.ndarray,
    dst_dtype,
    delta: float = 0.0,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """The correlation of `image` (h, w) or (h, w, c), uint8 or float32, with the 2-D `kernel`
    (weights rounded to float32; its anchor is in the maps), plus `delta`, into `dst_dtype`.

    `rows`: for each of the h + kh - 1 padded rows, the image row it reads (-1: zeros, the
    constant border); `cols`: for each of the w + kw - 1 padded columns, the image column
    (-1: zeros), the image's own from column `anchor_x`. Padded row i + dy, column j + dx is
    tap (dy, dx) of output (i, j), as cv::borderInterpolate maps them for the anchor. Written
    into `out` where given (a C-contiguous array of the image's shape and `dst_dtype`), else a
    new array."""
    from gdp.runtime.backends.tvm.kernels import run_host_kernel

    dst = np.dtype(dst_dtype).name
    if not isinstance(image, np.ndarray) or (image.dtype.name, dst) not in TYPES:
        raise InputError(
            f"filter2d: expected a uint8 image into uint8, int16 or float32, or a float32 image"
            f" into float32; got {describe(image)} into {dst}"
        )
    if image.ndim not in (2, 3):
        raise InputError(f"filter2d: expected an image (h, w) or (h, w, c), got {image.shape}")
    kernel = np.asarray(kernel)
    if kernel.ndim != 2 or not kernel.size:
        raise InputError(f"filter2d: expected a non-empty 2-D kernel, got shape {kernel.shape}")
    h, w = image.shape[:2]
    kh, kw = kernel.shape
    channels = image.shape[2] if image.ndim == 3 else 1
    rows = np.ascontiguousarray(rows, np.int32)
    cols = np.ascontiguousarray(cols, np.int32)
    if rows.shape != (h + kh - 1,) or cols.shape != (w + kw - 1,):
        raise InputError(
            f"filter2d: expected {h + kh - 1} row and {w + kw - 1} column indices for a"
            f" {h}x{w} image and a {kh}x{kw} kernel, got {rows.shape} and {cols.shape}"
        )
    if rows.max(initial=-1) >= h or cols.max(initial=-1) >= w or min(rows.min(), cols.min()) < -1:
        raise InputError(f"filter2d: a row or column index outside -1..{h - 1} or -1..{w - 1}")
    if not (0 <= anchor_x < kw and np.array_equal(cols[anchor_x : anchor_x + w], np.arange(w))):
        # The kernel reads the image's own columns directly, from anchor_x.
        raise InputError(
            f"filter2d: the column map must hold the image's columns 0..{w - 1} from anchor_x"
            f" = {anchor_x}"
        )
    wc, wpc = w * channels, (w + kw - 1) * channels
    strips = max(1, min(MAX_STRIPS, h // max(kh, 8)))
    if max(image.size, MAX_STRIPS * kh * wpc) > MAX_VALUES:
        raise InputError(f"filter2d: {image.size} values, more than the {MAX_VALUES} indexed")
    if out is None:
        out = np.empty(image.shape, dst)
    elif out.shape != image.shape or out.dtype != dst or not out.flags.c_contiguous:
        raise InputError(
            f"filter2d: out must be a C-contiguous {dst} array of shape {image.shape}, got"
            f" {describe(out)}"
        )
    if not image.size:
        return out
    # Non-zero taps in row-major order (OpenCV's order), the column offset in values.
    dys, dxs = np.nonzero(kernel)
    weights = kernel[dys, dxs].astype(np.float32)
    if not len(weights):  # OpenCV's all-zero kernel: delta everywhere
        dys, dxs, weights = np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1, np.float32)
    element_cols = np.where(
        cols[:, None] < 0, -1, cols[:, None] * channels + np.arange(channels)
    ).reshape(-1)
    name, text = source(image.dtype.name, dst)
    run_host_kernel(
        name,
        text,
        np.ascontiguousarray(image).reshape(h, wc),
        out.reshape(h, wc),
        rows,
        np.ascontiguousarray(element_cols, np.int32),
        np.ascontiguousarray(dys, np.int32),
        np.ascontiguousarray(dxs * channels, np.int32),
        weights,
        _scratch("ring", MAX_STRIPS * kh * wpc, np.float32),
        _scratch("offsets", MAX_STRIPS * len(weights), np.int32),
        anchor_x * channels,
        float(np.float32(delta)),
        strips,
    )
    return out


_workspace = threading.local()


def _scratch(name: str, size: int, dtype) -> np.ndarray:
    """This thread's scratch array `name` (kept between calls: a new ring each call cost its
    page faults)."""
    array = getattr(_workspace, name, None)
    if array is None or array.size < size:
        array = np.empty(size, dtype)
        setattr(_workspace, name, array)
    return array[:size]
