"""Random small ONNX graphs (elementwise, resize, pool, reduce, gather ops) for the fuzz test
(test_onnx_fuzz.py), and the check of one against onnxruntime, run in a child process: a graph
is built from a seed alone, so a failure is reproduced by its seed."""

from __future__ import annotations

import json
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

OPSET = 18
UNARY = ("Relu", "Abs", "Neg", "Sigmoid", "Tanh", "Floor", "Ceil", "Clip", "LeakyRelu")
BINARY = ("Add", "Sub", "Mul", "Max", "Min")
SCALES = (0.5, 0.6, 0.75, 1.3, 1.5, 1.7, 2.0, 2.5)
COORDINATES = ("half_pixel", "pytorch_half_pixel", "asymmetric", "align_corners")


class _Graph:
    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, stem: str) -> str:
        self.count += 1
        return f"{stem}{self.count}"

    def const(self, value: np.ndarray) -> str:
        name = self.name("c")
        self.inits.append(onnx.numpy_helper.from_array(value, name))
        return name

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out


def _step(g: _Graph, value: str, shape: list[int], kinds: tuple[str, ...]) -> tuple[str, list]:
    rng = g.rng
    kind = kinds[rng.integers(len(kinds))]
    if kind == "unary":
        op = UNARY[rng.integers(len(UNARY))]
        if op == "Clip":
            lo = np.float32(rng.uniform(-2, 0))
            hi = np.float32(rng.uniform(0.1, 2))
            args = [value, g.const(np.array(lo)), g.const(np.array(hi))]
            return g.node("Clip", args[: 1 + rng.integers(1, 3)]), shape
        if op == "LeakyRelu":
            return g.node(op, [value], alpha=float(rng.uniform(0.01, 0.5))), shape
        return g.node(op, [value]), shape
    if kind == "binary":
        op = BINARY[rng.integers(len(BINARY))]
        bshape = [1] * len(shape) if rng.random() < 0.4 else [1, shape[1], 1, 1]
        other = g.const(rng.uniform(-2, 2, bshape).astype(np.float32))
        args = [value, other] if rng.random() < 0.5 else [other, value]
        return g.node(op, args), shape
    if kind == "resize":
        mode = ("nearest", "linear")[rng.integers(2)]
        coordinates = COORDINATES[rng.integers(len(COORDINATES))]
        if mode == "nearest" and coordinates == "align_corners":
            coordinates = "asymmetric"
        sh, sw = (SCALES[rng.integers(len(SCALES))] for _ in range(2))
        scales = g.const(np.array([1, 1, sh, sw], np.float32))
        out = g.node(
            "Resize", [value, "", scales], mode=mode, coordinate_transformation_mode=coordinates
        )
        new = [shape[0], shape[1], int(np.floor(shape[2] * sh)), int(np.floor(shape[3] * sw))]
        return out, new
    if kind == "pool":
        op = ("MaxPool", "AveragePool")[rng.integers(2)]
        k = int(rng.integers(2, 4))
        stride = int(rng.integers(1, 3))
        pad = int(rng.integers(0, k))
        attrs = {"kernel_shape": [k, k], "strides": [stride, stride], "pads": [pad] * 4}
        if op == "AveragePool":
            attrs["count_include_pad"] = int(rng.integers(2))
        out = g.node(op, [value], **attrs)
        new = [*shape[:2], *((d + 2 * pad - k) // stride + 1 for d in shape[2:])]
        return out, new
    if kind == "reduce":
        op = ("ReduceMean", "ReduceMax", "ReduceSum", "ReduceMin")[rng.integers(4)]
        axes = [[1], [2], [3], [2, 3]][rng.integers(4)]
        out = g.node(op, [value, g.const(np.array(axes, np.int64))], keepdims=1)
        return out, [1 if a in axes else d for a, d in enumerate(shape)]
    # gather: constant indices inside the axis, some negative
    axis = int(rng.integers(1, 4))
    n = shape[axis]
    index = rng.integers(-n, n, size=int(rng.integers(1, n + 2))).astype(np.int64)
    out = g.node("Gather", [value, g.const(index)], axis=axis)
    return out, [*shape[:axis], len(index), *shape[axis + 1 :]]


KINDS = ("unary", "binary", "resize", "pool", "reduce", "gather")


def build(seed: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The graph and the input of one fuzz case."""
    rng = np.random.default_rng(seed)
    g = _Graph(rng)
    shape = [1, int(rng.integers(1, 4)), int(rng.integers(3, 13)), int(rng.integers(3, 13))]
    x = rng.uniform(-3, 3, shape).astype(np.float32)
    value = "x"
    for _ in range(int(rng.integers(1, 6))):
        ok = tuple(k for k in KINDS if k != "pool" or min(shape[2:]) >= 4)
        value, shape = _step(g, value, shape, ok)
        if min(shape[2:]) < 1 or max(shape[2:]) > 64:
            break
    if rng.random() < 0.3:  # a graph ending in Clip, as tf.clip_by_value writes it
        lo, hi = g.const(np.array(-1.0, np.float32)), g.const(np.array(1.0, np.float32))
        value = g.node("Clip", [value, lo, hi])
    graph = helper.make_graph(
        g.nodes,
        f"fuzz{seed}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info(value, TensorProto.FLOAT, None)],
        initializer=g.inits,
    )
    del graph.input[0].type.tensor_type.shape.dim[:]
    graph.input[0].type.tensor_type.shape.dim.extend(
        [onnx.TensorShapeProto.Dimension(dim_value=d) for d in x.shape]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model), {"x": x}


def check(seed: int) -> dict:
    """One case: 'match', 'refused' (a GdpError, both sides agreeing to fail included) or
    'mismatch', with what was seen."""
    import onnxruntime as ort

    import gdp

    model, feeds = build(seed)
    ops = [n.op_type for n in model.graph.node]
    try:
        session = ort.InferenceSession(
            model.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        want = session.run(None, feeds)[0]
    except Exception as err:  # the oracle refuses: gdp must refuse too
        want, oracle_error = None, str(err)[:200]
    try:
        got = gdp.compile(model, target="cpu")(feeds)
    except gdp.GdpError as err:
        return {"seed": seed, "ops": ops, "result": "refused", "error": str(err)[:300]}
    except Exception as err:  # not a GdpError: a failure of its own, the batch goes on
        return {"seed": seed, "ops": ops, "result": "error", "error": repr(err)[-300:]}
    if want is None:
        return {"seed": seed, "ops": ops, "result": "mismatch", "error": oracle_error}
    got = np.asarray(got)
    if got.shape != want.shape:
        return {
            "seed": seed,
            "ops": ops,
            "result": "mismatch",
            "error": f"shape {got.shape} != {want.shape}",
        }
    scale = max(1.0, float(np.nanmax(np.abs(want))) if want.size else 1.0)
    err = float(np.max(np.abs(got.astype(np.float64) - want))) if want.size else 0.0
    same_nan = np.array_equal(np.isnan(got), np.isnan(want))
    if not same_nan or err > 1e-4 * scale:
        return {"seed": seed, "ops": ops, "result": "mismatch", "error": f"max error {err:.3g}"}
    return {"seed": seed, "ops": ops, "result": "match"}


if __name__ == "__main__":  # python onnx_fuzz_cases.py SEED...: one JSON line per case
    for arg in sys.argv[1:]:
        print("CASE " + json.dumps(check(int(arg))), flush=True)
