"""The reference backend: onnxruntime in fp32 on the graph exactly as the front end produced it."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from gdp.errors import CompileError
from gdp.runtime.backends.base import Backend, CostProfile, Executable
from gdp.runtime.profiling import Profile


class OnnxRuntimeExecutable(Executable):
    def __init__(self, path: Path) -> None:
        opts = ort.SessionOptions()
        # The oracle: no graph rewrites of onnxruntime's own beyond the basic, exact ones.
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        self.session = ort.InferenceSession(
            str(path), sess_options=opts, providers=["CPUExecutionProvider"]
        )
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    def run(self, inputs: list[np.ndarray], profile: Profile | None = None) -> list[np.ndarray]:
        t0 = time.perf_counter()
        feeds = dict(zip(self.input_names, inputs, strict=True))
        t1 = time.perf_counter()
        outputs = self.session.run(self.output_names, feeds)
        t2 = time.perf_counter()
        if profile is not None:
            profile.copy_in_s += t1 - t0
            profile.execute_s += t2 - t1
        return outputs


class OnnxRuntimeBackend(Backend):
    name = "onnxruntime"
    static_shapes = False

    def fingerprint(self) -> str:
        return f"onnxruntime-{ort.__version__}-cpu"

    def compile(
        self, model: onnx.ModelProto, outdir: Path, options: dict, profile: CostProfile | None
    ) -> dict:
        path = outdir / "model.onnx"
        onnx.save(model, path)
        try:  # build a session once now so a graph onnxruntime rejects fails at compile time
            OnnxRuntimeExecutable(path)
        except Exception as err:
            raise CompileError(f"onnxruntime rejected the graph: {err}") from err
        return {"files": ["model.onnx"], "kernels": len(model.graph.node)}

    def load(self, artifact_dir: Path, meta: dict) -> Executable:
        return OnnxRuntimeExecutable(artifact_dir / "model.onnx")
