"""gdp.cv2.chain: a function of gdp.cv2 calls compiled into one program, without writing a
tf.function. Eager calls compile and run one program each, so a chain of them reads and writes
every intermediate image; traced together, the calls become one graph that gdp.compile fuses.

    @gdp.cv2.chain
    def preprocess(img):
        x = cv2.resize(img, (224, 224), interpolation=cv2.INTER_AREA)
        x = cv2.cvtColor(x, cv2.COLOR_BGR2RGB)
        return cv2.normalize(x, None, 0.0, 1.0, cv2.NORM_MINMAX, cv2.CV_32F)

    out = preprocess(img)  # one compiled program; the next call of this dtype and layout runs it

On the cpu target a chain also times its calls made one by one (gdp.cv2's eager calls, most of
which run gdp.runtime's hand-written kernels) against its program, at the first call of each
input layout and size class, and from then on runs the faster of the two there (`choices`
shows which, with both times): a hand kernel per call can beat the fused program (cvtColor ->
GaussianBlur at 1080p: 0.9 ms fused, 0.3 ms as two hand kernels), and the program can beat the
calls (resize AREA -> cvtColor -> normalize at 480p: 0.27 against 0.49 ms). Both agree with
OpenCV within its tolerances, as eager calls and programs do; `chain(fn, choose=False)` always
runs the program.

The function receives TF tensors and must use gdp.cv2's functions that take them (graph mode:
Canny, which iterates, does not); where the calls are timed, it also receives the arrays
themselves. It is traced with the images' height and width free, so one
program serves every size; a function whose calls need static sizes (resize computes OpenCV's
tables from the source size) is traced again per input shape. Programs are kept per (dtypes,
channel counts, target) in this object; their compiled code goes to gdp's disk cache. As for
eager calls, the program is not verified against TensorFlow per compile: gdp.cv2's graphs are
held to OpenCV by the conformance tests (within OpenCV's tolerances, e.g. +-1 for a uint8
INTER_AREA resize, where a TF-exact check would refuse the chain).
"""

from __future__ import annotations

import functools
import statistics
import threading
import time
from collections.abc import Callable

import numpy as np

from gdp import environ
from gdp.cv2 import common, dispatch

# Timed runs of each way (after one to warm it up) when a chain chooses.
CHOICE_RUNS = 3


class Chain:
    """A function of gdp.cv2 calls, compiled into one program per input layout on its first call
    (see the module's doc). Call it with arrays: it returns what the function returns, as
    arrays (a tuple for a tuple)."""

    def __init__(self, fn: Callable, choose: bool = True) -> None:
        self.fn = fn
        self.choose = choose
        self._models: dict[tuple, object] = {}
        self._static: set[tuple] = set()  # layouts whose function needs static sizes
        self._outputs: dict[tuple, int | None] = {}  # per layout: how many outputs, None: one
        # (layout, size class) -> {"runs": "program" or "calls", "program_ms", "calls_ms"}, and
        # "why" the calls could not run on arrays where they could not
        self.choices: dict[tuple, dict] = {}
        self._lock = threading.Lock()
        functools.update_wrapper(self, fn)

    def __call__(self, *images):
        arrays = [common.image("chain", a, f"argument {i}") for i, a in enumerate(images)]
        target = environ.default_target().name
        layout = (tuple((a.dtype.str, a.shape[2:]) for a in arrays), target)
        key = (layout, tuple(a.shape for a in arrays)) if layout in self._static else layout
        model = self._models.get(key)
        if model is None:
            with self._lock:
                model = self._models.get(key) or self._compile(layout, arrays)
        if not self.choose or target != "cpu":
            return self._program(model, layout, arrays)
        size = dispatch.size_class(*arrays[0].shape[:2])
        choice = self.choices.get((layout, size))
        if choice is None:
            with self._lock:
                choice = self.choices.get((layout, size)) or self._choose(model, layout, arrays)
                self.choices[(layout, size)] = choice
        if choice["runs"] == "calls":
            return self._calls(layout, arrays)
        return self._program(model, layout, arrays)

    def _program(self, model, layout: tuple, arrays: list[np.ndarray]):
        result = model.run_arrays(arrays)
        outs = tuple(result[f"out{i}"] for i in range(len(result)))
        return outs[0] if self._outputs[layout] is None else outs

    def _calls(self, layout: tuple, arrays: list[np.ndarray]):
        """The function on the arrays: gdp.cv2's eager calls, one by one."""
        out = self.fn(*arrays)
        outs = tuple(out) if isinstance(out, tuple | list) else (out,)
        count = self._outputs[layout]
        if len(outs) != (count or 1) or not all(isinstance(o, np.ndarray) for o in outs):
            raise TypeError(
                f"gdp.cv2.chain: {self.fn.__name__} on arrays returned"
                f" {[type(o).__name__ for o in outs]}, not the {count or 1} arrays it traced"
            )
        return outs[0] if count is None else outs

    def _choose(self, model, layout: tuple, arrays: list[np.ndarray]) -> dict:
        """Time the program and the calls one by one on these arrays (median of CHOICE_RUNS
        after a warm-up each); the calls where they are faster. A function that fails on
        arrays runs the program."""

        def median_ms(run) -> float:
            run()
            times = []
            for _ in range(CHOICE_RUNS):
                start = time.perf_counter()
                run()
                times.append(time.perf_counter() - start)
            return statistics.median(times) * 1e3

        program_ms = median_ms(lambda: self._program(model, layout, arrays))
        try:
            calls_ms = median_ms(lambda: self._calls(layout, arrays))
        except Exception as err:  # the program serves it (the calls may take only tensors)
            why = f"{type(err).__name__}: {err}"
            return {"runs": "program", "program_ms": program_ms, "calls_ms": None, "why": why}
        runs = "calls" if calls_ms < program_ms else "program"
        return {"runs": runs, "program_ms": program_ms, "calls_ms": calls_ms}

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


def chain(fn: Callable | None = None, *, choose: bool = True):
    """Compile a function of gdp.cv2 calls into one program (see gdp.cv2.chain's doc); as a
    decorator, bare or as chain(choose=False) (always the program)."""
    if fn is None:
        return functools.partial(chain, choose=choose)
    if not callable(fn):
        raise TypeError(f"gdp.cv2.chain: expected a function, got {type(fn).__name__}")
    return Chain(fn, choose=choose)
