"""small_integer_arithmetic_widened: 8- and 16-bit integer arithmetic in a wider type, for the
opsets (11..13, what ATC takes) that have none."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir

from gdp.rewrites.rule import Place, Rewrite, initializer

# Small integer types ONNX's arithmetic takes only from opset 14: their widened type (products of
# two 16-bit values need 32 bits plus a sign) and the modulus of their wrap-around.
_SMALL_INTEGERS = {
    ir.DataType.UINT8: (ir.DataType.INT32, 8, False),
    ir.DataType.INT8: (ir.DataType.INT32, 8, True),
    ir.DataType.UINT16: (ir.DataType.INT64, 16, False),
    ir.DataType.INT16: (ir.DataType.INT64, 16, True),
}
# On a small-integer value this rule wrote: (a widened value congruent to it mod 2^bits, a
# bound on that value's magnitude).
_CONGRUENT = "gdp.small_integer_arithmetic_widened.congruent"


class SmallIntegerArithmeticWidened(Rewrite):
    """Add/Sub/Mul/Div on 8- and 16-bit integers -> the same in int32 (int64 for 16 bits), wrapped
    back into range with Mod and cast back: exactly ONNX's wrap-around arithmetic.

    Wrapping is a ring homomorphism for add, sub and mul, so a chain of them stays widened and
    unwrapped between its ops (each consumer in the chain takes the widened value, congruent to
    the small one), as long as a bound on its magnitude stays clear of the wide type's range; a
    value is wrapped where it leaves the chain, and before a Div (which needs the true values).
    Opset 14 added these types to the arithmetic ops; a graph exported at opset 11..13 (what ATC
    takes) cannot hold them. gdp's Canny writes its hysteresis rounds as uint8 sums."""

    name = "small_integer_arithmetic_widened"
    doc = (
        "Add/Sub/Mul/Div on 8- and 16-bit integers -> in int32/int64, wrapped back with Mod"
        " (opsets below 14 have no small-integer arithmetic)"
    )
    op_types = frozenset({"Add", "Sub", "Mul", "Div"})

    def prepare(self, model: onnx.ModelProto) -> onnx.ModelProto:
        return onnx.shape_inference.infer_shapes(model)  # match() reads the output types

    def match(self, node: ir.Node) -> Place | None:
        dtype = node.outputs[0].dtype
        return Place(node, dtype=dtype) if dtype in _SMALL_INTEGERS else None

    def replace(self, place: Place) -> None:
        node, dtype = place.node, place.dtype
        wide, bits, signed = _SMALL_INTEGERS[dtype]
        if not node.name:  # the new nodes and constants are named after it
            node.name = node.outputs[0].name

        def const(value: int, label: str) -> ir.Value:
            return initializer(node, label, np.array(value, dtype=wide.numpy()))

        chain, operands, bounds = [], [], []
        for x in node.inputs:
            twin = x.meta.get(_CONGRUENT)
            if twin is not None and node.op_type != "Div":
                operands.append(twin[0])
                bounds.append(twin[1])
            else:
                chain.append(ir.node("Cast", [x], attributes={"to": wide}))
                operands.append(chain[-1].outputs[0])
                bounds.append(1 << bits)
        result = ir.node(node.op_type, operands)
        chain.append(result)
        value = result.outputs[0]
        value.dtype = wide
        bound = bounds[0] * bounds[1] if node.op_type == "Mul" else bounds[0] + bounds[1]
        if node.op_type == "Div":
            bound = 1 << bits
        modulus = const(1 << bits, "modulus")
        if signed:  # ((r + 2^(b-1)) mod 2^b) - 2^(b-1)
            half = const(1 << (bits - 1), "half")
            chain.append(ir.node("Add", [value, half]))
            chain.append(ir.node("Mod", [chain[-1].outputs[0], modulus]))
            chain.append(ir.node("Sub", [chain[-1].outputs[0], half]))
        else:
            chain.append(ir.node("Mod", [value, modulus]))
        wrapped = chain[-1].outputs[0]
        back = ir.node("Cast", [wrapped], attributes={"to": dtype})
        chain.append(back)
        for i, step in enumerate(chain):
            step.name = f"{node.name}_widened_{i}"
        ir.convenience.replace_nodes_and_values(
            node.graph, node, [node], chain, node.outputs, back.outputs
        )
        headroom = 1 << (8 * int(wide.itemsize) - 2)
        twin = (value, bound) if bound < headroom else (wrapped, 1 << bits)
        back.outputs[0].meta[_CONGRUENT] = twin


RULE = SmallIntegerArithmeticWidened()
