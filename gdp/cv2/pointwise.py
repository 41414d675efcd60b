"""Pointwise operations and statistics: threshold, convertScaleAbs, addWeighted, LUT, normalize,
meanStdDev, minMaxLoc, mean, sumElems, countNonZero, equalizeHist.

In graph mode (TF tensors), statistics come back as tensors: mean/sumElems as a (4,) float64
tensor, minMaxLoc as (min, max, minLoc, maxLoc) with the locations as (x, y) int32 tensors.
"""

from __future__ import annotations

import math

import cv2 as _cv2
import numpy as np

from gdp.cv2 import common, engine
from gdp.ops import pointwise as ops

_DEPTHS = {_cv2.CV_8U: "uint8", _cv2.CV_32F: "float32"}


def _src(func: str, src, name: str = "src"):
    """(src, graph): the validated array or TF tensor, and whether this is graph mode."""
    return common.image(func, src, name), engine.is_graph_call(src)


def _dtype(src) -> str:
    return common.dtype_of(src).name


def _one_channel(func: str, src, message: str = "src.channels() == 1") -> None:
    if common.channels(src) != 1:
        raise common.error(func, message)


def _tf_dtype(name: str):
    import tensorflow as tf

    return tf.as_dtype(name)


# --- threshold -------------------------------------------------------------------------------


def _threshold(image, thresh, maxval, kind):
    return ops.threshold(image, thresh, maxval, kind)


def _threshold_otsu(image, maxval, kind):
    return ops.threshold_otsu(image, maxval, kind)


@common.accelerate("threshold")
def threshold(src, thresh, maxval, type, dst=None):
    src, graph = _src("threshold", src)
    kind = int(type) & _cv2.THRESH_MASK
    automatic = int(type) & ~_cv2.THRESH_MASK
    if kind > _cv2.THRESH_TOZERO_INV or automatic not in (0, _cv2.THRESH_OTSU):
        if automatic == _cv2.THRESH_TRIANGLE and not graph and kind <= 4:
            raise common.NotAccelerated("THRESH_TRIANGLE is not accelerated")
        raise common.error("threshold", f"Unknown threshold type: {type}")
    dtype = _dtype(src)
    if automatic == _cv2.THRESH_OTSU and (dtype != "uint8" or common.channels(src) != 1):
        raise common.error("threshold", "src.type() == CV_8UC1")
    if dtype == "uint8":
        ithresh = math.floor(thresh)
        imaxval = int(np.rint(maxval))
        imaxval = min(max(imaxval, 0), 255)
        t, m, retval = max(min(ithresh, 255), -1), imaxval, float(ithresh)
    elif dtype == "float32":
        t, m, retval = float(np.float32(thresh)), float(np.float32(maxval)), float(thresh)
    else:
        if graph:
            raise common.error("threshold", f"{dtype} is not accelerated (graph mode)")
        raise common.NotAccelerated(f"{dtype} is not accelerated")
    if automatic == _cv2.THRESH_OTSU:
        if kind == _cv2.THRESH_TRUNC:  # the threshold becomes maxval's role: not accelerated
            reason = "THRESH_OTSU with THRESH_TRUNC is not accelerated"
            if graph:
                raise common.error("threshold", reason)
            raise common.NotAccelerated(reason)
        params = {"maxval": m, "kind": kind}
        if graph:
            return _threshold_otsu(src, **params)
        value, out = engine.run("threshold.otsu", _threshold_otsu, [src], params, outputs=2)
        return float(value), common.finish(out, dst)
    params = {"thresh": t, "maxval": m, "kind": kind}
    return retval, engine.call("threshold", _threshold, [src], params, dst)


# --- arithmetic ------------------------------------------------------------------------------


@common.accelerate("convertScaleAbs")
def convertScaleAbs(src, dst=None, alpha=1.0, beta=0.0):
    src, graph = _src("convertScaleAbs", src)
    params = {"alpha": float(alpha), "beta": float(beta)}
    if _dtype(src) not in ("uint8", "float32"):
        if graph:
            raise common.error("convertScaleAbs", f"{_dtype(src)} is not accelerated")
        raise common.NotAccelerated(f"{_dtype(src)} is not accelerated")
    return engine.call("convertScaleAbs", ops.convert_scale_abs, [src], params, dst)


def _add_weighted(a, b, alpha, beta, gamma, dtype):
    return ops.add_weighted(a, alpha, b, beta, gamma, _tf_dtype(dtype))


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
    params = {
        "alpha": float(alpha),
        "beta": float(beta),
        "gamma": float(gamma),
        "dtype": out_dtype,
    }
    return engine.call("addWeighted", _add_weighted, [src1, src2], params, dst)


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
    import tensorflow as tf

    shape = [256] if lutcn == 1 else [256, cn]
    if graph:
        return ops.lut(src, tf.reshape(tf.convert_to_tensor(table), shape))
    table = np.ascontiguousarray(table.reshape(shape))
    return common.finish(engine.run("LUT", ops.lut, [src, table], {}), dst)


def _normalize(image, alpha, beta, norm_type, dtype):
    return ops.normalize(image, alpha, beta, norm_type, _tf_dtype(dtype))


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
    params = {
        "alpha": float(alpha),
        "beta": float(beta),
        "norm_type": int(norm_type),
        "dtype": out_dtype,
    }
    return engine.call("normalize", _normalize, [src], params, dst)


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
    m, s = engine.run("meanStdDev", ops.mean_std, [src], {}, outputs=2)
    return common.finish(np.asarray(m), mean), common.finish(np.asarray(s), stddev)


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
    return _four(engine.run("mean", ops.mean_channels, [src], {}))


@common.accelerate("sumElems")
def sumElems(src):
    src, graph, reason = _stat_src("sumElems", src)
    if reason:
        raise common.NotAccelerated(reason)
    if graph:
        return _four_tensor(ops.sum_channels(src))
    return _four(engine.run("sumElems", ops.sum_channels, [src], {}))


@common.accelerate("minMaxLoc")
def minMaxLoc(src, mask=None):
    src, graph, reason = _stat_src("minMaxLoc", src, mask)
    _one_channel("minMaxLoc", src, "(cn == 1 || (_mask.empty() && !minIdx && !maxIdx))")
    if reason:
        raise common.NotAccelerated(reason)
    width = int(src.shape[1])
    if graph:
        import tensorflow as tf

        lo, hi, ilo, ihi = ops.min_max_loc(src)
        return lo, hi, tf.stack([ilo % width, ilo // width]), tf.stack([ihi % width, ihi // width])
    lo, hi, ilo, ihi = engine.run("minMaxLoc", ops.min_max_loc, [src], {}, outputs=4)
    ilo, ihi = int(ilo), int(ihi)
    return float(lo), float(hi), (ilo % width, ilo // width), (ihi % width, ihi // width)


@common.accelerate("countNonZero")
def countNonZero(src):
    src, graph, reason = _stat_src(
        "countNonZero", src, accept=("uint8", "int8", "uint16", "int16", "int32", "float32")
    )
    _one_channel("countNonZero", src, "cn == 1")
    if reason:
        raise common.NotAccelerated(reason)
    if graph:
        return ops.count_non_zero(src)
    return int(engine.run("countNonZero", ops.count_non_zero, [src], {}))


@common.accelerate("equalizeHist")
def equalizeHist(src, dst=None):
    src, graph = _src("equalizeHist", src)
    if _dtype(src) != "uint8" or common.channels(src) != 1:
        raise common.error("equalizeHist", "_src.type() == CV_8UC1")
    return engine.call("equalizeHist", ops.equalize_hist, [src], {}, dst)
