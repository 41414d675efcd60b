"""Conformance cases of the pointwise functions and statistics: function x dtype x size class."""

from __future__ import annotations

import cv2
import numpy as np

import gdp.cv2 as gcv2
from tests.conformance.core import EXACT, REL_1E5, Case, images

SIZE_CLASSES = ("tiny", "odd", "photo", "1080p")
THRESH_TYPES = {
    "BINARY": cv2.THRESH_BINARY,
    "BINARY_INV": cv2.THRESH_BINARY_INV,
    "TRUNC": cv2.THRESH_TRUNC,
    "TOZERO": cv2.THRESH_TOZERO,
    "TOZERO_INV": cv2.THRESH_TOZERO_INV,
}
NORMS = {
    "MINMAX": cv2.NORM_MINMAX,
    "L1": cv2.NORM_L1,
    "L2": cv2.NORM_L2,
    "INF": cv2.NORM_INF,
}


def _flat(result) -> np.ndarray:
    """A result (array, number or tuple of them) as one float64 vector (for the comparison)."""
    if isinstance(result, tuple | list):
        return np.concatenate([_flat(r) for r in result])
    return np.asarray(result, dtype=np.float64).ravel()


def _case(function, dtype, size, params, gdp, opencv, tolerance=None, flat=False) -> Case:
    tol = tolerance or (EXACT if dtype == "uint8" else REL_1E5)
    if flat:
        return Case(
            function, dtype, "-", size, params, lambda: _flat(gdp()), lambda: _flat(opencv()), tol
        )
    return Case(function, dtype, "-", size, params, gdp, opencv, tol)


def _threshold_cases(dtype: str, size: str, image: np.ndarray) -> list[Case]:
    out = []
    thresh, maxval = (100.7, 200.5) if dtype == "uint8" else (0.4, 0.9)
    for name, kind in THRESH_TYPES.items():
        out.append(
            _case(
                "threshold",
                dtype,
                size,
                name,
                lambda k=kind: gcv2.threshold(image, thresh, maxval, k),
                lambda k=kind: cv2.threshold(image, thresh, maxval, k),
                flat=True,
            )
        )
    return out


def cases() -> list[Case]:
    out: list[Case] = []
    for size in SIZE_CLASSES:
        for dtype in ("uint8", "float32"):
            color = images(dtype, size, 3)[-1]
            gray = images(dtype, size, 1)[-1]
            other = np.ascontiguousarray(color[::-1, ::-1])
            sparse = np.where(gray > gray.max() / 2, gray, 0).astype(gray.dtype)
            out += _threshold_cases(dtype, size, gray)
            out.append(
                _case(
                    "threshold",
                    dtype,
                    size,
                    "BINARY-3ch",
                    lambda c=color: gcv2.threshold(c, 0.5 if c.dtype != np.uint8 else 127, 1, 0),
                    lambda c=color: cv2.threshold(c, 0.5 if c.dtype != np.uint8 else 127, 1, 0),
                    flat=True,
                )
            )
            out.append(
                _case(
                    "convertScaleAbs",
                    dtype,
                    size,
                    "alpha=1.37,beta=-20.1",
                    lambda c=color: gcv2.convertScaleAbs(c, alpha=1.37, beta=-20.1),
                    lambda c=color: cv2.convertScaleAbs(c, alpha=1.37, beta=-20.1),
                    tolerance=EXACT,
                )
            )
            out.append(
                _case(
                    "addWeighted",
                    dtype,
                    size,
                    "0.3,0.8,2.5",
                    lambda c=color, o=other: gcv2.addWeighted(c, 0.3, o, 0.8, 2.5),
                    lambda c=color, o=other: cv2.addWeighted(c, 0.3, o, 0.8, 2.5),
                )
            )
            for name, kind in NORMS.items():
                a, b = (10.0, 240.0) if kind == cv2.NORM_MINMAX else (200.0, 0.0)
                out.append(
                    _case(
                        "normalize",
                        dtype,
                        size,
                        name,
                        lambda c=color, a=a, b=b, k=kind: gcv2.normalize(c, None, a, b, k),
                        lambda c=color, a=a, b=b, k=kind: cv2.normalize(c, None, a, b, k),
                    )
                )
            out.append(
                _case(
                    "normalize",
                    dtype,
                    size,
                    "MINMAX-to-float32",
                    lambda c=color: gcv2.normalize(c, None, 0, 1, cv2.NORM_MINMAX, cv2.CV_32F),
                    lambda c=color: cv2.normalize(c, None, 0, 1, cv2.NORM_MINMAX, cv2.CV_32F),
                    tolerance=REL_1E5,
                )
            )
            for fn in ("meanStdDev", "mean", "sumElems"):
                # float64 results: OpenCV's stddev on uint8 rounds differently in the last bits
                tol = REL_1E5 if fn == "meanStdDev" else None
                out.append(
                    _case(
                        fn,
                        dtype,
                        size,
                        "3ch",
                        lambda c=color, f=fn: getattr(gcv2, f)(c),
                        lambda c=color, f=fn: getattr(cv2, f)(c),
                        tolerance=tol,
                        flat=True,
                    )
                )
            out.append(
                _case(
                    "minMaxLoc",
                    dtype,
                    size,
                    "-",
                    lambda g=gray: gcv2.minMaxLoc(g),
                    lambda g=gray: cv2.minMaxLoc(g),
                    tolerance=EXACT,
                    flat=True,
                )
            )
            out.append(
                _case(
                    "countNonZero",
                    dtype,
                    size,
                    "-",
                    lambda g=sparse: gcv2.countNonZero(g),
                    lambda g=sparse: cv2.countNonZero(g),
                    tolerance=EXACT,
                    flat=True,
                )
            )
        gray = images("uint8", size, 1)[-1]
        color = images("uint8", size, 3)[-1]
        for name, kind in THRESH_TYPES.items():
            if kind == cv2.THRESH_TRUNC:
                continue
            flags = kind | cv2.THRESH_OTSU
            out.append(
                _case(
                    "threshold",
                    "uint8",
                    size,
                    f"OTSU|{name}",
                    lambda f=flags, g=gray: gcv2.threshold(g, 0, 255, f),
                    lambda f=flags, g=gray: cv2.threshold(g, 0, 255, f),
                    flat=True,
                )
            )
        out.append(
            _case(
                "equalizeHist",
                "uint8",
                size,
                "-",
                lambda g=gray: gcv2.equalizeHist(g),
                lambda g=gray: cv2.equalizeHist(g),
            )
        )
        table = np.random.default_rng(1).integers(0, 256, 256).astype(np.uint8)
        tables = np.random.default_rng(2).random((1, 256, 3)).astype(np.float32)
        out.append(
            _case(
                "LUT",
                "uint8",
                size,
                "1ch-table",
                lambda c=color, t=table: gcv2.LUT(c, t),
                lambda c=color, t=table: cv2.LUT(c, t),
            )
        )
        out.append(
            _case(
                "LUT",
                "uint8",
                size,
                "3ch-float32-table",
                lambda c=color, t=tables: gcv2.LUT(c, t),
                lambda c=color, t=tables: cv2.LUT(c, t),
                tolerance=EXACT,
            )
        )
    return out
