"""Pointwise operations and statistics: threshold, convertScaleAbs, addWeighted, LUT, normalize,
meanStdDev, minMaxLoc, mean, sumElems, countNonZero, equalizeHist.

In graph mode (TF tensors), statistics come back as tensors: mean/sumElems as a (4,) float64
tensor, minMaxLoc as (min, max, minLoc, maxLoc) with the locations as (x, y) int32 tensors.
"""

from __future__ import annotations

import functools
import math

import cv2 as _cv2
import numpy as np

from gdp.cv2 import common, engine
from gdp.runtime import lut
from gdp.runtime.blend import add_weighted
from gdp.runtime.convert import scale_to_float32
from gdp.runtime.extrema import extrema
from gdp.runtime.lut import histogram, lookup
from gdp.runtime.moments import channel_sums, sums
from gdp.runtime.nonzero import count_non_zero

ops = common.LazyModule("gdp.ops.pointwise")

_DEPTHS = {_cv2.CV_8U: "uint8", _cv2.CV_32F: "float32"}


def _src(func: str, src, name: str = "src"):
    """(src, graph): the validated array or TF tensor, and whether this is graph mode."""
    return common.image(func, src, name), engine.is_graph_call(src)


def _dtype(src) -> str:
    return common.dtype_name(common.dtype_of(src))


def _one_channel(func: str, src, message: str = "src.channels() == 1") -> None:
    if common.channels(src) != 1:
        raise common.error(func, message)


def _tf_dtype(name: str):
    import tensorflow as tf

    return tf.as_dtype(name)


# --- threshold -------------------------------------------------------------------------------


def _threshold(image, kind, thresh, maxval):
    # thresh and maxval: float64 scalars (run-time inputs), already OpenCV's for the dtype
    return ops.threshold(image, thresh, maxval, kind)


def _threshold_otsu(image, kind, maxval, scatter=False):
    return ops.threshold_otsu(image, maxval, kind, scatter)


@common.accelerate("threshold")
def threshold(src, thresh, maxval, type, dst=None):
    if (
        dst is None
        and src.__class__ is np.ndarray
        and src.dtype is common.UINT8
        and type.__class__ is int
        and 0 <= type <= _cv2.THRESH_TOZERO_INV
        and common.plain_image(src)
    ):
        # The common call, a uint8 image of 1 to 4 channels without dst, straight to the
        # kernel: the general path's layers cost a 480p call half its time (about 4 of 8 us).
        t, m, retval = _uint8_levels(thresh, maxval)
        return retval, _threshold_on_host(src, type, t, m, None)  # a new array
    src, graph = _src("threshold", src)
    kind = int(type) & _cv2.THRESH_MASK
    automatic = int(type) & ~_cv2.THRESH_MASK
    if kind > _cv2.THRESH_TOZERO_INV or automatic not in (0, _cv2.THRESH_OTSU):
        # THRESH_TRIANGLE, THRESH_DRYRUN, flags of later OpenCV versions: OpenCV decides
        # (graph mode: an error, from the wrapper)
        raise common.NotAccelerated(f"threshold type {type} is not accelerated")
    dtype = _dtype(src)
    if automatic == _cv2.THRESH_OTSU and (dtype != "uint8" or common.channels(src) != 1):
        # OpenCV takes 16-bit Otsu too (and refuses what it does not take)
        raise common.NotAccelerated(f"THRESH_OTSU on {dtype} C{common.channels(src)}")
    if dtype == "uint8":
        t, m, retval = _uint8_levels(thresh, maxval)
    elif dtype == "float32":
        t, m, retval = float(np.float32(thresh)), float(np.float32(maxval)), float(thresh)
    else:
        raise common.NotAccelerated(f"{dtype} is not accelerated")
    if automatic == _cv2.THRESH_OTSU:
        if kind == _cv2.THRESH_TRUNC:  # the threshold becomes maxval's role: not accelerated
            raise common.NotAccelerated("THRESH_OTSU with THRESH_TRUNC is not accelerated")
        if common.on_host(src):  # a histogram, Otsu's split on the host, a lookup
            value = _otsu(histogram(src))
            into = common.into(dst, src.shape, np.uint8, src, in_place=True)
            out = _threshold_on_host(src, kind, int(value), m, into)
            return value, common.finish(out, dst)
        if graph:
            return _threshold_otsu(src, kind, m)
        # One program for every size (the histogram normalised by its own sum, the pixel
        # count); maxval is a run-time input.
        params = {"kind": kind, "scatter": common.tvm_target()}
        value, out = engine.run(
            "threshold.otsu", _threshold_otsu, [src], params, 2, {"maxval": m}, True
        )
        return float(value), common.finish(out, dst)
    if dtype == "uint8" and common.on_host(src):
        into = common.into(dst, src.shape, np.uint8, src, in_place=True)
        return retval, common.finish(_threshold_on_host(src, kind, t, m, into), dst)
    values = {"thresh": t, "maxval": m}
    return retval, engine.call("threshold", _threshold, [src], {"kind": kind}, dst, values, True)


