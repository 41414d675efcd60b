"""Geometry: copyMakeBorder, flip, transpose, rotate, resize, warpAffine."""

from __future__ import annotations

import cv2 as _cv2
import numpy as np

from gdp.cv2 import common, engine
from gdp.ops import border as ops_border
from gdp.ops import geometry as ops_geometry


def _border_type(func: str, border_type: int, allowed=tuple(ops_border.BORDER_NAMES)) -> int:
    base = int(border_type) & ~_cv2.BORDER_ISOLATED
    if base not in allowed:
        raise common.error(func, f"Unknown/unsupported border type: {border_type}")
    return base


@common.accelerate("copyMakeBorder")
def copyMakeBorder(src, top, bottom, left, right, borderType, dst=None, value=None):
    src = common.image("copyMakeBorder", src)
    if min(top, bottom, left, right) < 0:
        raise common.error("copyMakeBorder", "top >= 0 && bottom >= 0 && left >= 0 && right >= 0")
    border = _border_type("copyMakeBorder", borderType)
    scalar = tuple(float(v) for v in np.ravel(value if value is not None else 0.0))
    params = dict(
        top=int(top),
        bottom=int(bottom),
        left=int(left),
        right=int(right),
        border=border,
        value=scalar,
    )
    return engine.call("copyMakeBorder", ops_border.pad, [src], params, dst)


def _flip(image, code: int):
    import tensorflow as tf

    axes = {0: [0], 1: [1]}.get(code, [0, 1])
    index = [slice(None)] * image.shape.rank
    for axis in axes:
        index[axis] = slice(None, None, -1)
    return tf.identity(image[tuple(index)])


@common.accelerate("flip")
def flip(src, flipCode, dst=None):
    src = common.image("flip", src)
    code = 0 if flipCode == 0 else (1 if flipCode > 0 else -1)
    return engine.call("flip", _flip, [src], {"code": code}, dst)


def _transpose(image):
    import tensorflow as tf

    perm = [1, 0] if image.shape.rank == 2 else [1, 0, 2]
    return tf.transpose(image, perm)


@common.accelerate("transpose")
def transpose(src, dst=None):
    src = common.image("transpose", src)
    return engine.call("transpose", _transpose, [src], {}, dst)


def _rotate(image, code: int):
    if code == _cv2.ROTATE_180:
        return _flip(image, -1)
    # 90 clockwise: transpose, then flip the columns; counterclockwise: flip the rows.
    return _flip(_transpose(image), 1 if code == _cv2.ROTATE_90_CLOCKWISE else 0)


@common.accelerate("rotate")
def rotate(src, rotateCode, dst=None):
    src = common.image("rotate", src)
    codes = (_cv2.ROTATE_90_CLOCKWISE, _cv2.ROTATE_180, _cv2.ROTATE_90_COUNTERCLOCKWISE)
    if rotateCode not in codes:
        raise common.error("rotate", f"unknown rotateCode {rotateCode}")
    return engine.call("rotate", _rotate, [src], {"code": int(rotateCode)}, dst)


_INTERPOLATIONS = {
    _cv2.INTER_NEAREST: ops_geometry.INTER_NEAREST,
    _cv2.INTER_LINEAR: ops_geometry.INTER_LINEAR,
    _cv2.INTER_CUBIC: ops_geometry.INTER_CUBIC,
    _cv2.INTER_AREA: ops_geometry.INTER_AREA,
}


