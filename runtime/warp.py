"""cv2.warpAffine (WARP_INVERSE_MAP semantics: dst(y, x) = src(M @ (x, y, 1))) as one
hand-written TIR kernel for the host CPU, with the arithmetic of gdp.ops.geometry.warp_affine
(OpenCV 4.11+'s: float32 source coordinates, float32 interpolation, saturate_cast).

Why by hand: as a graph, each output pixel's neighbours are gathers, which TVM's vector lanes
load one value at a time between lane extractions and insertions: at 1080p BGR the kernel took
38-65 ms, OpenCV 5.5 ms. Here a block of 16 output pixels runs as vectors bound by T.let, in
registers: its coordinates, positions and weights, its pixels fetched one load each (LINEAR: a
tap row's two pixels as one load of 2 * channels values, so the source must be at least 2
wide), joined by shuffles, interpolated, and stored as one vector. (An earlier form ran a block
in phases through small buffers, which TVM allocates from its workspace; LINEAR BGR 1080p took
5-8 ms so, 2.4 ms now, OpenCV 2.9-5.8; NEAREST 2.5-3.5 ms, 0.8 now, OpenCV 0.8-1.7.) A block's
coordinates are one float32 fma of 16 lanes, OpenCV's own formula (computed in float64 and cast,
NEAREST took 1.14 ms).
AVX-512's gather instruction fetches uint8 pixels on CPUs where it is fast (fast_gathers:
Intel's from Sapphire Rapids): a gray pixel, or a LINEAR tap row's pair of them, as the first
bytes of a word (a word at the image's last pixels is the image's last word, the bytes taken
later in it: 1080p gray rotated LINEAR 3.5 -> 2.3 ms, NEAREST 1.35 -> 1.1, OpenCV 2.3-2.6 and
1.05-1.25); BGR and BGRA pixels as words and pairs as double words. On AMD's Zen 4 a gather
measured slower than scalar loads (about 45 cycles for 16 words), and there, and for other
dtypes, each is one load.

The last columns of a row that do not fill a block are computed one by one with OpenCV's scalar
formula for the coordinate (see gdp.ops.geometry's WARP_VECTOR_BLOCK): which formula a pixel gets
decides its nearest neighbour at exact ties.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from gdp.errors import InputError
from gdp.runtime.launch import run_host_kernel
from gdp.runtime.tir_text import describe, indent, inline

# OpenCV's vector block (gdp.ops.geometry.WARP_VECTOR_BLOCK): a block's pixels take the vector
# formula, a row's last W % BLOCK the scalar one.
BLOCK = 16
NEAREST, LINEAR = 0, 1
CONSTANT, REPLICATE = 0, 1
DTYPES = ("uint8", "uint16", "float32")
CHANNELS = (1, 3, 4)
# Byte offsets into the source are int32.
MAX_BYTES = (1 << 31) - 1
# The output runs in tiles of TILE_ROWS rows and TILE_BLOCKS blocks, tiles of rows in parallel:
# a rotation's output row reads a slanted line across the source, a page a few pixels, and a
# tile keeps the pages it reads few (4K BGR rotate LINEAR 22.7 -> 17 ms, NEAREST 11.9 -> 10).
# One block wide and 32 rows tall read fewer again than 4 blocks and 16 rows: 4K BGR rotated
# by 30 degrees, LINEAR 14.5 -> 10.5 ms, NEAREST 6.8 -> 4.0 (OpenCV 12.9-13.6 and 6.3); by 5,
# 12.3 -> 10.4 and 6.2 -> 4.1; by 90 and at 1080p within the noise (0.90-1.05x OpenCV).
TILE_ROWS = 32
TILE_BLOCKS = 1


# CPUs (LLVM's names) whose AVX-512 gathers beat a load a lane: Intel's from Sapphire Rapids,
# which the gather data sampling flaw (and its microcode's slower gathers) does not touch. On
# Emerald Rapids (this project's VM), 1080p BGR rotated: NEAREST 3.4 -> 1.9 ms, LINEAR 9.2 ->
# 6.2 ms; on AMD's Zen 4 a gather of 16 words took about 45 cycles, slower than the loads.
FAST_GATHER_CPUS = frozenset(
    {"sapphirerapids", "emeraldrapids", "graniterapids", "graniterapids-d", "diamondrapids"}
)


@functools.cache
def fast_gathers() -> bool:
    """Whether this CPU is one of FAST_GATHER_CPUS, by LLVM's name or by its features (asked
    once: TVM's target costs 0.25 ms)."""
    from gdp.runtime.backends.tvm.kernels import host_target

    if str(host_target().attrs.get("mcpu", "")) in FAST_GATHER_CPUS:
        return True
    try:
        return intel_with_amx(Path("/proc/cpuinfo").read_text())
    except OSError:  # not Linux: LLVM's name decides
        return False


