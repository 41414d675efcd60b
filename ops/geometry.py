"""OpenCV's resize and warpAffine as TF ops.

resize: separable gathers of OpenCV's source indices with its interpolation weights, in OpenCV's
fixed point for uint8 (11-bit weights, one rounding). The tables (gdp.ops.resize_tables) depend
only on the sizes: constants of the graph for a static size (a backend fuses the gathers and
the weighted sums into one kernel), or run-time inputs of a program that serves every source
size (gdp.cv2's eager resize).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from gdp.ops.border import BORDER_CONSTANT, BORDER_REPLICATE, border_value
from gdp.ops.resize_tables import (  # noqa: F401  (the codes, for callers of gdp.ops.geometry)
    INTER_AREA,
    INTER_CUBIC,
    INTER_LINEAR,
    INTER_NEAREST,
    plan,
)


def _saturate(x: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    """cv::saturate_cast from float: round half to even and clamp for integers."""
    if not dtype.is_integer:
        return tf.cast(x, dtype)
    return tf.cast(tf.clip_by_value(tf.round(x), dtype.min, dtype.max), dtype)


def resize(
    image: tf.Tensor,
    width: int,
    height: int,
    scale_x: float,
    scale_y: float,
    method: int,
    ipp: bool = False,
) -> tf.Tensor:
    """cv::resize of an HW or HWC image of static size to (height, width); scale_* are source /
    destination (1 / fx, 1 / fy when given, else the size ratio); `ipp`: as Intel IPP's resize
    (gdp.ops.resize_tables.axis_taps)."""
    if image.shape.rank == 2:
        return resize_flat(image, 1, width, height, scale_x, scale_y, method, ipp)
    h, w, c = image.shape
    flat = tf.reshape(image, [h, w * c])
    out = resize_flat(flat, c, width, height, scale_x, scale_y, method, ipp)
    return tf.reshape(out, [height, width, c])


def resize_flat(
    image: tf.Tensor,
    channels: int,
    width: int,
    height: int,
    scale_x: float,
    scale_y: float,
    method: int,
    ipp: bool = False,
) -> tf.Tensor:
    """`resize` of an HWC image of static size given as (H, W*channels) (a free reshape of the
    array), to (height, width*channels), its tables constants of the graph."""
    h, w = image.shape[0], image.shape[1] // channels
    dtype = image.dtype.as_numpy_dtype.__name__
    structure, tables = plan(h, w, channels, width, height, scale_x, scale_y, method, dtype, ipp)
    return resize_by_plan(image, structure, tables)


def resize_by_plan(image: tf.Tensor, structure: dict, tables: dict) -> tf.Tensor:
    """The resize that gdp.ops.resize_tables.plan describes, of an (H, W*channels) image of any
    size, to (height, width*channels): `tables` are its arrays (constants) or tensors of them
    (run-time inputs of any length: one program for every size the structure serves)."""
    work = tf.as_dtype(structure["work"])
    x = tf.cast(image, work)
    for axis, taps in structure["passes"]:
        table = tables[f"pass{axis}"]
        unrolled = CONSTANT_TABLE_TAPS if isinstance(table, np.ndarray) else RUNTIME_TABLE_TAPS
        if taps > unrolled:
            x = _summed_pass(x, table, axis, taps, work, structure["weighted"])
            continue
        shape = [-1, 1] if axis == 0 else [1, -1]
        total = None
        for k in range(taps):
            term = tf.gather(x, _column(table, k, tf.int32), axis=axis)
            if structure["weighted"] and not _all_ones(table, taps + k):
                term = term * tf.reshape(_column(table, taps + k, work), shape)
            total = term if total is None else total + term
        x = total
    if structure["kind"] == "area":
        fx, fy = structure["fx"], structure["fy"]
        vector = structure.get("vector", True)
        if not structure.get("partial"):
            return _block_mean(x, image.dtype, fx, fy, vector=vector)
        # The pixels each block holds: its taps' weights summed.
        rows, cols = tables["pass0"], tables["pass1"]
        if isinstance(rows, np.ndarray):
            count = rows[:, fy:].sum(axis=1)[:, None] * cols[:, fx:].sum(axis=1)[None, :]
        else:
            in_rows = sum(_column(rows, fy + k, work) for k in range(fy))
            in_cols = sum(_column(cols, fx + k, work) for k in range(fx))
            count = in_rows[:, None] * in_cols[None, :]
        return _block_mean(x, image.dtype, fx, fy, count, vector)
    if not structure["weighted"]:  # nearest: the gathered pixels themselves
        return tf.cast(x, image.dtype)
    bits = structure["bits"]
    if bits:
        # (total + half) >> bits, clamped to [0, 255]: the clamp first (a cubic's sum may be
        # negative or above 255 << bits), so the shift is an unsigned 32-bit one.
        top = (256 << bits) - 1
        rounded = tf.clip_by_value(x + (1 << (bits - 1)), 0, top)
        shifted = tf.bitwise.right_shift(tf.cast(rounded, tf.uint32), tf.constant(bits, tf.uint32))
        return tf.cast(shifted, tf.uint8)
    return _saturate(x, image.dtype)


# Passes of more taps than these are one sum over a gathered taps axis, the others a sum of one
# gather per tap (which vectorises along rows and folds constant indices). An INTER_AREA shrink
# by 35 reads 35-60 taps an axis. Measured on a 1080p BGR image (2-core VM):
# - tables given at run time (a program for every size): unrolled, each tap gathers its column
#   of the table, and gdp's schedule inlined them one by one: 10 taps compiled in 8 s, 19 in
#   76 s; as sums, 2-4 s. Such a program serves only until the size's own one is compiled.
# - constant tables (a size's own program, a graph of static size): 20 taps unrolled compiled
#   in 7.7 s and ran in 3.5 ms (as sums 10.9 ms); 60 taps in 19.8 s and 4.5 ms (as sums 3.0 s
#   and 3.1 ms).
RUNTIME_TABLE_TAPS = 8
CONSTANT_TABLE_TAPS = 24


def _summed_pass(x: tf.Tensor, table, axis: int, taps: int, work: tf.DType, weighted: bool):
    """One pass of resize_by_plan as a reduction: the taps gathered into an axis of their own,
    weighed, and summed over it in tap order (the order of the unrolled sum)."""
    indices = tf.cast(_columns(table, 0, taps), tf.int32)
    gathered = tf.gather(x, indices, axis=axis)  # (out, taps, W) rows; (H, out, taps) columns
    if weighted:
        weights = tf.cast(_columns(table, taps, 2 * taps), work)
        gathered = gathered * (weights[:, :, None] if axis == 0 else weights[None])
    return tf.reduce_sum(gathered, axis=axis + 1)


def _columns(table, start: int, stop: int) -> tf.Tensor:
    """Columns start..stop-1 of a pass's table: of a constant, a constant; of a run-time input,
    gathered (a slice of a table of run-time extents has no shape TVM infers: the program that
    serves every size failed to compile, and gdp.cv2 compiled one per size)."""
    if isinstance(table, np.ndarray):
        return tf.constant(table[:, start:stop])
    return tf.gather(table, np.arange(start, stop), axis=1)


def _column(table, k: int, dtype: tf.DType) -> tf.Tensor:
    """Column k of a pass's table as `dtype`: a constant from an array, else a gather of the
    run-time input (a scalar index: a slice would need a squeeze of a run-time extent)."""
    if isinstance(table, np.ndarray):
        return tf.constant(table[:, k], dtype)
    return tf.cast(tf.gather(table, k, axis=1), dtype)


def _all_ones(table, k: int) -> bool:
    """Whether a constant table's column k weighs every pixel 1 (multiplied by nothing)."""
    return isinstance(table, np.ndarray) and bool(np.all(table[:, k] == 1))


