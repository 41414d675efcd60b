"""Canonical forms that importers agree on, with the graph's meaning unchanged."""

from __future__ import annotations

import numpy as np
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


def canonical_names(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy with every internal tensor and node renamed by position, initializers in first-use
    order: two conversions of the same program compare equal byte for byte.

    tf2onnx's generated names and initializer order vary from one process to the next, so this is
    what a cache key is computed from (graph inputs and outputs keep their names). Graphs with
    subgraphs (If, Loop), whose bodies may name outer values, are returned unchanged.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    if any(
        a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
        for n in graph.node
        for a in n.attribute
    ):
        return out
    keep = {v.name for v in graph.input} | {v.name for v in graph.output} | {""}
    names: dict[str, str] = {}

    def rename(old: str) -> str:
        if old in keep:
            return old
        return names.setdefault(old, f"t{len(names)}")

    for index, node in enumerate(graph.node):
        node.name = f"{node.op_type}_{index}"
        node.input[:] = [rename(n) for n in node.input]
        node.output[:] = [rename(n) for n in node.output]
    initializers = sorted(graph.initializer, key=lambda t: int(names.get(t.name, "t-1")[1:]))
    for tensor in initializers:
        tensor.name = rename(tensor.name)
    del graph.initializer[:]
    graph.initializer.extend(initializers)
    # value_info is derived by shape inference; it says nothing a key needs and its order varies.
    del graph.value_info[:]
    graph.name = "graph"
    return out


def reverse_sequence_to_slice(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """ReverseSequence whose every sequence length is the full time axis -> Slice with step -1.

    tf2onnx writes `tf.reverse(x, axis=[k])` (BGR <-> RGB, flips) as a ReverseSequence; TVM's Relax
    importer has no converter for it, while a reversing Slice imports everywhere. Needs static
    shapes (after specialisation), since the lengths must be known to equal the axis.
    """
    graph = ir.serde.deserialize_model(model)
    changed = 0
    for node in list(ir.traversal.RecursiveGraphIterator(graph.graph)):
        if node.op_type != "ReverseSequence" or node.domain not in ("", "ai.onnx"):
            continue
        data, lengths = node.inputs[0], ir.convenience.get_const_tensor(node.inputs[1])
        time_axis = node.attributes.get_int("time_axis", 0)
        if lengths is None or data.shape is None or not data.shape.is_static():
            continue
        full = data.shape[time_axis]
        if not all(int(v) == full for v in lengths.numpy().ravel()):
            continue
        consts = [
            ir.Value(name=f"{node.name}_{what}", const_value=ir.tensor(np.array([v], np.int64)))
            for what, v in [("starts", -1), ("ends", -(2**62)), ("axes", time_axis), ("steps", -1)]
        ]
        for value in consts:
            node.graph.register_initializer(value)
        replacement = ir.node("Slice", [data, *consts], name=f"{node.name}_as_slice")
        ir.convenience.replace_nodes_and_values(
            node.graph, node, [node], [replacement], node.outputs, replacement.outputs
        )
        changed += 1
    if not changed:
        return model, 0
    return ir.serde.serialize_model(graph), changed
