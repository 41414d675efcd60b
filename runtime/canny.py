"""cv2.Canny's first half for a uint8 image (gray or of 2-4 interleaved channels) and aperture 3,
5 or 7 as one hand-written TIR kernel: Sobel (BORDER_REPLICATE), the L1 or L2 magnitude (of several
channels, the channel whose magnitude is largest, the first on ties, as canny.cpp's strict `>`
picks it), non-maximum suppression with OpenCV's direction rule and the double threshold,
written as the level map gdp.runtime.hysteresis floods in place (0: no candidate, 1: a weak one,
2: a strong one).

Why by hand: as a graph (gdp.ops.image.canny_candidates) the backend stores dx, dy, their
absolute values and the magnitude as five int32 images, pads the magnitude twice and computes
the suppression once per output map: at 1080p its kernels took 6-7 ms, OpenCV's whole Canny
3.5-4 ms. Here each row's gradients are computed once into a ring of three rows that stays in
cache, in 16 bits for the L1 magnitude (32 for L2), and the image is read and the level map
written once: 1.1 ms (L1, 1080p, 2 threads).

The arithmetic is canny_candidates' (and canny.cpp's), magnitudes outside the image count as 0.
Rows are cut into strips run in parallel on TVM's pool; a strip computes the gradient rows on
either side of it itself, so strips share nothing but the image.

Apertures 5 and 7 compute a row's gradients in two passes, each value's vertical sums over
the source rows into two scratch rows of the strip, then their horizontal sums (_COLUMN_SUMS);
aperture 3 reads its nine pixels directly.

Several channels: a row's gradients are computed over the interleaved values (the neighbours of
value e are e - channels and e + channels: contiguous vector loads) into a scratch row of the
strip, then each pixel takes its largest channel into the ring; only that pick reads values
`channels` apart. (Gradients read channel by channel took 8 such strided loads per value.)
"""

from __future__ import annotations

import functools

import numpy as np

from gdp.errors import InputError
from gdp.ops.derivatives import deriv_kernel
from gdp.runtime.hysteresis import is_level_map
from gdp.runtime.launch import run_host_kernel
from gdp.runtime.tir_text import columns, describe, indent, inline
from gdp.runtime.workspace import aligned_empty, scratch

# Each strip's ring: three rows of (magnitude, dx, dy), each w + 2 wide (a zero magnitude on
# either side of the image).
_RING_ROWS = 9
# A TIR vector's bytes: one AVX-512 register (32 int16 or 16 int32 columns).
VECTOR_BYTES = 64
# Strips: enough to balance TVM's threads, few enough that each is many rows.
STRIPS = 16

# One gradient row `yy` (-1 and h: a zero magnitude row). {x}: the column (of several channels,
# the interleaved value); {xl} and {xr}: its left and right neighbours'. The magnitude, dx and
# dy go to {at} + 0, 1, 2 times {row} (ring slot (yy + 3) % 3 of a gray image; the strip's
# scratch row of a colour one). Its names are inlined (inline) before it is a kernel's body;
# the magnitude reads dx and dy back from the ring, which LLVM forwards from the stores
# (computed again from the image, after a store it cannot prove is not to the image, they cost
# the gradient loop twice its work).
_GRADIENT = """\
tl = T.{t}(img[ya, {xl}])
tc = T.{t}(img[ya, {x}])
tr = T.{t}(img[ya, {xr}])
ml = T.{t}(img[yy, {xl}])
mr = T.{t}(img[yy, {xr}])
bl = T.{t}(img[yc, {xl}])
bc = T.{t}(img[yc, {x}])
br = T.{t}(img[yc, {xr}])
dx = (tr - tl) + (mr - ml) * 2 + (br - bl)
dy = (bl + bc * 2 + br) - (tl + tc * 2 + tr)
ring[{at} + {row}] = dx
ring[{at} + 2 * {row}] = dy
dx = ring[{at} + {row}]
dy = ring[{at} + 2 * {row}]
ring[{at}] = {magnitude}
"""

