"""Random small ONNX graphs (onnx_fuzz_cases.py: elementwise, resize, pool, reduce and gather
ops, some ending in Clip) on the cpu target against onnxruntime: each gives the same result
within tolerance, or a GdpError; never a crash (every batch runs in a child process, so a crash
is this test's failure). Fixed seeds: a quick batch here, the long run under `-m slow`.
Regressions found by it: Resize with scales whose product is not whole (relax_import's
exact_resize_scales: seeds 1, 10, 11, 14, 15, 23 and 26 were off by up
to 5, 5 and 28 refused by TVM)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.children import run_cases

HERE = Path(__file__).resolve().parent
# Seeds whose graphs gdp refuses with a GdpError (a documented refusal, not a mismatch).
KNOWN_REFUSALS: dict[int, str] = {}


def _run(seeds: list[int], tmp_path) -> list[dict]:
    return run_cases(HERE / "onnx_fuzz_cases.py", seeds, seeds, tmp_path / "cache")


def _check(cases: list[dict]) -> None:
    mismatches = [c for c in cases if c["result"] in ("mismatch", "error")]
    assert not mismatches, json.dumps(mismatches, indent=1)


def test_onnx_fuzz_quick(tmp_path):
    _check(_run(list(range(12)), tmp_path))


# Regressions: graphs that mismatched (or were refused) before exact_resize_scales (270: a Resize
# after a rewritten one, sized from ONNX's float64 inference, 12, not the rewrite's 13).
REGRESSIONS = [1, 5, 10, 11, 14, 15, 23, 26, 28, 150, 157, 270]


def test_onnx_fuzz_regressions(tmp_path):
    _check(_run(REGRESSIONS, tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("batch", range(8))
def test_onnx_fuzz_long(batch, tmp_path):
    _check(_run(list(range(100 + 25 * batch, 125 + 25 * batch)), tmp_path))


@pytest.mark.parametrize(
    "mode,kernel,stride",
    [
        ("SAME_UPPER", 1, 2),
        ("SAME_UPPER", 2, 2),
        ("SAME_UPPER", 3, 2),
        ("SAME_UPPER", 2, 3),
        ("SAME_LOWER", 2, 2),
        ("SAME_LOWER", 3, 2),
    ],
)
def test_max_pool_same_padding(mode, kernel, stride):
    """TVM's importer halved a SAME pad of -1 with floor division: the windows began a pixel
    early (tf.nn.max_pool2d(x, 1, 2, "SAME") over an even width, which tf2onnx writes as
    SAME_UPPER where the size is free; TF fuzz seed 173). Oracles: TF's SAME (SAME_UPPER), and
    onnxruntime for SAME_LOWER where the pad is not negative (onnxruntime refuses that)."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    import tensorflow as tf
    from onnx import TensorProto, helper

    import gdp

    x = np.random.default_rng(kernel).random((1, 2, 7, 36), dtype=np.float32)
    node = helper.make_node(
        "MaxPool", ["x"], ["y"], auto_pad=mode, kernel_shape=[kernel] * 2, strides=[stride] * 2
    )
    graph = helper.make_graph(
        [node],
        "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model)
    if mode == "SAME_UPPER":
        nhwc = tf.nn.max_pool2d(x.transpose(0, 2, 3, 1), kernel, stride, "SAME")
        want = nhwc.numpy().transpose(0, 3, 1, 2)
    else:
        want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    got = np.asarray(gdp.compile(model, target="cpu")({"x": x}))
    np.testing.assert_array_equal(got, want)
