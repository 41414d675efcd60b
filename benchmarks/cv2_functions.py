"""gdp.cv2 against OpenCV, function by function, on a full-HD photo: each call made through
`import gdp.cv2 as cv2` and through OpenCV itself, interleaved in this process on the same input
(gdp.benchmarking.compare), as medians with min and max and the ratio OpenCV / gdp.

    python benchmarks/cv2_functions.py [--runs 20] [--only GaussianBlur,warpAffine] [--out DIR]

Writes DIR/cv2_functions.md (default benchmarks/results). Both sides use the same thread
count (cv2.setNumThreads and gdp's worker use every core of the machine). Eager gdp.cv2 calls
include what a user pays per call: the input's staging and the output's allocation.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import cv2 as real
import numpy as np
import skimage.data

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gdp.cv2 as gcv2
from gdp.benchmarking import compare


def _photo() -> tuple[np.ndarray, np.ndarray]:
    rgb = real.resize(skimage.data.astronaut(), (1920, 1080), interpolation=real.INTER_CUBIC)
    bgr = real.cvtColor(rgb, real.COLOR_RGB2BGR)
    return bgr, real.cvtColor(bgr, real.COLOR_BGR2GRAY)


def calls(bgr: np.ndarray, gray: np.ndarray) -> dict[str, tuple]:
    """name -> (function of the cv2 module, its image). One line per common use."""
    rotation = real.getRotationMatrix2D((960, 540), 17, 0.9)
    kernel = real.getStructuringElement(real.MORPH_RECT, (5, 5))
    return {
        "GaussianBlur 5x5 BGR": (lambda m: m.GaussianBlur(bgr, (5, 5), 0)),
        "blur 5x5 BGR": (lambda m: m.blur(bgr, (5, 5))),
        "medianBlur 5 gray": (lambda m: m.medianBlur(gray, 5)),
        "Sobel dx 16S gray": (lambda m: m.Sobel(gray, real.CV_16S, 1, 0)),
        "Laplacian 16S gray": (lambda m: m.Laplacian(gray, real.CV_16S)),
        "erode 5x5 gray": (lambda m: m.erode(gray, kernel)),
        "Canny gray": (lambda m: m.Canny(gray, 50, 150)),
        "cvtColor BGR2GRAY": (lambda m: m.cvtColor(bgr, real.COLOR_BGR2GRAY)),
        "cvtColor BGR2HSV": (lambda m: m.cvtColor(bgr, real.COLOR_BGR2HSV)),
        "cvtColor BGR2Lab": (lambda m: m.cvtColor(bgr, real.COLOR_BGR2Lab)),
        "resize LINEAR to 640x360": (lambda m: m.resize(bgr, (640, 360))),
        "resize AREA to 960x540": (
            lambda m: m.resize(bgr, (960, 540), interpolation=real.INTER_AREA)
        ),
        "warpAffine LINEAR rotate": (lambda m: m.warpAffine(bgr, rotation, (1920, 1080))),
        "warpAffine NEAREST rotate": (
            lambda m: m.warpAffine(bgr, rotation, (1920, 1080), flags=real.INTER_NEAREST)
        ),
        "threshold OTSU gray": (
            lambda m: m.threshold(gray, 0, 255, real.THRESH_BINARY | real.THRESH_OTSU)
        ),
        "equalizeHist gray": (lambda m: m.equalizeHist(gray)),
        "meanStdDev BGR": (lambda m: m.meanStdDev(bgr)),
        "dnn.blobFromImage 224": (
            lambda m: m.dnn.blobFromImage(bgr, 1 / 255, (224, 224), swapRB=True)
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--only", default="", help="comma-separated prefixes of call names")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args(argv)
    real.setNumThreads(os.cpu_count() or 1)
    bgr, gray = _photo()
    wanted = [p for p in args.only.split(",") if p]
    rows = [
        "| call (1080p) | gdp.cv2 ms (min-max) | OpenCV ms (min-max) | OpenCV / gdp | through |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for name, call in calls(bgr, gray).items():
        if wanted and not any(name.startswith(p) for p in wanted):
            continue
        # A call gdp does not accelerate runs OpenCV itself: say so rather than time it twice.
        os.environ["GDP_CV2_STRICT"] = "1"
        try:
            call(gcv2)
            accelerated = "gdp"
        except gcv2.FallthroughError:
            accelerated = "OpenCV (not accelerated)"
        finally:
            del os.environ["GDP_CV2_STRICT"]
        t = compare({"gdp": lambda c=call: c(gcv2), "opencv": lambda c=call: c(real)}, args.runs)
        g, o = t["gdp"], t["opencv"]
        rows.append(
            f"| {name} | {g.cell()} | {o.cell()} | {o.median / g.median:.2f}x | {accelerated} |"
        )
        print(rows[-1], flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = "\n".join(
        [
            "# gdp.cv2 vs OpenCV at 1080p",
            "",
            f"`python benchmarks/cv2_functions.py --runs {args.runs}` on this machine"
            f" ({os.cpu_count()} cores, cv2 {real.__version__}); medians of {args.runs}"
            " interleaved runs, same input, same process.",
            "",
            *rows,
            "",
        ]
    )
    (out / "cv2_functions.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