def _block_mean(
    total: tf.Tensor,
    dtype: tf.DType,
    fx: int,
    fy: int,
    count: tf.Tensor | np.ndarray | None = None,
    vector: bool = True,
) -> tf.Tensor:
    """INTER_AREA by integer factors: the fx x fy blocks' sums `total` to their means, rounded
    as OpenCV rounds them. `count`: the pixels each block holds, where the last ones run past
    the image; OpenCV's border loop divides those in float32, (float)sum / count, half to
    even. `vector`: a 2x2 block's mean as OpenCV's vector loop rounds it (else its scalar
    loop's)."""
    full = _full_block_mean(total, dtype, fx, fy, vector)
    if count is None:
        return full
    total = tf.cast(total, tf.float32)
    if isinstance(count, np.ndarray):
        # Known counts: their inverses in float64, where the product rounds to float32 as the
        # quotient does (for integer sums). A division by a constant tensor becomes TF's
        # product by its reciprocal, which TF folds in float32 inexactly (1 / 2 = 0.49999997:
        # 59 / 2 gave 29.499998, rounded to 29 where OpenCV has 30).
        inverse = tf.constant(1.0 / count.astype(np.float64))
        part = tf.cast(tf.cast(total, tf.float64) * inverse, tf.float32)
        full_blocks = tf.constant(count == fx * fy)
    else:
        part = total / tf.cast(count, tf.float32)
        full_blocks = count == fx * fy
    part = tf.cast(tf.round(part) if dtype.is_integer else part, dtype)
    return tf.where(full_blocks, full, part)


