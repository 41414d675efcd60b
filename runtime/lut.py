"""Two hand-written TIR kernels for uint8 images on the host CPU: a 256-entry table lookup, and
a 256-bin histogram. gdp.cv2 runs through them what is a table of the pixel for uint8
(threshold of every kind, convertScaleAbs, LUT, and with a histogram first equalizeHist and
THRESH_OTSU), its tables computed on the host exactly as gdp.ops computes them.

Why by hand: as graphs these are gathers from a table, which TVM loads a lane at a time (1080p
BGR convertScaleAbs 1.3-1.7 ms, OpenCV's arithmetic 0.7 ms), and a histogram by scatter-add
(equalizeHist 4.5 ms, OpenCV 1.0 ms); and each call paid the compiled program's fixed cost, about
40 us against OpenCV's 2 us on an 8x8 image.

- The lookup, on a CPU with AVX-512 VBMI, looks up 64 pixels with two byte permutes over the
  table's four 64-byte quarters (vpermi2b picks by an index's low 7 bits) and a select on the
  top bit; elsewhere, a pixel at a time.
- The histogram counts into four interleaved sub-histograms per strip, so that runs of one
  value do not wait on their own increments; the host sums the strips' counts.

Both split the image into strips that run on TVM's pool.
"""

from __future__ import annotations

import functools

import numpy as np

from gdp.errors import InputError
from gdp.runtime.launch import run_strips
from gdp.runtime.tir_text import byte_lookup, describe
from gdp.runtime.workspace import output

# A vector of the lookup: 64 bytes (one AVX-512 register).
LANES = 64
# Pixels per strip at least (fewer strips for a small image: a parallel launch costs more than
# the work), and strips at most (enough to balance TVM's threads): the histogram's counts are a
# strip's each; the lookup, bound by memory, ran a 4K image in 0.14 ms with 64 strips, 0.17
# with 16.
STRIP_PIXELS = 1 << 16
MAX_STRIPS = 16
MAX_LOOKUP_STRIPS = 64
# Flat offsets are int32.
MAX_PIXELS = (1 << 31) - 1

_LOOKUP = """
@T.prim_func
def {name}(img_handle: T.handle, out_handle: T.handle, table_handle: T.handle, strips: T.int32):
    T.func_attr({{"global_symbol": "{name}", "tir.noalias": True}})
    n = T.int32()
    img = T.match_buffer(img_handle, (n,), "uint8", align=1)
    out = T.match_buffer(out_handle, (n,), "uint8", align=1)
    table = T.match_buffer(table_handle, (256,), "uint8", align=1)
    for s in T.parallel(strips):
        # strip s: [start, end), whole vectors but the last strip's tail
        for k in range((n // strips * (s + 1) // 64 * 64 - n // strips * s // 64 * 64) // 64):
{vector}
        if s == strips - 1:
            for i in range(n // strips * strips // 64 * 64, n):
                out[i] = table[img[i]]
"""

# The 64 pixels, written out where they are used ({v}): bound to a name, TVM stored them to
# the stack every vector.
_PIXELS = "img[T.Ramp(n // strips * s // 64 * 64 + k * 64, 1, 64)]"
_VECTOR = """\
            out[T.Ramp(n // strips * s // 64 * 64 + k * 64, 1, 64)] = {value}
"""

_SCALAR = """\
            for i in range(64):
                out[n // strips * s // 64 * 64 + k * 64 + i] = table[
                    img[n // strips * s // 64 * 64 + k * 64 + i]
                ]
"""

_HISTOGRAM = """
@T.prim_func
def histogram_u8(img_handle: T.handle, counts_handle: T.handle, strips: T.int32):
    T.func_attr({"global_symbol": "histogram_u8", "tir.noalias": True})
    n = T.int32()
    m = T.int32()
    img = T.match_buffer(img_handle, (n,), "uint8", align=1)
    counts = T.match_buffer(counts_handle, (m,), "int32", align=4)
    for s in T.parallel(strips):
        for b in range(1024):
            counts[s * 1024 + b] = 0
        # four sub-histograms: pixel 4k + j counts into the j-th
        for k in range((n // strips * (s + 1) - n // strips * s) // 4):
            for j in T.unroll(4):
                counts[s * 1024 + j * 256 + T.Cast("int32", img[n // strips * s + k * 4 + j])] = (
                    counts[s * 1024 + j * 256 + T.Cast("int32", img[n // strips * s + k * 4 + j])]
                    + 1
                )
        for i in range(n // strips * s + (n // strips * (s + 1) - n // strips * s) // 4 * 4,
                       T.Select(s == strips - 1, n, n // strips * (s + 1))):
            counts[s * 1024 + T.Cast("int32", img[i])] = (
                counts[s * 1024 + T.Cast("int32", img[i])] + 1
            )
"""


