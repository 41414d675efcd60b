"""Measured operator substitutions (GDPNPU thesis 5.5.2): rewrites whose payoff depends on the
target, each applied only where the target's cost profile (gdp.rewrites.profiles) says it is
cheaper. Each returns the rewritten model and one log entry per candidate it weighed:
{"rule", "applied", "where", "costs"}.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnx_ir.passes.common
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


def decide(
    entry: dict, costs: dict | None, profile: CostProfile | None, force: bool, new: str, old: str
) -> bool:
    """Whether a measured substitution applies: always when forced (calibration), never where
    the profile lacks a form (entry says why: gdp does not guess), else where the rewritten
    form's cost `costs[new]` is below the original's `costs[old]`."""
    if force:
        return True
    if costs is None:
        entry["why"] = f"the {profile.target} profile does not time both forms"
        return False
    return costs[new] < costs[old]


def _unit_steps(node: ir.Node) -> bool:
    """A Conv with strides and dilations of 1 and explicit pads: a filter at every pixel."""
    unit = all(node.attributes.get_ints(a, [1, 1]) == [1, 1] for a in ("strides", "dilations"))
    return unit and node.attributes.get_string("auto_pad", "NOTSET") in ("NOTSET", "")


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
        applied = decide(entry, costs, profile, force, "split_ms", "direct_ms")
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
    ir.passes.common.RemoveUnusedNodesPass()(graph)  # the replaced node's taps
    return ir.serde.serialize_model(graph), log


def _rank_one(kernel: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(column, row) with kernel == outer(column, row) to float32 precision, else None."""
    u, s, vt = np.linalg.svd(kernel.astype(np.float64))
    if s[0] == 0 or (len(s) > 1 and s[1] > 1e-7 * s[0]):
        return None
    column, row = u[:, 0] * np.sqrt(s[0]), vt[0] * np.sqrt(s[0])
    if not np.allclose(np.outer(column, row), kernel, rtol=1e-6, atol=1e-7 * np.abs(kernel).max()):
        return None
    return column, row


def separable_costs(profile: CostProfile, channels: int, kh: int, kw: int, elements: int):
    """The profile's times for a kh x kw depthwise filter on `elements` inputs, as one 2-D pass
    and as a row pass then a column pass; both measured at 5x5 and scaled by their taps (25,
    and 5 + 5). None where the profile lacks either form."""
    direct_op = profile.nearest("depthwise_conv_c", channels, also="separable_conv_c")
    if direct_op is None:
        return None
    split_op = direct_op.replace("depthwise", "separable")
    direct = profile.ms(direct_op, elements) * (kh * kw) / 25
    separable = profile.ms(split_op, elements) * (kh + kw) / 10
    return {"direct_ms": round(direct, 4), "separable_ms": round(separable, 4)}


