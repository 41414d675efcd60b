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
) -> tuple[tvm.IRModule, dict]:
    """`mod` lowered for `target` and scheduled by `schedules`, ready for tvm.compile with no
    Relax pipeline of its own, and the fusion report. `finish` runs last on the scheduled module
    (the cpu relaxes its kernels' parameter alignment there)."""
    with target:
        legalize = [
            p for p in pipeline.legalize_passes(target) if p.info.name not in _FUSION_PASSES
        ]
        mod = tvm.transform.Sequential(pipeline.library_dispatch_passes(target) + legalize)(mod)
        mod, report = fuse(mod, fusion, cost, schedules)
        mod = relax.transform.FuseTIR()(mod)
        rest = pipeline.dataflow_lower_passes(target) + pipeline.finalize_passes(target)
        mod = tvm.transform.Sequential(rest)(mod)
    mod = schedules.schedule(mod, target)
    return finish(mod), report
