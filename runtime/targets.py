"""Targets: a name users pass (`target="cpu"`), the backend that serves it, and the cost profile
its measured substitutions read."""

from __future__ import annotations

from dataclasses import dataclass

from gdp.errors import TargetError


@dataclass(frozen=True)
class Target:
    name: str
    backend: str
    doc: str = ""
    # The cost profile (gdp.rewrites.profiles) the target's measured substitutions read, and
    # the substitutions it weighs; None and () where the graph must stay as the front end made
    # it (the reference is the oracle).
    profile: str | None = None
    substitutions: tuple[str, ...] = ()


TARGETS: dict[str, Target] = {
    t.name: t
    for t in [
        Target(
            "cpu",
            "tvm-llvm",
            doc="this machine's CPU through TVM Relax (llvm, native mcpu)",
            profile="cpu",
            substitutions=(
                "neighbour_differences",
                "split_reduce",
                "separable_filters",
                "channel_parallel_filters",
            ),
        ),
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
