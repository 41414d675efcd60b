"""Canny's hysteresis as OpenCV runs it: a flood fill from every strong pixel through the
8-connected weak ones, serial and O(pixels), as one hand-written TIR kernel (compiled once per
CPU and cached by gdp.runtime.backends.tvm.kernels).

The inputs are the two uint8 0/1 maps of gdp.ops.image.canny_candidates: `candidates` (local
maxima above the low threshold, the pixels hysteresis may reach) and `strong` (candidates above
the high threshold too, where it starts; a strong pixel that is no candidate is ignored). The
result is cv2.Canny's edge map: 255 where a candidate is 8-connected through candidates to a
strong one, else 0. The set is defined by connectivity alone, so the order OpenCV visits pixels
in (its stripes, its stacks, its threads) does not change it.
"""

from __future__ import annotations

import numpy as np

from gdp.errors import InputError, OutputBufferError
from gdp.runtime.launch import run_host_kernel
from gdp.runtime.tir_text import describe, indent

# The kernel. It first writes a level map into the output, 0 (no candidate), 1 (a weak
# candidate) or 2 (a strong one), and works on it in place from there. The scan for strong
# pixels reads the map 8 bytes at a time (a word with no byte equal to 2 is skipped; the bytes
# past the last whole word are read one by one), and keeps the row of the pixel it is at without
# dividing. A pixel reached is set to 255 as it is pushed, so each is pushed once: the stack
# holds at most every pixel, as (row, column). A pixel not on the image's border has its
# neighbours looked at without bounds checks. A last pass sets every pixel that is not 255 to 0.
_FLOOD = """\
if flat[{p}] == T.uint8(2):
    while {p} >= row[1] + w:
        row[0] = row[0] + 1
        row[1] = row[1] + w
    flat[{p}] = T.uint8(255)
    stack[0] = row[0]
    stack[1] = {p} - row[1]
    top[0] = 2
    while top[0] > 0:
        top[0] = top[0] - 2
        y = stack[top[0]]
        x = stack[top[0] + 1]
        if y > 0 and y < h - 1 and x > 0 and x < w - 1:
            for dy in T.unroll(3):
                for dx in T.unroll(3):
                    # 1 or 2: a candidate not reached yet
                    if flat[(y + dy - 1) * w + x + dx - 1] - T.uint8(1) < T.uint8(2):
                        flat[(y + dy - 1) * w + x + dx - 1] = T.uint8(255)
                        stack[top[0]] = y + dy - 1
                        stack[top[0] + 1] = x + dx - 1
                        top[0] = top[0] + 2
        else:
            for dy in T.unroll(3):
                for dx in T.unroll(3):
                    if y + dy >= 1 and y + dy <= h and x + dx >= 1 and x + dx <= w:
                        if m[y + dy - 1, x + dx - 1] - T.uint8(1) < T.uint8(2):
                            m[y + dy - 1, x + dx - 1] = T.uint8(255)
                            stack[top[0]] = y + dy - 1
                            stack[top[0] + 1] = x + dx - 1
                            top[0] = top[0] + 2
"""


def _source(from_maps: bool) -> str:
    """The kernel: from the candidate and strong maps (it writes the level map into `out`
    first), or from a level map already in `out` (gdp.runtime.canny's)."""
    maps = (
        """    candidates_handle: T.handle,
    strong_handle: T.handle,
"""
        if from_maps
        else ""
    )
    match_maps = (
        """    candidates = T.match_buffer(candidates_handle, (h, w), "uint8", align=1)
    strong = T.match_buffer(strong_handle, (h, w), "uint8", align=1)
"""
        if from_maps
        else ""
    )
    first_pass = (
        """    for y in range(h):
        for x in range(w):
            m[y, x] = candidates[y, x] + (candidates[y, x] & strong[y, x])
"""
        if from_maps
        else ""
    )
    return (
        """
@T.prim_func
def hysteresis(
"""
        + maps
        + """    out_handle: T.handle,
    stack_handle: T.handle,
):
    T.func_attr({"global_symbol": "hysteresis", "tir.noalias": True})
    h = T.int32()
    w = T.int32()
    n = T.int32()
"""
        + match_maps
        + """    m = T.match_buffer(out_handle, (h, w), "uint8", align=1)
    stack = T.match_buffer(stack_handle, (n,), "int32", align=4)
    flat = T.decl_buffer((h * w,), "uint8", data=m.data, align=1)
    # (hysteresis() hands the kernel an output 8-byte aligned)
    words = T.decl_buffer((h * w // 8,), "uint64", data=m.data, align=1)
    top = T.alloc_buffer((1,), "int32", scope="local")
    row = T.alloc_buffer((2,), "int32", scope="local")  # the scan's row, its first pixel
"""
        + first_pass
        + """    row[0] = 0
    row[1] = 0
    for k in range(h * w // 8):
        # Whether a byte of the word is 2: a byte of word ^ 0x02.. is 0 (the zero-byte test).
        if (
            ((words[k] ^ T.uint64(0x0202020202020202)) - T.uint64(0x0101010101010101))
            & ~(words[k] ^ T.uint64(0x0202020202020202))
            & (T.uint64(0x4040404040404040) << T.uint64(1))
        ) != T.uint64(0):
            for j in range(8):
"""
        + indent(_FLOOD.format(p="k * 8 + j"), 16)
        + """    for t in range(h * w - h * w // 8 * 8):  # the bytes past the last whole word
"""
        + indent(_FLOOD.format(p="h * w // 8 * 8 + t"), 8)
        + """    for y in range(h):
        for x in range(w):
            m[y, x] = T.if_then_else(m[y, x] == T.uint8(255), T.uint8(255), T.uint8(0))
"""
    )


