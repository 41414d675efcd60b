"""cv2.resize of uint8 images with INTER_CUBIC as one hand-written TIR kernel for the host CPU
with AVX-512 VBMI, with the arithmetic of gdp's compiled program (gdp.ops.resize_tables.plan):
11-bit fixed-point weights (each axis's rounded to sum 2^11), the 4x4 sums exact in int32, then
(sum + 2^21) >> 22 clamped to [0, 255]. OpenCV hands 8-bit CUBIC to Intel IPP, whose sums are
not exact: both are within 1 of each other (tests/gdp/cv2/test_cubic_kernel.py), and equal
where each output pixel is a source pixel (1080p to a third).

Why by hand: as a program the resize gathered each of its 16 taps a lane at a time (1080p BGR
to a third 0.76 ms, OpenCV 0.75).

How, as gdp.runtime.resize's LINEAR: output rows are split into strips; each strip keeps the
horizontal pass of the source rows its output rows read in four slots (row mod 4: an output
row reads four consecutive rows, clamped at the borders), each computed once when a row first
comes. The horizontal pass makes 16 output values a step: one byte permute (vpermi2b) picks
their 4 taps' bytes from a 128-byte window of the row, as the pairs of taps (0, 1) of the 16,
then (2, 3); widened to 16 bits, each half times its pairs of weights by one multiply-add
(vpmaddwd), the two summed in int32. A tap outside the row is the border pixel (OpenCV
replicates it): its weight is folded onto the four pixels in the row from the first one that
is, which leaves the exact sum as it was. The vertical pass weighs the four slots in int32
vectors. A row's last step, and the last vector of each output row, end with the row (values
of the step before computed again, the same).

Where it does not run (gdp.cv2 runs the program): a CPU without VBMI, a source row under 128
bytes or narrower than 4 pixels, an output row under 16 values, or a downscale whose 16 values
span more than 128 bytes (by about 7 or more).
"""

from __future__ import annotations

import functools

import numpy as np

from gdp.errors import InputError
from gdp.runtime.launch import host_tensors, run_strips
from gdp.runtime.lut import permutes_bytes
from gdp.runtime.tir_text import describe, indent, permute_bytes
from gdp.runtime.workspace import output, scratch

BITS = 11  # each pass's fixed point
# Output values a step of the horizontal pass (their 4 taps: 64 bytes), a vector of the
# vertical, and the window of source bytes a step's taps are picked from.
STEP = 16
WINDOW = 128
TAPS = 4
STRIP_VALUES = 1 << 15
MAX_STRIPS = 16
MAX_VALUES = (1 << 31) - 1
CHANNELS = (1, 2, 3, 4)

_KERNEL = """
@T.prim_func
def resize_cubic_u8(
    img_handle: T.handle,
    out_handle: T.handle,
    htab_handle: T.handle,
    hidx_handle: T.handle,
    ytab_handle: T.handle,
    buf_handle: T.handle,
    tags_handle: T.handle,
    wc: T.int32,
    count: T.int32,
    height: T.int32,
    strips: T.int32,
):
    T.func_attr({{"global_symbol": "resize_cubic_u8", "tir.noalias": True}})
    size = T.int32()
    out_size = T.int32()
    hsize = T.int32()
    isize = T.int32()
    ysize = T.int32()
    bsize = T.int32()
    tsize = T.int32()
    img = T.match_buffer(img_handle, (size,), "uint8", align=1)
    out = T.match_buffer(out_handle, (out_size,), "uint8", align=1)
    htab = T.match_buffer(htab_handle, (hsize,), "int32", align=4)
    hidx = T.match_buffer(hidx_handle, (isize,), "int8", align=1)
    ytab = T.match_buffer(ytab_handle, (ysize,), "int32", align=4)
    buf = T.match_buffer(buf_handle, (bsize,), "int32", align=4)
    tags = T.match_buffer(tags_handle, (tsize,), "int32", align=4)
    for s in T.parallel(strips):
        for t in range(4):
            tags[s * 4 + t] = -1
        for y in range(height * s // strips, height * (s + 1) // strips):
            for t in range(4):
                # a tap of weight 0 adds nothing (a resize by an odd factor puts each output
                # row on a source row: three of its four taps weigh 0): its row is not
                # resampled, and its slot, whatever it holds, counts 0
                if ytab[y * 8 + 4 + t] != 0:
                    if tags[s * 4 + ytab[y * 8 + t] % 4] != ytab[y * 8 + t]:
                        tags[s * 4 + ytab[y * 8 + t] % 4] = ytab[y * 8 + t]
                        row: T.let = ytab[y * 8 + t] * wc
                        slot: T.let = (s * 4 + ytab[y * 8 + t] % 4) * count
                        for j in range((count + 15) // 16):
{horizontal}
{slots}
            for j in range((count + 15) // 16):
{vertical}
"""

