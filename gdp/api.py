"""The public API, with GDPNPU's names and semantics: compile, run_async, sync, load."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gdp import environ
from gdp.errors import GdpError, InputError, OutputBufferError, TargetError
from gdp.frontend import convert, from_onnx
from gdp.frontend.verify import Verification
from gdp.model import Model, check_saved
from gdp.runtime import queue
from gdp.runtime.targets import Target, get_target


def compile(
    program: Any,
    outputs: Sequence | Mapping | None = None,
    *,
    target: str | Target | None = None,
    input_signature: Sequence | None = None,
    opset: int | None = None,
    cache_dir: str | os.PathLike | None = None,
    **options: Any,
) -> Model:
    """Compile preprocessing for a target.

    `program` is a tf.function with an input_signature (or a plain function plus
    `input_signature=`), a list of Keras symbolic inputs with `outputs` (GDPNPU's form), an ONNX
    file path, or an `onnx.ModelProto`. A `None` dimension compiles lazily, one model per concrete
    input shape met at run time. `target` defaults to `default_target()`.

    A TF program is verified: TensorFlow and gdp run on probe inputs (random within the input
    ranges, plus `sample=`, the caller's own arrays: one, a list in input order or a dict by
    name) and a disagreement raises `VerificationError` naming the output and the first TF op
    that disagrees (gdp.frontend.verify). `verify=False` skips it; its cost is
    `report()["verify_s"]`.

    `compile_only=True` compiles into the cache without loading what it compiled, for
    `export` on a machine without the target's device (a gpu bundle built on a CPU machine);
    the model then refuses to run, and only the conversion is verified.
    """
    verify = options.pop("verify", True)
    sample = options.pop("sample", None)
    compile_only = options.pop("compile_only", False)
    if not isinstance(compile_only, bool):
        raise TargetError(f"compile_only: expected True or False, got {compile_only!r}")
    if not isinstance(verify, bool):
        raise TargetError(f"verify: expected True or False, got {verify!r}")
    # A bad target fails before any conversion work.
    resolved = get_target(target) if target is not None else default_target()
    graph, source = convert(program, outputs, input_signature=input_signature, opset=opset)
    check = None
    if verify and source is not None:
        ranges = Model._input_ranges(options.get("input_ranges"), graph)
        check = Verification(source, graph, input_ranges=ranges, sample=sample)
        check.conversion()  # before the backend compiles: a wrong conversion costs no compile
    model = Model(graph, resolved, options, cache_dir=cache_dir, compile_only=compile_only)
    if check is not None and compile_only:
        model.verification = check.report()
    elif check is not None:
        check.compiled(model)
        model.verification = check.report()
    return model


_default_target: Target | None = None


def set_target(target: str | Target | None) -> None:
    """The target of `gdp.compile` without one and of gdp.cv2's eager calls; None goes back to
    the GDP_TARGET environment variable, else cpu."""
    global _default_target
    _default_target = None if target is None else get_target(target)


def default_target() -> Target:
    return _default_target or get_target(environ.get("GDP_TARGET") or "cpu")


def run_async(
    model: Model,
    inputs: Mapping[str, Any] | Sequence | np.ndarray | None = None,
    outputs: Mapping[str, np.ndarray] | np.ndarray | None = None,
    profile: bool = False,
    *,
    batch: Sequence | None = None,
    block: bool = True,
) -> queue.Task:
    """Enqueue a run and return at once with a handle (`.wait()`, `.result()`, `.profile`).

    Given output arrays are filled in place when the run ends; missing ones are allocated and
    returned by `.result()`. Input arrays are read when the run executes: leave them unchanged until
    the handle is done (as with any asynchronous copy). Back-pressure: when the target already
    has `gdp.runtime.queue.MAX_QUEUED` runs queued (64, or GDP_MAX_QUEUED), this waits for room;
    with `block=False` it raises `QueueFullError` instead, and nothing is queued.

    `batch=[img1, img2, ...]` (instead of `inputs`) enqueues a ragged batch: images of any sizes
    run as one task and each output comes back stacked, (N, ...), in `outputs` buffers of that
    shape or new arrays (`Model.submit_batch`).
    """
    if not isinstance(model, Model):
        raise GdpError(f"run_async: expected a model from gdp.compile, got {type(model).__name__}")
    if batch is not None:
        if inputs is not None:
            raise InputError(
                "run_async: give either inputs (one run) or batch= (a list of images), not both"
            )
        return model.submit_batch(batch, outputs, profile, block=block)
    if inputs is None:
        raise InputError("run_async: expected inputs (one run) or batch= (a list of images)")
    if isinstance(outputs, np.ndarray):
        raise OutputBufferError("run_async: expected output buffers as a dict by output name")
    return model.submit(inputs, outputs, profile, block=block)


def pinned_empty(shape: int | Sequence[int], dtype: Any = np.uint8) -> np.ndarray:
    """An uninitialised numpy array in page-locked (pinned) host memory, for the inputs of gpu
    models: a run copies it to the GPU straight from where it is (an input elsewhere is first
    copied into gdp's own pinned buffer), and `run_async` overlaps that copy with the previous
    run's kernels. A server decodes or resizes its images into such arrays and reuses them.
    The memory is freed with the last array on it. Where no CUDA GPU is present, an ordinary
    array (np.empty)."""
    dims = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)
    if not all(isinstance(d, int | np.integer) and d >= 0 for d in dims):
        raise InputError(f"pinned_empty: expected a shape of non-negative ints, got {shape!r}")
    try:
        dtype = np.dtype(dtype)
    except TypeError as err:
        raise InputError(f"pinned_empty: {dtype!r} is not a numpy dtype: {err}") from None
    from gdp.runtime.backends.tvm import cuda_runtime

    return cuda_runtime.pinned_empty(tuple(int(d) for d in dims), dtype)


def sync() -> None:
    """Wait for everything submitted so far; raise the first failure of this thread's runs that
    no handle has reported (another live thread's failures are left to its own `sync()`)."""
    queue.sync()


def load(
    path: str | os.PathLike,
    *,
    target: str | Target | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> Model:
    """Load a model written by `Model.save` (or any ONNX file) for `target` (default: the one it
    was saved with, else cpu); compiled code comes from the cache when it is there.

    `path` may also be a bundle directory written by `Model.export` / `gdp export`: its
    executables are loaded and nothing is ever compiled (gdp.bundle; a bundle built by another
    gdp, toolchain or CPU, or with a damaged file, or whose directory others can write, is refused
    with a `BundleError`). A file written by `Model.save` is checked against the SHA-256 recorded
    in it (a changed file: `FrontendError`)."""
    from gdp import bundle

    if Path(path).is_dir():
        return bundle.load(path, target=target, cache_dir=cache_dir)
    check_saved(Path(path))
    graph = from_onnx(Path(path))
    meta = {p.key: p.value for p in graph.metadata_props}
    # gdp's own keys are not part of the program: drop them so the cache key matches the original.
    for prop in [p for p in graph.metadata_props if p.key.startswith("gdp.")]:
        graph.metadata_props.remove(prop)
    options = json.loads(meta.get("gdp.options", "{}"))
    resolved = get_target(target or meta.get("gdp.target", "cpu"))
    return Model(graph, resolved, options, cache_dir=cache_dir)


__all__ = ["Model", "compile", "default_target", "load", "run_async", "set_target", "sync"]