def _uint8_levels(thresh, maxval) -> tuple[int, int, float]:
    """(threshold, maxval, retval) of a uint8 threshold as OpenCV takes them: the threshold
    floored into [-1, 255], maxval rounded half to even (as np.rint, without a NumPy call's
    microsecond) into [0, 255], and the floored threshold it returns."""
    if thresh.__class__ is int and maxval.__class__ is int and 0 <= maxval <= 255:
        # the common call's integers, without a function call (each cost 2-3 us after a cache
        # sweep)
        return (
            (thresh if -1 <= thresh <= 255 else 255 if thresh > 255 else -1),
            maxval,
            thresh + 0.0,
        )
    ithresh = math.floor(thresh)
    imaxval = min(max(int(round(maxval)), 0), 255)
    return max(min(ithresh, 255), -1), imaxval, float(ithresh)


def _threshold_on_host(src: np.ndarray, kind: int, thresh: int, maxval: int, out) -> np.ndarray:
    """uint8 threshold by gdp.runtime.lut's kernels: a compare for thresholds 0-254, the table
    lookup for -1 and 255 (every value above, none); into `out` where given."""

    if 0 <= thresh <= 254:
        return lut.threshold(src, kind, thresh, maxval, out)
    return lut.lookup(src, _threshold_table(kind, thresh, maxval), out)


_LEVELS = np.arange(256)


@functools.lru_cache(maxsize=64)
def _threshold_table(kind: int, thresh: int, maxval: int) -> np.ndarray:
    """uint8 threshold of every level: gdp.ops.pointwise.threshold's arithmetic (`thresh`
    floor(thresh) in [-1, 255], -1 meaning every pixel above; `maxval` in [0, 255]). Kept for
    the calls' last values (shared: never written)."""
    t_int = min(max(int(thresh), -1), 255)
    t, m = max(t_int, 0), min(max(int(maxval), 0), 255)
    above = (t < _LEVELS) | (t_int < 0)
    chosen = {
        _cv2.THRESH_BINARY: (m, 0),
        _cv2.THRESH_BINARY_INV: (0, m),
        _cv2.THRESH_TRUNC: (t, _LEVELS),
        _cv2.THRESH_TOZERO: (_LEVELS, 0),
        _cv2.THRESH_TOZERO_INV: (0, _LEVELS),
    }[kind]
    return np.where(above, *chosen).astype(np.uint8)


_FLT_EPSILON = float(np.finfo(np.float32).eps)


def _otsu(hist: np.ndarray) -> float:
    """gdp.ops.pointwise.otsu_threshold from a 256-bin histogram, in NumPy: its cumulative sums
    are of integers, exact in float64 in any order, and the rest is elementwise."""
    hist = hist.astype(np.float64)
    scale = 1.0 / hist.sum()
    levels = _LEVELS.astype(np.float64)
    mu = (hist * levels).sum() * scale
    q1 = np.cumsum(hist) * scale
    q2 = 1.0 - q1
    valid = (np.minimum(q1, q2) >= _FLT_EPSILON) & (np.maximum(q1, q2) <= 1.0 - _FLT_EPSILON)
    safe_q1 = np.where(valid, q1, 1.0)
    safe_q2 = np.where(valid, q2, 1.0)
    mu1 = np.cumsum(levels * hist) * scale / safe_q1
    mu2 = (mu - q1 * mu1) / safe_q2
    sigma = np.where(valid, q1 * q2 * (mu1 - mu2) * (mu1 - mu2), 0.0)
    best = (sigma >= sigma.max()) & (sigma > 0.0)
    return float(np.argmax(best)) if best.any() else 0.0