# Row tap t's slot of output row y in the strip's buffer, and its weight, bound before the
# vertical pass's loop (computed in it, they took a quarter of its instructions).
_SLOTS = "".join(
    f"slot{t}: T.let = (s * 4 + ytab[y * 8 + {t}] % 4) * count\n"
    f"weight{t}: T.let = T.Broadcast(ytab[y * 8 + {4 + t}], 16)\n"
    for t in range(4)
)
# Step j's first value: the last step ends with the row.
_START = "T.min(j * 16, count - 16)"


def _horizontal() -> str:
    """The horizontal pass of step j of source row ytab[y, t] into its slot: htab holds each
    step's window start, then its 32 pairs of weights (w0 | w1 << 16 of the 16 values, then
    w2 | w3 << 16); hidx each step's 64 byte indices into its window."""
    window = "img[T.Ramp(row + htab[j * 33], 1, 64)]"
    picked = permute_bytes(
        f'T.reinterpret("int8x64", {window})',
        "hidx[T.Ramp(j * 64, 1, 64)]",
        f'T.reinterpret("int8x64", {window.replace("htab[j * 33]", "htab[j * 33] + 64")})',
        "int8x64",
    )
    halves = []
    for half in range(2):
        lanes = ", ".join(str(half * 32 + i) for i in range(32))
        pixels = f'T.Cast("int16x32", T.reinterpret("uint8x32", T.Shuffle([picked], [{lanes}])))'
        weights = f'T.reinterpret("int16x32", htab[T.Ramp(j * 33 + 1 + {half * 16}, 1, 16)])'
        halves.append(
            'T.call_llvm_pure_intrin("int32x16", "llvm.x86.avx512.pmaddw.d.512",'
            f" {pixels}, {weights})"
        )
    return (
        f"picked: T.let = {picked}\n"
        f"buf[T.Ramp(slot + {_START}, 1, 16)] = {halves[0]} + {halves[1]}\n"
    )


def _vertical() -> str:
    """Vector j of output row y: its four slots weighed, rounded, clamped."""
    terms = " + ".join(f"buf[T.Ramp(slot{t} + {_START}, 1, 16)] * weight{t}" for t in range(TAPS))
    total = f"{terms} + T.Broadcast({1 << (2 * BITS - 1)}, 16)"
    shifted = f"T.shift_right({total}, T.Broadcast({2 * BITS}, 16))"
    level = f"T.max(T.min({shifted}, T.Broadcast(255, 16)), T.Broadcast(0, 16))"
    return f'out[T.Ramp(y * count + {_START}, 1, 16)] = T.Cast("uint8x16", {level})\n'


@functools.cache
def source() -> tuple[str, str]:
    """(name, TVMScript) of the kernel."""
    return "resize_cubic_u8", _KERNEL.format(
        horizontal=indent(_horizontal(), 28),
        slots=indent(_SLOTS, 12),
        vertical=indent(_vertical(), 16),
    )


