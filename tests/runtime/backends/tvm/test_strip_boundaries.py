"""The cpu's row-strip schedule under different thread counts and strip boundaries.

Strips run in parallel and each computes the halo rows of its sources itself; a source buffer
shared between strips, or a halo one row short, shows only on the rows next to a strip
boundary and, for a race, only on some runs. So each program runs at sizes that move the
boundaries (a prime row count gives one-row strips, 480 and 481 rows give strips of different
heights) in child processes with 1, 2 and 4 TVM threads (the pool is sized once per process),
several times each, against TensorFlow's or OpenCV's result computed here. The same programs
with free height and width run as one shape-generic model at every size (strips and vectors
sized at run time), or as their per-shape fallback where the graph does not compile generically.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import cv2 as real_cv2
import numpy as np
import pytest
import skimage.data
import tensorflow as tf

import gdp
from tests import ROOT

SIZES = [(97, 131), (480, 640), (481, 640)]
# The shape-generic Gaussian also at widths around its row's border parts (two reflected
# pixels each side, the middle of plain loads between: rows narrower than both borders, exactly
# both, one pixel of middle) and around the vector widths, and at heights of fewer rows than
# strips.
GENERIC_SIZES = [*SIZES, *((9, w) for w in [*range(3, 21), 63, 64, 65]), (3, 17), (4, 64)]
THREADS = [1, 2, 4]
RUNS = 5

# Run in each child: load every saved model (compiled code comes from the parent's cache),
# run it RUNS times and report, per case, the worst error over the runs and the rows that
# differed in any run.
_CHILD = """
import json, sys
import numpy as np
import gdp
cases, runs = json.loads(sys.argv[1]), int(sys.argv[2])
report = {}
for case in cases:
    data = np.load(case["npz"])
    model = gdp.load(case["onnx"])
    worst, rows = 0.0, set()
    for _ in range(runs):
        got = model(data["x"])
        got = list(got.values()) if isinstance(got, dict) else [got]
        for k, out in enumerate(got):
            want = data[f"want{k}"]
            err = np.abs(out.astype(np.float64) - want)
            worst = max(worst, float(err.max()))
            rows |= set(np.argwhere(err > case["atol"])[:, -3].tolist())
    report[case["name"]] = [worst, sorted(rows)[:8]]
print(json.dumps(report))
"""


def _photo(shape: tuple[int, int]) -> np.ndarray:
    photo = skimage.data.astronaut()
    image = real_cv2.resize(photo, shape[::-1], interpolation=real_cv2.INTER_AREA)
    return image.astype(np.float32) / 255


def _gradients(shape):
    @tf.function(input_signature=[tf.TensorSpec([*shape, 3], tf.float32, name="img")])
    def gradients(img):
        dy, dx = tf.image.image_gradients(img[None])
        return dy[0], dx[0]

    return gradients


def _gaussian(shape):
    """A 5x5 Gaussian as a TF user writes it: reflected borders (OpenCV's default), then a
    depthwise convolution with the outer product of OpenCV's 1-D kernel."""
    taps = real_cv2.getGaussianKernel(5, 0).astype(np.float32)
    kernel = np.tile((taps @ taps.T)[:, :, None, None], (1, 1, 3, 1))

    @tf.function(input_signature=[tf.TensorSpec([*shape, 3], tf.float32, name="img")])
    def gaussian(img):
        padded = tf.pad(img[None], [[0, 0], [2, 2], [2, 2], [0, 0]], mode="REFLECT")
        return tf.nn.depthwise_conv2d(padded, kernel, [1, 1, 1, 1], "VALID")[0]

    return gaussian


def _cases(tmp_path) -> list[dict]:
    """Compile every program at every size here; write the models and their oracles."""
    cases = []
    for shape in SIZES:
        x = _photo(shape)
        programs = {
            # tf.image: a one-row shift down and across, the bottom row and right column zero
            "image_gradients": (
                gdp.compile(_gradients(shape), target="cpu"),
                [t.numpy() for t in _gradients(shape)(x)],
                0.0,
            ),
            # a 5x5 stencil with reflected borders: halos of two rows each side
            "GaussianBlur": (
                gdp.compile(_gaussian(shape), target="cpu"),
                [real_cv2.GaussianBlur(x, (5, 5), 0)],
                1e-5,
            ),
        }
        for name, (model, want, atol) in programs.items():
            tag = f"{name}_{shape[0]}x{shape[1]}"
            model.save(tmp_path / f"{tag}.onnx")
            np.savez(tmp_path / f"{tag}.npz", x=x, **{f"want{k}": w for k, w in enumerate(want)})
            cases.append(
                {
                    "name": tag,
                    "onnx": str(tmp_path / f"{tag}.onnx"),
                    "npz": str(tmp_path / f"{tag}.npz"),
                    "atol": atol,
                }
            )
    # The Gaussian with free height and width: one shape-generic model for every size (strips
    # and vectors sized at run time), or, where the graph does not compile generically, its
    # per-shape fallback; the child loads it once per size. (image_gradients with free sizes
    # compiles neither way yet: TVM's 'emit_te now only supports Tensor that has ShapeExpr
    # shape', per shape too.)
    free = (None, None)
    for name, program in (("GaussianBlur", _gaussian(free)),):
        model = gdp.compile(program, target="cpu")
        # Exercises the generic kernels (a fallback would still be exact, but not tested here).
        assert model.report()["shapes_mode"] == "generic", model.report()["generic_error"]
        path = tmp_path / f"{name}_generic.onnx"
        model.save(path)
        for shape in GENERIC_SIZES:
            x = _photo(shape)
            model(x)  # the fallback's per-shape compile, into the cache the child reads
            want = [real_cv2.GaussianBlur(x, (5, 5), 0)]
            tag = f"{name}_generic_{shape[0]}x{shape[1]}"
            np.savez(tmp_path / f"{tag}.npz", x=x, **{f"want{k}": w for k, w in enumerate(want)})
            cases.append(
                {
                    "name": f"{tag} ({model.report()['shapes_mode']})",
                    "onnx": str(path),
                    "npz": str(tmp_path / f"{tag}.npz"),
                    "atol": 1e-5,
                }
            )
    return cases


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    return _cases(tmp_path_factory.mktemp("strips"))


@pytest.mark.parametrize("threads", THREADS)
def test_row_strips_match_the_oracle_at_every_thread_count_and_strip_boundary(cases, threads):
    env = {**os.environ, "TVM_NUM_THREADS": str(threads)}
    env.pop("OMP_NUM_THREADS", None)
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(cases), str(RUNS)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    wrong = {
        name: f"max error {worst:g}, rows {rows}" for name, (worst, rows) in report.items() if rows
    }
    assert not wrong, f"{threads} threads: {wrong}"