def _equalize_table(hist: np.ndarray) -> np.ndarray:
    """gdp.ops.pointwise.equalize_hist's table from a 256-bin histogram, in NumPy (float32
    scale and products, as the graph's)."""
    total = int(hist.sum())
    first = int(np.argmax(hist > 0))
    if int(hist[first]) == total:  # one level: the image is that level
        return np.full(256, first, np.uint8)
    cumulative = np.cumsum(hist)
    above = cumulative - cumulative[first]
    scale = np.float32(255.0) / np.float32(max(total - int(hist[first]), 1))
    table = np.clip(np.rint(above.astype(np.float32) * scale), 0, 255).astype(np.uint8)
    table[: first + 1] = 0
    return table


# --- arithmetic ------------------------------------------------------------------------------


def _f32(value: float) -> float:
    """float(np.float32(value)): OpenCV's float32 parameter, rounded on the host (a
    Cast(float64 -> float32 -> float64) in the program is dropped by tf2onnx)."""
    return float(np.float32(value))


def _scaled_levels(scale: float, shift: float) -> np.ndarray:
    """Every uint8 level times float32(scale) plus float32(shift), in float32: the product is
    exact in float64, so the sum rounds once (OpenCV's float32 fma)."""
    return (np.arange(256, dtype=np.float64) * _f32(scale) + _f32(shift)).astype(np.float32)


@functools.lru_cache(maxsize=64)
def _scale_abs_table(alpha: float, beta: float) -> np.ndarray:
    """convertScaleAbs of every uint8 level: gdp.ops.pointwise.convert_scale_abs's table (kept
    for the calls' last values; shared: never written)."""
    return np.clip(np.rint(np.abs(_scaled_levels(alpha, beta))), 0, 255).astype(np.uint8)


def _lookup(image, table):
    """table[image]: a table computed on the host for the call's values."""
    import tensorflow as tf

    return tf.gather(table, tf.cast(image, tf.int32))


def _convert_scale_abs(image, alpha, beta):
    """ops.convert_scale_abs for float32 and 16-bit images, alpha and beta float64 scalar
    tensors holding float32 values: the product is exact in float64, so the sum rounds once (a
    float32 fma)."""
    import tensorflow as tf

    x = tf.cast(tf.cast(image, tf.float64) * alpha + beta, tf.float32)
    return ops.saturate(tf.abs(x), tf.uint8)


@common.accelerate("convertScaleAbs")
def convertScaleAbs(src, dst=None, alpha=1.0, beta=0.0):
    src, graph = _src("convertScaleAbs", src)
    # int16: Sobel's and Laplacian's CV_16S results, which OpenCV's tutorials take back to 8
    # bits this way
    if _dtype(src) not in ("uint8", "int16", "uint16", "float32"):
        if graph:
            raise common.error("convertScaleAbs", f"{_dtype(src)} is not accelerated")
        raise common.NotAccelerated(f"{_dtype(src)} is not accelerated")
    if graph:
        return ops.convert_scale_abs(src, float(alpha), float(beta))
    if _dtype(src) == "uint8" and common.on_host(src):
        table = _scale_abs_table(float(alpha), float(beta))
        into = common.into(dst, src.shape, np.uint8, src, in_place=True)
        return common.finish(lookup(src, table, into), dst)
    if _dtype(src) == "uint8":  # a 256-entry table of this call's alpha and beta
        table = _scale_abs_table(float(alpha), float(beta))
        out = engine.run("convertScaleAbs.table", _lookup, [src, table], {}, free=1)
        return common.finish(out, dst)
    values = {"alpha": _f32(alpha), "beta": _f32(beta)}
    return engine.call("convertScaleAbs", _convert_scale_abs, [src], {}, dst, values, True)