def _full_block_mean(
    total: tf.Tensor, dtype: tf.DType, fx: int, fy: int, vector: bool
) -> tf.Tensor:
    if dtype.is_integer and fx == fy == 2 and vector:  # OpenCV's 2x2 vector loop: (sum + 2) >> 2
        if dtype.is_unsigned:  # an unsigned 32-bit shift (a vector one)
            total = tf.cast(total + 2, tf.uint32)
            return tf.cast(tf.bitwise.right_shift(total, tf.constant(2, tf.uint32)), dtype)
        return tf.cast(tf.bitwise.right_shift(total + 2, 2), dtype)
    if dtype.is_integer:  # other factors: scaled by 1/area in float, half to even
        mean = tf.cast(total, tf.float64) * (1.0 / (fx * fy))
        return tf.cast(tf.round(mean), dtype)
    return tf.cast(total * tf.constant(1.0 / (fx * fy), total.dtype), dtype)


# --- warpAffine ------------------------------------------------------------------------------

# OpenCV (4.11+) warps with float32 source coordinates. Its vector loop computes them as
# fma(M[0], x, float(y*M[1]) + M[2]) over blocks of this many pixels (two AVX2 float vectors);
# the scalar tail of a row as fma(x, M[0], y*M[1]) + M[2] (the compiler contracts the first
# product and sum). Which formula a pixel gets decides the nearest neighbour at exact ties, so
# gdp reproduces both; both were confirmed on 200k pixels near ties against OpenCV 5.0.
WARP_VECTOR_BLOCK = 16


def invert_affine(matrix: np.ndarray) -> np.ndarray:
    """cv::invertAffineTransform, in double as OpenCV does it (a singular matrix gives zeros)."""
    m = np.asarray(matrix, np.float64).reshape(2, 3)
    det = m[0, 0] * m[1, 1] - m[0, 1] * m[1, 0]
    d = 1.0 / det if det != 0 else 0.0
    a11, a22, a12, a21 = m[1, 1] * d, m[0, 0] * d, -m[0, 1] * d, -m[1, 0] * d
    b1 = -a11 * m[0, 2] - a12 * m[1, 2]
    b2 = -a21 * m[0, 2] - a22 * m[1, 2]
    return np.array([[a11, a12, b1], [a21, a22, b2]])


