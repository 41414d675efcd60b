"""Conformance cases of cv2.cvtColor: every accelerated code x dtype x size class."""

from __future__ import annotations

import cv2
import numpy as np

import gdp.cv2 as gcv2
from tests.conformance.core import EXACT, REL_1E5, Case, images

SIZE_CLASSES = ("tiny", "odd", "photo", "1080p")

# (code name, input channels, dtypes)
CODES = [
    ("BGR2RGB", 3, ("uint8", "float32")),
    ("BGRA2RGBA", 4, ("uint8", "float32")),
    ("BGR2BGRA", 3, ("uint8", "float32")),
    ("RGBA2RGB", 4, ("uint8", "float32")),
    ("BGR2GRAY", 3, ("uint8", "float32")),
    ("RGB2GRAY", 3, ("uint8", "float32")),
    ("BGRA2GRAY", 4, ("uint8", "float32")),
    ("GRAY2BGR", 1, ("uint8", "float32")),
    ("GRAY2BGRA", 1, ("uint8", "float32")),
    ("BGR2YCrCb", 3, ("uint8", "float32")),
    ("RGB2YCrCb", 3, ("uint8", "float32")),
    ("BGR2HSV", 3, ("uint8", "float32")),
    ("RGB2HSV", 3, ("uint8", "float32")),
    ("HSV2BGR", 3, ("uint8", "float32")),
    ("HSV2RGB", 3, ("uint8", "float32")),
    ("BGR2Lab", 3, ("uint8", "float32")),
    ("RGB2Lab", 3, ("uint8", "float32")),
    ("YUV2BGR_NV12", 0, ("uint8",)),
    ("YUV2RGB_NV12", 0, ("uint8",)),
    ("YUV2BGR_NV21", 0, ("uint8",)),
    ("YUV2RGB_NV21", 0, ("uint8",)),
]


def _image(code: str, channels: int, dtype: str, size: str) -> np.ndarray:
    if channels == 0:  # YUV 4:2:0 semi-planar: (H*3/2, W), H and W even
        h, w = {"tiny": (2, 2), "odd": (18, 34), "photo": (120, 160), "1080p": (1080, 1920)}[size]
        rng = np.random.default_rng(1)
        return rng.integers(0, 256, (h * 3 // 2, w), dtype=np.uint8)
    image = images(dtype, size, channels)[-1]
    if code.startswith("HSV2"):  # valid HSV: H in [0, 180) (uint8) or [0, 360) degrees
        image = image.copy()
        if dtype == "uint8":
            image[..., 0] = (image[..., 0].astype(np.int32) * 180 // 256).astype(np.uint8)
        else:
            image[..., 0] *= np.float32(360.0)
    return image


def _case(name: str, dtype: str, size: str, image: np.ndarray, params: str = "") -> Case:
    code = getattr(cv2, f"COLOR_{name}")
    return Case(
        function="cvtColor",
        dtype=dtype,
        border="-",
        size=size,
        params=name + params,
        gdp=lambda: gcv2.cvtColor(image, code),
        opencv=lambda: cv2.cvtColor(image, code),
        tolerance=EXACT if dtype == "uint8" else REL_1E5,
    )


def cases() -> list[Case]:
    out = []
    for name, channels, dtypes in CODES:
        for dtype in dtypes:
            for size in SIZE_CLASSES:
                out.append(_case(name, dtype, size, _image(name, channels, dtype, size)))
    # OpenCV's uint8 HSV2BGR truncates in its vector loop and rounds in the scalar tail: a row
    # of 45 pixels has both (and every valid HSV triple's rounding is covered by 180x256x256).
    rng = np.random.default_rng(2)
    hsv = rng.integers(0, 256, (9, 45, 3), dtype=np.uint8)
    hsv[..., 0] %= 180
    out.append(_case("HSV2BGR", "uint8", "odd", hsv, "-w45"))
    v = np.arange(256, dtype=np.uint8)
    h, s, val = np.meshgrid(np.arange(180, dtype=np.uint8), v, v, indexing="ij")
    every = np.stack([h, s, val], -1).reshape(-1, 256, 3)
    out.append(_case("HSV2RGB", "uint8", "1080p", every, "-every-triple"))
    rgb = np.stack(np.meshgrid(v, v, v, indexing="ij"), -1).reshape(-1, 256, 3)[::4].copy()
    out.append(_case("RGB2HSV", "uint8", "1080p", rgb, "-quarter-cube"))
    out.append(_case("RGB2Lab", "uint8", "1080p", rgb, "-quarter-cube"))
    # Lab from 4 channels (alpha ignored); float32 Lab rounds each channel to 1/2^14 half to
    # even after clipping to [0, 1]: uniform floats hit ties, and values outside [0, 1] clip.
    for dtype in ("uint8", "float32"):
        out.append(_case("BGR2Lab", dtype, "odd", images(dtype, "odd", 4)[-1], "-4ch"))
    wide = rng.uniform(-0.25, 1.25, (63, 97, 3)).astype(np.float32)
    out.append(_case("RGB2Lab", "float32", "odd", wide, "-uniform"))
    return out
