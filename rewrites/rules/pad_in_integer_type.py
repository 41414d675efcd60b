"""pad_in_integer_type: a canonical form that keeps integer images integer through a pad."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from gdp.rewrites.rule import Place, Rewrite, constant, initializer

# Integer types whose every value a float32 holds exactly: casting them to float32 and back is
# the identity, so a pad between the two casts can run in the integer type.
_EXACT_IN_FLOAT32 = {
    ir.DataType.UINT8,
    ir.DataType.INT8,
    ir.DataType.UINT16,
    ir.DataType.INT16,
}


def _cast_to(node: ir.Node) -> ir.DataType:
    return ir.DataType(node.attributes.get_int("to", 0))


class PadInIntegerType(Rewrite):
    """Cast(x: uint8 -> float) -> Pad -> Cast(-> uint8) -> Pad(x) in x's own type.

    tf2onnx pads small integer images in float (its Pad converter casts them), and TVM imports
    the cast back to an integer as a NaN/inf test and a wrap-around mask on every pixel, which
    also keeps the padding from inlining as plain data movement. ONNX's Pad takes every type.
    """

    name = "pad_in_integer_type"
    doc = (
        "Cast(small int -> float) -> Pad -> Cast(back) (tf2onnx's integer pad) -> Pad in the"
        " integer type"
    )
    op_types = frozenset({"Pad"})

    def match(self, node: ir.Node) -> Place | None:
        cast_in = node.inputs[0].producer() if node.inputs[0] is not None else None
        if cast_in is None or cast_in.op_type != "Cast":
            return None
        source = cast_in.inputs[0]
        if source.dtype not in _EXACT_IN_FLOAT32 or _cast_to(cast_in) != ir.DataType.FLOAT:
            return None
        users = [use.node for use in node.outputs[0].uses()]
        if (
            not users
            or node.outputs[0].is_graph_output()
            or any(u.op_type != "Cast" or _cast_to(u) != source.dtype for u in users)
        ):
            return None
        fill = None
        if len(node.inputs) > 2 and node.inputs[2] is not None:
            given = constant(node.inputs[2])
            if given is None or given.size != 1:
                return None
            value = float(given.ravel()[0])
            fill = np.array([value]).astype(source.dtype.numpy())
            if float(fill[0]) != value:
                return None
        return Place(node, source=source, users=users, fill=fill)

    def replace(self, place: Place) -> None:
        node = place.node
        inputs = [place.source, *node.inputs[1:]]
        if place.fill is not None:
            inputs[2] = initializer(node, "fill", place.fill.reshape(()))
        # One integer pad per cast back (each may be a graph output, whose name it takes).
        for user in place.users:
            replacement = ir.node(
                "Pad", inputs, attributes=dict(node.attributes), name=f"{user.name}_integer_pad"
            )
            ir.convenience.replace_nodes_and_values(
                user.graph, user, [user], [replacement], user.outputs, replacement.outputs
            )


RULE = PadInIntegerType()