def _add_weighted_table(alpha: float, beta: float, gamma: float) -> np.ndarray:
    """addWeighted of every pair of uint8 levels, a*256 + b: gdp.ops.pointwise.add_weighted's
    table (OpenCV's float32 fma(a, alpha, fma(b, beta, gamma)))."""
    levels = np.arange(256, dtype=np.float64)
    inner = (levels * _f32(beta) + _f32(gamma)).astype(np.float32)
    x = levels[:, None] * _f32(alpha) + inner.astype(np.float64)[None, :]
    return np.clip(np.rint(x.astype(np.float32)), 0, 255).astype(np.uint8).ravel()


def _add_weighted_lookup(a, b, table):
    import tensorflow as tf

    return tf.gather(table, tf.cast(a, tf.int32) * 256 + tf.cast(b, tf.int32))


def _add_weighted(a, b, dtype, alpha, beta, gamma):
    """ops.add_weighted's float64 form (every case but uint8 -> uint8), the weights float64
    scalar tensors."""
    import tensorflow as tf

    x = tf.cast(a, tf.float64) * alpha + tf.cast(b, tf.float64) * beta + gamma
    return ops.saturate(x, _tf_dtype(dtype))


@common.accelerate("addWeighted")
def addWeighted(src1, alpha, src2, beta, gamma, dst=None, dtype=-1):
    src1, graph = _src("addWeighted", src1, "src1")
    if not graph:
        src2 = common.image("addWeighted", src2, "src2")
    if tuple(src1.shape) != tuple(src2.shape):
        raise common.error(
            "addWeighted", "src1.size == src2.size && src1.channels() == src2.channels()"
        )
    out_dtype = _dtype(src1) if dtype is None or dtype < 0 else _DEPTHS.get(int(dtype) & 7)
    if (
        _dtype(src1) not in ("uint8", "float32")
        or _dtype(src2) != _dtype(src1)
        or out_dtype != _dtype(src1)
    ):
        reason = f"{_dtype(src1)}, {_dtype(src2)} -> dtype {dtype} is not accelerated"
        if graph:
            raise common.error("addWeighted", reason)
        raise common.NotAccelerated(reason)
    if graph:
        return ops.add_weighted(
            src1, float(alpha), src2, float(beta), float(gamma), _tf_dtype(out_dtype)
        )
    if out_dtype == "uint8" and _dtype(src1) == "uint8" and common.on_host(src1, src2):
        into = common.into(dst, src1.shape, np.uint8, src1, src2, in_place=True)
        return common.finish(add_weighted(src1, alpha, src2, beta, gamma, into), dst)
    if out_dtype == "uint8" and _dtype(src1) == "uint8":  # a table of this call's weights
        table = _add_weighted_table(float(alpha), float(beta), float(gamma))
        arrays = [src1, src2, table]
        out = engine.run("addWeighted.table", _add_weighted_lookup, arrays, {}, free=2, same_size=2)
        return common.finish(out, dst)
    values = {"alpha": float(alpha), "beta": float(beta), "gamma": float(gamma)}
    params = {"dtype": out_dtype}
    return engine.call("addWeighted", _add_weighted, [src1, src2], params, dst, values, True)


@common.accelerate("LUT")
def LUT(src, lut, dst=None):
    src, graph = _src("LUT", src)
    cn = common.channels(src)
    table = lut if graph else np.asarray(lut)
    size = int(np.prod(table.shape))
    lutcn = size // 256 if size % 256 == 0 else 0
    if lutcn not in (1, cn) or (lutcn > 1 and int(table.shape[-1]) != cn):
        raise common.error(
            "LUT", "(lutcn == cn || lutcn == 1) && _lut.total() == 256 && _lut.isContinuous()"
        )
    if _dtype(src) != "uint8":
        if _dtype(src) == "int8" and not graph:
            raise common.NotAccelerated("int8 sources are not accelerated")
        raise common.error("LUT", "(depth == CV_8U || depth == CV_8S)")
    shape = [256] if lutcn == 1 else [256, cn]
    if graph:
        import tensorflow as tf

        return ops.lut(src, tf.reshape(tf.convert_to_tensor(table), shape))
    table = np.ascontiguousarray(table.reshape(shape))
    if lutcn == 1 and table.dtype == np.uint8 and common.on_host(src):
        into = common.into(dst, src.shape, np.uint8, src, in_place=True)
        return common.finish(lookup(src, table, into), dst)
    return common.finish(engine.run("LUT", _lut, [src, table], {}, free=1), dst)


