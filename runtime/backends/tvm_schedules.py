"""gdp's CPU schedules for the TIR kernels TVM's default pipeline leaves unscheduled.

TVM's llvm pipeline fuses operators (FuseOps, FuseTIR) but schedules nothing: every intermediate
inside a fused kernel is materialised in full (a cast and transpose of a whole 1080p image before
a resize that reads 1/40 of it) and every loop runs serially. This pass, per kernel:
1. inlines each producer block into its consumers where TIR allows it (injective producers),
   so only what the outputs need is computed;
2. parallelises the outer spatial loops and vectorises the inner one, through the annotations of
   meta-schedule's ParallelizeVectorizeUnroll rule and its postprocessor, once, without tuning.
Numerics are unchanged (the same expressions, evaluated in the same order per element).
"""

from __future__ import annotations

import contextlib
import os

import tvm
from tvm.s_tir import meta_schedule as ms

# Jobs per core for the parallel loop; vector extent in elements; explicit unroll steps.
MAX_JOBS_PER_CORE = 16
MAX_VECTORIZE_EXTENT = 64
UNROLL_EXPLICIT = 16


def schedule_cpu(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
    cores = int(target.attrs.get("num-cores", os.cpu_count() or 1))
    # The annotations meta-schedule's ParallelizeVectorizeUnroll rule puts on a root block, set
    # directly: building a TuneContext to run the rule imports every tensor intrinsic (~20 s).
    annotations = {
        "meta_schedule.parallel": MAX_JOBS_PER_CORE * cores,
        "meta_schedule.vectorize": MAX_VECTORIZE_EXTENT,
        "meta_schedule.unroll_explicit": UNROLL_EXPLICIT,
    }
    postproc = ms.postproc.RewriteParallelVectorizeUnroll()
    scheduled = {}
    for gvar, func in mod.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        sch = tvm.s_tir.Schedule(func)
        root = sch.get_sblock("root")
        for block in list(sch.get_child_blocks(root))[:-1]:  # the last one writes an output
            # A reduction, or a producer TIR cannot inline, stays materialised.
            with contextlib.suppress(tvm.s_tir.ScheduleError):
                sch.compute_inline(block)
        for key, value in annotations.items():
            sch.annotate(root, key, value)
        if postproc.apply(sch):
            scheduled[gvar] = sch.mod["main"]
    for gvar, func in scheduled.items():
        mod[gvar] = func
    return mod
