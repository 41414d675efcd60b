"""An inference server's preprocessing: uint8 BGR HWC 1080p -> 224x224 bilinear -> RGB -> float
-> ImageNet mean/std -> CHW float32."""

import cv2
import numpy as np
import photos
import tensorflow as tf
import workload

SIZE = 224
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


@tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.uint8, name="bgr")])
def program(bgr):
    rgb = tf.reverse(tf.cast(bgr, tf.float32), axis=[2])
    x = tf.image.resize(rgb[None], (SIZE, SIZE), method="bilinear", antialias=False)[0]
    return {"tensor": tf.transpose((x / 255.0 - MEAN) / STD, [2, 0, 1])}


def inputs() -> dict:
    return {"bgr": np.ascontiguousarray(photos.photo_1080p()[:, :, ::-1])}


def peer(bgr):
    """The same arithmetic in OpenCV on float input (what the check compares with)."""
    x = cv2.resize(bgr.astype(np.float32), (SIZE, SIZE), interpolation=cv2.INTER_LINEAR)
    x = (x[:, :, ::-1] / 255.0 - MEAN) / STD
    return {"tensor": np.ascontiguousarray(x.transpose(2, 0, 1))}


def timed_peers(bgr):
    """What servers run today: OpenCV's uint8 resize then NumPy, and cv2.dnn.blobFromImage."""

    def opencv_numpy():
        x = cv2.resize(bgr, (SIZE, SIZE), interpolation=cv2.INTER_LINEAR)
        x = cv2.cvtColor(x, cv2.COLOR_BGR2RGB).astype(np.float32)
        return np.ascontiguousarray(((x / 255.0 - MEAN) / STD).transpose(2, 0, 1))

    def blob_from_image():
        blob = cv2.dnn.blobFromImage(
            bgr, 1 / 255.0, (SIZE, SIZE), mean=(0, 0, 0), swapRB=True, crop=False
        )
        return (blob[0] - MEAN[:, None, None]) / STD[:, None, None]

    return {"OpenCV + NumPy": opencv_numpy, "cv2.dnn.blobFromImage": blob_from_image}


def check(got, want):
    # OpenCV's float bilinear weights differ from TF's in the last bits: up to 1.2e-4 here, i.e.
    # 0.007 grey levels once /255 and /std are undone.
    np.testing.assert_allclose(got["tensor"], want["tensor"], rtol=0, atol=5e-4)


def bytes_moved(inp) -> int:
    return inp["bgr"].nbytes + 3 * SIZE * SIZE * 4


if __name__ == "__main__":
    workload.main(__import__(__name__))
