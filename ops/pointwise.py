"""Pointwise operations and whole-image statistics as TF functions, reproducing OpenCV's
threshold, convertScaleAbs, addWeighted, LUT, normalize, meanStdDev, minMaxLoc, mean, sum,
countNonZero and equalizeHist. uint8 results are bit-exact: OpenCV's float32 arithmetic (its
fused multiply-adds emulated through float64, which is exact for a product of two float32s),
round half to even, and integer or float64 accumulation where OpenCV accumulates exactly. They
import nothing of gdp."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

THRESH_BINARY, THRESH_BINARY_INV, THRESH_TRUNC, THRESH_TOZERO, THRESH_TOZERO_INV = range(5)
NORM_INF, NORM_L1, NORM_L2, NORM_MINMAX = 1, 2, 4, 32
FLT_EPSILON = float(np.finfo(np.float32).eps)
DBL_EPSILON = float(np.finfo(np.float64).eps)


def saturate(x: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    """saturate_cast<dtype> of a float tensor: round half to even, clamp to the range, cast."""
    if dtype.is_floating:
        return tf.cast(x, dtype)
    x = tf.round(x)
    return tf.cast(tf.clip_by_value(x, float(dtype.min), float(dtype.max)), dtype)


def _fma32(x: tf.Tensor, a: float, b: float) -> tf.Tensor:
    """float32 fma(x, float(a), float(b)) for float32 x: exact product and one rounding."""
    a64, b64 = float(np.float32(a)), float(np.float32(b))
    return tf.cast(tf.cast(x, tf.float64) * a64 + b64, tf.float32)


def _f32(x: tf.Tensor) -> tf.Tensor:
    return x if x.dtype == tf.float32 else tf.cast(x, tf.float32)


# --- threshold -------------------------------------------------------------------------------


def threshold(image: tf.Tensor, thresh, maxval, kind: int) -> tf.Tensor:
    """cv2.threshold's dst for THRESH_BINARY .. TOZERO_INV. `thresh` and `maxval` are numbers or
    scalar tensors; for uint8, the caller passes floor(thresh) and round(maxval) (OpenCV's)."""
    x = image
    # A scalar, broadcast by tf.where: zeros_like of a static shape is folded by TF's graph
    # optimiser into an image-sized constant (12 MB more to read and carry at 1080p BGR).
    zero = tf.zeros([], image.dtype)
    if image.dtype == tf.uint8:
        # Compared and chosen in uint8 (64 pixels a vector, where int32 held 16): a threshold
        # of -1 (every pixel above) is clipped to 0 and said apart; maxval's and the
        # threshold's clips are OpenCV's.
        t_int = tf.clip_by_value(tf.cast(thresh, tf.int32), -1, 255)
        t = tf.cast(tf.maximum(t_int, 0), tf.uint8)
        m = tf.cast(tf.clip_by_value(tf.cast(maxval, tf.int32), 0, 255), tf.uint8)
        above = (x > t) | (t_int < 0)
    else:
        t = tf.cast(thresh, image.dtype)
        m = tf.cast(maxval, image.dtype)
        above = x > t
    if kind == THRESH_BINARY:
        out = tf.where(above, m, zero)
    elif kind == THRESH_BINARY_INV:
        out = tf.where(above, zero, m)
    elif kind == THRESH_TRUNC:
        out = tf.where(above, t, x)
    elif kind == THRESH_TOZERO:
        out = tf.where(above, x, zero)
    else:
        out = tf.where(above, zero, x)
    return out


def histogram_u8(image: tf.Tensor, scatter: bool = False) -> tf.Tensor:
    """The 256-bin histogram of a uint8 image (int32). With `scatter`, a count added per pixel
    into its bin (tensor_scatter_nd_add: ONNX ScatterND with reduction "add", opset 16, which
    the NPU's opset 13 lacks), one pass over the pixels; else each pixel compared with every
    bin and summed, 256 compares a pixel (12 ms for a 1080p image on the cpu, 1.7 ms
    scattered). The scattered indices are the pixels themselves: relax_import bounds them by
    their uint8 type and checks nothing."""
    flat = tf.reshape(tf.cast(image, tf.int32), [-1])
    if scatter:
        counts = tf.zeros([256], tf.int32)
        # expand_dims, not flat[:, None]: tf2onnx writes that as a slice to 1e9, whose bound
        # TVM's importer then carries into the updates' shape and refuses.
        return tf.tensor_scatter_nd_add(counts, tf.expand_dims(flat, 1), tf.ones_like(flat))
    bins = tf.range(256, dtype=tf.int32)[tf.newaxis, :]
    return tf.reduce_sum(tf.cast(tf.equal(flat[:, tf.newaxis], bins), tf.int32), axis=0)


def _cumsum256(x: tf.Tensor) -> tf.Tensor:
    """Inclusive cumulative sum of a 256-vector as a masked row sum (a dense reduction, exact
    for integer counts; the backend schedules it as any other reduction)."""
    lower = np.tril(np.ones((256, 256))).astype(x.dtype.as_numpy_dtype)
    return tf.reduce_sum(x[tf.newaxis, :] * lower, axis=1)


def otsu_threshold(image: tf.Tensor, scatter: bool = False) -> tf.Tensor:
    """OpenCV's Otsu threshold (getThreshVal_Otsu_8u) as a float64 scalar, in dense form: the
    between-class variance of every split from float64 cumulative sums, the first split of the
    largest variance among those OpenCV considers (min(q1, q2) >= FLT_EPSILON). OpenCV runs a
    sequential recurrence whose rounding can differ in the last bits, which only matters where
    two splits have the same variance (empty histogram bins between the classes)."""
    hist = tf.cast(histogram_u8(image, scatter), tf.float64)
    scale = 1.0 / tf.reduce_sum(hist)  # the pixel count, for an image of any size
    levels = tf.range(256, dtype=tf.float64)
    mu = tf.reduce_sum(hist * levels) * scale
    q1 = _cumsum256(hist) * scale
    q2 = 1.0 - q1
    valid = tf.logical_and(
        tf.minimum(q1, q2) >= FLT_EPSILON, tf.maximum(q1, q2) <= 1.0 - FLT_EPSILON
    )
    safe_q1 = tf.where(valid, q1, tf.ones_like(q1))
    safe_q2 = tf.where(valid, q2, tf.ones_like(q2))
    mu1 = _cumsum256(levels * hist) * scale / safe_q1
    mu2 = (mu - q1 * mu1) / safe_q2
    sigma = tf.where(valid, q1 * q2 * (mu1 - mu2) * (mu1 - mu2), tf.zeros_like(q1))
    best = tf.reduce_max(sigma)
    index = tf.range(256, dtype=tf.int32)
    first = tf.reduce_min(tf.where(tf.logical_and(sigma >= best, sigma > 0.0), index, 256))
    return tf.where(first < 256, tf.cast(first, tf.float64), tf.constant(0.0, tf.float64))


def threshold_otsu(
    image: tf.Tensor, maxval: int, kind: int, scatter: bool = False
) -> tuple[tf.Tensor, tf.Tensor]:
    """THRESH_OTSU on uint8 single channel: (threshold as float64, dst); `scatter` as
    histogram_u8's."""
    t = otsu_threshold(image, scatter)
    return t, threshold(image, t, maxval, kind)


# --- arithmetic ------------------------------------------------------------------------------


def convert_scale_abs(image: tf.Tensor, alpha: float, beta: float) -> tf.Tensor:
    """saturate_cast<uchar>(|src*alpha + beta|) in float32 with a fused multiply-add (for uint8
    a 256-entry table computed here, so that the backend cannot evaluate it differently)."""
    if image.dtype == tf.uint8:
        x = np.arange(256, dtype=np.float64) * float(np.float32(alpha)) + float(np.float32(beta))
        table = np.clip(np.rint(np.abs(x.astype(np.float32))), 0, 255).astype(np.uint8)
        return tf.gather(tf.constant(table), tf.cast(image, tf.int32))
    return saturate(tf.abs(_fma32(_f32(image), alpha, beta)), tf.uint8)


def add_weighted(
    a: tf.Tensor, alpha: float, b: tf.Tensor, beta: float, gamma: float, dtype: tf.DType
) -> tf.Tensor:
    """saturate_cast<dtype>(a*alpha + b*beta + gamma): for uint8 inputs OpenCV's float32
    fma(a, alpha, fma(b, beta, gamma)) (emulated through float64), float64 otherwise."""
    if a.dtype == tf.uint8 and dtype == tf.uint8:
        # 256 x 256 possible inputs: the result is a table computed here exactly as OpenCV does
        # (which the backend cannot re-associate or contract differently)
        levels = np.arange(256, dtype=np.float64)
        inner = (levels * float(np.float32(beta)) + float(np.float32(gamma))).astype(np.float32)
        x = levels[:, None] * float(np.float32(alpha)) + inner.astype(np.float64)[None, :]
        table = np.clip(np.rint(x.astype(np.float32)), 0, 255).astype(np.uint8).ravel()
        index = tf.cast(a, tf.int32) * 256 + tf.cast(b, tf.int32)
        return tf.gather(tf.constant(table), index)
    x = tf.cast(a, tf.float64) * alpha + tf.cast(b, tf.float64) * beta + gamma
    return saturate(x, dtype)


def lut(image: tf.Tensor, table: tf.Tensor) -> tf.Tensor:
    """cv2.LUT: `table` is (256,) for every channel or (256, C) per channel."""
    index = tf.cast(image, tf.int32)
    if table.shape.rank == 1:
        return tf.gather(table, index)
    channels = table.shape[-1]
    flat = tf.reshape(table, [-1])
    return tf.gather(flat, index * channels + tf.range(channels, dtype=tf.int32))


def scale_shift(image: tf.Tensor, scale, shift, dtype: tf.DType) -> tf.Tensor:
    """Mat::convertTo(dtype, scale, shift): float32 fused multiply-add for uint8 and float32
    sources (scale and shift are float64 scalars, possibly tensors)."""
    if image.dtype in (tf.uint8, tf.float32):
        s32 = tf.cast(tf.cast(scale, tf.float32), tf.float64)
        b32 = tf.cast(tf.cast(shift, tf.float32), tf.float64)
        x = tf.cast(tf.cast(image, tf.float64) * s32 + b32, tf.float32)
    else:
        x = tf.cast(image, tf.float64) * scale + shift
    return saturate(x, dtype)


# --- statistics ------------------------------------------------------------------------------


def _f64(image: tf.Tensor) -> tf.Tensor:
    return tf.cast(image, tf.float64)


def _per_channel(image: tf.Tensor) -> tf.Tensor:
    """(N, C) float64 view of an HW or HWC image."""
    channels = 1 if image.shape.rank == 2 else image.shape[-1]
    return tf.reshape(_f64(image), [-1, channels])


def norm(image: tf.Tensor, norm_type: int) -> tf.Tensor:
    """cv::norm(src, NORM_INF | NORM_L1 | NORM_L2) as float64."""
    x = _f64(image)
    if norm_type == NORM_INF:
        return tf.reduce_max(tf.abs(x))
    if norm_type == NORM_L1:
        return tf.reduce_sum(tf.abs(x))
    return tf.sqrt(tf.reduce_sum(x * x))


def normalize(image: tf.Tensor, alpha: float, beta: float, norm_type: int, dtype: tf.DType):
    """cv2.normalize without a mask."""
    if norm_type == NORM_MINMAX:
        x = _f64(image)
        smin, smax = tf.reduce_min(x), tf.reduce_max(x)
        dmin, dmax = min(alpha, beta), max(alpha, beta)
        span = smax - smin
        inv = tf.where(span > DBL_EPSILON, 1.0 / tf.where(span > 0, span, 1.0), 0.0)
        scale = (dmax - dmin) * inv
        shift = dmin - smin * scale
    else:
        n = norm(image, norm_type)
        scale = tf.where(n > DBL_EPSILON, alpha / tf.where(n > 0, n, 1.0), 0.0)
        shift = tf.constant(0.0, tf.float64)
    return scale_shift(image, scale, shift, dtype)


def sum_channels(image: tf.Tensor) -> tf.Tensor:
    """Per-channel sums, float64 (C,)."""
    return tf.reduce_sum(_per_channel(image), axis=0)


def mean_channels(image: tf.Tensor) -> tf.Tensor:
    """Per-channel means (C,), as OpenCV: sum * (1/N)."""
    return sum_channels(image) * (1.0 / int(np.prod(image.shape[:2])))


def mean_std(image: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """cv2.meanStdDev: (mean (C,1), stddev (C,1)) float64 as OpenCV: s*scale,
    sqrt(max(sq*scale - mean^2, 0)) with scale = 1/N."""
    x = _per_channel(image)
    scale = 1.0 / int(np.prod(image.shape[:2]))
    mean = tf.reduce_sum(x, axis=0) * scale
    sq = tf.reduce_sum(x * x, axis=0) * scale
    std = tf.sqrt(tf.maximum(sq - mean * mean, 0.0))
    return mean[:, tf.newaxis], std[:, tf.newaxis]


def min_max_loc(image: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """(min, max) as float64 and the flat indices of their first occurrences (int32)."""
    flat = tf.reshape(image, [-1])
    n = int(flat.shape[0])
    index = tf.range(n, dtype=tf.int32)
    lo, hi = tf.reduce_min(flat), tf.reduce_max(flat)
    first_lo = tf.reduce_min(tf.where(tf.equal(flat, lo), index, n))
    first_hi = tf.reduce_min(tf.where(tf.equal(flat, hi), index, n))
    return _f64(lo), _f64(hi), first_lo, first_hi


def count_non_zero(image: tf.Tensor) -> tf.Tensor:
    return tf.reduce_sum(tf.cast(tf.not_equal(image, tf.zeros_like(image)), tf.int32))


def equalize_hist(image: tf.Tensor, scatter: bool = False) -> tf.Tensor:
    """cv2.equalizeHist (uint8, one channel): OpenCV's LUT from the histogram, with its float32
    scale 255/(N - h[first]) and round half to even; `scatter` as histogram_u8's."""
    hist = histogram_u8(image, scatter)
    total = tf.reduce_sum(hist)  # the pixel count, for an image of any size
    index = tf.range(256, dtype=tf.int32)
    first = tf.reduce_min(tf.where(hist > 0, index, 256))
    h_first = tf.gather(hist, first)
    cum = _cumsum256(hist)
    above = cum - tf.gather(cum, first)  # sum of h[first+1 .. i]
    denom = tf.cast(tf.maximum(total - h_first, 1), tf.float32)
    scale = np.float32(255.0) / denom
    table = saturate(tf.cast(above, tf.float32) * scale, tf.uint8)
    table = tf.where(index <= first, tf.zeros_like(table), table)
    uniform = tf.fill([256], tf.cast(first, tf.uint8))
    table = tf.where(tf.equal(h_first, total), uniform, table)
    return tf.gather(table, tf.cast(image, tf.int32))
