"""The one registry of backends. Modules are imported on first use, so running on onnxruntime never
loads TVM and running a cached TVM model never loads a front end."""

from __future__ import annotations

import importlib

from gdp.errors import TargetError
from gdp.runtime.backends.base import Backend, CostProfile, Executable

__all__ = ["BACKENDS", "Backend", "CostProfile", "Executable", "get_backend"]

# backend name -> "module:class"
BACKENDS: dict[str, str] = {
    "tvm-llvm": "gdp.runtime.backends.tvm.llvm:TvmLlvmBackend",
    "tvm-cuda": "gdp.runtime.backends.tvm.cuda:TvmCudaBackend",
    "onnxruntime": "gdp.runtime.backends.onnxruntime:OnnxRuntimeBackend",
    "ascend": "gdp.runtime.backends.ascend.backend:AscendBackend",
    "npu-emulate": "gdp.runtime.backends.ascend.npu_emulate:NpuEmulateBackend",
}
_instances: dict[str, Backend] = {}


def get_backend(name: str) -> Backend:
    if name not in _instances:
        if name not in BACKENDS:
            raise TargetError(f"backend: expected one of {sorted(BACKENDS)}, got {name!r}")
        module, cls = BACKENDS[name].split(":")
        _instances[name] = getattr(importlib.import_module(module), cls)()
    return _instances[name]
