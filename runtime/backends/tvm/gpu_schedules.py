"""The gpu target's schedules (runtime/backends/tvm/cuda.py): every kernel of the lowered module
bound to CUDA blocks and threads, as fusion.Schedules asks of a schedule module.

Each kernel takes the first of these that binds its threads:
- a kernel with one reduction longer than SERIAL_REDUCTION: gdp's two-stage reduction
  (_two_stage: rfactor into partials in global memory, further stages summing them, every stage
  its own kernel, no value passed between threads);
- gdp's spread schedule (_spread: dlight's inlining, a spatial kernel's loops fused, each thread
  computing SPREAD_ELEMENTS outputs a block apart; a short reduction serial per thread), then
  dlight's Fallback rule, then TVM's DefaultGPUSchedule pass;
- a kernel TOPI already wrote for the GPU beside an unscheduled producer: that producer bound
  (_bind_loose_blocks);
- one thread (a kernel with no loops of its own).
gdp's index checks run one thread per index (_index_check_on_threads). Around them, what TVM
0.27 with its LLVM 22 needs (docs/gpu.md): a schedule that reduces across threads is refused
(_rules says why; dlight's Matmul, GEMV, Reduction and GeneralReduction rules are not used); a
kernel whose full inlining would explode (a median's sorting network) is inlined only within a
budget (_bounded_fallback); a buffer one kernel alone uses is local; every thread index is made
int32. After lowering, loads_before_stores (a device pass of the PIPELINE registered here) puts
a thread's loads ahead of its stores. A GPU kernel without thread bindings would fail TVM's
memory verification at build time, so every kernel ends up bound, or the compile fails naming
it and each rule's reason.

Stencils as shared-memory tiles with halos and warp-shuffle reductions (docs/gpu.md) are not
written yet; KERNEL_RULES are therefore conservative: one many-to-many op a kernel, no row
scans sharing a pass.
"""

from __future__ import annotations

import math
import warnings

import tvm
import tvm_ffi

from gdp.errors import CompileError
from gdp.runtime import fusion as F

# What one GPU kernel may hold under these schedules. The two-stage reduction takes a kernel
# with one reduction (its producers inlined, its consumers their own kernels); two reductions in
# one kernel fall to Fallback, which runs each reduction's loop serially per thread.
KERNEL_RULES = F.KernelRules(
    many_to_many=1,
    row_scans_share=False,
    private_anchor_inputs=True,
    row_reductions_store_inputs=False,
    stack_slice_stencils=False,
)


def _rules() -> list:
    """TVM's GPU default rules that gdp takes: Fallback, which binds a kernel's spatial loops
    to blocks and threads (its reductions serial per thread). dlight's reduction and matrix
    rules (Matmul, GEMV, Reduction, GeneralReduction) reduce across the threads of a block:
    TVM 0.27 lowers that with shared memory and a block barrier, whose NVPTX code does not
    build, and gdp's int32 thread indices hid the cross-thread reduction from TVM's lowering,
    so that every thread kept its own partial sum: on an H200, sharpness was off by 64x and
    mean_std's mean by 16x. gdp's two-stage reductions (_two_stage) take their kernels."""
    from tvm.s_tir import dlight as dl

    return [dl.gpu.Fallback()]


def _bound(func: tvm.tirx.PrimFunc) -> bool:
    """Whether `func` binds a loop to a GPU thread axis."""
    found = []

    def seen(node):
        if node.thread_binding is not None:
            found.append(node)
        return node

    tvm_ffi.structural_map(func, [(tvm.tirx.For, seen)], order="post")
    return bool(found)


def _kernels(mod: tvm.IRModule):
    """The device kernels of `mod`: its PrimFuncs less the host ones (a shape-generic model's
    shape computations)."""
    for gvar, func in mod.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        if func.attrs is not None and func.attrs.get("tirx.is_host_func", False):
            continue
        yield gvar, func