def intel_with_amx(cpuinfo: str) -> bool:
    """Whether Linux's /proc/cpuinfo text shows an Intel CPU with AMX tiles: a server core from
    Sapphire Rapids on, one of FAST_GATHER_CPUS, whatever model number a hypervisor shows. A VM
    of this project reported model 167 (LLVM: rocketlake, whose gathers the flaw slows) on a
    core with AMX and AVX512-FP16, where gathers ran 1080p BGR rotated LINEAR 5.8 -> 4.2 ms and
    NEAREST 1.8 -> 1.1 ms."""
    fields = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("vendor_id", "flags") and key not in fields:
            fields[key] = value.split()
        if len(fields) == 2:
            break
    return fields.get("vendor_id") == ["GenuineIntel"] and "amx_tile" in fields.get("flags", ())


def _lanes(value, kind: str = "T.int32") -> str:
    """`value` in each of a block's lanes."""
    return f"T.Broadcast({kind}({value}), {BLOCK})"


# The source coordinate of column {x} (sx from coef[0], coef[1] and rows_x; sy from coef[2],
# coef[3] and rows_y), clamped to [-2, size + 1]: beyond a pixel outside, every neighbour is
# the border, and the clamp keeps the int32 conversion in range for any matrix. A block's is
# OpenCV's vector formula, fma(M[0], x, float(y*M[1]) + M[2]) in float32, as one fused
# multiply-add of 16 lanes.
def _vector_coordinate(k: int, rows: str, size: str) -> str:
    """The block's source coordinates (columns xo * BLOCK + i, `xs` in float32), clamped."""
    n = BLOCK
    value = (
        f'T.call_llvm_pure_intrin("float32x{n}", "llvm.fma.v{n}f32",'
        f" T.Broadcast(coef[{k}], {n}), xs, T.Broadcast({rows}[y] + coef[{k} + 1], {n}))"
    )
    high = f'T.Broadcast(T.Cast("float32", {size}) + T.float32(1), {n})'
    return f"T.min(T.max({value}, {_lanes(-2, 'T.float32')}), {high})"


_SCALAR_COORDINATE = (
    'T.Cast("float32", T.Cast("float64", coef[{k}]) * T.Cast("float64", {x})'
    ' + T.Cast("float64", {rows}[y])) + coef[{k} + 1]'
)
_COORDINATES = """\
sx = T.min(T.max({sx}, T.float32(-2)), T.Cast("float32", w) + T.float32(1))
sy = T.min(T.max({sy}, T.float32(-2)), T.Cast("float32", h) + T.float32(1))
"""
_LINEAR = """\
ix = T.Cast("int32", T.floor(sx))
iy = T.Cast("int32", T.floor(sy))
fx = sx - T.floor(sx)
fy = sy - T.floor(sy)
"""
_NEAREST = """\
ix = T.Cast("int32", T.round(sx))
iy = T.Cast("int32", T.round(sy))
"""
# Each neighbour (tap) t at (iy + dy, ix + dx): its clamped position and whether it is inside.
_TAP = """\
cx{t} = T.min(T.max(ix + {dx}, 0), w - 1)
cy{t} = T.min(T.max(iy + {dy}, 0), h - 1)
in{t} = ix + {dx} >= 0 and ix + {dx} < w and iy + {dy} >= 0 and iy + {dy} < h
"""


def _taps(method: int) -> list[tuple[int, int]]:
    return [(0, 0)] if method == NEAREST else [(0, 0), (0, 1), (1, 0), (1, 1)]


