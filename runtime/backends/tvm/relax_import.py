"""ONNX -> TVM Relax for every TVM backend: the importer, a check that names the first op it
cannot convert, and clean-up passes that undo what the importer writes in a form the kernels pay
for (both Relax function passes, applied in IMPORT_PASSES order)."""

from __future__ import annotations

import contextlib
import io

import onnx
import tvm
from tvm import relax

from gdp.errors import CompileError, UnsupportedOpError


def import_onnx(model: onnx.ModelProto) -> tvm.IRModule:
    """`model` as a Relax module with the clean-up passes applied (constants kept in the graph)."""
    from tvm.relax.frontend.onnx import from_onnx

    check_importable(model)
    # The importer print()s the node it failed on to stdout, which is the user's program's
    # (a pipe of results, gdp export's JSON): kept for the error instead.
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            mod = from_onnx(model, keep_params_in_input=False)
    except Exception as err:
        where = printed.getvalue().strip().splitlines()
        at = f" ({where[0][:300]})" if where else ""
        raise CompileError(f"TVM's Relax ONNX importer failed: {err}{at}") from err
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


# ONNX's Slice ends past the extent (INT_MAX for "to the end") and negative (from the end).
_TO_THE_END = 2**31 - 1


@relax.transform.function_pass(opt_level=0, name="InboundSlices")
class InboundSlices:
    """A slice of a tensor with run-time extents (shape-generic models) with its begin and end
    written against the extent, where they lie inside it.

    ONNX writes "to the end" as INT_MAX and "but the last k" as -k; TVM's importer passes them
    on, and Relax's strided_slice, clamping them, gives the result an extent such as
    min(2147483643, H): the sum of that slice and another of extent H then has no known shape
    ("emit_te now only supports Tensor that has ShapeExpr shape": a 5x5 Gaussian written with
    slices, and every stencil after a reflected pad). With the ends resolved (H + 4 - 4 = H)
    the slices' extents are exact.

    A slice lies inside its axis only for extents above some minimum (x[-2:-1] needs H >= 2):
    the pass assumes the least extent of each free dimension that makes every slice of it
    inbound, and records those minima on `main` (MIN_EXTENTS_ATTR, by the dimension's variable
    name). The executable serves only shapes that meet them (`min_extents`); a smaller shape
    compiles its own. A slice whose bound is not of that form, or of static extents, is left
    alone."""

    def transform_function(self, func, mod, ctx) -> relax.Function:
        if not _has_free_extent(func):
            return func
        # A mutator, not a pattern rewrite: each binding after a resolved slice is emitted
        # again, its shape inferred anew from its operands' exact extents.
        mutator = _InboundSliceMutator(mod)
        func = mutator.visit_expr(func)
        if mutator.minima and func.attrs is not None and "global_symbol" in func.attrs:
            func = func.with_attr(MIN_EXTENTS_ATTR, dict(mutator.minima))
        return func


# The attribute of `main` that carries InboundSlices' assumed minimum extents.
MIN_EXTENTS_ATTR = "gdp_min_extents"
# The largest minimum extent InboundSlices assumes for a free dimension: a slice needing more
# is left alone (the generic compile then fails, and the model compiles per shape).
_MAX_ASSUMED_EXTENT = 1 << 12


def _has_free_extent(func: relax.Function) -> bool:
    return any(
        isinstance(p.ty, relax.TensorType)
        and isinstance(p.ty.shape, relax.ShapeExpr)
        and not all(isinstance(d, tvm.tirx.IntImm) for d in p.ty.shape.values)
        for p in func.params
    )


@relax.expr_functor.mutator
class _InboundSliceMutator(relax.PyExprMutator):
    def __init__(self, mod=None) -> None:
        super().__init__(mod)
        self.minima: dict[str, int] = {}  # free dimension's variable name -> assumed minimum

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if isinstance(call, relax.Call) and getattr(call.op, "name", "") == "relax.strided_slice":
            resolved = _inbound_slice(call, self.minima)
            if resolved is not None:
                return resolved
        return call


