"""cv2.warpAffine (WARP_INVERSE_MAP semantics: dst(y, x) = src(M @ (x, y, 1))) as one
hand-written TIR kernel for the host CPU, with the arithmetic of gdp.ops.geometry.warp_affine
(OpenCV 4.11+'s: float32 source coordinates, float32 interpolation, saturate_cast).

Why by hand: as a graph, each output pixel's neighbours are gathers, which TVM's vector lanes
load one value at a time between lane extractions and insertions: at 1080p BGR the kernel took
38-65 ms, OpenCV 5.5 ms. Here a block of 16 output pixels computes its coordinates, positions
and weights as vectors, then fetches its neighbours in a scalar loop into small buffers, and
interpolates and stores as vectors again:
- LINEAR fetches each tap row's two pixels as one pair (as one integer, where the pair is an
  integer of at most 8 bytes), so the source must be at least 2 wide;
- NEAREST runs the block as vectors bound by T.let, in registers (_vector_nearest): each
  pixel one load of its channels, the block's pixels joined by a shuffle and stored as one
  vector (the phases' buffers, which TVM allocates from its workspace, made BGR 1080p take
  2.5-3.5 ms; 1.5 ms so, OpenCV 1.7).
AVX-512's gather instruction was tried for the fetch and measured slower than scalar loads on
this machine's AMD Zen 4 (about 45 cycles for 16 words).

The last columns of a row that do not fill a block are computed one by one with OpenCV's scalar
formula for the coordinate (see gdp.ops.geometry's WARP_VECTOR_BLOCK): which formula a pixel gets
decides its nearest neighbour at exact ties.
"""

from __future__ import annotations

import functools

import numpy as np

from gdp.errors import InputError
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

# The source coordinate of column {x} (sx from coef[0], coef[1] and rows_x; sy from coef[2],
# coef[3] and rows_y), clamped to [-2, size + 1]: beyond a pixel outside, every neighbour is
# the border, and the clamp keeps the int32 conversion in range for any matrix. The product of
# two floats is exact in double, so the double sum and one cast give an fma's result.
_VECTOR_COORDINATE = (
    'T.Cast("float32", T.Cast("float64", coef[{k}]) * T.Cast("float64", {x})'
    ' + T.Cast("float64", {rows}[y] + coef[{k} + 1]))'
)
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


def _value(method: int, channel_values: list[str], dtype: str) -> str:
    """The output value of one channel from its taps' float32 values."""
    if method == NEAREST:
        return channel_values[0]
    p00, p01, p10, p11 = channel_values
    v0 = f"({p00} + fx * ({p01} - {p00}))"
    v1 = f"({p10} + fx * ({p11} - {p10}))"
    out = f"({v0} + fy * ({v1} - {v0}))"
    if dtype == "float32":
        return out
    top = float(np.iinfo(dtype).max)
    return f"T.min(T.max(T.round({out}), T.float32(0)), T.float32({top}))"


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


# A LINEAR block of BLOCK columns runs in phases, each writing small buffers the next reads: the
# coordinates; their rounding (and the weights); the taps' pixel indices and whether each is
# inside (all over vector lanes); the fetch of each tap's pixel (a scalar loop); then the
# channels, interpolated and stored (vector lanes). Phases rather than one expression: TVM 0.27's
# vectorizer takes no let-bound names (see gdp.runtime.canny.inline), and inlined into one
# expression the coordinate was computed again for every use (measured: 20 ms at 1080p gray).
_PHASE_COORDINATES = """\
sxs[xi] = T.min(T.max({sx}, T.float32(-2)), T.Cast("float32", w) + T.float32(1))
sys[xi] = T.min(T.max({sy}, T.float32(-2)), T.Cast("float32", h) + T.float32(1))
"""
_PHASE_ROUNDED = """\
ixs[xi] = T.Cast("int32", T.floor(sxs[xi]))
iys[xi] = T.Cast("int32", T.floor(sys[xi]))
sxs[xi] = sxs[xi] - T.floor(sxs[xi])
sys[xi] = sys[xi] - T.floor(sys[xi])
"""
_PHASE_INSIDE = """\
inside[{t} * {block} + xi] = T.Select(
    ixs[xi] + {dx} >= 0 and ixs[xi] + {dx} < w and iys[xi] + {dy} >= 0 and iys[xi] + {dy} < h,
    T.int32(-1),
    T.int32(0),
)
"""


