"""The compile stages from the front end's graph to the graph a backend compiles, in order:

1. specialize_shapes: free dimensions fixed to the input shapes of this call (for backends that
   compile per shape, and for fp16, whose range analysis needs every shape);
2. the backend's required rewrites (what its importer needs), then, for a target that weighs
   them, every measured substitution (gdp.rewrites.SUBSTITUTIONS, in order), each weighed
   against the target's cost profile (apply_rewrites);
3. to_fp16: fp16 with power-of-two scales from range analysis (precision "fp16" only);
4. the IR version capped at what the runtimes read.

gdp.Model calls `prepare` once per specialisation; the backend's compile follows it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import onnx

from gdp.errors import InputError
from gdp.rewrites import SUBSTITUTIONS, apply_rewrites
from gdp.rewrites.fp16 import to_fp16
from gdp.rewrites.profiles import CostProfile
from gdp.rewrites.specialize import specialize_shapes


@dataclass(frozen=True)
class Fp16:
    """How stage 3 runs: the input ranges the scales are chosen for, whether to scale at all
    (False is naive fp16, for showing what the scaling buys), and how fp16 values are computed
    on ("fp16" rounds every op, "fp32" stores fp16 and computes in fp32)."""

    ranges: Mapping[str, tuple[float, float]]
    scaling: bool
    arithmetic: str


@dataclass(frozen=True)
class Prepared:
    graph: onnx.ModelProto
    rewrites: list[dict]  # apply_rewrites' log: every place a rewrite changed or weighed
    fp16: dict | None  # to_fp16's report, where the graph runs in fp16


def prepare(
    graph: onnx.ModelProto,
    shapes: Mapping[str, tuple] | None,
    required: Sequence[str],
    substitute: bool,
    profile: CostProfile | None,
    fp16: Fp16 | None,
    max_ir_version: int,
) -> Prepared:
    """Run the stages on `graph`: shapes fixed to `shapes` (None: left free), the `required`
    rewrites, the measured substitutions against `profile` where `substitute`, fp16 where
    `fp16` is given."""
    if shapes is not None:
        try:
            graph = specialize_shapes(graph, dict(shapes))
        except Exception as err:
            raise InputError(f"the graph does not accept input shapes {shapes}: {err}") from err
    names = (*required, *(SUBSTITUTIONS if substitute else ()))
    graph, log = apply_rewrites(graph, names, profile)
    report = None
    if fp16 is not None:
        graph, report = to_fp16(
            graph, fp16.ranges, scaling=fp16.scaling, arithmetic=fp16.arithmetic
        )
    graph.ir_version = min(graph.ir_version, max_ir_version)
    return Prepared(graph, log, report)
