"""What every gdp.cv2 function shares: OpenCV's errors, argument checks, `dst=`, and the
fallthrough to OpenCV itself for what gdp does not accelerate."""

from __future__ import annotations

import functools
import sys
from collections import Counter
from collections.abc import Callable
from contextvars import ContextVar

import cv2 as _cv2
import numpy as np

from gdp import environ
from gdp.cv2 import dispatch
from gdp.errors import GdpError

ACCELERATED: dict[str, Callable] = {}


class FallthroughError(GdpError):
    """GDP_CV2_STRICT=1 and a call would have run in OpenCV rather than through gdp."""


def strict() -> bool:
    return environ.flag("GDP_CV2_STRICT")


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
    FallthroughError. No function lists OpenCV's arguments a second time for this.

    An eager call that gdp's function refuses with an error (cv2.error for a bad argument, or
    a TypeError/ValueError of its argument handling: an overload gdp's signature does not take)
    is handed to OpenCV too, which decides: where OpenCV raises as well, gdp's error is raised
    (OpenCV's where gdp's is not a cv2.error); where OpenCV accepts the call, its result is
    returned (under GDP_CV2_STRICT=1, a FallthroughError) and the call is counted in
    `RESCUED`: gdp must never refuse a call OpenCV accepts (tests/gdp/cv2/test_cv2_fuzz.py
    holds that count at zero). gdp's own failures (GdpError: a compile or run that failed)
    and FinalError (a call OpenCV would crash on) are raised as they are.

    The function registered is a Dispatcher: on the cpu target, a call the dispatch table
    (gdp.cv2.dispatch) gives to OpenCV runs OpenCV's own function, without a line of Python
    where the table has the answer (gdp/cv2/_dispatch.c)."""

    def register(fn: Callable) -> Callable:
        opencv = _opencv_function(name)

        def through_gdp(*args, **kwargs):
            token = _running.set(True)
            try:
                return fn(*args, **kwargs)
            except Exception as err:  # refused() raises what it does not handle
                failure = err
            finally:
                _running.reset(token)
            return refused(name, failure, args, kwargs)

        accelerated = Dispatcher(name, fn, through_gdp, opencv)
        functools.update_wrapper(accelerated, fn)
        accelerated.__name__ = name.rsplit(".", 1)[-1]
        accelerated.__qualname__ = name
        ACCELERATED[name] = accelerated
        return accelerated

    return register


def refused(name: str, failure: Exception, args: tuple, kwargs: dict):
    """What a call of gdp's function `name` that raised `failure` returns: OpenCV's answer for
    a case gdp does not accelerate (NotAccelerated) or an argument gdp refused (_ARGUMENT_ERRORS:
    OpenCV decides, see accelerate); anything else, gdp's own failures (GdpError, FinalError)
    and every refusal in graph mode, is raised. Called after the call's _running is reset (the
    C Dispatcher calls it for an exception of `raw`)."""
    if isinstance(failure, NotAccelerated):
        reason, refusal = failure.reason, None
    elif (
        isinstance(failure, GdpError | FinalError)
        or not isinstance(failure, _ARGUMENT_ERRORS)
        or _graph_call(args, kwargs)
    ):
        raise failure
    else:  # an argument gdp refused: OpenCV decides
        reason, refusal = f"gdp refused the call ({type(failure).__name__}: {failure})", failure
    if _graph_call(args, kwargs):  # TF tensors: there is no OpenCV call to make
        raise error(name, f"{reason} (graph mode)")
    return _opencv(name, reason, args, kwargs, refusal)


class PythonDispatcher:
    """gdp.cv2._dispatch.Dispatcher (the C one `make install` builds) in Python, where that is
    not built: the same choice for each call, and the same attributes. An accelerated function
    calls `raw` (gdp's function as written) inside another gdp.cv2 call, else `opencv`
    (OpenCV's own) where the dispatch table gives it the call, else `gdp` (gdp's function with
    its fallthrough to OpenCV)."""

    def __init__(self, name: str, raw: Callable, gdp: Callable, opencv: Callable) -> None:
        self.name, self.raw, self.gdp, self.opencv = name, raw, gdp, opencv

    def runs_opencv(self, *args, **kwargs) -> bool:
        return dispatch.runs_opencv(self.name, args, kwargs)

    def __call__(self, *args, **kwargs):
        if _running.get():  # inside another gdp.cv2 call: that call falls through
            return self.raw(*args, **kwargs)
        if dispatch.runs_opencv(self.name, args, kwargs):  # calibrated: OpenCV is faster here
            return self.opencv(*args, **kwargs)
        return self.gdp(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<gdp.cv2 function {self.name}>"


# What gdp's argument handling raises for an argument it refuses: its own cv2.error, and
# Python's for an overload its signature does not take or a value it cannot read. Anything else
# (a failure inside gdp that is no GdpError) propagates as it is, never hidden by OpenCV's answer.
_ARGUMENT_ERRORS = (_cv2.error, TypeError, ValueError, OverflowError)

# Eager calls that gdp refused with an error and OpenCV accepted, by name: each is a case where
# gdp's argument checks are stricter than OpenCV's (a bug; the fuzz suite holds it at zero).
RESCUED: Counter[str] = Counter()


def _graph_call(args: tuple, kwargs: dict) -> bool:
    return any(is_tensor(a) for a in (*args, *kwargs.values()))


def _copies(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The call's arguments with every array copied (keeping its writeable flag): for a probe
    of OpenCV that must not write into the caller's `dst`."""

    def copy(value):
        if isinstance(value, np.ndarray):
            out = value.copy()
            out.flags.writeable = value.flags.writeable
            return out
        if isinstance(value, list):
            return [copy(v) for v in value]
        return value

    return tuple(copy(a) for a in args), {k: copy(v) for k, v in kwargs.items()}


def _opencv(name: str, reason: str, args: tuple, kwargs: dict, refusal: Exception | None = None):
    """Run OpenCV's own `name` on a call as it was made, for a case gdp does not accelerate
    (`reason` says which), or one gdp refused with an error (`refusal`): OpenCV's result where
    OpenCV accepts the call, else gdp's error (OpenCV's where gdp's is no cv2.error).

    Under GDP_CV2_STRICT=1 a case gdp does not accelerate is a FallthroughError; a refused one
    is probed on copies of the arrays (nothing of the caller's is written): a FallthroughError
    where OpenCV would run it, gdp's error where OpenCV refuses it too."""
    function = _opencv_function(name)
    forbidden = FallthroughError(
        f"cv2.{name}: {reason}, so it would run in OpenCV; GDP_CV2_STRICT=1 forbids that"
    )
    if refusal is None:
        if strict():
            raise forbidden
        return function(*args, **kwargs)
    try:
        if strict():
            probe_args, probe_kwargs = _copies(args, kwargs)
            function(*probe_args, **probe_kwargs)
            result = None
        else:
            result = function(*args, **kwargs)
    except Exception as opencv_error:
        raise (refusal if isinstance(refusal, _cv2.error) else opencv_error) from None
    RESCUED[name] += 1
    if strict():
        raise forbidden
    return result


def _opencv_function(name: str):
    fn = _cv2
    for part in name.split("."):
        fn = getattr(fn, part)
    return fn


def error(func: str, message: str) -> _cv2.error:
    """An exception `except cv2.error` catches, with OpenCV's function name and meaning."""
    return _cv2.error(f"OpenCV(gdp) error: (-215:Assertion failed) {message} in function '{func}'")


class FinalError(_cv2.error):
    """A cv2.error gdp raises without handing the call to OpenCV: for a call OpenCV itself
    would crash or hang on (see _UNSAFE_ON_EMPTY)."""


# Functions whose OpenCV crashes the process or never returns on an empty image (OpenCV 5.0:
# minMaxLoc dies of SIGFPE, copyMakeBorder with a reflected border loops forever): gdp raises
# cv2.error for an empty image there rather than falling through.
_UNSAFE_ON_EMPTY = frozenset({"minMaxLoc", "copyMakeBorder"})


def image(func: str, src, name: str = "src") -> np.ndarray:
    """`src` as gdp accelerates an image: a non-empty 2-D or 3-D (HWC, 1..4 channels) array in
    native byte order; an HxWx1 array as HxW (OpenCV's Mat has no channel axis of 1, so its
    results drop it). A TF tensor (graph mode) passes as it is, checked on its static shape.

    Inside an accelerated call, any other array (empty, save in _UNSAFE_ON_EMPTY's functions;
    1-D, 5 or more channels, more axes, big-endian, which OpenCV reads as native order) is
    NotAccelerated: OpenCV decides what to do with it. Elsewhere (gdp.cv2.chain) it is a
    cv2.error."""
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
    reason = ""
    if src.size == 0:
        if func in _UNSAFE_ON_EMPTY:  # never handed to OpenCV: a clear error instead
            raise FinalError(*error(func, f"!_{name}.empty()").args)
        reason = f"!_{name}.empty()"
    elif src.ndim not in (2, 3) or (src.ndim == 3 and not 1 <= src.shape[2] <= 4):
        reason = f"{name} must be HxW or HxWxC with 1 to 4 channels, got {src.shape}"
    elif not src.dtype.isnative:
        reason = f"{name} is {src.dtype.str}, not in native byte order"
    if reason:
        if _running.get():
            raise NotAccelerated(f"{reason}: gdp does not accelerate such an image")
        raise error(func, reason)
    if src.ndim == 3 and src.shape[2] == 1 and _running.get():
        src = src.reshape(src.shape[:2])
    return np.ascontiguousarray(src)


def dtype_of(src) -> np.dtype:
    """The NumPy dtype of an array or a TF tensor."""
    dtype = src.dtype
    if isinstance(dtype, np.dtype):
        return dtype
    return np.dtype(getattr(dtype, "as_numpy_dtype", dtype))


@functools.cache
def dtype_name(dtype) -> str:
    """dtype.name, cached: NumPy builds the string on every access (microseconds a call)."""
    return dtype.name


def channels(src) -> int:
    """The channel count of an HW or HWC array or TF tensor."""
    return 1 if len(src.shape) == 2 else int(src.shape[2])


def into(dst, shape: tuple, dtype, *inputs, in_place: bool = False) -> np.ndarray | None:
    """The array a host kernel writes its result into: the caller's `dst` (in the result's
    `shape`) where finish would copy the result into it and it does not overlap `inputs`, else
    None (a new array). `in_place`: an elementwise kernel, which may write over an input that
    is exactly dst's memory (cv2.threshold(img, ..., dst=img)); a kernel that reads values
    around the one it writes may not. A dst OpenCV cannot write raises here, as in finish,
    before anything is written."""
    if dst is None:
        return None
    _check_dst(dst)
    if not _fits(dst, shape) or dst.dtype != dtype:
        return None
    for a in inputs:
        # the bounds first: `.ctypes.data` costs about 0.8 us an array
        if np.may_share_memory(dst, a) and not (
            in_place and a.ctypes.data == dst.ctypes.data and a.nbytes == dst.nbytes
        ):
            return None
    return dst if dst.shape == shape else dst.reshape(shape)


def _fits(dst: np.ndarray, shape: tuple) -> bool:
    """Whether OpenCV writes a result of `shape` into `dst` (an HxWx1 array for an HxW result
    too)."""
    return dst.shape == shape or (
        dst.ndim == len(shape) + 1 and dst.shape[-1] == 1 and dst.shape[:-1] == shape
    )


def finish(result: np.ndarray, dst) -> np.ndarray:
    """OpenCV's `dst=`: write into the caller's array when it fits, as OpenCV reuses it (an
    HxWx1 array for an HxW result too), else return the new array (OpenCV reallocates a dst of
    the wrong size or type). A dst OpenCV cannot write (read-only, a layout that is not a Mat's,
    not an array) is a cv2.error, as OpenCV's, before anything is written. A result written
    into dst already (into) is dst."""
    if dst is None or result is dst:
        return result
    _check_dst(dst)
    if _fits(dst, result.shape) and dst.dtype == result.dtype:
        if result.ctypes.data != dst.ctypes.data:  # not dst's memory already (into)
            np.copyto(dst.reshape(result.shape), result)
        return dst
    return result


def _check_dst(dst) -> None:
    if not isinstance(dst, np.ndarray):
        raise _cv2.error(
            "OpenCV(gdp) error: (-5:Bad argument) > Overload resolution failed: dst is not a"
            f" numpy array (got {type(dst).__name__})"
        )
    if not dst.flags.writeable:
        raise _cv2.error("OpenCV(gdp) error: (-5:Bad argument) dst is read-only")
    if not dst.flags.c_contiguous:
        reason = "dst is not C-contiguous"
        if _running.get():  # OpenCV writes some strided layouts (rows apart), refuses others
            raise NotAccelerated(f"{reason}: OpenCV decides whether it can write it")
        raise _cv2.error(f"OpenCV(gdp) error: (-5:Bad argument) {reason}")


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
    cache) never need; only tracing a new program touches them. gdp.runtime's kernel modules
    are reached so too: `import gdp.cv2` stays short, and an eager call pays no import
    statement (about 0.5 us each).

    A function or class read once is kept on this object (as `from module import name`
    would), so later reads cost what a module's do; other values are read from the module each
    time (a test may set a module's constant)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module = None

    def __getattr__(self, attr: str):  # only for an attribute not kept yet
        if self._module is None:
            import importlib

            self._module = importlib.import_module(self._name)
        value = getattr(self._module, attr)
        if callable(value):
            setattr(self, attr, value)
        return value


# The hand kernels index their arrays with int32 offsets.
HOST_KERNEL_BYTES = 1 << 31


def on_host(*arrays, out_bytes: int = 0) -> bool:
    """Whether an eager call on these arrays runs gdp.runtime's hand kernels for the host CPU
    (warp, lookup, histogram, nearest, moments, blend, morph, Canny's levels, filter2d, transpose,
    separable): on arrays under 2 GB (and an output of `out_bytes`), on the cpu target (other
    targets run the compiled program on their chip)."""
    for a in arrays:  # a loop, not any(generator): this runs on every eager call
        if (type(a) is not np.ndarray and is_tensor(a)) or a.nbytes >= HOST_KERNEL_BYTES:
            return False
    return out_bytes < HOST_KERNEL_BYTES and on_cpu()


UINT8 = np.dtype(np.uint8)


def plain_image(src: np.ndarray, out_bytes: int = 0) -> bool:
    """Whether an array is one `image` passes unchanged (non-empty, C-contiguous, HxW or HxWxC
    with 2 to 4 channels) and the host kernels take (on_host, with an output of `out_bytes`):
    the test of a common call's short path, which skips the general checks. (gdp/cv2/_dispatch.c
    answers it from the array's struct where built: see the end of this module.)"""
    return (
        (src.ndim == 2 or (src.ndim == 3 and 2 <= src.shape[2] <= 4))
        and src.size > 0
        and src.flags.c_contiguous
        and on_host(src, out_bytes=out_bytes)
    )


def on_cpu() -> bool:
    """Whether eager calls run on the cpu target (gdp.runtime's hand kernels for the host): no
    GDP_TARGET nor set_target (the usual case) is the cpu target, without reading a target (7
    -> 5 us after a cache sweep)."""
    return _TARGET_SWITCH.unset() or environ.default_target().name == "cpu"


_TARGET_SWITCH = environ.Switches("GDP_TARGET")


def tvm_target() -> bool:
    """Whether the current target compiles through TVM (cpu, gpu), which takes ops that ONNX
    Runtime (the reference target) or opset 13 (the NPU's) lack: 16-bit integer min and max,
    ScatterND's reduction. Programs that use them pass it as a structural parameter."""
    return environ.default_target().backend.startswith("tvm")


plain_image_in_python = plain_image

try:  # built by `make install` (gdp/cv2/_dispatch.c); tests hold this machine to it
    from gdp.cv2 import _dispatch

    _dispatch.configure(
        np.ndarray,
        vars(dispatch),
        environ._BYTES,  # None off POSIX: every table answer then goes to runs_opencv
        dispatch._SWITCHES._keys,
        sys.modules,
        _running,
        dispatch._BOUNDS,
        refused,
        _TARGET_SWITCH._keys,
        plain_image_in_python,
    )
    Dispatcher = _dispatch.Dispatcher
    plain_image = _dispatch.plain  # the C one, which asks Python's for what it cannot answer
except ImportError:
    Dispatcher = PythonDispatcher
