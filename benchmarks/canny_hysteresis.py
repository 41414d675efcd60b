"""Canny's hysteresis, flood fill against dense rounds: gdp.cv2.Canny (a compiled program up to
the double threshold, then gdp.runtime.hysteresis's TIR flood fill) against the path it
replaced (the same program, then 8 dense hysteresis rounds per compiled step repeated by
gdp.fixed_point until nothing changes) and against cv2.Canny, on a 1080p gray photo
(skimage's astronaut resized to 1920x1080), thresholds 50/150. Interleaved in one process;
medians (and minima) of 20 calls after warm-up. Dispatch is off: gdp's own kernels run.

    python benchmarks/canny_hysteresis.py [--runs 20]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ["GDP_CV2_DISPATCH"] = "0"

import cv2
import numpy as np
import skimage.data

import gdp
import gdp.cv2 as gcv2
from gdp.cv2 import engine, filters

PARAMS = dict(l2=False, aperture=3)


def _rounds(candidates, strong, steps):
    return filters.ops_image.hysteresis_step(candidates, strong, steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    rgb = cv2.resize(skimage.data.astronaut(), (1920, 1080), interpolation=cv2.INTER_LINEAR)
    gray = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    low, high = filters._canny_thresholds(50, 150, False)
    values = {"low": low, "high": high}

    def prepare():
        return engine.run(
            "Canny.prepare", filters._canny_prepare, [gray], PARAMS, outputs=2, values=values
        )

    def dense_rounds():
        candidates, strong = prepare()
        maps = {"src0": candidates, "src1": strong}
        track = engine.program("Canny.track", _rounds, list(maps.values()), {"steps": 8})
        tracked, _ = gdp.fixed_point(track, maps, carry={"src1": "dst0"})
        return tracked["dst0"] * np.uint8(255)

    calls = {
        "gdp.cv2.Canny (flood fill)": lambda: gcv2.Canny(gray, 50, 150),
        "dense rounds (before)": dense_rounds,
        "their prepare program": prepare,
        "cv2.Canny": lambda: cv2.Canny(gray, 50, 150),
    }
    want = cv2.Canny(gray, 50, 150)
    for name in ("gdp.cv2.Canny (flood fill)", "dense rounds (before)"):
        if not np.array_equal(calls[name](), want):
            raise SystemExit(f"{name}: edges differ from cv2.Canny's")
    for _ in range(3):
        for call in calls.values():
            call()
    times = {name: [] for name in calls}
    for _ in range(args.runs):
        for name, call in calls.items():
            t0 = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - t0)
    opencv = np.median(times["cv2.Canny"])
    for name, runs in times.items():
        median = np.median(runs)
        print(
            f"{name:28s} median {median * 1e3:7.2f} ms  min {min(runs) * 1e3:7.2f} ms"
            f"  {median / opencv:5.2f}x cv2.Canny's time"
        )
    print(f"cv2 threads {cv2.getNumThreads()}, {os.cpu_count()} CPUs, load {os.getloadavg()}")


if __name__ == "__main__":
    main()
