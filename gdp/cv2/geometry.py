"""Geometry: copyMakeBorder, flip, transpose, rotate, resize, warpAffine."""

from __future__ import annotations

import functools
import math

import cv2 as _cv2
import numpy as np

from gdp.cv2 import common, engine
from gdp.errors import InputError

ops_border = common.LazyModule("gdp.ops.border")
ops_geometry = common.LazyModule("gdp.ops.geometry")
# NumPy only (no TensorFlow): the tables of a compiled call
resize_tables = common.LazyModule("gdp.ops.resize_tables")
ops_scalar = common.LazyModule("gdp.ops.scalar")
rt_area = common.LazyModule("gdp.runtime.area")
rt_halve = common.LazyModule("gdp.runtime.halve")
rt_flip = common.LazyModule("gdp.runtime.flip")
rt_nearest = common.LazyModule("gdp.runtime.nearest")
rt_cubic = common.LazyModule("gdp.runtime.cubic")
rt_pad = common.LazyModule("gdp.runtime.pad")
rt_resize = common.LazyModule("gdp.runtime.resize")
rt_transpose = common.LazyModule("gdp.runtime.transpose")
rt_warp = common.LazyModule("gdp.runtime.warp")

# gdp.ops's codes are OpenCV's (not read from gdp.ops: that would import TensorFlow)
_BORDERS = (
    _cv2.BORDER_CONSTANT,
    _cv2.BORDER_REPLICATE,
    _cv2.BORDER_REFLECT,
    _cv2.BORDER_WRAP,
    _cv2.BORDER_REFLECT_101,
)
INTER_NEAREST, INTER_LINEAR, INTER_CUBIC, INTER_AREA = (
    _cv2.INTER_NEAREST,
    _cv2.INTER_LINEAR,
    _cv2.INTER_CUBIC,
    _cv2.INTER_AREA,
)


def _border_type(func: str, border_type: int, allowed=_BORDERS) -> int:
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
    scalar = (0.0,) if value is None else tuple(float(v) for v in np.ravel(value))
    params = dict(
        top=int(top),
        bottom=int(bottom),
        left=int(left),
        right=int(right),
        border=border,
        value=scalar,
    )
    h, w = src.shape[:2]  # None in a graph of free size (a chain): no call of its own there
    if src.dtype == common.UINT8 and not engine.is_graph_call(src):
        sides = (params["top"], params["bottom"], params["left"], params["right"])
        out_shape = (h + sides[0] + sides[1], w + sides[2] + sides[3], *src.shape[2:])
        if common.on_host(src, out_bytes=math.prod(out_shape)):  # gdp.runtime.pad's kernel
            fill = ops_scalar.saturated_values(scalar, common.channels(src), common.UINT8)
            into = common.into(dst, out_shape, np.uint8, src)
            result = rt_pad.pad(src, *sides, border, fill, into)
            return common.finish(result, dst)
    # One program for every image larger than its borders (gdp.ops.border.pad_any_size).
    free = h is not None and w is not None and h > max(top, bottom) and w > max(left, right)
    return engine.call("copyMakeBorder", _pad, [src], params, dst, free=free)


def _pad(image, top, bottom, left, right, border, value):
    return ops_border.pad(image, top, bottom, left, right, border, value)


def _flip(image, code: int):
    import tensorflow as tf

    axes = {0: [0], 1: [1]}.get(code, [0, 1])
    index = [slice(None)] * image.shape.rank
    for axis in axes:
        index[axis] = slice(None, None, -1)
    return tf.identity(image[tuple(index)])


@common.accelerate("flip")
def flip(src, flipCode, dst=None):
    if dst is None and flipCode.__class__ is int and _moves_plainly(src):
        # the common call, straight to the kernel (the general path's layers: 5-15 us)
        return rt_flip.flip(src, 0 if flipCode == 0 else (1 if flipCode > 0 else -1))
    src = common.image("flip", src)
    code = 0 if flipCode == 0 else (1 if flipCode > 0 else -1)
    if _flips_on_host(src):
        return _flip_on_host(src, code, dst)
    return engine.call("flip", _flip, [src], {"code": code}, dst, free=True)


def _moves_plainly(src) -> bool:
    """Whether flip's, transpose's and rotate's common call goes straight to its kernel: a
    plain image (common.plain_image) in native byte order that the kernels take (flip's
    `takes` is transpose's)."""
    return (
        src.__class__ is np.ndarray
        and common.plain_image(src)
        and src.dtype.isnative
        and rt_transpose.takes(src)
    )


