"""How a gdp.cv2 call runs: eager calls on NumPy arrays compile once and hit a cache after;
calls on TF tensors (inside a user's tf.function) return TF tensors, so a chain of calls becomes
one graph that gdp.compile fuses.

Every accelerated function is `graph(*tensors, **structural, **values) -> tensor(s)`: a TF
function of its image inputs. Its other arguments are of two kinds:
- structural parameters (kernel sizes, interpolation, border modes, flags, output sizes), which
  change the program: they are Python values, constants of the graph, part of its key;
- value parameters (thresholds, alpha/beta, warp matrices), which do not: they are run-time
  inputs of the program, fed to it as one float64 vector `params` beside src0, src1, ... and
  handed to `graph` as float64 tensors (a scalar, or a 1-D tensor for a sequence value).
  tf2onnx merges Cast(float64 -> float32 -> float64) into nothing, so a value OpenCV rounds to
  float32 is rounded on the host before it is fed.
An eager call compiles one program per (function, dtypes, channel counts, structural
parameters, target): the images' height and width are free dimensions of the program (for the
functions whose graphs are written for any size, `free=`), and a new value runs the same
program. Where such a program is much slower than one compiled for the sizes (resize, whose
tables are run-time inputs there), a size called often gets its own (`sized_program`).

Programs persist across processes: the converted ONNX graph of each is kept in gdp's disk cache
(GDP_CACHE_DIR, else ~/.cache/gdp) under its key, so a later process builds its model from that
graph without importing TensorFlow, and the backend finds the compiled code in the same cache.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gdp import environ
from gdp.cv2 import common

if TYPE_CHECKING:
    from gdp.model import Model

_lock = threading.Lock()

# Bump when the layout of a stored program (inputs, outputs, params) changes.
_FORMAT = 1


@dataclass
class CacheInfo:
    """Programs made for eager calls in this process (`programs` and `compilations` agree: one
    per key, made once), calls that found theirs (`hits`), and how many of the programs were
    traced from TensorFlow (`traced`) rather than read back from the disk cache."""

    programs: int = 0
    compilations: int = 0
    hits: int = 0
    traced: int = 0


_programs: dict[tuple, Model] = {}
_hits = 0
_traced = 0


def cache_info() -> CacheInfo:
    return CacheInfo(len(_programs), len(_programs), _hits, _traced)


def clear_cache() -> None:
    """Forget the programs of this process (the disk cache keeps their graphs and code)."""
    global _hits, _traced
    with _lock:
        _programs.clear()
        _hits = 0
        _traced = 0
    with _sized_lock:
        _sized.clear()
        _sized_calls.clear()
        _sized_failed.clear()


def is_graph_call(*arrays) -> bool:
    """Whether a call is on TF tensors (graph mode) rather than NumPy arrays."""
    for a in arrays:  # noqa: SIM110 (a loop, not any(generator): on every eager call)
        if type(a) is not np.ndarray and common.is_tensor(a):
            return True
    return False


# Values a key holds as they are: on every eager call of a compiled program, a kernel's weights
# (3x3: 13 values) took the isinstance chain below 8 us a call, this lookup first 3.
_PLAIN = frozenset({str, int, float, bool, type(None)})


def _freeze(value):
    """A hashable form of a parameter (tuples, arrays) for the cache key."""
    kind = value.__class__
    if kind in _PLAIN:
        return value
    if kind is list or kind is tuple:
        return tuple(map(_freeze, value))
    if kind is dict:
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, np.generic):
        return value.item()
    return value


def _layout(values: Mapping[str, Any]) -> tuple[tuple[str, int | None], ...]:
    """(name, length) of each value parameter in the params vector: None for a scalar."""
    return tuple(
        (name, None if np.ndim(v) == 0 else int(np.size(v))) for name, v in sorted(values.items())
    )


def _pack(values: Mapping[str, Any]) -> np.ndarray:
    return np.array(
        [x for _, v in sorted(values.items()) for x in np.ravel(np.asarray(v, np.float64))],
        np.float64,
    ).reshape(-1)


def _unpack(params, layout) -> dict:
    """The params tensor -> {name: a scalar tensor, or a 1-D tensor for a sequence}."""
    out, at = {}, 0
    for name, length in layout:
        if length is None:
            out[name] = params[at]
            at += 1
        else:
            out[name] = params[at : at + length]
            at += length
    return out


def _spec_shapes(arrays: Sequence[np.ndarray], free: int) -> tuple[tuple, ...]:
    """Each array's shape in the program: height and width free for the first `free` arrays
    (the length of a 1-D one: a table whose length follows from the sizes)."""
    return tuple(
        (None,) * min(a.ndim, 2) + tuple(a.shape[2:]) if i < free else tuple(a.shape)
        for i, a in enumerate(arrays)
    )


_fingerprint: str | None = None


def _sources_fingerprint() -> str:
    """What a stored graph depends on besides its key: the source of gdp.cv2 and gdp.ops (read
    as files, without importing TensorFlow) and the versions of the converters."""
    global _fingerprint
    if _fingerprint is None:
        import importlib.metadata
        import importlib.util

        from gdp.version import __version__

        digest = hashlib.sha256(f"{_FORMAT} {__version__}".encode())
        ops = importlib.util.find_spec("gdp.ops")
        folders = [Path(__file__).parent, *(Path(p) for p in ops.submodule_search_locations)]
        for folder in folders:
            for path in sorted(folder.glob("*.py")):
                digest.update(path.name.encode())
                digest.update(path.read_bytes())
        for dist in ("tensorflow", "tf2onnx", "onnx"):
            try:
                digest.update(f"{dist} {importlib.metadata.version(dist)}".encode())
            except importlib.metadata.PackageNotFoundError:
                digest.update(f"{dist} -".encode())
        _fingerprint = digest.hexdigest()
    return _fingerprint


def _disk_key(key: tuple) -> str:
    from gdp.runtime.cache import cache_key

    return cache_key("gdp.cv2 program", repr(key), _sources_fingerprint())


def _stored_graph(disk_key: str, cache_dir: Path):
    """The ONNX graph stored under `disk_key`, or None."""
    from gdp.runtime.cache import DiskCache

    found = DiskCache(cache_dir).lookup(disk_key)
    if found is None:
        return None
    import onnx

    entry, meta = found
    try:
        return onnx.load(str(entry / meta["files"][0]))
    except Exception:  # a graph that does not parse is rebuilt, never used
        DiskCache(cache_dir).discard(disk_key)
        return None


def _store_graph(disk_key: str, cache_dir: Path, graph) -> None:
    from gdp.runtime.cache import DiskCache

    def build(directory: Path) -> dict:
        (directory / "program.onnx").write_bytes(graph.SerializeToString())
        return {"files": ["program.onnx"], "kind": "gdp.cv2 program"}

    DiskCache(cache_dir).store(disk_key, build)


def _trace(graph: Callable, shapes, dtypes, params: dict, layout, outputs: int):
    """`graph` as a tf.function over src0, src1, ... (and `params` when there are values)."""
    import tensorflow as tf

    signature = [
        tf.TensorSpec(shape, tf.as_dtype(np.dtype(dtype)), name=f"src{i}")
        for i, (shape, dtype) in enumerate(zip(shapes, dtypes, strict=True))
    ]
    count = len(shapes)
    if layout:
        length = sum(1 if n is None else n for _, n in layout)
        signature.append(tf.TensorSpec([length], tf.float64, name="params"))

    def traced(*tensors):
        values = _unpack(tensors[count], layout) if layout else {}
        out = graph(*tensors[:count], **params, **values)
        outs = out if outputs > 1 else (out,)
        return {f"dst{i}": t for i, t in enumerate(outs)}

    return tf.function(traced, input_signature=signature, autograph=False)


def program(
    name: str,
    graph: Callable,
    arrays: Sequence[np.ndarray],
    params: dict,
    outputs: int = 1,
    values: Mapping[str, Any] | None = None,
    free: int | bool = False,
    specialize: str | None = None,
    same_size: int = 0,
) -> Model:
    """`graph(*arrays, **params, **values)` compiled for the current target, from the cache
    after the first call: a model with inputs src0, src1, ... (and `params`, the values packed
    by `pack_values`, when there are any) and outputs dst0, dst1, ...

    `params` are structural (part of the key), `values` run-time inputs (only their names and
    lengths are in the key). The first `free` arrays (all for True) are images whose height and
    width are free dimensions of the program: the graph must be written for any size.
    `specialize` is gdp.compile's option for them (its default when None). The first
    `same_size` of them are of one size (OpenCV's two operands): their free dimensions are one
    pair in the program."""
    global _hits
    target = environ.default_target()
    key = _key(name, arrays, params, outputs, values, free, same_size)
    model = _programs.get((key, target.name))
    if model is not None:
        _hits += 1
        return model
    with _lock:
        model = _programs.get((key, target.name))
        if model is None:
            options = {"specialize": specialize} if specialize else {}
            model = _compile(key, graph, params, target, options)
            _programs[(key, target.name)] = model
    return model


def _key(name, arrays, params, outputs, values, free, same_size=0) -> tuple:
    layout = _layout(values or {})
    free_count = len(arrays) if free is True else int(free)
    shapes = _spec_shapes(arrays, free_count)
    dtypes = tuple(a.dtype.str for a in arrays)
    return (name, shapes, dtypes, _freeze(params), layout, outputs, same_size)


def _compile(key: tuple, graph: Callable, params: dict, target, options=None) -> Model:
    """The model of `key`: from its graph in the disk cache, else traced from `graph`."""
    global _traced
    import gdp
    from gdp.runtime.cache import default_cache_dir

    _, shapes, dtypes, _, layout, outputs, same_size = key
    cache_dir = default_cache_dir()
    disk_key = _disk_key(key)
    stored = _stored_graph(disk_key, cache_dir)
    if stored is not None:
        return gdp.compile(stored, target=target, verify=False, **(options or {}))
    function = _trace(graph, shapes, dtypes, params, layout, outputs)
    if same_size > 1:
        from gdp.frontend.tensorflow import from_tf_function

        function = _one_size(from_tf_function(function), same_size)
    # Not verified against TF per call: gdp.cv2's graphs are gdp's own, held to OpenCV by
    # tests/conformance.
    model = gdp.compile(function, target=target, verify=False, **(options or {}))
    _store_graph(disk_key, cache_dir, model.source_onnx)
    _traced += 1
    return model


def _one_size(model, count: int):
    """The ONNX graph with inputs src1 .. src{count-1} given src0's free dimensions: TF gives
    each input its own, and a sum of two such inputs then has no shape TVM can legalise
    (the program was compiled per size)."""
    inputs = {i.name: i for i in model.graph.input}
    first = inputs["src0"].type.tensor_type.shape.dim
    for k in range(1, count):
        dims = inputs[f"src{k}"].type.tensor_type.shape.dim
        for axis in range(2):
            if first[axis].dim_param:
                dims[axis].dim_param = first[axis].dim_param
    return model


# Per-size programs beside a generic one (sized_program): a size's SIZED_AFTER-th call starts
# its compile; the last MAX_SIZED are kept.
SIZED_AFTER = 16
MAX_SIZED = 8
_sized_lock = threading.Lock()
_sized: OrderedDict[tuple, Model] = OrderedDict()
_sized_calls: OrderedDict[tuple, int] = OrderedDict()
_sized_pending: set[tuple] = set()  # compiling now
_sized_failed: set[tuple] = set()  # left on the generic program in this process


def sized_program(
    name: str,
    graph: Callable,
    arrays: Sequence[np.ndarray],
    params: dict,
    outputs: int = 1,
    values: Mapping[str, Any] | None = None,
    generic: Callable[[], Any] | None = None,
) -> Model | None:
    """The program of `graph` for these arrays' exact sizes, where a function also has a generic
    program that serves every size more slowly (resize: its tables are run-time inputs there,
    constants folded into the kernel here); None until it is ready. A size's SIZED_AFTER-th
    call starts its compile in a background thread while the generic program serves; the
    MAX_SIZED sizes used last keep theirs in memory (the disk cache keeps every graph and
    code). A failed compile leaves the size on the generic program, and so does one that runs
    slower than `generic()` (the call's generic path, on its inputs: _slower)."""
    target = environ.default_target()
    key = (_key(name, arrays, params, outputs, values, False), target.name)  # static sizes
    with _sized_lock:
        model = _sized.get(key)
        if model is not None:
            _sized.move_to_end(key)
            return model
        calls = _sized_calls.pop(key, 0) + 1
        _sized_calls[key] = calls
        while len(_sized_calls) > 4 * MAX_SIZED + 16:
            _sized_calls.popitem(last=False)
        if calls < SIZED_AFTER or key in _sized_pending or key in _sized_failed:
            return None
        sample = (generic, list(arrays), outputs, values)
        # Not a daemon: a daemon thread stopped inside TVM's compiler at shutdown can abort
        # the process (as gdp.model's background specialisation).
        thread = threading.Thread(
            target=_compile_sized, args=(key, graph, params, target, sample), name="gdp-cv2-sized"
        )
        _sized_pending.add(key)
    thread.start()
    return None


def _compile_sized(key: tuple, graph: Callable, params: dict, target, sample: tuple) -> None:
    try:
        with _lock:
            model = _compile(key[0], graph, params, target)
        slower = _slower(model, *sample)
    except Exception:  # the generic program keeps serving the size
        slower = True
    with _sized_lock:
        if slower:
            _sized_failed.add(key)
        else:
            _sized[key] = model
            while len(_sized) > MAX_SIZED:
                _sized.popitem(last=False)
        _sized_pending.discard(key)


def _slower(sized: Model, generic: Callable | None, arrays, outputs: int, values) -> bool:
    """Whether a size's own program ran slower than `generic()` (the call's generic path) on
    the call that asked for it, by gdp.model's trial of a hot shape's own executable
    (trial_ratio over SLOWER_BY): a static schedule can lose (a 1080p float32 resize LINEAR:
    2.07 ms against the generic 1.58)."""
    from gdp import model as model_module

    if generic is None:
        return False
    ratio = model_module.trial_ratio(lambda: execute(sized, arrays, outputs, values), generic)
    return ratio > model_module.SLOWER_BY


def feeds(arrays: Sequence[np.ndarray], values: Mapping[str, Any] | None) -> dict:
    """A program's inputs: src0, src1, ... and the packed `params` when there are values."""
    out = {f"src{i}": a for i, a in enumerate(arrays)}
    if values:
        out["params"] = _pack(values)
    return out


def run(
    name: str,
    graph: Callable,
    arrays: Sequence[np.ndarray],
    params: dict,
    outputs: int = 1,
    values: Mapping[str, Any] | None = None,
    free: int | bool = False,
    same_size: int = 0,
) -> np.ndarray | tuple[np.ndarray, ...]:
    """Run `graph(*arrays, **params, **values)`, which returns `outputs` tensors (a tuple when
    more than one), compiled for the current target. Returns one array or a tuple of them."""
    return execute(
        program(name, graph, arrays, params, outputs, values, free, same_size=same_size),
        arrays,
        outputs,
        values,
    )


def execute(
    model: Model,
    arrays: Sequence[np.ndarray],
    outputs: int = 1,
    values: Mapping[str, Any] | None = None,
) -> np.ndarray | tuple[np.ndarray, ...]:
    """Run a program of this module on the arrays (and values): one array or a tuple."""
    given = feeds(arrays, values)
    results = model.run_arrays([given[name] for name in model.input_names])
    outs = tuple(results[f"dst{i}"] for i in range(outputs))
    return outs if outputs > 1 else outs[0]


def call(
    name: str,
    graph: Callable,
    arrays: Sequence,
    params: dict,
    dst=None,
    values: Mapping[str, Any] | None = None,
    free: int | bool = False,
    sized: bool = False,
):
    """The common shape of an accelerated function: on TF tensors, the graph op itself (the
    values as float64 constants); on arrays, the compiled program's result, written into `dst`
    when it fits. `sized` (with `free`): a size called often also gets a program of its own
    (sized_program), where the generic program runs slower than one of static sizes."""
    if is_graph_call(*arrays):
        return graph(*arrays, **params, **constants(values))
    if free and sized:
        model = sized_program(
            name,
            graph,
            arrays,
            params,
            1,
            values,
            generic=lambda: run(name, graph, arrays, params, 1, values, free),
        )
        if model is not None:
            return common.finish(execute(model, arrays, 1, values), dst)
    return common.finish(run(name, graph, arrays, params, 1, values, free), dst)


def constants(values: Mapping[str, Any] | None) -> dict:
    """Value parameters as the graph functions receive them, for graph mode: float64 tensors
    (scalars, 1-D for sequences), as the program's `params` input would give."""
    if not values:
        return {}
    import tensorflow as tf

    return {
        name: tf.constant(np.asarray(v, np.float64).reshape(() if np.ndim(v) == 0 else -1))
        for name, v in values.items()
    }