# Apertures 5 and 7 (canny.cpp's Sobel of that size to CV_16S, BORDER_REPLICATE), in two passes
# over a row's values. First each value's vertical smoothing and difference over the rows r0 ..
# r<aperture - 1> into the strip's rows `vs` and `ds` (at most 64 * 255 and 10 * 255: the ring's
# type holds them), whose `pad` values either side repeat the first and last pixel's; then dx
# and dy, their horizontal difference and smoothing, in type {a} (aperture 7's sums, up to
# 163200, scaled by 1/16 and rounded half to even as OpenCV's float scale is). Written as one
# expression of 49 loads per value, a 7x7 kernel took 15 s to compile.
_COLUMN_SUMS = """\
ring[vs + pad + {x}] = {smooth}
ring[ds + pad + {x}] = {difference}
"""
_PADS = """\
for k in range(pad):
    ring[vs + k] = ring[vs + pad + k % {n}]
    ring[vs + pad + {width} + k] = ring[vs + pad + {width} - {n} + k % {n}]
    ring[ds + k] = ring[ds + pad + k % {n}]
    ring[ds + pad + {width} + k] = ring[ds + pad + {width} - {n} + k % {n}]
"""
_ROW_SUMS = """\
dx = {dx}
dy = {dy}
ring[{at} + {row}] = {scaled_dx}
ring[{at} + 2 * {row}] = {scaled_dy}
dx = ring[{at} + {row}]
dy = ring[{at} + 2 * {row}]
ring[{at}] = {magnitude}
"""


def _weighted(weights: list[int], terms: list[str], kind: str) -> str:
    """sum of weights[i] * terms[i] in type `kind`, zero weights left out."""
    pairs = zip(weights, terms, strict=True)
    return " + ".join(f"{term} * T.{kind}({c})" for c, term in pairs if c)


def _large_aperture(aperture: int, t: str, n: int, lanes: int, stores: dict[str, str]) -> str:
    """A row's gradients for aperture 5 or 7 (see _COLUMN_SUMS) over ring type `t`, of images of
    `n` interleaved values per pixel, stored as `stores` ({at}, {row}, {magnitude}) says."""
    smooth = [int(c) for c in deriv_kernel(0, aperture)]
    difference = [int(c) for c in deriv_kernel(1, aperture)]
    r = aperture // 2
    width = "w" if n == 1 else "wc"
    pixels = [f"T.{t}(img[r{i}, {{x}}])" for i in range(aperture)]
    column_sums = _COLUMN_SUMS.format(
        x="{x}",
        smooth=_weighted(smooth, pixels, t),
        difference=_weighted(difference, pixels, t),
    )
    a = "int32" if aperture == 7 else t  # 5: |dx|, |dy| <= 48 * 255 fit 16 bits

    def taps(row: str) -> list[str]:
        return [f"T.{a}(ring[{row} + pad + {{x}} + {(j - r) * n}])" for j in range(aperture)]

    def scaled(name: str) -> str:
        if aperture != 7:
            return name
        return f"T.{t}(T.shift_right({name} + 7 + (T.shift_right({name}, 4) & 1), 4))"

    row_sums = (
        _ROW_SUMS.replace("{dx}", _weighted(difference, taps("vs"), a))
        .replace("{dy}", _weighted(smooth, taps("ds"), a))
        .replace("{scaled_dx}", scaled("dx"))
        .replace("{scaled_dy}", scaled("dy"))
    )
    for name, value in stores.items():
        row_sums = row_sums.replace(name, value)
    return (
        columns(column_sums, "0", f"{width}", lanes)
        + _PADS.format(n=n, width=width)
        + columns(row_sums, "0", f"{width}", lanes)
    )


