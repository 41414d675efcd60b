"""The one shape of a rewrite: a rule says which nodes it looks at, whether it can apply at one
(`match`), what the target's profile says each form would cost there (`costs`, measured rules
only) and how to rewrite it (`replace`); `Rewrite.__call__`, the one driver, does the rest for
every rule: deserialize with onnx_ir, visit the nodes, weigh each place against the profile,
log it, replace, drop what became unused, serialize. A rule is one file in rewrites/rules/; the
registry, the targets' substitutions, the profile's ops and `gdp calibrate`'s microbenchmarks
are all derived from those files.

A canonical rule (no `forms`) applies wherever it matches and the driver counts the places. A
measured rule names the two keys of its costs it compares, `forms = (rewritten, original)`, and
the profile ops its costs read with how calibration times each (`timed`): applied where the
rewritten form costs less, never where the profile lacks a form ("why" says so), everywhere
with `force=True` (calibration measures the rewritten form that way). Every place a measured
rule weighs gets one log entry, applied or not:
{"rule", "where": the node's name, <the rule's facts>, "applied", "why" | "costs"}.

Why not the onnxscript rewriter (onnxscript.rewriter.pattern, which the house rules prefer): its
rule is a target pattern, a yes/no condition and a replacement, and a rule set reports how many
places it rewrote. A measured rule needs more than that and uses little of the rest:
- the log: every place weighed, applied or not, with the costs and why. The rewriter gives a
  failed condition's reason only to a MatchingTracer, and with a tracer it rewrites nothing, so
  the log would be a side effect hidden in the condition function;
- the match: three of the four measured rules anchor on one node (a Conv, a Reduce*) and what
  decides is numeric (an SVD rank, the rows dividing into strips, constant axes), so the
  pattern would be `op.Conv(x, w)` with the whole rule in the condition. neighbour_differences'
  operands are each an optional Mul by a constant (on either side) of the image, a Slice of it
  or a Slice of it zero-padded: nested OrValues, and the windows still computed in Python;
- the replacement: `remove_nodes=True` refuses a place whose matched Slices also feed other
  nodes (x[1:] used twice is common), and the rule set stamps its metadata on every new node.
So the interface is gdp's own and thin: matching is plain onnx_ir, as it was.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType, SimpleNamespace
from typing import TYPE_CHECKING

import numpy as np
import onnx
import onnx_ir as ir
import onnx_ir.passes.common

if TYPE_CHECKING:
    from gdp.rewrites.profiles import CostProfile

DEFAULT_DOMAINS = ("", "ai.onnx")


class Place(SimpleNamespace):
    """A place a rule weighs: `node` (what it replaces; its name is the log's "where"), `log`
    (the facts its log entry names, e.g. {"op": "ReduceMax"}), `why` (set: the rule cannot apply
    here, and the log says why) and whatever else the rule's costs and replace need, by name."""

    def __init__(self, node: ir.Node, log: Mapping | None = None, why: str = "", **data) -> None:
        super().__init__(node=node, log=dict(log or {}), why=why, **data)


@dataclass(frozen=True)
class Graph:
    """A graph to time (`gdp calibrate`) or to compare before and after (benchmarks/rewrites.py):
    the ONNX graph (the caller makes it a model at its opset), its inputs, and the input
    elements the profile counts."""

    graph: onnx.GraphProto
    feeds: dict[str, np.ndarray]
    elements: int


# A function building a Graph; called only when it is timed (the inputs are large).
Builder = Callable[[], Graph]


def decide(
    entry: dict, costs: dict | None, profile: CostProfile | None, force: bool, new: str, old: str
) -> bool:
    """Whether a measured substitution applies: always when forced (calibration), never where
    the profile lacks a form (entry says why: gdp does not guess), else where the rewritten
    form's cost `costs[new]` is below the original's `costs[old]`."""
    if force:
        return True
    if costs is None:
        entry["why"] = f"the {profile.target} profile does not time both forms"
        return False
    return costs[new] < costs[old]


def initializer(node: ir.Node, what: str, array: np.ndarray) -> ir.Value:
    """A constant for a node's replacement, named after the node, registered in its graph."""
    value = ir.Value(name=f"{node.name}_{what}", const_value=ir.tensor(array))
    node.graph.register_initializer(value)
    return value


def constant(value: ir.Value | None) -> np.ndarray | None:
    """The value's contents where it is a constant (an initializer or a Constant's output)."""
    if value is None:
        return None
    tensor = ir.convenience.get_const_tensor(value)
    return None if tensor is None else tensor.numpy()


class Rewrite(ABC):
    """One rewrite rule: subclass it in a file of rewrites/rules/ named like the rule, and set
    that module's RULE to an instance. Stateless: a rule keeps what it learns about one graph on
    that graph (onnx_ir's `meta`), so one instance serves every call."""

    name: str  # the registry's key and the log's "rule"
    doc: str  # one line: the form it finds -> the form it writes
    op_types: frozenset[str]  # the node types (default domain) that match() is asked about
    # Where it runs among the rules of its kind, lower first (a rule that writes nodes another
    # weighs runs before it); ties by name.
    order: int = 0
    # Measured rules: the keys of costs() the decision compares, (rewritten, original); the
    # profile ops costs() reads, each with how `gdp calibrate` times it: a Builder of the direct
    # form's graph, or the name of the op whose graph this rule rewrites (forced) into this
    # form; and cases for benchmarks/rewrites.py: name -> a Builder of a 1080p graph to time
    # before and after.
    forms: tuple[str, str] | None = None
    timed: Mapping[str, Builder | str] = MappingProxyType({})
    cases: Mapping[str, Builder] = MappingProxyType({})

    @property
    def measured(self) -> bool:
        return self.forms is not None

    @property
    def fn(self) -> Rewrite:
        """The rewrite as a function (the registry's entries have always had one)."""
        return self

    def prepare(self, model: onnx.ModelProto) -> onnx.ModelProto:
        """The model as match() needs it (e.g. shapes inferred); returned when nothing applies."""
        return model

    @abstractmethod
    def match(self, node: ir.Node) -> Place | None:
        """The place at `node` (with `why` set where the rule cannot apply there but the log
        should say so), or None where the node is not one the rule weighs."""

    def costs(self, place: Place, profile: CostProfile) -> dict | None:
        """Measured rules: the profile's cost of each form here (the keys of `forms` and any
        detail worth logging), or None where the profile lacks a form."""
        raise NotImplementedError(f"{self.name}: a measured rule (forms set) defines costs()")

    @abstractmethod
    def replace(self, place: Place) -> int | None:
        """Rewrite the place in its graph (what becomes unused is dropped afterwards). A
        canonical rule that changes several things at one node says how many (None: one)."""

    def __call__(
        self, model: onnx.ModelProto, profile: CostProfile | None = None, force: bool = False
    ) -> tuple[onnx.ModelProto, list[dict] | int]:
        """The rewritten model (the given one where nothing changed) and, for a measured rule,
        one log entry per place weighed, for a canonical one the number of places changed. A
        measured rule without a profile, unforced, leaves the model alone and logs nothing."""
        if self.measured and profile is None and not force:
            return model, []
        model = self.prepare(model)
        graph = ir.serde.deserialize_model(model)
        log: list[dict] = []
        changed = 0
        for node in list(ir.traversal.RecursiveGraphIterator(graph.graph)):
            if node.op_type not in self.op_types or node.domain not in DEFAULT_DOMAINS:
                continue
            place = self.match(node)
            if place is None or (self.measured and not self._weigh(place, profile, force, log)):
                continue
            count = self.replace(place)
            changed += 1 if count is None else count
        if changed:
            ir.passes.common.RemoveUnusedNodesPass()(graph)  # the replaced nodes' taps
            model = ir.serde.serialize_model(graph)
        return model, (log if self.measured else changed)

    def _weigh(self, place: Place, profile: CostProfile | None, force: bool, log: list) -> bool:
        entry = {"rule": self.name, "where": place.node.name, **place.log}
        if place.why:
            log.append({**entry, "applied": False, "why": place.why})
            return False
        costs = self.costs(place, profile) if profile is not None else None
        applied = decide(entry, costs, profile, force, *self.forms)
        log.append({**entry, "applied": applied, "costs": costs})
        return applied