def _flips_on_host(src) -> bool:
    """Whether a flip (or a rotation by 180 degrees) runs gdp.runtime.flip's kernel."""
    return not engine.is_graph_call(src) and common.on_host(src) and rt_flip.takes(src)


def _flip_on_host(src: np.ndarray, code: int, dst) -> np.ndarray:
    into = common.into(dst, src.shape, src.dtype, src)
    return common.finish(rt_flip.flip(src, code, into), dst)


def _transpose(image):
    import tensorflow as tf

    perm = [1, 0] if image.shape.rank == 2 else [1, 0, 2]
    return tf.transpose(image, perm)


@common.accelerate("transpose")
def transpose(src, dst=None):
    if dst is None and _moves_plainly(src):  # the common call, straight to the kernel
        return rt_transpose.move(src, "transpose")
    src = common.image("transpose", src)
    if _moves_on_host(src):
        return _move(src, "transpose", dst)
    return engine.call("transpose", _transpose, [src], {}, dst, free=True)


def _moves_on_host(src) -> bool:
    """Whether a transpose or 90-degree rotation runs gdp.runtime.transpose's kernel."""
    return not engine.is_graph_call(src) and common.on_host(src) and rt_transpose.takes(src)


def _move(src: np.ndarray, kind: str, dst) -> np.ndarray:
    h, w = src.shape[:2]
    into = common.into(dst, (w, h, *src.shape[2:]), src.dtype, src)
    return common.finish(rt_transpose.move(src, kind, into), dst)


def _rotate(image, code: int):
    if code == _cv2.ROTATE_180:
        return _flip(image, -1)
    # 90 clockwise: transpose, then flip the columns; counterclockwise: flip the rows.
    return _flip(_transpose(image), 1 if code == _cv2.ROTATE_90_CLOCKWISE else 0)


_ROTATIONS = {
    _cv2.ROTATE_90_CLOCKWISE: "clockwise",
    _cv2.ROTATE_180: None,  # a flip of both axes
    _cv2.ROTATE_90_COUNTERCLOCKWISE: "counterclockwise",
}


@common.accelerate("rotate")
def rotate(src, rotateCode, dst=None):
    if (
        dst is None
        and rotateCode.__class__ is int
        and rotateCode in _ROTATIONS
        and _moves_plainly(src)
    ):  # the common call, straight to the kernel
        kind = _ROTATIONS[rotateCode]
        return rt_flip.flip(src, -1) if kind is None else rt_transpose.move(src, kind)
    src = common.image("rotate", src)
    codes = (_cv2.ROTATE_90_CLOCKWISE, _cv2.ROTATE_180, _cv2.ROTATE_90_COUNTERCLOCKWISE)
    if rotateCode not in codes:
        raise common.error("rotate", f"unknown rotateCode {rotateCode}")
    if rotateCode == _cv2.ROTATE_180 and _flips_on_host(src):
        return _flip_on_host(src, -1, dst)
    if rotateCode != _cv2.ROTATE_180 and _moves_on_host(src):
        kind = "clockwise" if rotateCode == _cv2.ROTATE_90_CLOCKWISE else "counterclockwise"
        return _move(src, kind, dst)
    return engine.call("rotate", _rotate, [src], {"code": int(rotateCode)}, dst, free=True)


_INTERPOLATIONS = {
    _cv2.INTER_NEAREST: INTER_NEAREST,
    _cv2.INTER_LINEAR: INTER_LINEAR,
    _cv2.INTER_CUBIC: INTER_CUBIC,
    _cv2.INTER_AREA: INTER_AREA,
}