# Of several channels: pixel {x}'s largest channel from the strip's scratch row into the ring
# (channel 0, then each later one where its magnitude is strictly larger).
_PICK_FIRST = """\
v = sc + {x} * {channels}
ring[mag + {x} + 1] = ring[v]
ring[mag + w2 + {x} + 1] = ring[v + wc]
ring[mag + 2 * w2 + {x} + 1] = ring[v + 2 * wc]
"""
_PICK_NEXT = """\
v = sc + {x} * {channels} + {c}
p = mag + {x} + 1
larger = ring[v] > ring[p]
ring[p + w2] = T.Select(larger, ring[v + wc], ring[p + w2])
ring[p + 2 * w2] = T.Select(larger, ring[v + 2 * wc], ring[p + 2 * w2])
ring[p] = T.max(ring[v], ring[p])
"""

_ROW = """\
if yy >= 0 and yy < h:
{source_rows}
    mag = base + (yy + 3) % 3 * 3 * w2
    ring[mag] = T.{t}(0)
    ring[mag + w + 1] = T.{t}(0)
{interior}
{border}
{pick}
else:
    mag = base + (yy + 3) % 3 * 3 * w2
    for x in range(w2):
        ring[mag + x] = T.{t}(0)
"""

# Column {x} of row y's level. canny.cpp's direction tests, |dy| * 2^15 < |dx| * 13573 and
# |dy| * 2^15 > |dx| * (13573 + 2^16), are here |dy| <= k (and dx != 0) and |dy| > 2 |dx| + k for
# k = |dx| * 13573 // 2^15 = (|dx| * 27146) >> 16, in 16 bits when {t} is (the same for every
# |dx|, |dy| <= 12240, any aperture's, checked by tests/gdp/cv2/test_canny.py);
# s = (dx ^ dy) < 0 ? -1 : 1 picks the diagonal.
_NMS = """\
m = ring[c + {x} + 1]
gx = ring[c + w2 + {x} + 1]
gy = ring[c + 2 * w2 + {x} + 1]
ax = T.Select(gx < 0, T.{t}(0) - gx, gx)
ay = T.Select(gy < 0, T.{t}(0) - gy, gy)
k = T.{t}(T.shift_right(T.int32(ax) * 27146, 16))
same = (gx ^ gy) >= T.{t}(0)
up_diag = T.Select(same, ring[u + {x}], ring[u + {x} + 2])
down_diag = T.Select(same, ring[d + {x} + 2], ring[d + {x}])
horizontal = m > ring[c + {x}] and m >= ring[c + {x} + 2]
vertical = m > ring[u + {x} + 1] and m >= ring[d + {x} + 1]
diagonal = m > up_diag and m > down_diag
steep = T.Select(ay > ax * T.{t}(2) + k, vertical, diagonal)
local_max = T.Select(ay <= k and ax != T.{t}(0), horizontal, steep)
level = T.Select(m > T.{t}(high), T.uint8(2), T.uint8(1))
out[y, {x}] = T.Select(local_max and m > T.{t}(low), level, T.uint8(0))
"""


# The names _SOURCE and _ROW bind, inlined (inline).
_ROW_NAMES = (
    ("w2", "rows", "base", "sc", "y0", "y1", "yy", "ya", "yc", "mag", "xb", "c", "u", "d")
    + ("pad", "vs", "ds")
    + tuple(f"r{i}" for i in range(7))
)

_SOURCE = """
@T.prim_func
def canny_levels(
    img_handle: T.handle, out_handle: T.handle, ring_handle: T.handle, low: T.int32, high: T.int32
):
    T.func_attr({{"global_symbol": "canny_levels", "tir.noalias": True}})
    h = T.int32()
    w = T.int32()
    n = T.int32()
{img_width}
    img = T.match_buffer(img_handle, (h, {img_w}), "uint8", align=1)
    out = T.match_buffer(out_handle, (h, w), "uint8", align=1)
    ring = T.match_buffer(ring_handle, (n,), "{t}", align=2)
    w2 = w + 2
    rows = (h + {strips} - 1) // {strips}
    for s in T.parallel({strips}):
        base = s * {ring_rows} * w2
        sc = {strips} * {ring_rows} * w2 + s * 3 * {img_w}
{sums_rows}        y0 = s * rows
        y1 = T.min(h, y0 + rows)
        if y0 < h:
            for r in range(2):
                yy = y0 - 1 + r
{first_rows}
            for y in range(y0, y1):
                yy = y + 1
{next_row}
                c = base + y % 3 * 3 * w2
                u = base + (y + 2) % 3 * 3 * w2
                d = base + (y + 1) % 3 * 3 * w2
{nms}
"""