@common.accelerate("resize")
def resize(src, dsize, dst=None, fx=0, fy=0, interpolation=_cv2.INTER_LINEAR):
    src = common.image("resize", src)
    h, w = int(src.shape[0]), int(src.shape[1])
    width, height = (int(dsize[0]), int(dsize[1])) if dsize is not None else (0, 0)
    if width > 0 and height > 0:
        scale_x, scale_y = 1.0 / (width / w), 1.0 / (height / h)
    else:
        if fx <= 0 or fy <= 0:
            raise common.error("resize", "inv_scale_x > 0 && inv_scale_y > 0")
        width, height = int(round(w * fx)), int(round(h * fy))
        scale_x, scale_y = 1.0 / fx, 1.0 / fy
        if width <= 0 or height <= 0:
            raise common.error("resize", "!dsize.empty()")
    method = _INTERPOLATIONS.get(int(interpolation))
    integer_scale = abs(scale_x - round(scale_x)) < 1e-12 and abs(scale_y - round(scale_y)) < 1e-12
    # OpenCV halves by exactly 2 with the area filter even when asked for bilinear (but not
    # for 2-channel images).
    halving = integer_scale and scale_x == 2 and scale_y == 2 and common.channels(src) != 2
    if method == ops_geometry.INTER_LINEAR and halving:
        method = ops_geometry.INTER_AREA
    dtype = common.dtype_of(src)
    if method is None or dtype not in (np.uint8, np.uint16, np.int16, np.float32, np.float64):
        raise common.NotAccelerated(
            "this interpolation or dtype is not accelerated (nearest, linear, cubic and area"
            " on uint8, uint16, int16, float32 and float64 are)"
        )
    if (width, height) == (w, h) and method != ops_geometry.INTER_AREA:
        return (
            common.finish(np.array(src, copy=True), dst) if not engine.is_graph_call(src) else src
        )
    params = dict(width=width, height=height, scale_x=scale_x, scale_y=scale_y, method=method)
    return engine.call("resize", ops_geometry.resize, [src], params, dst)


_WARP_INTERPOLATIONS = {
    _cv2.INTER_NEAREST: ops_geometry.INTER_NEAREST,
    _cv2.INTER_LINEAR: ops_geometry.INTER_LINEAR,
}
_WARP_BORDERS = (_cv2.BORDER_CONSTANT, _cv2.BORDER_REPLICATE)


def _affine_matrix(M) -> np.ndarray:
    m = np.asarray(M) if not common.is_tensor(M) else None
    if m is None or m.shape != (2, 3) or m.dtype not in (np.float32, np.float64):
        got = "a tensor" if m is None else f"{m.dtype} {m.shape}"
        raise common.error(
            "warpAffine",
            f"(M0.type() == CV_32F || M0.type() == CV_64F) && M0.rows == 2 && M0.cols == 3"
            f" (M must be a 2x3 float32/float64 array, got {got})",
        )
    return m.astype(np.float64)


@common.accelerate("warpAffine")
def warpAffine(
    src,
    M,
    dsize,
    dst=None,
    flags=_cv2.INTER_LINEAR,
    borderMode=_cv2.BORDER_CONSTANT,
    borderValue=None,
    hint=None,  # OpenCV's ALGO_HINT_*: gdp's result is its accurate one whatever the hint
):
    src = common.image("warpAffine", src)
    matrix = _affine_matrix(M)
    width, height = (int(dsize[0]), int(dsize[1])) if dsize is not None else (0, 0)
    if width <= 0 or height <= 0:  # OpenCV: an empty dsize means the source's size
        height, width = int(src.shape[0]), int(src.shape[1])
    method = _WARP_INTERPOLATIONS.get(int(flags) & _cv2.INTER_MAX)
    dtype = common.dtype_of(src)
    reason = None
    if method is None:
        reason = "this interpolation is not accelerated (INTER_NEAREST and INTER_LINEAR are)"
    elif int(borderMode) not in _WARP_BORDERS:
        reason = "this border is not accelerated (BORDER_CONSTANT and BORDER_REPLICATE are)"
    elif dtype not in (np.uint8, np.uint16, np.float32) or common.channels(src) == 2:
        reason = "this dtype or channel count is not accelerated (uint8/uint16/float32, C1/3/4)"
    if reason is not None:
        if engine.is_graph_call(src):
            raise common.error("warpAffine", reason + " (graph mode)")
        raise common.NotAccelerated(reason)
    if not int(flags) & _cv2.WARP_INVERSE_MAP:
        matrix = ops_geometry.invert_affine(matrix)
    value = tuple(float(v) for v in np.ravel(borderValue if borderValue is not None else 0.0))
    params = dict(
        matrix=tuple(float(v) for v in matrix.ravel()),
        width=width,
        height=height,
        method=method,
        border=int(borderMode),
        value=value,
    )
    return engine.call("warpAffine", ops_geometry.warp_affine, [src], params, dst)
