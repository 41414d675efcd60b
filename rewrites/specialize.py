"""Specialise a graph to concrete input shapes: the static-shape graph backends compile."""

from __future__ import annotations

from collections.abc import Mapping

import onnx


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
    return _optimize(out)


def _optimize(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnxscript.optimizer.optimize, pass for pass, without its SlicesSplit rule.

    That rule turns `x[..., :k]` and `x[..., k:]` into `Split(x, num_outputs=2)`: an opset-18
    attribute in the opset-17 graphs gdp writes, placed where the later Slice stood, so that
    the earlier one's consumers came before it (tf.image.sobel_edges' dy and dx: "Dimension
    of input 0 must be 1 instead of 0", and TVM's "not output of any previous nodes"); and
    for an odd last dimension num_outputs=2 splits it ceil-first, not at k. The graph is
    sorted at the end all the same.

    Nor with its Clip(Clip(x)) and Relu(Clip(x)) fusions: they intersect the intervals, which
    is wrong where they are disjoint (tf.clip_by_value(tf.clip_by_value(x, -0.35, 0.15), 0.5,
    1.0) is 0.5 everywhere; the fused Clip(x, 0.5, 0.15) gave 0.15; Relu(Clip(x, lo, hi < 0))
    is 0, the fused Clip(x, 0, hi) gave hi). Found by tests/corpus/test_tf_fuzz.py.
    """
    import onnx_ir.passes.common as common
    from onnxscript import ir, rewriter
    from onnxscript.optimizer import _constant_folding
    from onnxscript.rewriter.rules.common import _fuse_relus_clips, slice_split_rule

    left_out = (
        slice_split_rule,
        _fuse_relus_clips.successive_clip_rule,
        _fuse_relus_clips.successive_relu_clip_rule,
    )
    rules = [r for r in rewriter._DEFAULT_REWRITE_RULES if all(r is not x for x in left_out)]
    rules.append(_never_both_signs_rule())
    model_ir = ir.serde.deserialize_model(model)
    ir.passes.Sequential(
        common.InlinePass(),
        ir.passes.PassManager(
            [
                _constant_folding.FoldConstantsPass(
                    shape_inference=True,
                    input_size_limit=_constant_folding.DEFAULT_CONSTANT_FOLD_INPUT_SIZE_LIMIT,
                    output_size_limit=_constant_folding.DEFAULT_CONSTANT_FOLD_OUTPUT_SIZE_LIMIT,
                ),
                _fold_constant_splits_pass(),
                rewriter.RewritePass(rules),
                common.RemoveUnusedNodesPass(),
                common.RemoveUnusedFunctionsPass(),
                common.RemoveUnusedOpsetsPass(),
            ],
            steps=8,
            early_stop=True,
        ),
        common.RemoveUnusedNodesPass(),
        common.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
        common.LiftSubgraphInitializersToMainGraphPass(),
        common.DeduplicateInitializersPass(),
        common.CommonSubexpressionEliminationPass(),
        common.OutputFixPass(),
        common.NameFixPass(),
    )(model_ir)
    model_ir.graph.sort()
    return ir.serde.serialize_model(model_ir)


def _split_sizes(node, extent: int) -> list[int] | None:
    """The sizes a Split node cuts `extent` into (opset 13's `split` input or attribute, or
    opset 18's num_outputs: ceil-sized parts, the last one smaller), or None where not
    constant."""
    count = len(node.outputs)
    given = node.inputs[1] if len(node.inputs) > 1 else None
    if given is not None:
        if given.const_value is None:
            return None
        return [int(v) for v in given.const_value.numpy().reshape(-1)]
    if "split" in node.attributes:
        return [int(v) for v in node.attributes["split"].as_ints()]
    part = -(-extent // count)
    return [min(part, max(extent - i * part, 0)) for i in range(count)]


def _fold_constant_splits_pass():
    """A pass folding a Split of a constant into one constant per output. onnxscript's constant
    folder skips every node of several outputs, and tf2onnx writes tf.shape(x) unstacked as a
    Split of Shape(x): with the shapes fixed, the Shape folds but the Split did not, so what was
    built from the sizes stayed a run-time computation (tf.image.image_gradients' zero row,
    `tf.zeros([batch, 1, width, depth])`), which TVM's importer refused ("emit_te now only
    supports Tensor that has ShapeExpr shape")."""
    import numpy as np
    import onnx_ir as ir

    class FoldConstantSplits(ir.passes.InPlacePass):
        def call(self, model: ir.Model) -> ir.passes.PassResult:
            modified = False
            outputs = set(model.graph.outputs)
            for node in list(model.graph):
                if node.op_type != "Split" or node.domain not in ("", "ai.onnx"):
                    continue
                source = node.inputs[0].const_value if node.inputs else None
                if source is None:
                    continue
                array = source.numpy()
                axis = node.attributes.get_int("axis", 0)
                axis = axis + array.ndim if axis < 0 else axis
                sizes = _split_sizes(node, array.shape[axis])
                if (
                    sizes is None
                    or len(sizes) != len(node.outputs)
                    or sum(sizes) != array.shape[axis]
                    or any(output in outputs for output in node.outputs)
                ):
                    continue
                parts = np.split(array, np.cumsum(sizes)[:-1], axis=axis)
                for output, part in zip(node.outputs, parts, strict=True):
                    value = ir.tensor(np.ascontiguousarray(part))
                    constant = ir.Value(name=f"{output.name}_folded", const_value=value)
                    constant.shape, constant.dtype = ir.Shape(part.shape), output.dtype
                    model.graph.register_initializer(constant)
                    ir.convenience.replace_all_uses_with(output, constant)
                model.graph.remove(node, safe=True)
                modified = True
            return ir.passes.PassResult(model, modified)

    return FoldConstantSplits()


def _never_both_signs_rule():
    """And(Less(x, 0), Greater(x, 0)) -> a constant False of x's static shape: no value is both
    below and above 0 (NaN is neither). gdp.ops.border counts an axis's positions as a running
    sum of Not of it (a count TVM's importer takes where the axis's size is known only at run
    time: a stacked morphology's second pad); with the shapes fixed, the constant lets the
    count and the gather indices made from it fold, and no scan runs (on the gpu target, one
    thread over the axis)."""
    import numpy as np
    from onnxscript import ir
    from onnxscript.rewriter import pattern

    def target(op, x, zero_below, zero_above):
        return op.And(op.Less(x, zero_below), op.Greater(x, zero_above))

    def zero(value) -> bool:
        array = value.const_value.numpy() if value.const_value is not None else None
        return array is not None and array.size == 1 and float(array.reshape(())) == 0.0

    def condition(context, x, zero_below, zero_above, **_) -> bool:
        shape = x.shape
        return shape is not None and shape.is_static() and zero(zero_below) and zero(zero_above)

    def replacement(op, x, zero_below, zero_above):
        shape = tuple(int(d) for d in x.shape)
        return op.Constant(value=ir.tensor(np.zeros(shape, np.bool_)))

    return pattern.RewriteRule(target, replacement, condition)
