"""Graph passes on ONNX, and the one registry of them.

A rewrite is a pure function ONNX -> ONNX. A canonical rewrite (what an importer needs) says how
many places it changed; a measured substitution reads a cost profile and logs every place it
weighed, applied or not, with the costs that decided. Each is a rule in its own file of
rewrites/rules/ (the interface and its one driver: gdp.rewrites.rule); the registry is
those files. Which rewrites run for a target comes from the backend and from the target's
profile; nothing here asks which target it is.
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx

from gdp.rewrites.canonicalize import canonical_names
from gdp.rewrites.profiles import CostProfile, load_profile
from gdp.rewrites.rule import Rewrite
from gdp.rewrites.rules import RULES, SUBSTITUTIONS
from gdp.rewrites.specialize import specialize_shapes

__all__ = [
    "REWRITES",
    "SUBSTITUTIONS",
    "CostProfile",
    "Rewrite",
    "apply_rewrites",
    "canonical_names",
    "load_profile",
    "specialize_shapes",
]

# name -> rule: canonical rules fn(model) -> (model, places changed); measured ones
# fn(model, profile, force=False) -> (model, log).
REWRITES: dict[str, Rewrite] = RULES


def apply_rewrites(
    model: onnx.ModelProto, names: Iterable[str], profile: CostProfile | None = None
) -> tuple[onnx.ModelProto, list[dict]]:
    """Run the named rewrites in order. The log has one entry per canonical rewrite that changed
    something ({"rule", "applied": True, "count"}) and one per place a measured substitution
    weighed ({"rule", "applied", "where", "costs", ...})."""
    log: list[dict] = []
    for name in names:
        rewrite = REWRITES[name]
        if rewrite.measured:
            model, entries = rewrite(model, profile)
            log += entries
            continue
        model, count = rewrite(model)
        if count:
            log.append({"rule": name, "applied": True, "count": count})
    return model, log
