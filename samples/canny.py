"""Canny edges as OpenCV computes them, bit for bit: RGB -> gray, 5x5 Gaussian, 3x3 Sobel,
L1 (or L2) magnitude, non-maximum suppression with OpenCV's direction rule, double threshold,
and hysteresis run to its fixed point.

The peer is cv2.cvtColor -> cv2.GaussianBlur -> cv2.Canny. gdp runs two compiled programs:
`prepare` (everything up to the double threshold, integer arithmetic throughout) and `track`
(ROUNDS rounds of hysteresis), which gdp.fixed_point repeats until no edge pixel changes.
"""

import cv2
import numpy as np
import photos
import tensorflow as tf
import workload

import gdp
from gdp.ops.image import (
    canny_candidates,
    canny_thresholds,
    gaussian_blur_u8,
    hysteresis_step,
    rgb_to_gray_u8,
    sobel_3x3,
)

LOW, HIGH = 50, 150
L2_GRADIENT = False
# Hysteresis rounds per compiled step: more rounds per run amortise the run's overhead and the
# fixed-point test; the driver repeats the step until nothing changes either way.
ROUNDS = 8


def make_prepare(low=LOW, high=HIGH, l2_gradient=L2_GRADIENT):
    lo, hi = canny_thresholds(low, high, l2_gradient)

    @tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.uint8, name="rgb")])
    def prepare(rgb):
        dx, dy = sobel_3x3(gaussian_blur_u8(rgb_to_gray_u8(rgb)))
        candidates, strong = canny_candidates(dx, dy, lo, hi, l2_gradient)
        return {"candidates": candidates, "strong": strong}

    return prepare


def make_track(rounds=ROUNDS):
    @tf.function(
        input_signature=[
            tf.TensorSpec([None, None], tf.uint8, name="candidates"),
            tf.TensorSpec([None, None], tf.uint8, name="strong"),
        ]
    )
    def track(candidates, strong):
        return {"tracked": hysteresis_step(candidates, strong, rounds)}

    return track


def build(
    target: str = "cpu", low=LOW, high=HIGH, l2_gradient=L2_GRADIENT, rounds=ROUNDS, **options
) -> workload.Compiled:
    prepare = gdp.compile(make_prepare(low, high, l2_gradient), target=target, **options)
    step = gdp.compile(make_track(rounds), target=target, **options)

    def run(rgb):
        maps = prepare.submit({"rgb": rgb}, wait=True).result()
        final, _ = gdp.fixed_point(step, maps, carry={"strong": "tracked"})
        return {"edges": final["tracked"] * np.uint8(255)}

    return workload.Compiled(run, [prepare, step])


def inputs() -> dict:
    return {"rgb": photos.photo_1080p()}


def peer(rgb, low=LOW, high=HIGH, l2_gradient=L2_GRADIENT):
    gray = cv2.GaussianBlur(cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY), (5, 5), 0)
    return {"edges": cv2.Canny(gray, low, high, L2gradient=l2_gradient)}


def check(got, want):
    differ = int(np.count_nonzero(got["edges"] != want["edges"]))
    assert differ == 0, f"{differ} edge pixels differ from OpenCV's"


def bytes_moved(inp) -> int:
    return inp["rgb"].nbytes + inp["rgb"].nbytes // 3  # RGB in, edge map out


if __name__ == "__main__":
    workload.main(__import__(__name__))