def _folded(indices: np.ndarray, weights: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Each output pixel's taps (clamped source indices, weights) as four consecutive pixels in
    [0, size) from `first` and their weights: a clamped tap's weight moved onto the pixel it
    reads, the same exact sum."""
    first = np.clip(indices.min(axis=1), 0, size - TAPS)
    folded = np.zeros((len(indices), TAPS), np.int64)
    rows = np.arange(len(indices))
    for k in range(indices.shape[1]):
        np.add.at(folded, (rows, indices[:, k] - first), weights[:, k])
    return first, folded


class Plan:
    """The tables of a CUBIC resize of an (h, w, channels) uint8 image to (height, width), as
    gdp's program computes it (gdp.ops.resize_tables: the positions as IPP takes them where
    `ipp`), or `runs` False where the kernel does not take it."""

    def __init__(self, h, w, channels, width, height, scale_x, scale_y, ipp):
        from gdp.ops import resize_tables

        if channels not in CHANNELS or min(h, w, width, height) < 1:
            raise InputError(
                f"resize_cubic plan: expected 1-4 channels and sizes of at least 1, got"
                f" {h}x{w}x{channels} -> {height}x{width}"
            )
        self.h, self.w, self.channels, self.width, self.height = h, w, channels, width, height
        self.count = width * channels
        wc = w * channels
        self.runs = (
            permutes_bytes()
            and w >= TAPS
            and wc >= WINDOW
            and self.count >= STEP
            and max(h * wc, height * self.count) <= MAX_VALUES
        )
        if not self.runs:
            return
        first, weights = _folded(*resize_tables.cubic_taps_fixed(w, width, scale_x, ipp), w)
        # each output value's first tap's byte, and its 4 weights
        offsets = (first[:, None] * channels + np.arange(channels)).reshape(-1)
        weights = np.repeat(weights, channels, axis=0)
        steps = -(-self.count // STEP)
        starts = np.minimum(np.arange(steps) * STEP, self.count - STEP)
        values = starts[:, None] + np.arange(STEP)  # (steps, 16)
        taps = offsets[values][:, :, None] + np.arange(TAPS) * channels  # (steps, 16, 4)
        bases = np.minimum(taps.min(axis=(1, 2)), wc - WINDOW)
        picks = taps - bases[:, None, None]
        if picks.max() >= WINDOW:
            self.runs = False
            return
        # the pairs (0, 1) of the 16 values, then (2, 3)
        self.hidx = (
            np.concatenate(
                [picks[:, :, :2].reshape(steps, 32), picks[:, :, 2:].reshape(steps, 32)], axis=1
            )
            .astype(np.int8)
            .reshape(-1)
        )
        w16 = weights[values] & 0xFFFF  # (steps, 16, 4) as 16-bit lanes
        pairs = np.concatenate(
            [w16[:, :, 0] | w16[:, :, 1] << 16, w16[:, :, 2] | w16[:, :, 3] << 16], axis=1
        )
        self.htab = np.concatenate([bases[:, None], pairs.astype(np.uint32).view(np.int32)], axis=1)
        self.htab = np.ascontiguousarray(self.htab, np.int32).reshape(-1)
        rows, row_weights = resize_tables.cubic_taps_fixed(h, height, scale_y, ipp)
        self.ytab = np.ascontiguousarray(np.concatenate([rows, row_weights], axis=1), np.int32)
        self.ytab = self.ytab.reshape(-1)

    @functools.cached_property
    def tables(self) -> tuple:
        """htab, hidx and ytab as the kernel's tensors, made once (a plan is kept for the sizes
        met last)."""
        return host_tensors(self.htab, self.hidx, self.ytab)


def resize(image: np.ndarray, plan: Plan, out: np.ndarray | None = None) -> np.ndarray:
    """The resized uint8 image, (height, width[, channels]) as `image` is (h, w[, channels])
    (or into `out`, which must not overlap `image`)."""
    if not (isinstance(image, np.ndarray) and image.dtype == np.uint8 and image.ndim in (2, 3)):
        raise InputError(f"resize_cubic: expected a uint8 image (h, w[, c]), got {describe(image)}")
    channels = image.shape[2] if image.ndim == 3 else 1
    if (image.shape[0], image.shape[1], channels) != (plan.h, plan.w, plan.channels):
        raise InputError(
            f"resize_cubic: the plan is for {plan.h}x{plan.w}x{plan.channels}, got {image.shape}"
        )
    if not plan.runs:
        raise InputError(
            f"resize_cubic: the kernel does not take {image.shape} -> {plan.height}x{plan.width}"
        )
    out = output(out, (plan.height, plan.width) + image.shape[2:], np.uint8, "resize_cubic")
    strips = max(1, min(MAX_STRIPS, plan.height, plan.height * plan.count // STRIP_VALUES))
    buf = scratch("resize_cubic_rows", strips * TAPS * plan.count, np.int32)
    tags = scratch("resize_cubic_tags", strips * TAPS, np.int32)
    flat = np.ascontiguousarray(image).reshape(-1)
    name, text = source()
    run_strips(
        name, text, flat, out.reshape(-1), *plan.tables, buf, tags,
        plan.w * plan.channels, plan.count, plan.height, strips,
    )  # fmt: skip
    return out
