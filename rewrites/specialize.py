"""Specialise a graph to concrete input shapes: the static-shape graph backends compile."""

from __future__ import annotations

from collections.abc import Mapping

import onnx
import onnxscript.optimizer


def specialize_shapes(
    model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]
) -> onnx.ModelProto:
    """Fix every input's dims to `shapes[name]`, infer all shapes, and fold what became constant.

    With static inputs, shape arithmetic (Shape -> Slice -> Concat, as tf2onnx writes for a resize)
    folds to constants, which every backend imports more readily than data-dependent shapes.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for value in out.graph.input:
        if value.name not in shapes:
            continue
        dims = value.type.tensor_type.shape.dim
        shape = shapes[value.name]
        if len(dims) != len(shape):
            raise ValueError(f"{value.name}: rank {len(dims)} in the graph, shape {shape} given")
        for dim, size in zip(dims, shape, strict=True):
            dim.Clear()
            dim.dim_value = int(size)
    out = onnx.shape_inference.infer_shapes(out, strict_mode=True, data_prop=True)
    return onnxscript.optimizer.optimize(out)
