"""Canonical forms that importers agree on, with the graph's meaning unchanged."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnx_ir.passes.common


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
    ordered = _canonical_order(graph)
    del graph.node[:]
    graph.node.extend(ordered)
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


def _canonical_order(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The nodes in a topological order that depends only on what they compute: each node is
    keyed by a hash of its op, attributes and inputs' hashes (inputs by name, initializers by
    content, computed values by their producer's hash), and among the nodes whose inputs are
    ready the smallest key comes first. tf2onnx emits the same graph in different orders from one
    process to the next; renaming by position alone then gives different keys."""
    import hashlib
    import heapq

    def digest(*parts: bytes | str) -> str:
        h = hashlib.sha256()
        for part in parts:
            h.update(part.encode() if isinstance(part, str) else part)
            h.update(b"\0")
        return h.hexdigest()

    value_key: dict[str, str] = {v.name: digest("input", v.name) for v in graph.input}
    for tensor in graph.initializer:
        content = onnx.TensorProto()
        content.CopyFrom(tensor)
        content.name = ""
        serialized = content.SerializeToString(deterministic=True)
        value_key[tensor.name] = digest("initializer", serialized)
    node_key: list[str] = []
    for node in graph.node:  # the given order is topological
        attrs = [a.SerializeToString(deterministic=True) for a in node.attribute]
        key = digest(node.domain, node.op_type, *attrs, *(value_key.get(i, i) for i in node.input))
        node_key.append(key)
        for k, out in enumerate(node.output):
            value_key[out] = digest(key, str(k))
    produced_by = {out: i for i, node in enumerate(graph.node) for out in node.output if out}
    waiting = [0] * len(graph.node)
    users: dict[int, list[int]] = {}
    for i, node in enumerate(graph.node):
        for producer in {produced_by[n] for n in node.input if n in produced_by}:
            waiting[i] += 1
            users.setdefault(producer, []).append(i)
    ready = [(node_key[i], i) for i in range(len(graph.node)) if not waiting[i]]
    heapq.heapify(ready)
    order = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(graph.node[i])
        for user in users.get(i, []):
            waiting[user] -= 1
            if not waiting[user]:
                heapq.heappush(ready, (node_key[user], user))
    return order


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


