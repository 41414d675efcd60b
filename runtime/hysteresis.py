"""Canny's hysteresis as OpenCV runs it: a flood fill from every strong pixel through the
8-connected weak ones, O(pixels), in strips of rows in parallel and then across them (as
OpenCV's stripes), as one hand-written TIR kernel (compiled once per CPU and cached by
gdp.runtime.backends.tvm.kernels).

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
from gdp.runtime.tir_text import columns, describe, indent
from gdp.runtime.workspace import scratch

# Strips of rows flooded in parallel (enough to balance TVM's threads).
STRIPS = 16

# The kernel. It first writes a level map into the output, 0 (no candidate), 1 (a weak
# candidate) or 2 (a strong one), and works on it in place from there, in three parts:
# - Strips of rows in parallel, each flooding from its strong pixels through its own rows only
#   (a serial flood took 1.5 ms of a 1080p Canny's 2.1). Its scan for strong pixels reads the
#   map 8 bytes at a time (a word with no byte equal to 2 is skipped; the strip's bytes before
#   its first whole word and after its last are read one by one), keeping the row of the pixel
#   it is at without dividing. A pixel reached is set to 255 as it is pushed, so each is pushed
#   once: a strip's stack, in its part of `stack`, holds at most its pixels, as (row, column).
#   A candidate the flood meets in another strip's row is not written (that strip's thread
#   may be writing it) but kept, as its flat offset, in the strip's part of `edge`: at most 3
#   a pixel of the strip's first and last rows, 6 w. (The byte it reads there may be changing
#   under it from 1 to 255: either way the pixel is reached.)
# - Then, on one thread, the flood goes on from those kept pixels through the whole map.
# - Strips in parallel again set every pixel that is not 255 to 0.
# The edges are the candidates 8-connected to a strong one, whatever the order.
_PUSH = """\
flat[{q}] = T.uint8(255)
stack[{base} + top[0]] = {y}
stack[{base} + top[0] + 1] = {x}
top[0] = top[0] + 2
"""
# The flood from the pixels on its stack (from {base}): rows [{y0}, {y1}) are the ones it may
# write (the strip's; every row in the serial part), whose inner pixels' neighbours need no
# bounds check; {outside}: what it does with a candidate in another row (_KEEP, or nothing).
_FLOOD = """\
while top[0] > 0:
    top[0] = top[0] - 2
    y = stack[{base} + top[0]]
    x = stack[{base} + top[0] + 1]
    if y > {y0} and y < {y1} - 1 and x > 0 and x < w - 1:
        for dy in T.unroll(3):
            for dx in T.unroll(3):
                # 1 or 2: a candidate not reached yet
                if flat[(y + dy - 1) * w + x + dx - 1] - T.uint8(1) < T.uint8(2):
{push_inner}
    else:
        for dy in T.unroll(3):
            for dx in T.unroll(3):
                if y + dy >= 1 and y + dy <= h and x + dx >= 1 and x + dx <= w:
                    if m[y + dy - 1, x + dx - 1] - T.uint8(1) < T.uint8(2):
                        if y + dy - 1 >= {y0} and y + dy - 1 < {y1}:
{push_inner_checked}
{outside}
"""
_KEEP = """\
                        else:
                            edge[eb + kept[0]] = (y + dy - 1) * w + x + dx - 1
                            kept[0] = kept[0] + 1"""
_STRONG = """\
if flat[{p}] == T.uint8(2):
    while {p} >= row[1] + w:
        row[0] = row[0] + 1
        row[1] = row[1] + w
    flat[{p}] = T.uint8(255)
    stack[sb] = row[0]
    stack[sb + 1] = {p} - row[1]
    top[0] = 2
{flood}
"""


# Every value of a strip's rows not 255 set to 0, 64 a vector (a loop over (y, x) ran a value at a
# time: 2 ms at 1080p).
_FINISH = columns(
    "flat[{x}] = T.Select(flat[{x}] == T.uint8(255), T.uint8(255), T.uint8(0))",
    "T.min(h, s * rows) * w",
    "T.min(h, s * rows + rows) * w",
    64,
)


def _flood(base: str, y0: str, y1: str, outside: str) -> str:
    push = _PUSH.format(
        q="(y + dy - 1) * w + x + dx - 1", base=base, y="y + dy - 1", x="x + dx - 1"
    )
    return _FLOOD.format(
        base=base,
        y0=y0,
        y1=y1,
        push_inner=indent(push, 20),
        push_inner_checked=indent(push, 28),
        outside=outside,
    )


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
        # the whole map before any flood: a strip's reads rows of others
        """    for y in T.parallel(h):
        for x in range(w):
            m[y, x] = candidates[y, x] + (candidates[y, x] & strong[y, x])
