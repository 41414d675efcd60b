"""Canonical forms that importers agree on, with the graph's meaning unchanged."""

from __future__ import annotations

import onnx
import onnx_ir as ir


def omit_empty_resize_inputs(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """Resize(x, roi=[], scales=[], sizes) -> Resize(x, "", "", sizes).

    tf2onnx passes unused optional inputs as empty tensors; ONNX allows that and omission alike, but
    TVM's Relax importer treats an empty `scales` as given and then refuses `scales` plus `sizes`.
    """
    graph = ir.serde.deserialize_model(model)
    changed = 0
    for node in ir.traversal.RecursiveGraphIterator(graph.graph):
        if node.op_type != "Resize" or node.domain not in ("", "ai.onnx"):
            continue
        for index in (1, 2):
            if index >= len(node.inputs) or node.inputs[index] is None:
                continue
            value = ir.convenience.get_const_tensor(node.inputs[index])
            if value is not None and value.size == 0:
                node.replace_input_with(index, None)
                changed += 1
    if not changed:
        return model, 0
    return ir.serde.serialize_model(graph), changed