def ring_type(l2_gradient: bool) -> np.dtype:
    """The ring's integers: 16 bits hold the L1 magnitude (at most 24480, aperture 5's) and dx,
    dy (at most 12240 in size); the L2 magnitude (up to 2 * 12240^2) needs 32."""
    return np.dtype(np.int32 if l2_gradient else np.int16)


# The ring type's largest value, by l2_gradient (np.iinfo: 2 us a call).
_LARGEST = {l2: int(np.iinfo(ring_type(l2)).max) for l2 in (False, True)}

# The Sobel apertures the kernel is made for (each its own kernel).
APERTURES = (3, 5, 7)


@functools.cache
def source(l2_gradient: bool, channels: int = 1, aperture: int = 3) -> str:
    """The kernel's TVMScript for the L1 or L2 magnitude of images of `channels` interleaved
    channels and a Sobel of `aperture` (made once: a call hashes no new text)."""
    t = ring_type(l2_gradient).name
    lanes = VECTOR_BYTES // ring_type(l2_gradient).itemsize
    magnitude = (
        "dx * dx + dy * dy"
        if l2_gradient
        else f"T.Select(dx < 0, T.{t}(0) - dx, dx) + T.Select(dy < 0, T.{t}(0) - dy, dy)"
    )
    n = channels  # a value's neighbours are n values either side
    r = aperture // 2  # columns and rows either side
    if n == 1:  # straight into the ring
        at, row_size, pick = "mag + {x} + 1", "w2", ""
    else:  # into the strip's scratch row, then each pixel's largest channel into the ring
        at, row_size = "sc + {x}", "wc"
        picks = _PICK_FIRST + "".join(_PICK_NEXT.replace("{c}", str(c)) for c in range(1, n))
        pick = columns(picks.replace("{channels}", str(n)), "0", "w", lanes)
    if aperture == 3:
        source_rows = "    ya = T.max(yy - 1, 0)\n    yc = T.min(yy + 1, h - 1)"
        gradient = _GRADIENT.replace("{at}", at).replace("{row}", row_size)
        gradient = gradient.replace("{t}", t).replace("{magnitude}", magnitude)
        interior = columns(
            gradient.format(x="{x}", xl=f"{{x}} - {n}", xr=f"{{x}} + {n}"),
            str(n),
            f"w * {n} - {n}",
            lanes,
        )
        # The first and last column (the only one of a row one pixel wide).
        last = "w - 1" if n == 1 else f"(w - 1) * {n} + xb % {n}"
        border_column = "k * (w - 1)" if n == 1 else f"k % {n} + k // {n} * (w - 1) * {n}"
        border = f"for k in range(T.min(w, 2) * {n}):\n    xb = {border_column}\n" + indent(
            inline(
                gradient.format(
                    x="xb", xl=f"T.max(xb - {n}, xb % {n})", xr=f"T.min(xb + {n}, {last})"
                )
            ),
            4,
        )
        sums_rows = ""
    else:
        source_rows = "\n".join(
            f"    r{i} = T.min(T.max(yy + {i - r}, 0), h - 1)" for i in range(aperture)
        )
        stores = {"{at}": at, "{row}": row_size, "{magnitude}": magnitude}
        interior = _large_aperture(aperture, t, n, lanes, stores)
        border = ""
        # Each strip's rows vs and ds, img_w + 2 pad values each, after the rings and the
        # scratch rows of several channels.
        pad = r * n
        img_w = "w" if n == 1 else "wc"
        first = f"{STRIPS} * {_RING_ROWS} * w2" + ("" if n == 1 else f" + {STRIPS} * 3 * wc")
        sums_rows = (
            f"        pad = {pad}\n"
            f"        vs = {first} + s * 2 * ({img_w} + {2 * pad})\n"
            f"        ds = vs + {img_w} + {2 * pad}\n"
        )
    row = _ROW.replace("{t}", t).format(
        source_rows=source_rows,
        interior=indent(interior, 4),
        border=indent(border, 4),
        pick=indent(pick, 4),
    )
    text = _SOURCE.replace("{t}", t).format(
        img_width="" if n == 1 else "    wc = T.int32()",
        img_w="w" if n == 1 else "wc",
        strips=STRIPS,
        ring_rows=_RING_ROWS,
        sums_rows=sums_rows,
        first_rows=indent(row, 16),
        next_row=indent(row, 16),
        nms=indent(columns(_NMS.replace("{t}", t), "0", "w", lanes), 16),
    )
    return inline(text, _ROW_NAMES)


