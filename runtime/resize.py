"""cv2.resize of uint8 images with INTER_LINEAR, and cv2.dnn.blobFromImage's resize of uint8
images with its float32 planar finish, as one hand-written TIR kernel for the host CPU, with
OpenCV's own arithmetic, bit for bit:
- horizontally, 11-bit fixed-point weights (gdp.ops.resize_tables: a pixel's two source pixels,
  weights rounded to sum 2^11) summed in int32;
- vertically, OpenCV's vector code (VResizeLinearVec_32s8u, which it runs on every row, its
  narrowest too): (((S0 >> 4) * b0) >> 16) + (((S1 >> 4) * b1) >> 16) + 2 >> 2, with its row
  weights b = round((1 - f) * 2^11), round(f * 2^11) of the float32 fraction f, kept where the
  rows are clamped at the borders. (gdp.ops.geometry's exact (S0 b0 + S1 b1 + 2^21) >> 22 is
  1 off in some pixels of most sizes.)

Why by hand: as a program the resize paid the program's fixed cost (about 40 us), gathered each
tap of its column pass a lane at a time from the whole image, and was not OpenCV's arithmetic.

How, as OpenCV: output rows are split into strips; each strip keeps the horizontal pass of the
source rows its output rows read, in two slots (row mod 2: the rows an output row reads are
consecutive), computed when a row first comes and reused by the next output rows that read it,
so each source row an output row needs is resampled once, and kept as S >> 4 in 16 bits. With
AVX-512 VBMI the horizontal pass picks each 32 output values' pairs of source bytes from a
128-byte window of the row by one byte permute and sums them by one 16-bit multiply-add
(_horizontal_permuted; for downscales by up to about 4, where the window holds them; up to
about 15 in two or four groups of values, a window and a permute each: 1080p BGR to 224x224
0.18 -> 0.12 ms, to a quarter 0.35 -> 0.18, OpenCV 0.16 and 0.19-0.25); else it
reads each output pixel's two source pixels as one load of 2 * channels bytes (the right
border's pixel, OpenCV's (w - 1, w - 1) pair of weights (2^11, 0), is read as (w - 2, w - 1)
with (0, 2^11)), 16 pixels a step, their channels split by shuffles. Each output row then
weighs its two slots as 16-bit vectors (vpmulhw: OpenCV's v_mul_hi).
"""

from __future__ import annotations

import functools

import numpy as np

from gdp.errors import InputError
from gdp.runtime.launch import host_tensors, run_strips, strips_for
from gdp.runtime.lut import permutes_bytes
from gdp.runtime.tir_text import columns, describe, indent, permute_bytes
from gdp.runtime.workspace import empty, output, scratch

BITS = 11  # the horizontal weights' fixed point
# Output pixels a step of the horizontal pass, output elements a step of the vertical.
PIXELS = 16
LANES = 32
# Output pixels a step of blobFromImage's finish (_blob_finish).
BLOB_PIXELS = 32
# Output values a step of the permuted horizontal pass (_horizontal_permuted): the 64 bytes of
# their pairs of source bytes, picked from a window of WINDOW bytes of the source row.
STEP = 32
WINDOW = 128
# Groups a step's values may be split into, each picked from a window of its own: the fewest
# whose windows hold their values' source bytes.
GROUPS = (1, 2, 4)
# Output values per strip at least, and strips at most. (2^15 ran a 224x224 gray output on one
# strip, one thread: 67 us against OpenCV's 54; a strip's first row computes its two source
# rows afresh, a few percent of a small output's work.)
STRIP_VALUES = 1 << 12
MAX_STRIPS = 16
MAX_VALUES = (1 << 31) - 1
CHANNELS = (1, 2, 3, 4)

