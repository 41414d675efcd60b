"""Fusion for the TVM backends: `fusion="gdp"` (gdp's plan, gdp.runtime.fusion, under the
backend's kernel rules), "tvm" (TVM's FuseOps) or "none" (one kernel per op).

After LegalizeOps and AnnotateTIROpPattern every op of `main`'s dataflow block is a call_tir of a
PrimFunc. Each is classified by mapping class (gdp.ops.mapping) from TVM's own access-pattern
analysis (the PrimFunc's op_pattern) refined by its TIR: an injective kernel that only moves
values is a shuffle when its reads permute the output's axes, one-to-many when it writes more
elements than it reads, else a reorganize; a many-to-many kernel whose one reduction keeps an
input's leading axes and reduces the rest is marked as reducing rows (a row-strip schedule may
compute it beside the rows it reads), and one whose reduction reads its input row by row as a
row scan (the backend's schedules say which: the cpu's llvm_schedules.row_scan, where several of
one input share a pass). Each op also names the
graph inputs it reads, for the cost of reading one twice. The planner's groups then become Relax
functions marked Primitive, which FuseTIR turns into one kernel each, exactly as it does with
FuseOps' groups.
TVM's own plan, read back from FuseOps on a copy, is the planner's baseline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import tvm
from tvm import relax

from gdp.ops import mapping as M
from gdp.runtime import fusion as F

FUSIONS = ("gdp", "tvm", "none")
DEFAULT_FUSION = "gdp"

# TVM's OpPatternKind values (include/tvm/relax/op_attr_types.h) that decide a class; 0 is
# elementwise, 2 injective, above 4 tuple and opaque.
_BROADCAST, _INJECTIVE, _COMM_REDUCE, _OUT_EWISE_FUSABLE = 1, 2, 3, 4


class Schedules(Protocol):
    """What a TVM backend's schedule module publishes (the cpu's: llvm_schedules.py)."""

    # What one kernel may hold under these schedules: the planner's rules.
    KERNEL_RULES: F.KernelRules

    def schedule(self, mod: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
        """Every kernel of the lowered module scheduled for the target."""

    def row_scan(self, stmt) -> tuple[int, bool] | None:
        """How the schedules compute a reduction block one input row at a time: (rows, whether
        the axes before the row are reduced), or None where they do not. Read only where
        KERNEL_RULES.row_scans_share."""


def leading_spatial_axes(stmt) -> int | None:
    """How many spatial axes come first in a block's iteration, its reduction axes all after
    them (as TOPI writes a reduction); None where the two kinds interleave."""
    kinds = [iv.iter_type == tvm.tirx.IterVar.DataPar for iv in stmt.iter_vars]
    spatial = sum(kinds)
    return spatial if kinds == [True] * spatial + [False] * (len(kinds) - spatial) else None


@dataclass
class Binding:
    var: relax.Var
    value: relax.Expr
    callee: str | None  # the PrimFunc's name for a call_tir, else None


# The size the fusion plan's cost takes for a dimension known only at run time (a shape-generic
# model's free height or width): a typical image's, so that the plan is the one a specialised
# model of that size would get.
REPRESENTATIVE_EXTENT = 1024


def _extent(d) -> int:
    """A dimension as a number, a run-time one (tir.Var, or an expression of some) taken at
    REPRESENTATIVE_EXTENT. TypeError where it does not evaluate."""
    if isinstance(d, int | tvm.tirx.IntImm):
        return int(d)
    analyzer = tvm.sym.Analyzer()
    for var in tvm.tirx.analysis.undefined_vars(d):
        analyzer.bind(var, tvm.tirx.const(REPRESENTATIVE_EXTENT, str(var.ty.dtype)))
    value = analyzer.simplify(d)
    if not isinstance(value, tvm.tirx.IntImm):
        raise TypeError(f"dimension {d} does not evaluate")
    return int(value)


def _numel(shape) -> int:
    return int(np.prod([_extent(d) for d in shape], dtype=np.int64))


def _elements(ty) -> int:
    """Elements of a static tensor (of each field, for a tuple); 0 where the shape is unknown."""
    if isinstance(ty, relax.TensorType) and isinstance(ty.shape, relax.ShapeExpr):
        try:
            return _numel(ty.shape.values)
        except (TypeError, ValueError):
            return 0
    if isinstance(ty, relax.TupleType):
        return sum(_elements(f) for f in ty.fields)
    return 0


def _bytes(ty) -> int:
    if isinstance(ty, relax.TupleType):
        return sum(_bytes(f) for f in ty.fields)
    return _elements(ty) * _itemsize(ty)


def classify(
    func: tvm.tirx.PrimFunc, read_elements: int, written_elements: int, pattern: int | None = None
) -> str:
    """The mapping class of one legalized kernel (its inputs hold `read_elements` in all, its
    output `written_elements`); `pattern` overrides the op pattern TVM gave it."""
    if pattern is None:
        pattern = func.attrs.get("op_pattern") if func.attrs else None
    pattern = int(pattern) if pattern is not None else 8
    if pattern in (_COMM_REDUCE, _OUT_EWISE_FUSABLE):
        return M.MANY_TO_MANY
    if pattern > _OUT_EWISE_FUSABLE:
        return M.NOT_FUSABLE
    permuted = _moves(func)
    if permuted is None:  # computes: elementwise, or a gather with arithmetic (resize)
        return M.ONE_TO_ONE
    if written_elements > read_elements:
        return M.ONE_TO_MANY
    if pattern <= _BROADCAST:
        return M.ONE_TO_ONE
    return M.SHUFFLE if permuted else M.REORGANIZE


def _moves(func: tvm.tirx.PrimFunc) -> bool | None:
    """For a kernel whose every block stores a loaded value (maybe under a condition, as a pad
    does): whether a load permutes the block's axes; None where a block computes."""
    sch = tvm.s_tir.Schedule(func)
    permuted = False
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        stmt = sch.get(block)
        if not isinstance(stmt.body, tvm.tirx.BufferStore):
            return None
        value = stmt.body.value
        if isinstance(value, tvm.ir.Call) and str(getattr(value.op, "name", "")).endswith(
            "if_then_else"
        ):
            value = value.args[1]
        if not isinstance(value, tvm.ir.TensorLoad):
            return None
        axes = [iv.var for iv in stmt.iter_vars]
        indices = list(value.indices)
        if len(axes) > 1 and len(indices) == len(axes):
            order = [next((k for k, a in enumerate(axes) if a.same_as(i)), -1) for i in indices]
            if sorted(order) == list(range(len(axes))) and order != sorted(order):
                permuted = True
    return permuted


