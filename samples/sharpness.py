"""Sharpness of a photo: RGB -> gray, 3x3 Laplacian, variance of the Laplacian (one number)."""

import cv2
import numpy as np
import photos
import tensorflow as tf
import workload

from gdp.ops.image import laplacian, rgb_to_gray


@tf.function(input_signature=[tf.TensorSpec([1080, 1920, 3], tf.uint8, name="rgb")])
def program(rgb):
    lap = laplacian(rgb_to_gray(tf.cast(rgb, tf.float32)))[:, :, 0]
    # Mean over rows, then over the row means: float32 sums of 1920 and 1080 terms stay accurate,
    # where one sum of 2 million terms would not.
    mean = tf.reduce_mean(tf.reduce_mean(lap, axis=1))
    variance = tf.reduce_mean(tf.reduce_mean(tf.square(lap - mean), axis=1))
    return {"sharpness": variance}


def inputs() -> dict:
    return {"rgb": photos.photo_1080p()}


def peer(rgb):
    gray = cv2.cvtColor(rgb.astype(np.float32), cv2.COLOR_RGB2GRAY)
    _, std = cv2.meanStdDev(cv2.Laplacian(gray, cv2.CV_32F))
    return {"sharpness": np.float32(std[0, 0] ** 2)}


def check(got, want):
    np.testing.assert_allclose(got["sharpness"], want["sharpness"], rtol=1e-4)


def bytes_moved(inp) -> int:
    return inp["rgb"].nbytes


if __name__ == "__main__":
    workload.main(__import__(__name__))
