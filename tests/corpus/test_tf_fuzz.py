"""Random small TF programs (tf_fuzz_cases.py: tf.image, tf.nn and tf.math steps as their docs
write them, fixed or free image sizes) on the cpu target against TensorFlow: each gives TF's
result within float32 rounding, or a GdpError; never a crash (each batch runs in a child
process, so a crash is this test's failure). Fixed seeds: a quick batch here, the long run
under `-m slow`. Two refusals pass: ResizeArea and ResizeBicubic over free dimensions (a
documented refusal: "give it a static shape"), and a program TF itself cannot trace (a VALID
window larger than the image).

Regressions found by it: seed 61, onnxscript's Clip(Clip(x)) fusion intersecting disjoint
intervals (rewrites/specialize.py leaves it out); seed 173, TVM's SAME MaxPool pads over a free
size (relax_import.explicit_max_pool_pads)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import gdp
from tests.children import run_cases

HERE = Path(__file__).resolve().parent


def _run(seeds: list[int], tmp_path) -> list[dict]:
    cases = run_cases(HERE / "tf_fuzz_cases.py", seeds, seeds, tmp_path / "cache")
    failures = [c for c in cases if c["result"] in ("mismatch", "error")]
    assert not failures, json.dumps(failures, indent=1)
    refused = [c for c in cases if c["result"] == "refused"]
    for case in refused:  # the documented refusal, or TF's own of the program,
        # and a VALID window larger than the image: TF refuses it where the sizes are known at
        # trace time, and past a central_crop (sizes known only at run) TF's kernel returns its
        # input unchanged (seed 174); gdp's compile refuses it
        expected = ("give it a static shape", "could not be traced", "negative output shape")
        assert any(e in case["error"] for e in expected), json.dumps(case, indent=1)
    return cases


def test_tf_fuzz_quick(tmp_path):
    _run([*range(12), 61, 173], tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("batch", range(6))
def test_tf_fuzz_long(batch, tmp_path):
    _run(list(range(100 + 50 * batch, 150 + 50 * batch)), tmp_path)


@pytest.mark.parametrize(
    "program",
    [
        lambda x: tf.clip_by_value(tf.clip_by_value(x, -0.35, 0.15), 0.5, 1.0),
        lambda x: tf.clip_by_value(tf.clip_by_value(x, 0.5, 1.0), -0.35, 0.15),
        lambda x: tf.nn.relu(tf.clip_by_value(x, -1.0, -0.25)),
        lambda x: tf.clip_by_value(tf.nn.relu(x), -1.0, -0.25),
        lambda x: tf.clip_by_value(tf.clip_by_value(x, -0.5, 0.5), 0.25, 1.0),
    ],
    ids=["disjoint-above", "disjoint-below", "relu-of-negative-clip", "clip-of-relu", "overlap"],
)
def test_successive_clips_as_tf(program):
    x = np.linspace(-1.5, 1.5, 24, dtype=np.float32).reshape(2, 4, 3)
    fn = tf.function(program, input_signature=[tf.TensorSpec(x.shape, tf.float32)])
    got = gdp.compile(fn, target="cpu", verify=False)(x)
    np.testing.assert_array_equal(np.asarray(got), fn(x).numpy())
