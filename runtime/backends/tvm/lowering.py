"""The one lowering pipeline of the TVM backends: a Relax module -> the target's library dispatch
and legalisation (TVM's default passes for it, without FuseOps and FuseTIR) -> the fusion step
(gdp's plan, TVM's FuseOps or none: fusion.py) -> FuseTIR -> TVM's dataflow lowering and
finalisation -> the backend's schedules. `pipeline` is TVM's own per-target pass list
(tvm.relax.backend.<target>.pipeline: library_dispatch_passes, legalize_passes,
dataflow_lower_passes, finalize_passes)."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import tvm
from tvm import relax

from gdp.runtime.backends.tvm.fusion import Schedules, fuse
from gdp.runtime.backends.tvm.tvm_log import tvm_notices_dropped
from gdp.runtime.fusion import CostModel

_FUSION_PASSES = ("FuseOps", "FuseTIR")


def lower(
    mod: tvm.IRModule,
    target: tvm.target.Target,
    pipeline: ModuleType,
    schedules: Schedules,
    fusion: str,
    cost: CostModel,
    finish: Callable[[tvm.IRModule], tvm.IRModule],
) -> tuple[tvm.IRModule, dict, dict | None]:
    """`mod` lowered for `target` and scheduled by `schedules`, ready for tvm.compile with no
    Relax pipeline of its own, the fusion report, and the program's `direct_call` (None where it
    is more than one kernel). `finish` runs last on the scheduled module (the cpu relaxes its
    kernels' parameter alignment there)."""
    with target, tvm_notices_dropped():
        legalize = [
            p for p in pipeline.legalize_passes(target) if p.info.name not in _FUSION_PASSES
        ]
        mod = tvm.transform.Sequential(pipeline.library_dispatch_passes(target) + legalize)(mod)
        mod, report = fuse(mod, fusion, cost, schedules)
        mod = relax.transform.FuseTIR()(mod)
        direct = direct_call(mod)
        rest = pipeline.dataflow_lower_passes(target) + pipeline.finalize_passes(target)
        # Storage sizes of run-time extents in size classes, once allocations are storages.
        at = next(i for i, p in enumerate(rest) if p.info.name == "LowerAllocTensor") + 1
        rest.insert(at, size_classes_pass())
        mod = tvm.transform.Sequential(rest)(mod)
    mod = schedules.schedule(mod, target)
    # After the schedules: rfactor takes a reduction whose start is TOPI's value only.
    mod = infinite_extrema_pass()(mod)
    return finish(mod), report, direct


def infinite_extrema_pass() -> tvm.transform.Pass:
    """A float max (min) reduction starts from -inf (+inf), not from the type's lowest (largest)
    finite value, which is where TOPI starts it: the max of values that are all -inf (a masked
    max, tf.reduce_max(tf.where(mask, x, -inf)) where no value is kept) was -3.4e38 where TF,
    NumPy and onnxruntime give -inf. Pools keep TOPI's start: TF's max_pool2d of a window of
    -infs gives the lowest finite value too.

    Applied to the scheduled kernels (rfactor takes a reduction whose start is TOPI's value
    only): every store of that finite start into a buffer that a block max- (min-) reduces
    into, be it the block's init, a decomposed init block or an rfactor's partial buffer."""
    import numpy as np
    import tvm_ffi
    from tvm import tirx
    from tvm.s_tir import SBlock

    def reduced_into(func) -> tuple[list, list]:
        """The buffers of `func` that blocks max- and min-reduce into (pools' left out)."""
        found: tuple[list, list] = ([], [])
        pools: list = []

        def seen(block):
            body = block.body
            if isinstance(body, tirx.BufferStore) and isinstance(body.value, (tirx.Max, tirx.Min)):
                value = body.value
                if any(
                    isinstance(v, tvm.ir.TensorLoad) and v.source.same_as(body.buffer)
                    for v in (value.a, value.b)
                ):
                    pool = block.annotations.get("schedule_rule") == "meta_schedule.pool_max"
                    into = pools if pool else found[isinstance(value, tirx.Min)]
                    into.append(body.buffer)
            return block

        tvm_ffi.structural_map(func, [(SBlock, seen)])
        return tuple([b for b in kind if not any(b.same_as(p) for p in pools)] for kind in found)

    def transform(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        for gv, func in list(mod.functions.items()):
            if not isinstance(func, tirx.PrimFunc):
                continue
            maxed, mined = reduced_into(func)
            if not (maxed or mined):
                continue

            def start(store, maxed=maxed, mined=mined):
                value = store.value
                dtype = str(value.ty.dtype) if isinstance(value, tirx.FloatImm) else ""
                if dtype not in ("float16", "float32", "float64"):
                    return store
                finite = float(np.finfo(np.dtype(dtype)).max)
                if value.value == -finite and any(store.buffer.same_as(b) for b in maxed):
                    infinity = -np.inf
                elif value.value == finite and any(store.buffer.same_as(b) for b in mined):
                    infinity = np.inf
                else:
                    return store
                return tirx.BufferStore(store.buffer, tirx.FloatImm(dtype, infinity), store.indices)

            mod[gv] = tvm_ffi.structural_map(func, [(tirx.BufferStore, start)])
        return mod

    return tvm.transform.module_pass(transform, opt_level=0, name="GdpInfiniteExtrema")


# Size classes of storage of run-time size: SIZE_CLASSES_PER_OCTAVE an octave, so a class
# wastes under 1 / SIZE_CLASSES_PER_OCTAVE of its size; none under a 4 KiB page.
SIZE_CLASSES_PER_OCTAVE = 4
_PAGE_BITS = 12


def size_class(size: tvm.tirx.PrimExpr) -> tvm.tirx.PrimExpr:
    """`size` (bytes, int64, at least 1) rounded up to its size class: a multiple of
    2^max(floor(log2 size) - log2 SIZE_CLASSES_PER_OCTAVE, 12)."""
    from tvm import tirx

    size = tirx.Cast("int64", size)
    top = tirx.IntImm("int64", 63) - tirx.Cast("int64", tirx.clz(size))  # floor(log2 size)
    bits = tirx.max(top - (SIZE_CLASSES_PER_OCTAVE.bit_length() - 1), _PAGE_BITS)
    one = tirx.IntImm("int64", 1)
    return tirx.shift_left(tirx.shift_right(size + tirx.shift_left(one, bits) - one, bits), bits)


def size_classes_pass() -> tvm.transform.Pass:
    """Every storage the VM allocates with a size known only at run time (a shape-generic
    program's intermediates and outputs) rounded up to its size class (size_class).

    The VM's pooled allocator keeps each freed block for a later request of exactly its size
    and never gives one back: a generic program fed images of ever new sizes held one more
    set of blocks per size (a 1080p sharpness program grew by 8 MB a size, without bound), and
    every new size paid the page faults of fresh memory (3-4 ms of a 5 ms call). In size
    classes, sizes near each other share blocks, and the blocks held are bounded by the
    classes met: a handful per octave of sizes."""
    alloc_storage = tvm.ir.Op.get("relax.memory.alloc_storage")

    @relax.expr_functor.mutator
    class Classes(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not call.op.same_as(alloc_storage):
                return call
            shape = call.args[0]
            if not isinstance(shape, relax.ShapeExpr) or len(shape.values) != 1:
                return call
            (size,) = shape.values
            if isinstance(size, tvm.tirx.IntImm):
                return call
            args = [relax.ShapeExpr([size_class(size)]), *call.args[1:]]
            return relax.Call(call.op, args, call.attrs, call.ty_args)

    def transform(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        for gv, func in list(mod.functions.items()):
            if isinstance(func, relax.Function):
                mod[gv] = Classes().visit_expr(func)
        return mod

    return tvm.transform.module_pass(transform, opt_level=0, name="GdpStorageSizeClasses")


def direct_call(mod: tvm.IRModule) -> dict | None:
    """How to run a program that is one kernel without the Relax VM: {"kernel": its symbol,
    "args": the graph inputs' indices in the kernel's order, "outputs": [[dtype, [dim, ...]],
    ...]}, each dim an extent or [input index, axis] (an input's free dimension). None where
    `main` is more than one call of one kernel on its inputs (constants, shape computations,
    index checks, several kernels), or an output's extent is an expression.

    The VM runs such a program as shape checks, an allocation from its pool and the call; the
    kernel alone checks the shapes too, and can write into a caller's buffer (a batch's row)."""
    main = mod["main"]
    params = list(main.params)
    body = main.body
    if not isinstance(body, relax.SeqExpr) or len(body.blocks) != 1:
        return None
    bindings = list(body.blocks[0].bindings)
    if not bindings or not isinstance(bindings[0], relax.VarBinding):
        return None
    call = bindings[0].value
    if not (
        isinstance(call, relax.Call)
        and getattr(call.op, "name", "") == "relax.call_tir"
        and isinstance(call.args[0], tvm.ir.GlobalVar)
        and len(call.args) == 2
        and isinstance(call.args[1], relax.Tuple)
    ):
        return None
    args = list(call.args[1].fields)
    if not all(any(a.same_as(p) for p in params) for a in args):
        return None
    indices = [next(i for i, p in enumerate(params) if a.same_as(p)) for a in args]
    called = bindings[0].var
    # The outputs: the call's result, or a tuple of its fields in order.
    rest = bindings[1:]
    fields = {}
    for b in rest:
        value = b.value
        if not (isinstance(b, relax.VarBinding) and isinstance(value, relax.TupleGetItem)):
            return None
        if not value.tuple_value.same_as(called):
            return None
        fields[b.var] = value.index
    result = body.body
    if isinstance(result, relax.Tuple):
        order = [fields.get(f) for f in result.fields]
        if order != list(range(len(order))):
            return None
        types = list(called.ty.fields)
    elif result.same_as(called) and not fields:
        types = [called.ty]
    else:
        return None
    outputs = []
    for ty in types:
        if not isinstance(ty, relax.TensorType) or not isinstance(ty.shape, relax.ShapeExpr):
            return None
        dims = []
        for d in ty.shape.values:
            dim = int(d) if isinstance(d, tvm.tirx.IntImm) else _input_axis(d, params)
            if dim is None:
                return None
            dims.append(dim)
        outputs.append([str(ty.dtype.dtype), dims])
    kernel = mod[call.args[0]]
    symbol = kernel.attrs.get("global_symbol") if kernel.attrs is not None else None
    return {"kernel": str(symbol or call.args[0].name_hint), "args": indices, "outputs": outputs}


def _input_axis(dim, params) -> list[int] | None:
    """[input index, axis] of the first input whose shape has the variable `dim` there."""
    if not isinstance(dim, tvm.tirx.Var):
        return None
    for i, p in enumerate(params):
        shape = p.ty.shape if isinstance(p.ty, relax.TensorType) else None
        if not isinstance(shape, relax.ShapeExpr):
            continue
        for axis, d in enumerate(shape.values):
            if d.same_as(dim):
                return [i, axis]
    return None