def _value(method: int, channel_values: list[str], dtype: str, constant=None) -> str:
    """The output value of one channel from its taps' float32 values; `constant(v)`: a float32
    constant as the values hold it (a scalar, or a block's lanes)."""
    if method == NEAREST:
        return channel_values[0]
    constant = constant or (lambda v: f"T.float32({v})")
    p00, p01, p10, p11 = channel_values
    v0 = f"({p00} + fx * ({p01} - {p00}))"
    v1 = f"({p10} + fx * ({p11} - {p10}))"
    out = f"({v0} + fy * ({v1} - {v0}))"
    if dtype == "float32":
        return out
    top = float(np.iinfo(dtype).max)
    return f"T.min(T.max(T.round({out}), {constant(0.0)}), {constant(top)})"


def _store(x: str, channels: int, dtype: str, method: int, tap_value) -> str:
    """The stores of column {x}'s channels, `tap_value(t, c)` the float32 value of tap t."""
    lines = []
    for c in range(channels):
        values = [tap_value(t, c) for t in range(len(_taps(method)))]
        value = _value(method, values, dtype)
        cast = value if dtype == "float32" else f'T.Cast("{dtype}", {value})'
        lines.append(f"dst[(y * W + {x}) * {channels} + {c}] = {cast}")
    return "\n".join(lines) + "\n"


def _bordered(t: int, c: int, loaded: str, border: int) -> str:
    if border == REPLICATE:
        return loaded
    return f"T.Select(in{t}, {loaded}, border[{c}])"


def _position(x: str, coordinate: str, method: int) -> str:
    text = _COORDINATES.format(
        sx=coordinate.format(k=0, x=x, rows="rows_x"), sy=coordinate.format(k=2, x=x, rows="rows_y")
    )
    text += _NEAREST if method == NEAREST else _LINEAR
    for t, (dy, dx) in enumerate(_taps(method)):
        text += _TAP.format(t=t, dx=dx, dy=dy)
    return text


def _direct(x: str, coordinate: str, channels: int, dtype: str, method: int, border: int) -> str:
    """Column {x} computed on its own: each value loaded by index."""

    def tap_value(t: int, c: int) -> str:
        loaded = f'T.Cast("float32", src[(cy{t} * w + cx{t}) * {channels} + {c}])'
        return _bordered(t, c, loaded, border)

    return inline(_position(x, coordinate, method) + _store(x, channels, dtype, method, tap_value))


_SOURCE = """
@T.prim_func
def {name}(
    img_handle: T.handle,
    out_handle: T.handle,
    rows_x_handle: T.handle,
    rows_y_handle: T.handle,
    coef_handle: T.handle,
    border_handle: T.handle,
):
    T.func_attr({{"global_symbol": "{name}", "tir.noalias": True}})
    h = T.int32()
    w = T.int32()
    H = T.int32()
    W = T.int32()
    img = T.match_buffer(img_handle, (h, w, {channels}), "{dtype}", align=1)
    out = T.match_buffer(out_handle, (H, W, {channels}), "{dtype}", align=1)
    rows_x = T.match_buffer(rows_x_handle, (H,), "float32", align=4)
    rows_y = T.match_buffer(rows_y_handle, (H,), "float32", align=4)
    coef = T.match_buffer(coef_handle, (4,), "float32", align=4)
    border = T.match_buffer(border_handle, ({channels},), "float32", align=4)
    src = T.decl_buffer((h * w * {channels},), "{dtype}", data=img.data, align=1)
    dst = T.decl_buffer((H * W * {channels},), "{dtype}", data=out.data, align=1)
    for ty in T.parallel((H + {tile_rows} - 1) // {tile_rows}):
        for bt in range((W // {block} + {tile_blocks} - 1) // {tile_blocks}):
            for y in range(ty * {tile_rows}, T.min(H, ty * {tile_rows} + {tile_rows})):
                for xo in range(
                    bt * {tile_blocks}, T.min(W // {block}, bt * {tile_blocks} + {tile_blocks})
                ):
{blocks}
        for y in range(ty * {tile_rows}, T.min(H, ty * {tile_rows} + {tile_rows})):
            for x in range(W // {block} * {block}, W):
{tail}
"""