@common.accelerate("resize")
def resize(src, dsize, dst=None, fx=0, fy=0, interpolation=_cv2.INTER_LINEAR):
    if (
        dst is None
        and interpolation.__class__ is int
        and (
            interpolation == _cv2.INTER_LINEAR
            or interpolation == _cv2.INTER_AREA
            or interpolation == _cv2.INTER_NEAREST
        )
        and src.__class__ is np.ndarray
        and src.dtype is common.UINT8
        and dsize.__class__ is tuple
    ):
        # The common call (a uint8 image to a given size, bilinear, or by area to half, no
        # dst), straight to the kernel: the general path's layers cost 12 us a call (a 224x224
        # gray output's kernel takes 40).
        fast = _fast_resize(src, dsize, interpolation)
        if fast is not None:
            return fast
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
    if method == INTER_LINEAR and halving:
        method = INTER_AREA
    dtype = common.dtype_of(src)
    if method is None or dtype not in (np.uint8, np.uint16, np.int16, np.float32, np.float64):
        raise common.NotAccelerated(
            "this interpolation or dtype is not accelerated (nearest, linear, cubic and area"
            " on uint8, uint16, int16, float32 and float64 are)"
        )
    ipp = ipp_resizes(method, dtype, common.channels(src))
    if (width, height) == (w, h) and method != INTER_AREA:
        return (
            common.finish(np.array(src, copy=True), dst) if not engine.is_graph_call(src) else src
        )
    params = dict(
        width=width, height=height, scale_x=scale_x, scale_y=scale_y, method=method, ipp=ipp
    )
    if engine.is_graph_call(src):
        return _resize(src, **params)
    if method == INTER_LINEAR and dtype == np.uint8 and w == 1:
        # OpenCV's bit-exact 8-bit path differs from the program's by 1 LSB on a one-pixel-wide
        # source (a 45x1 image to 20x31): OpenCV's own answer, not gdp's near one.
        raise common.NotAccelerated("a uint8 LINEAR resize of a one-pixel-wide image")
    # The program takes and returns the image with its pixels' channels flattened into the row,
    # (H, W*C) (free reshapes of the arrays): its column pass then gathers elements, with no
    # channel arithmetic in its indices. OpenCV's interpolation tables (which source pixels and
    # weights each output pixel takes) follow from both sizes: they are run-time inputs of any
    # length, so one program per structure (interpolation, dtype, channels, tap counts, pass
    # order) serves every source and output size.
    channels = common.channels(src)
    out_bytes = width * height * src.itemsize * channels
    if method == INTER_NEAREST and common.on_host(src, out_bytes=out_bytes):
        plan = _nearest_plan(src.shape, src.dtype, width, height, scale_x, scale_y)
        return common.finish(rt_nearest.resize_nearest(src, plan), dst)
    if (
        method == INTER_LINEAR
        and dtype == np.uint8
        and w >= 2
        and common.on_host(src, out_bytes=out_bytes)
    ):
        plan = linear_plan(h, w, channels, width, height, scale_x, scale_y)
        into = common.into(dst, (height, width, *src.shape[2:]), np.uint8, src)
        return common.finish(rt_resize.resize(src, plan, into), dst)
    if (
        method == INTER_AREA
        and dtype == np.uint8
        and halving
        and rt_halve.takes(h, w, channels, width, height)
        and common.on_host(src, out_bytes=out_bytes)
    ):
        into = common.into(dst, (height, width, *src.shape[2:]), np.uint8, src)
        return common.finish(rt_halve.resize(src, width, height, into), dst)
    if method == INTER_CUBIC and dtype == np.uint8 and common.on_host(src, out_bytes=out_bytes):
        plan = cubic_plan(h, w, channels, width, height, scale_x, scale_y, ipp)
        if plan.runs:  # gdp.runtime.cubic's kernel takes this resize on this CPU
            into = common.into(dst, (height, width, *src.shape[2:]), np.uint8, src)
            return common.finish(rt_cubic.resize(src, plan, into), dst)
    if (
        method == INTER_AREA
        and dtype == np.uint8
        and scale_x >= 1
        and scale_y >= 1
        and not integer_scale
        and common.on_host(src, out_bytes=out_bytes)
    ):
        plan = area_plan(h, w, channels, width, height, scale_x, scale_y)
        if plan is not None:  # gdp.runtime.area's kernel takes this shrink
            into = common.into(dst, (height, width, *src.shape[2:]), np.uint8, src)
            return common.finish(rt_area.resize(src, plan, into), dst)
    flat = np.ascontiguousarray(src).reshape(h, w * channels)
    # A size called often gets a program of its own (engine.sized_program), compiled in the
    # background: its tables constants that TVM folds into one kernel, 2-6x faster than the
    # generic program's run-time tables.

    def generic():
        structure, tables = resize_plan(
            h, w, channels, width, height, scale_x, scale_y, method, np.dtype(dtype).name, ipp
        )
        names = tuple(sorted(tables))
        arrays = [flat, *(tables[n] for n in names)]
        program = engine.program(
            "resize",
            _resize_by_plan,
            arrays,
            dict(structure=structure, names=names),
            free=True,
            specialize="never",  # the sized program is the specialisation
        )
        return engine.execute(program, arrays)

    sized = engine.sized_program(
        "resize.sized", _resize_sized, [flat], dict(params, channels=channels), generic=generic
    )
    out = engine.execute(sized, [flat]) if sized is not None else generic()
    shape = (height, width) if src.ndim == 2 else (height, width, channels)
    return common.finish(out.reshape(shape), dst)


