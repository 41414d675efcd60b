"""Conformance cases of geometry and DNN input: copyMakeBorder, flip, transpose, rotate,
resize, warpAffine, dnn.blobFromImage(s)."""

from __future__ import annotations

import itertools

import cv2 as real
import numpy as np

import gdp.cv2 as cv2
from tests.conformance.cases_filters import SIZE_CLASSES, _per_image
from tests.conformance.core import EXACT, LSB1, REL_1E3, Case, images

BORDERS = {
    "CONSTANT": real.BORDER_CONSTANT,
    "REPLICATE": real.BORDER_REPLICATE,
    "REFLECT": real.BORDER_REFLECT,
    "WRAP": real.BORDER_WRAP,
    "REFLECT_101": real.BORDER_REFLECT_101,
}
INTERPOLATIONS = {
    "NEAREST": real.INTER_NEAREST,
    "LINEAR": real.INTER_LINEAR,
    "CUBIC": real.INTER_CUBIC,
    "AREA": real.INTER_AREA,
}


def cases() -> list[Case]:
    out: list[Case] = []
    for (name, border), dtype, size in itertools.product(
        BORDERS.items(), ("uint8", "float32"), SIZE_CLASSES
    ):
        out += _per_image(
            "copyMakeBorder",
            dtype,
            name,
            size,
            "2,1,3,0 value (9,8,7)",
            lambda m, x, b=border: m.copyMakeBorder(x, 2, 1, 3, 0, b, value=(9, 8, 7)),
        )
    for code, dtype in itertools.product((0, 1, -1), ("uint8", "float32")):
        out += _per_image(
            "flip", dtype, "-", "odd", f"flipCode {code}", lambda m, x, c=code: m.flip(x, c)
        )
    out += _per_image("transpose", "uint8", "-", "odd", "", lambda m, x: m.transpose(x))
    for code in (real.ROTATE_90_CLOCKWISE, real.ROTATE_180, real.ROTATE_90_COUNTERCLOCKWISE):
        out += _per_image(
            "rotate", "uint8", "-", "odd", f"code {code}", lambda m, x, c=code: m.rotate(x, c)
        )
    # resize: every interpolation, down and up, uint8 (<= 1 LSB) and float32 (rel 1e-3).
    # (160x120 -> 40x30 is an integer factor, 64x48 a fractional one, 321x133 enlarges x and
    # shrinks y, 200x150 enlarges both.)
    for (name, interp), dtype, dsize in itertools.product(
        INTERPOLATIONS.items(),
        ("uint8", "uint16", "int16", "float32"),
        ((40, 30), (64, 48), (321, 133), (200, 150)),
    ):
        tol = REL_1E3 if dtype == "float32" else LSB1
        out += _per_image(
            "resize",
            dtype,
            "-",
            "photo",
            f"{name} to {dsize[0]}x{dsize[1]}",
            lambda m, x, i=interp, d=dsize: m.resize(x, d, interpolation=i),
            tolerance=tol,
        )
    out += _per_image(
        "resize",
        "uint8",
        "-",
        "odd",
        "LINEAR fx=1.5 fy=0.5",
        lambda m, x: m.resize(x, None, fx=1.5, fy=0.5),
        tolerance=LSB1,
    )
    # warpAffine: nearest and linear, constant and replicated borders, a rotation (forward
    # map, inverted as OpenCV does), a half-pixel scale whose nearest taps are exact ties, and
    # a shear given as the inverse map; dst smaller than, equal to and larger than src.
    for (iname, interp), (bname, border), dtype, (mname, matrix) in itertools.product(
        {"NEAREST": real.INTER_NEAREST, "LINEAR": real.INTER_LINEAR}.items(),
        {"CONSTANT": real.BORDER_CONSTANT, "REPLICATE": real.BORDER_REPLICATE}.items(),
        ("uint8", "uint16", "float32"),
        WARPS.items(),
    ):
        tol = REL_1E3 if dtype == "float32" else LSB1
        flags = interp | (real.WARP_INVERSE_MAP if mname in INVERSE else 0)
        for size in SIZE_CLASSES:
            out += _per_image(
                "warpAffine",
                dtype,
                bname,
                size,
                f"{iname} {mname}",
                lambda m, x, f=flags, b=border, mat=matrix: m.warpAffine(
                    x, *mat(x), flags=f, borderMode=b, borderValue=(9, 8, 7, 6)
                ),
                tolerance=tol,
            )
    # Full HD: the size the benchmarks run, for what a pipeline does to a camera frame.
    for name, border, params, call in [
        ("warpAffine", "CONSTANT", "LINEAR rotate30", lambda m, x: m.warpAffine(x, *_rotation(x))),
        (
            "warpAffine",
            "REPLICATE",
            "NEAREST rotate30",
            lambda m, x: m.warpAffine(
                x, *_rotation(x), flags=real.INTER_NEAREST, borderMode=real.BORDER_REPLICATE
            ),
        ),
        ("resize", "-", "LINEAR to 640x360", lambda m, x: m.resize(x, (640, 360))),
        (
            "resize",
            "-",
            "CUBIC to 1280x720",
            lambda m, x: m.resize(x, (1280, 720), interpolation=real.INTER_CUBIC),
        ),
        (
            "resize",
            "-",
            "AREA to 480x270",
            lambda m, x: m.resize(x, (480, 270), interpolation=real.INTER_AREA),
        ),
        (
            "resize",
            "-",
            "AREA to 1280x720",
            lambda m, x: m.resize(x, (1280, 720), interpolation=real.INTER_AREA),
        ),
        (
            "copyMakeBorder",
            "WRAP",
            "8,8,0,0",
            lambda m, x: m.copyMakeBorder(x, 8, 8, 0, 0, real.BORDER_WRAP),
        ),
    ]:
        tol = EXACT if name == "copyMakeBorder" else LSB1
        out += _per_image(name, "uint8", border, "1080p", params, call, tolerance=tol)
    # blobFromImage: the uint8 resize may differ by 1 LSB, i.e. by scalefactor in the blob.
    for (kind, kw), size in itertools.product(
        {
            "resize swapRB": dict(scalefactor=1 / 255, size=(224, 224), swapRB=True),
            "crop mean": dict(
                scalefactor=1 / 255, size=(96, 96), mean=(104, 117, 123), swapRB=True, crop=True
            ),
            "uint8 blob": dict(size=(64, 64), ddepth=real.CV_8U),
        }.items(),
        ("photo",),
    ):
        scale = kw.get("scalefactor", 1.0)
        for i, image in enumerate(images("uint8", size)):
            out.append(
                Case(
                    "dnn.blobFromImage",
                    "uint8",
                    "-",
                    size,
                    f"{kind}#{i}",
                    gdp=lambda image=image, kw=kw, s=scale: _lsb(
                        cv2.dnn.blobFromImage(image, **kw), s
                    ),
                    opencv=lambda image=image, kw=kw, s=scale: _lsb(
                        real.dnn.blobFromImage(image, **kw), s
                    ),
                    tolerance=LSB1,
                )
            )
    return out


