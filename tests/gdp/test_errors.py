"""Bad input gets a GdpError naming what was wrong, expected and got; nothing is half-written."""

import numpy as np
import pytest
import tensorflow as tf
from onnx import TensorProto, helper

import gdp
from tests.models import affine, affine_oracle


@pytest.fixture(scope="module")
def model():
    return gdp.compile(affine((8, 8, 3)))


def test_unsupported_tf_op_names_op_and_node():
    @tf.function(input_signature=[tf.TensorSpec([4, 4], tf.float32, name="m")])
    def svd(m):
        return tf.linalg.svd(m, compute_uv=False)

    with pytest.raises(gdp.UnsupportedOpError) as info:
        gdp.compile(svd)
    assert info.value.op == "Svd"
    assert "Svd" in str(info.value) and info.value.node


def test_op_the_backend_cannot_import_names_op_and_node():
    graph = helper.make_graph(
        [helper.make_node("Celu", ["x"], ["y"], name="my_celu")],
        "celu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    with pytest.raises(gdp.UnsupportedOpError, match="'Celu' at node 'my_celu'"):
        gdp.compile(proto)
    # The oracle backend runs it.
    x = np.array([[-1, 0], [1, 2]], np.float32)
    expected = np.where(x > 0, x, np.expm1(x))
    np.testing.assert_allclose(gdp.compile(proto, target="reference")(x), expected, rtol=1e-6)


@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda m: m(z=np.zeros((8, 8, 3), np.float32)),
            r"unknown input 'z': expected one of \['x'\]",
        ),
        (
            lambda m: m(np.zeros((8, 8, 4), np.float32)),
            r"input 'x': expected shape float32\[8, 8, 3\], got \(8, 8, 4\)",
        ),
        (
            lambda m: m(np.zeros((8, 8, 3), np.float64)),
            r"input 'x': expected dtype float32, got float64",
        ),
        (lambda m: m(), r"missing input\(s\) \['x'\]"),
        (lambda m: m([[1.0]]), r"input 'x': expected a numpy array"),
        (lambda m: m(np.zeros((8, 8, 3), np.float32), np.zeros(1)), r"expected at most 1 inputs"),
    ],
)
def test_bad_inputs(model, call, match):
    with pytest.raises(gdp.InputError, match=match):
        call(model)


def _bad_buffers():
    readonly = np.zeros((8, 8, 3), np.float32)
    readonly.flags.writeable = False
    strided = np.zeros((8, 8, 6), np.float32)[:, :, ::2]
    return [
        (
            {"y": np.zeros((8, 8), np.float32)},
            r"output 'y': expected shape float32\[8, 8, 3\], got \(8, 8\)",
        ),
        (
            {"y": np.zeros((8, 8, 3), np.float16)},
            r"output 'y': expected dtype float32, got float16",
        ),
        ({"y": readonly}, r"output 'y': the array is read-only"),
        ({"y": strided}, r"output 'y': expected a C-contiguous array"),
        ({"y": [0.0]}, r"output 'y': expected a numpy.ndarray"),
        ({"w": np.zeros((8, 8, 3), np.float32)}, r"unknown output 'w'"),
    ]


@pytest.mark.parametrize("outputs, match", _bad_buffers())
def test_bad_output_buffers_are_refused_before_any_work(model, outputs, match):
    sentinel = {k: v.copy() for k, v in outputs.items() if isinstance(v, np.ndarray)}
    x = np.ones((8, 8, 3), np.float32)
    with pytest.raises(gdp.OutputBufferError, match=match):
        gdp.run_async(model, {"x": x}, outputs)
    for k, v in sentinel.items():
        np.testing.assert_array_equal(outputs[k], v)  # nothing written
    gdp.sync()  # nothing was queued, nothing failed
    np.testing.assert_array_equal(model(x), affine_oracle(x))  # still usable


def test_failed_call_writes_no_partial_output():
    """A two-output model where one buffer is bad: the good buffer stays untouched."""
    graph = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Abs", ["x"], ["b"])],
        "two",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, [4]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [4]),
        ],
    )
    m = gdp.compile(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    good = np.full(4, 7, np.float32)
    with pytest.raises(gdp.OutputBufferError):
        gdp.run_async(m, {"x": np.ones(4, np.float32)}, {"a": good, "b": np.zeros(4, np.int32)})
    np.testing.assert_array_equal(good, 7)


def test_unknown_target_and_option():
    with pytest.raises(
        gdp.TargetError,
        match=(
            r"target: expected one of \['cpu', 'gpu', 'npu', 'npu-emulate', 'reference'\],"
            r" got 'tpu'"
        ),
    ):
        gdp.compile(affine(), target="tpu")
    with pytest.raises(gdp.TargetError, match="option 'fast'"):
        gdp.compile(affine(), fast=True)


def test_bad_programs(tmp_path):
    with pytest.raises(gdp.FrontendError, match="does not exist"):
        gdp.compile(str(tmp_path / "missing.onnx"))
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    with pytest.raises(gdp.FrontendError, match="not a readable ONNX model"):
        gdp.compile(str(tmp_path / "junk.onnx"))
    with pytest.raises(gdp.FrontendError, match="has no input_signature"):
        gdp.compile(lambda x: x)
    with pytest.raises(gdp.FrontendError, match="got int"):
        gdp.compile(3)
    with pytest.raises(gdp.GdpError, match="expected a model from gdp.compile"):
        gdp.run_async("model", {})


def test_errors_are_one_family():
    for cls in (
        gdp.FrontendError,
        gdp.UnsupportedOpError,
        gdp.InputError,
        gdp.OutputBufferError,
        gdp.TargetError,
        gdp.CompileError,
        gdp.ExecutionError,
    ):
        assert issubclass(cls, gdp.GdpError)
    assert issubclass(gdp.InputError, ValueError)
