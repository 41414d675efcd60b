"""gdp.cv2's large kernels and medians at a new image size (issue 19): what the first call of a
process pays (the compile included), what the first call at a second size pays (no compile
where one program serves every size), how many programs the two sizes compiled, and the
call's time against OpenCV's on the first size (interleaved in this process on the same input,
gdp.benchmarking.compare: medians with min and max). Every result is checked against OpenCV.

    python benchmarks/cv2_first_calls.py [--runs 10] [--only median,Gauss] [--out FILE]

Runs in a fresh disk cache of its own (a temporary directory), so every program compiles. The
first case also pays TensorFlow's import (about 4 s on the 2-core VM).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ["GDP_CACHE_DIR"] = tempfile.mkdtemp(prefix="gdp-first-calls-")

import cv2 as real
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gdp.cv2 as gcv2
from gdp.benchmarking import compare


def _cases(image: np.ndarray) -> dict:
    gray = real.cvtColor(image, real.COLOR_BGR2GRAY)
    f32 = image.astype(np.float32) / 255
    u16 = image.astype(np.uint16) * 200
    rng = np.random.default_rng(0)
    k13 = rng.random((13, 13)).astype(np.float32)
    k21 = rng.normal(size=(21, 21)).astype(np.float32) / 21
    taps41 = rng.random(41).astype(np.float32) / 20
    box31 = np.ones((31, 31), np.float32) / 961
    ell21 = real.getStructuringElement(real.MORPH_ELLIPSE, (21, 21))
    ell31 = real.getStructuringElement(real.MORPH_ELLIPSE, (31, 31))
    hsv = real.cvtColor(image, real.COLOR_BGR2HSV)
    nv12 = real.cvtColor(image, real.COLOR_BGR2YUV_I420)  # a (h * 3 / 2, w) 4:2:0 layout

    def from_nv12(m, x):  # whole chroma rows and pairs of the new size's cut
        return m.cvtColor(x[: x.shape[0] // 3 * 3, : x.shape[1] // 2 * 2], real.COLOR_YUV2BGR_NV12)

    return {
        "cvtColor HSV2BGR uint8": (hsv, lambda m, x: m.cvtColor(x, real.COLOR_HSV2BGR)),
        "cvtColor YUV2BGR_NV12 uint8": (nv12, from_nv12),
        "medianBlur 3 uint8": (image, lambda m, x: m.medianBlur(x, 3)),
        "medianBlur 3 float32": (f32, lambda m, x: m.medianBlur(x, 3)),
        "medianBlur 5 uint8": (image, lambda m, x: m.medianBlur(x, 5)),
        "medianBlur 5 uint16": (u16, lambda m, x: m.medianBlur(x, 5)),
        "medianBlur 5 float32": (f32, lambda m, x: m.medianBlur(x, 5)),
        "GaussianBlur 31 uint8": (image, lambda m, x: m.GaussianBlur(x, (31, 31), 0)),
        "GaussianBlur 31 float32": (f32, lambda m, x: m.GaussianBlur(x, (31, 31), 0)),
        "blur 31 uint8": (image, lambda m, x: m.blur(x, (31, 31))),
        "boxFilter 31 float32": (f32, lambda m, x: m.boxFilter(x, -1, (31, 31))),
        "filter2D 31 box uint8": (image, lambda m, x: m.filter2D(x, -1, box31)),
        "filter2D 13 random uint8": (image, lambda m, x: m.filter2D(x, -1, k13)),
        "filter2D 21 random float32": (f32, lambda m, x: m.filter2D(x, -1, k21)),
        "GaussianBlur 51 uint8": (image, lambda m, x: m.GaussianBlur(x, (51, 51), 0)),
        "GaussianBlur 51 float32": (f32, lambda m, x: m.GaussianBlur(x, (51, 51), 0)),
        "blur 41 uint8": (image, lambda m, x: m.blur(x, (41, 41))),
        "sepFilter2D 41 float32": (f32, lambda m, x: m.sepFilter2D(x, -1, taps41, taps41)),
        "morphologyEx gradient ellipse 21": (
            image,
            lambda m, x: m.morphologyEx(x, real.MORPH_GRADIENT, ell21),
        ),
        "morphologyEx gradient ellipse 31": (
            image,
            lambda m, x: m.morphologyEx(x, real.MORPH_GRADIENT, ell31),
        ),
        "morphologyEx open ellipse 21": (
            image,
            lambda m, x: m.morphologyEx(x, real.MORPH_OPEN, ell21),
        ),
        "erode rectangle 31": (image, lambda m, x: m.erode(x, np.ones((31, 31), np.uint8))),
        "dilate ellipse 31 gray": (gray, lambda m, x: m.dilate(x, ell31)),
        # Thumbnails: an area shrink by 20 and 40 reads 21-41 source pixels an axis.
        "resize AREA to 32x24": (
            image,
            lambda m, x: m.resize(x, (32, 24), interpolation=real.INTER_AREA),
        ),
        "resize AREA to 16x12": (
            image,
            lambda m, x: m.resize(x, (16, 12), interpolation=real.INTER_AREA),
        ),
        "Canny colour": (image, lambda m, x: m.Canny(x, 50, 150)),
        "Canny colour L2": (image, lambda m, x: m.Canny(x, 50, 150, L2gradient=True)),
        "Canny gray": (gray, lambda m, x: m.Canny(x, 50, 150)),
        # Filters of an image the program computes (cvtColor's gray) in one gdp.cv2.chain:
        # their borders are padded inside the program, for any size.
        "chain: gray, open ellipse 21": _chained(
            image, lambda m, x: m.morphologyEx(_gray(m, x), real.MORPH_OPEN, ell21)
        ),
        "chain: gray, erode ellipse 21 reflect 101": _chained(
            image, lambda m, x: m.erode(_gray(m, x), ell21, borderType=real.BORDER_REFLECT_101)
        ),
        "chain: gray, dilate ellipse 31 reflect": _chained(
            image, lambda m, x: m.dilate(_gray(m, x), ell31, borderType=real.BORDER_REFLECT)
        ),
        "chain: gray, GaussianBlur 31": _chained(
            image, lambda m, x: m.GaussianBlur(_gray(m, x), (31, 31), 0)
        ),
        "chain: gray, close ellipse 31 replicate": _chained(
            image,
            lambda m, x: m.morphologyEx(
                _gray(m, x), real.MORPH_CLOSE, ell31, borderType=real.BORDER_REPLICATE
            ),
        ),
    }


def _gray(m, x):
    return m.cvtColor(x, real.COLOR_BGR2GRAY)


def _chained(image: np.ndarray, body):
    """(image, call) where gdp's call is `body` as one gdp.cv2.chain program (never the calls
    one by one) and OpenCV's the calls."""
    program = gcv2.chain(choose=False)(lambda x: body(gcv2, x))

    def call(m, x):
        return program(x) if m is gcv2 else body(m, x)

    call.programs = lambda: len(program._models)  # a chain's own, not gdp.cv2's cache
    return image, call


