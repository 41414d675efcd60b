"""What every workload sample shares: run it with gdp on a target, run its OpenCV/NumPy peer on the
same input, check one against the other, print both.

A workload module defines `program` (a tf.function), `inputs()` (dict of arrays), `peer(**inputs)`
(dict of arrays, OpenCV/NumPy), `check(got, want)` (raises AssertionError on a mismatch) and
`bytes_moved(inputs)` (the bytes the workload must read and write at least, for the roofline).
"""

from __future__ import annotations

import argparse
import os
from types import ModuleType

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

import gdp  # noqa: E402


def run(module: ModuleType, target: str = "cpu") -> dict[str, np.ndarray]:
    inputs = module.inputs()
    model = gdp.compile(module.program, target=target)
    got = gdp.run_async(model, inputs).result()
    want = module.peer(**inputs)
    module.check(got, want)
    return got


def main(module: ModuleType) -> None:
    parser = argparse.ArgumentParser(description=module.__doc__)
    parser.add_argument("--target", default="cpu")
    args = parser.parse_args()
    inputs = module.inputs()
    model = gdp.compile(module.program, target=args.target)
    got = model(inputs) if len(model.output_names) > 1 else {model.output_names[0]: model(inputs)}
    want = module.peer(**inputs)
    for name in want:
        g, w = np.asarray(got[name]), np.asarray(want[name])
        shown = f"{g.ravel()[:4]}" if g.size > 1 else f"{g}"
        print(f"{name}: gdp {args.target} {g.dtype}{list(g.shape)} {shown}")
        shown = f"{w.ravel()[:4]}" if w.size > 1 else f"{w}"
        print(f"{name}: OpenCV/NumPy {w.dtype}{list(w.shape)} {shown}")
    module.check(got, want)
    print("check: OK")
