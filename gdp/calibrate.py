"""`gdp calibrate --target T`: measure a target's cost profile (gdp.rewrites.profiles.OPS)
with microbenchmarks compiled for it, and store it in the cache, where the profile-driven
rewrites find it. Each op is a small ONNX graph on float32 data: table 5-1's basic ops
(gdp.rewrites.microbenchmarks) and the forms each measured rule's costs read (its `timed`):
a direct form's graph as the rule builds it, a rewritten form as the rule's own rewrite of the
direct form's graph. Each is timed as the median of its execute phase over many runs, data
already staged."""

from __future__ import annotations

import dataclasses
import statistics
from datetime import date

import onnx
from onnx import helper

import gdp
from gdp.frontend.common import IR_VERSION, OPSET
from gdp.progress import progress
from gdp.rewrites import profiles, rules
from gdp.rewrites.microbenchmarks import BASIC
from gdp.rewrites.profiles import CostProfile, OpCost, store_profile
from gdp.rewrites.rule import Graph
from gdp.runtime.cache import default_cache_dir
from gdp.runtime.targets import get_target


def model_of(graph: Graph) -> onnx.ModelProto:
    """The graph as a model at the opset gdp's front ends write."""
    model = helper.make_model(graph.graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model


def microbenchmarks() -> dict[str, tuple[onnx.ModelProto, dict, int]]:
    """op -> (model, its inputs, input elements counted by the profile), for every op of OPS."""
    # op -> a Builder of its graph, or (the rule, the op whose graph the rule rewrites)
    timed: dict = dict(BASIC)
    for rule in rules.RULES.values():
        for op, how in rule.timed.items():
            how = (rule, how) if isinstance(how, str) else how
            if timed.setdefault(op, how) != how:
                raise ValueError(f"{op} is timed two ways ({rule.name}'s and another's)")
    out = {}
    for op, build in timed.items():
        if not isinstance(build, tuple):
            graph = build()
            out[op] = (model_of(graph), graph.feeds, graph.elements)
    for op, how in timed.items():
        if isinstance(how, tuple):
            rule, direct = how
            model, inputs, elements = out[direct]
            form, log = rule(model, None, force=True)
            assert log and log[0]["applied"], (op, log)
            out[op] = (form, inputs, elements)
    assert set(out) == set(profiles.OPS), set(profiles.OPS) ^ set(out)
    return out


def calibrate(target: str = "cpu", runs: int = 30, store: bool = True) -> CostProfile:
    """Measure every op of the profile on `target`; store the profile in the cache."""
    # Each form exactly as given: the target's own substitutions would turn the direct form
    # into the one the current profile favours, and the two would measure the same.
    as_given = dataclasses.replace(get_target(target), substitutes=False)
    ops = {}
    timed = microbenchmarks()
    for name, (model, inputs, elements) in progress(
        timed.items(), desc=f"gdp calibrate {target}", total=len(timed), unit="op"
    ):
        compiled = gdp.compile(model, target=as_given)
        for _ in range(3):
            compiled.submit(inputs, wait=True).result()
        times = []
        for _ in range(runs):
            task = compiled.submit(inputs, profile=True, wait=True)
            task.result()
            times.append(task.profile.execute_s)
        ops[name] = OpCost(round(statistics.median(times) * 1e3, 4), elements)
    profile = CostProfile(
        target=target,
        source=f"gdp calibrate on this machine, {date.today().isoformat()}",
        dtype="float32",
        ops=ops,
        fp16_arithmetic="fp32",  # the cpu and gpu convert fp16 to fp32 to compute
    )
    if store:
        store_profile(profile, default_cache_dir())
    return profile
