"""OpenCV's resize as TF ops: separable gathers of constant source indices with OpenCV's
interpolation weights, in OpenCV's fixed point for uint8 (11-bit weights, one rounding).

The indices and weights depend only on the sizes, so they are constants of the graph: a
backend fuses the gathers and the weighted sums into one kernel.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from gdp.ops.border import BORDER_CONSTANT, BORDER_REPLICATE, border_value

# cv::resize's interpolation codes, so ops/ needs no cv2.
INTER_NEAREST = 0
INTER_LINEAR = 1
INTER_CUBIC = 2
INTER_AREA = 3
# OpenCV's fixed point for 8-bit resize: weights scaled by 2^11, two passes -> 2^22.
RESIZE_COEF_BITS = 11
CUBIC_A = -0.75


def _cubic_weights(x: float) -> list[float]:
    a = CUBIC_A
    c0 = ((a * (x + 1) - 5 * a) * (x + 1) + 8 * a) * (x + 1) - 4 * a
    c1 = ((a + 2) * x - (a + 3)) * x * x + 1
    c2 = ((a + 2) * (1 - x) - (a + 3)) * (1 - x) * (1 - x) + 1
    return [c0, c1, c2, 1.0 - c0 - c1 - c2]


def axis_taps(src: int, dst: int, scale: float, method: int) -> tuple[np.ndarray, np.ndarray]:
    """(indices, weights), each (dst, taps): the source pixels and float weights each output
    pixel of one axis reads, as cv::resize computes them (`scale` = source / destination)."""
    if method == INTER_NEAREST:
        idx = [min(int(math.floor(d * scale)), src - 1) for d in range(dst)]
        return np.array(idx)[:, None], np.ones((dst, 1))
    taps = 4 if method == INTER_CUBIC else 2
    indices = np.zeros((dst, taps), np.int64)
    weights = np.zeros((dst, taps))
    for d in range(dst):
        if method == INTER_AREA:  # enlarging by "area": linear taps with area coefficients
            s = int(math.floor(d * scale))
            f = float(np.float32((d + 1) - (s + 1) / scale))
            f = 0.0 if f <= 0 else f - math.floor(f)
        else:
            f = np.float32((d + 0.5) * scale - 0.5)  # OpenCV computes the position in float
            s = int(math.floor(f))
            f = float(f) - s
        if method in (INTER_LINEAR, INTER_AREA):
            if s < 0:
                f, s = 0.0, 0
            if s >= src - 1:
                f, s = 0.0, src - 1
            indices[d] = [s, min(s + 1, src - 1)]
            weights[d] = [1.0 - f, f]
        else:
            indices[d] = [min(max(s - 1 + k, 0), src - 1) for k in range(4)]
            weights[d] = _cubic_weights(f)
    return indices, weights


def area_taps(src: int, dst: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """(indices, weights) of INTER_AREA shrinking by a non-integer `scale` (>= 1) along one
    axis: each output pixel is the mean of the source cells its footprint covers, partial
    cells weighted by their covered part (cv::computeResizeAreaTab, weights in float32).
    Rows shorter than the longest are padded with zero-weight taps."""
    rows: list[list[tuple[int, float]]] = []
    for d in range(dst):
        f1 = d * scale
        f2 = f1 + scale
        cell = min(scale, src - f1)
        s1, s2 = math.ceil(f1), math.floor(f2)
        s2 = min(s2, src - 1)
        s1 = min(s1, s2)
        row = []
        if s1 - f1 > 1e-3:
            row.append((s1 - 1, (s1 - f1) / cell))
        row += [(s, 1.0 / cell) for s in range(s1, s2)]
        if f2 - s2 > 1e-3:
            row.append((s2, min(min(f2 - s2, 1.0), cell) / cell))
        rows.append(row)
    taps = max(len(row) for row in rows)
    indices = np.zeros((dst, taps), np.int64)
    weights = np.zeros((dst, taps), np.float32)
    for d, row in enumerate(rows):
        for k, (index, weight) in enumerate(row):
            indices[d, k], weights[d, k] = index, np.float32(weight)
    return indices, weights


def _saturate(x: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    """cv::saturate_cast from float: round half to even and clamp for integers."""
    if not dtype.is_integer:
        return tf.cast(x, dtype)
    return tf.cast(tf.clip_by_value(tf.round(x), dtype.min, dtype.max), dtype)


def _fixed(weights: np.ndarray) -> np.ndarray:
    """OpenCV's 11-bit weights: each rounded, the largest absorbing the rounding so that every
    row sums to exactly 2^11."""
    one = 1 << RESIZE_COEF_BITS
    fixed = np.rint(weights.astype(np.float32) * one).astype(np.int64)
    for row, w in zip(fixed, weights, strict=True):
        row[int(np.argmax(w))] += one - int(row.sum())
    return fixed


# How much more a gathered tap costs than a tap of a pass along the rows (whole rows weighed and
# summed in vectors): what the pass order of an integer resize is chosen by (see _order).
GATHER_COST = 8


def _taps(indices: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The taps without those of weight 0 for every output pixel (an exact factor's second
    linear tap, area's padding): a tap fewer is a gather fewer."""
    used = np.any(weights != 0, axis=0)
    used[int(np.argmax(used))] = True  # at least one
    return indices[:, used], weights[:, used]