def pad_in_integer_type(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """Cast(x: uint8 -> float) -> Pad -> Cast(-> uint8) -> Pad(x) in x's own type.

    tf2onnx pads small integer images in float (its Pad converter casts them), and TVM imports
    the cast back to an integer as a NaN/inf test and a wrap-around mask on every pixel, which
    also keeps the padding from inlining as plain data movement. ONNX's Pad takes every type.
    """
    graph = ir.serde.deserialize_model(model)
    changed = 0
    for node in list(ir.traversal.RecursiveGraphIterator(graph.graph)):
        if node.op_type != "Pad" or node.domain not in ("", "ai.onnx"):
            continue
        cast_in = node.inputs[0].producer() if node.inputs[0] is not None else None
        if cast_in is None or cast_in.op_type != "Cast":
            continue
        source = cast_in.inputs[0]
        if source.dtype not in _EXACT_IN_FLOAT32 or _cast_to(cast_in) != ir.DataType.FLOAT:
            continue
        users = [use.node for use in node.outputs[0].uses()]
        if (
            not users
            or node.outputs[0].is_graph_output()
            or any(u.op_type != "Cast" or _cast_to(u) != source.dtype for u in users)
        ):
            continue
        inputs = [source, *node.inputs[1:]]
        if len(node.inputs) > 2 and node.inputs[2] is not None:
            fill = ir.convenience.get_const_tensor(node.inputs[2])
            if fill is None or fill.numpy().size != 1:
                continue
            value = float(fill.numpy().ravel()[0])
            typed = np.array([value]).astype(source.dtype.numpy())
            if float(typed[0]) != value:
                continue
            constant = ir.Value(name=f"{node.name}_fill", const_value=ir.tensor(typed.reshape(())))
            node.graph.register_initializer(constant)
            inputs[2] = constant
        # One integer pad per cast back (each may be a graph output, whose name it takes).
        for user in users:
            replacement = ir.node(
                "Pad", inputs, attributes=dict(node.attributes), name=f"{user.name}_integer_pad"
            )
            ir.convenience.replace_nodes_and_values(
                user.graph, user, [user], [replacement], user.outputs, replacement.outputs
            )
        changed += 1
    if not changed:
        return model, 0
    ir.passes.common.RemoveUnusedNodesPass()(graph)
    return ir.serde.serialize_model(graph), changed


# Small integer types ONNX's arithmetic takes only from opset 14: their widened type (products of
# two 16-bit values need 32 bits plus a sign) and the modulus of their wrap-around.
_SMALL_INTEGERS = {
    ir.DataType.UINT8: (ir.DataType.INT32, 8, False),
    ir.DataType.INT8: (ir.DataType.INT32, 8, True),
    ir.DataType.UINT16: (ir.DataType.INT64, 16, False),
    ir.DataType.INT16: (ir.DataType.INT64, 16, True),
}


def small_integer_arithmetic_widened(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """Add/Sub/Mul/Div on 8- and 16-bit integers -> the same in int32 (int64 for 16 bits), wrapped
    back into range with Mod and cast back: exactly ONNX's wrap-around arithmetic.

    Wrapping is a ring homomorphism for add, sub and mul, so a chain of them stays widened and
    unwrapped between its ops (each consumer in the chain takes the widened value, congruent to
    the small one), as long as a bound on its magnitude stays clear of the wide type's range; a
    value is wrapped where it leaves the chain, and before a Div (which needs the true values).
    Opset 14 added these types to the arithmetic ops; a graph exported at opset 11..13 (what ATC
    takes) cannot hold them. gdp's Canny writes its hysteresis rounds as uint8 sums."""
    model = onnx.shape_inference.infer_shapes(model)
    graph = ir.serde.deserialize_model(model)
    # small-integer value -> (a widened value congruent to it mod 2^bits, a bound on its |.|)
    congruent: dict[str, tuple[ir.Value, int]] = {}
    changed = 0
    for node in list(ir.traversal.RecursiveGraphIterator(graph.graph)):
        if node.op_type not in ("Add", "Sub", "Mul", "Div") or node.domain not in ("", "ai.onnx"):
            continue
        dtype = node.outputs[0].dtype
        if dtype not in _SMALL_INTEGERS:
            continue
        wide, bits, signed = _SMALL_INTEGERS[dtype]
        name = node.name or f"{node.op_type}_{changed}"

        def constant(value: int, label: str, name=name, wide=wide) -> ir.Value:
            array = np.array(value, dtype=wide.numpy())
            const = ir.Value(name=f"{name}_{label}", const_value=ir.tensor(array))
            graph.graph.register_initializer(const)
            return const

        chain, operands, bounds = [], [], []
        for x in node.inputs:
            twin = congruent.get(x.name)
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
        modulus = constant(1 << bits, "modulus")
        if signed:  # ((r + 2^(b-1)) mod 2^b) - 2^(b-1)
            half = constant(1 << (bits - 1), "half")
            chain.append(ir.node("Add", [value, half]))
            chain.append(ir.node("Mod", [chain[-1].outputs[0], modulus]))
            chain.append(ir.node("Sub", [chain[-1].outputs[0], half]))
        else:
            chain.append(ir.node("Mod", [value, modulus]))
        wrapped = chain[-1].outputs[0]
        back = ir.node("Cast", [wrapped], attributes={"to": dtype})
        chain.append(back)
        for i, step in enumerate(chain):
            step.name = f"{name}_widened_{i}"
        ir.convenience.replace_nodes_and_values(
            node.graph, node, [node], chain, node.outputs, back.outputs
        )
        headroom = 1 << (8 * int(wide.itemsize) - 2)
        twin = (value, bound) if bound < headroom else (wrapped, 1 << bits)
        congruent[back.outputs[0].name] = twin
        changed += 1
    if not changed:
        return model, 0
    ir.passes.common.RemoveUnusedNodesPass()(graph)
    return ir.serde.serialize_model(graph), changed