def _source_coordinate(
    m_x: float, m_y: float, m_c: float, width: int, height: int, block: int, zero: tf.Tensor
) -> tf.Tensor:
    """The (height, width) float32 source coordinate m_x*x + m_y*y + m_c, rounded as OpenCV's
    warp kernels round it (see WARP_VECTOR_BLOCK). `zero` is a 0 that depends on the image:
    it keeps TF and tf2onnx from folding the maps into (height, width) constants, which the
    kernel would then read (four index and two weight maps: 50 MB at 1080p) instead of
    computing them from the pixel's position at no memory cost."""
    f32 = np.float32
    mx, my, mc = f32(m_x), f32(m_y), f32(m_c)
    rows = np.arange(height, dtype=np.float32)[:, None]
    cols = tf.constant(np.arange(width, dtype=np.float64)[None, :]) + tf.cast(zero, tf.float64)
    # The product of two floats is exact in double, so double arithmetic and one cast give
    # an fma's result.
    row_products = rows * my  # float(y*M[1])
    vector = tf.cast(np.float64(mx) * cols + (row_products + mc).astype(np.float64), tf.float32)
    vectorised = (width // block) * block if block else 0
    if vectorised == width:
        return vector
    scalar = tf.cast(np.float64(mx) * cols + row_products.astype(np.float64), tf.float32) + mc
    return tf.where(tf.cast(cols, tf.float32) < vectorised, vector, scalar)


def warp_affine(
    image: tf.Tensor,
    matrix: tuple[float, ...],
    width: int,
    height: int,
    method: int = INTER_LINEAR,
    border: int = 0,
    value: tuple[float, ...] = (0.0,),
    block: int = WARP_VECTOR_BLOCK,
) -> tf.Tensor:
    """cv::warpAffine with WARP_INVERSE_MAP semantics: dst(y, x) = src(M @ (x, y, 1)), for
    INTER_NEAREST / INTER_LINEAR and BORDER_CONSTANT (0, with `value`) / BORDER_REPLICATE (1),
    as OpenCV 4.11+ computes it: float32 coordinates, float32 interpolation, saturate_cast.

    Each output pixel gathers its 2x2 (linear) or 1 (nearest) source pixels from the image
    flattened to (H*W, C) at clamped indices; a constant border replaces the pixels whose
    unclamped index falls outside."""
    if border not in (BORDER_CONSTANT, BORDER_REPLICATE):
        raise ValueError(f"warp_affine takes BORDER_CONSTANT or BORDER_REPLICATE, got {border}")
    if method not in (INTER_NEAREST, INTER_LINEAR):
        raise ValueError(f"warp_affine takes INTER_NEAREST or INTER_LINEAR, got {method}")
    m = np.asarray(matrix, np.float64).reshape(2, 3)
    rows, cols = int(image.shape[0]), int(image.shape[1])
    # 0 * a pixel is 0 for any finite image (and a NaN there poisons only what it would).
    zero = tf.cast(tf.reshape(image, [-1])[0], tf.float32) * 0.0
    sx = _source_coordinate(m[0, 0], m[0, 1], m[0, 2], width, height, block, zero)
    sy = _source_coordinate(m[1, 0], m[1, 1], m[1, 2], width, height, block, zero)
    flat = tf.reshape(image, [-1, *image.shape[2:]])
    outside = border_value(value, image) if border == BORDER_CONSTANT else None
    # Clamp in float first: beyond one pixel outside, every neighbour is the border anyway,
    # and the clamp keeps the int32 conversion in range for any matrix.
    sx = tf.clip_by_value(sx, -2.0, cols + 1.0)
    sy = tf.clip_by_value(sy, -2.0, rows + 1.0)

    def fetch(iy: tf.Tensor, ix: tf.Tensor) -> tf.Tensor:
        # The clamp keeps every index in range, as the gather's unchecked loads need.
        at = tf.clip_by_value(iy, 0, rows - 1) * cols + tf.clip_by_value(ix, 0, cols - 1)
        pixel = tf.gather(flat, at)
        if outside is None:
            return pixel
        inside = (ix >= 0) & (ix < cols) & (iy >= 0) & (iy < rows)
        inside = inside[..., None] if image.shape.rank == 3 else inside
        return tf.where(inside, pixel, outside)

    if method == INTER_NEAREST:  # v_round / cvRound: half to even
        return fetch(tf.cast(tf.round(sy), tf.int32), tf.cast(tf.round(sx), tf.int32))
    fx0, fy0 = tf.floor(sx), tf.floor(sy)
    ix, iy = tf.cast(fx0, tf.int32), tf.cast(fy0, tf.int32)
    fx, fy = sx - fx0, sy - fy0
    if image.shape.rank == 3:
        fx, fy = fx[..., None], fy[..., None]

    def pixel(dy: int, dx: int) -> tf.Tensor:
        return tf.cast(fetch(iy + dy, ix + dx), tf.float32)

    p00, p01, p10, p11 = pixel(0, 0), pixel(0, 1), pixel(1, 0), pixel(1, 1)
    v0 = p00 + fx * (p01 - p00)
    v1 = p10 + fx * (p11 - p10)
    out = v0 + fy * (v1 - v0)
    if image.dtype == tf.float32:
        return out
    out = tf.clip_by_value(tf.round(out), image.dtype.min, image.dtype.max)
    return tf.cast(out, image.dtype)
