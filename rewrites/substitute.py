"""Measured operator substitutions (GDPNPU thesis 5.5.2): rewrites whose payoff depends on the
target, each applied only where the target's cost profile (gdp.rewrites.profiles) says it is
cheaper. Each returns the rewritten model and one log entry per candidate it weighed:
{"rule", "applied", "where", "costs"}.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from gdp.rewrites.profiles import CostProfile

# Reductions below this many input elements are left alone: the split's extra kernel costs
# more than it could save.
MIN_SPLIT_ELEMENTS = 1 << 16
SLICE_COUNTS = (64, 32, 16, 8, 4, 2)
# The elementwise op that combines s slices of each reduction, and the profile entry that
# times a reduction of its kind.
_COMBINE = {
    "ReduceMin": ("Min", "reduce_max"),
    "ReduceMax": ("Max", "reduce_max"),
    "ReduceSum": ("Sum", "reduce_sum"),
    "ReduceMean": ("Mean", "reduce_sum"),
}


def _reduced_axes(node: ir.Node, rank: int) -> list[int] | None:
    """The axes a reduction reduces (attribute before opset 18, input after; ReduceSum's is an
    input since 13), or None where they are not constant."""
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        axes = ir.convenience.get_const_tensor(node.inputs[1])
        if axes is None:
            return None
        values = [int(v) for v in axes.numpy().ravel()]
    else:
        attr = node.attributes.get("axes")
        values = list(attr.as_ints()) if attr is not None else []
    if not values:  # no axes: all of them, unless noop_with_empty_axes
        if node.attributes.get_int("noop_with_empty_axes", 0):
            return None
        values = list(range(rank))
    return sorted(v % rank for v in values)


def split_costs(profile: CostProfile, kind: str, elements: int, slices: int) -> dict | None:
    """The profile's times for a reduction of `kind` over `elements` inputs, directly and split
    (both measured on the target: a crude model of the split, such as an elementwise pass plus
    a smaller reduction, predicted a 25% gain on the CPU where the split measured 2-3x slower,
    because the slices are separate strided reads). None where the profile lacks either."""
    reduce_op = _COMBINE[kind][1]
    if reduce_op not in profile.ops or f"split_{reduce_op}" not in profile.ops:
        return None
    direct = profile.ms(reduce_op, elements)
    split = profile.ms(f"split_{reduce_op}", elements)
    return {"direct_ms": round(direct, 4), "split_ms": round(split, 4), "slices": slices}


def split_reduce(
    model: onnx.ModelProto, profile: CostProfile | None, force: bool = False
) -> tuple[onnx.ModelProto, list[dict]]:
    """ReduceMin/Max/Sum/Mean over a large extent -> Split the outermost reduced axis into s
    equal slices, combine them elementwise (Min/Max/Sum/Mean of the slices: the vector unit at
    full bandwidth), reduce what is left as before. s is the largest power of two up to 64 that
    divides the axis; the split is applied where the profile prices it below the direct form
    (`force`: everywhere, as `gdp calibrate` does to measure the split form).

    Precision: the graph keeps its dtype; a float32 sum adds s partial sums, which if anything
    rounds less than one long accumulation. (Under fp16, sums of images overflow either way: the
    FP16 scaling pass, not this one, keeps them in range.)"""
    if profile is None and not force:
        return model, []
    graph = ir.serde.deserialize_model(model)
    log: list[dict] = []
    changed = False
    for node in list(ir.traversal.RecursiveGraphIterator(graph.graph)):
        if node.op_type not in _COMBINE or node.domain not in ("", "ai.onnx"):
            continue
        data = node.inputs[0]
        if data is None or data.shape is None or not data.shape.is_static():
            continue
        shape = [int(d) for d in data.shape]
        axes = _reduced_axes(node, len(shape))
        elements = int(np.prod(shape)) if shape else 1
        if not axes or elements < MIN_SPLIT_ELEMENTS:
            continue
        axis = axes[0]
        slices = next((s for s in SLICE_COUNTS if shape[axis] % s == 0 and shape[axis] > s), 0)
        entry = {"rule": "split_reduce", "where": node.name, "op": node.op_type}
        if not slices:
            log.append({**entry, "applied": False, "why": f"axis {axis} ({shape[axis]}) odd"})
            continue
        costs = split_costs(profile, node.op_type, elements, slices) if profile else None
        if force:
            applied = True
        elif costs is None:
            applied = False
            entry["why"] = f"the {profile.target} profile does not time both forms"
        else:
            applied = costs["split_ms"] < costs["direct_ms"]
        log.append({**entry, "applied": applied, "costs": costs})
        if not applied:
            continue
        sizes = ir.Value(
            name=f"{node.name}_split_sizes",
            const_value=ir.tensor(np.full(slices, shape[axis] // slices, np.int64)),
        )
        node.graph.register_initializer(sizes)
        split = ir.node(
            "Split",
            [data, sizes],
            attributes={"axis": axis},
            num_outputs=slices,
            name=f"{node.name}_split",
        )
        combine = ir.node(
            _COMBINE[node.op_type][0], list(split.outputs), name=f"{node.name}_combine"
        )
        node.graph.insert_before(node, [split, combine])
        node.replace_input_with(0, combine.outputs[0])
        changed = True
    if not changed:
        return model, log
    return ir.serde.serialize_model(graph), log
