"""The TE front end: a `tvm.te` compute of neighbour comparisons -> a dense ONNX tensor graph.

GDPNPU's first technique (thesis 5.5.1, Algorithm 3). Preprocessing is often written pixel by
pixel, `mask[i][j] = img[i][j] > img[i-1][j] ? t : f`, which an accelerator can only run as
scalar control flow. The comparison's left side is a linear combination of neighbour reads, i.e.
a depthwise convolution with a small kernel; the branch is a mask. So

    if_then_else(sum_k w_k * img[i+dy_k][j+dx_k] (>, >=, <, <=) K, t, f)

becomes conv = DepthwiseConv(img, kernel with w_k at tap (dy_k, dx_k)), mask_true = cast(conv
op K), mask_false = 1 - mask_true, out = t * mask_true + f * mask_false: the dense form a matrix
unit runs. Reads outside the image see zeros, as the convolution's SAME padding does.

Images are HW or HWC; the channel index must be the channel axis itself (the kernel is the same
for every channel, as in the thesis). `t` and `f` are constants, or reads of other placeholders
at the output's own position. Any other form is refused with an error naming the construct.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from gdp.errors import FrontendError
from gdp.frontend.common import OPSET, finalize

_COMPARISONS = {"GT": "Greater", "GE": "GreaterOrEqual", "LT": "Less", "LE": "LessOrEqual"}


@dataclass
class _Comparison:
    image: object  # the te.Tensor every read of the left side comes from
    taps: dict[tuple[int, int], float]  # (dy, dx) -> weight
    op: str  # an ONNX comparison
    threshold: float  # the right side, all constants moved there


def from_te(output, inputs: Sequence) -> onnx.ModelProto:
    """An ONNX model of the TE compute `output` over the placeholders `inputs` (in that order,
    named by their TE names), for gdp.compile. See the module docstring for the forms taken."""
    from tvm import te

    if not isinstance(output, te.Tensor) or not isinstance(output.op, te.ComputeOp):
        raise FrontendError(f"output: expected a te.compute tensor, got {type(output).__name__}")
    for tensor in inputs:
        if not isinstance(tensor, te.Tensor) or not isinstance(tensor.op, te.PlaceholderOp):
            raise FrontendError(f"inputs: expected te.placeholder tensors, got {tensor}")
    axes = [iv.var for iv in output.op.axis]
    if len(axes) not in (2, 3):
        raise FrontendError(f"output: expected an HW or HWC compute, got rank {len(axes)}")
    body = output.op.body[0]
    if _op_name(body) != "prim.if_then_else":
        raise FrontendError(f"the compute's body must be if_then_else(cond, t, f), got {body}")
    cond, on_true, on_false = body.args
    comparison = _comparison(cond, axes)
    if not any(comparison.image.same_as(t) for t in inputs):
        raise FrontendError(f"{comparison.image.op.name} is read but not among the inputs")
    shape = tuple(int(d) for d in output.shape)
    image_shape = tuple(int(d) for d in comparison.image.shape)
    if image_shape != shape:
        raise FrontendError(f"the image {image_shape} and the output {shape} must have one shape")
    return _graph(output, list(inputs), comparison, on_true, on_false, axes)


def _op_name(expr) -> str | None:
    op = getattr(expr, "op", None)
    return getattr(op, "name", None)


def _comparison(cond, axes) -> _Comparison:
    kind = type(cond).__name__
    if kind not in _COMPARISONS:
        raise FrontendError(
            f"the condition must compare (>, >=, <, <=) neighbour reads with a constant, got"
            f" {kind}: {cond}"
        )
    dtype = str(cond.a.expr_ty().dtype)
    if not (dtype.startswith(("float", "bfloat")) or dtype in ("int32", "int64")):
        # Narrow integer arithmetic wraps in TE; the convolution computes exactly.
        raise FrontendError(
            f"the condition computes in {dtype}, which wraps on overflow; cast the reads to"
            f" float32 or int32 first: {cond}"
        )
    taps: dict[tuple[int, int], float] = {}
    images: list = []
    # cond.a - cond.b (op) 0, its constant terms then moved to the right side.
    constant = _linear(cond.a, 1.0, taps, images, axes) + _linear(cond.b, -1.0, taps, images, axes)
    if not taps or not images:
        raise FrontendError(f"the condition reads no image: {cond}")
    return _Comparison(images[0], taps, _COMPARISONS[kind], -constant)


def _linear(expr, sign: float, taps: dict, images: list, axes) -> float:
    """Add `sign * expr`'s reads to `taps`; return its constant part (times `sign`)."""
    from tvm import ir

    kind = type(expr).__name__
    if isinstance(expr, ir.prim.expr.FloatImm | ir.prim.expr.IntImm):
        return sign * float(expr.value)
    if kind == "Cast":
        return _linear(expr.value, sign, taps, images, axes)
    if kind in ("Add", "Sub"):
        left = _linear(expr.a, sign, taps, images, axes)
        return left + _linear(expr.b, sign if kind == "Add" else -sign, taps, images, axes)
    if kind == "Mul":
        for scale, term in ((expr.a, expr.b), (expr.b, expr.a)):
            if isinstance(scale, ir.prim.expr.FloatImm | ir.prim.expr.IntImm):
                return _linear(term, sign * float(scale.value), taps, images, axes)
        raise FrontendError(f"a product of two reads is not linear: {expr}")
    if _op_name(expr) == "te.tensor_load":
        image, *indices = expr.args
        if images and not image.same_as(images[0]):
            raise FrontendError(
                f"the condition reads two images ({images[0].op.name}, {image.op.name}); it"
                " must compare neighbours of one"
            )
        images[:1] = [image]
        offset = _offsets(indices, axes, expr)
        taps[offset] = taps.get(offset, 0.0) + sign
        return 0.0
    raise FrontendError(f"unsupported construct {kind} in the condition: {expr}")