def _constant_gather(func: tvm.tirx.PrimFunc, args: list[relax.Expr]) -> bool:
    """Whether a kernel is a gather (relax take: one block, y[..., i, k, ...] = x[..., idx[i, k],
    ...]) whose indices are a constant, as gdp's lowerings of TF's resizes write them. TVM marks
    take opaque, so it would run alone and store its whole, K times larger, output; with a
    constant index it is an injective map, fused and inlined into what reads it like any other
    (the indices' values are checked against the input's extent where TVM legalizes them)."""
    if len(args) != len(func.params) - 1:  # call_tir's arguments: every parameter but the output
        return False
    sch = tvm.s_tir.Schedule(func)
    try:
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
    except tvm.s_tir.ScheduleError:  # a kernel without a root block (TOPI's cumsum): not a take
        return False
    if len(blocks) != 1:
        return False
    stmt = sch.get(blocks[0])
    if not isinstance(stmt.body, tvm.tirx.BufferStore):
        return False
    value = stmt.body.value
    if not isinstance(value, tvm.ir.TensorLoad) or any(
        iv.iter_type != tvm.tirx.IterVar.DataPar for iv in stmt.iter_vars
    ):
        return False
    buffers = list(func.params[:-1])  # a parameter is its buffer here
    indexed = [
        k
        for k, buf in enumerate(buffers)
        if any(_walk_loads(i, buf) for i in value.indices) and not buf.same_as(value.source)
    ]
    return bool(indexed) and all(isinstance(args[k], tvm.ir.Constant) for k in indexed)


# TOPI kernels TVM marks opaque where their input's extents are known only at run time, though
# each is one spatial block that reads its input at computed indices (_generic_injective).
_GENERIC_INJECTIVE = ("resize", "mirror_pad", "strided_slice", "concatenate", "take")


