"""gdp.cv2.chain: a function of gdp.cv2 calls compiled into one program, without writing a
tf.function. Eager calls compile and run one program each, so a chain of them reads and writes
every intermediate image; traced together, the calls become one graph that gdp.compile fuses.

    @gdp.cv2.chain
    def preprocess(img):
        x = cv2.resize(img, (224, 224), interpolation=cv2.INTER_AREA)
        x = cv2.cvtColor(x, cv2.COLOR_BGR2RGB)
        return cv2.normalize(x, None, 0.0, 1.0, cv2.NORM_MINMAX, cv2.CV_32F)

    out = preprocess(img)  # one compiled program; the next call of this dtype and layout runs it

The function receives TF tensors and must use gdp.cv2's functions that take them (graph mode:
Canny, which iterates, does not). It is traced with the images' height and width free, so one
program serves every size; a function whose calls need static sizes (resize computes OpenCV's
tables from the source size) is traced again per input shape. Programs are kept per (dtypes,
channel counts, target) in this object; their compiled code goes to gdp's disk cache. As for
eager calls, the program is not verified against TensorFlow per compile: gdp.cv2's graphs are
held to OpenCV by the conformance tests (within OpenCV's tolerances, e.g. +-1 for a uint8
INTER_AREA resize, where a TF-exact check would refuse the chain).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

import numpy as np

from gdp.cv2 import common


class Chain:
    """A function of gdp.cv2 calls, compiled into one program per input layout on its first call
    (see the module's doc). Call it with arrays: it returns what the function returns, as
    arrays (a tuple for a tuple)."""

    def __init__(self, fn: Callable) -> None:
        self.fn = fn
        self._models: dict[tuple, object] = {}
        self._static: set[tuple] = set()  # layouts whose function needs static sizes
        self._outputs: dict[tuple, int | None] = {}  # per layout: how many outputs, None: one
        self._lock = threading.Lock()
        functools.update_wrapper(self, fn)

    def __call__(self, *images):
        from gdp.api import default_target

        arrays = [common.image("chain", a, f"argument {i}") for i, a in enumerate(images)]
        layout = (
            tuple((a.dtype.str, a.shape[2:]) for a in arrays),
            default_target().name,
        )
        key = (layout, tuple(a.shape for a in arrays)) if layout in self._static else layout
        model = self._models.get(key)
        if model is None:
            with self._lock:
                model = self._models.get(key) or self._compile(layout, arrays)
        result = model.run_arrays(arrays)
        outs = tuple(result[f"out{i}"] for i in range(len(result)))
        return outs[0] if self._outputs[layout] is None else outs

    def _compile(self, layout: tuple, arrays: list[np.ndarray]):
        """The program for `arrays`: traced with free height and width, else (the function
        needs static sizes) with their shapes. Called under the lock."""
        import gdp

        if layout not in self._static:
            try:
                model = gdp.compile(self._traced(layout, arrays, free=True), verify=False)
            except (TypeError, ValueError, gdp.GdpError):
                # int(None) in a function that computes from the image size, or a graph that
                # converts only with known sizes: per shape from now on.
                self._static.add(layout)
            else:
                self._models[layout] = model
                return model
        model = gdp.compile(self._traced(layout, arrays, free=False), verify=False)
        self._models[(layout, tuple(a.shape for a in arrays))] = model
        return model

    def _traced(self, layout: tuple, arrays: list[np.ndarray], free: bool):
        import tensorflow as tf

        signature = [
            tf.TensorSpec(
                (None, None, *a.shape[2:]) if free else a.shape, tf.as_dtype(a.dtype), f"src{i}"
            )
            for i, a in enumerate(arrays)
        ]

        def traced(*tensors):
            out = self.fn(*tensors)
            outs = out if isinstance(out, tuple | list) else (out,)
            for t in outs:
                if not tf.is_tensor(t):
                    raise TypeError(
                        f"gdp.cv2.chain: {self.fn.__name__} must return TF tensors (the results"
                        f" of gdp.cv2 calls on its arguments), got {type(t).__name__}"
                    )
            self._outputs[layout] = len(outs) if isinstance(out, tuple | list) else None
            return {f"out{i}": t for i, t in enumerate(outs)}

        return tf.function(traced, input_signature=signature, autograph=False)


def chain(fn: Callable) -> Chain:
    """Compile a function of gdp.cv2 calls into one program (see gdp.cv2.chain's doc)."""
    if not callable(fn):
        raise TypeError(f"gdp.cv2.chain: expected a function, got {type(fn).__name__}")
    return Chain(fn)