def schedule(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
    """Every kernel of `mod` scheduled for the GPU `target`: an index check one thread per
    index (_index_check_on_threads), any other kernel by the first of _candidates that binds
    threads without reducing across them; private buffers made local, thread indices int32
    (_narrow_thread_indices). CompileError naming a kernel none of them serves, with why."""
    from gdp.runtime.backends.tvm.relax_import import INDEX_CHECK

    for gvar, func in list(_kernels(mod)):
        if func.attrs is not None and func.attrs.get("tirx.is_scheduled", False):
            continue
        if NARROW_INDICES and _longest_reduction(func) <= SERIAL_REDUCTION:
            func = _narrowed(func)
        if gvar.name_hint.startswith(INDEX_CHECK):
            checked = _index_check_on_threads(func)
            if checked is not None:
                mod[gvar] = checked.with_attr("tirx.is_scheduled", True)
                continue
        why: list[str] = []
        for how, candidate in _candidates(func, target, gvar.name_hint, why):
            if not _bound(candidate):
                why.append(f"{how}: bound no thread")
                continue
            if _reduces_across_threads(candidate):
                why.append(f"{how}: reduces across threads (see _rules)")
                continue
            candidate = _narrow_thread_indices(_with_private_buffers_local(candidate))
            mod[gvar] = candidate.with_attr("tirx.is_scheduled", True)
            break
        else:
            raise CompileError(
                f"gdp's gpu schedules found no schedule of kernel {gvar.name_hint} that builds"
                f" for {target.attrs.get('mcpu', target.kind.name)}: {' | '.join(why)}"
            )
    return mod


# Whether a kernel without a long reduction (one the spread schedule or Fallback takes) whose
# buffers all hold fewer than 2^31 elements has its indices computed in int32 (TVM's
# ForceNarrowIndexToInt32) before it is scheduled: Relax's are int64, which the GPU computes in
# pairs of 32-bit instructions (dnn_letterbox's resize: 33 of its 206 PTX instructions were
# 64-bit integer arithmetic, 11 after). Measured on an H200 (benchmarks/results/gpu.md,
# variants), each kernel launched alone: gaussian 0.0775 -> 0.0511 ms, dnn_letterbox 0.0067 ->
# 0.0052, tone unchanged; every workload narrowed whole still matched its peer, but mean_std's
# long reductions ran slower (0.153 -> 0.181 ms of kernels), so those are left wide.
NARROW_INDICES = True


def _narrowed(func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc:
    """`func` with int32 indices where every buffer it names fits them; as it is otherwise, or
    where TVM's pass refuses it."""
    from tvm.tirx.buffer import is_buffer_var

    if any(_elements(p.ty.shape) >= 1 << 31 for p in func.params if is_buffer_var(p)):
        return func
    try:
        return tvm.tirx.transform.ForceNarrowIndexToInt32()(tvm.IRModule({"main": func}))["main"]
    except Exception:  # TVM refuses some kernels (int64 data it would have to narrow): as is
        return func


# The longest reduction (elements per output) a thread computes alone, in Fallback's schedule:
# longer ones are split over threads in stages (_two_stage). A channel sum (cvtColor's weighted
# sum over 3) gains nothing from being split.
SERIAL_REDUCTION = 32
# _two_stage's aims: the threads of a stage (enough to keep an H100's or H200's 132
# multiprocessors busy on memory), the least elements a thread reduces in the first stage, what
# one thread sums in a middle stage, and the most it sums in the last (one thread per output:
# a further stage would cost a launch, about what summing that many partials costs).
STAGE_THREADS = 1 << 19
LEAST_PER_THREAD = 8
LATER_PER_THREAD = 64
LAST_PER_THREAD = 256
# The loads a thread of a stage issues before it adds: a thread summing one element after
# another waits a memory latency per element (on an H200, mean_std's uint8 min and max moved
# 0.28 TB/s of the 4.1 the device copies).
UNROLL = 8
BLOCK_THREADS = 256


def _two_stage(func: tvm.tirx.PrimFunc, target: tvm.target.Target):
    """gdp's GPU reduction, for a kernel with one reduction block: its producers inlined; its
    reduction split over P threads per output (rfactor), each summing every P-th element into
    a partial in global memory, adjacent threads reading adjacent elements; then the partials
    summed the same way in further stages, until one thread per output sums at most
    LAST_PER_THREAD; each stage, and each block left (an epilogue), one kernel. No value passes
    between the threads of a kernel: no shuffle, no barrier (see _rules). None where the
    kernel is not of that form or P would be under 2."""
    from tvm.s_tir.dlight.analysis import normalize_prim_func
    from tvm.s_tir.dlight.base import try_inline_contiguous_spatial

    sch = tvm.s_tir.Schedule(func)
    infos = normalize_prim_func(sch)
    if infos is None:
        return None
    infos = try_inline_contiguous_spatial(sch, infos)
    if not infos:
        return None
    reductions = [info for info in infos if "R" in info.dom_kind()]
    if len(reductions) != 1:
        return None
    (reduction,) = reductions
    block = reduction.block_rv
    loops = sch.get_loops(block)
    kinds = reduction.dom_kind()
    extents = [sch.get(loop).extent for loop in loops]
    if len(kinds) != len(loops) or not all(isinstance(e, tvm.tirx.IntImm) for e in extents):
        return None
    outputs = math.prod(int(e) for e, k in zip(extents, kinds, strict=True) if k == "S")
    length = math.prod(int(e) for e, k in zip(extents, kinds, strict=True) if k == "R")
    parts = _floor_pow2(min(length // LEAST_PER_THREAD, max(1, STAGE_THREADS // outputs)))
    if parts < 2:
        return None
    # The first stage's threads run over the outputs and the parts, ordered by their strides in
    # the data read: adjacent threads read adjacent elements (a row's sum: adjacent parts of a
    # row; a per-channel reduction of HWC data: the channels, then the parts).
    strides = _strides(sch.get(block))
    spatial = [loop for loop, k in zip(loops, kinds, strict=True) if k == "S"]
    reduce = [loop for loop, k in zip(loops, kinds, strict=True) if k == "R"]
    spatial_strides = [strides.get(it.var, 0) for it in reduction.iters if it.kind == "S"]
    part_stride = min(
        (strides[it.var] for it in reduction.iters if it.kind == "R" and strides.get(it.var)),
        default=1,
    )
    sch.reorder(*spatial, *reduce)
    for info in infos:  # rfactor fails on a sibling block without loops (a scalar epilogue)
        if info is not reduction and not sch.get_loops(info.block_rv):
            sch.add_unit_loop(info.block_rv)
    reduce_loop = sch.fuse(*reduce)
    first = True
    while True:
        _, inner = sch.split(reduce_loop, factors=[None, parts])
        stage = sch.rfactor(inner, 0)
        # The stage's loops: the outputs (none for a scalar), the rest of the reduction, the
        # parts; threads over the outputs and the parts.
        *out_loops, rest, part = sch.get_loops(stage)
        if first:
            keyed = zip([*spatial_strides, part_stride], [*out_loops, part], strict=True)
            threads = [loop for _, loop in sorted(keyed, key=lambda pair: -pair[0])]
        else:  # the partials' buffer is [parts, outputs...]
            threads = [part, *out_loops]
        sch.reorder(*threads, rest)
        _bind(sch, sch.fuse(*sch.get_loops(stage)[: len(threads)]))
        if int(sch.get(rest).extent) >= 2 * UNROLL:
            rest, inner = sch.split(rest, factors=[None, UNROLL])
            sch.decompose_reduction(stage, rest)
            sch.unroll(inner)
        length = parts
        if length <= LAST_PER_THREAD:
            break
        parts = _floor_pow2(length // LATER_PER_THREAD)
        reduce_loop = sch.get_loops(block)[-1]
        first = False
    # The last stage: one thread per output over the remaining partials; what follows the
    # reduction (an epilogue: a mean's division, an argmin's index made non-negative) computed
    # by the same thread where it reads that thread's outputs alone, else its own kernel. The
    # epilogue goes under the outputs' loop before that loop is split over threads, so the
    # split's bound (no thread past the last output) guards it too.
    outputs_left = sch.get_loops(block)[:-1]
    outputs = sch.fuse(*outputs_left) if outputs_left else sch.add_unit_loop(block)
    apart = []
    for info in infos:
        if info is reduction:
            continue
        trial = sch.copy()
        try:
            trial.reverse_compute_at(info.block_rv, outputs)
        except Exception:  # ScheduleError: it reads what the loop does not compute, or more
            apart.append(info)
            continue
        # Taken only where each thread then computes its own output's epilogue alone: a
        # block that needs every output (or none of the reduction's: mean_std's mean, read
        # by its std) would loop over all of them in every thread, reading other threads'
        # registers (on an H200: NaNs).
        inner = trial.get_loops(info.block_rv)[1:]  # those under the outputs' loop
        if any(int(trial.get(loop).extent) != 1 for loop in inner):
            apart.append(info)
            continue
        sch = trial
    _bind(sch, outputs)
    for info in apart:
        _bind(sch, sch.fuse(*sch.get_loops(info.block_rv)))
    if not apart:
        # The reduction's results are then read by their own thread alone: registers (left
        # global, TVM would allocate them inside the kernel, which a GPU kernel cannot).
        allocated = {b.name for b in sch.mod["main"].body.block.alloc_buffers}
        for index, region in enumerate(sch.get(block).writes):
            if _buffer_name(region.source) in allocated:
                sch.set_scope(block, index, "local")
    return sch


def _with_private_buffers_local(func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc:
    """`func` after _private_buffers_local (unchanged where TVM's schedule refuses it)."""
    try:
        sch = tvm.s_tir.Schedule(func)
        _private_buffers_local(sch)
        return sch.mod["main"]
    except Exception:  # blocks of one name twice, an opaque root: left as it was
        return func


def _private_buffers_local(sch) -> None:
    """Every intermediate buffer that one block alone writes and no other reads (the value half
    of an argmin's last stage) put in local scope: TVM would otherwise move its global
    allocation into that block's kernel, which cannot allocate global memory (on an H200, an
    illegal memory access)."""
    func = sch.mod["main"]
    allocated = {b.name for b in func.body.block.alloc_buffers}
    stores = _stores(func)
    for block, _, _ in stores:
        for index, region in enumerate(block.writes):
            name = _buffer_name(region.source)
            if name not in allocated:
                continue
            others = [
                other
                for other, other_writes, other_reads in stores
                if other is not block and (name in other_writes or name in other_reads)
            ]
            if not others:
                sch.set_scope(sch.get_sblock(block.name_hint), index, "local")


def _strides(block) -> dict:
    """Each iterator of `block` -> how many elements its step moves in the largest buffer the
    block reads (its flattened index's change); {} where that buffer's shape is not static."""
    largest = max(block.reads, key=lambda r: _elements(r.source.shape), default=None)
    if largest is None or not all(isinstance(d, tvm.tirx.IntImm) for d in largest.source.shape):
        return {}
    shape = [int(d) for d in largest.source.shape]
    flat = None
    for axis, extent in enumerate(largest.region):
        term = extent.min * math.prod(shape[axis + 1 :])
        flat = term if flat is None else flat + term
    if flat is None:
        return {}
    analyzer = tvm.sym.Analyzer()

    def at(values: dict):
        return analyzer.simplify(
            tvm_ffi.structural_map(flat, [(tvm.tirx.Var, lambda v: values.get(v, v))])
        )

    zero = {iv.var: tvm.tirx.IntImm(str(iv.var.ty.dtype), 0) for iv in block.iter_vars}
    base = at(zero)
    found = {}
    for iv in block.iter_vars:
        step = at({**zero, iv.var: tvm.tirx.IntImm(str(iv.var.ty.dtype), 1)})
        moved = analyzer.simplify(step - base)
        found[iv.var] = int(moved) if isinstance(moved, tvm.tirx.IntImm) else 1 << 40
    return found


def _bind(sch, loop) -> None:
    """`loop` split into blocks of BLOCK_THREADS threads, bound to blockIdx.x / threadIdx.x."""
    bx, tx = sch.split(loop, factors=[None, BLOCK_THREADS])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")


def _floor_pow2(n: int) -> int:
    return 1 << (n.bit_length() - 1) if n >= 1 else 0


def _reduces_across_threads(func: tvm.tirx.PrimFunc) -> bool:
    """Whether a reduction of `func` runs over a thread-bound loop (threads must then combine
    their values: see _rules)."""
    from tvm.s_tir import SBlockRealize

    threads = set()
    found = []

    def loop(node):
        if node.thread_binding is not None:
            threads.add(node.loop_var)
        return node

    def realize(node):
        used: list = []

        def var(v):
            used.append(v)
            return v

        for iv, value in zip(node.block.iter_vars, node.iter_values, strict=True):
            if iv.iter_type == tvm.tirx.IterVar.CommReduce:
                tvm_ffi.structural_map(value, [(tvm.tirx.Var, var)])
        if any(v in threads for v in used):
            found.append(node)
        return node

    tvm_ffi.structural_map(func, [(tvm.tirx.For, loop)], order="post")
    tvm_ffi.structural_map(func, [(SBlockRealize, realize)], order="post")
    return bool(found)


def _longest_reduction(func: tvm.tirx.PrimFunc) -> int:
    """The most elements one output of any block of `func` reduces (the product of its
    reduction axes' extents; a run-time extent counts as long); 1 without reductions."""
    from tvm.s_tir import SBlock

    longest = [1]

    def seen(block):
        count = 1
        for iv in block.iter_vars:
            if iv.iter_type != tvm.tirx.IterVar.CommReduce:
                continue
            extent = iv.dom.extent
            count *= int(extent) if isinstance(extent, tvm.tirx.IntImm) else 1 << 30
        longest[0] = max(longest[0], count)
        return block

    tvm_ffi.structural_map(func, [(SBlock, seen)], order="post")
    return longest[0]


# The size (bytes of TIR text) a kernel's expressions may reach with every producer inlined for
# dlight's rules to schedule it (canny's prepare step: about 0.15 MB, scheduled in 20 s on two
# cores); beyond it, _bounded_fallback. gdp.cv2's 3x3 median inlined would be astronomically
# larger: compute_inline ran for more than 6 minutes on it before being stopped.
INLINE_LIMIT = 1 << 21
# What one inlining step of _bounded_fallback may copy: the producer's text times its reads.
INLINE_STEP = 1 << 15


def _buffer_name(var) -> str:
    """The name of a buffer (a load's or a region's source: the buffer's variable)."""
    return str(getattr(var, "name", var))


def _stores(func: tvm.tirx.PrimFunc) -> list:
    """The blocks of `func` below its root, each as (block, names of the buffers it writes,
    names of the buffers it reads with the number of reads)."""
    from collections import Counter

    from tvm.s_tir import SBlock

    found = []

    def seen(block):
        if block.name_hint != "root":
            reads: Counter = Counter()

            def load(node):
                reads[_buffer_name(node.source)] += 1
                return node

            loads = [(tvm.ir.expr.TensorLoad, load)]
            tvm_ffi.structural_map(block.body, loads, order="post")
            if block.init is not None:
                tvm_ffi.structural_map(block.init, loads, order="post")
            found.append((block, {_buffer_name(w.source) for w in block.writes}, reads))
        return block

    tvm_ffi.structural_map(func, [(SBlock, seen)], order="post")
    return found


def _inlined_size(func: tvm.tirx.PrimFunc) -> int:
    """An estimate of the largest block's TIR (bytes of its text) once every spatial producer
    is inlined into its consumers: its own text plus, per read of a produced buffer, that
    producer's inlined size."""
    stores = _stores(func)
    producer = {}
    for block, writes, _ in stores:
        if block.init is None and len(writes) == 1:
            producer[next(iter(writes))] = block
    own = {block.name_hint: len(str(block.body)) for block, _, _ in stores}
    reads = {block.name_hint: counts for block, _, counts in stores}
    memo: dict[str, int] = {}

    def size(name: str, depth: int = 0) -> int:
        if name not in memo:
            total = own[name]
            for buffer, count in reads[name].items():
                source = producer.get(buffer)
                if source is not None and source.name_hint != name and depth < len(own):
                    total += count * size(source.name_hint, depth + 1)
            memo[name] = total
        return memo[name]

    return max((size(name) for name in own), default=0)


def _bounded_fallback(func: tvm.tirx.PrimFunc):
    """dlight's Fallback with bounded inlining: a producer is inlined only where its text times
    the reads of it stays within INLINE_STEP (no epilogue is merged into its producer either:
    TVM's reverse_compute_inline also stalled on the median); what remains runs as one kernel
    per block, each block's spatial loops fused and bound to blocks and threads, its reduction
    loops serial, intermediate buffers in global memory. None where TVM cannot normalise it."""
    from tvm.s_tir.dlight.analysis import normalize_prim_func

    sch = tvm.s_tir.Schedule(func)
    infos = normalize_prim_func(sch)
    if infos is None:
        return None
    while True:
        reads: dict[str, int] = {}
        for _, _, counts in _stores(sch.mod["main"]):
            for buffer, count in counts.items():
                reads[buffer] = reads.get(buffer, 0) + count
        for i, info in enumerate(infos):
            block = sch.get(info.block_rv)
            used = sum(reads.get(_buffer_name(w.source), 0) for w in block.writes)
            cost = len(str(block.body)) * used
            if cost > INLINE_STEP:
                continue
            try:
                sch.compute_inline(info.block_rv)
            except Exception:  # the schedule refuses: ScheduleError, ValueError, ...
                continue
            infos.pop(i)
            break
        else:
            break
    _bind_spread(sch, infos)
    return sch


# A spatial kernel's threads each compute SPREAD_ELEMENTS outputs BLOCK_THREADS apart (one block
# covers SPREAD_ELEMENTS * BLOCK_THREADS consecutive outputs; each of a warp's loads is still
# consecutive): a thread then has that many loads in flight. One output a thread, as dlight's
# Fallback writes it, keeps too few bytes in flight for an H200's memory: its 132
# multiprocessors hold 2048 threads each, 8 KB of float32 loads, where about 25 KB per
# multiprocessor are in flight at its 4.8 TB/s (Little's law over a ~700 ns load). A kernel
# spread keeps at least SPREAD_LEAST_BLOCKS blocks (about 4 waves of an H200's threads).
# Measured on an H200, each kernel launched alone (benchmarks/results/gpu.md, variants): tone
# (6.2 M outputs) 1, 2, 4, 8 a thread: 0.022, 0.020, 0.019, 0.019 ms; dnn_letterbox (1.2 M
# outputs, gathers) 0.0067, 0.0076, 0.0084, 0.0085 ms: one a thread, which this bound keeps.
SPREAD_ELEMENTS = 4
SPREAD_LEAST_BLOCKS = 4 * 132 * 2048 // 256


def _bind_spread(sch, infos) -> None:
    """Each block of `infos` not bound yet: its spatial loops fused and split over blocks of
    BLOCK_THREADS threads, each thread computing SPREAD_ELEMENTS outputs BLOCK_THREADS apart
    (unrolled; fewer where the kernel is small), its reduction loops serial inside."""
    reductions = []
    for info in infos:
        block = info.block_rv
        loops = sch.get_loops(block)
        if any(sch.get(loop).thread_binding is not None for loop in loops):
            continue
        kinds: dict[str, list] = {"S": [], "R": [], "O": []}
        for loop, kind in zip(loops, info.dom_kind(), strict=False):
            kinds[kind].append(loop)
        spatial = kinds["S"] or [sch.add_unit_loop(block)]
        sch.reorder(*spatial, *kinds["R"], *kinds["O"])
        fused = sch.fuse(*spatial)
        extent = sch.get(fused).extent
        each = _spread_of(extent) if not kinds["R"] else 1
        if each > 1:
            bx, inner, tx = sch.split(fused, factors=[None, each, BLOCK_THREADS])
            sch.reorder(tx, inner)
            sch.unroll(inner)
        else:
            bx, tx = sch.split(fused, factors=[None, BLOCK_THREADS])
        sch.bind(bx, "blockIdx.x")
        sch.bind(tx, "threadIdx.x")
        if kinds["R"]:
            reductions.append((block, kinds["R"][0]))
    for block, loop in reductions:
        sch.decompose_reduction(block, loop)


def _spread_of(extent) -> int:
    """How many outputs each thread of a spatial block of `extent` outputs computes: the most,
    up to SPREAD_ELEMENTS, that leaves the kernel SPREAD_LEAST_BLOCKS blocks and no partial
    last block. A partial block guards each output with its own condition, and its loads could
    not go ahead of the stores before them (loads_before_stores): 1 then, as for a run-time
    extent."""
    if not isinstance(extent, tvm.tirx.IntImm):
        return 1
    each = SPREAD_ELEMENTS
    while each > 1 and (
        int(extent) % (each * BLOCK_THREADS)
        or int(extent) < each * BLOCK_THREADS * SPREAD_LEAST_BLOCKS
    ):
        each //= 2
    return each


def _spread(func: tvm.tirx.PrimFunc):
    """dlight's Fallback (every producer inlined that can be, each block left bound to blocks
    and threads) with gdp's binding (_bind_spread: several outputs a thread). None where TVM
    cannot normalise the kernel, or a block of it launches its own threads (TOPI's GPU code)."""
    from tvm.s_tir.dlight.analysis import normalize_prim_func
    from tvm.s_tir.dlight.base import try_inline
    from tvm.s_tir.dlight.gpu.fallback import _has_internal_thread_env  # Fallback's own check

    sch = tvm.s_tir.Schedule(func)
    infos = normalize_prim_func(sch)
    if infos is None:
        return None
    infos = try_inline(sch, infos)
    for info in infos:
        if not sch.get_loops(info.block_rv) and _has_internal_thread_env(
            sch.get(info.block_rv).body
        ):
            return None
    _bind_spread(sch, infos)
    return sch


def _candidates(func: tvm.tirx.PrimFunc, target: tvm.target.Target, name: str, why: list):
    """(how, scheduled kernel) in the order they are tried: the two-stage reduction (a long
    reduction), bounded inlining (a kernel too large to inline whole) or dlight's Fallback,
    DefaultGPUSchedule, the loose blocks bound, one thread. A rule or pass that raises is noted
    in `why`: a rule checks a kernel's form only partly before scheduling it, and a primitive
    may then refuse."""
    inlined = _inlined_size(func)
    if _longest_reduction(func) > SERIAL_REDUCTION and inlined <= INLINE_LIMIT:
        try:
            with target:
                sch = _two_stage(func, target)
            if sch is not None:
                yield "two-stage reduction", sch.mod["main"]
        except Exception as err:  # a primitive refused (rfactor of an unusual reduction)
            why.append(f"two-stage reduction: {_first_line(err)}")
    if inlined > INLINE_LIMIT:
        # dlight's rules inline every producer they can: here the expressions would grow past
        # what TVM schedules in reasonable time (a median's sorting network doubles per stage).
        why.append(f"dlight: inlining every producer would make {inlined:.3g} bytes of TIR")
        try:
            with target:
                sch = _bounded_fallback(func)
            if sch is not None:
                yield "bounded inlining", sch.mod["main"]
        except Exception as err:
            why.append(f"bounded inlining: {_first_line(err)}")
    if inlined <= INLINE_LIMIT:
        try:
            with target:
                sch = _spread(func)
            if sch is not None:
                yield "spread", sch.mod["main"]
        except Exception as err:  # a primitive refused
            why.append(f"spread: {_first_line(err)}")
    for rule in () if inlined > INLINE_LIMIT else _rules():
        how = type(rule).__name__
        try:
            with target:
                space = rule.apply(func, target, False)
        except Exception as err:  # ScheduleError, InternalError, ValueError: TVM's refusals
            why.append(f"{how}: {_first_line(err)}")
            continue
        if isinstance(space, list):
            space = space[0] if len(space) == 1 else None
        if space is not None:
            yield how, space.mod["main"]
    try:
        with target:
            one = tvm.s_tir.transform.DefaultGPUSchedule()(tvm.IRModule({"main": func}))
        yield "DefaultGPUSchedule", one["main"]
    except Exception as err:
        why.append(f"DefaultGPUSchedule: {_first_line(err)}")
    try:
        loose = _bind_loose_blocks(func)
        if loose is not None:
            yield "loose blocks bound", loose
    except Exception as err:
        why.append(f"loose blocks bound: {_first_line(err)}")
    single = _single_thread(func, name, why)
    if single is not None:
        yield "one thread", single
    else:
        why.append("one thread: the kernel allocates buffers, which a GPU kernel cannot")


# The most elements a kernel's buffers may hold together for it to run on one GPU thread without
# a warning (gdp's index checks: a scalar or a few indices).
SINGLE_THREAD_ELEMENTS = 1 << 16


def _bind_loose_blocks(func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc | None:
    """`func` with each block under its root that has loops and none bound to a thread bound
    over blocks of BLOCK_THREADS threads, the rest left as they are: for a kernel TOPI wrote
    for the GPU already (an opaque block launching its own threads: scatter_nd, in gdp.cv2's
    equalizeHist) beside a producer it left unscheduled (its indices' transpose). None where
    no block was bound."""
    from tvm.s_tir.dlight.analysis import get_root_block

    sch = tvm.s_tir.Schedule(func)
    bound = False
    for block_rv in sch.get_child_blocks(get_root_block(sch)):
        loops = sch.get_loops(block_rv)
        if not sch.get(block_rv).iter_vars or not loops:
            continue
        if any(sch.get(loop).thread_binding is not None for loop in loops):
            continue
        _bind(sch, sch.fuse(*loops))
        bound = True
    return sch.mod["main"] if bound else None


def _index_check_on_threads(func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc | None:
    """An index check (relax_import's: for each index, an assertion that it lies in range, and
    the index made non-negative into its output) as a kernel of one thread per index, its
    assertions left out: TVM drops assertions from device code anyway, and one thread over
    every index (4 M for a 1080p cvtColor to HSV) took milliseconds. None where the check is
    not a nest of loops of static extents."""
    from tvm.s_tir import SBlockRealize

    realize = func.body
    if not isinstance(realize, SBlockRealize) or len(realize.block.alloc_buffers):
        return None
    body = tvm_ffi.structural_map(
        realize.block.body, [(tvm.tirx.AssertStmt, lambda a: tvm.tirx.Evaluate(0))], order="post"
    )
    loops = []
    while isinstance(body, tvm.tirx.For):
        loops.append(body)
        body = body.body
    analyzer = tvm.sym.Analyzer()
    extents = [analyzer.simplify(loop.extent) for loop in loops]
    if not loops or not all(isinstance(e, tvm.tirx.IntImm) for e in extents):
        return None
    total = math.prod(int(e) for e in extents)
    threads = min(BLOCK_THREADS, total)
    tx = tvm.tirx.Var("threadIdx_x", "int32")
    bx = tvm.tirx.Var("blockIdx_x", "int32")

    def wide(n: int) -> tvm.tirx.IntImm:
        return tvm.tirx.IntImm("int64", n)

    flat = tvm.tirx.Cast("int64", bx) * wide(threads) + tvm.tirx.Cast("int64", tx)
    index = {}
    rest = flat
    for loop, extent in zip(reversed(loops), reversed(extents), strict=True):
        dtype = str(loop.loop_var.ty.dtype)
        index[loop.loop_var] = tvm.tirx.Cast(dtype, tvm.tirx.FloorMod(rest, wide(int(extent))))
        rest = tvm.tirx.FloorDiv(rest, wide(int(extent)))
    body = tvm_ffi.structural_map(body, [(tvm.tirx.Var, lambda v: index.get(v, v))], order="post")
    body = tvm.tirx.IfThenElse(tvm.tirx.LT(flat, wide(total)), body, None)
    body = _thread_loop(tx, "threadIdx.x", threads, body)
    body = _thread_loop(bx, "blockIdx.x", -(-total // threads), body)
    return _with_root_body(func, body)


def _thread_loop(var: tvm.tirx.Var, tag: str, extent: int, body) -> tvm.tirx.For:
    """`body` in a loop of `var` (int32) over `extent`, bound to the thread axis `tag`."""
    zero, count = tvm.tirx.IntImm("int32", 0), tvm.tirx.IntImm("int32", extent)
    binding = tvm.tirx.IterVar(
        tvm.ir.Range.from_min_extent(zero, count), var, tvm.tirx.IterVar.ThreadIndex, tag
    )
    return tvm.tirx.For(var, zero, count, tvm.tirx.ForKind.THREAD_BINDING, body, binding)


def _with_root_body(func: tvm.tirx.PrimFunc, body) -> tvm.tirx.PrimFunc:
    """`func` with its root block's body replaced by `body`."""
    from tvm.s_tir import SBlock, SBlockRealize

    realize = func.body
    block = realize.block
    block = SBlock(
        block.iter_vars,
        block.reads,
        block.writes,
        block.name_hint,
        body,
        block.init,
        block.alloc_buffers,
        block.match_buffers,
        block.annotations,
    )
    return func.with_body(SBlockRealize(realize.iter_values, realize.predicate, block))


def _single_thread(func: tvm.tirx.PrimFunc, name: str, why: list[str]) -> tvm.tirx.PrimFunc | None:
    """`func` run whole by one thread of one block: its root block's body under blockIdx.x and
    threadIdx.x loops of extent 1; None for a kernel whose root block allocates buffers (in
    global memory, which a GPU kernel cannot allocate). For a kernel without loops of its own,
    which dlight and DefaultGPUSchedule cannot bind (gdp's index checks of relax_import: a
    scalar index checked by an assertion). Correct, and serial: a kernel holding more than
    SINGLE_THREAD_ELEMENTS is said in a RuntimeWarning."""
    from tvm.s_tir import SBlockRealize

    realize = func.body
    if not isinstance(realize, SBlockRealize) or len(realize.block.alloc_buffers):
        return None
    body = realize.block.body
    for tag in ("threadIdx.x", "blockIdx.x"):
        body = _thread_loop(tvm.tirx.Var(tag.replace(".", "_"), "int32"), tag, 1, body)
    from tvm.tirx.buffer import is_buffer_var

    elements = sum(_elements(p.ty.shape) for p in func.params if is_buffer_var(p))
    if elements > SINGLE_THREAD_ELEMENTS:
        warnings.warn(
            f"gdp's gpu schedules run kernel {name} ({elements} elements) on one GPU thread:"
            f" {' | '.join(why)}",
            RuntimeWarning,
            stacklevel=3,
        )
    return _with_root_body(func, body)


def _elements(shape) -> int:
    count = 1
    for d in shape:
        if not isinstance(d, tvm.tirx.IntImm):
            return 1 << 62  # a run-time extent: counted as large
        count *= int(d)
    return count


def _first_line(err: Exception) -> str:
    lines = [line for line in str(err).strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else type(err).__name__


def _narrow_thread_indices(func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc:
    """`func` with every loop bound to a GPU thread axis counted in int32, its uses cast to the
    int64 of the indices around it. Relax's shapes are int64, so are the loops dlight binds;
    LLVM's NVPTX code generation reads the thread and block index registers as i32 and, for a
    kernel whose index arithmetic it does not widen (a mirror pad's if_then_else indices),
    emits an i32 * i64 multiply that LLVM rejects. The extents fit: CUDA's grid is 2^31 - 1
    blocks at most, a block 1024 threads."""

    def narrow(loop):
        old = loop.loop_var
        if loop.thread_binding is None or str(old.ty.dtype) != "int64":
            return loop
        if not isinstance(loop.min, tvm.tirx.IntImm) or not isinstance(
            loop.extent, tvm.tirx.IntImm
        ):
            return loop  # a run-time extent: left to TVM
        new = tvm.tirx.Var(old.name, "int32")
        wide = tvm.tirx.Cast("int64", new)
        body = tvm_ffi.structural_map(
            loop.body, [(tvm.tirx.Var, lambda v: wide if v.same_as(old) else v)]
        )
        start = tvm.tirx.IntImm("int32", int(loop.min))
        extent = tvm.tirx.IntImm("int32", int(loop.extent))
        iv = loop.thread_binding
        binding = tvm.tirx.IterVar(
            tvm.ir.Range.from_min_extent(start, extent), new, iv.iter_type, iv.thread_tag
        )
        return tvm.tirx.For(new, start, extent, loop.kind, body, binding, loop.annotations)

    def narrow_launch(attr):  # a thread launched in code TOPI wrote for the GPU (scatter_nd)
        iv = attr.node
        if attr.attr_key != "thread_extent" or not isinstance(iv, tvm.tirx.IterVar):
            return attr
        old = iv.var
        if str(old.ty.dtype) != "int64" or not isinstance(attr.value, tvm.tirx.IntImm):
            return attr
        new = tvm.tirx.Var(old.name, "int32")
        wide = tvm.tirx.Cast("int64", new)
        body = tvm_ffi.structural_map(
            attr.body, [(tvm.tirx.Var, lambda v: wide if v.same_as(old) else v)]
        )
        extent = tvm.tirx.IntImm("int32", int(attr.value))
        binding = tvm.tirx.IterVar(
            tvm.ir.Range.from_min_extent(tvm.tirx.IntImm("int32", 0), extent),
            new,
            iv.iter_type,
            iv.thread_tag,
        )
        return tvm.tirx.AttrStmt(binding, attr.attr_key, extent, body)

    return tvm_ffi.structural_map(
        func, [(tvm.tirx.For, narrow), (tvm.tirx.AttrStmt, narrow_launch)], order="post"
    )


def row_scan(stmt) -> tuple[int, bool] | None:
    """These schedules compute no reduction one input row at a time (KERNEL_RULES does not let
    row scans share a kernel): never asked, and None for every block."""
    return None


# -- after lowering ---------------------------------------------------------------------------


def loads_before_stores(func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc:
    """A GPU kernel whose threads each store several outputs one after another (_bind_spread's,
    unrolled) with each output's value computed before any of them is stored: the loads of all
    of a thread's outputs then come before its first store. As TVM writes them, each output's
    loads follow the store before it; the PTX addresses them generically, so neither LLVM nor
    ptxas may move a load above a store that might alias it, and a thread waits for one load
    at a time. Applied to a sequence of unconditional stores whose values and indices load no
    buffer that the sequence stores into (distinct buffers of a kernel do not alias: TVM marks
    its kernels tirx.noalias); anything else is left as it is."""
    if func.attrs is None or not func.attrs.get("tirx.noalias", False):
        return func

    def loaded(node) -> set:
        found: set = set()

        def load(expr):
            found.add(_buffer_name(expr.source))
            return expr

        tvm_ffi.structural_map(node, [(tvm.ir.expr.TensorLoad, load)], order="post")
        return found

    def reorder(seq):
        # A thread's body: TVM's common subexpressions (Bind: a variable for the statements
        # after it) and the stores.
        items = list(seq.seq)
        stores = [stmt for stmt in items if isinstance(stmt, tvm.tirx.BufferStore)]
        if len(stores) < 2 or not all(
            isinstance(stmt, (tvm.tirx.BufferStore, tvm.tirx.Bind)) for stmt in items
        ):
            return seq
        # By name: two buffers of one name count as one (the safe way round).
        written = {_buffer_name(store.buffer) for store in stores}
        if any(written & loaded(stmt) for stmt in items):
            return seq
        body, last = [], []
        for stmt in items:
            if isinstance(stmt, tvm.tirx.BufferStore):
                value = tvm.tirx.Var(f"spread_{len(last)}", str(stmt.value.ty.dtype))
                body.append(tvm.tirx.Bind(value, stmt.value))
                last.append(tvm.tirx.BufferStore(stmt.buffer, value, stmt.indices))
            else:
                body.append(stmt)
        return tvm.tirx.SeqStmt(body + last)

    return tvm_ffi.structural_map(func, [(tvm.tirx.SeqStmt, reorder)], order="post")


PIPELINE = "gdp-gpu"


def register_pipeline() -> str:
    """TVM's default TIR pipeline with loads_before_stores after its device passes, registered
    under PIPELINE (for tvm.compile's tir_pipeline)."""
    from tvm.tirx import compilation_pipeline

    if PIPELINE in compilation_pipeline.PIPELINE_MAP:
        return PIPELINE

    def pipeline():
        lower, host, device = compilation_pipeline.get_default_tir_pipeline(
            tvm.target.Target({"kind": "nvptx"})
        )

        @tvm.tirx.transform.prim_func_pass(opt_level=0)
        def reordered(func, _mod, _ctx):
            return loads_before_stores(func)

        return lower, host, lambda: tvm.transform.Sequential([device(), reordered])

    compilation_pipeline.PIPELINE_MAP[PIPELINE] = pipeline
    return PIPELINE
