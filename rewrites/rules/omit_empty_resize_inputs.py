"""omit_empty_resize_inputs: a canonical form TVM's Relax importer needs."""

from __future__ import annotations

import onnx_ir as ir

from gdp.rewrites.rule import Place, Rewrite, constant


class OmitEmptyResizeInputs(Rewrite):
    """Resize(x, roi=[], scales=[], sizes) -> Resize(x, "", "", sizes); each input omitted counts.

    tf2onnx passes unused optional inputs as empty tensors; ONNX allows that and omission alike, but
    TVM's Relax importer treats an empty `scales` as given and then refuses `scales` plus `sizes`.
    """

    name = "omit_empty_resize_inputs"
    doc = "Resize with empty roi/scales tensors (tf2onnx's form) -> those inputs omitted"
    op_types = frozenset({"Resize"})

    def match(self, node: ir.Node) -> Place | None:
        empty = [
            i
            for i in (1, 2)
            if i < len(node.inputs)
            and (value := constant(node.inputs[i])) is not None
            and value.size == 0
        ]
        return Place(node, empty=empty) if empty else None

    def replace(self, place: Place) -> int:
        for index in place.empty:
            place.node.replace_input_with(index, None)
        return len(place.empty)


RULE = OmitEmptyResizeInputs()
