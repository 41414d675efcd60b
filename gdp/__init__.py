"""gdp: compile image and data preprocessing into fused tensor programs for NPUs, CPUs and GPUs.

model = gdp.compile(tf_function)              # or gdp.compile([a, b], [c]) with Keras inputs
model = gdp.compile(gdp.from_te(mask, [img]))  # a TE neighbour comparison, as a dense graph
handle = gdp.run_async(model, {"a": x}, {"c": z}, profile=True)
gdp.sync()

The public names are imported on first use (PEP 562), so that `import gdp` and `import gdp.cv2`
stay cheap: the API, the model and the front ends pull in ONNX, the rewrites and their
dependencies, which a process needs only once it compiles or runs something.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from gdp.errors import (
    CacheError,
    CompileError,
    DeviceError,
    ExecutionError,
    FrontendError,
    GdpError,
    InputError,
    OutputBufferError,
    QueueFullError,
    TargetError,
    UnsupportedOpError,
    VerificationError,
)
from gdp.startup import quiet_tensorflow as _quiet_tensorflow
from gdp.version import __version__

# TensorFlow, wherever it is first imported after gdp, starts without its notices on stderr.
_quiet_tensorflow()

# public name -> the module that defines it, imported on first access
_LAZY = {
    "compile": "gdp.api",
    "default_target": "gdp.api",
    "load": "gdp.api",
    "pinned_empty": "gdp.api",
    "run_async": "gdp.api",
    "set_target": "gdp.api",
    "sync": "gdp.api",
    "from_te": "gdp.frontend.te",
    "fixed_point": "gdp.iterate",
    "Model": "gdp.model",
}

if TYPE_CHECKING:
    from gdp.api import (
        compile,
        default_target,
        load,
        pinned_empty,
        run_async,
        set_target,
        sync,
    )
    from gdp.frontend.te import from_te
    from gdp.iterate import fixed_point
    from gdp.model import Model


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gdp' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "CacheError",
    "CompileError",
    "DeviceError",
    "ExecutionError",
    "FrontendError",
    "GdpError",
    "InputError",
    "Model",
    "OutputBufferError",
    "QueueFullError",
    "TargetError",
    "UnsupportedOpError",
    "VerificationError",
    "__version__",
    "compile",
    "default_target",
    "fixed_point",
    "from_te",
    "load",
    "pinned_empty",
    "run_async",
    "set_target",
    "sync",
]