def _generic_injective(name: str, func: tvm.tirx.PrimFunc) -> bool:
    """Whether a kernel is one of _GENERIC_INJECTIVE (TOPI's resize, mirror pad, slice,
    concat, take) of an input whose extents are known only at run time (shape-generic models):
    one spatial block reading its input at computed indices, which TVM marks opaque. It then
    ran alone: a resize after its producers stored the whole input (a cast, a transpose to
    NCHW; 35 ms at 1080p where the specialised model's fused gathers took 0.7), a reflected pad
    before the stencil that reads it (the specialised model fuses it: 13 ms more for a 1080p
    Gaussian), gdp.cv2's resize passes (takes of run-time tables) each in a kernel of their
    own. Classified as the injective op it is, it fuses as with static shapes (a computing
    gather is one-to-one, a pad one-to-many)."""
    if not name.startswith(_GENERIC_INJECTIVE) or func.attrs is None:
        return False
    if not any(not isinstance(d, tvm.tirx.IntImm) for param in func.params for d in param.ty.shape):
        return False
    sch = tvm.s_tir.Schedule(func)
    try:
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
    except tvm.s_tir.ScheduleError:
        return False
    return len(blocks) == 1 and all(
        iv.iter_type == tvm.tirx.IterVar.DataPar for iv in sch.get(blocks[0]).iter_vars
    )


def _injective_when_generic(mod: tvm.IRModule) -> tvm.IRModule:
    """`mod` with the op pattern of each _generic_injective kernel set to injective, as TVM
    gives the same kernel of static extents: TVM's plan (the baseline gdp's plan starts from and
    never groups stencils beyond) then groups them as it does with static shapes. A reflected
    pad fused into its stencil is fast only because llvm_schedules cuts each row of run-time
    length into its reflected borders and a middle of plain loads (_partition_borders): read
    through reflected indices at every tap, the fused 1080p Gaussian ran 15 ms, the pad apart
    9.8, the specialised kernel 3.5."""
    lookups = _computed_table_lookups(mod)
    for gvar, func in list(mod.functions.items()):
        if gvar.name_hint in lookups:
            continue
        if isinstance(func, tvm.tirx.PrimFunc) and _generic_injective(gvar.name_hint, func):
            mod[gvar] = func.with_attr("op_pattern", _INJECTIVE)
    return mod


# A take's data of at most this many elements, computed in the graph, is a table looked up.
TABLE_ELEMENTS = 1 << 16


def _computed_table_lookups(mod: tvm.IRModule) -> set[str]:
    """The takes (by kernel name) that look a computed table up: their data a small static
    tensor another kernel computes (equalizeHist's 256-entry table from the histogram). Fused
    as injective, the table's computation would run again for every pixel that reads it (a
    1080p equalizeHist's lookup took 11 ms); left opaque, the table is computed once. A take
    of an image, or of a table the caller passes in (LUT, addWeighted), fuses as before."""
    main = next((f for g, f in mod.functions.items() if g.name_hint == "main"), None)
    if not isinstance(main, relax.Function) or not isinstance(main.body, relax.SeqExpr):
        return set()
    call_tir = tvm.ir.Op.get("relax.call_tir")
    computed: set = set()
    found: set[str] = set()
    for block in main.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if not (isinstance(value, relax.Call) and value.op.same_as(call_tir)):
                continue
            computed.add(binding.var)
            callee, args = value.args[0], list(value.args[1].fields)
            if not callee.name_hint.startswith("take") or not args:
                continue
            data = args[0]
            shape = data.ty.shape if isinstance(data.ty, relax.TensorType) else None
            if not isinstance(shape, relax.ShapeExpr) or data not in computed:
                continue
            if not all(isinstance(d, tvm.tirx.IntImm) for d in shape.values):
                continue
            if int(np.prod([int(d) for d in shape.values])) <= TABLE_ELEMENTS:
                found.add(callee.name_hint)
    return found


def _walk_loads(expr, buffer) -> bool:
    """Whether the TIR expression `expr` loads from `buffer`."""
    if isinstance(expr, tvm.ir.TensorLoad) and expr.source.same_as(buffer):
        return True
    return any(_walk_loads(c, buffer) for c in tir_operands(expr))


_OPERANDS = ("a", "b", "value", "condition", "true_value", "false_value")


def tir_operands(expr) -> list:
    """The expressions a TIR expression node reads: a load's indices, an operator's operands, a
    call's arguments. TVM has no Python TIR visitor; this follows the fields the expression
    nodes hold their operands in (shared by the walkers here and in the schedules)."""
    if isinstance(expr, tvm.ir.TensorLoad):
        children = list(expr.indices)
    else:
        children = [getattr(expr, f, None) for f in _OPERANDS]
        children += list(getattr(expr, "args", None) or ())
    return [c for c in children if isinstance(c, tvm.ir.Expr)]


