"""OpenCV's resize as TF ops: separable gathers of constant source indices with OpenCV's
interpolation weights, in OpenCV's fixed point for uint8 (11-bit weights, one rounding).

The indices and weights depend only on the sizes, so they are constants of the graph: a
backend fuses the gathers and the weighted sums into one kernel.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

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
    taps = 2 if method == INTER_LINEAR else 4
    indices = np.zeros((dst, taps), np.int64)
    weights = np.zeros((dst, taps))
    for d in range(dst):
        f = np.float32((d + 0.5) * scale - 0.5)  # OpenCV computes the position in float
        s = int(math.floor(f))
        f = float(f) - s
        if method == INTER_LINEAR:
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


def _fixed(weights: np.ndarray) -> np.ndarray:
    """OpenCV's 11-bit weights: each rounded, the largest absorbing the rounding so that every
    row sums to exactly 2^11."""
    one = 1 << RESIZE_COEF_BITS
    fixed = np.rint(weights.astype(np.float32) * one).astype(np.int64)
    for row, w in zip(fixed, weights, strict=True):
        row[int(np.argmax(w))] += one - int(row.sum())
    return fixed


def _separable(image: tf.Tensor, rows, cols, work: tf.DType) -> tf.Tensor:
    """Column pass then row pass (OpenCV's order: horizontal, then vertical) of gathers with
    constant (index, weight) taps."""
    x = tf.cast(image, work)
    extra = [1] * (image.shape.rank - 2)
    col_idx, col_w = cols
    total = None
    for k in range(col_idx.shape[1]):
        weight = tf.constant(col_w[:, k].reshape([1, -1, *extra]), work)
        term = tf.gather(x, col_idx[:, k], axis=1) * weight
        total = term if total is None else total + term
    row_idx, row_w = rows
    out = None
    for k in range(row_idx.shape[1]):
        weight = tf.constant(row_w[:, k].reshape([-1, 1, *extra]), work)
        term = tf.gather(total, row_idx[:, k], axis=0) * weight
        out = term if out is None else out + term
    return out


def resize(
    image: tf.Tensor, width: int, height: int, scale_x: float, scale_y: float, method: int
) -> tf.Tensor:
    """cv::resize of an HW or HWC image to (height, width); scale_* are source / destination
    (1 / fx, 1 / fy when given, else the size ratio)."""
    h, w = image.shape[0], image.shape[1]
    if method == INTER_AREA:
        return _area_integer(image, int(round(scale_x)), int(round(scale_y)))
    rows = axis_taps(h, height, scale_y, method)
    cols = axis_taps(w, width, scale_x, method)
    if method == INTER_NEAREST:
        return tf.gather(tf.gather(image, rows[0][:, 0], axis=0), cols[0][:, 0], axis=1)
    if image.dtype == tf.uint8:
        rows, cols = (rows[0], _fixed(rows[1])), (cols[0], _fixed(cols[1]))
        total = _separable(image, rows, cols, tf.int32)
        shift = 2 * RESIZE_COEF_BITS
        rounded = tf.bitwise.right_shift(total + (1 << (shift - 1)), shift)
        return tf.cast(tf.clip_by_value(rounded, 0, 255), tf.uint8)
    work = tf.float64 if image.dtype == tf.float64 else tf.float32
    return tf.cast(_separable(image, rows, cols, work), image.dtype)


def _area_integer(image: tf.Tensor, fx: int, fy: int) -> tf.Tensor:
    """INTER_AREA by an integer factor: the mean of each fx x fy block."""
    h, w = image.shape[0], image.shape[1]
    dh, dw = h // fy, w // fx
    work = tf.int32 if image.dtype.is_integer else image.dtype
    x = tf.cast(image[: dh * fy, : dw * fx], work)
    extra = list(image.shape[2:])
    blocks = tf.reshape(x, [dh, fy, dw, fx, *extra])
    total = tf.reduce_sum(blocks, axis=[1, 3])
    if image.dtype.is_integer and fx == fy == 2:  # OpenCV's 2x2 vector path: (sum + 2) >> 2
        return tf.cast(tf.bitwise.right_shift(total + 2, 2), image.dtype)
    if image.dtype.is_integer:  # other factors: scaled by 1/area in float, half to even
        mean = tf.cast(total, tf.float64) * (1.0 / (fx * fy))
        return tf.cast(tf.round(mean), image.dtype)
    return total * tf.constant(1.0 / (fx * fy), work)