# cv2.threshold of uint8 by its type (THRESH_BINARY .. THRESH_TOZERO_INV: 0-4), {x} a value,
# `t` the threshold (0-254: x > t), `m` maxval: a compare and a select over 64 values a vector,
# about twice the lookup's speed (the 4K lookup 0.14 ms, this 0.08, OpenCV's 0.10).
_THRESHOLDS = {
    0: "T.Select({x} > {t}, {m}, {zero})",
    1: "T.Select({x} > {t}, {zero}, {m})",
    2: "T.Select({x} > {t}, {t}, {x})",
    3: "T.Select({x} > {t}, {x}, {zero})",
    4: "T.Select({x} > {t}, {zero}, {x})",
}
_THRESHOLD = """
@T.prim_func
def {name}(img_handle: T.handle, out_handle: T.handle, t: T.uint8, m: T.uint8, strips: T.int32):
    T.func_attr({{"global_symbol": "{name}", "tir.noalias": True}})
    n = T.int32()
    img = T.match_buffer(img_handle, (n,), "uint8", align=1)
    out = T.match_buffer(out_handle, (n,), "uint8", align=1)
    for s in T.parallel(strips):
        for k in range(n // strips * (s + 1) // 64 - n // strips * s // 64):
            out[T.Ramp((n // strips * s // 64 + k) * 64, 1, 64)] = {vector}
        if s == strips - 1:
            for e in range(n // strips * strips // 64 * 64, n):
                out[e] = {scalar}
"""


@functools.cache
def threshold_source(kind: int) -> tuple[str, str]:
    """(name, TVMScript) of the threshold kernel of type `kind` (0-4)."""
    name = f"threshold_u8_{kind}"
    ramp = "(n // strips * s // 64 + k) * 64"
    vector = _THRESHOLDS[kind].format(
        x=f"img[T.Ramp({ramp}, 1, 64)]",
        t="T.Broadcast(t, 64)",
        m="T.Broadcast(m, 64)",
        zero="T.Broadcast(T.uint8(0), 64)",
    )
    scalar = _THRESHOLDS[kind].format(x="img[e]", t="t", m="m", zero="T.uint8(0)")
    return name, _THRESHOLD.format(name=name, vector=vector, scalar=scalar)


@functools.cache
def permutes_bytes() -> bool:
    """Whether this CPU has AVX-512 VBMI's byte permute (vpermi2b). Asked once: TVM's answer
    costs 0.25 ms."""
    from tvm.target import codegen

    from gdp.runtime.backends.tvm.kernels import host_target

    return bool(codegen.target_has_features("avx512vbmi", host_target()))


@functools.cache
def lookup_source(vbmi: bool) -> tuple[str, str]:
    """(name, TVMScript) of the lookup kernel, with vpermi2b or a pixel at a time."""
    name = "lut_u8_vbmi" if vbmi else "lut_u8"
    vector = _VECTOR.format(value=byte_lookup("table", 0, _PIXELS)) if vbmi else _SCALAR
    return name, _LOOKUP.format(name=name, vector=vector)


_UINT8 = np.dtype(np.uint8)


def _flat(image: np.ndarray, what: str) -> np.ndarray:
    """The image's values in one C-contiguous row (a copy where they are not: a view's)."""
    if not (isinstance(image, np.ndarray) and image.dtype == _UINT8):
        raise InputError(f"{what}: expected a uint8 array, got {describe(image)}")
    if image.size > MAX_PIXELS:
        raise InputError(f"{what}: {image.size} values, more than the {MAX_PIXELS} it indexes")
    return image.reshape(-1)


def _strips(size: int, most: int = MAX_STRIPS) -> int:
    return max(1, min(most, size // STRIP_PIXELS))


def lookup(image: np.ndarray, table: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """table[image] for a uint8 array of any shape and a (256,) uint8 table, as a new array (or
    into `out`, which may be `image`)."""
    flat = _flat(image, "lookup")
    table = np.ascontiguousarray(table)
    if table.shape != (256,) or table.dtype != np.uint8:
        raise InputError(f"lookup: expected a (256,) uint8 table, got {describe(table)}")
    out = output(out, image.shape, np.uint8, "lookup")
    if flat.size:
        name, text = lookup_source(permutes_bytes())
        run_strips(name, text, flat, out.reshape(-1), table, _strips(flat.size, MAX_LOOKUP_STRIPS))
    return out


def threshold(
    image: np.ndarray, kind: int, thresh: int, maxval: int, out: np.ndarray | None = None
) -> np.ndarray:
    """cv2.threshold of a uint8 array of any shape, type `kind` (THRESH_BINARY .. TOZERO_INV:
    0-4), a threshold in 0-254 (a value above it is "above") and a maxval in 0-255, as a new
    array (or into `out`, which may be `image`)."""
    flat = _flat(image, "threshold")
    if kind not in _THRESHOLDS or not (0 <= thresh <= 254 and 0 <= maxval <= 255):
        raise InputError(
            f"threshold: expected a type 0-4, a threshold 0-254 and a maxval 0-255, got"
            f" {kind}, {thresh} and {maxval}"
        )
    out = output(out, image.shape, np.uint8, "threshold")
    if flat.size:
        name, text = threshold_source(kind)
        strips = _strips(flat.size, MAX_LOOKUP_STRIPS)
        run_strips(name, text, flat, out.reshape(-1), thresh, maxval, strips)
    return out


def histogram(image: np.ndarray) -> np.ndarray:
    """The 256-bin histogram of a uint8 array of any shape (int64 counts)."""
    flat = _flat(image, "histogram")
    if not flat.size:
        return np.zeros(256, np.int64)
    strips = _strips(flat.size)
    counts = np.empty(strips * 1024, np.int32)
    run_strips("histogram_u8", _HISTOGRAM, flat, counts, strips)
    return counts.reshape(-1, 256).sum(axis=0, dtype=np.int64)
