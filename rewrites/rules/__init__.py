"""The rewrite rules, one a file: each module here (but those starting with "_", which hold what
rules share) sets RULE to a gdp.rewrites.rule.Rewrite whose name is the module's. Adding a file
adds the rule to the registry, and a measured one to every compiling target, to the profile's
ops and to `gdp calibrate`'s microbenchmarks: nothing else lists rules."""

from __future__ import annotations

import importlib
import pkgutil

from gdp.rewrites.rule import Rewrite


def _discover() -> dict[str, Rewrite]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        rule = importlib.import_module(f"{__name__}.{info.name}").RULE
        if not isinstance(rule, Rewrite) or rule.name != info.name:
            raise TypeError(f"{__name__}.{info.name}: RULE must be a Rewrite named {info.name!r}")
        found.append(rule)
    return {r.name: r for r in sorted(found, key=lambda r: (r.measured, r.order, r.name))}


# Canonical rules first, then the measured ones in the order they run.
RULES: dict[str, Rewrite] = _discover()
# The measured substitutions, in order: what every compiling target weighs.
SUBSTITUTIONS: tuple[str, ...] = tuple(name for name, r in RULES.items() if r.measured)