def _fast_resize(src: np.ndarray, dsize: tuple, interpolation: int) -> np.ndarray | None:
    """resize's common call on the nearest, halving or linear kernel, or None where the general path
    decides (another size of dsize, AREA but to half, 2 channels halved, a narrow or
    non-contiguous image, IPP's inexact resizes asked for, another target)."""
    if len(dsize) != 2 or dsize[0].__class__ is not int or dsize[1].__class__ is not int:
        return None
    width, height = dsize
    h, w = src.shape[:2]
    channels = src.shape[2] if src.ndim == 3 else 1
    if not (
        width > 0
        and height > 0
        and (width, height) != (w, h)
        and common.plain_image(src, out_bytes=width * height * channels)
        and not _cv2.ipp.useIPP_NotExact()
    ):
        return None
    if interpolation == _cv2.INTER_NEAREST:  # as the general path's
        plan = _nearest_plan(
            src.shape, src.dtype, width, height, 1.0 / (width / w), 1.0 / (height / h)
        )
        return rt_nearest.resize_nearest(src, plan)
    if (2 * width, 2 * height) == (w, h):  # OpenCV's area path, for LINEAR too
        if rt_halve.takes(h, w, channels, width, height):
            return rt_halve.resize(src, width, height)
        return None
    if interpolation != _cv2.INTER_LINEAR or w < 2:
        return None
    # OpenCV's scales, as the general path computes them
    plan = linear_plan(h, w, channels, width, height, 1.0 / (width / w), 1.0 / (height / h))
    return rt_resize.resize(src, plan)


@functools.lru_cache(maxsize=64)
def linear_plan(h, w, channels, width, height, scale_x, scale_y, cut=None):
    """gdp.runtime.resize's plan of INTER_LINEAR on uint8 (OpenCV's tables), kept for the sizes
    met last (shared: never written)."""
    return rt_resize.Plan(h, w, channels, width, height, scale_x, scale_y, cut)


@functools.lru_cache(maxsize=64)
def cubic_plan(h, w, channels, width, height, scale_x, scale_y, ipp):
    """gdp.runtime.cubic's plan of INTER_CUBIC on uint8 (gdp's program's tables), kept for the
    sizes met last (shared: never written)."""
    return rt_cubic.Plan(h, w, channels, width, height, scale_x, scale_y, ipp)


@functools.lru_cache(maxsize=64)
def area_plan(h, w, channels, width, height, scale_x, scale_y):
    """gdp.runtime.area's plan of an INTER_AREA shrink of uint8 by a factor not an integer on
    both axes (OpenCV's tables), kept for the sizes met last; None where the kernel does not
    take it (more taps a pixel than its widest window, rows narrower than their window)."""
    try:
        return rt_area.Plan(h, w, channels, width, height, scale_x, scale_y)
    except InputError:
        return None


@functools.lru_cache(maxsize=64)
def _nearest_plan(shape, dtype, width, height, scale_x, scale_y):
    """gdp.runtime.nearest's plan of INTER_NEAREST: the source row of each output row and
    column of each output column (gdp.ops.resize_tables.axis_taps), kept for the sizes met
    last."""
    h, w = shape[:2]
    rows = resize_tables.axis_taps(h, height, scale_y, INTER_NEAREST)[0][:, 0]
    cols = resize_tables.axis_taps(w, width, scale_x, INTER_NEAREST)[0][:, 0]
    return rt_nearest.plan(shape, dtype, rows, cols)


@functools.lru_cache(maxsize=64)
def resize_plan(*args) -> tuple[dict, dict]:
    """gdp.ops.resize_tables.plan (NumPy only: no TensorFlow on a compiled call), kept for the
    sizes met last: a stream of one size computes its tables once. The arrays are shared:
    never written."""
    return resize_tables.plan(*args)


def _resize(image, width, height, scale_x, scale_y, method, ipp):
    """graph mode: an HW or HWC tensor of static size, its tables constants."""
    return ops_geometry.resize(image, width, height, scale_x, scale_y, method, ipp)


