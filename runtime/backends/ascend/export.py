"""What the npu receives: gdp's graph after its rewrites and FP16 scaling, converted to an opset ATC
takes (11..13 by default, 18 at most), with static shapes and only operators on CANN's ONNX
operator list (gdp.runtime.backends.ascend.cann_onnx_ops). Both the Ascend backend and the
npu-emulate target run exactly this graph.
"""

from __future__ import annotations

import onnx
from onnx import version_converter

from gdp.errors import CompileError, TargetError, UnsupportedOpError
from gdp.runtime.backends.ascend.cann_onnx_ops import AVOID, CANN_ONNX_OPS, CANN_VERSION

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
    current = default_opset(model)
    if opset < current:
        model = _downgrade(model, opset)
    elif opset > current:
        try:
            model = version_converter.convert_version(model, opset)
        except Exception as err:  # the converter names the op it has no adapter for
            raise CompileError(f"converting the graph to ONNX opset {opset} failed: {err}") from err
    model = _constants_to_initializers(model)
    try:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception as err:
        raise CompileError(f"the exported graph does not pass shape inference: {err}") from err
    _check_static(model)
    check_operators(model, opset)
    onnx.checker.check_model(model)
    return model


# Ops whose newer versions (up to 18) only widened their types or added an attribute: at a lower
# opset the same node means the same thing, as long as it uses neither the new types (the
# checker verifies the types against the lower opset's schema) nor the new attribute's non-default
# value (checked here). ONNX's version converter has no down-conversion adapters for most of
# them (Identity 16 -> 13 fails), and onnxscript's converts only upwards.
_SAME_BELOW: dict[str, dict[str, object]] = {
    **dict.fromkeys(
        [
            "Add",
            "Sub",
            "Mul",
            "Div",
            "Relu",
            "Pow",
            "CumSum",
            "Identity",
            "Where",
            "If",
            "GreaterOrEqual",
            "LessOrEqual",
            "LeakyRelu",
            "PRelu",
        ],
        {},
    ),  # fmt: skip
    "Reshape": {"allowzero": 0},
    "ScatterElements": {"reduction": b"none"},
    "ScatterND": {"reduction": b"none"},
    "Shape": {"start": 0},
}


def _downgrade(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """`model` relabelled to a lower opset, where every node means the same there."""
    current = default_opset(model)
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx"):
            continue
        now = onnx.defs.get_schema(node.op_type, current).since_version
        try:
            then = onnx.defs.get_schema(node.op_type, opset).since_version
        except onnx.defs.SchemaError:
            then = None
        if then == now:
            continue
        defaults = _SAME_BELOW.get(node.op_type)
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        extra = [k for k, v in (defaults or {}).items() if k in attrs and attrs[k] != v] + (
            ["end"] if node.op_type == "Shape" and "end" in attrs else []
        )
        if then is None or defaults is None or extra:
            why = (
                f"it does not exist at opset {opset}"
                if then is None
                else f"its opset-{now} definition differs from opset {then}'s"
                + (f" (attribute {extra[0]!r} is used)" if extra else "")
            )
            raise UnsupportedOpError(
                node.op_type,
                node.name,
                f"cannot be exported at opset {opset}: {why}; compile"
                f" with opset= {current} (CANN 7.0+ takes up to 18)",
            )
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for entry in out.opset_import:
        if entry.domain in ("", "ai.onnx"):
            entry.version = opset
    try:
        onnx.checker.check_model(out, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as err:
        raise CompileError(f"the graph is not valid ONNX at opset {opset}: {err}") from err
    return out


def _constants_to_initializers(model: onnx.ModelProto) -> onnx.ModelProto:
    """Constant nodes become initializers: ATC takes Constant only up to opset 13."""
    g = model.graph
    constants = [n for n in g.node if n.op_type == "Constant"]
    if not constants:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    kept = []
    for node in out.graph.node:
        if node.op_type == "Constant" and node.attribute[0].name == "value":
            tensor = onnx.TensorProto()
            tensor.CopyFrom(node.attribute[0].t)
            tensor.name = node.output[0]
            out.graph.initializer.append(tensor)
        else:
            kept.append(node)
    del out.graph.node[:]
    out.graph.node.extend(kept)
    return out


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
