"""cv2.resize with INTER_AREA shrinking uint8 images by a factor that is not an integer on both
axes (to 224x224, say) as one hand-written TIR kernel for the host CPU, with OpenCV's
tables and float32 arithmetic (cv::resizeArea's; gdp.ops.resize_tables.area_taps,
cv::computeResizeAreaTab's): each output row is the sum of its source rows' horizontal sums in
order, each weighed by its share of the row's footprint; each horizontal sum adds a source row's
pixels, each weighed by its share of the output pixel's footprint; then rounded half to even and
saturated. Not OpenCV's order everywhere: a horizontal sum adds its window's products as a tree
(OpenCV: one after another), and LLVM may fuse a multiply and an add that OpenCV rounds apart, so
a value within about 1e-6 of a half can round the other way (the same 1 LSB the compiled
program allowed).

Why by hand: as a program each tap was a gather, a lane at a time: 1080p BGR to 224x224 took
5.4-6.1 ms, OpenCV 10.7; 4K 14-43 ms, OpenCV 25-32.

Output rows are split into strips that run on TVM's pool; each strip keeps a row of horizontal
sums and a row of the output's running sums (float32) in a scratch array. A source row read by
two output rows is summed for each.
"""

from __future__ import annotations

import functools

import numpy as np

from gdp.errors import InputError
from gdp.runtime.launch import host_tensors, run_strips
from gdp.runtime.tir_text import columns, describe, indent
from gdp.runtime.workspace import output, scratch

# Output rows per strip at least (fewer strips for a small output), and strips at most.
STRIP_ROWS = 4
MAX_STRIPS = 16
# Source pixels a window of an output pixel's horizontal sum may hold: the narrowest that holds
# its taps (at most 1 + the scale): 4-wide for a shrink by 1.5 (16-wide ran it at 0.65x OpenCV),
# 16 for one by 8.6 (1080p to 224). Larger scales, and rows narrower than their window, are
# not taken.
WINDOWS = (4, 8, 16, 32)
# Output values a vector of the vertical pass (16 float32: one AVX-512 register).
LANES = 16
# Offsets into the image are int32.
MAX_VALUES = (1 << 31) - 1

_SOURCE = """
@T.prim_func
def {name}(
    img_handle: T.handle,
    out_handle: T.handle,
    row_taps_handle: T.handle,
    row_weights_handle: T.handle,
    starts_handle: T.handle,
    col_weights_handle: T.handle,
    sums_handle: T.handle,
    strips: T.int32,
):
    T.func_attr({{"global_symbol": "{name}", "tir.noalias": True}})
    h = T.int32()
    wc = T.int32()
    H = T.int32()
    WC = T.int32()
    W = T.int32()
    ty = T.int32()
    n_sums = T.int32()
    img = T.match_buffer(img_handle, (h, wc), "uint8", align=1)
    out = T.match_buffer(out_handle, (H, WC), "uint8", align=1)
    row_taps = T.match_buffer(row_taps_handle, (H, ty), "int32", align=4)
    row_weights = T.match_buffer(row_weights_handle, (H, ty), "float32", align=4)
    starts = T.match_buffer(starts_handle, (W,), "int32", align=4)
    col_weights = T.match_buffer(col_weights_handle, (W, {window}), "float32", align=4)
    sums = T.match_buffer(sums_handle, (n_sums,), "float32", align=4)
    for s in T.parallel(strips):
        # sums[s * 2 * WC ...]: the horizontal sums of one source row, then the output row's
        for y in range(H * s // strips, H * (s + 1) // strips):
            for t in range(ty):
                # a tap of weight 0 pads a row's taps to the longest's: skipped
                if t == 0 or row_weights[y, t] != T.float32(0):
                    for x in range(W):
                        window: T.let = img[row_taps[y, t], T.Ramp(starts[x], 1, {window_bytes})]
{channel_sums}
                    if t == 0:
{first}
                    else:
{add}
{store}
"""