def _offsets(indices, axes, load) -> tuple[int, int]:
    """(dy, dx) of a read img[i+dy][j+dx] (and [c] for HWC, which must be the channel axis)."""
    from tvm import ir
    from tvm.sym import Analyzer

    if len(indices) != len(axes):
        raise FrontendError(f"a read with {len(indices)} indices in a rank-{len(axes)} compute")
    analyzer = Analyzer()
    offsets = []
    for index, axis in zip(indices, axes, strict=True):
        offset = analyzer.simplify(index - axis)
        if not isinstance(offset, ir.prim.expr.IntImm):
            raise FrontendError(f"index {index} of {load} is not its axis plus a constant")
        offsets.append(int(offset.value))
    if len(offsets) == 3 and offsets[2] != 0:
        raise FrontendError(f"{load} reads another channel; only spatial neighbours are taken")
    return offsets[0], offsets[1]


def _branch(expr, inputs: list, axes, name: str, nodes: list, inits: list) -> str:
    """An ONNX value for a branch: a constant, or another input read at the output's position."""
    from tvm import ir

    if isinstance(expr, ir.prim.expr.FloatImm | ir.prim.expr.IntImm):
        inits.append(numpy_helper.from_array(np.array(float(expr.value), np.float32), name))
        return name
    if _op_name(expr) == "te.tensor_load":
        tensor, *indices = expr.args
        known = any(tensor.same_as(t) for t in inputs)
        if known and _offsets(indices, axes, expr) == (0, 0):
            return _as_float(tensor, nodes)
    raise FrontendError(
        f"the {name} branch must be a constant or an input read at [i, j]: got {expr}"
    )


def _as_float(tensor, nodes: list) -> str:
    name = tensor.op.name
    if str(tensor.dtype) == "float32":
        return name
    nodes.append(helper.make_node("Cast", [name], [f"{name}_f32"], to=TensorProto.FLOAT))
    return f"{name}_f32"