# Flat offsets into the ring and the image are int32.
MAX_PIXELS = (1 << 30) - 1


# Channel counts the kernel is made for (each its own kernel).
CHANNELS = (1, 2, 3, 4)


def canny_levels(
    image: np.ndarray,
    low: int,
    high: int,
    l2_gradient: bool,
    out: np.ndarray | None = None,
    aperture: int = 3,
) -> np.ndarray:
    """The level map (uint8 0/1/2, as gdp.runtime.hysteresis.flood_levels takes it) of a uint8
    image (h, w) or (h, w, channels), for cv2.Canny's integer thresholds
    (gdp.ops.image.canny_thresholds), written into `out` where it is a writeable, C-contiguous,
    8-byte aligned uint8 array of shape (h, w), else into a new array, and returned.

    `aperture` is the Sobel's (3, 5 or 7; 7's gradients scaled by 1/16 as OpenCV's, whose
    thresholds the caller divides by 16 too). A threshold below 0 is taken as -1 and one above
    the ring's type as its largest value, which changes no comparison: magnitudes lie in
    [0, 24480] (L1) or [0, 2 * 12240^2] (L2)."""
    if not (
        isinstance(image, np.ndarray)
        and image.dtype == np.uint8
        and (image.ndim == 2 or (image.ndim == 3 and image.shape[2] in CHANNELS))
    ):
        raise InputError(
            "canny_levels: expected a uint8 image (h, w) or (h, w, channels) of"
            f" {', '.join(map(str, CHANNELS))} channels, got {describe(image)}"
        )
    if aperture not in APERTURES:
        raise InputError(f"canny_levels: expected an aperture of {APERTURES}, got {aperture!r}")
    h, w = image.shape[:2]
    channels = image.shape[2] if image.ndim == 3 else 1
    if image.size > MAX_PIXELS:
        raise InputError(
            f"canny_levels: the image has {image.size} values, more than the {MAX_PIXELS} the"
            " kernel indexes"
        )
    largest = _LARGEST[bool(l2_gradient)]
    low, high = (min(max(int(t), -1), largest) for t in (low, high))
    image = np.ascontiguousarray(image).reshape(h, w * channels)
    if out is None or not is_level_map(out, (h, w)):
        # aligned (the flood reads the map as 8-byte words)
        out = aligned_empty((h, w), np.uint8)
    if not image.size:
        return out
    name = f"canny_levels_{'l2' if l2_gradient else 'l1'}"
    if channels > 1:
        name += f"_c{channels}"
    if aperture != 3:
        name += f"_a{aperture}"
    # The strips' rings (and, of several channels, their scratch rows after them).
    size = STRIPS * _RING_ROWS * (w + 2) + (STRIPS * 3 * w * channels if channels > 1 else 0)
    if aperture > 3:  # the column sums' rows (_COLUMN_SUMS)
        size += STRIPS * 2 * (w + aperture - 1) * channels
    ring = scratch("canny_ring", size, ring_type(l2_gradient))
    text = source(l2_gradient, channels, aperture)
    run_host_kernel(name, text, image, out, ring, low, high)
    return out
