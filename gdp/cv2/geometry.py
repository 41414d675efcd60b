"""Geometry: copyMakeBorder, flip, transpose, rotate."""

from __future__ import annotations

import cv2 as _cv2
import numpy as np

from gdp.cv2 import common, engine
from gdp.ops import border as ops_border


def _border_type(func: str, border_type: int, allowed=tuple(ops_border.BORDER_NAMES)) -> int:
    base = int(border_type) & ~_cv2.BORDER_ISOLATED
    if base not in allowed:
        raise common.error(func, f"Unknown/unsupported border type: {border_type}")
    return base


@common.accelerate("copyMakeBorder")
def copyMakeBorder(src, top, bottom, left, right, borderType, dst=None, value=None):  # noqa: N802
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
    if engine.is_graph_call(src):
        return ops_border.pad(src, **params)
    return common.finish(engine.run("copyMakeBorder", ops_border.pad, [src], params), dst)


def _flip(image, code: int):
    import tensorflow as tf

    axes = {0: [0], 1: [1]}.get(code, [0, 1])
    index = [slice(None)] * image.shape.rank
    for axis in axes:
        index[axis] = slice(None, None, -1)
    return tf.identity(image[tuple(index)])


@common.accelerate("flip")
def flip(src, flipCode, dst=None):  # noqa: N803
    src = common.image("flip", src)
    code = 0 if flipCode == 0 else (1 if flipCode > 0 else -1)
    if engine.is_graph_call(src):
        return _flip(src, code)
    return common.finish(engine.run("flip", _flip, [src], {"code": code}), dst)


def _transpose(image):
    import tensorflow as tf

    perm = [1, 0] if image.shape.rank == 2 else [1, 0, 2]
    return tf.transpose(image, perm)


@common.accelerate("transpose")
def transpose(src, dst=None):
    src = common.image("transpose", src)
    if engine.is_graph_call(src):
        return _transpose(src)
    return common.finish(engine.run("transpose", _transpose, [src], {}), dst)


def _rotate(image, code: int):
    if code == _cv2.ROTATE_180:
        return _flip(image, -1)
    # 90 clockwise: transpose, then flip the columns; counterclockwise: flip the rows.
    return _flip(_transpose(image), 1 if code == _cv2.ROTATE_90_CLOCKWISE else 0)


@common.accelerate("rotate")
def rotate(src, rotateCode, dst=None):  # noqa: N803
    src = common.image("rotate", src)
    codes = (_cv2.ROTATE_90_CLOCKWISE, _cv2.ROTATE_180, _cv2.ROTATE_90_COUNTERCLOCKWISE)
    if rotateCode not in codes:
        raise common.error("rotate", f"unknown rotateCode {rotateCode}")
    if engine.is_graph_call(src):
        return _rotate(src, int(rotateCode))
    return common.finish(engine.run("rotate", _rotate, [src], {"code": int(rotateCode)}), dst)