SOURCE = _source(from_maps=True)
LEVELS_SOURCE = _source(from_maps=False)

# Stack entries and flat offsets are int32.
MAX_PIXELS = (1 << 30) - 1


def _map(name: str, array, check: bool) -> np.ndarray:
    if not isinstance(array, np.ndarray):
        raise InputError(f"hysteresis: {name} must be a numpy array, got {type(array).__name__}")
    if array.dtype != np.uint8 or array.ndim != 2:
        raise InputError(
            f"hysteresis: {name} must be a 2-D uint8 map of 0 and 1, got {array.dtype}"
            f"{list(array.shape)}"
        )
    if check and array.size and int(array.max()) > 1:
        raise InputError(f"hysteresis: {name} holds {int(array.max())}; expected only 0 and 1")
    return np.ascontiguousarray(array)


def hysteresis(
    candidates: np.ndarray, strong: np.ndarray, out: np.ndarray | None = None, *, check: bool = True
) -> np.ndarray:
    """cv2.Canny's edges (uint8 0/255) from its candidate and strong maps (2-D uint8 0/1 of one
    shape; see the module), written into `out` when it is given (a writeable, C-contiguous
    uint8 array of that shape) and returned.

    `check=False` skips reading the maps once more to refuse values other than 0 and 1, for maps
    that hold no others by construction (gdp's own programs'). The kernel stays memory-safe on
    any values; on others than 0 and 1 its edges are not Canny's."""
    candidates, strong = _map("candidates", candidates, check), _map("strong", strong, check)
    if candidates.shape != strong.shape:
        raise InputError(
            f"hysteresis: candidates {list(candidates.shape)} and strong"
            f" {list(strong.shape)} differ in shape"
        )
    if candidates.size > MAX_PIXELS:
        raise InputError(
            f"hysteresis: the maps have {candidates.size} pixels, more than the {MAX_PIXELS}"
            " the kernel indexes"
        )
    if out is None:
        out = np.empty(candidates.shape, np.uint8)
    elif not (
        isinstance(out, np.ndarray)
        and out.dtype == np.uint8
        and out.shape == candidates.shape
        and out.flags.c_contiguous
        and out.flags.writeable
    ):
        raise OutputBufferError(
            f"hysteresis: out must be a writeable, C-contiguous uint8 array of shape"
            f" {list(candidates.shape)}, got {describe(out)}"
        )
    if not candidates.size:
        return out
    if out.ctypes.data % 8:  # the kernel reads the map it builds in `out` as 8-byte words
        out[...] = _run(candidates, strong, np.empty(candidates.shape, np.uint8))
    else:
        _run(candidates, strong, out)
    return out


def flood_levels(levels: np.ndarray) -> np.ndarray:
    """cv2.Canny's edges from a level map (2-D uint8, 0: no candidate, 1: a weak one, 2: a
    strong one; as is_level_map says, as gdp.runtime.canny.canny_levels makes it), flooded in
    place and returned. Values other than 0, 1 and 2 are not checked: the kernel stays
    memory-safe on them, but its edges are then not Canny's."""
    if not is_level_map(levels):
        raise InputError(
            "flood_levels: expected a writeable, C-contiguous, 8-byte aligned 2-D uint8 level"
            f" map, got {describe(levels)}"
        )
    if levels.size > MAX_PIXELS:
        raise InputError(
            f"flood_levels: the map has {levels.size} pixels, more than the {MAX_PIXELS}"
            " the kernel indexes"
        )
    if not levels.size:
        return levels
    stack = np.empty(2 * levels.size, np.int32)
    run_host_kernel("hysteresis_levels", LEVELS_SOURCE, levels, stack)
    return levels


def is_level_map(array, shape: tuple | None = None) -> bool:
    """Whether `array` can hold a level map the flood works on in place (of `shape` where
    given): 2-D uint8, C-contiguous, writeable, and 8-byte aligned (the flood reads it as
    8-byte words)."""
    return (
        isinstance(array, np.ndarray)
        and array.dtype == np.uint8
        and array.ndim == 2
        and (shape is None or array.shape == shape)
        and array.flags.c_contiguous
        and array.flags.writeable
        and array.ctypes.data % 8 == 0
    )


def _run(candidates: np.ndarray, strong: np.ndarray, out: np.ndarray) -> np.ndarray:

    stack = np.empty(2 * out.size, np.int32)
    run_host_kernel("hysteresis", SOURCE, candidates, strong, out, stack)
    return out
