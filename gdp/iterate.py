"""Data-dependent iteration: run a compiled step until the state it carries stops changing.

Backends compile dataflow graphs; TVM's importer has no ONNX Loop. Algorithms that iterate to a
fixed point (Canny's hysteresis, flood fills, morphological reconstruction) compile one step, and
this driver repeats it, feeding the carried outputs back as inputs, until an iteration leaves
them unchanged. The result is the fixed point itself, never a fixed number of unrolled steps.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from gdp.errors import ExecutionError, InputError
from gdp.model import Model

DEFAULT_MAX_ITERATIONS = 100_000


def fixed_point(
    step: Model,
    inputs: Mapping[str, np.ndarray],
    carry: Mapping[str, str],
    max_iterations: int = DEFAULT_MAX_ITERATIONS,
) -> tuple[dict[str, np.ndarray], int]:
    """Run `step` on `inputs`, then again with each input named in `carry` replaced by the
    output it maps to, until no carried output changes. Returns the last outputs and the number
    of runs (the last one confirms the fixed point). Raises ExecutionError when
    `max_iterations` runs do not reach one."""
    if not isinstance(step, Model):
        raise InputError(f"fixed_point: expected a model from gdp.compile, got {type(step)}")
    unknown_in = [name for name in carry if name not in step.input_names]
    unknown_out = [name for name in carry.values() if name not in step.output_names]
    if unknown_in or unknown_out:
        raise InputError(
            f"fixed_point: carry maps inputs to outputs of the step; unknown inputs {unknown_in}"
            f" (the step takes {step.input_names}), unknown outputs {unknown_out}"
            f" (it returns {step.output_names})"
        )
    if max_iterations < 1:
        raise InputError(f"fixed_point: max_iterations must be >= 1, got {max_iterations}")
    state = dict(inputs)
    for iteration in range(1, max_iterations + 1):
        outputs = step.submit(state, wait=True).result()
        changed = False
        for name, out in carry.items():
            new, old = outputs[out], np.asarray(state[name])
            if new.shape != old.shape or new.dtype != old.dtype:
                raise InputError(
                    f"fixed_point: output {out!r} ({new.dtype}{list(new.shape)}) cannot be fed"
                    f" back as input {name!r} ({old.dtype}{list(old.shape)})"
                )
            changed = changed or not np.array_equal(new, old)
            state[name] = new
        if not changed:
            return outputs, iteration
    raise ExecutionError(f"fixed_point: no fixed point after {max_iterations} iterations")
