"""What every workload sample shares: run it with gdp on a target, run its OpenCV/NumPy peer on the
same input, check one against the other, print both.

A workload module defines `program` (a tf.function), `inputs()` (dict of arrays), `peer(**inputs)`
(dict of arrays, OpenCV/NumPy), `check(got, want)` (raises AssertionError on a mismatch) and
`bytes_moved(inputs)` (the bytes the workload must read and write at least, for the roofline).
A workload that is more than one compiled program (canny: a step repeated to a fixed point)
defines `build(target)` returning a Compiled instead of `program`.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from types import ModuleType

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

import gdp

# GDPNPU's six workloads, then an inference server's preprocessing (the benchmark's rows).
WORKLOADS = [
    "tone",
    "gaussian",
    "sharpness",
    "canny",
    "mean_std",
    "knn",
    "dnn_resize",
    "dnn_letterbox",
]


class Compiled:
    """A workload compiled for a target: call it with the inputs (a dict) to get the outputs (a
    dict); `models` are the gdp models it runs."""

    def __init__(self, run: Callable[..., dict], models: list[gdp.Model]) -> None:
        self._run = run
        self.models = models

    def __call__(self, inputs: dict) -> dict[str, np.ndarray]:
        return self._run(**inputs)

    @property
    def kernels(self) -> int:
        return sum(m.report()["kernels"] for m in self.models)


def build(module: ModuleType, target: str = "cpu", **options) -> Compiled:
    """The workload compiled for `target`; `options` go to gdp.compile (precision=...)."""
    if hasattr(module, "build"):
        return module.build(target, **options)
    model = gdp.compile(module.program, target=target, **options)
    return Compiled(lambda **inputs: model.submit(inputs, wait=True).result(), [model])


def compute(module: ModuleType, target: str = "cpu") -> tuple[dict, dict]:
    """gdp's outputs and the peer's, both as dicts by output name, on the same inputs."""
    inputs = module.inputs()
    return build(module, target)(inputs), module.peer(**inputs)


def run(module: ModuleType, target: str = "cpu") -> dict[str, np.ndarray]:
    got, want = compute(module, target)
    module.check(got, want)
    return got


def _show(array) -> str:
    a = np.asarray(array)
    return f"{a.dtype}{list(a.shape)} {a.ravel()[:4] if a.size > 1 else a}"


def main(module: ModuleType) -> None:
    parser = argparse.ArgumentParser(description=module.__doc__)
    parser.add_argument("--target", default="cpu")
    args = parser.parse_args()
    got, want = compute(module, args.target)
    for name in want:
        print(f"{name}: gdp {args.target} {_show(got[name])}")
        print(f"{name}: OpenCV/NumPy {_show(want[name])}")
    module.check(got, want)  # after printing, so a mismatch shows both values
    print("check: OK")