def _normalize(image, norm_type, dtype, alpha, beta):
    """ops.normalize with alpha and beta float64 scalar tensors: the same arithmetic."""
    import tensorflow as tf

    if norm_type != ops.NORM_MINMAX:
        n = ops.norm(image, norm_type)
        scale = tf.where(n > ops.DBL_EPSILON, alpha / tf.where(n > 0, n, 1.0), 0.0)
        shift = tf.constant(0.0, tf.float64)
        return ops.scale_shift(image, scale, shift, _tf_dtype(dtype))
    x = tf.cast(image, tf.float64)
    smin, smax = tf.reduce_min(x), tf.reduce_max(x)
    dmin, dmax = tf.minimum(alpha, beta), tf.maximum(alpha, beta)
    span = smax - smin
    inv = tf.where(span > ops.DBL_EPSILON, 1.0 / tf.where(span > 0, span, 1.0), 0.0)
    scale = (dmax - dmin) * inv
    shift = dmin - smin * scale
    return ops.scale_shift(image, scale, shift, _tf_dtype(dtype))


@common.accelerate("normalize")
def normalize(src, dst=None, alpha=1.0, beta=0.0, norm_type=_cv2.NORM_L2, dtype=-1, mask=None):
    src, graph = _src("normalize", src)
    out_dtype = _dtype(src) if dtype is None or dtype < 0 else _DEPTHS.get(int(dtype) & 7)
    kinds = (_cv2.NORM_MINMAX, _cv2.NORM_L1, _cv2.NORM_L2, _cv2.NORM_INF)
    if norm_type not in kinds:
        reason = f"norm_type {norm_type} is not accelerated"
    elif mask is not None:
        reason = "a mask is not accelerated"
    elif _dtype(src) not in ("uint8", "float32") or out_dtype is None:
        reason = f"{_dtype(src)} -> dtype {dtype} is not accelerated"
    else:
        reason = ""
    if reason:
        if graph:
            raise common.error("normalize", reason)
        raise common.NotAccelerated(reason)
    # float32 by its extremes only (its norms' sums are the program's)
    by_extremes = norm_type in (_cv2.NORM_MINMAX, _cv2.NORM_INF) and out_dtype == "float32"
    on_host = _dtype(src) == "uint8" or (_dtype(src) == "float32" and by_extremes)
    if not graph and on_host and common.on_host(src, out_bytes=src.size * 4):
        # the extremes or the norm (gdp.runtime.extrema, moments), then a table of the levels
        # or the float32 kernel
        scale, shift = _normalize_factors(
            src, int(norm_type), float(alpha), float(beta), out_dtype == "float32"
        )
        if math.isfinite(_f32(scale)) and math.isfinite(_f32(shift)):
            if out_dtype == "uint8":
                into = common.into(dst, src.shape, np.uint8, src, in_place=True)
                return common.finish(lookup(src, _scale_shift_table(scale, shift), into), dst)
            into = common.into(dst, src.shape, np.float32, src)
            return common.finish(scale_to_float32(src, scale, shift, into), dst)
    values = {"alpha": float(alpha), "beta": float(beta)}
    params = {"norm_type": int(norm_type), "dtype": out_dtype}
    return engine.call("normalize", _normalize, [src], params, dst, values, True)


_DBL_EPSILON = float(np.finfo(np.float64).eps)  # gdp.ops.pointwise.DBL_EPSILON, without TF