def _reduction(func: tvm.tirx.PrimFunc):
    """A kernel's one reduction block and its own buffers, or None where it has none or several."""
    sch = tvm.s_tir.Schedule(func)
    root = sch.get_sblock("root")
    blocks = [sch.get(b) for b in sch.get_child_blocks(root)]
    reductions = [
        b for b in blocks if any(iv.iter_type != tvm.tirx.IterVar.DataPar for iv in b.iter_vars)
    ]
    return (reductions[0], list(sch.get(root).alloc_buffers)) if len(reductions) == 1 else None


def _row_scan_rows(found, schedules: Schedules) -> int:
    """The rows a kernel's one reduction (`_reduction`'s answer) scans one at a time under the
    backend's schedules, or 0 (always, where the kernel rules never let row scans share)."""
    if not schedules.KERNEL_RULES.row_scans_share:
        return 0
    scan = schedules.row_scan(found[0]) if found else None
    return scan[0] if scan else 0


def _reduces_rows(found) -> bool:
    """Whether a kernel's one reduction (`_reduction`'s answer) reduces the trailing axes of one
    of its inputs and keeps the leading ones (a mean along each row of an image)."""
    if found is None:
        return False
    block, internal = found
    if not leading_spatial_axes(block):
        return False
    extents = [iv.dom.extent for iv in block.iter_vars]

    def same(shape) -> bool:  # run-time extents too (shape-generic kernels)
        return len(shape) == len(extents) and all(
            tvm.sym.Analyzer().can_prove_equal(d, e) for d, e in zip(shape, extents, strict=True)
        )

    return any(
        same(list(read.source.shape))
        for read in block.reads
        if not any(read.source.same_as(b) for b in internal)  # a kernel parameter
    )


def _dataflow(mod: tvm.IRModule) -> tuple[relax.Function, relax.DataflowBlock] | None:
    main = mod["main"]
    body = main.body
    if not isinstance(body, relax.SeqExpr) or len(body.blocks) != 1:
        return None
    block = body.blocks[0]
    if not isinstance(block, relax.DataflowBlock):
        return None
    return main, block


def _bindings(block: relax.DataflowBlock) -> list[Binding]:
    out = []
    call_tir = tvm.ir.Op.get("relax.call_tir")
    for b in block.bindings:
        value = b.value
        callee = None
        if isinstance(value, relax.Call) and value.op.same_as(call_tir):
            callee = value.args[0].name_hint
        out.append(Binding(b.var, value, callee))
    return out


def _inputs(value: relax.Expr) -> list[relax.Expr]:
    """The relax values a binding reads (call_tir's argument tuple, the call's args, or the
    var an alias binding `gv = lv` names: tf2onnx's Identity nodes become such aliases)."""
    if isinstance(value, relax.Var):
        return [value]
    if isinstance(value, relax.Call):
        args = list(value.args)
        if value.op.same_as(tvm.ir.Op.get("relax.call_tir")):
            args = list(args[1].fields) if isinstance(args[1], relax.Tuple) else [args[1]]
        flat = []
        for a in args:
            flat += list(a.fields) if isinstance(a, relax.Tuple) else [a]
        return flat
    if isinstance(value, relax.TupleGetItem):
        return [value.tuple_value]
    if isinstance(value, relax.Tuple):
        return list(value.fields)
    return []


