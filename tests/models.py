"""Small ONNX graphs built with onnx.helper, for tests that need no TensorFlow."""

import numpy as np
import onnx
from onnx import TensorProto, helper


def affine(shape=(None, None, 3), name="x", scale=2.0, shift=1.0) -> onnx.ModelProto:
    """y = x * scale + shift, float32; the oracle is the same NumPy expression."""
    dims = [f"d{i}" if d is None else d for i, d in enumerate(shape)]
    graph = helper.make_graph(
        [
            helper.make_node("Mul", [name, "scale"], ["scaled"]),
            helper.make_node("Add", ["scaled", "shift"], ["y"]),
        ],
        "affine",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)],
        initializer=[
            helper.make_tensor("scale", TensorProto.FLOAT, [], [scale]),
            helper.make_tensor("shift", TensorProto.FLOAT, [], [shift]),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def affine_oracle(x: np.ndarray, scale=2.0, shift=1.0) -> np.ndarray:
    return x * np.float32(scale) + np.float32(shift)