def _normalize_factors(
    src: np.ndarray, norm_type: int, alpha: float, beta: float, to_float32: bool
) -> tuple[float, float]:
    """(scale, shift) of normalize for a uint8 image (or a float32 one by its extremes), as
    OpenCV computes them in float64: from its extremes (NORM_MINMAX, and NORM_INF: the largest
    magnitude) or its sums. Into float32, NORM_MINMAX's are OpenCV's float32 ones: the scale
    rounded, the shift a float32 difference (float)dmin - (float)(smin * scale). NaN for an
    image holding an infinity (the caller's program computes it, as OpenCV). An image holding
    a NaN is OpenCV's: its extremes skip NaNs (the program's propagated them: a whole image of
    NaNs where OpenCV's had the one)."""
    if norm_type in (_cv2.NORM_MINMAX, _cv2.NORM_INF):
        found = extrema(src, positions=False)
        if found.nans:
            raise common.NotAccelerated("the image holds NaN")
        low, high = float(found.low), float(found.high)
        if not (math.isfinite(low) and math.isfinite(high)):
            return math.nan, math.nan
    if norm_type == _cv2.NORM_MINMAX:
        dmin, dmax = min(alpha, beta), max(alpha, beta)
        span = high - low
        scale = (dmax - dmin) * (1.0 / span if span > _DBL_EPSILON else 0.0)
        if to_float32:
            scale = _f32(scale)
            return scale, float(np.float32(dmin) - np.float32(low * scale))
        return scale, dmin - low * scale
    if norm_type == _cv2.NORM_INF:
        n = max(-low, high)
    else:  # exact integer sums: their float64 total is the same in any order
        totals, squares = sums(src)
        n = float(totals.sum()) if norm_type == _cv2.NORM_L1 else math.sqrt(float(squares.sum()))
    return (alpha / n if n > _DBL_EPSILON else 0.0), 0.0


@functools.lru_cache(maxsize=64)
def _scale_shift_table(scale: float, shift: float) -> np.ndarray:
    """convertTo(CV_8U, scale, shift) of every uint8 level: gdp.ops.pointwise.scale_shift's,
    saturated."""
    return np.clip(np.rint(_scaled_levels(scale, shift)), 0, 255).astype(np.uint8)


# --- statistics ------------------------------------------------------------------------------


def _stat_src(func: str, src, mask=None, accept=("uint8", "float32")):
    """(src, graph, reason): the reason it falls through to OpenCV, or ''."""
    src, graph = _src(func, src)
    reason = ""
    if mask is not None:
        reason = "a mask is not accelerated"
    elif _dtype(src) not in accept:
        reason = f"{_dtype(src)} is not accelerated"
    if reason and graph:
        raise common.error(func, reason)
    return src, graph, reason


@common.accelerate("meanStdDev")
def meanStdDev(src, mean=None, stddev=None, mask=None):
    src, graph, reason = _stat_src("meanStdDev", src, mask)
    if reason:
        raise common.NotAccelerated(reason)
    if graph:
        return ops.mean_std(src)
    if _host_moments(src):
        totals, squares = sums(src)
        scale = _pixel_scale(src)
        m = totals * scale
        s = np.sqrt(np.maximum(squares * scale - m * m, 0.0))
        return common.finish(m[:, None], mean), common.finish(s[:, None], stddev)
    m, s = engine.run("meanStdDev", _mean_std, [src], {}, outputs=2, free=True)
    return common.finish(np.asarray(m), mean), common.finish(np.asarray(s), stddev)


def _host_moments(src) -> bool:
    """Whether gdp.runtime.moments' kernel sums this eager call's image: uint8 of 1 to 4
    channels, not empty, on the cpu target."""
    return (
        _dtype(src) == "uint8"
        and common.channels(src) <= 4
        and src.size > 0
        and common.on_host(src)
    )


def _pixel_scale(src) -> float:
    """_pixels' 1 / (height * width) in float64, on the host."""
    return 1.0 / (float(src.shape[0]) * float(src.shape[1]))


def _pixels(image):
    """1 / (height * width) as float64, from the run's shape (a program serves every size)."""
    import tensorflow as tf

    shape = tf.shape(image, out_type=tf.int64)
    # The two extents multiplied, not reduce_prod of the shape: TVM's ONNX importer takes no
    # ReduceProd of a shape, and the program was compiled per size.
    return 1.0 / (tf.cast(shape[0], tf.float64) * tf.cast(shape[1], tf.float64))


def _mean_std(image):
    """ops.mean_std with the pixel count taken at run time: the same arithmetic."""
    import tensorflow as tf

    scale = _pixels(image)
    if image.dtype.is_integer:
        mean, sq = (total * scale for total in _integer_sums(image))
    else:
        channels = 1 if image.shape.rank == 2 else image.shape[-1]
        x = tf.reshape(tf.cast(image, tf.float64), [-1, channels])
        mean = tf.reduce_sum(x, axis=0) * scale
        sq = tf.reduce_sum(x * x, axis=0) * scale
    std = tf.sqrt(tf.maximum(sq - mean * mean, 0.0))
    return mean[:, tf.newaxis], std[:, tf.newaxis]