# A LINEAR tap row's two pixels are fetched together, from the pair's first pixel `bases`
# (elements) at column clamp(ix, 0, w - 2), so both lie in the image whatever ix is (w >= 2);
# `belows` steps to the second row (0 at the last one); `seconds` says, for the left and the right
# tap, whether it is the pair's second pixel.
_PHASE_PAIRS = """\
bases[xi] = (
    T.min(T.max(iys[xi], 0), h - 1) * w + T.max(T.min(ixs[xi], w - 2), 0)
) * {channels}
belows[xi] = (
    T.min(T.max(iys[xi] + 1, 0), h - 1) - T.min(T.max(iys[xi], 0), h - 1)
) * w * {channels}
seconds[xi] = T.min(T.max(ixs[xi], 0), w - 1) - T.max(T.min(ixs[xi], w - 2), 0)
seconds[{block} + xi] = T.min(T.max(ixs[xi] + 1, 0), w - 1) - T.max(T.min(ixs[xi], w - 2), 0)
"""


def word_type(dtype: str, channels: int) -> str | None:
    """The integer a LINEAR tap row's pixel pair is fetched as (its bytes, the first pixel
    lowest), or None where the pair's channels are fetched one by one as float32 (float32,
    or a pair over 8 bytes)."""
    pair = 2 * channels * np.dtype(dtype).itemsize
    if dtype == "float32" or pair > 8:
        return None
    return "int32" if pair <= 4 else "int64"


def _fetch_pairs(channels: int, dtype: str) -> str:
    """Lane i's fetch of its two tap rows' pixel pairs: as words, or channel by channel."""
    itemsize = np.dtype(dtype).itemsize
    word = word_type(dtype, channels)
    lines = []
    for row, start in enumerate(("bases[i]", "bases[i] + belows[i]")):
        if word is not None:
            parts = [
                f'T.shift_left(T.Cast("{word}", raw[({start}) * {itemsize} + {b}]),'
                f" T.{word}({8 * b}))"
                for b in range(2 * channels * itemsize)
            ]
            lines.append(f"words[{row} * {BLOCK} + i] = " + " | ".join(parts) + "\n")
            continue
        for second in range(2):
            for c in range(channels):
                at = f"(({row} * 2 + {second}) * {channels} + {c}) * {BLOCK} + i"
                element = f"src[{start} + {second * channels + c}]"
                lines.append(f'values[{at}] = T.Cast("float32", {element})\n')
    return f"for i in range({BLOCK}):\n" + indent("".join(lines), 4)


def _pair_value(t: int, c: int, channels: int, dtype: str) -> str:
    """Tap t's (row t // 2, left or right t % 2) float32 value of channel c, from its pair."""
    row, side = divmod(t, 2)
    second = f"seconds[{side} * {BLOCK} + xi]"
    word = word_type(dtype, channels)
    if word is None:
        first_at = f"(({row} * 2) * {channels} + {c}) * {BLOCK} + xi"
        second_at = f"(({row} * 2 + 1) * {channels} + {c}) * {BLOCK} + xi"
        return f"T.Select({second} != 0, values[{second_at}], values[{first_at}])"
    itemsize = np.dtype(dtype).itemsize
    shift = f'T.Cast("{word}", {second} * {8 * channels * itemsize} + {8 * c * itemsize})'
    mask = f"T.{word}({(1 << (8 * itemsize)) - 1})"
    return f'T.Cast("float32", T.shift_right(words[{row} * {BLOCK} + xi], {shift}) & {mask})'


def _phases(channels: int, dtype: str, border: int) -> list[tuple[bool, str]]:
    """The phases of a LINEAR block at columns xo * BLOCK + xi: (over vector lanes, body)."""
    x = f"(xo * {BLOCK} + xi)"
    taps = _taps(LINEAR)
    coordinates = _PHASE_COORDINATES.format(
        sx=_VECTOR_COORDINATE.format(k=0, x=x, rows="rows_x"),
        sy=_VECTOR_COORDINATE.format(k=2, x=x, rows="rows_y"),
    )
    positions = _PHASE_PAIRS.format(channels=channels, block=BLOCK)
    if border == CONSTANT:
        for t, (dy, dx) in enumerate(taps):
            positions += _PHASE_INSIDE.format(t=t, dx=dx, dy=dy, block=BLOCK)
    phases = [(True, coordinates), (True, _PHASE_ROUNDED), (True, positions)]
    prelude = "fx = sxs[xi]\nfy = sys[xi]\n"
    for t in range(len(taps)):
        if border == CONSTANT:
            prelude += f"in{t} = inside[{t} * {BLOCK} + xi] != 0\n"

    def tap_value(t: int, c: int) -> str:
        return _bordered(t, c, _pair_value(t, c, channels, dtype), border)

    interpolated = inline(prelude + _store(x, channels, dtype, LINEAR, tap_value))
    return [*phases, (False, _fetch_pairs(channels, dtype)), (True, interpolated)]