"""
        if from_maps
        else ""
    )
    strong = _STRONG.replace("{flood}", indent(_flood("sb", "y0", "y1", _KEEP), 4))
    # the serial part: any row is the flood's, nothing outside
    serial = _flood("0", "0", "h", "")
    return f"""
@T.prim_func
def hysteresis(
{maps}    out_handle: T.handle,
    stack_handle: T.handle,
    edge_handle: T.handle,
):
    T.func_attr({{"global_symbol": "hysteresis", "tir.noalias": True}})
    h = T.int32()
    w = T.int32()
    n = T.int32()
    e = T.int32()
{match_maps}    m = T.match_buffer(out_handle, (h, w), "uint8", align=1)
    stack = T.match_buffer(stack_handle, (n,), "int32", align=4)
    edge = T.match_buffer(edge_handle, (e,), "int32", align=4)
    flat = T.decl_buffer((h * w,), "uint8", data=m.data, align=1)
    # (hysteresis() hands the kernel an output 8-byte aligned)
    words = T.decl_buffer((h * w // 8,), "uint64", data=m.data, align=1)
    counts = T.alloc_buffer(({STRIPS},), "int32")
    rows = (h + {STRIPS} - 1) // {STRIPS}
{first_pass}    for s in T.parallel({STRIPS}):
        y0 = T.min(h, s * rows)
        y1 = T.min(h, y0 + rows)
        # (in "global" scope: small, on the thread's stack)
        top = T.alloc_buffer((1,), "int32")
        row = T.alloc_buffer((2,), "int32")  # the scan's row, its first pixel
        kept = T.alloc_buffer((1,), "int32")
        kept[0] = 0
        sb = 2 * y0 * w
        eb = s * 6 * w
        row[0] = y0
        row[1] = y0 * w
        # the strip's bytes [first, last): by bytes up to its first whole word, by words, by
        # bytes after its last whole word
        first = y0 * w
        last = y1 * w
        k0 = (first + 7) // 8
        k1 = T.max(k0, last // 8)
        for p0 in range(first, T.min(k0 * 8, last)):
{indent(strong.format(p="p0"), 12)}
        for k in range(k0, k1):
            # Whether a byte of the word is 2: a byte of word ^ 0x02.. is 0 (the zero-byte test).
            if (
                ((words[k] ^ T.uint64(0x0202020202020202)) - T.uint64(0x0101010101010101))
                & ~(words[k] ^ T.uint64(0x0202020202020202))
                & (T.uint64(0x4040404040404040) << T.uint64(1))
            ) != T.uint64(0):
                for j in range(8):
{indent(strong.format(p="k * 8 + j"), 20)}
        for p1 in range(T.max(k1 * 8, T.min(k0 * 8, last)), last):
{indent(strong.format(p="p1"), 12)}
        counts[s] = kept[0]
    top = T.alloc_buffer((1,), "int32", scope="local")
    top[0] = 0
    for s in range({STRIPS}):
        for i in range(counts[s]):
            q = edge[s * 6 * w + i]
            if flat[q] - T.uint8(1) < T.uint8(2):
{indent(_PUSH.format(q="q", base="0", y="q // w", x="q % w"), 16)}
{indent(serial, 16)}
    for s in T.parallel({STRIPS}):
{indent(_FINISH, 8)}
"""


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


def flood_levels(levels: np.ndarray, made: bool = False) -> np.ndarray:
    """cv2.Canny's edges from a level map (2-D uint8, 0: no candidate, 1: a weak one, 2: a
    strong one; as is_level_map says, as gdp.runtime.canny.canny_levels makes it), flooded in
    place and returned. Values other than 0, 1 and 2 are not checked: the kernel stays
    memory-safe on them, but its edges are then not Canny's. `made`: the map is one
    canny_levels just returned, so is_level_map holds (its check, 2-3 us, is skipped)."""
    if not made and not is_level_map(levels):
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
    run_host_kernel("hysteresis_levels", LEVELS_SOURCE, levels, *_stacks(levels.shape))
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
    run_host_kernel("hysteresis", SOURCE, candidates, strong, out, *_stacks(out.shape))
    return out


def _stacks(shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's stack (two values a pixel, a strip's part from its first row's) and the
    strips' kept pixels of other strips (6 w each): this thread's, kept between calls. A new
    array a call faulted in the pages each strip's part reached, every time: 4.6 of a 4K
    flood's 11.6 ms on one thread. Only pages a flood has reached are ever resident."""
    h, w = shape
    return (
        scratch("hysteresis_stack", 2 * h * w, np.int32),
        scratch("hysteresis_edge", STRIPS * 6 * w, np.int32),
    )
