"""cv2.addWeighted of two uint8 images into uint8 as one hand-written TIR kernel for the host
CPU: saturate_cast<uchar>(fma(a, alpha, fma(b, beta, gamma))) in float32, OpenCV's arithmetic
(its vector code's v_fma), rounded half to even.

Why by hand: as a graph, gdp looked each pair up in a 65536-entry table computed on the host
(which the backend could not evaluate differently): a gather a value, 1.5-1.7 ms at 1080p BGR
against OpenCV's 0.9 ms. Here 64 values a vector in float32; LLVM contracts the two multiply-adds
into the two fmas (tests/gdp/cv2/test_blend_kernel.py checks every pair of values against
OpenCV, for many weights)."""

from __future__ import annotations

import numpy as np

from gdp.errors import InputError
from gdp.runtime.launch import run_strips, strips_for
from gdp.runtime.tir_text import describe
from gdp.runtime.workspace import output

# Values per strip at least, and strips at most.
STRIP_VALUES = 1 << 17
MAX_STRIPS = 16
MAX_VALUES = (1 << 31) - 1

_WEIGHTED = (
    'T.Cast("uint8", T.min(T.max(T.round(T.Cast("float32", a[{e}]) * alpha'
    ' + (T.Cast("float32", b[{e}]) * beta + gamma)), T.float32(0)), T.float32(255)))'
)

SOURCE = f"""
@T.prim_func
def add_weighted_u8(
    a_handle: T.handle,
    b_handle: T.handle,
    out_handle: T.handle,
    alpha: T.float32,
    beta: T.float32,
    gamma: T.float32,
    strips: T.int32,
):
    T.func_attr({{"global_symbol": "add_weighted_u8", "tir.noalias": True}})
    n = T.int32()
    a = T.match_buffer(a_handle, (n,), "uint8", align=1)
    b = T.match_buffer(b_handle, (n,), "uint8", align=1)
    out = T.match_buffer(out_handle, (n,), "uint8", align=1)
    for s in T.parallel(strips):
        for k in range(n // strips * (s + 1) // 64 - n // strips * s // 64):
            for i in T.vectorized(64):
                out[(n // strips * s // 64 + k) * 64 + i] = {
    _WEIGHTED.format(e="(n // strips * s // 64 + k) * 64 + i")
}
        if s == strips - 1:
            for e in range(n // strips * strips // 64 * 64, n):
                out[e] = {_WEIGHTED.format(e="e")}
"""


def add_weighted(a: np.ndarray, alpha: float, b: np.ndarray, beta: float, gamma: float, out=None):
    """a * alpha + b * beta + gamma of two uint8 arrays of one shape, as OpenCV computes it for
    uint8 (the weights rounded to float32), as a new uint8 array (or into `out`, which may be
    `a` or `b`)."""
    for name, x in (("a", a), ("b", b)):
        if not (isinstance(x, np.ndarray) and x.dtype == np.uint8):
            raise InputError(f"add_weighted: expected {name} as a uint8 array, got {describe(x)}")
    if a.shape != b.shape:
        raise InputError(f"add_weighted: a is {a.shape} and b {b.shape}: expected one shape")
    if a.size > MAX_VALUES:
        raise InputError(f"add_weighted: {a.size} values, more than the {MAX_VALUES} indexed")
    out = output(out, a.shape, np.uint8, "add_weighted")
    if a.size:
        weights = (float(np.float32(w)) for w in (alpha, beta, gamma))
        strips = strips_for(3 * a.size, max(1, min(MAX_STRIPS, a.size // STRIP_VALUES)))
        flat = (np.ascontiguousarray(x).reshape(-1) for x in (a, b))
        run_strips("add_weighted_u8", SOURCE, *flat, out.reshape(-1), *weights, strips)
    return out