def graph_of(mod: tvm.IRModule, schedules: Schedules) -> tuple[list[F.Op], list[Binding]] | None:
    """The planner's DAG of `main` (None where main is not one dataflow block)."""
    found = _dataflow(mod)
    if found is None:
        return None
    main, block = found
    bindings = _bindings(block)
    index = {b.var: i for i, b in enumerate(bindings)}
    outputs = set(relax.analysis.free_vars(main.body.body))
    params = set(main.params)
    ops = []
    for b in bindings:
        klass = M.NOT_FUSABLE
        if isinstance(b.value, relax.TupleGetItem):
            klass = M.REORGANIZE  # a view of one field of a multi-output kernel's result
        elif b.callee and _constant_gather(mod[b.callee], _inputs(b.value)):
            klass = M.ONE_TO_ONE
        elif b.callee:
            read = sum(_elements(a.ty) for a in _inputs(b.value))
            injective = _generic_injective(b.callee, mod[b.callee])
            klass = classify(
                mod[b.callee], read, _elements(b.var.ty), _INJECTIVE if injective else None
            )
        producers = sorted({index[a] for a in _inputs(b.value) if a in index})
        # The one reduction of a many-to-many kernel, looked at by both row tests below.
        found = _reduction(mod[b.callee]) if klass == M.MANY_TO_MANY else None
        sources = {(a.name, _bytes(a.ty)) for a in _inputs(b.value) if a in params}
        ops.append(
            F.Op(
                b.var.name,
                klass,
                _bytes(b.var.ty),
                tuple(producers),
                b.var in outputs,
                reduces_rows=_reduces_rows(found),
                row_scan=_row_scan_rows(found, schedules),
                sources=tuple(sorted(sources)),
            )
        )
    return ops, bindings


def tvm_plan(mod: tvm.IRModule, bindings: list[Binding]) -> list[int]:
    """FuseOps' grouping of the bindings, read back from its output on a copy where each call
    site calls its own copy of its kernel."""
    main, _ = _dataflow(mod)
    outputs = set(relax.analysis.free_vars(main.body.body))
    copy = _without_main(mod)
    site = {}
    bb = relax.BlockBuilder(copy)
    with bb.function("main", list(main.params), attrs=_attrs(main)):
        with bb.dataflow():
            remap: dict[relax.Var, relax.Expr] = {}
            for i, b in enumerate(bindings):
                value = _bind_any(b.value, remap)
                if b.callee:
                    # An attribute of its own keeps add_func from sharing equal kernels.
                    gv = bb.add_func(mod[b.callee].with_attr("gdp_site", i), f"gdp_site_{i}")
                    site[gv.name_hint] = i
                    value = relax.Call(value.op, [gv, *value.args[1:]], value.attrs, value.ty_args)
                remap[b.var] = _emit(bb, value, b.var, outputs)
            result = bb.emit_output(_bind_any(main.body.body, remap))
        bb.emit_func_output(result)
    fused = relax.transform.FuseOps()(bb.get())
    group_of = list(range(len(bindings)))
    for func in fused.functions.values():
        if not isinstance(func, relax.Function) or not (func.attrs and func.attrs.get("Primitive")):
            continue
        members = [site[c.args[0].name_hint] for c in _call_tirs(func)]
        for m in members:
            group_of[m] = members[0]
    # FuseOps fuses through TupleGetItem (a split's fields): such a binding joins its tuple's
    # group where one of its readers is in that group too.
    index = {b.var: i for i, b in enumerate(bindings)}
    for i, b in enumerate(bindings):
        if isinstance(b.value, relax.TupleGetItem) and b.value.tuple_value in index:
            source = group_of[index[b.value.tuple_value]]
            readers = [group_of[j] for j, c in enumerate(bindings) if b.var in _inputs(c.value)]
            if source in readers:
                group_of[i] = source
    return group_of


def _call_tirs(func: relax.Function) -> list[relax.Call]:
    calls = []
    call_tir = tvm.ir.Op.get("relax.call_tir")

    def visit(expr):
        if isinstance(expr, relax.Call) and expr.op.same_as(call_tir):
            calls.append(expr)

    relax.analysis.post_order_visit(func.body, visit)
    return calls


def _emit(bb: relax.BlockBuilder, value: relax.Expr, var: relax.Var, outputs: set) -> relax.Var:
    """Bind `value` under `var`'s name, as a dataflow output where main returns `var`."""
    if var in outputs:
        return bb.emit_output(value, name_hint=var.name)
    return bb.emit(value, name_hint=var.name)


