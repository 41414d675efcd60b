"""gdp.cv2: OpenCV's Python API, run through gdp. `import gdp.cv2 as cv2` and keep the program.

Accelerated functions (`accelerated()` lists them) compile one program per function, dtype,
channel count, structural parameters (kernel sizes, interpolation, borders, flags) and target
(`gdp.set_target()` or GDP_TARGET; default cpu), then run from the cache: values such as
thresholds, alpha/beta, warp matrices and Gaussian weights are run-time inputs of the program,
and the image size is free where the function's graph is written for any size. Programs are
kept in gdp's disk cache, so a later process runs them without TensorFlow; `import gdp.cv2`
imports neither TensorFlow nor the compiler. Called on TF tensors inside a tf.function, they
build the graph instead, so a chain of calls compiles into one program. Everything else is
OpenCV's own (imread, drawing, helpers such as getStructuringElement, split, findContours,
constants). A call of an accelerated function that gdp does not accelerate (a dtype, channel
count, border, flag or overload it does not take) runs OpenCV's function as the caller made it;
GDP_CV2_STRICT=1 turns such a call (and only such a call) into a FallthroughError.
"""

from __future__ import annotations

import cv2 as _cv2

from gdp.cv2 import color, dispatch, dnn, filters, geometry, pointwise  # noqa: F401 - they register
from gdp.cv2.chain import chain
from gdp.cv2.common import ACCELERATED, FallthroughError
from gdp.cv2.dispatch import set_dispatch
from gdp.cv2.engine import cache_info, clear_cache

error = _cv2.error

# The accelerated functions as this module's own names: read through __getattr__, each call's
# `cv2.threshold` cost about 0.35 us (a 480p threshold's whole call is 10).
globals().update({name: fn for name, fn in ACCELERATED.items() if "." not in name})


def accelerated() -> dict[str, dict[str, str]]:
    """The names that run through gdp (dotted for submodules: dnn.blobFromImage), in order, each
    with where an eager call on the cpu target runs per image size class ({"240p": "gdp",
    "480p": "gdp", ...}): "opencv" where the calibrated dispatch table (`gdp calibrate --cv2`,
    gdp.cv2.dispatch) measured OpenCV faster, "opencv for code=6" where only some variants of a
    function calibrated per variant (cvtColor per code, resize per interpolation) run there."""
    return dispatch.where(sorted(ACCELERATED))


class _Submodule:
    """cv2.dnn and friends: gdp's functions where it has them, OpenCV's for the rest."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str):
        own = ACCELERATED.get(f"{self._name}.{attr}")
        if own is not None:
            return own
        return getattr(getattr(_cv2, self._name), attr)


def setNumThreads(nthreads: int) -> None:
    """OpenCV's cv2.setNumThreads, and the same for gdp's CPU kernels: `nthreads` threads (as
    many as gdp's pool has at most: one per physical core, or TVM_NUM_THREADS), 0 for one
    (OpenCV: "run all its functions sequentially", what data-loader workers ask), a negative
    count for the default. It sets the whole process's gdp kernels (gdp.compile's programs
    too), as OpenCV's sets all of OpenCV. cv2.getNumThreads stays OpenCV's."""
    _cv2.setNumThreads(nthreads)  # OpenCV checks the argument first: its error is the error
    from gdp.runtime.backends.tvm import thread_pool

    count = int(nthreads)
    thread_pool.set_threads(1 if count == 0 else max(count, 0))


def set_target(target) -> None:
    """gdp.set_target: the target of gdp.compile and of gdp.cv2's eager calls."""
    from gdp.api import set_target as set_

    set_(target)


def default_target():
    """gdp.default_target."""
    from gdp.api import default_target as default

    return default()


def __getattr__(name: str):
    own = ACCELERATED.get(name)
    if own is not None:
        return own
    if name in {key.split(".")[0] for key in ACCELERATED if "." in key}:
        return _Submodule(name)
    # OpenCV's own name (a helper, a constant, a class): what gdp does not accelerate at all is
    # not a fallthrough, under GDP_CV2_STRICT=1 too (strict vets accelerated calls only).
    value = getattr(_cv2, name)
    if type(value) is int:
        # A constant (COLOR_BGR2GRAY, INTER_AREA): kept here, so that the next read of it
        # does not come through this function (a few microseconds of each eager call).
        globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(dir(_cv2)) | {n.split(".")[0] for n in ACCELERATED} | set(globals()))


__all__ = [
    "FallthroughError",
    "accelerated",
    "cache_info",
    "chain",
    "clear_cache",
    "default_target",
    "error",
    "set_dispatch",
    "set_target",
    "setNumThreads",
]