# The LINEAR phases' buffers (a block's values between phases; allocated a row, from TVM's
# workspace).
_LOCALS = """\
sxs = T.alloc_buffer(({block},), "float32", scope="local")
sys = T.alloc_buffer(({block},), "float32", scope="local")
ixs = T.alloc_buffer(({block},), "int32", scope="local")
iys = T.alloc_buffer(({block},), "int32", scope="local")
inside = T.alloc_buffer(({taps} * {block},), "int32", scope="local")
bases = T.alloc_buffer(({block},), "int32", scope="local")
belows = T.alloc_buffer(({block},), "int32", scope="local")
seconds = T.alloc_buffer((2 * {block},), "int32", scope="local")
words = T.alloc_buffer((2 * {block},), "{word}", scope="local")
values = T.alloc_buffer(({taps} * {channels} * {block},), "float32", scope="local")
"""

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
    raw = T.decl_buffer((h * w * {pixel},), "uint8", data=img.data, align=1)
    dst = T.decl_buffer((H * W * {channels},), "{dtype}", data=out.data, align=1)
    for y in T.parallel(H):
{locals}        for xo in range(W // {block}):
{blocks}
        for x in range(W // {block} * {block}, W):
{tail}
"""


def _vector_nearest(channels: int, dtype: str, border: int) -> str:
    """A nearest-neighbour block of BLOCK columns as vectors bound by T.let (in registers: no
    phase buffers): the coordinates, their rounding and the source pixels' offsets; the BLOCK
    pixels fetched as one load of `channels` values each, joined by a shuffle; the border put
    in; one store."""
    n, c = BLOCK, channels

    def lanes(value: str, kind: str) -> str:
        return f"T.Broadcast({kind}({value}), {n})"

    def coordinate(k: int, rows: str, size: str) -> str:
        # _VECTOR_COORDINATE over the block's columns: the product exact in float64, one sum
        value = (
            f'T.Cast("float32x{n}", T.Broadcast(T.Cast("float64", coef[{k}]), {n}) * xs'
            f' + T.Broadcast(T.Cast("float64", {rows}[y] + coef[{k} + 1]), {n}))'
        )
        low = lanes("-2", "T.float32")
        high = f'T.Broadcast(T.Cast("float32", {size}) + T.float32(1), {n})'
        return f"T.min(T.max({value}, {low}), {high})"

    zero, w1, h1 = lanes("0", "T.int32"), f"T.Broadcast(w - 1, {n})", f"T.Broadcast(h - 1, {n})"
    lines = [
        f'xs: T.let = T.Cast("float64x{n}", T.Ramp(xo * {n}, 1, {n}))',
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
    if border == CONSTANT:
        inside = (
            f"(ix >= {zero}) & (ix < T.Broadcast(w, {n})) & (iy >= {zero})"
            f" & (iy < T.Broadcast(h, {n}))"
        )
        lines.append(f"inside: T.let = T.Select({inside}, {lanes('-1', 'T.int32')}, {zero})")
        spread = ", ".join(str(k * n + i) for i in range(n) for k in range(c))
        fill = ", ".join(f'T.Broadcast(T.Cast("{dtype}", border[{k}]), {n})' for k in range(c))
        order = ", ".join(str(k * n + i) for i in range(n) for k in range(c))
        pixels = (
            f"T.Select(T.Shuffle([{', '.join(['inside'] * c)}], [{spread}])"
            f" != T.Broadcast(T.int32(0), {n * c}),"
            f" {pixels}, T.Shuffle([{fill}], [{order}]))"
        )
    lines.append(f"dst[T.Ramp((y * W + xo * {n}) * {c}, 1, {n * c})] = {pixels}")
    return "\n".join(lines) + "\n"


@functools.cache
def source(dtype: str, channels: int, method: int, border: int) -> tuple[str, str]:
    """(name, TVMScript) of the kernel for this dtype, channel count, method and border."""
    name = f"warp_affine_{dtype}_c{channels}_{'nearest' if method == NEAREST else 'linear'}"
    name += f"_{'constant' if border == CONSTANT else 'replicate'}"
    blocks, locals_ = "", _LOCALS
    if method == NEAREST:
        blocks, locals_ = _vector_nearest(channels, dtype, border), ""
    else:
        for lanes, body in _phases(channels, dtype, border):
            if lanes:
                blocks += f"for xi in T.vectorized({BLOCK}):\n" + indent(body, 4)
            else:
                blocks += body
    tail = _direct("x", _SCALAR_COORDINATE, channels, dtype, method, border)
    fields = {
        "channels": channels,
        "block": BLOCK,
        "taps": len(_taps(method)),
        "word": word_type(dtype, channels) or "int32",
    }
    text = _SOURCE.format(
        locals=indent(_LOCALS.format(**fields), 8) if locals_ else "",
        name=name,
        dtype=dtype,
        pixel=channels * np.dtype(dtype).itemsize,
        blocks=indent(blocks, 12),
        tail=indent(tail, 12),
        **fields,
    )
    return name, text


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
    from gdp.runtime.backends.tvm.kernels import run_host_kernel

    if not isinstance(image, np.ndarray) or image.dtype.name not in DTYPES:
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
    dtype = image.dtype.name
    name, text = source(dtype, channels, method, border)
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