def apply(mod: tvm.IRModule, bindings: list[Binding], group_of: list[int]) -> tvm.IRModule:
    """`main` with each group of more than one op moved into a Primitive function."""
    main, _ = _dataflow(mod)
    members: dict[int, list[int]] = {}
    for i, g in enumerate(group_of):
        members.setdefault(g, []).append(i)
    index = {b.var: i for i, b in enumerate(bindings)}
    final = set(relax.analysis.free_vars(main.body.body))
    readers: dict[int, set[int]] = {}
    for j, b in enumerate(bindings):
        for a in _inputs(b.value):
            if a in index:
                readers.setdefault(index[a], set()).add(group_of[j])
    order = _group_order(bindings, group_of, index)
    bb = relax.BlockBuilder(_without_main(mod))
    with bb.function("main", list(main.params), attrs=_attrs(main)):
        with bb.dataflow():
            remap: dict[relax.Var, relax.Expr] = {}
            for g in order:
                ids = members[g]
                if len(ids) == 1:
                    b = bindings[ids[0]]
                    remap[b.var] = _emit(bb, _bind_any(b.value, remap), b.var, final)
                    continue
                exported = [
                    i for i in ids if bindings[i].var in final or readers.get(i, set()) - {g}
                ]
                func, args = _primitive(bindings, ids, exported, remap)
                names = "_".join(bindings[i].callee for i in ids if bindings[i].callee)
                gv = bb.add_func(func, f"fused_{names}"[:80])
                call = relax.Call(gv, args)
                if len(exported) == 1:
                    remap[bindings[exported[0]].var] = _emit(
                        bb, call, bindings[exported[0]].var, final
                    )
                    continue
                tup = bb.emit(call)
                for k, i in enumerate(exported):
                    remap[bindings[i].var] = _emit(
                        bb, relax.TupleGetItem(tup, k), bindings[i].var, final
                    )
            result = bb.emit_output(_bind_any(main.body.body, remap))
        bb.emit_func_output(result)
    return bb.get()


def _group_order(bindings, group_of, index) -> list[int]:
    """Groups in an order where every group comes after the groups it reads (a plan is convex,
    so its condensed graph is acyclic)."""
    deps: dict[int, set[int]] = {}
    for j, b in enumerate(bindings):
        deps.setdefault(group_of[j], set())
        for a in _inputs(b.value):
            if a in index and group_of[index[a]] != group_of[j]:
                deps[group_of[j]].add(group_of[index[a]])
    order, done = [], set()
    first = {}
    for j, g in enumerate(group_of):
        first.setdefault(g, j)
    pending = sorted(deps, key=first.get)
    while pending:
        ready = next(g for g in pending if deps[g] <= done)
        order.append(ready)
        done.add(ready)
        pending.remove(ready)
    return order


def _primitive(bindings, ids, exported, remap):
    """A Primitive function running bindings `ids`: its parameters are the values they read from
    outside (constants too, as FuseOps lifts them), its result the `exported` values."""
    inside = {bindings[i].var for i in ids}
    params, args, param_of = [], [], {}
    scalars = []  # run-time extents passed to kernels as they are (legalized call_tir's)
    for i in ids:
        for a in _inputs(bindings[i].value):
            if isinstance(getattr(a, "ty", None), tvm.ir.PrimType):
                scalars.append(a)
                continue
            if a in inside or not isinstance(a, relax.Var | tvm.ir.Constant):
                continue
            if a in param_of:
                continue
            outer = remap.get(a, a)
            p = relax.Var(f"p{len(params)}", a.ty)
            param_of[a] = p
            params.append(p)
            args.append(outer)
    # A run-time extent the parameters use but none defines (a padded input's H + 4, read
    # where H is not a parameter's dimension) passed as a shape: the function's result would
    # otherwise have no known shape (TVM's FuseOps does the same).
    undefined = _undefined_extents(params, scalars)
    if undefined:
        params.append(relax.Var("tir_vars", relax.ShapeType(undefined)))
        args.append(relax.ShapeExpr(undefined))
    bb = relax.BlockBuilder()
    with bb.function("fused", params, attrs={"Primitive": True}, private=True):
        with bb.dataflow():
            local: dict = dict(param_of)
            for i in ids:
                b = bindings[i]
                value = _bind_any(b.value, local)
                if i in exported and len(exported) == 1:
                    local[b.var] = bb.emit_output(value, name_hint=b.var.name)
                else:
                    local[b.var] = bb.emit(value, name_hint=b.var.name)
            if len(exported) == 1:
                out = local[bindings[exported[0]].var]
            else:
                out = bb.emit_output(relax.Tuple([local[bindings[i].var] for i in exported]))
        bb.emit_func_output(out)
    func = bb.get()["fused"]
    return func, args


