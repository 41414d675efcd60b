"""gdp as the preprocessing stage of an inference server, on Ray Serve (`pip install gdp[serve]`).

    gdp serve model.onnx --port 8000 --replicas 2       # HTTP: POST / an image -> .npy / JSON

    from gdp.serving import Preprocess                   # composition: another deployment calls
    pre = Preprocess.bind("model.onnx")                  # `await pre.preprocess.remote(image)`

`gdp.serving.codec` (request bodies and responses) and `gdp.serving.stage` (the model and its
batches) need no Ray; `Preprocess` and `app` (gdp.serving.deployment) do, and are imported on
first use. docs/serving.md has the rest."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_LAZY = {
    "Preprocess": "gdp.serving.deployment",
    "app": "gdp.serving.deployment",
    "run": "gdp.serving.server",
    "Stage": "gdp.serving.stage",
    "ModelSource": "gdp.serving.stage",
    "RequestError": "gdp.serving.codec",
}

if TYPE_CHECKING:
    from gdp.serving.codec import RequestError
    from gdp.serving.deployment import Preprocess, app
    from gdp.serving.server import run
    from gdp.serving.stage import ModelSource, Stage


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gdp.serving' has no attribute {name!r}")
    try:
        value = getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as err:
        if err.name and err.name.split(".")[0] in ("ray", "starlette"):
            raise ModuleNotFoundError(
                f"gdp.serving.{name} needs Ray Serve: pip install 'gdp[serve]' ({err})",
                name=err.name,
            ) from err
        raise
    globals()[name] = value
    return value


__all__ = ["ModelSource", "Preprocess", "RequestError", "Stage", "app", "run"]
