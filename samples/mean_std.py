"""Per-channel mean, standard deviation, min and max over a batch of images.

Numerically safe for any batch size: uint8 values and their squares are summed exactly in
integers, and only the final division and square root are floating point (float64).

One pass over the images yields both sums: each value x is packed with its square as
x + x^2 * 2^20 in an int64 and summed along the image row, where the value sums stay below 2^20
(1920 * 255 < 2^19) and so never carry into the square sums (1920 * 255^2 < 2^27). The row sums
are unpacked and summed over rows and images in int64. (Two reductions of one cast would make
the backend store the cast images in full, eight times their size, between them.)
"""

import cv2
import numpy as np
import photos
import tensorflow as tf
import workload

# The packing factor: row sums of uint8 values (< 2^19 for rows up to 2056 pixels) fit below it.
PACK = 1 << 20


@tf.function(input_signature=[tf.TensorSpec([8, 1080, 1920, 3], tf.uint8, name="images")])
def program(images):
    x = tf.cast(images, tf.int64)
    count = tf.cast(tf.reduce_prod(tf.shape(images)[:3]), tf.float64)
    packed = tf.reduce_sum(x + x * x * PACK, axis=2)  # [N, H, C]
    total = tf.cast(tf.reduce_sum(packed % PACK, axis=[0, 1]), tf.float64)
    squares = tf.cast(tf.reduce_sum(packed // PACK, axis=[0, 1]), tf.float64)
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


def opencv_peer(images):
    """cv2.meanStdDev per image (OpenCV sums in float64), combined over the batch through the
    per-image sums; per-channel min and max with cv2.minMaxLoc."""
    count = images.shape[1] * images.shape[2]
    sums = np.zeros(3)
    squares = np.zeros(3)
    low, high = np.full(3, 255, np.uint8), np.zeros(3, np.uint8)
    for image in images:
        mean, std = cv2.meanStdDev(image)
        sums += mean[:, 0] * count
        squares += (std[:, 0] ** 2 + mean[:, 0] ** 2) * count
        for c, channel in enumerate(cv2.split(image)):
            lo, hi, _, _ = cv2.minMaxLoc(channel)
            low[c], high[c] = min(low[c], lo), max(high[c], hi)
    n = count * len(images)
    mean = sums / n
    return {"mean": mean, "std": np.sqrt(squares / n - mean**2), "min": low, "max": high}


def timed_peers(images):
    return {"NumPy": lambda: peer(images), "OpenCV": lambda: opencv_peer(images)}


def check(got, want):
    np.testing.assert_allclose(got["mean"], want["mean"], rtol=1e-12)
    np.testing.assert_allclose(got["std"], want["std"], rtol=1e-9)
    np.testing.assert_array_equal(got["min"], want["min"])
    np.testing.assert_array_equal(got["max"], want["max"])


def bytes_moved(inp) -> int:
    return inp["images"].nbytes


if __name__ == "__main__":
    workload.main(__import__(__name__))
