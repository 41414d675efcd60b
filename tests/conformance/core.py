"""One conformance case: a gdp.cv2 call, the same call in OpenCV, and the tolerance to hold."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# OpenCV's test tolerances (modules/imgproc/test): name -> (what it means, check(got, want)).
EXACT = "exact"
LSB1 = "<= 1 LSB"
REL_1E5 = "rel 1e-5"
REL_1E3 = "rel 1e-3"
CANNY = "edges: <= 1% of max(edges, 100) differ"

# Image sizes of the matrix, by class; "1080p" runs only where a case asks for it.
SIZES = {
    "tiny": [(1, 1), (2, 3)],
    "odd": [(7, 5), (31, 17)],
    "photo": [(120, 160)],
    "1080p": [(1080, 1920)],
}


def max_error(got: np.ndarray, want: np.ndarray, tolerance: str) -> float:
    """The error the tolerance bounds: absolute for integers, relative for floats (to the
    largest magnitude of the expected output, as cvtest::norm(NORM_INF|NORM_RELATIVE)), the
    share of differing edge pixels for Canny."""
    got = np.asarray(got)
    want = np.asarray(want)
    if got.shape != want.shape:
        return float("inf")
    if got.size == 0:
        return 0.0
    g, w = got.astype(np.float64), want.astype(np.float64)
    if tolerance == CANNY:
        edges = max(int(np.count_nonzero(want)), 100)
        return float(np.count_nonzero(g != w)) / edges
    diff = np.abs(g - w)
    if np.isnan(diff).any():
        return float("inf") if not np.array_equal(np.isnan(g), np.isnan(w)) else 0.0
    if tolerance in (REL_1E5, REL_1E3):
        scale = max(float(np.max(np.abs(w))), 1e-30)
        return float(np.max(diff)) / scale
    return float(np.max(diff))


def bound(tolerance: str) -> float:
    return {EXACT: 0.0, LSB1: 1.0, REL_1E5: 1e-5, REL_1E3: 1e-3, CANNY: 0.01}[tolerance]


@dataclass
class Case:
    function: str  # OpenCV's name, e.g. "GaussianBlur"
    dtype: str  # input dtype, e.g. "uint8"
    border: str  # "REFLECT_101", ... or "-" where the function takes none
    size: str  # a key of SIZES
    params: str  # the other arguments, as a short readable string
    gdp: Callable[[], np.ndarray]  # the call through gdp.cv2
    opencv: Callable[[], np.ndarray]  # the same call in OpenCV
    tolerance: str
    # Why a case is known to miss the tolerance (shown in the table; the test then expects it).
    known_miss: str = ""

    @property
    def id(self) -> str:
        return f"{self.function}-{self.dtype}-{self.border}-{self.size}-{self.params}"

    def run(self) -> tuple[float, bool, np.ndarray, np.ndarray]:
        want = self.opencv()
        got = self.gdp()
        err = max_error(got, want, self.tolerance)
        same_type = np.asarray(got).dtype == np.asarray(want).dtype
        return err, same_type and err <= bound(self.tolerance), got, want


def images(dtype: str, size: str, channels: int = 3, seed: int = 0) -> list[np.ndarray]:
    """Random images of the size class (a real photo, resized, for the "photo" and "1080p"
    classes), scaled to the dtype's range ([0, 1) for floats)."""
    rng = np.random.default_rng(seed)
    out = []
    for h, w in SIZES[size]:
        if size in ("photo", "1080p"):
            import cv2
            import skimage.data

            base = cv2.resize(skimage.data.astronaut(), (w, h), interpolation=cv2.INTER_AREA)
            base = base if channels == 3 else cv2.cvtColor(base, cv2.COLOR_RGB2GRAY)
            if channels == 4:
                base = cv2.cvtColor(base, cv2.COLOR_RGB2RGBA)
            image = _convert(base, dtype)
        else:
            shape = (h, w) if channels == 1 else (h, w, channels)
            image = _convert(rng.integers(0, 256, shape, dtype=np.uint8), dtype)
            if dtype in ("uint16", "int16"):
                image = rng.integers(
                    np.iinfo(dtype).min // 2, np.iinfo(dtype).max, shape, dtype=dtype
                )
        out.append(image)
    return out


def _convert(u8: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "uint8":
        return u8
    if dtype in ("float32", "float64"):
        return (u8 / 255.0).astype(dtype)
    if dtype == "uint16":
        return u8.astype(np.uint16) * 257
    if dtype == "int16":
        return (u8.astype(np.int16) - 128) * 100
    raise ValueError(dtype)


def split_core(cases: list[Case], per_function: int = 3) -> list:
    """pytest params: `per_function` cases of each function, spread over its list, run by
    `make test`; the others are marked slow (pytest -m slow, and docs/make_conformance.py)."""
    import pytest

    by_function: dict[str, list[int]] = {}
    for index, case in enumerate(cases):
        by_function.setdefault(case.function, []).append(index)
    core = set()
    for indices in by_function.values():
        step = max(1, len(indices) // per_function)
        core.update(indices[::step][:per_function])
    return [
        pytest.param(case, id=case.id, marks=() if i in core else pytest.mark.slow)
        for i, case in enumerate(cases)
    ]


def check(case: Case) -> None:
    """Assert a case holds its tolerance, or, for a known miss, that it runs with OpenCV's
    output shape and type."""
    err, passed, got, want = case.run()
    if case.known_miss:
        assert np.asarray(got).shape == np.asarray(want).shape
        assert np.asarray(got).dtype == np.asarray(want).dtype
        return
    assert np.asarray(got).dtype == np.asarray(want).dtype, (np.asarray(got).dtype, want.dtype)
    assert passed, f"{case.id}: max error {err} over the tolerance {case.tolerance}"
