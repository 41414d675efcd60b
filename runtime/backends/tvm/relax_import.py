"""ONNX -> TVM Relax for every TVM backend: the importer, a check that names the first op it
cannot convert, and clean-up passes that undo what the importer writes in a form the kernels pay
for (both Relax function passes, applied in IMPORT_PASSES order)."""

from __future__ import annotations

import onnx
import tvm
from tvm import relax

from gdp.errors import CompileError, UnsupportedOpError


def import_onnx(model: onnx.ModelProto) -> tvm.IRModule:
    """`model` as a Relax module with the clean-up passes applied (constants kept in the graph)."""
    from tvm.relax.frontend.onnx import from_onnx

    check_importable(model)
    try:
        mod = from_onnx(model, keep_params_in_input=False)
    except Exception as err:
        raise CompileError(f"TVM's Relax ONNX importer failed: {err}") from err
    return tvm.transform.Sequential(IMPORT_PASSES)(mod)


def check_importable(model: onnx.ModelProto) -> None:
    """Name the first op (and its node) that TVM's Relax ONNX importer has no converter for."""
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    convertible = _get_convert_map()
    for node in model.graph.node:
        if node.op_type not in convertible:
            raise UnsupportedOpError(
                node.op_type, node.name, "TVM's Relax ONNX importer has no converter for it"
            )


@relax.transform.function_pass(opt_level=0, name="PairwiseMinMax")
class PairwiseMinMax:
    """max/min of a two-tensor stack over its new axis -> elementwise maximum/minimum.

    TVM's ONNX importer writes Max(a, b) and Min(a, b) of known shapes as a stack and a
    reduction: a reduction fuses with nothing and runs as a kernel of its own, so a chain of
    them (erosion, dilation, sorting networks) becomes one kernel per tap. The elementwise form
    fuses into one kernel."""

    def transform_function(self, func, mod, ctx) -> relax.Function:
        from tvm.relax.dpl import is_op, is_tuple, rewrite_call, wildcard

        a, b = wildcard(), wildcard()
        for reduce_op, binary in (
            ("relax.max", relax.op.maximum),
            ("relax.min", relax.op.minimum),
        ):
            pattern = is_op(reduce_op)(is_op("relax.stack")(is_tuple([a, b])))

            def rewrite(call, matches, binary=binary):
                axis = call.attrs.axis
                over_stack = axis is not None and [int(v) for v in axis] == [0]
                if not over_stack or call.attrs.keepdims:
                    return call
                return binary(matches[a], matches[b])

            func = rewrite_call(pattern, rewrite, func)
        return func


@relax.transform.function_pass(opt_level=0, name="PlainFloatToInt")
class PlainFloatToInt:
    """The importer's float -> integer Cast back to one conversion.

    TVM's ONNX importer writes Cast(float -> int8..int32, uint8..uint32) as NaN/inf -> 0, a
    conversion to a wider integer, and a wrap (mask or mod, then a sign fix), which is what
    C would do for out-of-range values on some machines. ONNX leaves an out-of-range cast
    undefined, and every graph gdp builds clamps before it converts; the emulation costs a
    dozen operations per element and, once inlined, copies its operand five times (a 1080p
    warp's index arithmetic grew tenfold). Matches only the importer's exact emission."""

    def transform_function(self, func, mod, ctx) -> relax.Function:
        from tvm.relax.dpl import is_const, is_op, rewrite_call, wildcard

        x = wildcard()
        sanitized = is_op("relax.where")(
            is_op("relax.logical_not")(is_op("relax.isfinite")(x)), is_const(), x
        )
        wide = is_op("relax.astype")(sanitized)
        unsigned = is_op("relax.floor_mod")(wide, is_const()) | is_op("relax.bitwise_and")(
            wide, is_const()
        )
        two_pow = is_const() | is_op("relax.add")(is_const(), is_const())
        signed = is_op("relax.where")(
            is_op("relax.greater_equal")(unsigned, is_const()),
            is_op("relax.subtract")(unsigned, two_pow),
            unsigned,
        )
        pattern = is_op("relax.astype")(signed | unsigned)

        def rewrite(call, matches):
            return relax.op.astype(matches[x], call.attrs.dtype)

        return rewrite_call(pattern, rewrite, func)


# In the order the cpu backend has always applied them: min/max first, then the casts.
IMPORT_PASSES = [PairwiseMinMax(), PlainFloatToInt()]