def _resize_sized(image, width, height, scale_x, scale_y, method, ipp, channels):
    """An (H, W*channels) image of static size, its tables constants."""
    return ops_geometry.resize_flat(image, channels, width, height, scale_x, scale_y, method, ipp)


# cv::resize hands these to Intel IPP (OpenCV's ipp_hal_resize, in builds with IPP, as pip's),
# whose LINEAR and CUBIC compute the source position in double where OpenCV's own code rounds it
# to float: LINEAR but on 8-bit, CUBIC but on float64, of 1, 3 or 4 channels. Measured on
# OpenCV 5.0.0: float32 images of 1, 3 and 4 channels match IPP's positions, 2-channel ones and
# any image with cv2.ipp.setUseIPP(False) OpenCV's own.
_IPP_DTYPES = {
    INTER_LINEAR: (np.uint16, np.int16, np.float32, np.float64),
    INTER_CUBIC: (np.uint8, np.uint16, np.int16, np.float32),
}


def ipp_resizes(method: int, dtype, channels: int) -> bool:
    """Whether cv::resize runs this call through Intel IPP (its results are IPP's). Asked of
    OpenCV on each call: cv2.ipp.setUseIPP changes it at run time. Where OpenCV is told to use
    IPP's inexact resizes too (cv2.ipp.setUseIPP_NotExact: NEAREST, AREA and 8-bit LINEAR),
    gdp does not reproduce them, and the call is OpenCV's."""
    if not _cv2.ipp.useIPP():
        return False
    if _cv2.ipp.useIPP_NotExact():
        raise common.NotAccelerated("IPP's inexact resizes (cv2.ipp.setUseIPP_NotExact)")
    return channels in (1, 3, 4) and dtype in _IPP_DTYPES.get(method, ())


def _resize_by_plan(image, *tables, structure, names):
    by_name = dict(zip(names, tables, strict=True))
    return ops_geometry.resize_by_plan(image, structure, by_name)


_WARP_INTERPOLATIONS = {_cv2.INTER_NEAREST: INTER_NEAREST, _cv2.INTER_LINEAR: INTER_LINEAR}
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
        matrix = _invert_affine(matrix)
    value = tuple(float(v) for v in np.ravel(borderValue if borderValue is not None else 0.0))
    if _runs_warp_kernel(src, method, width, height):
        out = _warp_kernel(src, matrix, width, height, method, int(borderMode), value)
        return common.finish(out, dst)
    # The matrix is a run-time input: one program per output size, interpolation, border
    # (and its value), dtype and channel count serves every matrix and source size.
    params = dict(width=width, height=height, method=method, border=int(borderMode), value=value)
    return engine.call(
        "warpAffine", _warp_affine, [src], params, dst, _warp_values(matrix, height), True
    )


def _runs_warp_kernel(src, method: int, width: int, height: int) -> bool:
    """Whether an eager call runs gdp.runtime.warp's hand kernel: on arrays of 1, 3 or 4
    channels (at least 2 wide for LINEAR, whose kernel fetches pixel pairs), on the cpu target
    (other targets run the program on their chip)."""
    if engine.is_graph_call(src):
        return False
    out_bytes = width * height * src.itemsize * common.channels(src)
    return (
        common.channels(src) in (1, 3, 4)
        and (method == INTER_NEAREST or src.shape[1] >= 2)
        and common.on_host(src, out_bytes=out_bytes)
    )


def _warp_kernel(src, matrix, width, height, method, border, value) -> np.ndarray:
    """The warp by gdp.runtime.warp (the arithmetic of _warp_affine), into a new array."""
    values = _warp_values(matrix, height)
    coefficients = np.array([*values["mx"], *values["my"]], np.float32)
    channels = common.channels(src)
    border_value = np.array(ops_scalar.saturated_values(value, channels, src.dtype), np.float32)
    out = np.empty((height, width, *src.shape[2:]), src.dtype)
    kernel_method = rt_warp.NEAREST if method == INTER_NEAREST else rt_warp.LINEAR
    kernel_border = rt_warp.CONSTANT if border == _cv2.BORDER_CONSTANT else rt_warp.REPLICATE
    return rt_warp.warp_affine(
        src,
        out,
        coefficients,
        values["rows_x"],
        values["rows_y"],
        border_value,
        kernel_method,
        kernel_border,
    )


