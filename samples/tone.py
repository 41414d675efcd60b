"""ACES filmic tone mapping of every RGB value: f(x) = x(ax+b) / (x(cx+d)+e) on x in [0, 1]."""

import numpy as np
import photos
import tensorflow as tf
import workload

A, B, C, D, E = 2.51, 0.03, 2.43, 0.59, 0.14


@tf.function(input_signature=[tf.TensorSpec([1080, 1920, 3], tf.float32, name="rgb")])
def program(rgb):
    return {"mapped": rgb * (A * rgb + B) / (rgb * (C * rgb + D) + E)}


def inputs() -> dict:
    return {"rgb": photos.photo_1080p().astype(np.float32) / 255.0}


def peer(rgb):
    return {"mapped": rgb * (A * rgb + B) / (rgb * (C * rgb + D) + E)}


def check(got, want):
    np.testing.assert_allclose(got["mapped"], want["mapped"], rtol=1e-5, atol=1e-6)


def bytes_moved(inp) -> int:
    return 2 * inp["rgb"].nbytes


if __name__ == "__main__":
    workload.main(__import__(__name__))