def _graph(output, inputs: list, cmp: _Comparison, on_true, on_false, axes) -> onnx.ModelProto:
    nodes: list = []
    inits: list = []
    shape = tuple(int(d) for d in output.shape)
    channels = shape[2] if len(shape) == 3 else 1
    image = _as_float(cmp.image, nodes)
    # HW(C) -> NCHW for the convolution.
    if len(shape) == 3:
        nodes.append(helper.make_node("Transpose", [image], ["chw"], perm=[2, 0, 1]))
    else:
        inits.append(numpy_helper.from_array(np.array([0], np.int64), "axis0"))
        nodes.append(helper.make_node("Unsqueeze", [image, "axis0"], ["chw"]))
    inits.append(numpy_helper.from_array(np.array([0], np.int64), "batch_axis"))
    nodes.append(helper.make_node("Unsqueeze", ["chw", "batch_axis"], ["nchw"]))
    ry = max(abs(dy) for dy, _ in cmp.taps)
    rx = max(abs(dx) for _, dx in cmp.taps)
    kernel = np.zeros((channels, 1, 2 * ry + 1, 2 * rx + 1), np.float32)
    for (dy, dx), weight in cmp.taps.items():
        kernel[:, 0, ry + dy, rx + dx] = weight
    inits.append(numpy_helper.from_array(kernel, "kernel"))
    nodes.append(
        helper.make_node(
            "Conv", ["nchw", "kernel"], ["conv"], group=channels, pads=[ry, rx, ry, rx]
        )
    )
    inits.append(numpy_helper.from_array(np.array(cmp.threshold, np.float32), "threshold"))
    nodes.append(helper.make_node(cmp.op, ["conv", "threshold"], ["taken"]))
    nodes.append(helper.make_node("Cast", ["taken"], ["mask_true"], to=TensorProto.FLOAT))
    inits.append(numpy_helper.from_array(np.array(1.0, np.float32), "one"))
    nodes.append(helper.make_node("Sub", ["one", "mask_true"], ["mask_false"]))
    # Back to HW(C): drop N, move C last.
    nodes.append(helper.make_node("Squeeze", ["mask_true", "batch_axis"], ["true_chw"]))
    nodes.append(helper.make_node("Squeeze", ["mask_false", "batch_axis"], ["false_chw"]))
    for chw, hw in (("true_chw", "true_hw"), ("false_chw", "false_hw")):
        if len(shape) == 3:
            nodes.append(helper.make_node("Transpose", [chw], [hw], perm=[1, 2, 0]))
        else:
            nodes.append(helper.make_node("Squeeze", [chw, "axis0"], [hw]))
    t = _branch(on_true, inputs, axes, "true_value", nodes, inits)
    f = _branch(on_false, inputs, axes, "false_value", nodes, inits)
    nodes.append(helper.make_node("Mul", [t, "true_hw"], ["picked_true"]))
    nodes.append(helper.make_node("Mul", [f, "false_hw"], ["picked_false"]))
    out_type = helper.np_dtype_to_tensor_dtype(np.dtype(str(output.dtype)))
    result = output.op.name
    if out_type == TensorProto.FLOAT:
        nodes.append(helper.make_node("Add", ["picked_true", "picked_false"], [result]))
    else:
        nodes.append(helper.make_node("Add", ["picked_true", "picked_false"], ["sum"]))
        nodes.append(helper.make_node("Cast", ["sum"], [result], to=out_type))
    graph = helper.make_graph(
        nodes,
        f"te_{result}",
        [
            helper.make_tensor_value_info(
                t.op.name,
                helper.np_dtype_to_tensor_dtype(np.dtype(str(t.dtype))),
                [int(d) for d in t.shape],
            )
            for t in inputs
        ],
        [helper.make_tensor_value_info(result, out_type, list(shape))],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    return finalize(model, "the TE front end")
