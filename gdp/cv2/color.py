"""Colour conversions: cvtColor."""

from __future__ import annotations

import functools

import cv2 as _cv2
import numpy as np

from gdp.cv2 import common, engine

ops_color = common.LazyModule("gdp.ops.color")
rt_color = common.LazyModule("gdp.runtime.color")

_U8, _F32 = ("uint8",), ("uint8", "float32")


def _table() -> dict[int, tuple]:
    """code -> (op name in gdp.ops.color, params, source channel counts, output channels,
    dtypes accelerated)."""
    c = _cv2
    t: dict[int, tuple] = {}
    for code, swap, dcn in [
        (c.COLOR_BGR2RGB, True, 3),
        (c.COLOR_BGRA2RGBA, True, 4),
        (c.COLOR_BGRA2BGR, False, 3),
        (c.COLOR_BGR2BGRA, False, 4),
        (c.COLOR_BGR2RGBA, True, 4),
        (c.COLOR_RGBA2BGR, True, 3),
    ]:
        t[code] = ("reorder", {"swap": swap, "dcn": dcn}, (3, 4), dcn, _F32)
    for code, dcn in [(c.COLOR_GRAY2BGR, 3), (c.COLOR_GRAY2BGRA, 4)]:
        t[code] = ("gray_to_color", {"dcn": dcn}, (1,), dcn, _F32)
    for bgr, rgb, op, dcn, dtypes in [
        (c.COLOR_BGR2GRAY, c.COLOR_RGB2GRAY, "to_gray", 1, _F32),
        (c.COLOR_BGR2YCrCb, c.COLOR_RGB2YCrCb, "to_ycrcb", 3, _F32),
        (c.COLOR_BGR2HSV, c.COLOR_RGB2HSV, "to_hsv", 3, _F32),
        (c.COLOR_BGR2Lab, c.COLOR_RGB2Lab, "to_lab", 3, _F32),
    ]:
        t[bgr] = (op, {"bidx": 0}, (3, 4), dcn, dtypes)
        t[rgb] = (op, {"bidx": 2}, (3, 4), dcn, dtypes)
    t[c.COLOR_BGRA2GRAY] = ("to_gray", {"bidx": 0}, (3, 4), 1, _F32)
    t[c.COLOR_RGBA2GRAY] = ("to_gray", {"bidx": 2}, (3, 4), 1, _F32)
    t[c.COLOR_HSV2BGR] = ("from_hsv", {"bidx": 0}, (3,), 3, _F32)
    t[c.COLOR_HSV2RGB] = ("from_hsv", {"bidx": 2}, (3,), 3, _F32)
    for code, bidx, u_first in [
        (c.COLOR_YUV2BGR_NV12, 0, True),
        (c.COLOR_YUV2RGB_NV12, 2, True),
        (c.COLOR_YUV2BGR_NV21, 0, False),
        (c.COLOR_YUV2RGB_NV21, 2, False),
    ]:
        t[code] = ("nv_to_rgb", {"bidx": bidx, "uv_first_u": u_first}, (1,), 3, _U8)
    return t


@functools.cache
def _codes() -> dict[int, tuple]:
    return _table()


@functools.cache
def _hsv_simd_block() -> int:
    """The pixel block of OpenCV's vector loop for uint8 HSV2BGR on this machine (it truncates
    where the scalar tail rounds): the narrowest row that it converts whole in vector code."""
    pixel = np.array([68, 230, 123], np.uint8)  # 41.64 -> 41 truncated, 42 rounded
    for block in (4, 8, 16, 32, 64, 128):
        row = np.tile(pixel, (1, block, 1))
        if np.all(_cv2.cvtColor(row, _cv2.COLOR_HSV2RGB)[..., 2] == 41):
            return block
    return 0


@functools.cache
def _host_codes() -> dict[int, tuple]:
    """code -> (op, params, source channel counts, output channels) of the uint8 conversions
    of 3 or 4 channels that gdp.runtime.color converts into a new array whole: cvtColor's
    short path."""
    return {
        code: (op, params, scns, dcn)
        for code, (op, params, scns, dcn, dtypes) in _codes().items()
        if op in _host_ops()
        and op not in ("nv_to_rgb", "from_hsv")
        and 1 not in scns
        and "uint8" in dtypes
    }


@functools.cache
def _host_ops() -> frozenset:
    return frozenset(rt_color.OPS)


