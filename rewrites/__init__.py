"""Graph passes on ONNX, and the one registry of them.

A rewrite is a pure function ONNX -> ONNX that also says how many places it changed. Which rewrites
run for a target comes from the backend (what its importer needs) and from the target's cost profile
(what its measurements favour); nothing here asks which target it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import onnx
from gdp.rewrites.canonicalize import (
    canonical_names,
    omit_empty_resize_inputs,
    pad_in_integer_type,
    reverse_sequence_to_slice,
)
from gdp.rewrites.specialize import specialize_shapes

__all__ = ["REWRITES", "Rewrite", "apply_rewrites", "canonical_names", "specialize_shapes"]


@dataclass(frozen=True)
class Rewrite:
    name: str
    doc: str
    fn: Callable[[onnx.ModelProto], tuple[onnx.ModelProto, int]]


REWRITES: dict[str, Rewrite] = {
    r.name: r
    for r in [
        Rewrite(
            "omit_empty_resize_inputs",
            "Resize with empty roi/scales tensors (tf2onnx's form) -> those inputs omitted",
            omit_empty_resize_inputs,
        ),
        Rewrite(
            "pad_in_integer_type",
            "Cast(small int -> float) -> Pad -> Cast(back) (tf2onnx's integer pad) -> Pad in the"
            " integer type",
            pad_in_integer_type,
        ),
        Rewrite(
            "reverse_sequence_to_slice",
            "ReverseSequence over whole sequences (tf.reverse) -> Slice with step -1",
            reverse_sequence_to_slice,
        ),
    ]
}


def apply_rewrites(
    model: onnx.ModelProto, names: Iterable[str]
) -> tuple[onnx.ModelProto, list[dict]]:
    """Run the named rewrites in order; report each one that changed something."""
    applied: list[dict] = []
    for name in names:
        model, count = REWRITES[name].fn(model)
        if count:
            applied.append({"rule": name, "count": count})
    return model, applied
