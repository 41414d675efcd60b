"""The main job: compile an inference server's preprocessing for the CPU and check it.

A 1920x1080 RGB photo (scikit-image's astronaut, resized) -> bilinear resize to 224x224 -> float
-> ImageNet mean/std -> CHW. gdp compiles it with TVM; the result is checked against TensorFlow
running the same function; then gdp and OpenCV + NumPy are timed side by side (TensorFlow is the
oracle, not a peer: its spinning thread pools would slow whatever runs after it in the loop).
A second process loads the compiled model from the cache to show the cache-load time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

THREADS = os.cpu_count() or 1
os.environ.setdefault("TVM_NUM_THREADS", str(THREADS))

# gdp before TensorFlow: TensorFlow's first import, after gdp's, prints no start-up notices.
import gdp  # noqa: E402

# isort: split
import cv2  # noqa: E402
import numpy as np  # noqa: E402
import skimage.data  # noqa: E402
import tensorflow as tf  # noqa: E402

from gdp.benchmarking import compare, table  # noqa: E402

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)
SIZE = 224


@tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.uint8, name="image")])
def preprocess(image):
    x = tf.cast(image, tf.float32)
    x = tf.image.resize(x[None], (SIZE, SIZE), method="bilinear", antialias=False)[0]
    x = (x / 255.0 - MEAN) / STD
    return {"tensor": tf.transpose(x, [2, 0, 1])}


def opencv_numpy(image: np.ndarray) -> np.ndarray:
    x = cv2.resize(image, (SIZE, SIZE), interpolation=cv2.INTER_LINEAR).astype(np.float32)
    x = (x / 255.0 - MEAN) / STD
    return np.ascontiguousarray(x.transpose(2, 0, 1))


# A serving process: loads the saved graph, takes the 1080p specialisation from the disk cache.
LOAD_CHILD = """
import json, sys, time
import numpy as np
t0 = time.perf_counter()
import gdp
model = gdp.load(sys.argv[1])
model(np.zeros((1080, 1920, 3), np.uint8))
report = model.report()
print(json.dumps({"first_run_s": time.perf_counter() - t0, "cache": report["cache"],
                  "load_s": report["load_s"], "tensorflow_loaded": "tensorflow" in sys.modules}))
"""


def main() -> None:
    tf.config.threading.set_intra_op_parallelism_threads(THREADS)
    cv2.setNumThreads(THREADS)
    photo = cv2.resize(skimage.data.astronaut(), (1920, 1080), interpolation=cv2.INTER_CUBIC)
    print(
        f"input: scikit-image astronaut resized to {photo.shape} {photo.dtype}, {THREADS} threads"
    )

    t0 = time.perf_counter()
    model = gdp.compile(preprocess, target="cpu")
    out = model(photo)
    first_s = time.perf_counter() - t0
    report = model.report()
    print(
        f"gdp.compile + first run: {first_s:.2f} s (backend compile {report['compile_s']:.2f} s, "
        f"cache: {report['cache']}, {report['kernels']} kernels)"
    )

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "preprocess.onnx")
        model.save(path)
        child = subprocess.run(
            [sys.executable, "-c", LOAD_CHILD, path], capture_output=True, text=True, check=True
        )
        loaded = json.loads(child.stdout.strip().splitlines()[-1])
    print(
        f"second process: gdp.load + first run {loaded['first_run_s']:.2f} s (import included), "
        f"compiled code from the {loaded['cache']} cache, "
        f"library load {loaded['load_s'] * 1e3:.1f} ms, "
        f"TensorFlow imported: {loaded['tensorflow_loaded']}"
    )

    want = preprocess(photo)["tensor"].numpy()
    err = float(np.abs(out - want).max())
    ok = out.shape == want.shape and err <= 1e-4
    print(
        f"check against TensorFlow: shape {out.shape}, max abs diff {err:.2e} -> "
        f"{'OK' if ok else 'MISMATCH'}"
    )
    cv_err = float(np.abs(opencv_numpy(photo) - want).max())
    print(f"(OpenCV's fixed-point bilinear differs from TensorFlow by up to {cv_err:.2e})")

    timings = compare(
        {
            "gdp cpu": lambda: model(photo),
            "OpenCV + NumPy": lambda: opencv_numpy(photo),
        },
        runs=30,
    )
    print(table(timings, baseline="OpenCV + NumPy"))
    h = gdp.run_async(model, {"image": photo}, profile=True)
    gdp.sync()
    print(h.profile)
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