_KERNEL = """
@T.prim_func
def {name}(
    img_handle: T.handle,
    out_handle: T.handle,
    xtab_handle: T.handle,
    vtab_handle: T.handle,
    vidx_handle: T.handle,
    ytab_handle: T.handle,
    buf_handle: T.handle,
    tags_handle: T.handle,{mean_arg}
    wc: T.int32,
    width: T.int32,
    height: T.int32,{scale_arg}
    vectors: T.int32,
    strips: T.int32,
):
    T.func_attr({{"global_symbol": "{name}", "tir.noalias": True}})
    size = T.int32()
    out_size = T.int32()
    xsize = T.int32()
    vsize = T.int32()
    isize = T.int32()
    ysize = T.int32()
    bsize = T.int32()
    tsize = T.int32()
    img = T.match_buffer(img_handle, (size,), "uint8", align=1)
    out = T.match_buffer(out_handle, (out_size,), "{out_dtype}", align=1)
    xtab = T.match_buffer(xtab_handle, (xsize,), "int32", align=4)
    vtab = T.match_buffer(vtab_handle, (vsize,), "int32", align=4)
    vidx = T.match_buffer(vidx_handle, (isize,), "int8", align=1)
    ytab = T.match_buffer(ytab_handle, (ysize,), "int32", align=4)
    buf = T.match_buffer(buf_handle, (bsize,), "int16", align=2)
    tags = T.match_buffer(tags_handle, (tsize,), "int32", align=4){mean_buffer}
    for s in T.parallel(strips):
        tags[s * 2] = -1
        tags[s * 2 + 1] = -1
        for y in range(height * s // strips, height * (s + 1) // strips):
            for t in range(2):
                # a tap of weight 0 adds nothing (a resize by an odd factor puts each output
                # row on a source row, OpenCV's second tap weighing 0): its row is not
                # resampled, and its slot, whatever it holds, counts 0 (1080p to a third:
                # 0.20 -> 0.12 ms)
                if ytab[y * 4 + 2 + t] != 0:
                    if tags[s * 2 + ytab[y * 4 + t] % 2] != ytab[y * 4 + t]:
                        tags[s * 2 + ytab[y * 4 + t] % 2] = ytab[y * 4 + t]
                        row0: T.let = ytab[y * 4 + t] * wc
                        slot0: T.let = (s * 2 + ytab[y * 4 + t] % 2) * width * {channels}
{horizontal}
{finish}
"""

# The slot of row tap {t} of output row y: the horizontal pass of its source row, in the
# strip's buffer (width * channels int16: _short).
_SLOT = "(s * 2 + ytab[y * 4 + {t}] % 2) * width * {c}"


def _short(value: str, lanes: int = 1) -> str:
    """A horizontal sum S (at most 255 * 2^11; `lanes` of them) as the row buffer keeps it:
    S >> 4, the first step of OpenCV's vertical pass, which fits 16 bits (the vertical pass
    then multiplies 16-bit lanes)."""
    if lanes == 1:
        return f'T.Cast("int16", T.shift_right({value}, 4))'
    return f'T.Cast("int16x{lanes}", T.shift_right({value}, T.Broadcast(4, {lanes})))'


# Source row ytab[y, t]'s offset, and its slot's, bound before its horizontal pass (written
# out in each step's indices, LLVM loaded ytab again at every step: 5% of a 1080p resize).
_ROW = "row0"


def _pixel_sum(c: int, x: str, k: str) -> str:
    """The horizontal sum of channel `k` of output pixel `x` of source row ytab[y, t], alone."""
    first = f"{_ROW} + xtab[{x}] + {k}"
    return (
        f'T.Cast("int32", img[{first}]) * xtab[width + {x}]'
        f' + T.Cast("int32", img[{first} + {c}]) * xtab[2 * width + {x}]'
    )


