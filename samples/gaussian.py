"""Gaussian blur, 5x5, sigma derived from the kernel size as OpenCV does, on an RGB float image."""

import cv2
import numpy as np
import photos
import tensorflow as tf
import workload

from gdp.ops.image import gaussian_blur

KSIZE = 5


@tf.function(input_signature=[tf.TensorSpec([1080, 1920, 3], tf.float32, name="rgb")])
def program(rgb):
    return {"blurred": gaussian_blur(rgb, KSIZE)}


def inputs() -> dict:
    return {"rgb": photos.photo_1080p().astype(np.float32) / 255.0}


def peer(rgb):
    return {"blurred": cv2.GaussianBlur(rgb, (KSIZE, KSIZE), 0)}


def check(got, want):
    np.testing.assert_allclose(got["blurred"], want["blurred"], rtol=0, atol=1e-5)


def bytes_moved(inp) -> int:
    return 2 * inp["rgb"].nbytes


if __name__ == "__main__":
    workload.main(__import__(__name__))