def _warp_values(matrix: np.ndarray, height: int) -> dict:
    """The run-time inputs of a warp: per coordinate, the float32 x coefficient and constant
    and each output row's float32 product y*M[1] (computed here in float32 as OpenCV and
    gdp.ops.geometry do: a float32 rounding inside the program would be lost, see engine)."""
    f32 = np.float32
    m = np.asarray(matrix, np.float64).reshape(2, 3)
    rows = np.arange(height, dtype=np.float32)
    out = {}
    for axis, name in ((0, "x"), (1, "y")):
        out[f"m{name}"] = (float(f32(m[axis, 0])), float(f32(m[axis, 2])))
        out[f"rows_{name}"] = (rows * f32(m[axis, 1])).astype(np.float64)
    return out


def _invert_affine(matrix: np.ndarray) -> np.ndarray:
    """cv::invertAffineTransform, in double as OpenCV does it (a singular matrix gives zeros);
    gdp.ops.geometry.invert_affine's arithmetic, here so that a call on a compiled program
    imports no TensorFlow."""
    m = np.asarray(matrix, np.float64).reshape(2, 3)
    det = m[0, 0] * m[1, 1] - m[0, 1] * m[1, 0]
    d = 1.0 / det if det != 0 else 0.0
    a11, a22, a12, a21 = m[1, 1] * d, m[0, 0] * d, -m[0, 1] * d, -m[1, 0] * d
    b1 = -a11 * m[0, 2] - a12 * m[1, 2]
    b2 = -a21 * m[0, 2] - a22 * m[1, 2]
    return np.array([[a11, a12, b1], [a21, a22, b2]])


def _source_coordinate(coefficients, row_products, width: int, block: int):
    """gdp.ops.geometry._source_coordinate with the matrix given at run time: the
    (height, width) float32 coordinate m_x*x + m_y*y + m_c with OpenCV's roundings, from
    `coefficients` (m_x, m_c as float32 values) and `row_products` (float32 y*m_y per row)."""
    import tensorflow as tf

    mx, mc = coefficients[0], tf.cast(coefficients[1], tf.float32)
    products = tf.cast(row_products, tf.float32)[:, None]
    cols = tf.constant(np.arange(width, dtype=np.float64)[None, :])
    # x*m_x is exact in float64, so the sum rounds once (an fma's result)
    vector = tf.cast(mx * cols + tf.cast(products + mc, tf.float64), tf.float32)
    vectorised = (width // block) * block if block else 0
    if vectorised == width:
        return vector
    scalar = tf.cast(mx * cols + tf.cast(products, tf.float64), tf.float32) + mc
    return tf.where(tf.cast(cols, tf.float32) < vectorised, vector, scalar)


def _warp_affine(image, width, height, method, border, value, mx, my, rows_x, rows_y):
    """gdp.ops.geometry.warp_affine (WARP_INVERSE_MAP semantics, OpenCV 4.11+'s arithmetic)
    for a source of any size (read from the run's shape) and a matrix given at run time (see
    _warp_values)."""
    import tensorflow as tf

    block = ops_geometry.WARP_VECTOR_BLOCK
    shape = tf.shape(image)
    rows, cols = shape[0], shape[1]
    sx = _source_coordinate(mx, rows_x, width, block)
    sy = _source_coordinate(my, rows_y, width, block)
    flat = tf.reshape(image, [-1, *image.shape[2:]])
    outside = ops_geometry.border_value(value, image) if border == _cv2.BORDER_CONSTANT else None
    # Clamp in float first: beyond one pixel outside, every neighbour is the border anyway,
    # and the clamp keeps the int32 conversion in range for any matrix.
    sx = tf.clip_by_value(sx, -2.0, tf.cast(cols, tf.float32) + 1.0)
    sy = tf.clip_by_value(sy, -2.0, tf.cast(rows, tf.float32) + 1.0)

    def fetch(iy, ix):
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

    def pixel(dy: int, dx: int):
        return tf.cast(fetch(iy + dy, ix + dx), tf.float32)

    p00, p01, p10, p11 = pixel(0, 0), pixel(0, 1), pixel(1, 0), pixel(1, 1)
    v0 = p00 + fx * (p01 - p00)
    v1 = p10 + fx * (p11 - p10)
    out = v0 + fy * (v1 - v0)
    if image.dtype == tf.float32:
        return out
    out = tf.clip_by_value(tf.round(out), image.dtype.min, image.dtype.max)
    return tf.cast(out, image.dtype)
