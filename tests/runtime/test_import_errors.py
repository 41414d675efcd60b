"""TVM's Relax ONNX importer print()s the node it fails on to stdout: gdp keeps that out of the
user's stdout (a pipe of results, `gdp export`'s JSON) and puts it in the CompileError."""

import numpy as np
import onnx
import onnx.helper as oh
import pytest

from gdp.errors import CompileError
from gdp.runtime.backends.tvm import relax_import


def squeeze_of_a_free_axis() -> onnx.ModelProto:
    """Squeeze of an axis of run-time extent: TVM cannot prove it is 1 and refuses."""
    x = oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n", 3])
    y = oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    axes = onnx.numpy_helper.from_array(np.array([0], np.int64), "axes")
    graph = oh.make_graph([oh.make_node("Squeeze", ["x", "axes"], ["y"])], "g", [x], [y], [axes])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


def test_a_failed_import_prints_nothing_and_names_the_node(capfd):
    with pytest.raises(CompileError, match="Squeeze") as err:
        relax_import.import_onnx(squeeze_of_a_free_axis())
    out, _ = capfd.readouterr()
    assert out == ""
    assert "Error converting operator Squeeze" in str(err.value)


def test_an_error_without_a_message_is_named_by_where_it_was_raised():
    """A bare `assert` in one of TVM's Python passes (its Reshape legalisation, on the graph
    tf.math.bincount converts to) raised an AssertionError without a message, and the
    CompileError ended in ': ' and nothing else."""
    from gdp.runtime.backends.tvm.backend import _described

    def legalize():
        raise AssertionError  # what a bare assert raises (pytest rewrites asserts in tests)

    try:
        legalize()
    except AssertionError as err:
        described = _described(err)
    assert described.startswith("AssertionError at ")
    assert described.endswith(
        f"test_import_errors.py:{legalize.__code__.co_firstlineno + 1} in legalize"
    )
    assert _described(ValueError("bad shape")) == "bad shape"


def test_an_output_imported_in_another_type_is_refused():
    """TVM's OneHot converter made float32 one-hots float64: the arrays returned would not be
    of the type the graph declares. An import whose outputs' types differ is refused."""
    x = oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])
    y = oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3])
    graph = oh.make_graph([oh.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    mod = relax_import.import_onnx(model)
    relax_import.check_output_types(model, mod)  # the same types: accepted
    model.graph.output[0].type.tensor_type.elem_type = onnx.TensorProto.DOUBLE
    with pytest.raises(
        CompileError, match="made output 'y' float32 where the graph declares float64"
    ):
        relax_import.check_output_types(model, mod)
