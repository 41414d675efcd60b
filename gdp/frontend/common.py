"""What every front end does to the graph it produced: pin the opset and IR version, check it."""

from __future__ import annotations

import onnx

from gdp.errors import FrontendError, UnsupportedOpError

# The opset every front end writes. tf2onnx supports at most 18; 17 is the newest whose Resize,
# reductions and Pad forms are accepted by both TVM's Relax importer and onnxruntime.
OPSET = 17
# onnx.helper.make_model writes the newest IR version, which onnxruntime may reject.
IR_VERSION = 10


def finalize(model: onnx.ModelProto, origin: str) -> onnx.ModelProto:
    """Check that `model` is a valid graph of standard ONNX ops and pin its IR version."""
    model.ir_version = min(model.ir_version or IR_VERSION, IR_VERSION)
    for node in model.graph.node:
        if not onnx.defs.has(node.op_type, node.domain):
            raise UnsupportedOpError(
                node.op_type,
                node.name,
                f"{origin} has no ONNX conversion for it (a custom op or one tf2onnx cannot map)",
            )
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as err:
        raise FrontendError(f"{origin} produced an invalid ONNX graph: {err}") from err
    if not model.graph.output:
        raise FrontendError(f"{origin} has no outputs: return at least one tensor")
    return model


def default_opset(model: onnx.ModelProto) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return entry.version
    raise FrontendError("the ONNX graph imports no default-domain opset")
