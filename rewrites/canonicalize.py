"""Canonical names: two conversions of one program made equal byte for byte (what a cache key is
computed from). The canonical rewrites (what importers need) are rules of rewrites/rules/."""

from __future__ import annotations

import onnx


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