def separable_filters(
    model: onnx.ModelProto, profile: CostProfile | None, force: bool = False
) -> tuple[onnx.ModelProto, list[dict]]:
    """A depthwise Conv (group = channels, or one channel) whose every channel's kernel is rank
    one (Gaussian, box, Sobel, Scharr) -> a 1 x kw row pass, then a kh x 1 column pass with the
    bias, where the profile prices the two passes below the one: kh + kw taps per pixel instead
    of kh * kw. Strides and dilations of 1 only (the passes would otherwise not commute with
    the sampling). The sums regroup, so float results differ by rounding only."""
    if profile is None and not force:
        return model, []
    graph = ir.serde.deserialize_model(model)
    log: list[dict] = []
    changed = False
    for node in list(ir.traversal.RecursiveGraphIterator(graph.graph)):
        if node.op_type != "Conv" or node.domain not in ("", "ai.onnx"):
            continue
        data, weight = node.inputs[0], ir.convenience.get_const_tensor(node.inputs[1])
        if weight is None or data.shape is None or not data.shape.is_static():
            continue
        kernels = weight.numpy()
        channels = int(data.shape[1])
        group = node.attributes.get_int("group", 1)
        plain = _unit_steps(node)
        depthwise = kernels.ndim == 4 and kernels.shape[:2] == (channels, 1) and group == channels
        kh, kw = kernels.shape[2:] if kernels.ndim == 4 else (0, 0)
        if not (plain and depthwise and kh > 1 and kw > 1):
            continue
        factors = [_rank_one(k[0]) for k in kernels]
        entry = {"rule": "separable_filters", "where": node.name, "kernel": [kh, kw]}
        if any(f is None for f in factors):
            log.append({**entry, "applied": False, "why": "a kernel is not rank one"})
            continue
        costs = None
        if profile is not None:
            elements = int(np.prod([int(d) for d in data.shape]))
            costs = separable_costs(profile, channels, kh, kw, elements)
        applied = decide(entry, costs, profile, force, "separable_ms", "direct_ms")
        log.append({**entry, "applied": applied, "costs": costs})
        if not applied:
            continue
        top, left, bottom, right = node.attributes.get_ints("pads", [0, 0, 0, 0])
        rows = np.stack([f[1] for f in factors]).astype(kernels.dtype)[:, None, None, :]
        cols = np.stack([f[0] for f in factors]).astype(kernels.dtype)[:, None, :, None]
        values = []
        for what, array in (("row", rows), ("column", cols)):
            value = ir.Value(name=f"{node.name}_{what}_taps", const_value=ir.tensor(array))
            node.graph.register_initializer(value)
            values.append(value)
        row_pass = ir.node(
            "Conv",
            [data, values[0]],
            attributes={"group": channels, "pads": [0, left, 0, right]},
            name=f"{node.name}_row_pass",
        )
        column_pass = ir.node(
            "Conv",
            [row_pass.outputs[0], values[1], *node.inputs[2:]],
            attributes={"group": channels, "pads": [top, 0, bottom, 0]},
            name=f"{node.name}_column_pass",
        )
        ir.convenience.replace_nodes_and_values(
            node.graph, node, [node], [row_pass, column_pass], node.outputs, column_pass.outputs
        )
        changed = True
    if not changed:
        return model, log
    ir.passes.common.RemoveUnusedNodesPass()(graph)  # the replaced node's taps
    return ir.serde.serialize_model(graph), log


# Strip counts the channel-parallel form tries, most first (the profile times it at 8).
STRIP_COUNTS = (16, 8, 4, 2)
MAX_PARALLEL_CHANNELS = 4


def channel_parallel_costs(profile: CostProfile, channels: int, elements: int):
    """The profile's times for a depthwise filter on `elements` inputs directly and in the
    channel-parallel form (both measured with the same 5x5 kernel). None where it lacks either."""
    direct_op = profile.nearest("depthwise_conv_c", channels, also="channel_parallel_conv_c")
    if direct_op is None:
        return None
    parallel_op = direct_op.replace("depthwise", "channel_parallel")
    direct = profile.ms(direct_op, elements)
    parallel = profile.ms(parallel_op, elements)
    return {"direct_ms": round(direct, 4), "channel_parallel_ms": round(parallel, 4)}


def channel_parallel_filters(
    model: onnx.ModelProto, profile: CostProfile | None, force: bool = False
) -> tuple[onnx.ModelProto, list[dict]]:
    """A depthwise Conv on a 1- to 4-channel NCHW image -> s strips of rows, each with the
    halo rows its taps need, concatenated on C; one Conv with the weights (and bias) tiled s
    times; the strips put back in place. A matrix unit that holds 16 channels at a time wastes
    most of itself on 3 (GDPNPU: 9.84 -> 2.29 ms, 5x5 Gaussian on 1080p RGB, s = 16). s is the
    largest of STRIP_COUNTS that divides H; applied where the profile prices it below the
    direct form. Each output sums the same taps in the same order: results are identical."""
    if profile is None and not force:
        return model, []
    graph = ir.serde.deserialize_model(model)
    log: list[dict] = []
    changed = False
    for node in list(ir.traversal.RecursiveGraphIterator(graph.graph)):
        if node.op_type != "Conv" or node.domain not in ("", "ai.onnx"):
            continue
        data, weight = node.inputs[0], ir.convenience.get_const_tensor(node.inputs[1])
        if weight is None or data.shape is None or not data.shape.is_static():
            continue
        n, channels, height, width = (int(d) for d in data.shape)
        kernels = weight.numpy()
        group = node.attributes.get_int("group", 1)
        plain = _unit_steps(node)
        if not (
            plain
            and n == 1
            and channels <= MAX_PARALLEL_CHANNELS
            and group == channels
            and kernels.shape[:2] == (channels, 1)
        ):
            continue
        kh = kernels.shape[2]
        top, left, bottom, right = node.attributes.get_ints("pads", [0, 0, 0, 0])
        rows_out = height + top + bottom - kh + 1
        strips = next((s for s in STRIP_COUNTS if rows_out % s == 0 and rows_out >= 2 * s), 0)
        entry = {"rule": "channel_parallel_filters", "where": node.name, "channels": channels}
        if not strips:
            log.append({**entry, "applied": False, "why": f"{rows_out} output rows do not split"})
            continue
        costs = None
        if profile is not None:
            costs = channel_parallel_costs(profile, channels, n * channels * height * width)
        applied = decide(entry, costs, profile, force, "channel_parallel_ms", "direct_ms")
        log.append({**entry, "applied": applied, "strips": strips, "costs": costs})
        if not applied:
            continue
        _replace_with_strips(node, data, kernels, strips, (top, left, bottom, right), rows_out)
        changed = True
    if not changed:
        return model, log
    ir.passes.common.RemoveUnusedNodesPass()(graph)  # the replaced node's taps
    return ir.serde.serialize_model(graph), log


