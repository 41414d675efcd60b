"""`gdp calibrate --cv2`: time each accelerated gdp.cv2 function against OpenCV at one size per
size class (gdp.cv2.dispatch.SIZE_CLASSES), interleaved in this process on the same real photo
and the same threads (gdp.benchmarking.compare), and store the dispatch table that sends a call
to OpenCV where OpenCV measured faster. `gdp bench --cv2` (benchmarks/cv2_functions.py) runs
the same calls and shows the table.

The calls are one common use of every accelerated function (per variant for cvtColor, resize,
warpAffine, threshold; normalize's NORM_MINMAX), as people write them; a call or variant without
an entry runs gdp (tests/gdp/cv2/test_dispatch.py holds every function to having one).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import cv2 as _real
import numpy as np

from gdp.benchmarking import Timing, compare
from gdp.cv2 import dispatch, engine


@dataclass
class Call:
    label: str  # what the call is, for tables
    function: str  # its gdp.cv2 / cv2 name (dotted for submodules)
    args: tuple
    kwargs: dict

    @property
    def key(self) -> str:
        return dispatch.key_of(self.function, self.args, self.kwargs)

    def through(self, module) -> Callable[[], object]:
        fn = module
        for part in self.function.split("."):
            fn = getattr(fn, part)
        return lambda: fn(*self.args, **self.kwargs)


def photo(height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """A real photo (scikit-image's astronaut) at height x width: BGR and gray, uint8."""
    import skimage.data

    rgb = _real.resize(skimage.data.astronaut(), (width, height), interpolation=_real.INTER_CUBIC)
    bgr = _real.cvtColor(rgb, _real.COLOR_RGB2BGR)
    return bgr, _real.cvtColor(bgr, _real.COLOR_BGR2GRAY)


def calls(bgr: np.ndarray, gray: np.ndarray) -> list[Call]:
    """One common use of each calibrated function on these images."""
    h, w = bgr.shape[:2]
    rotation = _real.getRotationMatrix2D((w / 2, h / 2), 17, 0.9)
    kernel = _real.getStructuringElement(_real.MORPH_RECT, (5, 5))
    third = (max(1, w // 3), max(1, h // 3))
    taps = _real.getGaussianKernel(5, 0)
    sharpen = np.array([[0, -1, 0], [-1, 5, -1], [0, -1, 0]], np.float32)
    negative = np.arange(255, -1, -1, dtype=np.uint8)
    return [
        Call("GaussianBlur 5x5 BGR", "GaussianBlur", (bgr, (5, 5), 0), {}),
        Call("blur 5x5 BGR", "blur", (bgr, (5, 5)), {}),
        Call("medianBlur 5 gray", "medianBlur", (gray, 5), {}),
        Call("Sobel dx 16S gray", "Sobel", (gray, _real.CV_16S, 1, 0), {}),
        Call("Laplacian 16S gray", "Laplacian", (gray, _real.CV_16S), {}),
        Call("erode 5x5 gray", "erode", (gray, kernel), {}),
        Call("dilate 5x5 gray", "dilate", (gray, kernel), {}),
        Call("Canny gray", "Canny", (gray, 50, 150), {}),
        Call("cvtColor BGR2GRAY", "cvtColor", (bgr, _real.COLOR_BGR2GRAY), {}),
        Call("cvtColor BGR2RGB", "cvtColor", (bgr, _real.COLOR_BGR2RGB), {}),
        Call("cvtColor BGR2HSV", "cvtColor", (bgr, _real.COLOR_BGR2HSV), {}),
        Call("cvtColor BGR2Lab", "cvtColor", (bgr, _real.COLOR_BGR2Lab), {}),
        Call("resize LINEAR to 1/3", "resize", (bgr, third), {}),
        Call("resize AREA to 1/3", "resize", (bgr, third), {"interpolation": _real.INTER_AREA}),
        Call(
            "resize NEAREST to 1/3",
            "resize",
            (bgr, third),
            {"interpolation": _real.INTER_NEAREST},
        ),
        Call("resize CUBIC to 1/3", "resize", (bgr, third), {"interpolation": _real.INTER_CUBIC}),
        Call("warpAffine LINEAR rotate", "warpAffine", (bgr, rotation, (w, h)), {}),
        Call(
            "warpAffine NEAREST rotate",
            "warpAffine",
            (bgr, rotation, (w, h)),
            {"flags": _real.INTER_NEAREST},
        ),
        Call("threshold BINARY gray", "threshold", (gray, 127, 255, _real.THRESH_BINARY), {}),
        Call(
            "threshold OTSU gray",
            "threshold",
            (gray, 0, 255, _real.THRESH_BINARY | _real.THRESH_OTSU),
            {},
        ),
        Call("equalizeHist gray", "equalizeHist", (gray,), {}),
        Call("addWeighted BGR", "addWeighted", (bgr, 0.7, bgr, 0.3, 0), {}),
        Call("convertScaleAbs BGR", "convertScaleAbs", (bgr,), {"alpha": 1.5, "beta": 10}),
        Call("flip BGR", "flip", (bgr, 1), {}),
        Call("meanStdDev BGR", "meanStdDev", (bgr,), {}),
        Call(
            "dnn.blobFromImage 224",
            "dnn.blobFromImage",
            (bgr, 1 / 255, (224, 224)),
            {"swapRB": True},
        ),
        Call(
            "dnn.blobFromImages 2x224",
            "dnn.blobFromImages",
            ([bgr, bgr[::-1]], 1 / 255, (224, 224)),
            {"swapRB": True},
        ),
        Call("boxFilter 3x3 BGR", "boxFilter", (bgr, -1, (3, 3)), {}),
        Call("sepFilter2D 5-tap BGR", "sepFilter2D", (bgr, -1, taps, taps), {}),
        Call("filter2D 3x3 sharpen BGR", "filter2D", (bgr, -1, sharpen), {}),
        Call("Scharr dx 16S gray", "Scharr", (gray, _real.CV_16S, 1, 0), {}),
        Call("morphologyEx OPEN 5x5 gray", "morphologyEx", (gray, _real.MORPH_OPEN, kernel), {}),
        Call(
            "copyMakeBorder 16 REFLECT_101 BGR",
            "copyMakeBorder",
            (bgr, 16, 16, 16, 16, _real.BORDER_REFLECT_101),
            {},
        ),
        Call("transpose gray", "transpose", (gray,), {}),
        Call("rotate 90 BGR", "rotate", (bgr, _real.ROTATE_90_CLOCKWISE), {}),
        Call("rotate 180 BGR", "rotate", (bgr, _real.ROTATE_180), {}),
        Call("LUT BGR", "LUT", (bgr, negative), {}),
        Call(
            "normalize MINMAX BGR to 32F",
            "normalize",
            (bgr, None, 0.0, 1.0, _real.NORM_MINMAX, _real.CV_32F),
            {},
        ),
        Call("minMaxLoc gray", "minMaxLoc", (gray,), {}),
        Call("countNonZero gray", "countNonZero", (gray,), {}),
        Call("mean BGR", "mean", (bgr,), {}),
        Call("sumElems BGR", "sumElems", (bgr,), {}),
    ]


@dataclass
class Row:
    size: str  # the size class
    call: Call
    gdp: Timing  # gdp's own kernels (dispatch off)
    opencv: Timing
    accelerated: bool  # False: gdp.cv2 falls through to OpenCV for this call


def measure(
    classes: list[str] | None = None, runs: int = 20, only: list[str] | None = None
) -> Iterator[Row]:
    """Each call at each size class, gdp's own kernels against OpenCV, interleaved; rows as
    they are measured. gdp's calls are timed in their steady state: after SIZED_AFTER calls
    and the background compile they start (a hot size's own program, where the function has
    one), which would otherwise run beside the next measurements."""
    import gdp.cv2 as gcv2
    from gdp.cv2 import common

    wanted = classes or [name for name, _, _ in dispatch.SIZE_CLASSES]
    unknown = set(wanted) - {name for name, _, _ in dispatch.SIZE_CLASSES}
    if unknown:
        raise ValueError(f"size classes: expected some of {dispatch.SIZE_CLASSES}, got {unknown}")
    for name, h, w in dispatch.SIZE_CLASSES:
        if name not in wanted:
            continue
        bgr, gray = photo(h, w)
        for call in calls(bgr, gray):
            if only and not any(call.label.startswith(p) for p in only):
                continue
            with own_kernels():
                try:
                    with strict_calls():
                        call.through(gcv2)()
                    accelerated = True
                except common.FallthroughError:
                    accelerated = False
                if accelerated:  # the steady state: a hot size's own program, where it has one
                    for _ in range(engine.SIZED_AFTER):
                        call.through(gcv2)()
                    wait_for_background_compiles()
                timings = compare({"gdp": call.through(gcv2), "opencv": call.through(_real)}, runs)
            yield Row(name, call, timings["gdp"], timings["opencv"], accelerated)


def wait_for_background_compiles() -> None:
    """Join gdp's background compiles (a hot size's own program, started at its SIZED_AFTER-th
    call; a hot shape's specialisation): one running beside a measurement takes a core from it
    (a 1080p threshold read 0.07 ms against its 0.03 while resize's compiled)."""
    for thread in threading.enumerate():
        if thread.name in ("gdp-specialize", "gdp-cv2-sized"):
            thread.join()


@contextlib.contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    """The environment variable `name` set to `value` inside the block, restored after."""
    saved = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            del os.environ[name]
        else:
            os.environ[name] = saved


def own_kernels():
    """Dispatch off inside the block: every accelerated call runs gdp's kernels."""
    return _environment("GDP_CV2_DISPATCH", "0")


def strict_calls():
    """GDP_CV2_STRICT=1 inside the block: a call gdp does not accelerate raises."""
    return _environment("GDP_CV2_STRICT", "1")


def table(rows: list[Row]) -> dict:
    """The dispatch table of these measurements (accelerated calls only)."""
    entries: dict[str, dict[str, dict[str, float]]] = {}
    for row in rows:
        if row.accelerated:
            entries.setdefault(row.call.key, {})[row.size] = {
                "gdp_ms": round(row.gdp.median * 1e3, 4),
                "opencv_ms": round(row.opencv.median * 1e3, 4),
            }
    return {
        "format": dispatch.FORMAT,
        "machine": dispatch.machine(),
        "measured": date.today().isoformat(),
        "entries": entries,
    }


def calibrate(
    classes: list[str] | None = None, runs: int = 20, cache_dir: Path | None = None
) -> tuple[dict, Path]:
    """Measure, store the table where this machine's gdp.cv2 finds it, and start using it."""
    from gdp.progress import progress

    count = len(calls(*photo(8, 8))) * len(classes or dispatch.SIZE_CLASSES)
    rows = list(progress(measure(classes, runs), "gdp calibrate --cv2", total=count))
    found = table(rows)
    path = dispatch.table_path(cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(found, indent=1, sort_keys=True))
    temporary.replace(path)  # never a half-written table
    dispatch.set_dispatch(found)
    return found, path
