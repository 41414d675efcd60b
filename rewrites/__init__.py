"""Graph passes on ONNX, and the one registry of them.

A rewrite is a pure function ONNX -> ONNX. A canonical rewrite (what an importer needs) says how
many places it changed; a measured substitution reads a cost profile and logs every place it
weighed, applied or not, with the costs that decided. Which rewrites run for a target comes from the
backend and from the target's profile; nothing here asks which target it is.
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
    small_integer_arithmetic_widened,
)
from gdp.rewrites.control_flow import neighbour_differences
from gdp.rewrites.profiles import CostProfile, load_profile
from gdp.rewrites.specialize import specialize_shapes
from gdp.rewrites.substitute import channel_parallel_filters, separable_filters, split_reduce

__all__ = [
    "REWRITES",
    "CostProfile",
    "Rewrite",
    "apply_rewrites",
    "canonical_names",
    "load_profile",
    "specialize_shapes",
]


@dataclass(frozen=True)
class Rewrite:
    name: str
    doc: str
    # canonical: model -> (model, places changed); measured: (model, profile) -> (model, log)
    fn: Callable
    measured: bool = False


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
        Rewrite(
            "small_integer_arithmetic_widened",
            "Add/Sub/Mul/Div on 8- and 16-bit integers -> in int32/int64, wrapped back with Mod"
            " (opsets below 14 have no small-integer arithmetic)",
            small_integer_arithmetic_widened,
        ),
        Rewrite(
            "neighbour_differences",
            "w1 * x[shifted] -/+ w2 * x[shifted] (neighbour comparisons written with slices) ->"
            " a depthwise Conv, where the profile measures the convolution cheaper",
            neighbour_differences,
            measured=True,
        ),
        Rewrite(
            "split_reduce",
            "ReduceMin/Max/Sum/Mean over a large extent -> Split in s slices, elementwise combine,"
            " reduce the rest, where the profile measures the split form faster",
            split_reduce,
            measured=True,
        ),
        Rewrite(
            "separable_filters",
            "depthwise Conv with rank-one kernels (Gaussian, box, Sobel) -> a row pass and a"
            " column pass, where the profile measures the two passes faster",
            separable_filters,
            measured=True,
        ),
        Rewrite(
            "channel_parallel_filters",
            "depthwise Conv on 1-4 channels -> s row strips (with halos) concatenated on C, one"
            " Conv with tiled weights, strips put back, where the profile measures it faster",
            channel_parallel_filters,
            measured=True,
        ),
    ]
}


def apply_rewrites(
    model: onnx.ModelProto, names: Iterable[str], profile: CostProfile | None = None
) -> tuple[onnx.ModelProto, list[dict]]:
    """Run the named rewrites in order. The log has one entry per canonical rewrite that changed
    something ({"rule", "applied": True, "count"}) and one per place a measured substitution
    weighed ({"rule", "applied", "where", "costs", ...})."""
    log: list[dict] = []
    for name in names:
        rewrite = REWRITES[name]
        if rewrite.measured:
            model, entries = rewrite.fn(model, profile)
            log += entries
            continue
        model, count = rewrite.fn(model)
        if count:
            log.append({"rule": name, "applied": True, "count": count})
    return model, log
