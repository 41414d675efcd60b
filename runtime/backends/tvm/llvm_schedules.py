"""gdp's CPU schedules for the TIR kernels TVM's default pipeline leaves unscheduled.

TVM's llvm pipeline fuses operators (FuseOps, FuseTIR) but schedules nothing: every intermediate
inside a fused kernel is materialised in full and every loop runs serially. Per kernel, this pass:
1. inlines every producer block that is not a stencil source (casts, slices, arithmetic, and the
   padding of an input): it is computed where it is used, never stored;
2. keeps stencil sources, producers read over a small window (a padded intermediate read by every
   tap of a filter, a row pass read by a column pass), since inlining them would recompute them
   per tap;
3. schedules the kernel by the kind of its output blocks:
   - images (one or several with the same rows): row strips. The output rows are cut into strips
     that run in parallel; each strip computes the rows of its sources it needs (halo included,
     stencils stacked on stencils too) into small buffers that stay in cache, then its own rows,
     all vectorised along the row. A short reduction (grey from RGB) is such a source, and so is
     a reduction along the rows (a mean per row, output beside the image), summed in vector
     lanes. This is what lets gdp's fusion plans put a chain of stencils, or a stencil and its
     row reduction, in one kernel;
   - reductions: one that reads its input row by row (a sum along each row of an NHWC batch, a
     minimum per channel of the whole batch: row_scan) reads each row once, in vector-wide
     pieces whose values are lanes of partial results, and several such reductions of one
     input (gdp's sibling fusion) share the loop over the rows and the loop along each row, so
     each piece is loaded once for all; a reduction with many outputs runs them in parallel,
     each accumulated in vector lanes; one with few outputs gets partial results per parallel
     chunk (rfactor), combined at the end;
   - anything else: the annotations of meta-schedule's ParallelizeVectorizeUnroll rule and its
     postprocessor (parallel outer loops, vectorised inner one), once, without tuning.
Numerics are unchanged except reductions, whose partial sums change the order of additions.
"""

from __future__ import annotations

import contextlib
import math
import os
import warnings

import tvm
from tvm.s_tir import meta_schedule as ms

from gdp.runtime.backends.tvm.fusion import leading_spatial_axes, tir_operands
from gdp.runtime.fusion import KernelRules

# Jobs per core for the parallel loop; vector extent in elements; explicit unroll steps.
MAX_JOBS_PER_CORE = 16
MAX_VECTORIZE_EXTENT = 64
UNROLL_EXPLICIT = 16
# Parallel strips of a stencil's output per core (see _strip_rows).
STRIPS_PER_CORE = 8
# Most elements per vector iteration (LLVM splits them into machine vectors; 48 float32 beat 12,
# 16 and 24 on the 5x5 Gaussian), and the longest trailing axis taken for a channel axis.
MAX_VECTOR_LANES = 48
MAX_CHANNELS = 4
# Pixels a vector of a strip row's channel pass (_strip_row).
CHANNEL_LANES = 16
# Most bytes of a row reduction's partial results with the channels kept (see
# _channel_partials), at most MAX_VECTOR_LANES lanes: 24 int64 lanes ran mean_std's packed row
# sums in 7.9 ms, 48 in 9.2 ms, 96 in 18 ms (LLVM spills the wider accumulators); its uint8
# minimum took 1.5 ms with 48 lanes, 1.7 with 24, 2.0 with 96 and 2.1 with 192 (each row
# combines its lanes one by one).
CHANNEL_PARTIAL_BYTES = 192
# Partial results per core of a reduction with few outputs (see _schedule_reductions).
PARTIALS_PER_CORE = 4
# Longest reduction computed per strip inside a row kernel (a grey conversion's three channels).
SHORT_REDUCTION = 16
# Most times over a strip schedule may compute a source (halo rows included).
MAX_STRIP_RECOMPUTE = 2
# Most stencil sources a strip of run-time extents computes: each source's rows are an
# expression of the strip's bounds and of its consumers' halos, nested one level deeper per
# source, and TVM's lowering simplifies them in time growing steeply with the depth (a 31x31
# dilation's 12 sources: 41 s of TIR passes).
MAX_SYMBOLIC_STRIP_SOURCES = 6
# Most expression nodes inlining may duplicate (see _reused).
MAX_INLINED_COPY = 256
# Below this many elements a reduction is not worth splitting across threads.
MIN_PARALLEL_ELEMENTS = 1 << 16


# What one kernel may hold under these schedules (the fusion planner's rules): one many-to-many
# op, or several row scans of rows of one count (_row_scans reads each row once for all); a
# many-to-many op's feeding ops read only inside (a kernel that reduces and also stores one of
# its input's intermediates ran far slower than two, measured on sharpness), except where it
# reduces rows (the row strips store the rows and reduce them while they are in cache); no
# stencils written with slices stacked beyond what one part held (their border conditions pile
# up: TVM's lowering of cv2.Canny with a 5x5 Sobel ran for minutes, the kernels apart compile
# in seconds, though one kernel ran faster: 4.2 vs 4.7 ms).
KERNEL_RULES = KernelRules(
    many_to_many=1,
    row_scans_share=True,
    private_anchor_inputs=True,
    row_reductions_store_inputs=True,
    stack_slice_stencils=False,
)


