"""What the npu receives: gdp's graph after its rewrites and FP16 scaling, converted to an opset ATC
takes (11..13 by default, 18 at most), with static shapes and only operators on CANN's ONNX
operator list (gdp.runtime.backends.cann_onnx_ops). Both the Ascend backend and the npu-emulate
target run exactly this graph.
"""

from __future__ import annotations

import onnx
from gdp.runtime.backends.cann_onnx_ops import AVOID, CANN_ONNX_OPS, CANN_VERSION
from onnx import version_converter

from gdp.errors import CompileError, TargetError, UnsupportedOpError

DEFAULT_OPSET = 13
MIN_OPSET = 11
MAX_OPSET = 18  # gdp's ONNX hub is pinned at or below 18


def default_opset(model: onnx.ModelProto) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return entry.version
    raise CompileError("the graph imports no default-domain ONNX opset")


def check_opset_option(opset) -> int:
    if not isinstance(opset, int) or isinstance(opset, bool) or not MIN_OPSET <= opset <= MAX_OPSET:
        raise TargetError(f"opset: expected an int in {MIN_OPSET}..{MAX_OPSET}, got {opset!r}")
    return opset


def export(model: onnx.ModelProto, opset: int = DEFAULT_OPSET) -> onnx.ModelProto:
    """`model` at `opset`, checked: static shapes, and every op on CANN's list at that opset.
    Raises UnsupportedOpError naming the first op ATC would refuse and what avoids it."""
    opset = check_opset_option(opset)
    foreign = sorted({n.domain for n in model.graph.node if n.domain not in ("", "ai.onnx")})
    if foreign:
        raise UnsupportedOpError(
            "export", foreign[0], f"ops of domain {foreign[0]!r}: ATC reads only ai.onnx ops"
        )
    if default_opset(model) != opset:
        try:
            model = version_converter.convert_version(model, opset)
        except Exception as err:  # the converter names the op it has no adapter for
            raise CompileError(f"converting the graph to ONNX opset {opset} failed: {err}") from err
    try:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception as err:
        raise CompileError(f"the exported graph does not pass shape inference: {err}") from err
    _check_static(model)
    check_operators(model, opset)
    onnx.checker.check_model(model)
    return model


def _check_static(model: onnx.ModelProto) -> None:
    g = model.graph
    for info in [*g.input, *g.output, *g.value_info]:
        if not info.type.HasField("tensor_type"):
            raise CompileError(f"value {info.name!r}: the npu takes tensors only")
        dims = info.type.tensor_type.shape.dim
        if not info.type.tensor_type.HasField("shape") or any(
            not d.HasField("dim_value") for d in dims
        ):
            shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims]
            raise CompileError(
                f"value {info.name!r}: the npu needs static shapes, got {shape}"
                " (gdp compiles one model per input shape; was the graph specialised?)"
            )


def check_operators(model: onnx.ModelProto, opset: int) -> None:
    """Every op must be on CANN's ONNX list at `opset`."""
    for node in model.graph.node:
        supported = CANN_ONNX_OPS.get(node.op_type)
        avoid = AVOID.get(node.op_type, "run that part of the program on the cpu target")
        if supported is None:
            raise UnsupportedOpError(
                node.op_type,
                node.name,
                f"not on CANN's ONNX operator list ({CANN_VERSION}); {avoid}",
            )
        low, high = supported
        if not low <= opset <= high:
            raise UnsupportedOpError(
                node.op_type,
                node.name,
                f"CANN ({CANN_VERSION}) takes {node.op_type} at opsets {low}..{high}, the graph"
                f" is at opset {opset}; compile with opset= in {low}..{high}",
            )


def operators(model: onnx.ModelProto) -> list[str]:
    return sorted({n.op_type for n in model.graph.node})
