"""Detector preprocessing (YOLO style): uint8 BGR 1080p -> letterbox into 640x640 (resize to
640x360 keeping the aspect ratio, grey 114 bars above and below) -> RGB -> float /255 -> CHW."""

import cv2
import numpy as np
import photos
import tensorflow as tf
import workload

SIZE, H, W = 640, 360, 640
TOP = (SIZE - H) // 2
PAD = 114.0


@tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.uint8, name="bgr")])
def program(bgr):
    rgb = tf.reverse(tf.cast(bgr, tf.float32), axis=[2])
    x = tf.image.resize(rgb[None], (H, W), method="bilinear", antialias=False)[0]
    x = tf.pad(x, [[TOP, SIZE - H - TOP], [0, 0], [0, 0]], constant_values=PAD)
    return {"tensor": tf.transpose(x / 255.0, [2, 0, 1])}


def inputs() -> dict:
    return {"bgr": np.ascontiguousarray(photos.photo_1080p()[:, :, ::-1])}


def _letterbox(resized: np.ndarray) -> np.ndarray:
    out = np.full((SIZE, SIZE, 3), PAD, np.float32)
    out[TOP : TOP + H] = resized
    return np.ascontiguousarray((out[:, :, ::-1] / 255.0).transpose(2, 0, 1))


def peer(bgr):
    """The same arithmetic in OpenCV on float input (what the check compares with)."""
    resized = cv2.resize(bgr.astype(np.float32), (W, H), interpolation=cv2.INTER_LINEAR)
    return {"tensor": _letterbox(resized)}


def timed_peers(bgr):
    def opencv_numpy():
        x = cv2.resize(bgr, (W, H), interpolation=cv2.INTER_LINEAR)
        x = cv2.copyMakeBorder(
            x, TOP, SIZE - H - TOP, 0, 0, cv2.BORDER_CONSTANT, value=(114, 114, 114)
        )
        x = cv2.cvtColor(x, cv2.COLOR_BGR2RGB)
        return np.ascontiguousarray((x.astype(np.float32) / 255.0).transpose(2, 0, 1))

    return {"OpenCV + NumPy": opencv_numpy}


def check(got, want):
    np.testing.assert_allclose(got["tensor"], want["tensor"], rtol=0, atol=1e-5)


def bytes_moved(inp) -> int:
    return inp["bgr"].nbytes + 3 * SIZE * SIZE * 4


if __name__ == "__main__":
    workload.main(__import__(__name__))