@functools.cache
def source(channels: int, window: int) -> tuple[str, str]:
    """(name, TVMScript) of the kernel for images of `channels` channels, an output pixel's
    horizontal sum over a window of `window` source pixels."""
    name = f"resize_area_u8_c{channels}_w{window}"
    line, total = "sums[s * 2 * WC + {x}]", "sums[s * 2 * WC + WC + {x}]"
    first = columns(f"{total} = row_weights[y, t] * {line}", "0", "WC", LANES)
    add = columns(f"{total} = {total} + row_weights[y, t] * {line}", "0", "WC", LANES)
    rounded = f"T.max(T.min(T.round({total}), T.float32(255)), T.float32(0))"
    sums_of_channels = []
    for c in range(channels):
        picks = ", ".join(str(c + channels * i) for i in range(window))
        lines = [
            f'p{c}: T.let = T.Cast("float32x{window}", T.Shuffle([window], [{picks}]))'
            f" * col_weights[x, T.Ramp(0, 1, {window})]"
        ]
        lanes, part = window, f"p{c}"
        while lanes > 1:  # halves added: a tree of additions
            half = lanes // 2
            low = ", ".join(map(str, range(half)))
            high = ", ".join(map(str, range(half, lanes)))
            lines.append(
                f"q{c}_{half}: T.let = T.Shuffle([{part}], [{low}]) + T.Shuffle([{part}], [{high}])"
            )
            lanes, part = half, f"q{c}_{half}"
        lines.append(f"sums[s * 2 * WC + x * {channels} + {c}] = {part}")
        sums_of_channels += lines
    store = columns(f'out[y, {{x}}] = T.Cast("uint8", {rounded})', "0", "WC", LANES)
    return name, _SOURCE.format(
        name=name,
        channels=channels,
        window=window,
        window_bytes=window * channels,
        channel_sums=indent("\n".join(sums_of_channels), 24),
        first=indent(first, 24),
        add=indent(add, 24),
        store=indent(store, 12),
    )


class Plan:
    """The kernel's tables for one source size, channel count and output size: each output
    row's source rows and weights, each output column's source element offsets and weights
    (gdp.ops.resize_tables.area_taps), as the tensors the kernel reads."""

    def __init__(self, h: int, w: int, channels: int, width: int, height: int, sx, sy):
        from gdp.ops.resize_tables import area_taps

        if not (1 <= channels <= 4 and width >= 1 and height >= 1):
            raise InputError(
                f"resize_area: expected 1 to 4 channels and a non-empty output, got {channels}"
                f" channels to {width}x{height}"
            )
        if sx < 1 or sy < 1:
            raise InputError(f"resize_area: shrinks only, got scales {sx}, {sy}")
        if h * w * channels > MAX_VALUES:
            raise InputError(f"resize_area: {h * w * channels} values, more than {MAX_VALUES}")
        rows, row_weights = area_taps(h, height, sy)
        cols, col_weights = area_taps(w, width, sx)
        window = next((n for n in WINDOWS if n >= cols.shape[1]), 0)
        if not window or w < window:
            raise InputError(
                f"resize_area: at most {WINDOWS[-1]} taps a pixel and rows as wide as their"
                f" window, got {cols.shape[1]} taps and rows of {w} pixels"
            )
        # each output pixel's window: `window` source pixels from its first tap's (from the
        # row's last at its end), its taps' weights where they fall in it
        first = np.minimum(cols[:, 0], w - window)
        weights = np.zeros((width, window), np.float32)
        for k in range(cols.shape[1]):  # (a tap of weight 0 pads a pixel's taps: left out)
            real = col_weights[:, k] != 0
            weights[np.nonzero(real)[0], (cols[:, k] - first)[real]] = col_weights[real, k]
        self.shape = (h, w, channels)
        self.size = (height, width)
        self.window = window
        self.tables = host_tensors(
            rows.astype(np.int32),
            row_weights.astype(np.float32),
            (first * channels).astype(np.int32),
            weights,
        )
        self.strips = max(1, min(MAX_STRIPS, height // STRIP_ROWS))


def resize(image: np.ndarray, plan: Plan, out: np.ndarray | None = None) -> np.ndarray:
    """`image` (h, w) or (h, w, c) uint8 resized by area to the plan's size, as a new array (or
    into `out`)."""
    channels = image.shape[2] if isinstance(image, np.ndarray) and image.ndim == 3 else 1
    if not (
        isinstance(image, np.ndarray)
        and image.dtype == np.uint8
        and (*image.shape[:2], channels) == plan.shape
    ):
        raise InputError(
            f"resize_area: the plan is for a uint8 image {plan.shape}, got {describe(image)}"
        )
    height, width = plan.size
    h, w = image.shape[:2]
    out = output(out, (height, width, *image.shape[2:]), np.uint8, "resize_area")
    name, text = source(channels, plan.window)
    run_strips(
        name,
        text,
        np.ascontiguousarray(image).reshape(h, w * channels),
        out.reshape(height, width * channels),
        *plan.tables,
        scratch("resize_area_sums", MAX_STRIPS * 2 * width * channels, np.float32),
        plan.strips,
    )
    return out