def _undefined_extents(params: list[relax.Var], scalars: list) -> list:
    """The tir variables the parameters' shapes and the `scalars` (tir expressions passed to
    kernels) use that no parameter's shape defines (as a dimension of its own), in order of
    first use."""
    defined, used = set(), []
    for e in scalars:
        used.extend(tvm.tirx.analysis.undefined_vars(e))

    def shapes(ty):
        if isinstance(ty, relax.TupleType):
            return [s for f in ty.fields for s in shapes(f)]
        if isinstance(ty, relax.TensorType) and isinstance(ty.shape, relax.ShapeExpr):
            return [list(ty.shape.values)]
        return []

    for p in params:
        for dims in shapes(p.ty):
            for d in dims:
                if isinstance(d, tvm.tirx.Var):
                    defined.add(d)
                elif not isinstance(d, tvm.tirx.IntImm):
                    used.extend(tvm.tirx.analysis.undefined_vars(d))
    out = []
    for v in used:
        if v not in defined and not any(v.same_as(o) for o in out):
            out.append(v)
    return out


def _bind_any(expr: relax.Expr, mapping: dict) -> relax.Expr:
    """`expr` with vars and constants replaced (FuseOps passes constants as parameters)."""

    @relax.expr_functor.mutator
    class Replace(relax.PyExprMutator):
        def visit_var_(self, op):
            return mapping.get(op, op)

        def visit_dataflow_var_(self, op):
            return mapping.get(op, op)

        def visit_generic_const_(self, op):
            return mapping.get(op, op)

    return Replace().visit_expr(expr)


def fuse(
    mod: tvm.IRModule, mode: str, cost: F.CostModel, schedules: Schedules
) -> tuple[tvm.IRModule, dict]:
    """`mod` (legalized, op patterns annotated) with its ops grouped as `mode` says, gdp's plan
    under the kernel rules of the backend's `schedules`, and a report: the groups and the bytes
    crossing kernel boundaries under this plan and under TVM's."""
    mod = _injective_when_generic(mod)
    found = graph_of(mod, schedules)
    if found is None:  # not one dataflow block: TVM's FuseOps as it is
        return relax.transform.FuseOps()(mod), {"fusion": "tvm", "planned": False}
    ops, bindings = found
    graph = F.Graph(ops, schedules.KERNEL_RULES)
    baseline = tvm_plan(mod, bindings)
    if not F.acyclic(graph, baseline):  # read back wrong: plan from scratch instead
        baseline = list(range(len(ops)))
    if mode == "tvm":
        plan = baseline
    elif mode == "none":
        plan = list(range(len(ops)))
    else:
        plan = _no_tuple_exports(bindings, F.plan(ops, schedules.KERNEL_RULES, cost, baseline))
    report = {
        "fusion": mode,
        "ops": len(ops),
        "groups": len(set(plan)),
        "boundary_bytes": graph.boundary_bytes(plan),
        "reread_bytes": graph.reread_bytes(plan),
        "tvm_groups": len(set(baseline)),
        "tvm_boundary_bytes": graph.boundary_bytes(baseline),
        "tvm_reread_bytes": graph.reread_bytes(baseline),
    }
    if mode == "tvm":
        return relax.transform.FuseOps()(mod), report
    return apply(mod, bindings, plan), report


def _no_tuple_exports(bindings: list[Binding], group_of: list[int]) -> list[int]:
    """The plan with every group that would pass a tuple (a split's whole result) to another
    group broken up into single ops: FuseTIR mishandles a tuple among a primitive function's
    results (it declares the fields' buffers twice)."""
    index = {b.var: i for i, b in enumerate(bindings)}
    out = list(group_of)
    fresh = max(group_of, default=0) + 1
    for j, b in enumerate(bindings):
        for a in _inputs(b.value):
            i = index.get(a)
            if i is None or group_of[i] == group_of[j]:
                continue
            if isinstance(bindings[i].var.ty, relax.TupleType):
                broken = group_of[i]
                for k, g in enumerate(group_of):
                    if g == broken:
                        out[k] = fresh
                        fresh += 1
    return out


def _attrs(func: relax.Function) -> dict | None:
    return {k: v for k, v in func.attrs.items()} if func.attrs else None


def _without_main(mod: tvm.IRModule) -> tvm.IRModule:
    return tvm.IRModule({gv: f for gv, f in mod.functions.items() if gv.name_hint != "main"})


def _itemsize(ty) -> int:
    try:
        return np.dtype(str(ty.dtype)).itemsize
    except (TypeError, ValueError, AttributeError):
        return 1
