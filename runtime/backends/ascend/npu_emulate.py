"""Target npu-emulate: the npu's exact graph on this CPU, so the numerics of the npu path are
tested on every CI run without an Ascend card."""

from __future__ import annotations

from pathlib import Path

import onnx

from gdp.runtime.backends.ascend.backend import AscendBackend, export_code_hash
from gdp.runtime.backends.ascend.export import DEFAULT_OPSET, export
from gdp.runtime.backends.base import CostProfile
from gdp.runtime.backends.tvm.llvm import TvmLlvmBackend


class NpuEmulateBackend(TvmLlvmBackend):
    """Target npu-emulate: the exact graph the npu receives (the same rewrites, fp16 pass with the
    npu profile's fp16 arithmetic, and ascend_export), run on this CPU by TVM, which rounds every
    fp16 op's result as the graph says. (onnxruntime's CPU provider would not: it computes most
    fp16 ops in fp32 and drops fp32->fp16->fp32 cast pairs, so its results would hide the
    rounding the npu does.) The exported graph is kept beside the library as npu.onnx."""

    name = "npu-emulate"
    required_rewrites = AscendBackend.required_rewrites
    options = frozenset({"opset"})

    def fingerprint(self) -> str:
        return f"{super().fingerprint()}-npu-export-{export_code_hash()}"

    def compile(
        self, model: onnx.ModelProto, outdir: Path, options: dict, profile: CostProfile | None
    ) -> dict:
        exported = export(model, options.get("opset", DEFAULT_OPSET))
        onnx.save(exported, outdir / "npu.onnx")
        meta = super().compile(exported, outdir, {}, profile)
        return {**meta, "files": [*meta["files"], "npu.onnx"]}