def _integer_sums(image):
    """The per-channel sums of an 8- or 16-bit integer image's values and of their squares,
    as float64 holding the exact integers (OpenCV's sums are exact too; below 2^53, which a
    uint16 image's squares reach past 2 Gpx): each row summed in int64, then the rows in
    float64. Integer additions vectorise in any order and cost one
    cycle; the float64 sums of every pixel, added in order, ran at the adder's latency (a
    1080p BGR meanStdDev 8.4 ms, against OpenCV's 1.8)."""
    import tensorflow as tf

    planes = [image] if image.shape.rank == 2 else [image[:, :, c] for c in range(image.shape[-1])]
    wide = tf.int64 if image.dtype == tf.uint16 else tf.int32  # x * x of a uint16 overflows int32
    totals = []
    for square in (False, True):
        per_channel = []
        for plane in planes:
            # Each channel's plane summed along its rows: a reduction of the innermost axis,
            # which runs in vector lanes of partial sums (a sum over rows and columns with the
            # channels innermost ran unscheduled).
            x = tf.cast(plane, wide)
            rows = tf.reduce_sum(tf.cast(x * x if square else x, tf.int64), axis=1)
            per_channel.append(tf.reduce_sum(tf.cast(rows, tf.float64)))
        totals.append(tf.stack(per_channel))
    return totals


def _mean_channels(image):
    """ops.mean_channels with the pixel count taken at run time: sum * (1/N)."""
    return ops.sum_channels(image) * _pixels(image)


def _min_max_loc(image):
    """ops.min_max_loc for an image of any size: the first occurrences as ArgMin and ArgMax
    (ONNX's first index among equals; a tf.range of the run-time element count has no shape
    TVM's importer can give it, and the program was compiled per size). An image holding a
    NaN is OpenCV's (minMaxLoc), so the indices need not say where a NaN is."""
    import tensorflow as tf

    flat = tf.reshape(image, [-1])
    lo, hi = tf.reduce_min(flat), tf.reduce_max(flat)
    first_lo = tf.argmin(flat, output_type=tf.int32)
    first_hi = tf.argmax(flat, output_type=tf.int32)
    return tf.cast(lo, tf.float64), tf.cast(hi, tf.float64), first_lo, first_hi


# Graph functions named here, so that naming one does not import gdp.ops (and TensorFlow).
def _sum_channels(image):
    return ops.sum_channels(image)


def _count_non_zero(image):
    """The pixels that do not equal 0, counted as the size less the zeros: a NaN is not zero
    (OpenCV counts it). TVM's LLVM code writes a float `!=` as an ordered compare, false for a
    NaN, so ops.count_non_zero's not_equal missed every NaN."""
    import tensorflow as tf

    if not image.dtype.is_floating:
        return ops.count_non_zero(image)
    zeros = tf.reduce_sum(tf.cast(tf.equal(image, tf.zeros_like(image)), tf.int32))
    return tf.size(image, out_type=tf.int32) - zeros


def _lut(image, table):
    return ops.lut(image, table)


def _equalize_hist(image, scatter=False):
    return ops.equalize_hist(image, scatter)


def _four(values) -> tuple[float, float, float, float]:
    values = [float(v) for v in np.ravel(values)]
    return tuple(values + [0.0] * (4 - len(values)))  # type: ignore[return-value]


def _four_tensor(values):
    import tensorflow as tf

    return tf.pad(values, [[0, 4 - int(values.shape[0])]])


@common.accelerate("mean")
def mean(src, mask=None):
    src, graph, reason = _stat_src("mean", src, mask)
    if reason:
        raise common.NotAccelerated(reason)
    if graph:
        return _four_tensor(ops.mean_channels(src))
    if _host_moments(src):
        return _four(channel_sums(src) * _pixel_scale(src))
    return _four(engine.run("mean", _mean_channels, [src], {}, free=True))


@common.accelerate("sumElems")
def sumElems(src):
    if src.__class__ is np.ndarray and src.dtype is common.UINT8 and common.plain_image(src):
        return _four(channel_sums(src))  # the common call, straight to the kernel
    src, graph, reason = _stat_src("sumElems", src)
    if reason:
        raise common.NotAccelerated(reason)
    if graph:
        return _four_tensor(ops.sum_channels(src))
    if _host_moments(src):
        return _four(channel_sums(src))
    return _four(engine.run("sumElems", _sum_channels, [src], {}, free=True))


