"""cv2.transpose and cv2.rotate by 90 degrees as one hand-written TIR kernel for the host CPU,
for an image of any dtype and channel count: its pixels are moved as elements of E bytes
(itemsize x channels), which a transpose never splits.

Each block of pixels, 8 wide and as tall as 64 bytes of an output row where the pixel size
divides 64 (64 rows of bytes, 16 of 4-byte pixels; else 8), is its rows' vectors of 8 pixels
loaded whole, one byte shuffle (vpermb/vpermt2b on AVX-512) into the 8 output rows' order (the
rows of a clockwise rotation reversed), and 8 stores of an output row's part each. Blocks go 16
wide across the image and down a strip of rows; strips are whole groups of 64 rows, so no two
share an output cache line but at a row's ends. Rows below the last tall block go in 8-row
blocks; the pixels right of or below the last whole block are copied a byte at a time.
(8x8 blocks of bytes stored 8 bytes to a row: a 1024x1024 gray transpose 0.44 ms, 0.22 as 64x8;
a 16x16 block by four unpack rounds was twice as fast on a 480p image in cache, a third slower
on 1080p and 4K ones.)

Why by hand: TVM's transpose moves a byte at a time along its output rows, reading down input
columns: a 4K gray image took 12 ms against OpenCV's 1.9, a 1080p BGR rotation 3.0 ms against
2.5.
"""

from __future__ import annotations

import functools

import numpy as np

from gdp.errors import InputError
from gdp.runtime.launch import run_strips, strips_for
from gdp.runtime.tir_text import describe
from gdp.runtime.workspace import output

# A block: `rows` (block_rows: 64 bytes of each output row where the pixel size divides 64,
# at least 8) by BLOCK columns; blocks a tile has across.
BLOCK = 8
TILE = 16
# Output bytes of a block's row at least, and a strip's rows at least.
LINE = 64
# Element sizes the kernel takes: up to 16 bytes (float32 x 4), a block's vector 1 KB.
MAX_ELEMENT = 16
# Bytes per strip at least (fewer strips for a small image) and strips at most.
STRIP_BYTES = 1 << 16
MAX_STRIPS = 16
# Flat byte offsets are int32.
MAX_BYTES = (1 << 31) - 1

# Where input pixel (i, j) of an (h, w) image lands: output (row, column) of each kind.
KINDS = {
    "transpose": ("j", "i"),
    "clockwise": ("j", "h - 1 - i"),
    "counterclockwise": ("w - 1 - j", "i"),
}

# Strip s takes block rows [{first}, {last}), whole groups of LINE rows (so that no two strips,
# on two cores, share an output cache line but at the ends of a row); the last strip takes the
# rest, and below its last block row the 8-row blocks and then the pixels left.
_SOURCE = """
@T.prim_func
def {name}(img_handle: T.handle, out_handle: T.handle, h: T.int32, w: T.int32, strips: T.int32):
    T.func_attr({{"global_symbol": "{name}", "tir.noalias": True}})
    n = T.int32()
    img = T.match_buffer(img_handle, (n,), "uint8", align=1)
    out = T.match_buffer(out_handle, (n,), "uint8", align=1)
    for s in T.parallel(strips):
        # a block's pixels in output order (a stack array, kept in registers)
        v = T.alloc_buffer(({block_bytes},), "uint8")
        for t in range((w // {b} + {tile} - 1) // {tile}):
            for r in range({last} - {first}):
                for c in range(T.min({tile}, w // {b} - t * {tile})):
{block}
{short_blocks}
        # the columns right of the last whole block, in this strip's rows
        for i in range(
            {first} * {rows}, T.Select(s == strips - 1, h // {b} * {b}, {last} * {rows})
        ):
            for j in range(w // {b} * {b}, w):
{pixel}
        # the rows below the last whole block
        if s == strips - 1:
            for i in range(h // {b} * {b}, h):
                for j in range(w):
{pixel_below}
"""

# The 8-row blocks between the last block row of a taller block and the last whole 8 rows.
_SHORT_BLOCKS = """            if s == strips - 1:
                for r in range(h // {rows} * {rows} // {b}, h // {b}):
                    for c in range(T.min({tile}, w // {b} - t * {tile})):
{block}"""

_PIXEL = """\
{indent}for e in range({e}):
{indent}    out[(({row}) * h + {col}) * {e} + e] = img[(i * w + j) * {e} + e]"""