def _horizontal_permuted(c: int, groups: int) -> str:
    """The horizontal pass of source row ytab[y, t] into its slot with AVX-512 VBMI, STEP
    output values a step, in `groups` groups of consecutive values: each group's 128 bytes of
    the row from its first source byte (vtab's bases) as two vectors, from which one byte
    permute (vpermi2b, by the step's 64 byte indices in vidx) picks each of its values' two
    source bytes as a pair, into its part of the step's 64 bytes (one group: 32 values within
    128 source bytes, downscales by up to about 4; two and four for up to 7.5 and 15); widened
    to 16 bits, the pairs times their pairs of weights (vtab: each value's w0 | w1 << 16),
    summed by a multiply-add (vpmaddwd). `vectors` counts the whole steps (Plan: every window
    lies inside the row, the last ones ending with it); the last values one by one. (The loads
    of each pixel's two source pixels and the shuffles that split their channels took 2.5
    times as long.)"""
    slot = "slot0"
    n = f"width * {c}"
    permutes = []
    for g in range(groups):
        window = f"img[T.Ramp({_ROW} + vtab[{n} + xo * {groups} + {g}], 1, 64)]"
        permutes.append(
            permute_bytes(
                f'T.reinterpret("int8x64", {window})',
                "vidx[T.Ramp(xo * 64, 1, 64)]",
                f'T.reinterpret("int8x64", {window.replace(" + vtab", " + 64 + vtab")})',
                "int8x64",
            )
        )
    picked = permutes[0]
    if groups > 1:  # each group's part of the 64 bytes from its own permute
        part = 64 // groups
        lanes = ", ".join(str(64 * (i // part) + i) for i in range(64))
        picked = f"T.Shuffle([{', '.join(permutes)}], [{lanes}])"
    halves = []
    for half in range(2):
        lanes = ", ".join(str(half * 32 + i) for i in range(32))
        weights = f"vtab[T.Ramp(xo * {STEP} + {half * 16}, 1, 16)]"
        sums = (
            'T.call_llvm_pure_intrin("int32x16", "llvm.x86.avx512.pmaddw.d.512",'
            f' T.Shuffle([wide], [{lanes}]), T.reinterpret("int16x32", {weights}))'
        )
        halves.append(
            f"buf[T.Ramp({slot} + xo * {STEP} + {half * 16}, 1, 16)] = {_short(sums, 16)}\n"
        )
    scalar = _pixel_sum(c, f"j // {c}", f"j % {c}")
    return (
        "for xo in range(vectors):\n"
        + f'    wide: T.let = T.Cast("int16x64", T.reinterpret("uint8x64", {picked}))\n'
        + indent("".join(halves), 4)
        + f"for j in range(vectors * {STEP}, {n}):\n"
        + f"    buf[{slot} + j] = {_short(scalar)}\n"
    )


def _horizontal(c: int) -> str:
    """The horizontal pass of source row ytab[y, t] into its slot: PIXELS output pixels a
    step, each one load of its two source pixels; the last width % PIXELS one by one.
    xtab: each output pixel's first source pixel's byte offset in the row, then its two
    weights (three rows of `width`)."""
    slot = "slot0"
    loads = ", ".join(
        f"img[T.Ramp({_ROW} + xtab[xo * {PIXELS} + {i}], 1, {2 * c})]" for i in range(PIXELS)
    )
    pairs = f"T.Shuffle([{loads}], [{', '.join(map(str, range(2 * c * PIXELS)))}])"
    weight = "xtab[T.Ramp({row} * width + xo * {n}, 1, {n})]"
    w0, w1 = (weight.format(row=r, n=PIXELS) for r in (1, 2))
    sums = []
    for k in range(c):
        low = ", ".join(str(i * 2 * c + k) for i in range(PIXELS))
        high = ", ".join(str(i * 2 * c + c + k) for i in range(PIXELS))
        sums.append(
            f'T.Cast("int32x{PIXELS}", T.Shuffle([pairs], [{low}])) * {w0}'
            f' + T.Cast("int32x{PIXELS}", T.Shuffle([pairs], [{high}])) * {w1}'
        )
    if c == 1:
        store = sums[0]
    else:
        picks = ", ".join(str(k * PIXELS + i) for i in range(PIXELS) for k in range(c))
        store = f"T.Shuffle([{', '.join(sums)}], [{picks}])"
    scalar = _pixel_sum(c, "x", "k")
    return (
        f"for xo in range(width // {PIXELS}):\n"
        f"    pairs: T.let = {pairs}\n"
        f"    buf[T.Ramp({slot} + xo * {PIXELS * c}, 1, {PIXELS * c})] ="
        f" {_short(store, PIXELS * c)}\n"
        f"for x in range(width // {PIXELS} * {PIXELS}, width):\n"
        f"    for k in range({c}):\n"
        f"        buf[{slot} + x * {c} + k] = {_short(scalar)}\n"
    )


def _level(c: int, element: str) -> str:
    """The output level (int16 in [0, 255]) of element `element` of row y: OpenCV's vector
    formula (v_mul_hi of S >> 4 by the 16-bit weight, then a rounding shift by 2)."""
    terms = " + ".join(
        f'T.Cast("int16", T.Cast("int32", buf[{_SLOT.format(t=t, c=c)} + {element}])'
        f' * T.Cast("int32", T.Cast("int16", ytab[y * 4 + {2 + t}])) >> 16)'
        for t in range(2)
    )
    # in 16 bits throughout (each product's high half is at most 1020): 32 lanes a vector
    return f"T.min(T.max(({terms} + T.int16(2)) >> T.int16(2), T.int16(0)), T.int16(255))"


def _blob_finish(c: int, swap_rb: bool) -> str:
    """blobFromImage's finish of output row y: BLOB_PIXELS pixels a step, their levels
    computed as one vector of their interleaved channels' values (as the uint8 finish's), each
    channel's lanes then picked out by a shuffle into its plane, (level - mean[k]) * scale in
    float32; the last width % BLOB_PIXELS pixels one by one. (Each plane's levels read from
    the interleaved row, a channel's every c-th value, were loaded a lane at a time: 1080p to
    224x224 took 0.15 ms against 0.09 without the finish.)"""
    n = BLOB_PIXELS * c
    terms = " + ".join(
        f'T.Cast("int16x{n}", T.shift_right(T.Cast("int32x{n}", buf[T.Ramp('
        f'{_SLOT.format(t=t, c=c)} + xo * {n}, 1, {n})]) * T.Broadcast(T.Cast("int32",'
        f' T.Cast("int16", ytab[y * 4 + {2 + t}])), {n}), T.Broadcast(16, {n})))'
        for t in range(2)
    )
    level = (
        f"T.min(T.max(T.shift_right({terms} + T.Broadcast(T.int16(2), {n}),"
        f" T.Broadcast(T.int16(2), {n})), T.Broadcast(T.int16(0), {n})),"
        f" T.Broadcast(T.int16(255), {n}))"
    )
    vector, scalar = "", ""
    for k in range(c):
        plane = 2 - k if swap_rb and k < 3 else k
        lanes = f"T.Shuffle([levels], [{', '.join(str(i * c + k) for i in range(BLOB_PIXELS))}])"
        vector += (
            f"out[T.Ramp(({plane} * height + y) * width + xo * {BLOB_PIXELS}, 1, {BLOB_PIXELS})]"
            f' = (T.Cast("float32x{BLOB_PIXELS}", {lanes})'
            f" - T.Broadcast(mean[{k}], {BLOB_PIXELS})) * T.Broadcast(scale, {BLOB_PIXELS})\n"
        )
        scalar += (
            f"out[({plane} * height + y) * width + x] ="
            f' (T.Cast("float32", {_level(c, f"x * {c} + {k}")}) - mean[{k}]) * scale\n'
        )
    return (
        f"for xo in range(width // {BLOB_PIXELS}):\n"
        f"    levels: T.let = {level}\n"
        + indent(vector, 4)
        + f"for x in range(width // {BLOB_PIXELS} * {BLOB_PIXELS}, width):\n"
        + indent(scalar, 4)
    )


@functools.cache
def source(
    channels: int, blob: bool, swap_rb: bool, permuted: bool, groups: int = 1
) -> tuple[str, str]:
    """(name, TVMScript) of the kernel for `channels`-channel images; `blob`: blobFromImage's
    finish, float32 (level - mean[c]) * scale into plane c (the first three mirrored for
    `swap_rb`), else uint8 levels interleaved like the source's; `permuted`: the horizontal
    pass by byte permutes (_horizontal_permuted) in `groups` groups a step."""
    c = channels
    name = f"resize_linear_u8_c{c}" + ("_permuted" if permuted else "")
    name += f"_g{groups}" if permuted and groups > 1 else ""
    if not blob:
        store = f'out[y * width * {c} + {{x}}] = T.Cast("uint8", {_level(c, "{x}")})\n'
        finish = columns(store, "0", f"width * {c}", LANES)
        out_dtype, mean_arg, mean_buffer, scale_arg = "uint8", "", "", ""
    else:
        name += "_blob" + ("_swap" if swap_rb else "")
        finish = _blob_finish(c, swap_rb)
        out_dtype = "float32"
        mean_arg = "\n    mean_handle: T.handle,"
        mean_buffer = '\n    mean = T.match_buffer(mean_handle, (4,), "float32", align=4)'
        scale_arg = "\n    scale: T.float32,"
    text = _KERNEL.format(
        name=name,
        out_dtype=out_dtype,
        mean_arg=mean_arg,
        mean_buffer=mean_buffer,
        scale_arg=scale_arg,
        channels=c,
        horizontal=indent(_horizontal_permuted(c, groups) if permuted else _horizontal(c), 24),
        finish=indent(finish, 12),
    )
    return name, text


class Plan:
    """OpenCV's tables of a LINEAR resize of an (h, w, channels) uint8 image to (height,
    width), as the kernel reads them: `xtab` (each output pixel's first source pixel's byte
    offset, then its two 11-bit weights), `ytab` (each output row's two source rows, then their
    weights). `cut` (blobFromImage's crop): the resize is to `cut`'s (full width, full height),
    of which the kernel computes the (width, height) from (left, top)."""

    def __init__(self, h, w, channels, width, height, sx, sy, cut=None):
        from gdp.ops import resize_tables

        if w < 2 or h < 1 or width < 1 or height < 1 or channels not in CHANNELS:
            raise InputError(
                f"resize plan: expected a source at least 2 wide of 1-4 channels and an"
                f" output of at least 1x1, got {h}x{w}x{channels} -> {height}x{width}"
            )
        full_width, full_height, left, top = cut or (width, height, 0, 0)
        if left < 0 or top < 0 or left + width > full_width or top + height > full_height:
            raise InputError(f"resize plan: a {width}x{height} cut at {left},{top} of {cut}")
        self.h, self.w, self.channels, self.width, self.height = h, w, channels, width, height
        first, weights = resize_tables.linear_taps_fixed(w, full_width, sx)
        first, weights = first[left : left + width, 0], weights[left : left + width]
        right = first == w - 1  # OpenCV's (w - 1, w - 1) pair: read as (w - 2, w - 1)
        first = np.where(right, w - 2, first)
        weights = np.where(right[:, None], [0, 1 << BITS], weights)
        self.xtab = np.concatenate([first * channels, weights[:, 0], weights[:, 1]]).astype(
            np.int32
        )
        self._permutes(first * channels, weights, channels, w * channels)
        rows, row_weights = resize_tables.linear_rows_opencv(h, full_height, sy)
        table = np.concatenate([rows, row_weights], axis=1)[top : top + height]
        self.ytab = np.ascontiguousarray(table, np.int32).reshape(-1)

    def _permutes(self, offsets, weights, channels: int, row: int) -> None:
        """The tables of _horizontal_permuted: vtab (each output value's pair of weights,
        then each step's groups' window starts), vidx (each step's byte indices into its
        groups' windows, two a value), `vectors` (the whole steps), `groups` (the fewest of
        GROUPS whose windows hold their values' source bytes); `permutes`: whether some do
        (not for downscales by about 15 or more: those take _horizontal)."""
        first = (offsets[:, None] + np.arange(channels)).reshape(-1)  # each value's byte
        pairs = np.repeat(weights[:, 0] | (weights[:, 1] << 16), channels)
        count = first.size
        steps = -(-count // STEP)
        padded = np.concatenate([first, np.full(steps * STEP - count, first[-1])])
        for groups in GROUPS:
            # A window starts at its group's first byte, or ends with the row (it reads no
            # further): never after the group's first byte, so no index is negative
            grouped = padded.reshape(steps, groups, STEP // groups)
            bases = np.minimum(grouped.min(axis=2), max(row - WINDOW, 0))
            picks = np.stack([grouped, grouped + channels], axis=3) - bases[:, :, None, None]
            fits = bool(row >= WINDOW and picks.max() < WINDOW)
            if fits:
                break
        self.permutes = fits
        self.groups = groups
        self.vidx = (picks if self.permutes else np.zeros(1)).astype(np.int8).reshape(-1)
        self.vtab = np.concatenate([pairs, bases.reshape(-1)]).astype(np.int32)
        self.vectors = count // STEP  # the last step's values past the row are not the row's

    @functools.cached_property
    def tables(self) -> tuple:
        """xtab, vtab, vidx and ytab as the kernel's tensors, made once (a plan is kept for
        the sizes met last: gdp.cv2.geometry.linear_plan)."""

        return host_tensors(self.xtab, self.vtab, self.vidx, self.ytab)


def _run(image: np.ndarray, plan: Plan, out: np.ndarray, blob: bool, swap_rb, extra) -> None:

    permuted = plan.permutes and permutes_bytes()  # VBMI (which implies AVX-512 BW)
    name, text = source(plan.channels, blob, bool(swap_rb), permuted, plan.groups)
    values = plan.height * plan.width * plan.channels
    most = max(1, min(MAX_STRIPS, plan.height, values // STRIP_VALUES))
    strips = strips_for(image.nbytes + out.nbytes, most)  # a small one on this thread
    buf = scratch("resize_rows", strips * 2 * plan.width * plan.channels, np.int16)
    tags = scratch("resize_tags", strips * 2, np.int32)
    flat = np.ascontiguousarray(image).reshape(-1)
    mean, scale = extra if blob else ((), ())
    run_strips(
        name, text, flat, out.reshape(-1), *plan.tables, buf, tags, *mean,
        plan.w * plan.channels, plan.width, plan.height, *scale, plan.vectors, strips,
    )  # fmt: skip


def _check(image: np.ndarray, plan: Plan) -> None:
    if not (isinstance(image, np.ndarray) and image.dtype == np.uint8 and image.ndim in (2, 3)):
        raise InputError(f"resize: expected a uint8 image (h, w[, c]), got {describe(image)}")
    channels = image.shape[2] if image.ndim == 3 else 1
    if (image.shape[0], image.shape[1], channels) != (plan.h, plan.w, plan.channels):
        raise InputError(
            f"resize: the plan is for {plan.h}x{plan.w}x{plan.channels}, got {image.shape}"
        )
    if max(image.size, plan.height * plan.width * plan.channels) > MAX_VALUES:
        raise InputError(f"resize: {image.shape} -> {plan.height}x{plan.width}, over int32")


def resize(image: np.ndarray, plan: Plan, out: np.ndarray | None = None) -> np.ndarray:
    """The resized uint8 image, (height, width[, channels]) as `image` is (h, w[, channels])
    (or into `out`, which must not overlap `image`)."""
    _check(image, plan)
    out = output(out, (plan.height, plan.width) + image.shape[2:], np.uint8, "resize")
    _run(image, plan, out, False, False, ())
    return out


def blob(image: np.ndarray, plan: Plan, swap_rb: bool, mean, scale: float, out=None):
    """blobFromImage's planes of the resized image: float32 (channels, height, width), channel
    c = (level - float32(mean[c])) * float32(scale), the first three mirrored for swap_rb;
    written into `out` (a C-contiguous float32 array of that size) when given."""
    _check(image, plan)
    shape = (plan.channels, plan.height, plan.width)
    if out is None:
        out = empty(shape, np.float32)
    elif out.dtype != np.float32 or out.shape != shape or not out.flags.c_contiguous:
        raise InputError(f"blob: expected out as float32 {shape}, got {describe(out)}")
    mean4 = np.zeros(4, np.float32)
    mean4[: min(4, len(mean))] = np.asarray(mean, np.float64)[:4]
    _run(image, plan, out, True, swap_rb, ((mean4,), (float(np.float32(scale)),)))
    return out
