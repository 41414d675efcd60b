"""reverse_sequence_to_slice: a canonical form TVM's Relax importer needs."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gdp.rewrites.rule import Place, Rewrite, constant, initializer


class ReverseSequenceToSlice(Rewrite):
    """ReverseSequence whose every sequence length is the full time axis -> Slice with step -1.

    tf2onnx writes `tf.reverse(x, axis=[k])` (BGR <-> RGB, flips) as a ReverseSequence; TVM's Relax
    importer has no converter for it, while a reversing Slice imports everywhere. Needs static
    shapes (after specialisation), since the lengths must be known to equal the axis.
    """

    name = "reverse_sequence_to_slice"
    doc = "ReverseSequence over whole sequences (tf.reverse) -> Slice with step -1"
    op_types = frozenset({"ReverseSequence"})

    def match(self, node: ir.Node) -> Place | None:
        data, lengths = node.inputs[0], constant(node.inputs[1])
        time_axis = node.attributes.get_int("time_axis", 0)
        if lengths is None or data.shape is None or not data.shape.is_static():
            return None
        full = data.shape[time_axis]
        if not all(int(v) == full for v in lengths.ravel()):
            return None
        return Place(node, time_axis=time_axis)

    def replace(self, place: Place) -> None:
        node = place.node
        bounds = [("starts", -1), ("ends", -(2**62)), ("axes", place.time_axis), ("steps", -1)]
        consts = [initializer(node, what, np.array([v], np.int64)) for what, v in bounds]
        replacement = ir.node("Slice", [node.inputs[0], *consts], name=f"{node.name}_as_slice")
        ir.convenience.replace_nodes_and_values(
            node.graph, node, [node], [replacement], node.outputs, replacement.outputs
        )


RULE = ReverseSequenceToSlice()
