"""Canny edges as OpenCV computes them, bit for bit: RGB -> gray, 5x5 Gaussian, 3x3 Sobel,
L1 (or L2) magnitude, non-maximum suppression with OpenCV's direction rule, double threshold,
and hysteresis.

The peer is cv2.cvtColor -> cv2.GaussianBlur -> cv2.Canny. gdp runs a compiled program,
`prepare` (everything up to the double threshold, integer arithmetic throughout, on the target),
then hysteresis as OpenCV runs it: a flood fill from the strong pixels through the weak ones,
gdp.runtime.hysteresis's serial TIR kernel on the host CPU.

`make_track` is hysteresis written as dense rounds instead (a TF graph of ROUNDS steps, which
gdp.fixed_point would repeat to the fixed point): the form for a target that must run it as a
graph, kept to export and check that form (tests/runtime/backends/ascend).
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
from gdp.runtime.hysteresis import hysteresis

LOW, HIGH = 50, 150
L2_GRADIENT = False
# Hysteresis rounds per step of make_track's dense form.
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
    target: str = "cpu", low=LOW, high=HIGH, l2_gradient=L2_GRADIENT, **options
) -> workload.Compiled:
    prepare = gdp.compile(make_prepare(low, high, l2_gradient), target=target, **options)

    def run(rgb):
        maps = prepare.submit({"rgb": rgb}, wait=True).result()
        return {"edges": hysteresis(maps["candidates"], maps["strong"])}

    return workload.Compiled(run, [prepare])


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
