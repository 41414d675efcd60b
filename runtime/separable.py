"""OpenCV's separable filters of uint8 images in integers (and of float32 ones in float32) as one
hand-written TIR kernel for the host CPU, of any image size and any kernel length: the row and
column weights and the border (as index maps) are run-time inputs, so one compiled kernel per
result serves GaussianBlur (its 8-bit fixed-point weights for uint8), blur and boxFilter (sums
of ones), Sobel / Scharr into CV_16S (integer derivative kernels) and sepFilter2D of float32 at
every size and kernel size.

Arithmetic: OpenCV's for these (exact integer sums, then one rounding):
- `gaussian`: rows and columns weighted by the fixed-point weights (8 fractional bits each),
  (sum + 2^15) >> 16, as its bit-exact GaussianBlur. Weights that share a power of two are
  divided by it and the shift shortened by as much (the same result: OpenCV's 5x5 table is
  16 * [1, 4, 6, 4, 1], whose sums then fit 16-bit lanes, against 32-bit ones);
- `gaussian_even`: the same sums, rounded as OpenCV's sepFilter2D rounds them where it runs a
  smoothing kernel of 8-bit fixed-point weights (its "bit-exact" mode, as a gaussian of sigma
  0): half to even in its vector loop, the values of a row before `vector_end` (a multiple of
  its vector, which gdp.cv2 asks OpenCV), half up in its scalar tail; its delta an `offset`
  added to the sums (in their 16 fractional bits), the result at least 0;
- `box`: the window sum, then (sum + p0) * p1 >> 23 (p0, p1: its ColumnSum's rounding delta and
  fixed-point divisor), at most 255, as its box filter of uint8 over at most 256 values;
- `box_scaled`: the window sum times `scale` rounded half to even, as its box filter over more
  values: in float32, but a row's last (values % 8) in float64, as its vector loops and scalar
  tail (SCALED_TAIL);
- `int16`: the weighted sum saturated to int16, as its Sobel into CV_16S;
- `float32`: a float32 image's sums in float32 (each from 0, the taps in order, as multiply-adds
  LLVM contracts into fmas), plus `delta`, as its float filters;
- `box_float32`: a float32 image's window sums in float64 (the column sums running), times
  `scale`, rounded to float32, as its box filter of float32 (RowSum and ColumnSum in double:
  the same values wherever the double sums are exact, as for any 8-bit or 16-bit data).
Sums are kept in the smallest integer type that holds every partial sum (sum_types: 16-bit
lanes hold twice the values of 32-bit ones, and multiply faster).

Why by hand: these filters compiled a program per image size where the kernel is longer than
31 taps (their loops need static sizes) or larger than the image (its border reflects more
than once); this kernel serves every size and kernel length from one compile.

Layout: each strip of rows keeps a ring of `ky` rows of row sums. Each padded source row goes
once into the strip's line with its border columns (through the column map; a row outside the
image through the row map, -1: the constant border's zeros), and its row sums, computed from the
line a block of values at a time, into the ring; each output row sums the ring's rows, GROUP
taps an expression (gdp.runtime.tir_text.block_sums). A box longer than STATIC_TAPS sums its
rows by doubling (_row_pass_doubling: about 2 log2(nx) passes, not nx taps) and runs its column
sums (_running_columns: one pass a row, not ny taps).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from gdp.errors import InputError
from gdp.runtime.launch import alone, host_tensors, run_strips
from gdp.runtime.tir_text import block_sums, columns, describe, indent, inline
from gdp.runtime.workspace import output, scratch

# Values an output block sums at once (64 bytes of uint8 in, 2-4 AVX-512 registers of sums).
BLOCK = 64
LANES = 16
MAX_STRIPS = 16
# Kernels up to this length an axis get a kernel of their own tap counts (each block's sums one
# expression, kept in registers: twice as fast for a 5x5 blur); longer ones share one.
STATIC_TAPS = 7
MAX_VALUES = (1 << 31) - 1
# OpenCV's fixed gaussian tables (sigma <= 0; 3, 5 and 7 taps), their powers of two divided
# out: a gaussian of these weights on both axes gets them as constants in its kernel (a 3x3
# blur's multiplies by 1 and 2 were a fifth of its time); other weights stay run-time inputs.
FOLDED = frozenset({(1, 2, 1), (1, 4, 6, 4, 1), (1, 6, 15, 20, 15, 6, 1)})
# The results the kernel is made for, and their types.
FINISH = {
    "gaussian": "uint8",
    "gaussian_even": "uint8",
    "box": "uint8",
    "box_scaled": "uint8",
    "int16": "int16",
    "float32": "float32",
    "box_float32": "float32",
}
# The finishes of float32 images (the others take uint8 ones): those with float32 results.
FLOAT_FINISHES = tuple(finish for finish, result in FINISH.items() if result == "float32")

# The column sum `{v}` (of the column type) of row value `{x}` to the result.
_STORE = {
    # in the column type, which holds the sum plus p0 (the rounding: _plan); the sum >= 0
    "gaussian": (
        'T.Cast("uint8", T.min(T.shift_right({v} + T.Cast("{column}", p0),'
        ' T.Cast("{column}", p1)), T.{column}(255)))'
    ),
    # half to even: + p0 - 1, and 1 more where the quotient's last bit is 1 (p1 >= 2 here)
    "gaussian_even": (
        'T.Cast("uint8", T.max(T.min(T.shift_right({v} + T.Cast("{column}", offset + p0 - 1)'
        ' + T.Select({x} < vector_end, T.bitwise_and(T.shift_right({v} + T.Cast("{column}",'
        ' offset), T.Cast("{column}", p1)), T.{column}(1)), T.{column}(1)), T.Cast("{column}",'
        " p1)), T.{column}(255)), T.{column}(0)))"
    ),
    # (sum + p0) * p1 < 2^32 for every area OpenCV takes this way (at most 256 values)
    "box": (
        'T.Cast("uint8", T.min(T.shift_right((T.Cast("uint32", {v}) + T.Cast("uint32", p0))'
        ' * T.Cast("uint32", p1), T.uint32(23)), T.uint32(255)))'
    ),
    # in float32 as OpenCV's vector loops (the last values of a row: _SCALED_TAIL)
    "box_scaled": (
        'T.Cast("uint8", T.min(T.max(T.round(T.Cast("float32", {v}) * T.Cast("float32", scale)),'
        " T.float32(0)), T.float32(255)))"
    ),
    "int16": 'T.Cast("int16", T.min(T.max(T.Cast("int32", {v}), -32768), 32767))',
    "float32": '{v} + T.Cast("float32", delta)',
    "box_float32": 'T.Cast("float32", {v} * scale)',
}

# OpenCV's ColumnSum<int, uchar> scales a row's sums in float32 vectors of 8 (and wider) values,
# the last (row length % 8) in float64: where a sum times the scale lies next to a half (an even
# area), the two round apart (a 10x100 blur: 62 of 180000 values 1 apart).
SCALED_TAIL = 8
_SCALED_TAIL_STORE = (
    'T.Cast("uint8", T.min(T.max(T.round(T.Cast("float64", {v}) * scale), T.float64(0)),'
    " T.float64(255)))"
)


def _row_pass(
    row: str,
    src: str,
    ring: str,
    ones: bool,
    taps: tuple[int, int] | None,
    mirrored: bool,
    folded: tuple[int, ...] | None,
) -> str:
    """Padded row `row`'s row sums (in the ring's type: exact, as no partial sum leaves it)
    into ring slot row % ny, a block of values at a time as vectors. A block whose taps all
    fall inside the image row reads the row itself; the others (at the row's ends) read the
    strip's line, into which the row's border columns (through the column map) and the image
    values those blocks read go first (the last block reads past the row into the line's spare
    BLOCK values and writes past it into the ring row's spare values; neither is read after).
    Copying the whole row into the line took a fifth of a 5x5 GaussianBlur's time."""
    slot = f"s * ny * wr + ({row}) % ny * wr"
    weight = "" if ones else folded or "kx[{t}]"
    border = (
        f"line[s * wl + p] = T.Select(cols[p] < 0, T.{src}(0),"
        f" img[rows[{row}], T.max(cols[p], 0)])\n"
    )

    def blocks(value: str, first: str, stop: str) -> str:
        block = block_sums(
            f"ring[{slot} + xo * {BLOCK} + i] = sums[i]",
            value,
            weight,
            taps[0] if taps else "nx",
            ring,
            BLOCK,
            mirrored=mirrored,
        )
        return f"for xo in range({first}, {stop}):\n" + indent(block, 4)

    from_line = f"line[s * wl + xo * {BLOCK} + i + ({{t}}) * channels]"
    from_image = f"img[rows[{row}], xo * {BLOCK} + i + ({{t}}) * channels - left]"
    # Blocks [inner, outer) read the image; the line holds image values [0, head) and
    # [tail, wc) for the others.
    head = f"T.min(wc, (inner - 1) * {BLOCK} + span - left)"
    tail = f"T.max({head}, outer * {BLOCK} - left)"
    return (
        f"if rows[{row}] < 0:\n"
        + indent(columns(f"ring[{slot} + {{x}}] = T.{ring}(0)", "0", "wc", LANES), 4)
        + "else:\n"
        + indent(
            "for p in range(left):\n"
            + indent(border, 4)
            + columns(f"line[s * wl + left + {{x}}] = img[rows[{row}], {{x}}]", "0", head, LANES)
            + columns(f"line[s * wl + left + {{x}}] = img[rows[{row}], {{x}}]", tail, "wc", LANES)
            + "for p in range(left + wc, wpc):\n"
            + indent(border, 4)
            + "sums = rsums\n"
            + blocks(from_line, "0", "inner")
            + blocks(from_image, "inner", "outer")
            + blocks(from_line, "outer", "blocks"),
            4,
        )
    )


def _row_pass_doubling(row: str, ring: str) -> str:
    """A long box's row sums of padded row `row` into ring slot row % ny by doubling: the
    padded row goes into the strip's `powers` row in the ring's type (border columns through
    the column map), which then becomes in place its sums of 2, 4, 8... values (each value plus
    the one 1, 2, 4... taps on), and each power of two in nx adds its sums, taken after the
    taps the lower ones summed, into the ring row. About 2 log2(nx) passes over the row,
    against nx taps a value (a 31-wide box: 9 passes for 30 adds). Every partial sum is a sum
    of window values: exact in the ring's type, as the taps'."""
    slot = f"s * ny * wr + ({row}) % ny * wr"
    lanes = 64 // np.dtype(ring).itemsize  # a 64-byte vector
    at = "s * wp + {x}"
    value = f'T.Cast("{ring}", img[rows[{row}], {{x}}])'
    border = (
        f"powers[s * wp + p] = T.Select(cols[p] < 0, T.{ring}(0),"
        f' T.Cast("{ring}", img[rows[{row}], T.max(cols[p], 0)]))\n'
    )
    # bit b of nx: the sums of 2^b values, after the nx & (2^b - 1) taps of the lower bits
    taps = "powers[s * wp + {x} + (nx & ((1 << b) - 1)) * channels]"
    add = columns(f"ring[{slot} + {{x}}] = ring[{slot} + {{x}}] + {taps}", "0", "wc", lanes)
    first = columns(f"ring[{slot} + {{x}}] = {taps}", "0", "wc", lanes)
    # in place: each value adds one further right, not yet doubled (the vectors go left to right)
    double = columns(
        f"powers[{at}] = powers[{at}] + powers[{at} + (1 << b) * channels]",
        "0",
        "wpc - ((2 << b) - 1) * channels",
        lanes,
    )
    return (
        f"if rows[{row}] < 0:\n"
        + indent(columns(f"ring[{slot} + {{x}}] = T.{ring}(0)", "0", "wc", lanes), 4)
        + "else:\n"
        + indent(
            "for p in range(left):\n"
            + indent(border, 4)
            + columns(f"powers[s * wp + left + {{x}}] = {value}", "0", "wc", lanes)
            + "for p in range(left + wc, wpc):\n"
            + indent(border, 4)
            + "for b in range(31):\n"
            + "    if nx >> b & 1 == 1:\n"
            + "        if nx & ((1 << b) - 1) == 0:\n"
            + indent(first, 12)
            + "        else:\n"
            + indent(add, 12)
            + "    if nx >> (b + 1) > 0:\n"
            + indent(double, 8),
            4,
        )
    )


_SOURCE = """
@T.prim_func
def {name}(
    img_handle: T.handle,
    out_handle: T.handle,
    rows_handle: T.handle,
    cols_handle: T.handle,
    kx_handle: T.handle,
    ky_handle: T.handle,
    line_handle: T.handle,
    ring_handle: T.handle,
    offsets_handle: T.handle,
    csum_handle: T.handle,
    powers_handle: T.handle,
    channels: T.int32,
    left: T.int32,
    p0: T.int32,
    p1: T.int32,
    scale: T.float64,
    delta: T.float64,
    vector_end: T.int32,
    offset: T.int32,
    strips: T.int32,
):
    T.func_attr({{"global_symbol": "{name}", "tir.noalias": True}})
    h = T.int32()
    wc = T.int32()
    hp = T.int32()
    wpc = T.int32()
    nx = T.int32()
    ny = T.int32()
    n_line = T.int32()
    n_ring = T.int32()
    n_csum = T.int32()
    n_powers = T.int32()
    img = T.match_buffer(img_handle, (h, wc), "{src}", align=1)
    out = T.match_buffer(out_handle, (h, wc), "{dst}", align=1)
    rows = T.match_buffer(rows_handle, (hp,), "int32", align=4)
    cols = T.match_buffer(cols_handle, (wpc,), "int32", align=4)
    kx = T.match_buffer(kx_handle, (nx,), "{weight}", align=4)
    ky = T.match_buffer(ky_handle, (ny,), "{weight}", align=4)
    line = T.match_buffer(line_handle, (n_line,), "{src}", align=1)
    ring = T.match_buffer(ring_handle, (n_ring,), "{ring}", align={ring_align})
    offsets = T.match_buffer(offsets_handle, ({max_strips} * ny,), "int32", align=4)
    csum = T.match_buffer(csum_handle, (n_csum,), "{column}", align={column_align})
    powers = T.match_buffer(powers_handle, (n_powers,), "{ring}", align={ring_align})
    # wl: a strip's line (a padded row and a spare block); wr: a ring row (whole blocks).
    wl = wpc + {block}
    wr = (wc + {block} - 1) // {block} * {block}
    # wp: a strip's row of powers (_row_pass_doubling), whole blocks: aligned vector stores
    wp = (wpc + {block} - 1) // {block} * {block}
    # A row's blocks; those from `inner` to `outer` read only image values (_row_pass), whose
    # span is the row kernel's reach (nx - 1 taps, `channels` values apart).
    blocks = (wc + {block} - 1) // {block}
    span = (nx - 1) * channels + {block}
    inner = T.min((left + {block} - 1) // {block}, blocks)
    outer = T.min(T.max(inner, (wc + left - span) // {block} + 1), blocks)
    for s in T.parallel(strips):
        rsums = T.alloc_buffer(({block},), "{ring}", scope="local")
        csums = T.alloc_buffer(({block},), "{column}", scope="local")
        y0 = h * s // strips
        y1 = h * (s + 1) // strips
        for r in range(ny - 1):
{first_rows}
        for y in range(y0, y1):
{next_row}
{column_pass}
"""


# Each output row from the ring's `ny` rows of row sums.
_SUMMED_COLUMNS = """\
for t in range(ny):  # each tap's row of row sums in the ring
    offsets[s * ny + t] = s * ny * wr + (y + t) % ny * wr
sums = csums
for xo in range(wc // {block}):
{column_block}
for x in range(wc // {block} * {block}, wc):
    sums[0] = T.{column}(0)
    for t in range(ny):
        sums[0] = sums[0] + {column_tail}
    out[y, x] = {store_tail}
"""


def _running_columns(column: str, finish: str) -> str:
    """A box's column pass (after the row pass) as a running sum per strip (its `csum` row,
    OpenCV's ColumnSum): the strip's first row starts it from the ring's first
    ny - 1 rows; each row adds its newest row of row sums, stores, and subtracts its oldest
    (which the next row pass writes over). One pass over the row, whatever the kernel's
    height."""
    at = "csum[s * wc + {x}]"

    def ring_row(row: str) -> str:
        return f'T.Cast("{column}", ring[s * ny * wr + ({row}) % ny * wr + {{x}}])'

    start = (
        "if y == y0:\n"
        + indent(columns(f"{at} = T.{column}(0)", "0", "wc", LANES), 4)
        + "    for t in range(ny - 1):\n"
        + indent(columns(f"{at} = {at} + {ring_row('y0 + t')}", "0", "wc", LANES), 8)
    )

    def run(store: str, first: str, stop: str, lanes: int) -> str:
        body = (
            f"v = {at} + {ring_row('y + ny - 1')}\n"
            f"out[y, {{x}}] = {store.replace('{v}', 'v')}\n"
            f"{at} = v - {ring_row('y')}\n"
        )
        return columns(body, first, stop, lanes)

    if finish == "box_scaled":
        body = f"wc - wc % {SCALED_TAIL}"
        return (
            start + run(_STORE[finish], "0", body, LANES) + run(_SCALED_TAIL_STORE, body, "wc", 1)
        )
    return start + run(_STORE[finish], "0", "wc", LANES)


@functools.cache
def source(
    finish: str,
    ring: str,
    column: str,
    taps: tuple[int, int] | None,
    mirrored: bool = False,
    folded: tuple[tuple[int, ...], tuple[int, ...]] | None = None,
) -> tuple[str, str]:
    """(name, TVMScript) of the kernel ending in `finish` (a key of FINISH), whose row sums
    are `ring` and column sums `column` values (int16, uint16 or int32: sum_types), for
    kernels of any length, or of `taps` (row, column) taps only: each block's sums one
    expression (STATIC_TAPS); `mirrored` (with taps, integer weights each the same read
    backwards, as a gaussian's): each pair of taps summed before its multiply; `folded` (with
    mirrored): the (row, column) weights as constants in the kernel, not read from kx and
    ky (FOLDED)."""
    src = "float32" if finish in FLOAT_FINISHES else "uint8"
    name = f"separable_{src}_{finish}_{ring}_{column}"
    if taps:
        name += f"_{taps[0]}x{taps[1]}" + ("_mirrored" if mirrored else "")
    if folded:
        name += "".join("_w" + "x".join(map(str, w)) for w in folded)
    ones = finish.startswith("box")  # a box's weights are all 1: no multiplies
    row_weights = folded[0] if folded else None

    def row_pass(row: str) -> str:
        return _row_pass(row, src, ring, ones, taps, mirrored, row_weights)

    if ones and not taps:  # a long box: its column sums run, its row sums double
        name += "_running"
        after = _running_columns(column, finish)

        def row_pass(row: str) -> str:
            return _row_pass_doubling(row, ring)

    else:
        weight = "" if ones else (folded[1] if folded else "ky[{t}]")
        value = f"ring[offsets[s * ny + ({{t}})] + xo * {BLOCK} + i]"
        block = block_sums(
            f"out[y, xo * {BLOCK} + i] = "
            + _STORE[finish].format(v="sums[i]", x=f"xo * {BLOCK} + i", column=column),
            value,
            weight,
            taps[1] if taps else "ny",
            column,
            BLOCK,
            mirrored=mirrored,
        )
        tail = f'T.Cast("{column}", ring[offsets[s * ny + t] + x])' + (
            "" if ones else f' * T.Cast("{column}", ky[t])'
        )
        after = _SUMMED_COLUMNS.format(
            block=BLOCK,
            column=column,
            column_block=indent(block, 4),
            column_tail=tail,
            store_tail=_STORE[finish].format(v="sums[0]", x="x", column=column),
        )
    text = _SOURCE.format(
        name=name,
        dst=FINISH[finish],
        src=src,
        weight=src if src == "float32" else "int32",
        ring_align=np.dtype(ring).itemsize,
        column_align=np.dtype(column).itemsize,
        ring=ring,
        column=column,
        block=BLOCK,
        max_strips=MAX_STRIPS,
        first_rows=indent(row_pass("y0 + r"), 12),
        next_row=indent(row_pass("y + ny - 1"), 12),
        column_pass=indent(after, 12),
    )
    return name, inline(
        text, ("y0", "y1", "wl", "wr", "wp", "sums", "blocks", "span", "inner", "outer")
    )


def _smallest(bound: int, signed: bool) -> str:
    if bound <= 32767:
        return "int16"
    if not signed and bound <= 65535:
        return "uint16"
    return "int32"


def sum_types(kernel_x, kernel_y, slack: int = 0, negative: bool = False) -> tuple[str, str]:
    """The smallest integer types that hold every partial row sum and every partial column sum
    of uint8 values by these weights, the column sums plus `slack` (16-bit lanes: twice the
    values a vector, and cheaper multiplies)."""
    kx, ky = np.asarray(kernel_x, np.int64), np.asarray(kernel_y, np.int64)
    rows = 255 * int(np.abs(kx).sum())
    signed = bool((kx < 0).any() or (ky < 0).any()) or negative
    return _smallest(rows, signed), _smallest(rows * int(np.abs(ky).sum()) + slack, signed)


def _common_shift(weights: np.ndarray, most: int) -> int:
    """The largest k <= `most` such that 2^k divides every one of the integer `weights`."""
    k = 0
    while k < most and not np.any(np.mod(weights, 2 ** (k + 1))):
        k += 1
    return k


def separable(
    image: np.ndarray,
    kernel_x,
    kernel_y,
    anchor: tuple[int, int],
    border: int,
    finish: str,
    p0: int = 0,
    p1: int = 0,
    scale: float = 1.0,
    delta: float = 0.0,
    out: np.ndarray | None = None,
    vector_end: int = 0,
    offset: int = 0,
) -> np.ndarray:
    """The separable filter of a uint8 `image` (h, w) or (h, w, c) by the integer weights
    `kernel_x` (along a row) and `kernel_y` (down a column) (of a float32 image by any weights,
    finish "float32") at `anchor` (x, y, inside the
    kernel), the image's border `border` (OpenCV's BORDER_CONSTANT, with zeros, REPLICATE,
    REFLECT, WRAP or REFLECT_101), ended by `finish` (see the module), as a new array of
    FINISH[finish] (or into `out`, which must not overlap `image`). Finish "gaussian_even":
    `vector_end`, where each row's values stop rounding half to even; `offset`, added to the
    sums (of 16 fractional bits, |offset| < 2^30)."""
    if finish not in FINISH:
        raise InputError(f"separable: finish must be one of {sorted(FINISH)}, got {finish!r}")
    source_type = np.float32 if finish in FLOAT_FINISHES else np.uint8
    if not (isinstance(image, np.ndarray) and image.dtype == source_type and image.ndim in (2, 3)):
        raise InputError(
            f"separable: expected a {np.dtype(source_type)} image (h, w) or (h, w, c) for"
            f" finish {finish!r}, got {describe(image)}"
        )
    kx, ky = _weights(kernel_x), _weights(kernel_y)
    channels = image.shape[2] if image.ndim == 3 else 1
    plan = _plan(image.shape[:2], channels, kx, ky, tuple(anchor), border, finish, int(offset))
    out = output(out, image.shape, FINISH[finish], "separable")
    if not image.size:
        return out
    p0, p1 = plan.finishing or (p0, p1)
    (h, w), wc = image.shape[:2], image.shape[1] * channels
    wpc = (w + len(kx) - 1) * channels
    run_strips(
        plan.name,
        plan.text,
        np.ascontiguousarray(image).reshape(h, wc),
        out.reshape(h, wc),
        *plan.tables,
        # (a running box's rows go into its powers rows, not the line)
        scratch(
            "separable_line", MAX_STRIPS * (wpc + BLOCK) if not plan.running else 1, image.dtype
        ),
        scratch("separable_ring", MAX_STRIPS * len(ky) * -(-wc // BLOCK) * BLOCK, plan.ring),
        scratch("separable_offsets", MAX_STRIPS * len(ky), np.int32),
        scratch("separable_csum", MAX_STRIPS * wc if plan.running else 1, plan.column),
        scratch(
            "separable_powers",
            MAX_STRIPS * -(-wpc // BLOCK) * BLOCK if plan.running else 1,
            plan.ring,
        ),
        channels,
        anchor[0] * channels,
        int(p0),
        int(p1),
        float(scale),
        float(delta),
        int(vector_end),
        plan.offset,
        plan.strips,
    )
    return out


def _weights(kernel) -> tuple:
    """A kernel's weights as a tuple of numbers (the plan's key): a tuple as it is (gdp.cv2's
    Gaussian weights: three NumPy calls saved a call)."""
    if kernel.__class__ is tuple:
        return kernel
    return tuple(np.asarray(kernel).ravel().tolist())


class _Plan(NamedTuple):
    name: str
    text: str
    tables: tuple  # rows, columns, kx, ky: the kernel's read-only inputs, as TVM tensors
    ring: np.dtype
    column: np.dtype
    running: bool  # a running column sum (the kernel's csum rows)
    strips: int
    finishing: tuple[int, int] | None  # (p0, p1) the plan sets (the gaussian's)
    offset: int  # gaussian_even's offset in the sums' own units


@functools.lru_cache(maxsize=64)
def _plan(shape, channels, kx, ky, anchor, border, finish, offset=0) -> _Plan:
    """The kernel, its index maps and weights for one image shape and filter (kept: a call of
    a known size builds nothing)."""
    from gdp.ops.border_index import padded_maps
    from gdp.runtime.backends.tvm.llvm import pool_threads

    kx, ky = np.array(kx, np.float64), np.array(ky, np.float64)
    floats = finish in FLOAT_FINISHES
    integral = np.all(kx == np.round(kx)) and np.all(ky == np.round(ky))
    if not (kx.size and ky.size and (floats or integral)):
        raise InputError("separable: expected non-empty kernels, of integers for uint8 images")
    if finish.startswith("box") and not (np.all(kx == 1) and np.all(ky == 1)):
        raise InputError("separable: a box's kernels are ones")
    gaussian = finish in ("gaussian", "gaussian_even")
    if gaussian and (np.any(kx < 0) or np.any(ky < 0)):
        raise InputError("separable: a gaussian's fixed-point weights are >= 0")
    (h, w), (ax, ay) = shape, anchor
    if not (0 <= ax < kx.size and 0 <= ay < ky.size):
        raise InputError(
            f"separable: the anchor {anchor} is outside the {kx.size}x{ky.size} kernel"
        )
    wc = w * channels
    line = (w + kx.size - 1) * channels + BLOCK
    if max(h * wc, MAX_STRIPS * ky.size * (wc + BLOCK), MAX_STRIPS * line) > MAX_VALUES:
        raise InputError(f"separable: {h * wc} values, more than the {MAX_VALUES} indexed")
    try:
        rows, values = padded_maps(shape, channels, (ky.size, kx.size), anchor, border)
    except ValueError as err:
        raise InputError(f"separable: {err}") from err
    finishing = None  # the gaussian's (p0, p1): its rounding and shift
    if gaussian:  # 8 + 8 fractional bits, less the powers of two the weights share
        sx, sy = _common_shift(kx, 8), _common_shift(ky, 8)
        if not -(1 << 30) < offset < 1 << 30:
            raise InputError(f"separable: an offset of {offset}, not within +-2^30")
        while offset % (1 << (sx + sy)):  # the offset in the sums' units: an integer
            sx, sy = (sx - 1, sy) if sx > sy else (sx, sy - 1)
        offset >>= sx + sy
        kx, ky = kx / 2**sx, ky / 2**sy
        shift = 16 - sx - sy
        finishing = (1 << shift >> 1, shift)
    if finish == "box_float32":
        ring, column = "float64", "float64"
    elif floats:
        ring, column = "float32", "float32"
    else:
        slack = (finishing[0] if finishing else 0) + abs(offset)
        ring, column = sum_types(kx, ky, slack, negative=offset < 0)
    # (a scaled box always runs: its row's last values are scaled apart, _running_columns)
    short = max(kx.size, ky.size) <= STATIC_TAPS and finish != "box_scaled"
    static = (kx.size, ky.size) if short else None
    # A gaussian's weights are the same read backwards: half the multiplies
    symmetric = np.all(kx == kx[::-1]) and np.all(ky == ky[::-1])
    mirrored = bool(gaussian and static and symmetric)
    pair = (tuple(int(v) for v in kx), tuple(int(v) for v in ky))
    folded = pair if mirrored and set(pair) <= FOLDED else None
    name, text = source(finish, ring, column, static, mirrored, folded)
    weight = np.float32 if floats else np.int32
    tables = host_tensors(rows, values, kx.astype(weight), ky.astype(weight))
    strips = max(1, min(MAX_STRIPS, h // max(ky.size, 8)))
    running = name.endswith("_running")
    if running:  # each strip sums ny - 1 rows before its first: strips of 8 (ny - 1) rows, or
        # one a thread (a 31x31 box of 480 rows in 15 strips summed twice its rows)
        strips = min(strips, max(pool_threads(), h // (8 * (ky.size - 1) or 1)))
    if finish == "int16" and alone(h * wc * 3):
        # a small image's derivative on this thread (gdp.runtime.launch): 480p gray Sobel
        # 0.15 -> 0.13 ms; a 5x5 blur, more work a value, ran slower on one (0.074 -> 0.098)
        strips = 1
    return _Plan(
        name, text, tables, np.dtype(ring), np.dtype(column), running, strips, finishing, offset
    )