def _is_identity(taps, src: int, one: float) -> bool:
    """Whether taps copy each source pixel with the weight `one` (1, or 2^11 in fixed point)."""
    indices, weights = taps
    return (
        indices.shape == (src, 1)
        and np.array_equal(indices[:, 0], np.arange(src))
        and bool(np.all(weights == one))
    )


def _pass(x: tf.Tensor, taps, axis: int, channels: int, work: tf.DType) -> tf.Tensor:
    """One axis of a separable resize of an (H, W*channels) image: output pixel i along `axis`
    is sum_k weight[i, k] * x[index[i, k]] (all channels of each pixel). Along the columns the
    tables are per element (pixel index * channels + channel), so the gathers and weights of
    every channel are plain loads along the row. Weights of 1 multiply nothing."""
    indices, weights = taps
    if axis == 1:
        lanes = np.arange(channels)
        indices = (indices[:, None, :] * channels + lanes[None, :, None]).reshape(
            -1, indices.shape[1]
        )
        weights = np.repeat(weights, channels, axis=0)
    shape = [-1, 1] if axis == 0 else [1, -1]
    total = None
    for k in range(indices.shape[1]):
        term = tf.gather(x, tf.constant(indices[:, k], tf.int32), axis=axis)
        if not np.all(weights[:, k] == 1):
            term = term * tf.constant(weights[:, k].reshape(shape), work)
        total = term if total is None else total + term
    return total


def _order(h: int, w: int, rows, cols) -> bool:
    """Whether the pass along the columns (rows of the result: vertical) goes first, for an
    integer resize, whose sums are exact in any order: the order that costs less, a gathered
    tap (horizontal pass) counted GATHER_COST times a row pass's tap. Shrinking the rows first
    makes the horizontal pass gather only the rows the result has, as OpenCV computes only the
    rows it needs; enlarging them, the horizontal pass first gathers the fewer source rows."""
    height, width = rows[0].shape[0], cols[0].shape[0]
    ty, tx = rows[0].shape[1], cols[0].shape[1]
    vertical_first = height * w * ty + GATHER_COST * height * width * tx
    horizontal_first = GATHER_COST * h * width * tx + height * width * ty
    return vertical_first <= horizontal_first


def _separable(
    x: tf.Tensor,
    rows,
    cols,
    channels: int,
    work: tf.DType,
    vertical_first: bool = False,
    one: float = 1,
) -> tuple[tf.Tensor, int]:
    """Both passes of (index, weight) taps over an (H, W*channels) image in `work` (OpenCV's
    order, horizontal then vertical, unless `vertical_first`); an axis whose taps are the
    identity (weight `one`) is skipped. Returns the sum and how many passes ran."""
    h, w = x.shape[0], x.shape[1] // channels
    x = tf.cast(x, work)
    passes = [(rows, 0, h), (cols, 1, w)]
    if not vertical_first:
        passes.reverse()
    ran = 0
    for taps, axis, src in passes:
        if _is_identity(taps, src, one):
            continue
        x = _pass(x, taps, axis, channels, work)
        ran += 1
    return x, ran