def _vector_nearest(channels: int, dtype: str, border: int, gathers: bool) -> str:
    """A nearest-neighbour block of BLOCK columns as vectors bound by T.let (in registers: no
    phase buffers): the coordinates, their rounding and the source pixels' offsets; the BLOCK
    pixels fetched as one load of `channels` values each, joined by a shuffle (`gathers`: uint8
    pixels as words by one gather); the border put in; one store."""
    n, c = BLOCK, channels
    lanes, coordinate = _lanes, _vector_coordinate
    zero, w1, h1 = lanes("0", "T.int32"), f"T.Broadcast(w - 1, {n})", f"T.Broadcast(h - 1, {n})"
    lines = [
        f'xs: T.let = T.Cast("float32x{n}", T.Ramp(xo * {n}, 1, {n}))',
        f'ix: T.let = T.Cast("int32x{n}", T.round({coordinate(0, "rows_x", "w")}))',
        f'iy: T.let = T.Cast("int32x{n}", T.round({coordinate(2, "rows_y", "h")}))',
        f"tap: T.let = (T.min(T.max(iy, {zero}), {h1}) * T.Broadcast(w, {n})"
        f" + T.min(T.max(ix, {zero}), {w1})) * {lanes(c, 'T.int32')}",
    ]
    loads = ", ".join(
        f"src[T.Ramp(T.Shuffle([tap], [{i}]), 1, {c})]"
        if c > 1
        else f"src[T.Shuffle([tap], [{i}])]"
        for i in range(n)
    )
    pixels = f"T.Shuffle([{loads}], [{', '.join(map(str, range(n * c)))}])"

    def bordered(values: str) -> str:
        if border != CONSTANT:
            return values
        spread = ", ".join(str(k * n + i) for i in range(n) for k in range(c))
        fill = ", ".join(f'T.Broadcast(T.Cast("{dtype}", border[{k}]), {n})' for k in range(c))
        return (
            f"T.Select(T.Shuffle([{', '.join(['inside'] * c)}], [{spread}])"
            f" != T.Broadcast(T.int32(0), {n * c}),"
            f" {values}, T.Shuffle([{fill}], [{spread}]))"
        )

    if border == CONSTANT:
        inside = (
            f"(ix >= {zero}) & (ix < T.Broadcast(w, {n})) & (iy >= {zero})"
            f" & (iy < T.Broadcast(h, {n}))"
        )
        lines.append(f"inside: T.let = T.Select({inside}, {lanes('-1', 'T.int32')}, {zero})")
    store = f"dst[T.Ramp((y * W + xo * {n}) * {c}, 1, {n * c})] = "
    if gathers and c == 4:  # a pixel is a word
        pixels = f'T.reinterpret("uint8x{4 * n}", {_gathered(4, "tap", n)})'
    if gathers and c == 1:  # a pixel is a word's first byte, or a later one at the image's end
        lines += [
            "if h * w >= 4:",
            f"    {_tail_words('start', 'tap', 'h * w - 4', n)}",
            f"    {store}{bordered(_word_bytes('tap', 'start', n, 1))}",
            "else:",
            f"    {store}{bordered(pixels)}",
        ]
        return "\n".join(lines) + "\n"
    if c != 3:
        lines.append(store + bordered(pixels))
        return "\n".join(lines) + "\n"
    # 3-value pixels fetched as 4 values, one word each (1080p BGR 1.37 -> 0.97 ms), from
    # `start`: the tap, but one value earlier for the image's last pixel, whose word would end
    # past the image. A source of one pixel keeps the 3-value loads.
    words = ", ".join(f"src[T.Ramp(T.Shuffle([start], [{i}]), 1, 4)]" for i in range(n))
    words = f"T.Shuffle([{words}], [{', '.join(map(str, range(4 * n)))}])"
    if gathers:
        words = f'T.reinterpret("uint8x{4 * n}", {_gathered(4, "start", n)})'
    first, later = (
        ", ".join(str(i * 4 + shift + k) for i in range(n) for k in range(3)) for shift in (0, 1)
    )
    spread = ", ".join(str(k * n + i) for i in range(n) for k in range(3))
    late = f"T.Shuffle([start != tap, start != tap, start != tap], [{spread}])"
    from_words = f"T.Select({late}, T.Shuffle([words], [{later}]), T.Shuffle([words], [{first}]))"
    lines += [
        "if h * w >= 2:",
        f"    start: T.let = T.min(tap, T.Broadcast(h * w * 3 - 4, {n}))",
        f"    words: T.let = {words}",
        f"    {store}{bordered(from_words)}",
        "else:",
        f"    {store}{bordered(pixels)}",
    ]
    return "\n".join(lines) + "\n"


