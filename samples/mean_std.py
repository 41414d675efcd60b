"""Per-channel mean, standard deviation, min and max over a batch of images.

Numerically safe for any batch size: uint8 values are summed exactly in int64 (sums and sums of
squares), and only the final division and square root are floating point (float64).
"""

import numpy as np
import photos
import tensorflow as tf
import workload


@tf.function(input_signature=[tf.TensorSpec([8, 1080, 1920, 3], tf.uint8, name="images")])
def program(images):
    wide = tf.cast(images, tf.int64)
    count = tf.cast(tf.reduce_prod(tf.shape(images)[:3]), tf.float64)
    total = tf.cast(tf.reduce_sum(wide, axis=[0, 1, 2]), tf.float64)
    squares = tf.cast(tf.reduce_sum(wide * wide, axis=[0, 1, 2]), tf.float64)
    mean = total / count
    return {
        "mean": mean,
        "std": tf.sqrt(squares / count - mean * mean),
        "min": tf.reduce_min(images, axis=[0, 1, 2]),
        "max": tf.reduce_max(images, axis=[0, 1, 2]),
    }


def inputs() -> dict:
    return {"images": photos.batch_1080p(8)}


def peer(images):
    pixels = images.reshape(-1, 3)
    return {
        "mean": pixels.mean(axis=0),
        "std": pixels.std(axis=0),
        "min": pixels.min(axis=0),
        "max": pixels.max(axis=0),
    }


def check(got, want):
    np.testing.assert_allclose(got["mean"], want["mean"], rtol=1e-12)
    np.testing.assert_allclose(got["std"], want["std"], rtol=1e-9)
    np.testing.assert_array_equal(got["min"], want["min"])
    np.testing.assert_array_equal(got["max"], want["max"])


def bytes_moved(inp) -> int:
    return inp["images"].nbytes


if __name__ == "__main__":
    workload.main(__import__(__name__))
