"""cv2.resize of a uint8 image to exactly half its size (a scale of 2 on both axes, INTER_AREA,
or INTER_LINEAR, which OpenCV runs as area there) as one hand-written TIR kernel for the host
CPU: each output pixel is OpenCV's fast area average of its 2x2 source block, (sum + 2) >> 2 for
1, 3 and 4 channels (cv::resizeAreaFast; bit-exact).

Why by hand: the compiled program gathered each tap a lane at a time: 1080p gray to half took
0.31 ms against OpenCV's 0.074, BGR 0.86-0.91 ms against 0.35.

Output rows are split into strips on TVM's pool. A row goes in steps of STEPS[channels] output
pixels (the last step ends at the row's end, overlapping the one before): each of the two source
rows' 128 bytes that hold the step's blocks is picked apart into the blocks' left and right
pixels by two byte permutes (vpermi2b, AVX-512 VBMI), the four summed in 16-bit lanes, rounded,
narrowed and stored. A step's window ends with its last block (3 channels: the step's 126 bytes
are its last; the first step of the image, which has no 2 bytes before it, starts there).
"""

from __future__ import annotations

import functools

import numpy as np

from gdp.errors import InputError
from gdp.runtime.launch import run_strips
from gdp.runtime.lut import permutes_bytes
from gdp.runtime.tir_text import describe, indent
from gdp.runtime.workspace import output

# Output pixels a step, by channel count: as many as 128 source bytes a row hold.
STEPS = {1: 64, 3: 21, 4: 16}
# Output rows per strip at least (fewer strips for a small output), and strips at most.
STRIP_ROWS = 8
MAX_STRIPS = 16
# Offsets into the image are int32.
MAX_VALUES = (1 << 31) - 1

_SOURCE = """
@T.prim_func
def {name}(
    img_handle: T.handle,
    out_handle: T.handle,
    w: T.int32,
    height: T.int32,
    width: T.int32,
    strips: T.int32,
):
    T.func_attr({{"global_symbol": "{name}", "tir.noalias": True}})
    size = T.int32()
    out_size = T.int32()
    img = T.match_buffer(img_handle, (size,), "uint8", align=1)
    out = T.match_buffer(out_handle, (out_size,), "uint8", align=1)
    for s in T.parallel(strips):
        for y in range(height * s // strips, height * (s + 1) // strips):
            for k in range((width + {step} - 1) // {step}):
                x: T.let = T.min(k * {step}, width - {step})
                top: T.let = (2 * y * w + 2 * x) * {channels}
{body}
"""

# A step whose window of each source row starts {offset} bytes before its blocks' first byte.
_STEP = """\
sums: T.let = (
    T.Cast("uint16x64", {left0})
    + T.Cast("uint16x64", {right0})
    + T.Cast("uint16x64", {left1})
    + T.Cast("uint16x64", {right1})
)
halved: T.let = T.Cast(
    "uint8x64",
    T.shift_right(sums + T.Broadcast(T.uint16(2), 64), T.Broadcast(T.uint16(2), 64)),
)
{store}"""


def _pick(row: str, offset: int, picks: list[int]) -> str:
    """64 bytes of the source row's 128-byte window from `offset` before the step's first
    source byte: byte i is window byte offset + picks[i]."""
    lanes = ", ".join(str(offset + p) for p in picks)
    return f"T.Shuffle([img[T.Ramp({row} - {offset}, 1, 128)]], [{lanes}])"


def _step(channels: int, offset: int) -> str:
    values = STEPS[channels] * channels
    left = [2 * channels * (j // channels) + j % channels for j in range(values)]
    left += [left[-1]] * (64 - values)  # lanes past the step's values: not stored
    right = [p + channels for p in left]
    below = f"top + w * {channels}"
    if values == 64:
        store = f"out[T.Ramp((y * width + x) * {channels}, 1, 64)] = halved"
    else:
        kept = ", ".join(str(i) for i in range(values))
        store = (
            f"out[T.Ramp((y * width + x) * {channels}, 1, {values})]"
            f" = T.Shuffle([halved], [{kept}])"
        )
    return _STEP.format(
        left0=_pick("top", offset, left),
        right0=_pick("top", offset, right),
        left1=_pick(below, offset, left),
        right1=_pick(below, offset, right),
        store=store,
    )


@functools.cache
def source(channels: int) -> tuple[str, str]:
    """(name, TVMScript) of the kernel for `channels` (1, 3 or 4)."""
    span = 2 * STEPS[channels] * channels  # source bytes of a step's blocks in a row
    if span == 128:
        body = indent(_step(channels, 0), 16)
    else:  # the window ends with the step's blocks, but where none is before them
        body = "\n".join(
            [
                f"                if top < {128 - span}:",
                indent(_step(channels, 0), 20),
                "                else:",
                indent(_step(channels, 128 - span), 20),
            ]
        )
    name = f"halve_u8_c{channels}"
    return name, _SOURCE.format(name=name, step=STEPS[channels], channels=channels, body=body)


def takes(h: int, w: int, channels: int, width: int, height: int) -> bool:
    """Whether the kernel takes this halving on this CPU: 1, 3 or 4 channels, every output
    pixel's 2x2 block inside the image, a row of at least a step, a CPU with AVX-512 VBMI."""
    return (
        channels in STEPS
        and height >= 1
        and 2 * height <= h
        and STEPS[channels] <= width
        and 2 * width <= w
        and (h - 1) * w * channels >= 128  # the first step's window of its second row
        and h * w * channels <= MAX_VALUES
        and permutes_bytes()
    )


def resize(image: np.ndarray, width: int, height: int, out: np.ndarray | None = None):
    """`image` (h, w) or (h, w, c) uint8 at half size (width, height): each pixel the rounded
    mean of its 2x2 block, as a new array (or into `out`)."""
    channels = image.shape[2] if isinstance(image, np.ndarray) and image.ndim == 3 else 1
    if not (isinstance(image, np.ndarray) and image.dtype == np.uint8 and image.ndim in (2, 3)):
        raise InputError(f"halve: expected a uint8 image (h, w[, c]), got {describe(image)}")
    h, w = image.shape[:2]
    if not takes(h, w, channels, width, height):
        raise InputError(
            f"halve: expected 1, 3 or 4 channels, an output of whole 2x2 blocks at least"
            f" {STEPS.get(channels, 64)} wide and AVX-512 VBMI, got {describe(image)} to"
            f" {width}x{height}"
        )
    out = output(out, (height, width, *image.shape[2:]), np.uint8, "halve")
    name, text = source(channels)
    strips = max(1, min(MAX_STRIPS, height // STRIP_ROWS))
    run_strips(
        name,
        text,
        np.ascontiguousarray(image).reshape(-1),
        out.reshape(-1),
        w,
        height,
        width,
        strips,
    )
    return out