def _rotation(x: np.ndarray) -> tuple:
    h, w = x.shape[:2]
    return real.getRotationMatrix2D((w / 2 - 0.3, h / 2 + 0.1), 30, 0.9), (w, h)


def _half_pixel(x: np.ndarray) -> tuple:
    h, w = x.shape[:2]
    # Inverse map x' = x/2 + 1/4: with WARP_INVERSE_MAP, every other source coordinate is an
    # exact .5 tie for the nearest neighbour's round-half-to-even.
    matrix = np.array([[0.5, 0.0, 0.25], [0.0, 0.5, 0.75]])
    return matrix, (w * 2 + 1, h * 2 + 1)


def _shear(x: np.ndarray) -> tuple:
    h, w = x.shape[:2]
    return np.array([[1.0, 0.3, -2.5], [-0.2, 1.1, 1.5]], np.float32), (max(1, w - 3), h + 2)


WARPS = {"rotate30": _rotation, "half-pixel": _half_pixel, "shear": _shear}
INVERSE = {"half-pixel", "shear"}


def _lsb(blob: np.ndarray, scale: float) -> np.ndarray:
    """A blob in units of the resized image's grey levels (blob / scalefactor, which holds
    whole numbers up to float32's rounding)."""
    return blob if blob.dtype == np.uint8 else np.rint(blob.astype(np.float64) / scale)
