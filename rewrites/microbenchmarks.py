"""The graphs a cost profile times (`gdp calibrate`): table 5-1's basic ops, which every profile
records, on float32 data at the table's sizes (1024x2048; GEMV 1024x1024 by a vector; matmul
512^3, a size a CPU measures in well under a second). The forms the measured rules weigh are
declared by the rules themselves (Rewrite.timed); profiles.OPS is these and those."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from gdp.rewrites.rule import Builder, Graph

H, W = 1024, 2048
F32 = TensorProto.FLOAT


def graph(
    nodes: Sequence[onnx.NodeProto],
    inputs: Mapping[str, np.ndarray],
    outputs: Mapping[str, tuple[int, list[int]]],
    elements: int,
    inits: Mapping[str, np.ndarray] | None = None,
) -> Graph:
    """A Graph of `nodes` fed `inputs` (their types and shapes are the arrays'), with `outputs`
    name -> (ONNX element type, shape) and constant `inits`."""
    spec = [
        helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for name, a in inputs.items()
    ]
    results = [helper.make_tensor_value_info(n, t, s) for n, (t, s) in outputs.items()]
    constants = [numpy_helper.from_array(a, name) for name, a in (inits or {}).items()]
    proto = helper.make_graph(list(nodes), "microbenchmark", spec, results, constants)
    return Graph(proto, dict(inputs), elements)


def _rng() -> np.random.Generator:
    return np.random.default_rng(0)


def _unary(op: str, **attrs) -> Builder:
    def build() -> Graph:
        x = _rng().random((H, W), dtype=np.float32)
        out = [W, H] if op == "Transpose" else [H, W]
        node = helper.make_node(op, ["x"], ["z"], **attrs)
        return graph([node], {"x": x}, {"z": (F32, out)}, H * W)

    return build


def _binary(op: str, boolean: bool = False) -> Builder:
    def build() -> Graph:
        rng = _rng()
        x, y = rng.random((H, W), dtype=np.float32), rng.random((H, W), dtype=np.float32)
        if op == "And":
            x, y = x > 0.5, y > 0.5
        out = TensorProto.BOOL if boolean else F32
        node = helper.make_node(op, ["x", "y"], ["z"])
        return graph([node], {"x": x, "y": y}, {"z": (out, [H, W])}, H * W)

    return build


def _reduce_sum() -> Graph:
    x = _rng().random((H, W), dtype=np.float32)
    node = helper.make_node("ReduceSum", ["x", "axes"], ["z"], keepdims=0)
    axes = np.array([0, 1], np.int64)
    return graph([node], {"x": x}, {"z": (F32, [])}, H * W, {"axes": axes})


def _reduce_max() -> Graph:
    x = _rng().random((H, W), dtype=np.float32)
    node = helper.make_node("ReduceMax", ["x"], ["z"], axes=[0, 1], keepdims=0)
    return graph([node], {"x": x}, {"z": (F32, [])}, H * W)


def _matmul(rows: int, n: int) -> Builder:
    """(rows x n) @ (n x n), the right-hand matrix constant: GEMV with one row."""

    def build() -> Graph:
        rng = _rng()
        a, b = rng.random((rows, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
        node = helper.make_node("MatMul", ["a", "b"], ["z"])
        return graph([node], {"a": a}, {"z": (F32, [rows, n])}, n * n, {"b": b})

    return build


BASIC: dict[str, Builder] = {
    "transpose": _unary("Transpose", perm=[1, 0]),
    "abs": _unary("Abs"),
    "add": _binary("Add"),
    "max": _binary("Max"),
    "and": _binary("And", boolean=True),
    "compare": _binary("Greater", boolean=True),
    "reduce_sum": _reduce_sum,
    "reduce_max": _reduce_max,
    "gemv": _matmul(1, 1024),
    "matmul": _matmul(512, 512),
}