def _inbound_slice(call: relax.Call, minima: dict[str, int]) -> relax.Expr | None:
    """The slice with begin and end resolved against its axes' extents, raising `minima` (the
    assumed least extent of each free dimension) as far as it must; None to leave it."""
    from tvm import tirx

    x = call.args[0]
    shape = x.ty.shape if isinstance(x.ty, relax.TensorType) else None
    if not isinstance(shape, relax.ShapeExpr) or all(
        isinstance(d, tirx.IntImm) for d in shape.values
    ):
        return None
    if len(call.args) != 5 or call.attrs.assume_inbound:
        return None
    axes, begin, end, strides = (call.args[k] for k in range(1, 5))
    if not all(isinstance(t, tvm.ir.Tuple) for t in (axes, begin, end, strides)):
        return None

    def value(e):
        return e if isinstance(e, tirx.IntImm) else None

    new_begin, new_end, raised = [], [], {}
    for a, b, e, st in zip(axes.fields, begin.fields, end.fields, strides.fields, strict=True):
        a, b, e, st = value(a), value(b), value(e), value(st)
        if not all(isinstance(v, tirx.IntImm) for v in (a, b, e, st)) or int(st) != 1:
            return None
        n = shape.values[int(a)]
        b_ = n + int(b) if int(b) < 0 else tirx.const(int(b), str(n.ty.dtype))
        e_ = (
            n
            if int(e) >= _TO_THE_END
            else n + int(e)
            if int(e) < 0
            else tirx.const(int(e), str(n.ty.dtype))
        )
        bounds = {**minima, **raised}
        analyzer = _bounded_analyzer(shape, bounds)
        b_, e_ = analyzer.simplify(b_), analyzer.simplify(e_)
        if not _inside(analyzer, b_, e_, n):
            # The least extent of the axis's one free variable that puts the slice inside it.
            free = tirx.analysis.undefined_vars(n)
            if len(free) != 1:
                return None
            name = str(free[0].name)
            least = _least_extent(shape, bounds, name, (b_, e_, n))
            if least is None:
                return None
            raised[name] = least
        new_begin.append(b_)
        new_end.append(e_)
    minima.update(raised)
    return relax.op.strided_slice(
        x, [int(value(a)) for a in axes.fields], new_begin, new_end, None, assume_inbound=True
    )


def _inside(analyzer, begin, end, extent) -> bool:
    return (
        analyzer.can_prove(begin >= 0)
        and analyzer.can_prove(begin <= end)
        and analyzer.can_prove(end <= extent)
    )


def _bounded_analyzer(shape: relax.ShapeExpr, minima: dict[str, int]):
    """An analyzer that knows each free variable of `shape` lies in [its minimum, INT_MAX)."""
    from tvm import tirx

    analyzer = tvm.sym.Analyzer()
    for dim in shape.values:
        for var in tirx.analysis.undefined_vars(dim):
            dtype = str(var.ty.dtype)
            least = minima.get(str(var.name), 0)
            analyzer.bind(
                var,
                tvm.ir.Range.from_min_extent(
                    tirx.const(least, dtype), tirx.const(_TO_THE_END - least, dtype)
                ),
            )
    return analyzer


def _least_extent(shape, minima: dict[str, int], name: str, slice_) -> int | None:
    """The least minimum of variable `name` (above its present one, at most
    _MAX_ASSUMED_EXTENT) that puts `slice_` (begin, end, extent) inside its axis; the
    conditions are monotone in it."""
    low = minima.get(name, 0)

    def ok(m: int) -> bool:
        return _inside(_bounded_analyzer(shape, {**minima, name: m}), *slice_)

    if not ok(_MAX_ASSUMED_EXTENT):
        return None
    high = _MAX_ASSUMED_EXTENT
    while low + 1 < high:  # ok(high) holds, ok(low) does not
        mid = (low + high) // 2
        if ok(mid):
            high = mid
        else:
            low = mid
    return high


def min_extents(mod: tvm.IRModule) -> tuple[tvm.IRModule, list[list[int]]]:
    """`mod` without InboundSlices' attribute on `main`, and what it says as [input index,
    axis, least extent] of each free input dimension it constrains."""
    main = mod["main"]
    minima = main.attrs.get(MIN_EXTENTS_ATTR) if main.attrs is not None else None
    if not minima:
        return mod, []
    least = {str(k): int(v) for k, v in minima.items()}
    found = []
    for index, param in enumerate(main.params):
        shape = param.ty.shape if isinstance(param.ty, relax.TensorType) else None
        if not isinstance(shape, relax.ShapeExpr):
            continue
        for axis, dim in enumerate(shape.values):
            if isinstance(dim, tvm.tirx.Var) and str(dim.name) in least:
                found.append([index, axis, least[str(dim.name)]])
    mod = mod.clone() if hasattr(mod, "clone") else mod
    mod["main"] = main.without_attr(MIN_EXTENTS_ATTR)
    return mod, found


# In the order the cpu backend has always applied them: min/max first, then the casts; the
# slices of run-time extents last (shape-generic models only).
IMPORT_PASSES = [PairwiseMinMax(), PlainFloatToInt(), InboundSlices()]