def schedule(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
    cores = int(target.attrs.get("num-cores", os.cpu_count() or 1))
    scheduled = {}
    for gvar, func in mod.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        if func.attrs is not None and func.attrs.get("tirx.is_host_func", False):
            continue  # a symbolic shape's computation on the host (shape-generic models)
        if gvar.name_hint.startswith("cumsum"):
            continue  # a scan along one line (a border's positions: gdp.ops.border), as TOPI's
        if gvar.name_hint.startswith("scatter_elements"):
            continue  # updates that may land on one element (a histogram's counts): serial
        try:
            try:
                sch = _schedule(func, cores)
            except _Symbolic:
                # A shape-generic kernel whose extents a heuristic needs as numbers: the
                # parametric schedule, strips and vectors sized from the run-time extents.
                sch = _schedule_symbolic(func, cores)
                if sch is not None:
                    _check_order(sch)
                    func = _partition_vector_tails(_partition_borders(sch.mod["main"]))
                    scheduled[gvar] = _serial_when_small(func)
                    continue
            if sch is not None:
                _check_order(sch)
        except (tvm.error.InternalError, tvm.s_tir.ScheduleError, _OutOfOrder) as err:
            # A schedule primitive refused a kernel shape gdp's heuristics did not foresee
            # (TVM checks every primitive, so the refusal is clean), or the schedule reads a
            # buffer before writing it (merge, which TVM does not check): that kernel compiles
            # as TVM lowers it by default, correct but slower. Said, not hidden.
            warnings.warn(
                f"gdp's cpu schedule failed on {gvar.name_hint}, which runs unscheduled:"
                f" {str(err).splitlines()[0]}",
                RuntimeWarning,
                stacklevel=2,
            )
            continue
        if sch is not None:
            scheduled[gvar] = sch.mod["main"]
    for gvar, func in scheduled.items():
        mod[gvar] = _serial_when_small(func)
    return mod


class _OutOfOrder(Exception):
    """A scheduled kernel reads a buffer before any block writes it."""


def _check_order(sch: tvm.s_tir.Schedule) -> None:
    """_OutOfOrder where a block, in program order, reads a buffer that a block of the kernel
    writes only later (a block's own buffer aside: a reduction reads what it accumulates)."""
    blocks = [sch.get(b) for b in sch.get_child_blocks(sch.get_sblock("root"))]
    written = {region.source for block in blocks for region in block.writes}
    seen = set()
    for block in blocks:
        own = {region.source for region in block.writes}
        for region in block.reads:
            buffer = region.source
            if buffer in written and buffer not in seen and buffer not in own:
                raise _OutOfOrder(
                    f"block {block.name_hint} reads {buffer.name} before it is written"
                )
        seen |= own


class _Symbolic(Exception):
    """A kernel extent is a run-time variable where a static schedule needs a number."""


def _int(value) -> int:
    """An extent as a number; _Symbolic where it is known only at run time (a shape-generic
    kernel's free dimension)."""
    if isinstance(value, int):
        return value
    if isinstance(value, tvm.tirx.IntImm):
        return int(value.value)
    raise _Symbolic(str(value))


def _is_static(value) -> bool:
    return isinstance(value, int | tvm.tirx.IntImm)


def _schedule_symbolic(func: tvm.tirx.PrimFunc, cores: int) -> tvm.s_tir.Schedule | None:
    """The schedule of a kernel with extents known only at run time (shape-generic
    compilation). Producers are inlined as in _schedule (stencil sources stay materialised,
    computed in full); each block then runs its outer spatial loops in parallel, in at most
    STRIPS_PER_CORE strips per core whose row count is computed from the run-time extent; its
    row (with a short channel axis, the row's pixels and channels as one loop), where the block
    is spatial, is vectorised as _vectorize_row does where its length is static, else left to
    LLVM's loop vectorizer. Reductions keep TOPI's order inside their parallel outer loops.
    schedule() then cuts each row that reads through border indices into its borders and a
    middle of plain loads (_partition_borders)."""
    sch = tvm.s_tir.Schedule(func)
    kept = _inline_producers(sch)
    if kept:
        strips = _symbolic_strips(sch.copy(), kept, cores)
        if strips is not None:
            return strips
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        if not sch.get_loops(block):
            # As in _schedule_reductions: a block outside any loop (a mean's division) makes
            # rfactor fail on its sibling (TVM's BlockReplacer check).
            sch.add_unit_loop(block)
    per_pixel = []
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        loops = sch.get_loops(block)
        stmt = sch.get(block)
        if not loops or len(stmt.iter_vars) != len(loops):
            continue
        spatial = leading_spatial_axes(stmt)
        if spatial is None:
            spatial = len(loops) if _is_spatial(sch, block) else 0
        if 0 < spatial < len(loops) and _per_pixel_reduction(sch, block, spatial):
            per_pixel.append((block, spatial))
            continue
        if spatial < len(loops) and _symbolic_partials(sch, block, spatial, cores):
            continue
        if spatial < len(loops) and _symbolic_row_partials(sch, block, spatial, cores):
            continue
        if spatial == 0:
            continue
        _symbolic_rows(sch, block, spatial, cores)
    for block, spatial in per_pixel:
        # Computed where its one consumer reads it, pixel by pixel, its few terms unrolled: a
        # pass of its own over every pixel (its outputs fused into one loop of run-time length,
        # indices divided by the run-time width) wrote an int32 image the consumer read back
        # (a 1080p BGR2GRAY 2.6 ms).
        (consumer,) = sch.get_consumers(block)
        if not _computed_per_pixel(sch, block, consumer):
            # A pass of its own, in parallel over rows, each row a plain loop: with rows and
            # columns fused into one loop, every index a division by the run-time width, TVM's
            # LowerIntrin failed on one such kernel (a gray image padded for a 21x21 erosion).
            _symbolic_rows(sch, block, max(spatial - 1, 1), cores)
            continue
        sch.compute_at(block, sch.get_loops(consumer)[-1], preserve_unit_loops=False)
        for loop in sch.get_loops(block)[len(sch.get_loops(consumer)) :]:
            sch.unroll(loop)
    return sch


def _computed_per_pixel(sch: tvm.s_tir.Schedule, block, consumer) -> bool:
    """Whether `block` computes where `consumer` reads it with only loops of static extent left
    under the consumer's pixel (tried on a copy). A consumer that reads a region of run-time
    extent per pixel (a pad's block of edge lines, clamped) would leave loops that cannot be
    unrolled."""
    trial = sch.copy()
    try:
        trial.compute_at(block, trial.get_loops(consumer)[-1], preserve_unit_loops=False)
    except (tvm.error.InternalError, tvm.s_tir.ScheduleError):
        return False
    inner = trial.get_loops(block)[len(trial.get_loops(consumer)) :]
    return all(isinstance(trial.get(loop).extent, tvm.tirx.IntImm) for loop in inner)


# The most terms of a reduction computed per pixel where its consumer reads it.
PER_PIXEL_TERMS = 16


def _per_pixel_reduction(sch: tvm.s_tir.Schedule, block, spatial: int) -> bool:
    """A reduction over a few static terms per output (a weighted sum of a pixel's channels),
    read by one spatial consumer over the same outputs."""
    stmt = sch.get(block)
    terms = [iv.dom.extent for iv in stmt.iter_vars[spatial:]]
    if not all(_is_static(t) for t in terms) or math.prod(int(t) for t in terms) > PER_PIXEL_TERMS:
        return False
    consumers = sch.get_consumers(block)
    return len(consumers) == 1 and _is_spatial(sch, consumers[0])


def _symbolic_rows(sch: tvm.s_tir.Schedule, block, spatial: int, cores: int) -> None:
    """_schedule_symbolic's schedule of one block: its outer spatial loops in parallel strips,
    its row a plain loop (channels unrolled) or, of static length, vectorised."""
    loops = sch.get_loops(block)
    stmt = sch.get(block)
    whole_row = spatial == len(loops)
    if whole_row and _planar_gather(sch, loops, stmt):
        _planes_inside_rows(sch, loops, cores, vectors=_wide_gathers(stmt))
        return
    if whole_row and spatial >= 2:
        last = sch.get(loops[-1]).extent
        channel = _is_static(last) and int(last) <= MAX_CHANNELS and spatial >= 3
        inner = 2 if channel else 1
        outer, row = loops[: spatial - inner], loops[spatial - inner : spatial]
        if channel and _across_channels(stmt, int(last)):
            # The row's pixels a plain loop and its channels unrolled inside it, not one
            # loop of pixels x channels: in that loop every index is j // channels and
            # j % channels, and a value chosen by channel (a channel swap, a flip: slices
            # and a concat) an if_then_else on j % channels, which LLVM leaves scalar (a
            # 1080p BGR2RGB 7.3 ms, unrolled 0.37 ms). Rows that read through border
            # conditions stay one loop, which _partition_borders cuts, and so do rows whose
            # every load is at the pixel's own channel: one loop reads them contiguously.
            row = []
            sch.unroll(loops[-1])
    else:
        outer, row = loops[:spatial], []
    if outer:
        fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
        if _is_static(sch.get(fused).extent):
            sch.parallel(fused)
        else:
            strip, _ = sch.split(fused, [STRIPS_PER_CORE * cores, None])
            sch.parallel(strip)
    if row:
        fused_row = sch.fuse(*row) if len(row) > 1 else row[0]
        extent = sch.get(fused_row).extent
        if _is_static(extent):
            _vectorize_row(sch, [fused_row])
        # A row of run-time length is left a plain loop: LLVM's loop vectorizer gives it
        # whole vectors and a scalar tail sized at run time. Split into vectors here, its
        # last vector would run under a guard on every lane, which TVM's vectorizer turns
        # back into scalar code (4x slower on a 1080p elementwise kernel; the plain loop
        # ran within 10% of the specialised kernel).


def _planar_gather(sch: tvm.s_tir.Schedule, loops: list, stmt) -> bool:
    """Whether a block writes channel planes (a short static first axis, then rows and
    columns: CHW) from pixels it gathers at computed source positions (a resize into a
    network's planar input)."""
    if len(loops) < 3 or not isinstance(stmt.body, tvm.tirx.BufferStore):
        return False
    first = sch.get(loops[0]).extent
    if not (_is_static(first) and int(first) <= MAX_CHANNELS):
        return False
    return any(_computed(i) for load in _all_loads(stmt.body.value) for i in load.indices)


def _computed(index) -> bool:
    """Whether an index is computed from data or through a float (a gather's source position),
    not an affine function of the loops."""
    if isinstance(index, tvm.ir.TensorLoad):
        return True
    if isinstance(index, tvm.tirx.Cast) and tvm.DataType(str(index.value.ty.dtype)).is_float:
        return True
    return any(_computed(child) for child in tir_operands(index))


# Lanes of a planar gather's row vectors (_planes_inside_rows).
PLANAR_LANES = (16, 8, 4)


def _wide_gathers(stmt) -> bool:
    """Whether every load of a block at computed positions reads 32 bits or more: what x86
    gathers in vectors. A gather of 8- or 16-bit values LLVM writes lane by lane (extract the
    index, load, insert), slower than the plain loop: a 224x224 resize of a uint8 image into
    CHW floats took 0.24 ms in 16-lane vectors, 0.16 ms pixel by pixel."""
    loads = [
        load for load in _all_loads(stmt.body.value) if any(_computed(i) for i in load.indices)
    ]
    return all(tvm.DataType(str(load.source.dtype)).bits >= 32 for load in loads)


def _planes_inside_rows(
    sch: tvm.s_tir.Schedule, loops: list, cores: int, vectors: bool = True
) -> None:
    """A planar gather's loops as rows (in parallel strips), then vectors along the row (or
    pixels, without `vectors`), the channel planes unrolled between the two: each vector's
    source pixels, gathered for one plane, are in cache for the next (the planes outermost,
    each plane's pass read the source rows again: a 1080p resize into CHW 1.3x slower)."""
    planes, rows, row = loops[0], loops[1:-1], loops[-1]
    fused = sch.fuse(*rows) if len(rows) > 1 else rows[0]
    if _is_static(sch.get(fused).extent):
        outer = [fused]
    else:  # strips of a run-time row count
        outer = list(sch.split(fused, [STRIPS_PER_CORE * cores, None]))
    extent = sch.get(row).extent
    lanes = next((n for n in PLANAR_LANES if _is_static(extent) and int(extent) % n == 0), None)
    lanes = lanes if vectors else None
    if lanes is None:
        sch.reorder(*outer, row, planes)
    else:
        chunks, vector = sch.split(row, [None, lanes])
        sch.reorder(*outer, chunks, planes, vector)
        sch.vectorize(vector)
    sch.unroll(planes)
    sch.parallel(outer[0])


def _channels_contiguous(stmt, channels: int) -> bool:
    """Whether a spatial block over (..., pixels, channels) reads its pixels in step with its
    own: every load that depends on the pixel or the channel is at the pixel plus a constant
    and at the pixel's own channel, of a buffer with `channels` channels. Its pixels and
    channels as one loop then read and write contiguous memory (a vertical pass of a separable
    filter: with the channels unrolled, each tap a load of stride 3 that LLVM left scalar, 13
    ms for a 480x640 31-tap pass; as one loop 1.1 ms). A flip or a per-pixel table read once
    per pixel is not such a block."""
    from tvm.sym import Analyzer

    store = stmt.body
    if not isinstance(store, tvm.tirx.BufferStore) or len(stmt.iter_vars) < 2:
        return False
    pixel, channel = stmt.iter_vars[-2].var, stmt.iter_vars[-1].var
    analyzer = Analyzer()

    def in_step(expr) -> bool:
        if isinstance(expr, tvm.ir.Var):
            return not (expr.same_as(channel) or expr.same_as(pixel))
        if isinstance(expr, tvm.ir.TensorLoad):
            indices = list(expr.indices)
            if not any(_uses(i, channel) or _uses(i, pixel) for i in indices):
                return all(in_step(i) for i in indices)
            shape = expr.source.shape
            if len(indices) < 2 or not indices[-1].same_as(channel):
                return False
            if not (_is_static(shape[-1]) and int(shape[-1]) == channels):
                return False
            offset = analyzer.simplify(indices[-2] - pixel)
            if _uses(offset, pixel) or _uses(offset, channel):
                return False
            return all(in_step(i) for i in indices[:-2])
        return all(in_step(c) for c in tir_operands(expr))

    return in_step(store.value)


def _reads_borders(stmt, axis: int) -> bool:
    """Whether a spatial block's value reads through border conditions on its `axis`-th
    variable (a pad inlined into a stencil: _partition_borders cuts such rows)."""
    store = stmt.body
    if not isinstance(store, tvm.tirx.BufferStore):
        return True
    return bool(_border_conditions(store.value, stmt.iter_vars[axis].var))


# Partial results of a reduction over a run-time extent with few outputs (_symbolic_partials).
SYMBOLIC_PARTIALS = 1024


def _symbolic_partials(sch: tvm.s_tir.Schedule, block, spatial: int, cores: int) -> bool:
    """A reduction over a run-time extent with few outputs (a mean over a whole image) as
    SYMBOLIC_PARTIALS partial results, each over a run-time share of the reduced elements, run
    in parallel and combined at the end (rfactor): as _schedule_reductions does for static
    extents, for the parallelism and for the rounding (a float32 sum's error grows with the
    length of its chain: TOPI's one chain over a 1080p image was off by 6e-5 of a mean)."""
    loops = sch.get_loops(block)
    stmt = sch.get(block)
    kinds = [iv.iter_type == tvm.tirx.IterVar.DataPar for iv in stmt.iter_vars]
    if len(kinds) != len(loops) or kinds != [True] * spatial + [False] * (len(loops) - spatial):
        return False
    extents = [sch.get(lp).extent for lp in loops]
    if not all(_is_static(e) for e in extents[:spatial]) or all(
        _is_static(e) for e in extents[spatial:]
    ):
        return False
    if math.prod(int(e) for e in extents[:spatial]) >= PARTIALS_PER_CORE * cores:
        return False  # enough outputs to run in parallel: TOPI's order, outputs in parallel
    reduction = loops[spatial:]
    fused = sch.fuse(*reduction) if len(reduction) > 1 else reduction[0]
    outer, _ = sch.split(fused, [SYMBOLIC_PARTIALS, None])
    partial = sch.rfactor(outer, factor_axis=0)
    parallel_loop = sch.get_loops(partial)[0]
    if spatial:  # the partials' loop first
        partial_loops = sch.get_loops(partial)
        parallel_loop = next(
            lp
            for lp in partial_loops
            if _is_static(sch.get(lp).extent) and int(sch.get(lp).extent) == SYMBOLIC_PARTIALS
        )
        others = [lp for lp in partial_loops if not lp.same_as(parallel_loop)]
        sch.reorder(parallel_loop, *others[:spatial])
    sch.parallel(parallel_loop)
    # The partials zeroed outside the loop over their share: inside, the init runs under the
    # split's guard, and a partial whose share is empty (fewer elements than partials) would
    # never be zeroed.
    sch.decompose_reduction(partial, sch.get_loops(partial)[spatial + 1])
    return True


# Vector lanes of the partial sums along a row of run-time length (_symbolic_row_partials): 16
# float32 lanes, two AVX-512 or four AVX2 registers of independent sums.
ROW_PARTIAL_LANES = 16


def _symbolic_row_partials(sch: tvm.s_tir.Schedule, block, spatial: int, cores: int) -> bool:
    """A reduction of each row (one reduction axis, of run-time length, innermost: a mean per
    row) as ROW_PARTIAL_LANES vector lanes of partial results per row, combined at the row's
    end, the rows in parallel strips. TOPI's order is one serial chain of additions per row,
    which LLVM may not reorder into vectors (a float sum is not associative): the generic
    variance of a 1080p Laplacian took 5 ms where the specialised kernel's vector partials took
    0.9. The row is split into whole vectors and a last one under a guard; the guard is then
    taken off every vector but the last (_partition_vector_tails): under it, TVM's vectorizer
    would make the whole row scalar code."""
    loops = sch.get_loops(block)
    stmt = sch.get(block)
    if len(loops) != spatial + 1 or len(stmt.iter_vars) != len(loops) or spatial == 0:
        return False
    kinds = [iv.iter_type == tvm.tirx.IterVar.DataPar for iv in stmt.iter_vars]
    if kinds != [True] * spatial + [False]:
        return False
    if _is_static(sch.get(loops[-1]).extent) or not isinstance(stmt.body, tvm.tirx.BufferStore):
        return False
    outer = loops[:spatial]
    fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    if _is_static(sch.get(fused).extent):
        row = None
    else:
        _, row = sch.split(fused, [STRIPS_PER_CORE * cores, None])
    partial = _rfactor_lanes(sch, sch.get_loops(block)[-1], ROW_PARTIAL_LANES, spatial)
    # The partials of one row combined right after they are computed, in cache: the combining
    # block moved under the partials' row loop (compute_at of the partials under the combining
    # block's loops instead drops the split's guard on the row's last vector: it read past the
    # row's end).
    row_loop = sch.get_loops(partial)[0 if row is None else 1]
    sch.reverse_compute_at(block, row_loop, preserve_unit_loops=False)
    sch.parallel(sch.get_loops(partial)[0])
    sch.vectorize(sch.get_loops(partial)[-1])
    _zero_once(sch, partial)
    return True


def _partition_vector_tails(func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc:
    """`func` with each loop over the vectors of a row of run-time length (a serial loop whose
    body is a vectorised loop of one block under a guard, as splitting such a row leaves it) cut
    in two: the whole vectors, where the guard is proven true and dropped, and the last vector,
    guarded. TVM's vectorizer turns a guarded vector loop into scalar code, the whole row then
    ran lane by lane; TVM's loop_partition needs static extents."""
    body = _rewrite_loops(func.body, _partition_tail)
    if body.same_as(func.body):
        return func
    # The two loops define the same vector and block variables: TIR wants each defined once.
    return tvm.tirx.transform.ConvertSSA()(tvm.IRModule({"main": func.with_body(body)}))["main"]


def _conjuncts(expr) -> list:
    if isinstance(expr, tvm.tirx.And):
        return _conjuncts(expr.a) + _conjuncts(expr.b)
    return [expr]


def _partition_tail(loop):
    """_partition_vector_tails's two loops for one loop over vectors, or None where it is not
    such a loop or the guard cannot be proven for the whole vectors."""
    from tvm.s_tir import SBlockRealize
    from tvm.sym import Analyzer

    vector = loop.body
    if (
        loop.kind != tvm.tirx.ForKind.SERIAL
        or _is_static(loop.extent)
        or not isinstance(vector, tvm.tirx.For)
        or vector.kind != tvm.tirx.ForKind.VECTORIZED
        or not _is_static(vector.extent)
        or not isinstance(vector.body, SBlockRealize)
    ):
        return None
    realize = vector.body
    if isinstance(realize.predicate, bool | tvm.tirx.IntImm):
        return None
    # The guard split writes, `chunk * lanes + lane < n`, among the predicate's conjuncts (the
    # others, such as a strip's row bound, stay): the whole vectors are the first n // lanes;
    # proven on the last of them (chunk = n // lanes - 1 - k, k >= 0).
    conjuncts = _conjuncts(realize.predicate)
    guards = [c for c in conjuncts if _uses(c, loop.loop_var)]
    if len(guards) != 1 or not isinstance(guards[0], tvm.tirx.LT):
        return None
    (guard,) = guards
    others = [c for c in conjuncts if c is not guard]
    lanes = int(vector.extent)
    dtype = str(loop.loop_var.ty)
    whole = tvm.tirx.floordiv(guard.b, tvm.tirx.const(lanes, dtype))
    # chunk < n // lanes gives chunk * lanes + lane <= n // lanes * lanes - 1 < n; TVM's
    # analyzer does not combine the two facts, so the guard's left side is matched instead.
    ana = Analyzer()
    split = loop.loop_var * tvm.tirx.const(lanes, dtype) + vector.loop_var
    if not (ana.can_prove_equal(guard.a, split) and ana.can_prove_equal(loop.min, 0)):
        return None
    kept = tvm.tirx.all(*others) if others else tvm.tirx.const(True, "bool")
    first = _with_body(
        loop,
        _with_body(
            vector,
            SBlockRealize(realize.iter_values, kept, realize.block),
        ),
        extent=tvm.tirx.min(whole, loop.extent),
    )
    var = tvm.tirx.Var(f"{loop.loop_var.name}_tail", dtype)
    sub = Analyzer()
    sub.bind(loop.loop_var, var)
    tail_realize = SBlockRealize(
        [sub.simplify(v) for v in realize.iter_values],
        sub.simplify(realize.predicate),
        realize.block,
    )
    start = tvm.tirx.min(whole, loop.extent)
    tail = _with_body(
        loop,
        _with_body(vector, tail_realize),
        loop_var=var,
        start=start,
        extent=tvm.tirx.max(loop.extent - start, tvm.tirx.const(0, dtype)),
    )
    return tvm.tirx.SeqStmt([first, tail])


def _symbolic_strips(sch: tvm.s_tir.Schedule, sources: list, cores: int):
    """Row strips (_schedule_rows) for a kernel of run-time extents: one spatial output whose
    rows are cut into STRIPS_PER_CORE strips per core of a run-time row count; each strip
    computes the rows of its spatial `sources` it reads, halo included (TVM's compute_at works
    the regions out as expressions of the run-time extents). Rows are plain loops for LLVM's
    vectorizer. Returns the schedule, or None where the kernel is not such (several outputs, a
    reduction among the sources) or a strip would compute far more of a source than its share
    (reads across the image, such as a reflection), judged at REPRESENTATIVE_EXTENT."""
    from gdp.runtime.backends.tvm.fusion import _extent

    root = sch.get_sblock("root")
    outputs = sch.get_output_blocks(root)
    if len(outputs) != 1 or not all(_is_spatial(sch, b) for b in (*outputs, *sources)):
        return None
    if len(sources) > MAX_SYMBOLIC_STRIP_SOURCES:
        return None
    (output,) = outputs
    loops = sch.get_loops(output)
    if len(loops) < 2 or len(sch.get(output).iter_vars) != len(loops):
        return None
    last = sch.get(loops[-1]).extent
    inner = 2 if len(loops) >= 3 and _is_static(last) and int(last) <= MAX_CHANNELS else 1
    outer = loops[:-inner]
    fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    count = STRIPS_PER_CORE * cores
    strip, rows = sch.split(fused, [count, None])
    sch.parallel(strip)
    share = _extent(sch.get(rows).extent)
    for source in reversed(sources):  # consumers first, so each lands under the strip loop
        sch.compute_at(source, strip, preserve_unit_loops=True)
    for block in (*sources, output):
        block_loops = sch.get_loops(block)[1:]  # inside the strip
        if block is not output and block_loops:
            computed = _extent(sch.get(block_loops[0]).extent)
            if computed > MAX_STRIP_RECOMPUTE * share + 16:
                return None
        if len(block_loops) >= 2:
            tail = sch.get(block_loops[-1]).extent
            if len(block_loops) >= 3 and _is_static(tail) and int(tail) <= MAX_CHANNELS:
                _strip_row(sch, block, block_loops[-2:])
    return sch


def _strip_row(sch: tvm.s_tir.Schedule, block, row: list) -> None:
    """The row of pixels x channels of a strip's block: one loop for LLVM's vectorizer, except
    where the block looks values up at computed positions (a table indexed by pixel values)
    and does not read each pixel's own channel in step (_channels_contiguous): there each
    channel is a pass of TVM vectors along the row, the channels unrolled. LLVM left such a
    loop scalar, its channels chosen lane by lane (a 1080p BGR2HSV, with its two 256-entry
    division tables, 10.8 ms; in vectors 4.2 ms)."""
    stmt = sch.get(block)
    channels = int(sch.get(row[-1]).extent)
    store = stmt.body
    looks_up = isinstance(store, tvm.tirx.BufferStore) and any(
        _computed(i) for load in _all_loads(store.value) for i in load.indices
    )
    if not looks_up or _channels_contiguous(stmt, channels):
        sch.fuse(*row)
        return
    pixels, channel = row
    chunks, lanes = sch.split(pixels, [None, CHANNEL_LANES])
    sch.reorder(channel, chunks, lanes)
    sch.vectorize(lanes)  # the last, partial vector: _partition_vector_tails
    sch.unroll(channel)


def _schedule(func: tvm.tirx.PrimFunc, cores: int) -> tvm.s_tir.Schedule | None:
    """gdp's schedule of one kernel, or None where it leaves TVM's default."""
    sch = tvm.s_tir.Schedule(func)
    kept = _inline_producers(sch)
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    outputs = sch.get_output_blocks(sch.get_sblock("root"))
    if _row_kernel(sch, blocks, outputs):
        done = _schedule_rows(sch, outputs, kept, cores)
    elif any(not _is_spatial(sch, b) for b in blocks):
        done = _schedule_reductions(sch, cores)
    else:
        done = _schedule_generic(sch, cores)
    if not done and any(
        not _is_static(d) for p in func.params for d in getattr(p.ty, "shape", None) or ()
    ):
        # Meta-schedule's rewrite refuses run-time extents: the parametric schedule then, not
        # TVM's default of one serial pass per block (a histogram's index computation over
        # a 1080p image, its five elementwise blocks apart, took 26 ms).
        raise _Symbolic("a kernel of run-time extents the static schedules leave")
    return sch if done else None


def _row_kernel(sch: tvm.s_tir.Schedule, blocks: list, outputs: list) -> bool:
    """Whether the kernel can run as row strips: spatial outputs with the same rows (a fused
    group may export several images, such as Canny's two threshold maps, or an image and its
    row sums), and no reduction but short ones (a grey conversion's sum over three channels)
    and row reductions (each row of an image reduced to one value), computed per strip like
    any other source."""
    if not all(_is_spatial(sch, b) for b in outputs):
        return False
    rows = {_row_extent(sch, b) for b in outputs}
    if len(rows) != 1 or not any(len(sch.get_loops(b)) >= 2 for b in outputs):
        return False
    (extent,) = rows
    return all(
        _is_spatial(sch, b)
        or _reduced_elements(sch, b) <= SHORT_REDUCTION
        or _reduces_rows(sch, b, extent)
        for b in blocks
    )


def _row_axes(sch: tvm.s_tir.Schedule, block) -> list:
    """The loops over a block's rows: all but the last (the row), or the last two where the last
    is a short channel axis (HWC); a one-dimensional block's only loop (a value per row)."""
    loops = sch.get_loops(block)
    if len(loops) < 2:
        return loops
    return loops[: -2 if _int(sch.get(loops[-1]).extent) <= MAX_CHANNELS else -1]


def _row_extent(sch: tvm.s_tir.Schedule, block) -> int:
    return math.prod(_int(sch.get(lp).extent) for lp in _row_axes(sch, block))


def _reduces_rows(sch: tvm.s_tir.Schedule, block, rows: int) -> bool:
    """Whether a reduction block reduces each of `rows` rows to one value: its spatial axes
    (first) span the rows, its reduction axes (last) the row."""
    stmt = sch.get(block)
    spatial = leading_spatial_axes(stmt)
    extents = [_int(iv.dom.extent) for iv in stmt.iter_vars]
    return bool(spatial) and math.prod(extents[:spatial]) == rows


def _reduced_elements(sch: tvm.s_tir.Schedule, block) -> int:
    """How many elements each output of a reduction block combines."""
    return math.prod(
        _int(iv.dom.extent)
        for iv in sch.get(block).iter_vars
        if iv.iter_type != tvm.tirx.IterVar.DataPar
    )


def _is_stencil_source(sch: tvm.s_tir.Schedule, block) -> bool:
    """Whether a consumer reads `block`'s output over a small window around each point: a
    constant extent above 1 in some dimension, less than the whole dimension (a filter's taps).
    Point reads (extent 1, or a whole short axis such as RGB's three channels) and reads whose
    window depends on the data (a resize's source rows) are not stencils."""
    written = sch.get(block).writes[0].source  # the buffer
    # A dimension known only at run time (shape-generic kernels) is taken as large.
    shape = [int(d) if _is_static(d) else math.inf for d in written.shape]
    for consumer in sch.get_consumers(block):
        for read in sch.get(consumer).reads:
            if not read.source.same_as(written):
                continue
            for rng, size in zip(read.region, shape, strict=True):
                extent = rng.extent
                if isinstance(extent, tvm.tirx.IntImm) and 1 < extent.value < size:
                    return True
    return False


def _is_data_movement(stmt) -> bool:
    """A block that only copies (pads, slices, casts): inlining it costs an index computation
    per read, never arithmetic, even where its consumer reads it at every tap."""
    value = stmt.body.value if isinstance(stmt.body, tvm.tirx.BufferStore) else None
    while isinstance(value, tvm.tirx.Cast):
        value = value.value
    return isinstance(value, tvm.ir.TensorLoad)


def _reused(sch: tvm.s_tir.Schedule, block) -> bool:
    """Whether inlining `block` would copy a large expression: its consumers read its value at
    several places, and each place would get a copy. Along a chain of such blocks (a median's
    bit-by-bit search, min/max networks) the copies multiply exponentially; small ones (a
    3-tap sum read twice) are cheaper to recompute than to store."""
    stmt = sch.get(block)
    if not isinstance(stmt.body, tvm.tirx.BufferStore):
        return False
    written = stmt.writes[0].source
    reads = 0
    for consumer in sch.get_consumers(block):
        body = sch.get(consumer).body
        if isinstance(body, tvm.tirx.BufferStore):
            reads += _walk(body.value, written)[0]
    return (reads - 1) * _walk(stmt.body.value, None)[1] > MAX_INLINED_COPY


def _gathered(sch: tvm.s_tir.Schedule, block) -> bool:
    """Whether consumers gather `block`'s computed values (an index read from another buffer)
    at several places: a separable resize's first pass, read at each tap of the second. Kept, it
    is computed once per element (per strip, in vectors along its rows); inlined, every tap of
    the second pass would recompute the first's taps from gathered pixels. Static shapes only
    (the run-time extents' strips, _symbolic_strips, take no such source)."""
    written = sch.get(block).writes[0].source
    if not all(_is_static(d) for d in written.shape):
        return False
    gathers = 0
    for consumer in sch.get_consumers(block):
        body = sch.get(consumer).body
        if isinstance(body, tvm.tirx.BufferStore):
            gathers += sum(
                1
                for load in _loads(body.value)
                if load.source.same_as(written) and any(_loads(i) for i in load.indices)
            )
    return gathers >= 2


def _row_aligned(sch: tvm.s_tir.Schedule, block, outputs: list) -> bool:
    """Whether the outputs are `block`'s only consumers and read it only in their own row (row
    index = their first axis, the same row count): strips of the outputs then need the same
    strips of it, whatever the other indices."""
    consumers = sch.get_consumers(block)
    names = {sch.get(b).name_hint for b in outputs}
    if not consumers or any(sch.get(c).name_hint not in names for c in consumers):
        return False
    stmt = sch.get(block)
    written = stmt.writes[0].source
    if len(_row_axes(sch, block)) != 1:
        return False
    rows = _int(stmt.iter_vars[0].dom.extent)
    for consumer in consumers:
        node = sch.get(consumer)
        if len(_row_axes(sch, consumer)) != 1 or _int(node.iter_vars[0].dom.extent) != rows:
            return False
        if not isinstance(node.body, tvm.tirx.BufferStore):
            return False
        row = node.iter_vars[0].var
        for load in _all_loads(node.body.value):
            if load.source.same_as(written) and not load.indices[0].same_as(row):
                return False
    return True


def _all_loads(expr) -> list:
    """Every TensorLoad of a TIR expression, index tables included."""
    own = [expr] if isinstance(expr, tvm.ir.TensorLoad) else []
    return own + [load for child in tir_operands(expr) for load in _all_loads(child)]


# The fields through which a TIR expression holds its operands.
def _walk(expr, buffer) -> tuple[int, int]:
    """(loads of `buffer`, nodes) in the TIR expression `expr`."""
    loads = int(
        isinstance(expr, tvm.ir.TensorLoad) and buffer is not None and expr.source.same_as(buffer)
    )
    nodes = 1
    for child in tir_operands(expr):
        child_loads, child_nodes = _walk(child, buffer)
        loads, nodes = loads + child_loads, nodes + child_nodes
    return loads, nodes


def _is_spatial(sch: tvm.s_tir.Schedule, block) -> bool:
    return all(iv.iter_type == tvm.tirx.IterVar.DataPar for iv in sch.get(block).iter_vars)


def _inline_producers(sch: tvm.s_tir.Schedule) -> list:
    """Inline, to a fixed point, each spatial producer that is not a stencil source.
    Returns the producers left materialised (stencil sources), in program order."""
    root = sch.get_sblock("root")
    changed = True
    while changed:
        changed = False
        outputs = {sch.get(b).name_hint for b in sch.get_output_blocks(root)}
        # Consumers first: a slice inlined into a sum turns its producer's point reads into taps.
        for block in reversed(sch.get_child_blocks(root)):
            stmt = sch.get(block)
            if stmt.name_hint in outputs or not _is_spatial(sch, block) or len(stmt.writes) != 1:
                continue
            # An input's padding is inlined; an intermediate's stays materialised, computed
            # per strip (a reflected read of a strip-computed buffer would make each strip
            # compute all of it).
            movement = _is_data_movement(stmt)
            padding_of_input = movement and not sch.get_producers(block)
            if padding_of_input or not (
                _is_stencil_source(sch, block)
                or (not movement and (_reused(sch, block) or _gathered(sch, block)))
            ):
                # TVM's inliner refuses some producers with a TypeError of its own instead
                # of a ScheduleError (int32 gather indices substituted into int64 loop
                # arithmetic: a resize inside a gdp.cv2.chain): that producer stays stored.
                # The other blocks' handles stay valid: the scan goes on (restarted after each
                # inlining, the checks above ran once per block per inlining: 2.7 s of a 31-tap
                # Gaussian's compile).
                with contextlib.suppress(tvm.s_tir.ScheduleError, TypeError):
                    sch.compute_inline(block)
                    changed = True
    outputs = {sch.get(b).name_hint for b in sch.get_output_blocks(root)}
    return [b for b in sch.get_child_blocks(root) if sch.get(b).name_hint not in outputs]


def _vectorize_row(sch: tvm.s_tir.Schedule, loops: list) -> None:
    """Vectorise the row among a block's innermost `loops` (the last loop, fused with the one
    before it when the last is a channel axis, as in HWC) in vectors that tile it exactly: a
    guard on every element would stop LLVM's vector code. Vectors hold whole pixels (lanes a
    multiple of the channels), so the channel arithmetic of HWC indices cancels at compile time
    and loads stay contiguous. The first and the last vector stay scalar loops: at an image's
    border they read reflected indices, which simplify to plain shifted reads only away from the
    border, where the rest of the row then loads and stores whole vectors."""
    if not loops:  # a block with one loop (a 1x1 image's rows, its pixel): nothing to vectorise
        return
    last = _int(sch.get(loops[-1]).extent)
    # A channel axis of one (an HW1 grey image) too: vectorised alone, it would be one lane.
    is_channel = len(loops) >= 2 and last <= MAX_CHANNELS
    channels = last if is_channel else 1
    row = sch.fuse(*loops[-2:]) if is_channel else loops[-1]
    extent = _int(sch.get(row).extent)
    step = math.lcm(4, channels)
    widths = range(MAX_VECTOR_LANES // step * step, 0, -step)
    lanes = next((d for d in widths if extent % d == 0 and 2 * d >= widths[0]), None)
    if lanes is None:
        # No wide vector tiles the row: the last vector runs past it under a guard, split off
        # with the first, so the middle still loads and stores whole unguarded vectors.
        lanes = widths[0]
    chunks, vector = sch.split(row, [None, lanes])
    count = -(-extent // lanes)
    if count < 3:
        if extent % lanes == 0:
            sch.vectorize(vector)
        return
    _, middle, _ = sch.loop_partition(chunks, [1, count - 2, None])
    (block,) = sch.get_child_blocks(middle)
    sch.vectorize(sch.get_loops(block)[-1])


def _nearest_divisor(n: int, target: int) -> int:
    """The divisor of `n` nearest `target` (divisors found in O(sqrt n): reductions run to
    millions of elements); 1 for an empty loop (a slice of nothing)."""
    if n <= 0:
        return 1
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return min((*small, *(n // d for d in small)), key=lambda d: abs(d - target))


def _strip_rows(rows: int, cores: int) -> int:
    """Rows per strip: STRIPS_PER_CORE strips per core, as a divisor of `rows` (a strip that
    does not divide the rows would need a guard on every element). Longer strips recompute
    fewer halo rows; measured on 1080p, 8 strips per core beat 2-row to 16-row strips."""
    return _nearest_divisor(rows, max(1, rows // (STRIPS_PER_CORE * cores)))


def _schedule_rows(sch: tvm.s_tir.Schedule, outputs: list, sources: list, cores: int) -> bool:
    """Row strips: the outputs' rows cut into strips run in parallel, each strip computing the
    rows of the sources it reads (halo included) first. A source whose strip would need far
    more than its share of rows (read through a reflection, which reaches across the image) is
    computed in full before the strips instead: a strip of it would be the whole of it. So is
    a source laid out with the pixels flattened where strips hold one row (_flattened_rows)."""
    if len(outputs) == 1 and not sources:
        loops = sch.get_loops(outputs[0])
        stmt = sch.get(outputs[0])
        if len(stmt.iter_vars) == len(loops) and _planar_gather(sch, loops, stmt):
            _planes_inside_rows(sch, loops, cores, vectors=_wide_gathers(stmt))
            return True
    # An output that a block of the kernel reads outside the reader's own row (a stencil's
    # padded source reading a chain's gray image, also exported) is computed in full before
    # the strips: in a strip it would hold only the strip's rows, and the halo rows another
    # strip writes, in parallel, or not yet.
    shared = _outputs_read_across_rows(sch, outputs)
    sources, combining = _row_partials(sch, sources)
    # A gathered source's rows or columns per strip depend on the index tables' values, which
    # bound inference cannot know: computed in full (_gathered), unless the outputs read it only
    # in their own rows (a resize's vertical pass, gathered along the row by the horizontal
    # one): then each strip computes the same rows of it first, in the strip loop itself.
    gathered = [b for b in sources if _gathered(sch, b)]
    names = {sch.get(b).name_hint for b in gathered}
    rest = [b for b in sources if sch.get(b).name_hint not in names]
    full = _sources_recomputed(sch.copy(), outputs, rest, cores)
    if full is None:
        return False
    full |= _flattened_rows(sch, outputs, rest, cores)
    aligned = [b for b in gathered if _row_aligned(sch, b, outputs)] if not full else []
    full |= names - {sch.get(b).name_hint for b in aligned}
    full |= shared
    # What a block computed in full reads is computed in full before it, an output too: merged
    # into the strip loop, that output would be written after the block read it (a chain's
    # gray image, exported and padded by a stencil's source in the same kernel).
    full |= _producers_of(sch, full)
    sources = [b for b in rest if sch.get(b).name_hint not in full]
    outputs = [b for b in outputs if sch.get(b).name_hint not in full]
    if not outputs:
        return False
    strip = _strip_loop(sch, outputs, cores, aligned)
    for source in reversed(sources):  # consumers first, so each lands under the strip loop
        sch.compute_at(source, strip, preserve_unit_loops=True)
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        if sch.get(block).name_hint in full:
            # A resize's weighted sum whose output a gather reads (the next pass's taps).
            if not _is_spatial(sch, block) and _gather_reduction(
                sch, block, leading_spatial_axes(sch.get(block)) or 0
            ):
                continue
            loops = sch.get_loops(block)
            if sch.get(block).iter_vars[0].iter_type == tvm.tirx.IterVar.DataPar:
                sch.parallel(loops[0])
            _vectorize_block_row(sch, block, loops[1:])
    for block in (*aligned, *sources, *outputs):
        if sch.get(block).name_hint not in combining:  # a few additions per row: left serial
            _vectorize_block_row(sch, block, sch.get_loops(block)[1:])
    return True


def _outputs_read_across_rows(sch: tvm.s_tir.Schedule, outputs: list) -> set:
    """The names of the `outputs` that a block of the kernel reads at rows other than its own:
    a region of the output's buffer whose first axis is not exactly the reader's first
    iteration variable (a row sum reading its image's row y is; a stencil's rows y - 2 .. y + 2
    are not)."""
    shared = set()
    for output in outputs:
        written = {region.source for region in sch.get(output).writes}
        for consumer in sch.get_consumers(output):
            stmt = sch.get(consumer)
            row = stmt.iter_vars[0].var if stmt.iter_vars else None
            for region in stmt.reads:
                if region.source not in written:
                    continue
                first = region.region[0]
                own = (
                    row is not None
                    and isinstance(first.extent, tvm.tirx.IntImm)
                    and int(first.extent) == 1
                    and first.min.same_as(row)
                )
                if not own:
                    shared.add(sch.get(output).name_hint)
    return shared


def _producers_of(sch: tvm.s_tir.Schedule, names: set) -> set:
    """The names of the blocks that the blocks named `names` read, directly or through others."""
    found, todo = set(), [sch.get_sblock(name) for name in names]
    while todo:
        for producer in sch.get_producers(todo.pop()):
            name = sch.get(producer).name_hint
            if name not in found and name not in names:
                found.add(name)
                todo.append(producer)
    return found


def _flattened_rows(sch: tvm.s_tir.Schedule, outputs: list, sources: list, cores: int) -> set:
    """The names of the sources to compute in full, not per strip, because TVM's lowering would
    fail on them: where each strip holds one row (fewer rows than STRIPS_PER_CORE strips per
    core, or a prime count), a source whose buffer flattens the pixels of several rows into its
    first axis (a grey image as tf.tile or grayscale_to_rgb read it back, through a reshape:
    (H*W, 1)) gets, in CompactBufferAllocation, a per-strip offset that uses the consumer's
    loop variables outside their loops ("variable ax1_ax2_fused_1 has been used before
    definition"). Computed in full, it is a plain parallel loop."""
    rows = _row_extent(sch, outputs[0])
    if _strip_rows(rows, cores) != 1:
        return set()
    flattened = set()
    for source in sources:
        writes = sch.get(source).writes
        if not writes or not writes[0].source.shape:  # a scalar (a whole-image mean)
            continue
        first = _int(writes[0].source.shape[0])
        if first > rows and first % rows == 0:
            flattened.add(sch.get(source).name_hint)
    return flattened


def _row_partials(sch: tvm.s_tir.Schedule, sources: list) -> tuple[list, set]:
    """Each long row reduction among `sources` split into vector partial sums along the row (a
    block whose lanes vectorise) and the block combining them (rfactor, done before the blocks
    move under the strip loop: rfactor needs the reduction first in its loop nest). Returns the
    sources with the partial blocks added and the names of the combining blocks."""
    out, combining = [], set()
    for block in sources:
        if _is_spatial(sch, block) or _reduced_elements(sch, block) <= SHORT_REDUCTION:
            out.append(block)
            continue
        loops = sch.get_loops(block)
        spatial = leading_spatial_axes(sch.get(block))  # a row reduction's: never None
        lanes = _partial_lanes(_int(sch.get(loops[-1]).extent))
        if lanes is None:
            out.append(block)
            continue
        # Strips then loop over rows, the row's vectors, and the lanes, which are vectorised.
        partial = _rfactor_lanes(sch, loops[-1], lanes, spatial)
        out += [partial, block]
        combining.add(sch.get(block).name_hint)
    return out, combining


def _partial_lanes(extent: int) -> int | None:
    """Vector lanes of partial results for a reduction over `extent` contiguous elements: the
    widest multiple of 8 that divides it, where each lane then adds at least 4 terms."""
    lanes = next((d for d in range(MAX_VECTOR_LANES, 7, -8) if extent % d == 0), None)
    return None if lanes is None or extent < 4 * lanes else lanes


def _strip_loop(sch: tvm.s_tir.Schedule, outputs: list, cores: int, aligned=()):
    """The parallel loop over the outputs' row strips (one loop for all outputs), and over the
    same rows of the `aligned` sources (_row_aligned), computed first in each strip."""
    strips, rows = [], []
    for output in (*aligned, *outputs):
        outer = _row_axes(sch, output)
        outer = sch.fuse(*outer) if len(outer) > 1 else outer[0]
        strip, row = sch.split(outer, [None, _strip_rows(_int(sch.get(outer).extent), cores)])
        strips.append(strip)
        rows.append(row)
    if aligned:  # row by row too (which merges the strips): each row of theirs read in cache
        sch.merge(*rows)
        strip = sch.get_loops(outputs[0])[0]
    else:  # Several outputs share one strip loop: each strip computes its sources once for all.
        strip = sch.merge(*strips) if len(strips) > 1 else strips[0]
    sch.parallel(strip)
    return strip


def _sources_recomputed(sch: tvm.s_tir.Schedule, outputs, sources, cores) -> set | None:
    """On a copy of the schedule: the names of the sources that strips would recompute more
    than MAX_STRIP_RECOMPUTE times over (None where the outputs cannot be cut into strips)."""
    if not all(_row_axes(sch, output) for output in outputs):
        return None
    strip = _strip_loop(sch, outputs, cores)
    count = _int(sch.get(strip).extent)
    for source in reversed(sources):
        sch.compute_at(source, strip, preserve_unit_loops=True)
    full = set()
    for source in sources:
        domain = math.prod(_int(iv.dom.extent) for iv in sch.get(source).iter_vars)
        loops = sch.get_loops(source)
        per_strip = math.prod(_largest_extent(sch, loops[: k + 1]) for k in range(1, len(loops)))
        if per_strip * count > MAX_STRIP_RECOMPUTE * domain:
            full.add(sch.get(source).name_hint)
    return full


def _largest_extent(sch: tvm.s_tir.Schedule, nest: list) -> int:
    """The extent of the innermost of the loops `nest` (outermost first), or its largest value
    where it depends on the loops around it (a strip clamped at the image's edge)."""
    analyzer = tvm.sym.Analyzer()
    for loop in nest[:-1]:
        node = sch.get(loop)
        analyzer.bind(node.loop_var, tvm.ir.Range.from_min_extent(node.min, node.extent))
    return analyzer.const_int_bound(sch.get(nest[-1]).extent).max_value


def _vectorize_block_row(sch: tvm.s_tir.Schedule, block, loops: list) -> None:
    """Vectorise a block of a row kernel along its row (`loops`: its loops inside the strip)."""
    if not _is_spatial(sch, block):
        if _multi_buffer_reduction(sch, block):
            # A reduction of several values (ArgMax's index and value): TVM lowers its
            # combiner through let-bound temporaries, one per reduced value, and a second copy
            # of the block (the border chunks _vectorize_row splits off) rebinds them to other
            # values ('Trying to update var ... with a different value'). Left a plain loop
            # inside the parallel strip.
            return
        # A reduction's loops (a short one's, or the row partials') go outside its last spatial
        # loop, which is then vectorised.
        kinds = [iv.iter_type == tvm.tirx.IterVar.DataPar for iv in sch.get(block).iter_vars]
        kinds = kinds[len(kinds) - len(loops) :]
        spatial = [lp for lp, k in zip(loops, kinds, strict=True) if k]
        reduction = [lp for lp, k in zip(loops, kinds, strict=True) if not k]
        if not spatial:  # a scalar (a few channels' sum into one mean): nothing to vectorise
            return
        # A resize's weighted sum (_gather_inner): the taps outside the whole row, vectorised.
        inner = (
            _gather_inner(sch.get(block), len(sch.get(block).iter_vars) - 1)
            if len(reduction) == 1
            else 0
        )
        inner = min(inner, len(spatial))
        if not inner and _channel_sum(sch, block, reduction):
            return
        inner = inner or 1
        sch.reorder(*spatial[:-inner], *reduction, *spatial[-inner:])
        loops = spatial[-inner:]
    elif _unrolled_channels(sch, block, loops) or _gathers_in_a_branch(sch.get(block)):
        return
    _vectorize_row(sch, loops)


def _gathers_in_a_branch(stmt) -> bool:
    """Whether a block's value gathers (a load whose index is loaded) inside a branch of an
    if_then_else: a reflected pad of a resize's output in one kernel with it (a gdp.cv2 chain of
    a resize, a 5x5 blur and a Sobel). Vectorised, TVM's code for such a block gave wrong pad
    rows: the blur's two bottom pad rows of a resize to 74x333 read as other rows (values up to
    72 off in the Sobel's last three rows), silently. The cause inside TVM's vectorizer was not
    found; such a block stays a plain loop (still parallel over rows)."""
    body = stmt.body
    return isinstance(body, tvm.tirx.BufferStore) and _branch_gathers(body.value, False)


def _branch_gathers(expr, in_branch: bool) -> bool:
    if isinstance(expr, tvm.ir.TensorLoad):
        return in_branch and any(_loads(i) for i in expr.indices)
    if isinstance(expr, tvm.ir.Call) and getattr(expr.op, "name", "") == "prim.if_then_else":
        return any(_branch_gathers(a, True) for a in expr.args)
    return any(_branch_gathers(c, in_branch) for c in tir_operands(expr))


def _channel_sum(sch: tvm.s_tir.Schedule, block, reduction: list) -> bool:
    """A reduction over a pixel's few channels (a grey conversion's weighted sum of B, G, R),
    its loop unrolled inside the pixel loop, which is left to LLVM's loop vectorizer (True; else
    nothing is scheduled). Vectorised by TVM, with the channel loop outside the row, each channel
    was a strided gather and the sum a pass over the row per channel: a static 1080p BGR2GRAY
    took 2.0 ms, the shape-generic kernel, which runs this form, 0.4."""
    if len(reduction) != 1:
        return False
    extent = sch.get(reduction[0]).extent
    if not (_is_static(extent) and int(extent) <= MAX_CHANNELS):
        return False
    stmt = sch.get(block)
    if not isinstance(stmt.body, tvm.tirx.BufferStore):
        return False
    channel = stmt.iter_vars[-1].var
    written = stmt.writes[0].source
    loads = [x for x in _all_loads(stmt.body.value) if not x.source.same_as(written)]
    if not loads or not all(x.indices and _uses(x.indices[-1], channel) for x in loads):
        return False
    sch.unroll(reduction[0])
    return True


def _unrolled_channels(sch: tvm.s_tir.Schedule, block, loops: list) -> bool:
    """A static HWC row as a plain loop of pixels, the channels unrolled inside it, for LLVM's
    loop vectorizer (True; else nothing is scheduled), where vectors of pixels x channels did
    badly:
    - the row gathers 8- or 16-bit values at computed positions: each lane computed its pixel's
      source position again and LLVM loaded the bytes lane by lane (_wide_gathers); per pixel
      the position is computed once for its channels (a 1080p BGR resize to 1/3: LINEAR 0.20
      -> 0.16 ms, CUBIC 0.30 -> 0.21; warpAffine LINEAR's blend 34 -> 29 ms);
    - its channels are chosen by channel or read at other channels (_across_channels): each
      lane picked its channel's value through the channel's select chain (at 1080p a channel
      swap 1.5 -> 0.16 ms, gdp.cv2's HSV2BGR 25 -> 5, tf.image.hsv_to_rgb 4.3 -> 1.6; TVM
      vectors of 16 pixels per channel were as fast on the first two, 3x slower on the third).
    _symbolic_rows does the same for rows of run-time extents."""
    stmt = sch.get(block)
    if len(loops) < 2 or not isinstance(stmt.body, tvm.tirx.BufferStore):
        return False
    last = sch.get(loops[-1]).extent
    if not (_is_static(last) and int(last) <= MAX_CHANNELS):
        return False
    gathers = any(_computed(i) for load in _all_loads(stmt.body.value) for i in load.indices)
    if not (gathers and not _wide_gathers(stmt)) and not _across_channels(stmt, int(last)):
        return False
    sch.unroll(loops[-1])
    return True


def _across_channels(stmt, channels: int) -> bool:
    """Whether a block over (..., pixels, channels) chooses values by channel or reads other
    channels (a swap, a concat of planes): not a stencil reading through borders, which
    _partition_borders cuts as one row, nor a row whose every load is at the pixel's own
    channel, which one loop reads contiguously (_channels_contiguous)."""
    pixel_axis = len(stmt.iter_vars) - 2
    return not _reads_borders(stmt, pixel_axis) and not _channels_contiguous(stmt, channels)


def _multi_buffer_reduction(sch: tvm.s_tir.Schedule, block) -> bool:
    """Whether `block` reduces into several buffers at once (ArgMax/ArgMin: an index and a
    value, combined by one multi-value combiner)."""
    return not _is_spatial(sch, block) and len(sch.get(block).writes) > 1


def _schedule_reductions(sch: tvm.s_tir.Schedule, cores: int) -> bool:
    """Reductions that read their input row by row run as one pass over its rows (_row_scans).
    Each other reduction with enough independent outputs runs them in parallel, each accumulated
    in vector partials; one with few outputs (a sum over a whole image) is split into partial
    results (rfactor), at least PARTIALS_PER_CORE per core, that run in parallel and are
    combined at the end. Other blocks run their outer loops in parallel."""
    jobs = PARTIALS_PER_CORE * cores
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        if not sch.get_loops(block):
            # A block outside any loop (a scalar's cast) makes rfactor fail on its sibling
            # (TVM's BlockReplacer check): a unit loop around it avoids that.
            sch.add_unit_loop(block)
    scanned = _row_scans(sch, jobs)
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        if sch.get(block).name_hint in scanned:
            continue
        loops = sch.get_loops(block)
        if len(loops) == 1 and _int(sch.get(loops[0]).extent) == 1 and _is_spatial(sch, block):
            continue
        kinds = [iv.iter_type for iv in sch.get(block).iter_vars]
        spatial = [lp for lp, k in zip(loops, kinds, strict=True) if k == tvm.tirx.IterVar.DataPar]
        extents = [_int(sch.get(lp).extent) for lp in loops]
        if len(kinds) != len(loops) or loops[: len(spatial)] != spatial:
            continue  # not the plain (spatial..., reduction...) nest TOPI writes
        if _is_spatial(sch, block):
            sch.parallel(sch.fuse(*loops[:-1]) if len(loops) > 1 else loops[0])
            continue
        if _multi_buffer_reduction(sch, block):
            # Several reduced values (ArgMax): no vector partials or rfactor, whose copies of
            # the combiner TVM's lowering refuses; the outputs run in parallel.
            if spatial:
                sch.parallel(sch.fuse(*spatial) if len(spatial) > 1 else spatial[0])
            continue
        if _gather_reduction(sch, block, len(spatial)):
            continue
        if math.prod(extents[: len(spatial)]) >= jobs:
            partial = _vector_partials(sch, block, len(spatial))
            loops = sch.get_loops(block)
            sch.parallel(sch.fuse(*loops[: len(spatial)]) if len(spatial) > 1 else loops[0])
            if partial is not None:
                _zero_once(sch, partial)
            continue
        reduction = loops[len(spatial) :]
        fused = sch.fuse(*reduction) if len(reduction) > 1 else reduction[0]
        extent = _int(sch.get(fused).extent)
        if extent < MIN_PARALLEL_ELEMENTS:
            continue
        # About sqrt(n) partial sums of about sqrt(n) terms each: besides the parallelism, a
        # two-level sum's rounding error grows with sqrt(n), a serial sum's with n.
        parts = _nearest_divisor(extent, max(jobs, math.isqrt(extent)))
        if parts < 2:
            continue
        outer, _ = sch.split(fused, [parts, None])
        partial = sch.rfactor(outer, factor_axis=0)
        partial_loops = sch.get_loops(partial)
        # The partial-result axis outermost, run in parallel.
        parallel_loop = next(lp for lp in partial_loops if _int(sch.get(lp).extent) == parts)
        others = [lp for lp in partial_loops if not lp.same_as(parallel_loop)]
        sch.reorder(parallel_loop, *others[: len(spatial)])
        sch.parallel(parallel_loop)
    return True


def row_scan(stmt) -> tuple[int, bool] | None:
    """How a reduction block can be computed one input row at a time, or None: it reads its
    inputs as (..., row, channel) arrays, reducing along the row (their second-to-last axis) and
    keeping the channel (the last, at most MAX_CHANNELS), and the axes before the row are either
    all kept (a sum of each row: mean_std's packed sums) or all reduced (a sum or a minimum per
    channel over a whole batch, folded into one partial per row). Returns (the number of input
    rows, whether the axes before the row are reduced). Several such reductions of one input
    run as one pass over its rows (_schedule_reductions)."""
    ivs = list(stmt.iter_vars)
    if not stmt.reads or len(ivs) < 3:
        return None
    kind = {iv.var: iv.iter_type == tvm.tirx.IterVar.DataPar for iv in ivs}
    orders = []
    for read in stmt.reads:
        index = [r.min for r in read.region]
        order = [next((k for k, v in enumerate(kind) if v.same_as(i)), None) for i in index]
        if None in order or sorted(order) != list(range(len(ivs))):
            return None
        orders.append(order)
    if any(o != orders[0] for o in orders):
        return None
    *lead, row, channel = [ivs[k].var for k in orders[0]]
    if not kind[channel] or kind[row] or len({kind[v] for v in lead}) != 1:
        return None
    if not all(_is_static(iv.dom.extent) for iv in ivs):
        return None  # a shape-generic kernel's: scanned by _schedule_symbolic's loops
    extent = {iv.var: _int(iv.dom.extent) for iv in ivs}
    if extent[channel] > MAX_CHANNELS:
        return None
    # The block's own order must be TOPI's: kept axes (rows then channel), then the reduced.
    reduced = not kind[lead[0]]
    order = [channel, *lead, row] if reduced else [*lead, channel, row]
    if any(not iv.var.same_as(v) for iv, v in zip(ivs, order, strict=True)):
        return None
    return math.prod(extent[v] for v in lead), reduced


def _row_scans(sch: tvm.s_tir.Schedule, jobs: int) -> set[str]:
    """The kernel's reductions that read their input one row at a time (row_scan), each row read
    once into vector partials (_channel_partials); those reading rows of one shape share the
    parallel loop over the rows and the loop along each row, in pieces of one width, so each
    piece is loaded once for all of them: a kernel that sums, and takes the minimum and maximum
    of, one batch (mean_std) reads it once. Returns the names of the blocks scheduled."""
    scans: dict[tuple, list] = {}
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        scan = row_scan(sch.get(block))
        if scan is None or scan[0] < jobs:
            continue
        stmt = sch.get(block)
        row, channels = (_int(stmt.iter_vars[k].dom.extent) for k in (-1, 0 if scan[1] else -2))
        width = max(1, tvm.DataType(stmt.writes[0].source.ty.dtype).bits // 8)
        piece = _piece(row, channels, width)
        if piece:
            scans.setdefault((scan[0], row, channels), []).append((block, scan[1], piece))
    done = set()
    for group in scans.values():
        piece = min(p for _, _, p in group)
        found = [
            _channel_partials(sch, _per_row(sch, b) if whole else b, piece) for b, whole, _ in group
        ]
        rows, partials = [f[0] for f in found], [f[1] for f in found]
        if len(rows) > 1:
            rows = [_merge_first(sch, rows)]
            sch.parallel(rows[0])
            # The merged row now runs the scans' bodies in the order _merge_first gives.
            pieces = [sch.get_loops(p)[-2] for p in partials]
            _merge_first(sch, pieces[1:] + pieces[:1])
        for partial in partials:
            _zero_once(sch, partial)
        done |= {sch.get(b).name_hint for b in sch.get_child_blocks(rows[0])}
    return done


def _merge_first(sch: tvm.s_tir.Schedule, loops: list):
    """Sibling loops (in program order) merged into one, placed where the first was: before the
    blocks after any of them, which read what they compute (the partials' combinations). TVM's
    merge places the loop where the last loop it is given was, and runs the bodies in the order
    given: here loops[1:], then loops[0]."""
    return sch.merge(*loops[1:], loops[0])


def _piece(row: int, channels: int, width: int) -> int:
    """Pixels of a row piece whose (pixel, channel) values are the lanes of partial results of
    `width` bytes each, or 0 where the row does not split into such pieces."""
    most = min(MAX_VECTOR_LANES, CHANNEL_PARTIAL_BYTES // width) // channels
    fits = (d for d in range(most, 0, -1) if (d * channels) % 8 == 0 and row % d == 0)
    return next((d for d in fits if row >= 4 * d), 0)


def _per_row(sch: tvm.s_tir.Schedule, block):
    """A reduction over whole rows and the axes before them (channels kept) as one partial per
    row (rfactor over the rows), combined after all rows; returns the partials' block, whose
    iteration is then (row, channel, along the row), as a row reduction's is."""
    loops = sch.get_loops(block)
    rows = sch.fuse(*loops[1:-1]) if len(loops) > 3 else loops[1]
    partial = sch.rfactor(rows, factor_axis=0)
    stmt = sch.get(partial)
    row_var = stmt.writes[0].region[0].min
    at = next(k for k, iv in enumerate(stmt.iter_vars) if iv.var.same_as(row_var))
    sch.reorder_block_iter_var(partial, [at, *(k for k in range(len(stmt.iter_vars)) if k != at)])
    loops = sch.get_loops(partial)
    sch.reorder(loops[1], loops[0])
    return partial


def _channel_partials(sch: tvm.s_tir.Schedule, block, piece: int):
    """A reduction along an image's rows, channels kept (a packed sum over each row of an
    (N, H, W, C) batch): TOPI loops over the channel outside the row, reading every C-th byte.
    Here each row is read once, contiguously, in pieces of `piece` pixels: a piece's (pixel,
    channel) values are lanes of partial results, each lane taking the same channel of every
    piece, and the lanes of a channel are combined after the row. Returns the parallel loop over
    the rows and the partials' block (its last two loops: along the row, and the lanes)."""
    spatial = len(sch.get_loops(block)) - 1
    # The partials laid out (..., piece, channel): one lane per contiguous input element.
    partial = _rfactor_lanes(sch, sch.get_loops(block)[-1], piece, spatial - 1, lane_axes=2)
    outer = sch.get_loops(block)[: spatial - 1]
    row = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    sch.parallel(row)
    sch.compute_at(partial, row, preserve_unit_loops=False)
    sch.vectorize(sch.fuse(*sch.get_loops(partial)[-2:]))
    return row, partial


def _vector_partials(sch: tvm.s_tir.Schedule, block, spatial: int):
    """Accumulate a reduction in a vector of partial results (rfactor over the inner part of the
    reduction loop), summed at the end: a serial sum waits for each addition before the next,
    where independent vector lanes keep the FP units busy. Only for a reduction over the
    innermost (contiguous) axis, whose inner part then loads whole vectors. Returns the partials'
    block (its init still inside: _zero_once, after the loops around it are final), or None."""
    loops = sch.get_loops(block)
    reduction = loops[spatial:]
    if len(reduction) != 1:
        return None
    lanes = _partial_lanes(_int(sch.get(reduction[0]).extent))
    if lanes is None:
        return None
    partial = _rfactor_lanes(sch, reduction[0], lanes, spatial)
    # The partials of one output are combined right after they are computed, in cache.
    sch.compute_at(partial, sch.get_loops(block)[spatial - 1], preserve_unit_loops=False)
    sch.vectorize(sch.get_loops(partial)[-1])
    return partial


def _rfactor_lanes(sch: tvm.s_tir.Schedule, loop, lanes: int, factor_axis: int, lane_axes=1):
    """The inner `lanes` iterations of reduction `loop` as a block of partial results (rfactor,
    the new axis at `factor_axis` of the partials), its iteration reordered so that the lane
    axes (the `lane_axes` written axes from factor_axis; rfactor puts the new one first) come
    last, after the other spatial axes and the reduction: each step along the row then loads
    and updates whole vectors of lanes. Returns the partials' block."""
    _, inner = sch.split(loop, [None, lanes])
    partial = sch.rfactor(inner, factor_axis=factor_axis)
    stmt = sch.get(partial)
    written = stmt.writes[0].region[factor_axis : factor_axis + lane_axes]
    ivs = list(stmt.iter_vars)
    at = [next(k for k, iv in enumerate(ivs) if iv.var.same_as(r.min)) for r in written]
    rest = sorted(
        (k for k in range(len(ivs)) if k not in at),
        key=lambda k: ivs[k].iter_type != tvm.tirx.IterVar.DataPar,
    )
    sch.reorder_block_iter_var(partial, [*rest, *at])
    return partial


def _zero_once(sch: tvm.s_tir.Schedule, partial) -> None:
    """A partials block's lanes zeroed once before the loop along the row, not tested on every
    step of it. Done last: parallel and merge refuse a reduction block without its init."""
    init = sch.decompose_reduction(partial, sch.get_loops(partial)[-2])
    sch.vectorize(sch.get_loops(init)[-1])


def _schedule_generic(sch: tvm.s_tir.Schedule, cores: int) -> bool:
    # The annotations meta-schedule's ParallelizeVectorizeUnroll rule puts on a root block, set
    # directly: building a TuneContext to run the rule imports every tensor intrinsic (~20 s).
    root = sch.get_sblock("root")
    sch.annotate(root, "meta_schedule.parallel", MAX_JOBS_PER_CORE * cores)
    sch.annotate(root, "meta_schedule.vectorize", MAX_VECTORIZE_EXTENT)
    sch.annotate(root, "meta_schedule.unroll_explicit", UNROLL_EXPLICIT)
    return ms.postproc.RewriteParallelVectorizeUnroll().apply(sch)


def _gather_reduction(sch: tvm.s_tir.Schedule, block, spatial: int) -> bool:
    """A weighted sum over K taps read along an outer axis (gdp's separable resizes: output row
    i = sum_k w[i, k] * input row idx[i, k], the gather inlined): the taps loop goes outside
    the innermost output axes that every read indexes as the output does (a whole image row
    and its channels), which then run as vectors, accumulating into the output row while it is
    in cache; TOPI's order would sum K scattered scalars per output element. The outer axes run
    in parallel. Returns False, scheduling nothing, where the block is not such a sum."""
    loops = sch.get_loops(block)
    inner = _gather_inner(sch.get(block), spatial) if len(loops) == spatial + 1 else 0
    if inner == 0:
        return False
    outer = loops[: spatial - inner]
    sch.reorder(*outer, loops[-1], *loops[spatial - inner : spatial])
    sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
    # Vectorised while the block still has its init (vectorize refuses an update block without
    # it: neither a reduction block nor a complete one), then the init taken out of the taps
    # loop (_zero_once's order).
    row = sch.get_loops(block)[-inner:]
    row = sch.fuse(*row) if len(row) > 1 else row[0]
    extent = _int(sch.get(row).extent)
    lanes = next((d for d in range(MAX_VECTOR_LANES, 0, -1) if extent % d == 0), 1)
    if lanes > 1:
        sch.vectorize(sch.split(row, [None, lanes])[1])
    init = sch.decompose_reduction(block, sch.get_loops(block)[1])
    if lanes > 1:
        sch.vectorize(sch.get_loops(init)[-1])
    return True


def _gather_inner(stmt, spatial: int) -> int:
    """How many innermost output axes of a weighted sum over taps read along an outer axis
    (_gather_reduction) every read indexes as the output does: the row that runs as vectors
    with the taps loop outside it; 0 where the block is no such sum."""
    if len(stmt.iter_vars) != spatial + 1 or spatial < 2:
        return 0
    if not isinstance(stmt.body, tvm.tirx.BufferStore):
        return 0
    axes = [iv.var for iv in stmt.iter_vars]
    k = axes[-1]
    written = stmt.writes[0].source
    loads = [load for load in _loads(stmt.body.value) if not load.source.same_as(written)]
    # Only a gather: some value is read at an index computed from another buffer and the taps.
    if not any(
        isinstance(i, tvm.ir.TensorLoad) and _uses(i, k) for load in loads for i in load.indices
    ):
        return 0
    inner = 0
    for m in range(1, spatial):
        suffix = axes[spatial - m : spatial]
        along = any(
            len(load.indices) >= m
            and all(a.same_as(i) for a, i in zip(suffix, load.indices[-m:], strict=True))
            for load in loads
        )
        if along and all(_inner_ok(load, suffix, k) for load in loads):
            inner = m
    return inner


def _inner_ok(load, suffix: list, k) -> bool:
    """Whether a load's last len(suffix) indices are the `suffix` axes in order (it reads along
    the output's row) or use none of them (a weight broadcast along the row), and never the
    taps axis `k`."""
    indices = list(load.indices)
    if len(indices) < len(suffix):
        return not any(_uses(i, a) for i in indices for a in (*suffix, k))
    tail = indices[-len(suffix) :]
    if any(_uses(i, k) for i in tail):
        return False
    if all(a.same_as(i) for a, i in zip(suffix, tail, strict=True)):
        return not any(_uses(i, a) for i in indices[: -len(suffix)] for a in suffix)
    return not any(_uses(i, a) for i in indices for a in suffix)


def _loads(expr) -> list:
    """The TensorLoads of a TIR expression's values (not those inside another load's indices:
    a gather's index table)."""
    if isinstance(expr, tvm.ir.TensorLoad):
        return [expr]
    return [load for child in tir_operands(expr) for load in _loads(child)]


def _uses(expr, var) -> bool:
    """Whether the TIR expression `expr` refers to `var`."""
    if isinstance(expr, tvm.ir.Var):
        return expr.same_as(var)
    return any(_uses(c, var) for c in tir_operands(expr))


# The widest border (in pixels) a row is partitioned by (_partition_borders): a stencil's halo.
MAX_BORDER = 16


# Outputs of fewer elements than this run a shape-generic kernel on the calling thread alone.
SERIAL_BELOW = 1 << 16
# The attribute _serial_when_small leaves on a kernel it has seen.
SERIAL_ATTR = "gdp_serial_when_small"


def _serial_when_small(func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc:
    """`func` run on the calling thread alone where every buffer it reads or writes has fewer
    than SERIAL_BELOW elements (a reduction of a large image to a few numbers stays parallel): a
    parallel loop wakes TVM's thread pool on every call, and on a small image that costs more
    than the work (an 8x8 BGR2RGB: 2.3 ms a call with two other processes busy on the two
    cores, 0.1-0.2 ms serial; OpenCV stays serial below its own threshold). Of static extents,
    its parallel loops made serial; of run-time extents (shape-generic), its body twice under a
    test of the buffers' sizes at run time: the serial copy, and the parallel one."""
    from tvm.s_tir import SBlockRealize

    if func.attrs is not None and SERIAL_ATTR in func.attrs:
        return func  # scheduled before (schedule() may see a kernel twice)
    root = func.body
    # A parameter is its buffer in TVM 0.27's PrimFunc.
    shapes = [getattr(p.ty, "shape", None) for p in func.params]
    if not shapes or not isinstance(root, SBlockRealize) or any(s is None for s in shapes):
        return func
    sizes = [math.prod(shape) if len(shape) else 1 for shape in shapes]
    if any(_is_static(n) and int(n) >= SERIAL_BELOW for n in sizes):
        return func
    run_time = [n for n in sizes if not _is_static(n)]
    found = []

    def serial(stmt):
        if isinstance(stmt, tvm.tirx.For):
            body = serial(stmt.body)
            if stmt.kind == tvm.tirx.ForKind.PARALLEL:
                found.append(stmt)
                return tvm.tirx.For(
                    stmt.loop_var,
                    stmt.min,
                    stmt.extent,
                    tvm.tirx.ForKind.SERIAL,
                    body,
                    stmt.thread_binding,
                    stmt.annotations,
                )
            return stmt if body.same_as(stmt.body) else _with_body(stmt, body)
        if isinstance(stmt, tvm.tirx.SeqStmt):
            return tvm.tirx.SeqStmt([serial(s) for s in stmt.seq])
        if isinstance(stmt, SBlockRealize):
            block = stmt.block
            return SBlockRealize(
                stmt.iter_values, stmt.predicate, _block_with(block, body=serial(block.body))
            )
        if isinstance(stmt, tvm.tirx.IfThenElse):
            return tvm.tirx.IfThenElse(
                stmt.condition,
                serial(stmt.then_case),
                None if stmt.else_case is None else serial(stmt.else_case),
            )
        return stmt

    serial_body = serial(root.block.body)
    if not found:
        return func
    if run_time:
        small = tvm.tirx.all(*[n < tvm.tirx.const(SERIAL_BELOW, str(n.ty)) for n in run_time])
        body = tvm.tirx.IfThenElse(small, serial_body, root.block.body)
    else:
        body = serial_body
    func = func.with_attr(SERIAL_ATTR, True).with_body(
        SBlockRealize(root.iter_values, root.predicate, _block_with(root.block, body=body))
    )
    # The two copies define the same loop variables: TIR wants each defined once.
    return tvm.tirx.transform.ConvertSSA()(tvm.IRModule({"main": func}))["main"]


def _partition_borders(func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc:
    """`func` with each row loop of run-time length whose block reads through border indices
    (a reflected or clamped pad inlined into a stencil: if_then_else on the column) cut into
    three loops: a left border of constant width, a middle of run-time length, and a right
    border. In the middle the border conditions are decided (TVM's analyzer proves them under
    the column's bounds), so its reads are plain shifted loads that LLVM's loop vectorizer turns
    into whole vectors; the borders keep the reflected reads. TVM's own loop_partition needs
    static extents, and its LoopPartition pass leaves the conditions of such rows in place."""
    body = _rewrite_loops(func.body, _partition_row)
    return func if body.same_as(func.body) else func.with_body(body)


def _rewrite_loops(stmt, rewrite):
    """`stmt` with each loop, innermost first, replaced by `rewrite(loop)` where that is not
    None (through sequences, blocks and the then-branch of an if without else); unchanged
    parts are the same objects."""
    from tvm.s_tir import SBlockRealize

    if isinstance(stmt, tvm.tirx.For):
        body = _rewrite_loops(stmt.body, rewrite)
        loop = stmt if body.same_as(stmt.body) else _with_body(stmt, body)
        return rewrite(loop) or loop
    if isinstance(stmt, tvm.tirx.SeqStmt):
        seq = [_rewrite_loops(s, rewrite) for s in stmt.seq]
        if all(a.same_as(b) for a, b in zip(seq, stmt.seq, strict=True)):
            return stmt
        return tvm.tirx.SeqStmt(seq)
    if isinstance(stmt, SBlockRealize):
        block = stmt.block
        body = _rewrite_loops(block.body, rewrite)
        if body.same_as(block.body):
            return stmt
        return SBlockRealize(stmt.iter_values, stmt.predicate, _block_with(block, body=body))
    if isinstance(stmt, tvm.tirx.IfThenElse):
        then = _rewrite_loops(stmt.then_case, rewrite)
        if then.same_as(stmt.then_case) or stmt.else_case is not None:
            return stmt
        return tvm.tirx.IfThenElse(stmt.condition, then, None)
    return stmt


def _with_body(loop, body, loop_var=None, start=None, extent=None):
    return tvm.tirx.For(
        loop_var if loop_var is not None else loop.loop_var,
        start if start is not None else loop.min,
        extent if extent is not None else loop.extent,
        loop.kind,
        body,
        loop.thread_binding,
        loop.annotations,
    )


def _block_with(block, body=None):
    from tvm.s_tir import SBlock

    return SBlock(
        block.iter_vars,
        block.reads,
        block.writes,
        block.name_hint,
        body if body is not None else block.body,
        block.init,
        block.alloc_buffers,
        block.match_buffers,
        block.annotations,
    )


def _border_conditions(expr, var) -> list:
    """The conditions of the if_then_else calls in `expr` that use `var`."""
    found = []
    if (
        isinstance(expr, tvm.ir.Call)
        and getattr(expr.op, "name", "") == "prim.if_then_else"
        and _uses(expr.args[0], var)
    ):
        found.append(expr.args[0])
    for child in tir_operands(expr):
        found += _border_conditions(child, var)
    return found


def _decided_inside(condition, var, margin, width) -> bool | None:
    """The value of a border condition on the column `var` over every column at least `margin`
    from both ends of a row `width` long, or None where it is not decided there. TVM's analyzer
    decides it under the two bounds where the condition is written as they are (v < width - m);
    a concat's (1 <= v - W, where width is W + 2) it decides only with v written from the end
    it is about: v = width - 1 - margin - k or v = margin + k, k >= 0 (the condition then holds
    or fails for every k, past the middle too)."""
    from tvm.sym import Analyzer, ConstIntBound

    ana = Analyzer()
    inside = tvm.tirx.And(var >= margin, var < width - margin)
    with ana.constraint_scope(inside):
        found = ana.simplify(condition)
    if isinstance(found, tvm.tirx.IntImm):
        return bool(found.value)
    for anchored in (lambda k: width - 1 - margin - k, lambda k: margin + k):
        sub = Analyzer()
        k = tvm.tirx.Var("k", str(var.ty))
        sub.update(k, ConstIntBound(0, ConstIntBound.POS_INF))
        sub.bind(var, anchored(k))
        found = sub.simplify(condition)
        if isinstance(found, tvm.tirx.IntImm):
            return bool(found.value)
    return None


def _with_conditions(expr, conditions: list, values: list):
    """`expr` with each if_then_else whose condition is one of `conditions` replaced by the
    branch its value in `values` picks."""
    import tvm_ffi

    def pick(call):
        if getattr(call.op, "name", "") != "prim.if_then_else":
            return call
        for condition, value in zip(conditions, values, strict=True):
            if tvm_ffi.structural_equal(call.args[0], condition):
                return call.args[1] if value else call.args[2]
        return call

    return tvm_ffi.structural_map(expr, [(tvm.ir.Call, pick)], order="post")


def _partition_row(loop):
    """_partition_borders's three loops for one row loop, or None where it is not such."""
    from tvm.s_tir import SBlockRealize
    from tvm.sym import Analyzer

    realize = loop.body
    if _is_static(loop.extent) or not isinstance(realize, SBlockRealize):
        return None
    block = realize.block
    store = block.body
    if not isinstance(store, tvm.tirx.BufferStore) or block.init is not None:
        return None
    if any(iv.iter_type != tvm.tirx.IterVar.DataPar for iv in block.iter_vars):
        return None
    j = loop.loop_var
    # The column: the block variable of run-time extent bound to this loop (j // channels when
    # the row's pixels and channels are one loop); the others bound to j (the channel) static.
    bound = [
        (iv, value)
        for iv, value in zip(block.iter_vars, realize.iter_values, strict=True)
        if _uses(value, j)
    ]
    columns = [(iv, v) for iv, v in bound if not _is_static(iv.dom.extent)]
    if len(columns) != 1 or len(bound) > 2:
        return None
    column, column_value = columns[0]
    channels = math.prod(int(iv.dom.extent) for iv, _ in bound if iv is not column)
    # The loop runs over whole rows, the channels innermost: j = column * channels + channel
    # (the three loops below cut it at whole pixels).
    ana = Analyzer()
    if not (
        all(_is_static(iv.dom.min) and int(iv.dom.min) == 0 for iv, _ in bound)
        and ana.can_prove_equal(loop.min, 0)
        and ana.can_prove_equal(loop.extent, column.dom.extent * channels)
        and ana.can_prove_equal(column_value, j // channels if channels > 1 else j)
        and all(ana.can_prove_equal(v, j % channels) for iv, v in bound if iv is not column)
    ):
        return None
    conditions = _border_conditions(store.value, column.var)
    if not conditions:
        return None
    width = column.dom.extent
    dtype = str(loop.loop_var.ty)
    # The narrowest border whose columns decide every condition in the middle.
    border = None
    for margin in range(1, MAX_BORDER + 1):
        m = tvm.tirx.const(margin, dtype)
        decided = [_decided_inside(c, column.var, m, width) for c in conditions]
        if all(d is not None for d in decided):
            inside = tvm.tirx.And(column.var >= m, column.var < width - m)
            with ana.constraint_scope(inside):
                value = ana.simplify(_with_conditions(store.value, conditions, decided))
            border = margin
            break
    if border is None or _border_conditions(value, column.var):
        return None
    edge = tvm.tirx.const(border * channels, dtype)
    zero = tvm.tirx.const(0, dtype)
    extent = loop.extent
    middle_extent = tvm.tirx.max(extent - edge - edge, zero)
    left_extent = tvm.tirx.min(edge, extent)
    right_start = left_extent + middle_extent
    right_extent = tvm.tirx.max(extent - right_start, zero)
    middle_block = _block_with(block, body=tvm.tirx.BufferStore(store.buffer, value, store.indices))
    parts = []
    for start, length, body_block in (
        (zero, left_extent, block),
        (edge, middle_extent, middle_block),
        (right_start, right_extent, block),
    ):
        var = tvm.tirx.Var(f"{j.name}_part", dtype)
        sub = Analyzer()
        sub.bind(j, var)
        values = [sub.simplify(v) for v in realize.iter_values]
        predicate = (
            sub.simplify(realize.predicate)
            if not isinstance(realize.predicate, bool)
            else realize.predicate
        )
        parts.append(
            _with_body(
                loop,
                SBlockRealize(values, predicate, body_block),
                loop_var=var,
                start=start,
                extent=length,
            )
        )
    return tvm.tirx.SeqStmt(parts)