def _replace_with_strips(node, data, kernels, strips: int, pads, rows_out: int) -> None:
    n, channels, height, width = (int(d) for d in data.shape)
    top, left, bottom, right = pads
    kh = kernels.shape[2]
    rows = rows_out // strips

    def const(what: str, array: np.ndarray) -> ir.Value:
        value = ir.Value(name=f"{node.name}_{what}", const_value=ir.tensor(array))
        node.graph.register_initializer(value)
        return value

    new = []
    source = data
    if top or bottom:  # the conv's own zero rows, made explicit so strips can slice them
        pad = ir.node(
            "Pad",
            [data, const("row_pads", np.array([0, 0, top, 0, 0, 0, bottom, 0], np.int64))],
            name=f"{node.name}_row_pad",
        )
        new.append(pad)
        source = pad.outputs[0]
    pieces = []
    for k in range(strips):
        start, end = k * rows, k * rows + rows + kh - 1  # the strip and its halo
        piece = ir.node(
            "Slice",
            [
                source,
                const(f"strip{k}_start", np.array([start], np.int64)),
                const(f"strip{k}_end", np.array([end], np.int64)),
                const(f"strip{k}_axis", np.array([2], np.int64)),
            ],
            name=f"{node.name}_strip{k}",
        )
        new.append(piece)
        pieces.append(piece.outputs[0])
    stacked = ir.node("Concat", pieces, attributes={"axis": 1}, name=f"{node.name}_strips_on_c")
    inputs = [stacked.outputs[0], const("tiled_taps", np.tile(kernels, (strips, 1, 1, 1)))]
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        bias = ir.convenience.get_const_tensor(node.inputs[2])
        if bias is None:  # a computed bias: tile it in the graph
            tiled = ir.node(
                "Tile", [node.inputs[2], const("bias_reps", np.array([strips], np.int64))]
            )
            new.append(tiled)
            inputs.append(tiled.outputs[0])
        else:
            inputs.append(const("tiled_bias", np.tile(bias.numpy(), strips)))
    conv = ir.node(
        "Conv",
        inputs,
        attributes={"group": strips * channels, "pads": [0, left, 0, right]},
        name=f"{node.name}_channel_parallel",
    )
    out_width = int(node.outputs[0].shape[3]) if node.outputs[0].shape else width
    # (1, s*C, rows, W') -> (1, s, C, rows, W') -> (1, C, s, rows, W') -> (1, C, s*rows, W')
    split = ir.node(
        "Reshape",
        [conv.outputs[0], const("strips_shape", np.array([n, strips, channels, rows, out_width]))],
    )
    moved = ir.node("Transpose", [split.outputs[0]], attributes={"perm": [0, 2, 1, 3, 4]})
    back = ir.node(
        "Reshape",
        [moved.outputs[0], const("image_shape", np.array([n, channels, rows_out, out_width]))],
        name=f"{node.name}_strips_back",
    )
    new += [stacked, conv, split, moved, back]
    ir.convenience.replace_nodes_and_values(
        node.graph, node, [node], new, node.outputs, back.outputs
    )
