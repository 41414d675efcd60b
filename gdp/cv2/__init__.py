"""gdp.cv2: OpenCV's Python API, run through gdp. `import gdp.cv2 as cv2` and keep the program.

Accelerated functions (`accelerated()` lists them) compile once per function, shapes, dtypes,
parameters and target (`gdp.set_target()` or GDP_TARGET; default cpu), then run from the
cache. Called on TF tensors inside a tf.function, they build the graph instead, so a chain of
calls compiles into one program. Everything else is OpenCV's own (imread, drawing, constants);
GDP_CV2_STRICT=1 turns any call into OpenCV itself into a FallthroughError.
"""

from __future__ import annotations

import cv2 as _cv2

from gdp.api import default_target, set_target
from gdp.cv2 import color, dnn, filters, geometry, pointwise  # noqa: F401 - they register
from gdp.cv2.common import ACCELERATED, FallthroughError, strict
from gdp.cv2.engine import cache_info, clear_cache

error = _cv2.error


def accelerated() -> list[str]:
    """The names that run through gdp (dotted for submodules: dnn.blobFromImage)."""
    return sorted(ACCELERATED)


class _Submodule:
    """cv2.dnn and friends: gdp's functions where it has them, OpenCV's for the rest."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str):
        own = ACCELERATED.get(f"{self._name}.{attr}")
        if own is not None:
            return own
        return _fallthrough(getattr(getattr(_cv2, self._name), attr), f"{self._name}.{attr}")


def _fallthrough(value, name: str):
    if strict() and callable(value) and not isinstance(value, type):
        raise FallthroughError(
            f"cv2.{name} is not accelerated by gdp (see gdp.cv2.accelerated()); GDP_CV2_STRICT=1"
            " forbids falling through to OpenCV"
        )
    return value


def __getattr__(name: str):
    own = ACCELERATED.get(name)
    if own is not None:
        return own
    if any(key.startswith(f"{name}.") for key in ACCELERATED):
        return _Submodule(name)
    return _fallthrough(getattr(_cv2, name), name)


def __dir__() -> list[str]:
    return sorted(set(dir(_cv2)) | {n.split(".")[0] for n in ACCELERATED} | set(globals()))


__all__ = [
    "FallthroughError",
    "accelerated",
    "cache_info",
    "clear_cache",
    "default_target",
    "error",
    "set_target",
]
