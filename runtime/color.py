"""cv2.cvtColor of uint8 images as hand-written TIR kernels for the host CPU: channel orders
(BGR<->RGB, adding or dropping alpha, gray to colour), gray, YCrCb, HSV and Lab, NV12/NV21 to
BGR/RGB and HSV to BGR/RGB, with OpenCV's arithmetic (gdp.ops.color's, its weights and tables
from gdp.ops.color_tables), bit for bit.

Why by hand: as programs, the interleaved channels were read a lane at a time and HSV's and
Lab's tables gathered a lane at a time: at 1080p BGR2GRAY took 0.31 ms (OpenCV 0.26), BGR2HSV
3.9 ms (OpenCV 1.1), BGR2Lab 14.5 ms (OpenCV 4.6); NV12 and uint8 HSV2BGR compiled per size.

How: 64 pixels a step. Their interleaved channels are loaded as one vector of 64 * channels
bytes and split into one vector a channel by shuffles (LLVM turns them into byte permutes); the
arithmetic runs in 32-bit lanes; the output channels are interleaved by one shuffle and stored
as one vector. An image whose pixel count is not a multiple of 64 ends with the 64 pixels up
to its last (overlapping the step before: those values are written twice, the same), and one of
fewer than 64 pixels runs padded to 64 on the host. NV12/NV21 and HSV2BGR, which need a
pixel's row or column, step along each row the same way (_ROWS_KERNEL).
- HSV: OpenCV divides by tables, sdiv[v] = round((255 << 12) / v) and hdiv[d] = round((180 <<
  12) / (6 d)). With AVX-512 VBMI the tables are looked up, 64 values a byte permute, and the
  arithmetic runs in 16- and 32-bit lanes of interleaved order (_hsv_permuted: 1080p 1.26 ->
  0.69 ms); elsewhere they are a float32 division and a round, 16 lanes an instruction: equal
  to the tables for every v and d in 1..255 (tests/gdp/cv2/test_color_kernel.py checks every
  colour of both).
- Lab: the gamma and cube-root tables are gathered, with AVX-512's vpgatherdd (16 lanes an
  instruction) where the CPU has it, else a lane at a time.
- HSV2BGR: float32 as OpenCV, its products kept from fusing into fmas that OpenCV does not
  make and its one fma made explicit (_from_hsv); the column where OpenCV's vector loop stops
  truncating and its scalar tail rounds is a run-time input.

The pixels are split into strips (whole steps) that run on TVM's pool.
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple

import numpy as np

from gdp.errors import InputError
from gdp.ops import color_tables as tables
from gdp.runtime.launch import host_tensors, run_strips
from gdp.runtime.lut import permutes_bytes
from gdp.runtime.tir_text import byte_lookup, byte_shuffle, describe, indent
from gdp.runtime.workspace import empty, output

# Pixels a step.
LANES = 64
# Pixels per strip at least, and strips at most.
STRIP_PIXELS = 1 << 15
MAX_STRIPS = 16
# Flat offsets (pixels times channels) are int32.
MAX_VALUES = (1 << 31) - 1

# gdp.ops.color's conversions these kernels run, by its names: their source channel counts.
OPS = {
    "reorder": (3, 4),
    "gray_to_color": (1,),
    "to_gray": (3, 4),
    "to_ycrcb": (3, 4),
    "to_hsv": (3, 4),
    "to_lab": (3, 4),
    "nv_to_rgb": (1,),
    "from_hsv": (3,),
}

_KERNEL = """
@T.prim_func
def {name}(img_handle: T.handle, out_handle: T.handle,{tables} n: T.int32, strips: T.int32):
    T.func_attr({{"global_symbol": "{name}", "tir.noalias": True}})
    size = T.int32()
    out_size = T.int32()
    img = T.match_buffer(img_handle, (size,), "uint8", align=1)
    out = T.match_buffer(out_handle, (out_size,), "uint8", align=1)
{table_buffers}    for s in T.parallel(strips):
        for k in range(n // {lanes} * (s + 1) // strips - n // {lanes} * s // strips):
{step}
        if s == strips - 1 and n % {lanes} != 0:
{last}
"""

# The conversions that need a pixel's row or column (NV12/NV21: (h * 3 / 2, w) -> (h, w, 3);
# HSV2BGR: its column), a row at a time: a row's steps from column 0, and if w is not a multiple
# of 64, the 64 columns up to its last (even: NV's chroma pairs stay aligned).
_ROWS_KERNEL = """
@T.prim_func
def {name}(
    img_handle: T.handle,
    out_handle: T.handle,{tables}
    h: T.int32,
    w: T.int32,{scalars}
    strips: T.int32,
):
    T.func_attr({{"global_symbol": "{name}", "tir.noalias": True}})
    size = T.int32()
    out_size = T.int32()
    img = T.match_buffer(img_handle, (size,), "uint8", align=1)
    out = T.match_buffer(out_handle, (out_size,), "uint8", align=1)
{table_buffers}    for s in T.parallel(strips):
        for y in range(h * s // strips, h * (s + 1) // strips):
            for k in range(w // {lanes}):
{step}
            if w % {lanes} != 0:
{last}
"""

_TABLE = '    {name} = T.match_buffer({name}_handle, ({size},), "{dtype}", align=4)\n'

_INT = f"int32x{LANES}"
_BYTE = f"uint8x{LANES}"


def _pixels(scn: int) -> str:
    """The step's pixels (from pixel `p`): one vector of their interleaved channels."""
    return f"img[T.Ramp(p * {scn}, 1, {LANES * scn})]"


def _channel(c: int, scn: int) -> str:
    """Channel c of the step's pixels as 32-bit lanes."""
    if scn == 1:
        return f'T.Cast("{_INT}", img[T.Ramp(p, 1, {LANES})])'
    picks = ", ".join(str(scn * i + c) for i in range(LANES))
    return f'T.Cast("{_INT}", T.Shuffle([{_pixels(scn)}], [{picks}]))'


def _store(planes: list[str]) -> str:
    """The store of the step's output channels (32-bit lanes in [0, 255]), interleaved."""
    planes = [f'T.Cast("{_BYTE}", {p})' for p in planes]
    dcn = len(planes)
    if dcn == 1:
        return f"out[T.Ramp(p, 1, {LANES})] = {planes[0]}"
    picks = ", ".join(str(c * LANES + i) for i in range(LANES) for c in range(dcn))
    return f"out[T.Ramp(p * {dcn}, 1, {LANES * dcn})] = T.Shuffle([{', '.join(planes)}], [{picks}])"


def _clamp(value: str) -> str:
    return f"T.max(T.min({value}, 255), 0)"


def _reorder(scn: int, order: list[int]) -> str:
    """The output's channels picked from the source's (-1: an alpha of 255): 64 output bytes at
    a time, each one shuffle of the one or two 64-byte windows of the source that hold them
    (and a vector of 255s), which LLVM makes a byte permute of two registers, stored on its own.
    (One shuffle of the whole step ran 5x slower where it adds an alpha. The parts joined into
    one store of the step took 1.3-1.5x the time of a 480p BGR2RGB in cache; at 1080p and 4K
    both forms, and OpenCV's, move the bytes at memory's speed.)"""
    dcn, size = len(order), LANES * scn
    stores = []
    for first in range(0, LANES * dcn, 64):
        picks = [
            None if order[v % dcn] < 0 else scn * (v // dcn) + order[v % dcn]
            for v in range(first, first + 64)
        ]
        shuffle = byte_shuffle(f"p * {scn}", size, picks)
        stores.append(f"out[T.Ramp(p * {dcn} + {first}, 1, 64)] = {shuffle}")
    return "\n".join(stores)


def _rgb(scn: int, bidx: int) -> list[str]:
    """`r = `, `g = `, `b = ` lines of the step's colours of a source whose blue is `bidx`."""
    return [f"{name} = {_channel(c, scn)}" for name, c in (("r", 2 - bidx), ("g", 1), ("b", bidx))]


def _gray(scn: int, bidx: int, avx512: bool) -> list[str]:
    if avx512:
        return _gray_pairs(scn, bidx)
    wr, wg, wb = tables.GRAY_FIXED_RGB
    shift = tables.GRAY_FIXED_SHIFT
    gray = f"(r * {wr} + g * {wg} + b * {wb} + {1 << (shift - 1)}) >> {shift}"
    return [*_rgb(scn, bidx), _store([gray])]


def _gray_pairs(scn: int, bidx: int) -> list[str]:
    """The gray sum as AVX-512's multiply-add of 16-bit pairs (vpmaddwd), 16 pixels at a time:
    their (blue, green) and (red, red) pairs, each one byte shuffle of the 64-byte window that
    holds the 16 pixels (a shuffle of two vectors came out as byte inserts), widened to 16 bits,
    times (wb, wg) and (wr, 0), summed in 32 bits with the rounding 2^14.
    (Three 32-bit products of every pixel took 12 multiplies and the widening of three channels
    a step: 1080p BGR 0.13 -> 0.062 ms, the kernel alone.)"""
    wr, wg, wb = tables.GRAY_FIXED_RGB
    shift = tables.GRAY_FIXED_SHIFT

    def weights(first: int, second: int) -> str:
        pair = ", ".join(f"{i}, {16 + i}" for i in range(16))
        return (
            f"T.Shuffle([T.Broadcast(T.int16({first}), 16),"
            f" T.Broadcast(T.int16({second}), 16)], [{pair}])"
        )

    size = LANES * scn
    sums = []
    for k in range(LANES // 16):
        start = min(16 * scn * k, size - 64)  # the window stays inside the step's pixels
        window = f"img[T.Ramp(p * {scn} + {start}, 1, 64)]"
        first = 16 * scn * k - start
        pixel = [first + scn * i for i in range(16)]
        blue_green = ", ".join(f"{v + bidx}, {v + 1}" for v in pixel)
        red = ", ".join(f"{v + 2 - bidx}, {v + 2 - bidx}" for v in pixel)
        pairs = {
            "bg": f"T.Shuffle([{window}], [{blue_green}])",
            "rr": f"T.Shuffle([{window}], [{red}])",
        }
        madds = [
            f'T.call_llvm_pure_intrin("int32x16", "llvm.x86.avx512.pmaddw.d.512",'
            f' T.Cast("int16x32", {pairs[name]}), {weights(*w)})'
            for name, w in (("bg", (wb, wg)), ("rr", (wr, 0)))
        ]
        sums.append(" + ".join([*madds, f"T.Broadcast({1 << (shift - 1)}, 16)"]))
    gray = f"T.Shuffle([{', '.join(sums)}], [{', '.join(map(str, range(LANES)))}]) >> {shift}"
    return [_store([gray])]


def _ycrcb(scn: int, bidx: int) -> list[str]:
    shift, (wr, wg, wb) = tables.YUV_SHIFT, tables.Y_FIXED
    half, bias = 1 << (shift - 1), (128 << shift) + (1 << (shift - 1))
    # >> of int32 is arithmetic: OpenCV's floor of a negative product
    return [
        *_rgb(scn, bidx),
        f"y = (r * {wr} + g * {wg} + b * {wb} + {half}) >> {shift}",
        f"cr = {_clamp(f'((r - y) * {tables.CR_FIXED} + {bias}) >> {shift}')}",
        f"cb = {_clamp(f'((b - y) * {tables.CB_FIXED} + {bias}) >> {shift}')}",
        _store(["y", "cr", "cb"]),
    ]


def _divided(numerator: int, divisor: str) -> str:
    """round(numerator / divisor) in float32 (a divisor of 0 taken as 1: what it multiplies is 0
    there), as 32-bit lanes."""
    quotient = (
        f"T.Broadcast(T.float32({numerator}), {LANES})"
        f' / T.Cast("float32x{LANES}", T.max({divisor}, 1))'
    )
    return f'T.Cast("{_INT}", T.round({quotient}))'


def _hsv(scn: int, bidx: int) -> list[str]:
    shift = tables.HSV_SHIFT
    half = 1 << (shift - 1)
    sdiv = _divided(255 << shift, "v")
    hdiv = _divided((180 << shift) // 6, "diff")  # 122880: (180 << 12) / 6 exactly
    hue = "T.Select(v == r, g - b, T.Select(v == g, b - r + diff * 2, r - g + diff * 4))"
    return [
        *_rgb(scn, bidx),
        "v = T.max(T.max(r, g), b)",
        "diff = v - T.min(T.min(r, g), b)",
        f"sat = (diff * {sdiv} + {half}) >> {shift}",
        f"hue = ({hue} * {hdiv} + {half}) >> {shift}",
        _store(["T.Select(hue < 0, hue + 180, hue)", "sat", "v"]),
    ]


# HSV with AVX-512 VBMI (_hsv_permuted): OpenCV's division tables as the bytes of their values,
# table k * 256 + i the byte (k % 3) of sdiv[i] (k < 3) or hdiv[i]: sdiv is at most 255 << 12,
# hdiv 180 << 12 / 6, both under 2^24.
_DIV_PLANES = 6
_ZERO_BYTES = f"T.Broadcast(T.uint8(0), {LANES})"
_ZERO_WORDS = "T.Broadcast(T.int16(0), 32)"


def _hsv_permuted(scn: int, bidx: int) -> list[str]:
    """BGR2HSV of the step's 64 pixels with OpenCV's tables looked up, not divided (the float32
    divisions of _hsv took 0.37 of a 1080p image's 1.3 ms): each table's 64 values as three
    byte lookups (vpermi2b, 256 entries in four registers) into the buffer `divs`.
    The channels are split by byte permutes, max, min and their difference taken in bytes; the
    hue's numerator in 16-bit lanes; the two products in 32-bit lanes. Bytes widen to words
    and words to double words by interleaving with zeros (or the high parts: a table's bytes,
    a word's sign) within each 128-bit lane (vpunpck*), which reorders the pixels, the same for
    every value; OpenCV's saturating packs (vpack*) narrow them back into the step's order.
    Bit for bit OpenCV's arithmetic, as _hsv."""
    shift = tables.HSV_SHIFT
    half = 1 << (shift - 1)
    lines = [f"{name} = {_split(c, scn)}" for name, c in (("r", 2 - bidx), ("g", 1), ("b", bidx))]
    lines += ["v = T.max(T.max(r, g), b)", "d = v - T.min(T.min(r, g), b)"]
    for table, index in (("s", "v"), ("h", "d")):
        first = 0 if table == "s" else 3
        for k, part in enumerate(("lo", "mid", "hi")):
            lines.append(f"{table}{part} = {byte_lookup('divs', (first + k) * 256, index)}")
    for i in (0, 1):  # the step's two halves as 16-bit lanes (in interleaved order)
        lines += [f"{name}{i} = {_widen_bytes(name, _ZERO_BYTES, i)}" for name in "vrgbd"]
        lines += [
            f"sw{i} = {_widen_bytes('slo', 'smid', i)}",
            f"sx{i} = {_widen_bytes('shi', _ZERO_BYTES, i)}",
            f"hw{i} = {_widen_bytes('hlo', 'hmid', i)}",
            f"hx{i} = {_widen_bytes('hhi', _ZERO_BYTES, i)}",
            f"n{i} = T.Select(v{i} == r{i}, g{i} - b{i}, T.Select(v{i} == g{i},"
            f" b{i} - r{i} + d{i} * T.int16(2), r{i} - g{i} + d{i} * T.int16(4)))",
            f"ns{i} = T.shift_right(n{i}, T.Broadcast(T.int16(15), 32))",  # the sign
        ]
        sat, hue = (
            [
                f"({_widen_words(value, high, j)} * {_widen_words(*divisor, j)} + {half})"
                f" >> {shift}"
                for j in (0, 1)
            ]
            for value, high, divisor in (
                (f"d{i}", _ZERO_WORDS, (f"sw{i}", f"sx{i}")),
                (f"n{i}", f"ns{i}", (f"hw{i}", f"hx{i}")),
            )
        )
        lines += [
            f"sat{i} = {_pack('packusdw', 'int16x32', *sat)}",
            f"hq{i} = {_pack('packssdw', 'int16x32', *hue)}",
            f"hue{i} = T.Select(hq{i} < {_ZERO_WORDS}, hq{i} + T.int16(180), hq{i})",
        ]
    lines += [
        f"{name} = {_pack('packuswb', 'uint8x64', name + '0', name + '1')}"
        for name in ("hue", "sat")
    ]
    return [*lines, _interleave(["hue", "sat", "v"])]


def _split(c: int, scn: int) -> str:
    """Channel c of the step's pixels (from pixel `p`) as 64 bytes: two byte permutes of the
    64-byte windows that hold them."""
    picks = [scn * i + c for i in range(LANES)]
    window = [f"img[T.Ramp(p * {scn} + {64 * k}, 1, 64)]" for k in range(scn)]
    first = ", ".join(str(q if q < 128 else 0) for q in picks)
    low = f"T.Shuffle([{window[0]}, {window[1]}], [{first}])"
    if scn == 3:
        rest = ", ".join(str(i if q < 128 else q - 64) for i, q in enumerate(picks))
        return f"T.Shuffle([{low}, {window[2]}], [{rest}])"
    second = ", ".join(str(q - 128 if q >= 128 else 0) for q in picks)
    high = f"T.Shuffle([{window[2]}, {window[3]}], [{second}])"
    rest = ", ".join(str(i if q < 128 else 64 + i) for i, q in enumerate(picks))
    return f"T.Shuffle([{low}, {high}], [{rest}])"


def _interleave(planes: list[str]) -> str:
    """The store of three 64-byte planes interleaved: each 64 output bytes two byte permutes."""
    stores = []
    for first in range(0, 3 * LANES, 64):
        out = range(first, first + 64)
        two = ", ".join(str(q // 3 + 64 * (q % 3) if q % 3 < 2 else 0) for q in out)
        three = ", ".join(str(i if q % 3 < 2 else 64 + q // 3) for i, q in enumerate(out))
        value = (
            f"T.Shuffle([T.Shuffle([{planes[0]}, {planes[1]}], [{two}]), {planes[2]}], [{three}])"
        )
        stores.append(f"out[T.Ramp(p * 3 + {first}, 1, 64)] = {value}")
    return "\n".join(stores)


def _widen_bytes(low: str, high: str, half: int) -> str:
    """Words low | high << 8 of the bytes of one half of each 128-bit lane (vpunpck[lh]bw)."""
    picks = ", ".join(
        f"{16 * lane + i}, {64 + 16 * lane + i}"
        for lane in range(4)
        for i in range(8 * half, 8 * half + 8)
    )
    return f'T.reinterpret("int16x32", T.Shuffle([{low}, {high}], [{picks}]))'


def _widen_words(low: str, high: str, half: int) -> str:
    """Double words low | high << 16 of the words of one half of each 128-bit lane
    (vpunpck[lh]wd)."""
    picks = ", ".join(
        f"{8 * lane + i}, {32 + 8 * lane + i}"
        for lane in range(4)
        for i in range(4 * half, 4 * half + 4)
    )
    return f'T.reinterpret("int32x16", T.Shuffle([{low}, {high}], [{picks}]))'


def _pack(op: str, dtype: str, first: str, second: str) -> str:
    """AVX-512 BW's saturating pack `op` of two vectors, each 128-bit lane the first's part
    then the second's: the inverse of _widen_*'s halves 0 and 1."""
    return f'T.call_llvm_pure_intrin("{dtype}", "llvm.x86.avx512.{op}.512", {first}, {second})'


def _nv(bidx: int, uv_first_u: bool) -> list[str]:
    """The step at column `x` of row `y`: its luma, the chroma row y // 2 below the luma plane
    (u and v interleaved, one pair for two pixels), OpenCV's BT.601 fixed point."""
    shift = tables.NV_SHIFT
    u_at, v_at = (0, 1) if uv_first_u else (1, 0)

    def chroma(offset: int) -> str:
        picks = ", ".join(str(i // 2 * 2 + offset) for i in range(LANES))
        pairs = f"img[T.Ramp((h + y // 2) * w + x, 1, {LANES})]"
        return f'T.Cast("{_INT}", T.Shuffle([{pairs}], [{picks}])) - 128'

    luma = f'T.Cast("{_INT}", img[T.Ramp(p, 1, {LANES})])'
    rgb = {
        "r": f"yy + v * {tables.NV_CVR}",
        "g": f"yy + v * {tables.NV_CVG} + u * {tables.NV_CUG}",
        "b": f"yy + u * {tables.NV_CUB}",
    }
    planes = {c: _clamp(f"({value}) >> {shift}") for c, value in rgb.items()}
    order = ["b", "g", "r"] if bidx == 0 else ["r", "g", "b"]
    return [
        "p = y * w + x",
        f"u = {chroma(u_at)}",
        f"v = {chroma(v_at)}",
        f"yy = T.max({luma} - 16, 0) * {tables.NV_CY} + {1 << (shift - 1)}",
        _store([planes[c] for c in order]),
    ]


# HSV2BGR's sector -> the (b, g, r) picks from (v, t1, t2, t3) (OpenCV's sector_data).
_SECTORS = [(1, 3, 0), (1, 0, 2), (3, 0, 1), (0, 2, 1), (0, 1, 3), (2, 1, 0)]


def _f32(value: float) -> str:
    """A float32 constant in every lane (the float32 nearest `value`, written exactly)."""
    return f"T.Broadcast(T.float32({float(np.float32(value))!r}), {LANES})"


def _times(levels: str, factor: float, table: str, avx512: bool) -> str:
    """float32(levels) * float32(factor) rounded as a product of its own, which LLVM must not
    fuse into the additions after it: AVX-512's multiply with its rounding mode given, else a
    load from `table`, where the host has computed the products."""
    if not avx512:
        return f"{table}[{levels}]"
    values = f'T.Cast("float32x{LANES}", {levels})'
    return _by_sixteen(
        lambda lanes: (
            'T.call_llvm_pure_intrin("float32x16", "llvm.x86.avx512.mul.ps.512",'
            f" T.Shuffle([{values}], [{lanes}]),"
            f" T.Broadcast(T.float32({float(np.float32(factor))!r}), 16), T.int32(8))"
        )
    )


def _by_sixteen(call) -> str:
    """A step's 64 lanes from four 16-lane AVX-512 intrinsics: `call(lanes)` is the one over
    those lanes (their indices, comma-separated) of its 64-lane operands."""
    parts = [call(", ".join(str(j + i) for i in range(16))) for j in range(0, LANES, 16)]
    return f"T.Shuffle([{', '.join(parts)}], [{', '.join(map(str, range(LANES)))}])"


def _from_hsv(bidx: int, avx512: bool) -> list[str]:
    """HSV2BGR of the step at column `x` of row `y`, gdp.ops.color.from_hsv's float32
    arithmetic: h * 6/180, s * 1/255 and v * 1/255 each rounded on its own (_times), 1 - s * f
    as one fused multiply-add (as OpenCV's build contracts it), and x*255 truncated in the
    columns before `vector` (OpenCV's vector loop) and rounded after (its scalar tail)."""
    f32 = f"float32x{LANES}"

    def fused(a: str, b: str) -> str:  # 1 - a * b, rounded once
        negated = f"{_f32(0)} - {a}"
        return (
            f'T.call_llvm_pure_intrin("{f32}", "llvm.fma.v{LANES}f32", {negated}, {b}, {_f32(1)})'
        )

    tab = ["vf", "t1", "t2", "t3"]
    lines = [
        "p = y * w + x",
        f"hf = {_times(_channel(0, 3), 6.0 / 180.0, 'hue', avx512)}",
        f"sf = {_times(_channel(1, 3), 1.0 / 255.0, 'unit', avx512)}",
        f"vf = {_times(_channel(2, 3), 1.0 / 255.0, 'unit', avx512)}",
        "whole = T.floor(hf)",
        f"sector = whole - T.floor(whole * {_f32(1.0 / 6.0)}) * {_f32(6)}",
        f"t1 = vf * ({_f32(1)} - sf)",
        f"t2 = vf * {fused('sf', 'hf - whole')}",
        f"t3 = vf * {fused('sf', f'{_f32(1)} - (hf - whole)')}",
    ]
    planes = []
    for c in range(3):  # b, g, r
        value = tab[_SECTORS[5][c]]
        for k in range(4, -1, -1):
            value = f"T.Select(sector == {_f32(k)}, {tab[_SECTORS[k][c]]}, {value})"
        lines.append(f"c{c} = ({value}) * {_f32(255)}")
        cut = f"T.Ramp(x, 1, {LANES}) < T.Broadcast(vector, {LANES})"
        level = f"T.Select({cut}, T.floor(c{c}), T.round(c{c}))"
        planes.append(f'T.Cast("{_INT}", T.max(T.min({level}, {_f32(255)}), {_f32(0)}))')
    return [*lines, _store(planes if bidx == 0 else planes[::-1])]


def _gather(table: str, index: str, avx512: bool) -> str:
    """table[index] of an int32 table for 32-bit lanes of indices: AVX-512's 16-lane gathers,
    else TVM's load (a lane at a time)."""
    if not avx512:
        return f"{table}[{index}]"
    return _by_sixteen(
        lambda lanes: (
            'T.call_llvm_pure_intrin("int32x16", "llvm.x86.avx512.gather.dpi.512",'
            f" T.Broadcast(T.int32(0), 16), T.address_of({table}[0]),"
            f" T.Shuffle([{index}], [{lanes}]), T.int16(-1), T.int32(4))"
        )
    )


def _lab(scn: int, bidx: int, avx512: bool) -> list[str]:
    _, _, coeffs = _lab_tables()
    shift, shift2 = tables.LAB_SHIFT, tables.LAB_SHIFT2
    half2 = 1 << (shift2 - 1)
    # L = (Lscale*fY + Lshift) >> shift2 with Lscale = 116*255/100 and Lshift = -16*255/100 in
    # shift2 fixed point, rounded as OpenCV's integer divisions round; a and b offset by 128.
    # Every numerator is positive for every uint8 colour (gdp.ops.color.to_lab).
    l_scale = (116 * 255 + 50) // 100
    l_shift = -((16 * 255 * (1 << shift2) + 50) // 100)
    offset = (128 << shift2) + half2
    lines = [
        f"{name}l = {_gather('gamma', name, avx512)}"
        for name in ("r", "g", "b")  # linear light, 255*8 units
    ]
    for name, row in (("fx", 0), ("fy", 1), ("fz", 2)):
        cr, cg, cb = (int(w) for w in coeffs[row])
        xyz = f"(rl * {cr} + gl * {cg} + bl * {cb} + {1 << (shift - 1)}) >> {shift}"
        lines.append(f"{name} = {_gather('cbrt', xyz, avx512)}")
    return [
        *_rgb(scn, bidx),
        *lines,
        _store(
            [
                _clamp(f"(fy * {l_scale} + {l_shift + half2}) >> {shift2}"),
                _clamp(f"((fx - fy) * 500 + {offset}) >> {shift2}"),
                _clamp(f"((fy - fz) * 200 + {offset}) >> {shift2}"),
            ]
        ),
    ]


@functools.cache
def _lab_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return tables.lab_u8_tables()


@functools.cache
def _lab_tensors() -> tuple:
    """The gamma and cube-root tables as the kernel's inputs, made once."""
    return host_tensors(*_lab_tables()[:2])


@functools.cache
def _div_tensors() -> tuple:
    """HSV's division tables as _hsv_permuted looks them up, made once."""
    planes = [(t >> (8 * k)) & 255 for t in tables.hsv_tables() for k in range(3)]
    return host_tensors(np.concatenate(planes).astype(np.uint8))


@functools.cache
def avx512() -> bool:
    """Whether this CPU has AVX-512 (F and BW): its 32-bit gathers, its multiplies with a
    rounding mode, its multiply-add of 16-bit pairs. Asked once: TVM's answer costs 0.25 ms."""
    from tvm.target import codegen

    from gdp.runtime.backends.tvm.kernels import host_target

    target = host_target()
    return all(codegen.target_has_features(f, target) for f in ("avx512f", "avx512bw"))


def _order(op: str, scn: int, params: dict) -> list[int]:
    """The output's source channel for reorder and gray_to_color (-1: alpha 255)."""
    if op == "gray_to_color":
        return [0, 0, 0] + ([-1] if params["dcn"] == 4 else [])
    order = [2, 1, 0] if params["swap"] else [0, 1, 2]
    if params["dcn"] == 4:
        order.append(3 if scn == 4 else -1)
    return order


@functools.cache
def source(
    op: str, scn: int, params: tuple, avx512: bool, vbmi: bool = False
) -> tuple[str, str, int]:
    """(name, TVMScript, output channels) of `op` on `scn` channels with `params` (sorted
    items of gdp.ops.color's keyword arguments), for a CPU with AVX-512 (F and BW) or not, and
    with VBMI or not."""
    kw = dict(params)
    name = f"cvt_{op}_c{scn}_" + "_".join(f"{k}{int(v)}" for k, v in params)
    table_args, table_buffers = "", ""
    if op in ("nv_to_rgb", "from_hsv"):
        tables_, buffers, scalars = "", "", ""
        if op == "nv_to_rgb":
            step = "\n".join(_nv(kw["bidx"], kw["uv_first_u"]))
        else:
            step = "\n".join(_from_hsv(kw["bidx"], avx512))
            scalars = " vector: T.int32,"
            name += "_avx512" if avx512 else ""
            if not avx512:  # the products as tables
                tables_ = " hue_handle: T.handle, unit_handle: T.handle,"
                buffers = _TABLE.format(name="hue", size=256, dtype="float32")
                buffers += _TABLE.format(name="unit", size=256, dtype="float32")
        text = _ROWS_KERNEL.format(
            name=name,
            tables=tables_,
            table_buffers=buffers,
            scalars=scalars,
            lanes=LANES,
            step=_indent(f"x = k * {LANES}\n{step}", 16),
            last=_indent(f"x = w - {LANES}\n{step}", 16),
        )
        return name, text, 3
    if op in ("reorder", "gray_to_color"):
        order = _order(op, scn, kw)
        lines, dcn = [_reorder(scn, order)], len(order)
    elif op == "to_lab":
        lines, dcn = _lab(scn, kw["bidx"], avx512), 3
        cbrt = _lab_tables()[1]
        table_args = " gamma_handle: T.handle, cbrt_handle: T.handle,"
        table_buffers = _TABLE.format(name="gamma", size=256, dtype="int32")
        table_buffers += _TABLE.format(name="cbrt", size=cbrt.size, dtype="int32")
        name += "_avx512" if avx512 else ""
    elif op == "to_hsv" and vbmi:
        lines, dcn = _hsv_permuted(scn, kw["bidx"]), 3
        table_args = " divs_handle: T.handle,"
        table_buffers = _TABLE.format(name="divs", size=_DIV_PLANES * 256, dtype="uint8")
        name += "_vbmi"
    else:
        if op == "to_gray":
            lines, dcn = _gray(scn, kw["bidx"], avx512), 1
            name += "_avx512" if avx512 else ""
        else:
            make = {"to_ycrcb": _ycrcb, "to_hsv": _hsv}[op]
            lines, dcn = make(scn, kw["bidx"]), 3
    step = "\n".join(lines)
    text = _KERNEL.format(
        name=name,
        tables=table_args,
        table_buffers=table_buffers,
        lanes=LANES,
        step=_indent(f"p = (n // {LANES} * s // strips + k) * {LANES}\n{step}", 12),
        last=_indent(f"p = n - {LANES}\n{step}", 12),
    )
    return name, text, dcn


def _indent(text: str, spaces: int) -> str:
    """`text`'s lines indented, each `name = value` made `name: T.let = value`: a plain
    assignment is a mutable local, which TVM allocates from its workspace in a parallel loop,
    at every step (measured: a 5x5 median ran 10x slower)."""
    return indent(re.sub(r"^([a-z_][a-z_0-9]*) = ", r"\1: T.let = ", text, flags=re.M), spaces)


def convert(image: np.ndarray, op: str, out: np.ndarray | None = None, **params) -> np.ndarray:
    """cv2.cvtColor's uint8 conversion `op` (gdp.ops.color's name and keyword arguments:
    reorder(swap, dcn), gray_to_color(dcn), to_gray/to_ycrcb/to_hsv/to_lab(bidx),
    nv_to_rgb(bidx, uv_first_u), from_hsv(bidx, simd_block)) of an image (h, w) or (h, w,
    channels), as a new uint8 array (h, w) or (h, w, out channels); NV12/NV21 (h * 3 / 2, w)
    -> (h, w, 3). Written into `out` (which may be `image`) where given, except NV12/NV21 and
    HSV to BGR (row kernels: a new array)."""
    if op not in OPS:
        raise InputError(f"color.convert: expected one of {', '.join(OPS)}, got {op!r}")
    if not (isinstance(image, np.ndarray) and image.dtype == np.uint8 and image.ndim in (2, 3)):
        got = describe(image)
        raise InputError(f"color.convert: expected a uint8 image (h, w[, c]), got {got}")
    scn = image.shape[2] if image.ndim == 3 else 1
    if scn not in OPS[op]:
        raise InputError(
            f"color.convert: {op} takes {' or '.join(map(str, OPS[op]))} channels, got {scn}"
        )
    if op == "nv_to_rgb":
        name, text, _ = source(op, scn, tuple(sorted(params.items())), avx512(), False)
        return _nv_to_rgb(image.reshape(image.shape[:2]), name, text)
    if op == "from_hsv":
        block = params.pop("simd_block", 0)
        name, text, _ = source(op, scn, tuple(sorted(params.items())), avx512(), False)
        h, w = image.shape[:2]
        vector = w // block * block if block else 0
        tensors = () if avx512() else _hsv_tensors()
        return _by_rows(image, (h, w, 3), name, text, tensors, (vector,))
    return convert_prepared(image, prepared(op, scn, params), out)


class Conversion(NamedTuple):
    """A pixel-wise conversion's kernel as convert runs it, made once (prepared): for calls
    of one conversion, which then look nothing up (each lookup convert makes cost 2-5 us after
    a cache sweep: 20 us of a 1080p BGR2GRAY's 0.28 ms)."""

    name: str
    text: str
    dcn: int
    extra: tuple  # the kernel's tables


def prepared(op: str, scn: int, params: dict) -> Conversion:
    """The Conversion of `op` (reorder, gray_to_color, to_gray, to_ycrcb, to_hsv, to_lab:
    pixel-wise) from `scn` channels."""
    if op not in OPS or op in ("nv_to_rgb", "from_hsv") or scn not in OPS[op]:
        raise InputError(f"color.prepared: {op} of {scn} channels is not pixel-wise here")
    vbmi = op == "to_hsv" and permutes_bytes()
    name, text, dcn = source(op, scn, tuple(sorted(params.items())), avx512(), vbmi)
    extra = _lab_tensors() if op == "to_lab" else _div_tensors() if vbmi else ()
    return Conversion(name, text, dcn, extra)


def convert_prepared(
    image: np.ndarray, conversion: Conversion, out: np.ndarray | None = None
) -> np.ndarray:
    """convert's pixel-wise conversion of a uint8 image (h, w[, scn]), scn the one
    `conversion` was prepared for, as a new array (or into `out`, which may be `image`)."""
    h, w = image.shape[:2]
    n, scn, dcn = h * w, image.shape[2] if image.ndim == 3 else 1, conversion.dcn
    if n * max(scn, dcn) > MAX_VALUES:
        raise InputError(f"color.convert: {n} pixels of {max(scn, dcn)} channels, over int32")
    out = output(out, (h, w, dcn) if dcn > 1 else (h, w), np.uint8, "color.convert")
    if n == 0:
        return out
    flat = np.ascontiguousarray(image).reshape(-1)
    result = out.reshape(-1)
    if n < LANES:  # one step over the pixels padded to 64
        flat = np.concatenate([flat, np.zeros((LANES - n) * scn, np.uint8)])
        result = np.empty(LANES * dcn, np.uint8)
    strips = max(1, min(MAX_STRIPS, n // STRIP_PIXELS))
    run_strips(
        conversion.name, conversion.text, flat, result, *conversion.extra, max(n, LANES), strips
    )
    if n < LANES:
        out.reshape(-1)[:] = result[: n * dcn]
    return out


def _nv_to_rgb(image: np.ndarray, name: str, text: str) -> np.ndarray:
    rows, w = image.shape
    if rows % 3 != 0 or w % 2 != 0:
        raise InputError(
            f"color.convert: nv_to_rgb expected (h * 3 / 2, w) with h and w even, got {rows}x{w}"
        )
    return _by_rows(image, (rows * 2 // 3, w, 3), name, text, (), ())


def _by_rows(image: np.ndarray, shape: tuple, name: str, text: str, tensors, scalars):
    """Run a row kernel (_ROWS_KERNEL) of `image` into a new array of `shape` (h, w, 3); rows
    narrower than a step run padded to one on the host."""
    h, w = shape[:2]
    out = empty(shape, np.uint8)
    if out.size == 0:
        return out
    if max(image.size, out.size) * (LANES if w < LANES else 1) > MAX_VALUES:
        raise InputError(f"color.convert: a {image.shape} image, over int32 offsets")
    source, result = np.ascontiguousarray(image), out
    if w < LANES:
        source = np.zeros((image.shape[0], LANES) + image.shape[2:], np.uint8)
        source[:, :w] = image
        result = np.empty((h, LANES) + shape[2:], np.uint8)
    strips = max(1, min(MAX_STRIPS, h * w // STRIP_PIXELS, h))
    run_strips(
        name,
        text,
        source.reshape(-1),
        result.reshape(-1),
        *tensors,
        h,
        max(w, LANES),
        *scalars,
        strips,
    )
    if w < LANES:
        out[:] = result[:, :w]
    return out


@functools.cache
def _hsv_tensors() -> tuple:
    """HSV2BGR's tables, where the CPU lacks AVX-512, as the kernel's inputs, made once: float32
    h * 6/180 and x * 1/255 of every level, as OpenCV rounds them."""
    levels = np.arange(256, dtype=np.float32)
    return host_tensors(levels * np.float32(6.0 / 180.0), levels * np.float32(1.0 / 255.0))
