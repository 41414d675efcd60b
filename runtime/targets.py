"""Targets: a name users pass (`target="cpu"`), the backend that serves it, and the cost profile
its measured substitutions read (gdp.rewrites weighs them: the runtime names the profile, it
imports nothing of the rewrites)."""

from __future__ import annotations

from dataclasses import dataclass

from gdp.errors import TargetError


@dataclass(frozen=True)
class Target:
    name: str
    backend: str
    doc: str = ""
    # The cost profile (gdp.rewrites.profiles) the target's measured substitutions read, and
    # whether it weighs them (every measured rule of gdp.rewrites.rules, in their order); None
    # and False where the graph must stay as the front end made it (the reference is the
    # oracle).
    profile: str | None = None
    substitutes: bool = False


TARGETS: dict[str, Target] = {
    t.name: t
    for t in [
        Target(
            "cpu",
            "tvm-llvm",
            doc="this machine's CPU through TVM Relax (llvm, native mcpu)",
            profile="cpu",
            substitutes=True,
        ),
        Target(
            "gpu",
            "tvm-cuda",
            doc=(
                "an NVIDIA GPU through TVM Relax and LLVM's NVPTX back end (PTX for"
                " $GDP_GPU_ARCH, else this machine's GPU, else sm_90; docs/gpu.md)"
            ),
            # No shipped profile: measured substitutions weigh only once `gdp calibrate
            # --target gpu` has stored one; until then the graph keeps the front end's form.
            profile="gpu",
            substitutes=True,
        ),
        Target(
            "npu",
            "ascend",
            doc="a Huawei Ascend NPU: ONNX -> ATC -> .om, run through pyACL (docs/ascend.md)",
            profile="npu",
            substitutes=True,
        ),
        Target(
            "npu-emulate",
            "npu-emulate",
            doc="the npu's exact graph (fp16, opset-limited) run on this CPU by TVM",
            profile="npu",
            substitutes=True,
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