def block_rows(element: int) -> int:
    """The rows of a block of `element`-byte pixels."""
    return max(BLOCK, LINE // element) if LINE % element == 0 else BLOCK


def _block(kind: str, e: int, rows: int, i0: str, spaces: int) -> str:
    """The statements that move block (r, c) of tile t, `rows` rows from row `i0`: one row
    vector of BLOCK pixels from each row, one shuffle into the output rows' order (their pixels
    from the input rows, reversed for a clockwise rotation), BLOCK stores of `rows` pixels."""
    b = BLOCK
    j0 = f"(t * {TILE} + c) * {b}"
    loads = ", ".join(
        f"img[T.Ramp((({i0} + {i}) * w + {j0}) * {e}, 1, {b * e})]" for i in range(rows)
    )
    order = [
        (rows - 1 - q if kind == "clockwise" else q) * b * e + j * e + k
        for j in range(b)
        for q in range(rows)
        for k in range(e)
    ]
    indent = " " * spaces
    lines = [f"{indent}v[T.Ramp(0, 1, {rows * b * e})] = T.Shuffle([{loads}], {order})"]
    first_column = f"h - {rows} - {i0}" if kind == "clockwise" else i0
    for j in range(b):
        row = KINDS[kind][0].replace("j", f"({j0} + {j})")
        lines.append(
            f"{indent}out[T.Ramp((({row}) * h + {first_column}) * {e}, 1, {rows * e})]"
            f" = v[T.Ramp({j * rows * e}, 1, {rows * e})]"
        )
    return "\n".join(lines)


@functools.cache
def source(kind: str, element: int) -> tuple[str, str]:
    """(name, TVMScript) of the kernel moving `element`-byte pixels as `kind` says."""
    name = f"{kind}_x{element}"
    row, col = KINDS[kind]
    rows = block_rows(element)
    group = max(1, LINE // rows)  # block rows a group of LINE rows
    first = f"h // {rows * group} * s // strips * {group}"
    last = (
        f"T.Select(s == strips - 1, h // {rows}, h // {rows * group} * (s + 1) // strips * {group})"
    )
    short = ""
    if rows > BLOCK:
        short = _SHORT_BLOCKS.format(
            rows=rows,
            b=BLOCK,
            tile=TILE,
            block=_block(kind, element, BLOCK, f"r * {BLOCK}", 24),
        )
    return name, _SOURCE.format(
        name=name,
        b=BLOCK,
        rows=rows,
        tile=TILE,
        block_bytes=rows * BLOCK * element,
        block=_block(kind, element, rows, f"({first} + r) * {rows}", 20),
        short_blocks=short,
        first=first,
        last=last,
        pixel=_PIXEL.format(indent=" " * 16, e=element, row=row, col=col),
        pixel_below=_PIXEL.format(indent=" " * 20, e=element, row=row, col=col),
    )


def element_bytes(image: np.ndarray) -> int:
    """The bytes of one pixel of an (H, W) or (H, W, C) array."""
    return image.itemsize * (int(image.shape[2]) if image.ndim == 3 else 1)


def takes(image: np.ndarray) -> bool:
    """Whether the kernel takes this array: (H, W) or (H, W, C), pixels of at most MAX_ELEMENT
    bytes, under MAX_BYTES."""
    return (
        image.ndim in (2, 3) and element_bytes(image) <= MAX_ELEMENT and image.nbytes <= MAX_BYTES
    )


def move(image: np.ndarray, kind: str, out: np.ndarray | None = None) -> np.ndarray:
    """`image` (H, W[, C]) transposed or rotated by 90 degrees ("clockwise",
    "counterclockwise"): a new (W, H[, C]) array, or into `out`."""
    if kind not in KINDS:
        raise InputError(f"transpose: expected one of {sorted(KINDS)}, got {kind!r}")
    if not (isinstance(image, np.ndarray) and takes(image)):
        raise InputError(
            f"{kind}: expected an (H, W) or (H, W, C) array of pixels of at most"
            f" {MAX_ELEMENT} bytes and under {MAX_BYTES} bytes, got {describe(image)}"
        )
    h, w = int(image.shape[0]), int(image.shape[1])
    out = output(out, (w, h, *image.shape[2:]), image.dtype, kind)
    if image.size:
        flat = np.ascontiguousarray(image).reshape(-1).view(np.uint8)
        most = max(1, min(MAX_STRIPS, image.nbytes // STRIP_BYTES, h // LINE))
        strips = strips_for(2 * image.nbytes, most)
        name, text = source(kind, element_bytes(image))
        run_strips(name, text, flat, out.reshape(-1).view(np.uint8), h, w, strips)
    return out
