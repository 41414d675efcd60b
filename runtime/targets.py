"""Targets: a name users pass (`target="cpu"`), the backend that serves it, and the cost profile
its measured substitutions read."""

from __future__ import annotations

from dataclasses import dataclass

from gdp.rewrites import rules

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


# The measured substitutions every compiling target weighs against its own profile: every
# measured rule of gdp.rewrites.rules, in the order they run.
SUBSTITUTIONS = rules.SUBSTITUTIONS

TARGETS: dict[str, Target] = {
    t.name: t
    for t in [
        Target(
            "cpu",
            "tvm-llvm",
            doc="this machine's CPU through TVM Relax (llvm, native mcpu)",
            profile="cpu",
            substitutions=SUBSTITUTIONS,
        ),
        Target(
            "npu",
            "ascend",
            doc="a Huawei Ascend NPU: ONNX -> ATC -> .om, run through pyACL (docs/ascend.md)",
            profile="npu",
            substitutions=SUBSTITUTIONS,
        ),
        Target(
            "npu-emulate",
            "npu-emulate",
            doc="the npu's exact graph (fp16, opset-limited) run on this CPU by TVM",
            profile="npu",
            substitutions=SUBSTITUTIONS,
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
