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
from typing import NamedTuple

import numpy as np

from gdp.errors import InputError
from gdp.runtime.launch import host_tensors, run_strips
from gdp.runtime.tir_text import block_sums, columns, describe, indent
from gdp.runtime.workspace import empty, scratch

# Values an output block sums at once (4 AVX-512 registers of float32).
BLOCK = 64
# float32 values a vector converts.
LANES = 16
# Strips of rows run in parallel, at most; each converts kh - 1 rows beyond its own.
MAX_STRIPS = 16
# Flat offsets are int32.
MAX_VALUES = (1 << 31) - 1
# (source, result) types the kernel is made for.
TYPES = frozenset(
    {("uint8", "uint8"), ("uint8", "int16"), ("uint8", "float32"), ("float32", "float32")}
)


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
    anchor: tuple[int, int],
    border: int,
    dst_dtype,
    delta: float = 0.0,
) -> np.ndarray:
    """The correlation of `image` (h, w) or (h, w, c), uint8 or float32, with the 2-D `kernel`
    (weights rounded to float32) at `anchor` (x, y, inside the kernel), the image's border
    `border` (OpenCV's BORDER_CONSTANT, with zeros, REPLICATE, REFLECT, WRAP or REFLECT_101),
    plus `delta`, as a new array of `dst_dtype`."""
    dst = np.dtype(dst_dtype).name
    if not isinstance(image, np.ndarray) or (image.dtype.name, dst) not in TYPES:
        raise InputError(
            f"filter2d: expected a uint8 image into uint8, int16 or float32, or a float32 image"
            f" into float32; got {describe(image)} into {dst}"
        )
    if image.ndim not in (2, 3):
        raise InputError(f"filter2d: expected an image (h, w) or (h, w, c), got {image.shape}")
    kernel = np.asarray(kernel, np.float32)
    if kernel.ndim != 2 or not kernel.size:
        raise InputError(f"filter2d: expected a non-empty 2-D kernel, got shape {kernel.shape}")
    channels = image.shape[2] if image.ndim == 3 else 1
    key = (kernel.shape, kernel.tobytes())
    plan = _plan(image.shape[:2], channels, key, tuple(anchor), border, image.dtype.name, dst)
    out = empty(image.shape, dst)
    if not image.size:
        return out
    h, wc = image.shape[0], image.shape[1] * channels
    run_strips(
        plan.name,
        plan.text,
        np.ascontiguousarray(image).reshape(h, wc),
        out.reshape(h, wc),
        *plan.tables,
        scratch("filter2d_ring", plan.ring, np.float32),
        scratch("filter2d_offsets", MAX_STRIPS * plan.taps, np.int32),
        anchor[0] * channels,
        float(np.float32(delta)),
        plan.strips,
    )
    return out


class _Plan(NamedTuple):
    name: str
    text: str
    tables: tuple  # rows, columns, tap rows, tap columns, weights: TVM tensors
    taps: int
    ring: int  # float32 values of the strips' rings
    strips: int


@functools.lru_cache(maxsize=64)
def _plan(shape, channels, kernel_key, anchor, border, src, dst) -> _Plan:
    """The kernel, its index maps and taps for one image shape and filter (kept: a call of a
    known size builds nothing)."""
    from gdp.ops.border_index import padded_maps

    (kh, kw), data = kernel_key
    kernel = np.frombuffer(data, np.float32).reshape(kh, kw)
    (h, w), (ax, ay) = shape, anchor
    if not (0 <= ax < kw and 0 <= ay < kh):
        raise InputError(f"filter2d: the anchor {anchor} is outside the {kw}x{kh} kernel")
    wc, wpc = w * channels, (w + kw - 1) * channels
    if max(h * wc, MAX_STRIPS * kh * wpc) > MAX_VALUES:
        raise InputError(f"filter2d: {h * wc} values, more than the {MAX_VALUES} indexed")
    try:
        rows, values = padded_maps(shape, channels, (kh, kw), anchor, border)
    except ValueError as err:
        raise InputError(f"filter2d: {err}") from err
    # Non-zero taps in row-major order (OpenCV's order), the column offset in values.
    dys, dxs = np.nonzero(kernel)
    weights = kernel[dys, dxs]
    if not len(weights):  # OpenCV's all-zero kernel: delta everywhere
        dys, dxs, weights = np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1, np.float32)
    name, text = source(src, dst)
    tables = host_tensors(
        rows,
        values,
        dys.astype(np.int32),
        (dxs * channels).astype(np.int32),
        weights.astype(np.float32),
    )
    strips = max(1, min(MAX_STRIPS, h // max(kh, 8)))
    return _Plan(name, text, tables, len(weights), MAX_STRIPS * kh * wpc, strips)