def _vector_linear(channels: int, dtype: str, border: int, gathers: bool) -> str:
    """A bilinear block of BLOCK columns as vectors bound by T.let (in registers): the
    coordinates, floors and fractions; each tap row's pixel pair at column clamp(ix, 0, w - 2)
    (one load of 2 * channels values a pixel, joined by a shuffle; `gathers`: uint8 pairs by
    gathers of words or double words, _gathered_pairs) and which of the pair each tap is; the
    border; the interpolation (_value's); one store."""
    n, c = BLOCK, channels
    lanes, coordinate = _lanes, _vector_coordinate

    def clamp(value: str, top: str) -> str:
        return f"T.min(T.max({value}, {lanes(0)}), T.Broadcast({top}, {n}))"

    w_, h_ = f"T.Broadcast(w, {n})", f"T.Broadcast(h, {n})"
    pair = f"T.max(T.min(ix, T.Broadcast(w - 2, {n})), {lanes(0)})"
    lines = [
        f'xs: T.let = T.Cast("float32x{n}", T.Ramp(xo * {n}, 1, {n}))',
        f"sx: T.let = {coordinate(0, 'rows_x', 'w')}",
        f"sy: T.let = {coordinate(2, 'rows_y', 'h')}",
        f'ix: T.let = T.Cast("int32x{n}", T.floor(sx))',
        f'iy: T.let = T.Cast("int32x{n}", T.floor(sy))',
        "fx: T.let = sx - T.floor(sx)",
        "fy: T.let = sy - T.floor(sy)",
        f"base: T.let = ({clamp('iy', 'h - 1')} * {w_} + {pair}) * {lanes(c)}",
        f"below: T.let = ({clamp(f'iy + {lanes(1)}', 'h - 1')} - {clamp('iy', 'h - 1')})"
        f" * T.Broadcast(w * {c}, {n})",
        f"second0: T.let = {clamp('ix', 'w - 1')} - {pair}",
        f"second1: T.let = {clamp(f'ix + {lanes(1)}', 'w - 1')} - {pair}",
    ]
    prefix, lines = lines, []
    for row in range(2):
        start = "T.Shuffle([base], [{i}])" + (" + T.Shuffle([below], [{i}])" if row else "")
        loads = ", ".join(f"src[T.Ramp({start.format(i=i)}, 1, {2 * c})]" for i in range(n))
        lines.append(
            f"row{row}: T.let = T.Shuffle([{loads}], [{', '.join(map(str, range(2 * c * n)))}])"
        )
    if border == CONSTANT:
        for t, (dy, dx) in enumerate(_taps(LINEAR)):
            x_, y_ = f"ix + {lanes(dx)}", f"iy + {lanes(dy)}"
            lines.append(
                f"in{t}: T.let = ({x_} >= {lanes(0)}) & ({x_} < {w_})"
                f" & ({y_} >= {lanes(0)}) & ({y_} < {h_})"
            )
    f32 = f"float32x{n}"
    planes = []
    for k in range(c):
        for row in range(2):
            first = ", ".join(str(i * 2 * c + k) for i in range(n))
            second = ", ".join(str(i * 2 * c + c + k) for i in range(n))
            for side in range(2):
                value = (
                    f"T.Select(second{side} != {lanes(0)},"
                    f' T.Cast("{f32}", T.Shuffle([row{row}], [{second}])),'
                    f' T.Cast("{f32}", T.Shuffle([row{row}], [{first}])))'
                )
                if border == CONSTANT:
                    fill = f"T.Broadcast(border[{k}], {n})"
                    value = f"T.Select(in{row * 2 + side}, {value}, {fill})"
                lines.append(f"p{row}{side}_{k}: T.let = {value}")
        taps = [f"p{row}{side}_{k}" for row in range(2) for side in range(2)]
        value = _value(LINEAR, taps, dtype, lambda v: lanes(v, "T.float32"))
        planes.append(f'T.Cast("{dtype}x{n}", {value})')
    order = ", ".join(str(k * n + i) for i in range(n) for k in range(c))
    joined = planes[0] if c == 1 else f"T.Shuffle([{', '.join(planes)}], [{order}])"
    lines.append(f"dst[T.Ramp((y * W + xo * {n}) * {c}, 1, {n * c})] = {joined}")
    if gathers:  # uint8 of 1, 3 or 4 channels (source)
        gathered = _gathered_pairs(c, n) + lines[2:]
        if c == 4:  # a pair is 8 bytes: no gather reads past it
            lines = gathered
        else:  # a word from a pair's start, or the image's last word (the pair later in it)
            lines = [
                f"if h * w >= {4 if c == 1 else 3}:",
                *("    " + line for line in gathered),
                "else:",
                *("    " + line for line in lines),
            ]
    return "\n".join(prefix + lines) + "\n"