def _min_max_loc_on_host(src: np.ndarray) -> tuple:
    """minMaxLoc of a uint8 or float32 HxW image by gdp.runtime.extrema's kernel."""
    found = extrema(src)
    if found.nans:
        raise common.NotAccelerated("the image holds NaN")  # as the program's, below
    width, low, high = src.shape[1], found.first_low, found.first_high
    return (
        float(found.low),
        float(found.high),
        (low % width, low // width),
        (high % width, high // width),
    )


_FLOAT32 = np.dtype(np.float32)


@common.accelerate("minMaxLoc")
def minMaxLoc(src, mask=None):
    if (
        mask is None
        and src.__class__ is np.ndarray
        and src.ndim == 2
        and (src.dtype is common.UINT8 or src.dtype == _FLOAT32)
        and common.plain_image(src)
    ):  # the common call, straight to the kernel (as countNonZero's)
        return _min_max_loc_on_host(src)
    src, graph, reason = _stat_src("minMaxLoc", src, mask)
    _one_channel("minMaxLoc", src, "(cn == 1 || (_mask.empty() && !minIdx && !maxIdx))")
    if reason:
        raise common.NotAccelerated(reason)
    width = int(src.shape[1])
    if not graph and common.on_host(src):  # gdp.runtime.extrema's kernel
        return _min_max_loc_on_host(src)
    if graph:
        import tensorflow as tf

        lo, hi, ilo, ihi = ops.min_max_loc(src)
        return lo, hi, tf.stack([ilo % width, ilo // width]), tf.stack([ihi % width, ihi // width])
    lo, hi, ilo, ihi = engine.run("minMaxLoc", _min_max_loc, [src], {}, outputs=4, free=True)
    if math.isnan(lo) or math.isnan(hi):
        # gdp's min and max propagate a NaN; OpenCV's skip NaNs in its own way (an all-NaN
        # image gives NaN and the location (-1, last row) in OpenCV 5): OpenCV's answer.
        raise common.NotAccelerated("the image holds NaN")
    ilo, ihi = int(ilo), int(ihi)
    return float(lo), float(hi), (ilo % width, ilo // width), (ihi % width, ihi // width)


# countNonZero's dtypes; as dtypes for its short path (exact: a byte-swapped array is none).
_NONZERO_NAMES = ("uint8", "int8", "uint16", "int16", "int32", "float32")
_NONZERO_DTYPES = frozenset(np.dtype(name) for name in _NONZERO_NAMES)


@common.accelerate("countNonZero")
def countNonZero(src):
    if (
        src.__class__ is np.ndarray
        and src.ndim == 2
        and src.dtype in _NONZERO_DTYPES
        and common.plain_image(src)
    ):
        # The common call, straight to the kernel (the general path's layers: 10-20 us after
        # a call that swept the caches, where a 1080p gray image's count takes 70).
        return count_non_zero(src)
    src, graph, reason = _stat_src("countNonZero", src, accept=_NONZERO_NAMES)
    _one_channel("countNonZero", src, "cn == 1")
    if reason:
        raise common.NotAccelerated(reason)
    if graph:
        return _count_non_zero(src)
    if common.on_host(src):  # gdp.runtime.nonzero's kernel
        return count_non_zero(src)
    return int(engine.run("countNonZero", _count_non_zero, [src], {}, free=True))


@common.accelerate("equalizeHist")
def equalizeHist(src, dst=None):
    src, graph = _src("equalizeHist", src)
    if _dtype(src) != "uint8" or common.channels(src) != 1:
        raise common.error("equalizeHist", "_src.type() == CV_8UC1")
    if graph:
        return _equalize_hist(src)
    if common.on_host(src) and src.size:
        table = _equalize_table(histogram(src))
        into = common.into(dst, src.shape, np.uint8, src, in_place=True)
        return common.finish(lookup(src, table, into), dst)
    params = {"scatter": common.tvm_target()}
    return engine.call("equalizeHist", _equalize_hist, [src], params, dst, free=True)