def resize(
    image: tf.Tensor, width: int, height: int, scale_x: float, scale_y: float, method: int
) -> tf.Tensor:
    """cv::resize of an HW or HWC image to (height, width); scale_* are source / destination
    (1 / fx, 1 / fy when given, else the size ratio)."""
    if image.shape.rank == 2:
        return resize_flat(image, 1, width, height, scale_x, scale_y, method)
    h, w, c = image.shape
    flat = tf.reshape(image, [h, w * c])
    out = resize_flat(flat, c, width, height, scale_x, scale_y, method)
    return tf.reshape(out, [height, width, c])


def resize_flat(
    image: tf.Tensor,
    channels: int,
    width: int,
    height: int,
    scale_x: float,
    scale_y: float,
    method: int,
) -> tf.Tensor:
    """`resize` of an HWC image given as (H, W*channels) (a free reshape of the array), to
    (height, width*channels): the column pass then gathers elements, each output element one
    per tap, with no channel arithmetic (gdp.cv2 calls this)."""
    h, w = image.shape[0], image.shape[1] // channels
    work = tf.float64 if image.dtype == tf.float64 else tf.float32
    if method == INTER_AREA and scale_x >= 1 and scale_y >= 1:
        if scale_x == round(scale_x) and scale_y == round(scale_y):
            return _area_integer(image, channels, int(round(scale_x)), int(round(scale_y)))
        rows, cols = area_taps(h, height, scale_y), area_taps(w, width, scale_x)
        rows, cols = _taps(*rows), _taps(*cols)
        total, _ = _separable(image, rows, cols, channels, work)
        return _saturate(total, image.dtype)
    rows = axis_taps(h, height, scale_y, method)
    cols = axis_taps(w, width, scale_x, method)
    if method == INTER_NEAREST:
        out, _ = _separable(image, rows, cols, channels, image.dtype, vertical_first=True)
        return out
    if image.dtype == tf.uint8:
        rows, cols = _taps(rows[0], _fixed(rows[1])), _taps(cols[0], _fixed(cols[1]))
        first = _order(h, w, rows, cols)
        one = 1 << RESIZE_COEF_BITS
        total, ran = _separable(image, rows, cols, channels, tf.int32, first, one)
        # (total + half) >> bits, clamped to [0, 255]: the clamp first (a cubic's sum may be
        # negative or above 255 << bits), so the shift is an unsigned 32-bit one.
        bits = ran * RESIZE_COEF_BITS
        if bits == 0:
            return tf.cast(total, tf.uint8)
        top = (256 << bits) - 1
        rounded = tf.clip_by_value(total + (1 << (bits - 1)), 0, top)
        shifted = tf.bitwise.right_shift(tf.cast(rounded, tf.uint32), tf.constant(bits, tf.uint32))
        return tf.cast(shifted, tf.uint8)
    total, _ = _separable(image, rows, cols, channels, work)
    return _saturate(total, image.dtype)


def _area_integer(image: tf.Tensor, channels: int, fx: int, fy: int) -> tf.Tensor:
    """INTER_AREA by an integer factor of an (H, W*channels) image: the mean of each fx x fy
    block, summed as a separable resize with unit weights (the block's rows first, then its
    columns, gathered)."""
    h, w = image.shape[0], image.shape[1] // channels
    dh, dw = h // fy, w // fx
    work = tf.int32 if image.dtype.is_integer else image.dtype
    rows = (np.arange(dh)[:, None] * fy + np.arange(fy)[None, :], np.ones((dh, fy)))
    cols = (np.arange(dw)[:, None] * fx + np.arange(fx)[None, :], np.ones((dw, fx)))
    total, _ = _separable(image, rows, cols, channels, work, vertical_first=True)
    if image.dtype.is_integer and fx == fy == 2:  # OpenCV's 2x2 vector path: (sum + 2) >> 2
        if image.dtype.is_unsigned:  # an unsigned 32-bit shift (a vector one)
            total = tf.cast(total + 2, tf.uint32)
            return tf.cast(tf.bitwise.right_shift(total, tf.constant(2, tf.uint32)), image.dtype)
        return tf.cast(tf.bitwise.right_shift(total + 2, 2), image.dtype)
    if image.dtype.is_integer:  # other factors: scaled by 1/area in float, half to even
        mean = tf.cast(total, tf.float64) * (1.0 / (fx * fy))
        return tf.cast(tf.round(mean), image.dtype)
    return total * tf.constant(1.0 / (fx * fy), work)


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
