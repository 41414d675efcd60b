"""What every gdp.cv2 function shares: OpenCV's errors, argument checks, `dst=`, and the
fallthrough to OpenCV itself for what gdp does not accelerate."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from contextvars import ContextVar

import cv2 as _cv2
import numpy as np

from gdp.cv2 import dispatch
from gdp.errors import GdpError

ACCELERATED: dict[str, Callable] = {}


class FallthroughError(GdpError):
    """GDP_CV2_STRICT=1 and a call would have run in OpenCV rather than through gdp."""


def strict() -> bool:
    return os.environ.get("GDP_CV2_STRICT", "") not in ("", "0")


class NotAccelerated(Exception):
    """Raised by an accelerated function for a case gdp does not accelerate (`reason` says
    which). Private to gdp.cv2: the `accelerate` wrapper of the outermost gdp.cv2 call catches
    it and hands that call on to OpenCV as the caller made it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# Whether an accelerated function is running on this thread (or task): a gdp.cv2 function that
# calls another (blur -> boxFilter) lets the inner one's NotAccelerated reach its own wrapper,
# so the caller's call, not gdp's inner one, is what OpenCV runs.
_running: ContextVar[bool] = ContextVar("gdp_cv2_running", default=False)


def accelerate(name: str):
    """Register a gdp.cv2 function under OpenCV's `name` (dotted for submodules: dnn.blob...).

    The function raises NotAccelerated(reason) for what it does not accelerate; the wrapper
    then calls OpenCV's own `name` with the caller's arguments exactly as given (the same
    objects, positional and keyword as they came), or under GDP_CV2_STRICT=1 raises
    FallthroughError. No function lists OpenCV's arguments a second time for this."""

    def register(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def accelerated(*args, **kwargs):
            if _running.get():  # inside another gdp.cv2 call: that call falls through
                return fn(*args, **kwargs)
            if dispatch.runs_opencv(name, args, kwargs):  # calibrated: OpenCV is faster here
                return _opencv_function(name)(*args, **kwargs)
            token = _running.set(True)
            try:
                return fn(*args, **kwargs)
            except NotAccelerated as signal:
                reason = signal.reason
            finally:
                _running.reset(token)
            return _opencv(name, reason, args, kwargs)

        accelerated.__name__ = name.rsplit(".", 1)[-1]
        accelerated.__qualname__ = name
        ACCELERATED[name] = accelerated
        return accelerated

    return register


def _opencv(name: str, reason: str, args: tuple, kwargs: dict):
    """Run OpenCV's own `name` on a call as it was made, for a case gdp does not accelerate
    (`reason` says which); under GDP_CV2_STRICT=1, raise instead."""
    if strict():
        raise FallthroughError(
            f"cv2.{name}: {reason}, so it would run in OpenCV; GDP_CV2_STRICT=1 forbids that"
        )
    return _opencv_function(name)(*args, **kwargs)


def _opencv_function(name: str):
    fn = _cv2
    for part in name.split("."):
        fn = getattr(fn, part)
    return fn


def error(func: str, message: str) -> _cv2.error:
    """An exception `except cv2.error` catches, with OpenCV's function name and meaning."""
    return _cv2.error(f"OpenCV(gdp) error: (-215:Assertion failed) {message} in function '{func}'")


def image(func: str, src, name: str = "src") -> np.ndarray:
    """`src` as OpenCV takes an image: a non-empty 2-D or 3-D (HWC, 1..4 channels) array. A TF
    tensor (graph mode) passes as it is, checked on its static shape."""
    if not isinstance(src, np.ndarray) and is_tensor(src):
        shape = src.shape
        if shape.rank not in (2, 3) or (shape.rank == 3 and shape[2] not in (1, 2, 3, 4)):
            raise error(func, f"{name} must be HxW or HxWxC with 1 to 4 channels, got {shape}")
        return src
    if not isinstance(src, np.ndarray):
        raise _cv2.error(
            f"OpenCV(gdp) error: (-5:Bad argument) in function '{func}'\n> Overload resolution"
            f" failed:\n>  - {name} is not a numpy array, neither a scalar (got"
            f" {type(src).__name__})"
        )
    if src.size == 0:
        raise error(func, f"!_{name}.empty()")
    if src.ndim not in (2, 3) or (src.ndim == 3 and not 1 <= src.shape[2] <= 4):
        raise error(func, f"{name} must be HxW or HxWxC with 1 to 4 channels, got {src.shape}")
    return np.ascontiguousarray(src)


def dtype_of(src) -> np.dtype:
    """The NumPy dtype of an array or a TF tensor."""
    dtype = src.dtype
    return np.dtype(getattr(dtype, "as_numpy_dtype", dtype))


@functools.cache
def dtype_name(dtype) -> str:
    """dtype.name, cached: NumPy builds the string on every access (microseconds a call)."""
    return dtype.name


def channels(src) -> int:
    """The channel count of an HW or HWC array or TF tensor."""
    return 1 if len(src.shape) == 2 else int(src.shape[2])


def finish(result: np.ndarray, dst) -> np.ndarray:
    """OpenCV's `dst=`: write into the caller's array when it fits, as OpenCV reuses it, else
    return the new array (OpenCV reallocates a dst of the wrong size or type)."""
    if isinstance(dst, np.ndarray) and dst.shape == result.shape and dst.dtype == result.dtype:
        np.copyto(dst, result)
        return dst
    return result


def is_tensor(value) -> bool:
    """Whether `value` is a TF tensor, without importing TensorFlow on an eager call's path (a
    TF tensor exists only once TF is loaded)."""
    if isinstance(value, np.ndarray | np.generic | int | float | tuple | list):
        return False  # tf.is_tensor's protocol check costs tens of microseconds a call
    import sys

    tf = sys.modules.get("tensorflow")
    return tf is not None and tf.is_tensor(value)


class LazyModule:
    """A module imported on first attribute access: gdp.ops's modules import TensorFlow, which
    `import gdp.cv2` and a call on a program already compiled (in this process or the disk
    cache) never need; only tracing a new program touches them."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module = None

    def __getattr__(self, attr: str):
        if self._module is None:
            import importlib

            self._module = importlib.import_module(self._name)
        return getattr(self._module, attr)