def _agree(got: np.ndarray, want: np.ndarray) -> float:
    """The largest difference from OpenCV, raised on a wrong shape or dtype."""
    if got.shape != want.shape or got.dtype != want.dtype:
        raise AssertionError(
            f"shape/dtype {got.shape} {got.dtype}, OpenCV {want.shape} {want.dtype}"
        )
    return float(np.abs(got.astype(np.float64) - want).max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--only", default="", help="comma-separated name prefixes")
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    args = parser.parse_args()
    import skimage.data

    photo = real.cvtColor(skimage.data.astronaut(), real.COLOR_RGB2BGR)
    image = real.resize(photo, (640, 480), interpolation=real.INTER_AREA)
    wanted = [p for p in args.only.split(",") if p]
    rows = [
        "| call | first call s | new size ms | programs | gdp ms | OpenCV ms | OpenCV / gdp "
        "| largest difference |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, (source, call) in _cases(image).items():
        if wanted and not any(name.startswith(p) for p in wanted):
            continue
        other = np.ascontiguousarray(source[:301, :517])
        before = gcv2.cache_info().compilations
        start = time.perf_counter()
        first = call(gcv2, source)
        first_s = time.perf_counter() - start
        start = time.perf_counter()
        second = call(gcv2, other)
        new_ms = (time.perf_counter() - start) * 1e3
        programs = gcv2.cache_info().compilations - before
        if hasattr(call, "programs"):
            programs = call.programs()
        diff = max(
            _agree(first, call(real, source)),
            _agree(second, call(real, other)),
        )
        timing = compare(
            {
                "gdp": lambda call=call, source=source: call(gcv2, source),
                "opencv": lambda call=call, source=source: call(real, source),
            },
            runs=args.runs,
        )
        g, o = timing["gdp"].seconds, timing["opencv"].seconds
        ratio = statistics.median(o) / statistics.median(g)
        rows.append(
            f"| {name} | {first_s:.2f} | {new_ms:.1f} | {programs} "
            f"| {statistics.median(g) * 1e3:.2f} ({min(g) * 1e3:.2f}-{max(g) * 1e3:.2f}) "
            f"| {statistics.median(o) * 1e3:.2f} ({min(o) * 1e3:.2f}-{max(o) * 1e3:.2f}) "
            f"| {ratio:.2f}x | {diff:.3g} |"
        )
        print(rows[-1], flush=True)
    table = "\n".join(rows)
    print("\n" + table)
    if args.out:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