# (code, source channels) -> the host kernels' prepared conversion, or False: cvtColor's short
# path, one lookup a call.
_prepared: dict[tuple[int, int], object] = {}


def _prepare(code: int, scn: int):
    host = _host_codes().get(code)
    conversion = False
    if host is not None and scn in host[2]:
        conversion = rt_color.prepared(host[0], scn, host[1])
    _prepared[(code, scn)] = conversion
    return conversion


def _channel_error(scn: int) -> _cv2.error:
    return _cv2.error(
        "OpenCV(gdp) error: (-15:Bad number of channels) Invalid number of channels in input"
        f" image: 'VScn::contains(scn)' where 'scn' is {scn} in function 'cvtColor'"
    )


@common.accelerate("cvtColor")
def cvtColor(src, code, dst=None, dstCn=0, hint=None):
    # hint: OpenCV's ALGO_HINT_*; gdp's result is its accurate one whatever the hint.
    if (
        dst is None
        and dstCn == 0
        and src.__class__ is np.ndarray
        and src.dtype is common.UINT8
        and src.ndim == 3
        and code.__class__ is int
    ):
        # The common call (a uint8 image, no dst) of a conversion the host kernels take whole
        # (reorder, gray, YCrCb, HSV, Lab), straight to its prepared kernel: the general
        # path's layers cost a 480p BGR2RGB call a fifth of its time.
        conversion = _prepared.get((code, src.shape[2]))
        if conversion is None:
            conversion = _prepare(code, src.shape[2])
        if conversion and common.plain_image(
            src, out_bytes=src.size // src.shape[2] * conversion.dcn
        ):
            return rt_color.convert_prepared(src, conversion)
    graph = engine.is_graph_call(src)
    if not graph:
        src = common.image("cvtColor", src)
    entry = _codes().get(int(code))
    if entry is None:
        raise common.NotAccelerated(f"conversion code {code} is not accelerated")
    op, params, scns, dcn, dtypes = entry
    shape = tuple(src.shape)
    dtype = common.dtype_name(src.dtype)
    scn = 1 if len(shape) == 2 else shape[2]
    if scn not in scns:
        if graph:
            raise _channel_error(scn)
        # OpenCV 5 takes more than its tables say (BGR2RGB and BGRA2BGR of a 1-channel image
        # give 3 channels): OpenCV decides, and raises its own error where it refuses
        raise common.NotAccelerated(f"{scn} channels for conversion code {code}")
    if op == "nv_to_rgb" and (shape[1] % 2 != 0 or shape[0] % 3 != 0):
        raise common.error("cvtColor", "sz.width % 2 == 0 && sz.height % 3 == 0")
    reason = None
    if dtype not in dtypes:
        reason = f"conversion code {code} on {dtype} is not accelerated"
    elif dstCn not in (0, dcn):
        reason = f"dstCn={dstCn} for conversion code {code} is not accelerated"
    if reason is not None:
        if graph:
            raise common.error("cvtColor", reason + " (graph mode)")
        raise common.NotAccelerated(reason)
    if op == "from_hsv" and dtype == "uint8":
        params = {**params, "simd_block": _hsv_simd_block()}
    if dtype == "uint8" and not graph and op in _host_ops():
        # the host CPU's hand kernels (gdp.runtime.color): one compile for every size
        out_bytes = src.size * 2 if op == "nv_to_rgb" else src.size // scn * dcn
        if common.on_host(src, out_bytes=out_bytes):
            # into dst where it fits (not in place: a row's last step overlaps the one before)
            rows = (shape[0] * 2 // 3,) if op == "nv_to_rgb" else shape[:1]
            result = (*rows, shape[1], dcn) if dcn > 1 else (*rows, shape[1])
            out = common.into(dst, result, np.uint8, src)
            return common.finish(rt_color.convert(src, op, out, **params), dst)
    # Every program is written for any image size but two, which compile per size (on the
    # cpu target only inside a chain or a graph): NV12/NV21's planes are split at 2/3 of the
    # traced height, and uint8 HSV2BGR's vector/scalar rounding split depends on the width.
    free = op != "nv_to_rgb" and not (op == "from_hsv" and dtype == "uint8")
    return engine.call(f"cvtColor.{op}", _convert, [src], dict(params, op=op), dst, free=free)


def _convert(image, op: str, **params):
    return getattr(ops_color, op)(image, **params)
