"""Targets: a name users pass (`target="cpu"`), the backend that serves it, and its cost profile."""

from __future__ import annotations

from dataclasses import dataclass, field

from gdp.errors import TargetError


@dataclass(frozen=True)
class CostProfile:
    """Measured costs of a target that rewrites read to choose what pays there.

    Empty until the substitution and fusion rewrites land: `rewrites` names the profile-chosen
    rewrites (beyond what the backend itself requires), `costs` holds microbenchmark numbers.
    """

    rewrites: tuple[str, ...] = ()
    costs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Target:
    name: str
    backend: str
    profile: CostProfile = field(default_factory=CostProfile)
    doc: str = ""


TARGETS: dict[str, Target] = {
    t.name: t
    for t in [
        Target("cpu", "tvm-llvm", doc="this machine's CPU through TVM Relax (llvm, native mcpu)"),
        Target(
            "reference", "onnxruntime", doc="onnxruntime fp32 on the front end's graph: the oracle"
        ),
    ]
}


def get_target(name: str | Target) -> Target:
    if isinstance(name, Target):
        return name
    try:
        return TARGETS[name]
    except (KeyError, TypeError):
        raise TargetError(f"target: expected one of {sorted(TARGETS)}, got {name!r}") from None