def _gathered(size: int, offsets: str, n: int) -> str:
    """The `size`-byte words (4 or 8) at the byte offsets `offsets` (int32 lanes) of the uint8
    source, by AVX-512's gathers: n values, 16 (words) or 8 (double words) a gather."""
    if size == 4:
        return (
            f'T.call_llvm_pure_intrin("int32x{n}", "llvm.x86.avx512.gather.dpi.512",'
            f" T.Broadcast(T.int32(0), {n}), T.address_of(src[0]), {offsets}, T.int16(-1),"
            " T.int32(1))"
        )
    halves = []
    for half in range(n // 8):
        lanes = ", ".join(str(half * 8 + i) for i in range(8))
        halves.append(
            'T.reinterpret("uint8x64", T.call_llvm_pure_intrin("int64x8",'
            ' "llvm.x86.avx512.gather.dpq.512", T.Broadcast(T.int64(0), 8),'
            f" T.address_of(src[0]), T.Shuffle([{offsets}], [{lanes}]), T.int8(-1), T.int32(1)))"
        )
    return f"T.Shuffle([{', '.join(halves)}], [{', '.join(map(str, range(8 * n)))}])"


def _tail_words(start: str, at: str, last: str, n: int) -> str:
    """Bind `start`: the byte offsets `at`, each at most `last` (the image's last word: a
    word gathered from it ends with the image)."""
    return f"{start}: T.let = T.min({at}, T.Broadcast({last}, {n}))"


def _word_bytes(at: str, start: str, n: int, count: int) -> str:
    """The first `count` bytes (1 or 2) at `at` of each lane, from the word gathered at its
    `start` (`at` or up to 3 bytes before it): the word shifted right by their difference,
    its low bytes, in order (n * count uint8 values)."""
    words = f"T.shift_right({_gathered(4, start, n)}, ({at} - {start}) * T.Broadcast(8, {n}))"
    if count == 1:
        return f'T.Cast("uint8x{n}", {words})'
    picks = ", ".join(str(4 * i + k) for i in range(n) for k in range(count))
    return f'T.Shuffle([T.reinterpret("uint8x{4 * n}", {words})], [{picks}])'


def _gathered_pairs(c: int, n: int) -> list[str]:
    """The lines binding row0 and row1 (each block pixel's pair of `c`-byte pixels in its tap
    row) from gathers: of 4 bytes for gray (_word_bytes), of 8 for 3 and 4 channels; for 3
    from `start`, which for the image's last pair is 2 bytes before it (its 8 bytes would end
    past the image), the pair then picked 2 bytes in."""
    lines = []
    for row in range(2):
        at = "base" if row == 0 else "(base + below)"
        if c == 4:
            lines.append(f"row{row}: T.let = {_gathered(8, at, n)}")
            continue
        if c == 1:  # a pair is a word's first 2 bytes, or later ones at the image's end
            lines.append(_tail_words(f"start{row}", at, "h * w - 4", n))
            lines.append(f"row{row}: T.let = {_word_bytes(at, f'start{row}', n, 2)}")
            continue
        lines.append(f"start{row}: T.let = T.min({at}, T.Broadcast(h * w * 3 - 8, {n}))")
        lines.append(f"words{row}: T.let = {_gathered(8, f'start{row}', n)}")
        first, later = (
            ", ".join(str(i * 8 + shift + k) for i in range(n) for k in range(6))
            for shift in (0, 2)
        )
        spread = ", ".join(str(k * n + i) for i in range(n) for k in range(6))
        late = ", ".join([f"start{row} != {at}"] * 6)
        lines.append(
            f"row{row}: T.let = T.Select(T.Shuffle([{late}], [{spread}]),"
            f" T.Shuffle([words{row}], [{later}]), T.Shuffle([words{row}], [{first}]))"
        )
    return lines


@functools.cache
def source(
    dtype: str, channels: int, method: int, border: int, gathers: bool = False
) -> tuple[str, str]:
    """(name, TVMScript) of the kernel for this dtype, channel count, method and border;
    `gathers`: uint8 pixels fetched by AVX-512's gathers (fast_gathers)."""
    name = f"warp_affine_{dtype}_c{channels}_{'nearest' if method == NEAREST else 'linear'}"
    name += f"_{'constant' if border == CONSTANT else 'replicate'}"
    gathers = gathers and dtype == "uint8"
    name += "_gathers" if gathers else ""
    vector = _vector_nearest if method == NEAREST else _vector_linear
    blocks = vector(channels, dtype, border, gathers)
    tail = _direct("x", _SCALAR_COORDINATE, channels, dtype, method, border)
    text = _SOURCE.format(
        name=name,
        dtype=dtype,
        channels=channels,
        block=BLOCK,
        tile_rows=TILE_ROWS,
        tile_blocks=TILE_BLOCKS,
        blocks=indent(blocks, 20),
        tail=indent(tail, 16),
    )
    return name, text


# DTYPES by dtype (a dtype's .name builds the string on every read: 1-2 us).
_DTYPE_NAMES = {np.dtype(name): name for name in DTYPES}


def warp_affine(
    image: np.ndarray,
    out: np.ndarray,
    coefficients: np.ndarray,
    rows_x: np.ndarray,
    rows_y: np.ndarray,
    border_value: np.ndarray,
    method: int,
    border: int,
) -> np.ndarray:
    """Write the warp of `image` (H, W) or (H, W, C) into `out` (its own H and W, the image's
    channels and dtype) and return it. `coefficients`: float32 (M[0,0], M[0,2], M[1,0],
    M[1,2]); `rows_x`, `rows_y`: float32 y * M[0,1] and y * M[1,1] per output row (as
    gdp.cv2.geometry computes them, OpenCV's roundings); `border_value`: float32 per channel,
    for CONSTANT."""
    dtype = _DTYPE_NAMES.get(image.dtype) if isinstance(image, np.ndarray) else None
    if dtype is None:
        raise InputError(
            f"warp_affine: expected a uint8, uint16 or float32 image, got {describe(image)}"
        )
    channels = 1 if image.ndim == 2 else int(image.shape[2])
    if image.ndim not in (2, 3) or channels not in CHANNELS:
        raise InputError(f"warp_affine: expected (H, W) or (H, W, 1|3|4), got {image.shape}")
    if out.dtype != image.dtype or out.shape[2:] != image.shape[2:] or not out.flags.c_contiguous:
        raise InputError(
            f"warp_affine: out must be a C-contiguous {image.dtype} array of {channels} channels,"
            f" got {describe(out)}"
        )
    if method == LINEAR and image.shape[1] < 2:
        raise InputError(
            f"warp_affine: LINEAR fetches pixel pairs, so the image must be at least 2 wide, got"
            f" {image.shape}"
        )
    if image.nbytes > MAX_BYTES or out.nbytes > MAX_BYTES:
        raise InputError(f"warp_affine: images over {MAX_BYTES} bytes are not indexed")
    if not image.size or not out.size:
        return out
    name, text = source(dtype, channels, method, border, fast_gathers())
    src = np.ascontiguousarray(image).reshape(image.shape[0], image.shape[1], channels)
    run_host_kernel(
        name,
        text,
        src,
        out.reshape(out.shape[0], out.shape[1], channels),
        np.ascontiguousarray(rows_x, np.float32),
        np.ascontiguousarray(rows_y, np.float32),
        np.ascontiguousarray(coefficients, np.float32),
        np.ascontiguousarray(border_value, np.float32).reshape(channels),
    )
    return out
