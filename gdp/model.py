"""A compiled gdp model: the front end's ONNX graph, a target, and its compiled executables:
one shape-generic executable where the backend compiles free dimensions as run-time extents
(the cpu), else (or for a hot shape, or where the generic compile fails) one per concrete input
shape, made on first use and cached in memory (LRU) and on disk.

Model holds the options and the specialisations, and runs. The stages that turn its graph into
the backend's are gdp.rewrites.pipeline's; binding a call's arrays is gdp.signature's; the
executables' memory and disk cache is gdp.runtime.cache's."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from gdp.errors import ExecutionError, InputError, OutputBufferError, TargetError
from gdp.frontend.common import IR_VERSION
from gdp.rewrites import canonical_names, load_profile, pipeline
from gdp.rewrites.fp16 import ARITHMETICS, rupw2
from gdp.runtime import cache as compile_cache
from gdp.runtime import queue
from gdp.runtime.backends import Executable, get_backend
from gdp.runtime.cache import DiskCache, cache_key, obtain
from gdp.runtime.profiling import Profile
from gdp.runtime.targets import Target
from gdp.signature import (
    TensorSig,
    bind_inputs,
    bind_outputs,
    check_input,
    graph_inputs,
    graph_outputs,
    on_device,
)
from gdp.version import __version__


@dataclass
class Specialization:
    """What one concrete input shape compiled to."""

    key: str
    executable: Executable
    onnx: onnx.ModelProto
    outputs: list[TensorSig]
    kernels: int
    rewrites: list[dict]
    source: str  # "compiled", "disk" (loaded from the disk cache) or "memory"
    compile_s: float = 0.0
    load_s: float = 0.0
    fp16: dict | None = None  # the FP16 pass's report, where the graph runs in fp16
    fusion: dict | None = None  # the backend's fusion report (plan, kernels, boundary bytes)


# gdp.compile(..., precision=...): "auto" is fp16 where the target's profile is an fp16 one
# (the npu), else fp32 (the cpu profile times fp32; x86 without AVX512-FP16 computes fp16 by
# converting to fp32 per op, so it is no faster there).
PRECISIONS = ("auto", "fp32", "fp16")
# Options every target takes (the rest are the backend's).
# fp16_scaling=False is naive fp16 (everything cast, nothing scaled): only for showing what
# the scaling buys (docs/precision.md); it can overflow.
# fp16_arithmetic ("fp16" | "fp32") overrides the profile's: how fp16 values are computed on.
MODEL_OPTIONS = frozenset(
    {
        "precision",
        "input_ranges",
        "fp16_scaling",
        "fp16_arithmetic",
        "specialize",
        "specialize_after",
        "max_specializations",
    }
)
# gdp.compile(..., specialize=...), for inputs with free dimensions on a backend that compiles
# them generically (fp32 on the cpu): "never" runs every shape on the one generic executable;
# "auto" also compiles a shape met `specialize_after` times into its own executable, in a
# background thread while the generic one serves; "always" compiles each new shape before it
# runs (one executable per shape, the behaviour before shape-generic compilation).
SPECIALIZE = ("never", "auto", "always")
DEFAULT_SPECIALIZE = "auto"
DEFAULT_SPECIALIZE_AFTER = 16
# Per-shape executables kept in memory (least recently used evicted; the disk cache keeps them).
DEFAULT_MAX_SPECIALIZATIONS = 8
# The options that choose among executables, not what one compiles to (not in the cache key).
_SHAPE_OPTIONS = ("specialize", "specialize_after", "max_specializations")
# The key of the shape-generic executable among a model's specialisations.
GENERIC = "generic"
# Under "auto" a shape's own executable serves it only if it is not slower than the generic one
# on the shape's inputs: right after its compile, TRIAL_RUNS runs of each, interleaved on the
# target's worker (after the runs queued before them), compared by median; it is dropped if
# SLOWER_BY times the generic's. A static schedule can lose to the generic one (a 1080p flip:
# 1.4 ms against 0.25 in stop 31; 0.8 against 0.1 ms in stop 40, where a trial skipped for
# generic runs under 0.2 ms let it serve). Tried however short the runs: where the timer's
# noise decides, the two are about as fast, and either serving costs little.
TRIAL_RUNS = 5
SLOWER_BY = 1.1


def trial_ratio(own: Callable[[], object], generic: Callable[[], object]) -> float:
    """own()'s median time over generic()'s, TRIAL_RUNS runs each, interleaved (generic first):
    the trial of a specialisation against the generic path it would replace."""
    times: dict[str, list[float]] = {"generic": [], "own": []}
    for _ in range(TRIAL_RUNS):
        for name, run in (("generic", generic), ("own", own)):
            t0 = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t0)
    return statistics.median(times["own"]) / statistics.median(times["generic"])


class Model:
    def __init__(
        self,
        graph: onnx.ModelProto,
        target: Target,
        options: Mapping[str, Any] | None = None,
        cache_dir: str | Path | None = None,
        compile_only: bool = False,
    ) -> None:
        self.target = target
        # Compile into the cache, load nothing (gdp.compile's compile_only: export elsewhere).
        self.compile_only = compile_only
        # What gdp.compile's verification compared (gdp.frontend.verify); None if not verified.
        self.verification: dict | None = None
        self._backend = get_backend(target.backend)
        self.options = dict(options or {})
        self._cache = DiskCache(cache_dir)
        self.precision = self._precision(self.options.get("precision", "auto"))
        self.input_ranges = self._input_ranges(self.options.get("input_ranges"), graph)
        arithmetic = self.options.get("fp16_arithmetic", "fp16")
        if arithmetic not in ARITHMETICS:
            raise TargetError(
                f"fp16_arithmetic: expected one of {list(ARITHMETICS)}, got {arithmetic!r}"
            )
        unknown = sorted(set(self.options) - self._backend.options - MODEL_OPTIONS)
        if unknown:
            raise TargetError(
                f"option {unknown[0]!r}: target {target.name!r} takes "
                f"{sorted(self._backend.options) or 'no options'}"
            )
        self._source = graph
        self.inputs = graph_inputs(graph)
        self.outputs = graph_outputs(graph)
        self.specialize, self.specialize_after, self.max_specializations = self._shape_options()
        # The executables by (shapes, fp16 ranges), least recently used first; the generic one
        # (key GENERIC) is never evicted.
        self._specialized: OrderedDict[Any, Specialization] = OrderedDict()
        self._lock = threading.Lock()
        _models.add(self)  # its lock is made anew in a forked child
        self._last: Specialization | None = None
        self._builds = 0  # executables made (compiled, or loaded from the disk cache)
        self._calls: OrderedDict[tuple, int] = OrderedDict()  # runs per shape ("auto")
        self._pending: dict[tuple, threading.Thread] = {}  # background specialisations
        self._failed: dict[tuple, str] = {}  # shapes whose specialisation failed, and why
        self._evicted = 0
        self.generic_error: str | None = None  # why the generic compile failed, if it did
        free = not all(sig.static for sig in self.inputs)
        # One executable for every shape: the backend takes free dimensions at run time
        # (onnxruntime), or compiles them generically (the cpu), unless asked not to.
        self._generic = (
            free
            and self.precision == "fp32"
            and (
                not self._backend.static_shapes
                or (self._backend.generic_shapes and self.specialize != "always")
            )
        )
        if self._generic:
            try:
                self._generic_specialization()
            except Exception as err:  # any failure: compiling per shape is still correct
                # A graph that does not lower with free dimensions (a rewrite or a TVM op that
                # needs static shapes): compiled per shape instead, said in report().
                if not self._backend.static_shapes:
                    raise
                self._generic = False
                self.generic_error = _summary(err)
        elif not free and not self._scanned_inputs():
            # Nothing left to learn from the data: compile now, as GDPNPU's compile() did.
            self._specialization({s.name: s.shape for s in self.inputs}, {})

    def _shape_options(self) -> tuple[str, int, int]:
        specialize = self.options.get("specialize", DEFAULT_SPECIALIZE)
        if specialize not in SPECIALIZE:
            raise TargetError(f"specialize: expected one of {list(SPECIALIZE)}, got {specialize!r}")
        numbers = []
        for name, default, least in (
            ("specialize_after", DEFAULT_SPECIALIZE_AFTER, 1),
            ("max_specializations", DEFAULT_MAX_SPECIALIZATIONS, 0),
        ):
            value = self.options.get(name, default)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise TargetError(f"{name}: expected an integer >= {least}, got {value!r}")
            numbers.append(value)
        return specialize, numbers[0], numbers[1]

    # -- precision -------------------------------------------------------------------------

    def _precision(self, asked: str) -> str:
        if asked not in PRECISIONS:
            raise TargetError(f"precision: expected one of {list(PRECISIONS)}, got {asked!r}")
        if asked != "auto":
            return asked
        profile = self.target.profile and load_profile(self.target.profile, self._cache.root)
        return "fp16" if profile and profile.dtype == "float16" else "fp32"

    @staticmethod
    def _input_ranges(given, graph: onnx.ModelProto) -> dict[str, tuple[float, float]]:
        names = {v.name for v in graph.graph.input}
        out = {}
        for name, bounds in dict(given or {}).items():
            if name not in names:
                raise InputError(
                    f"input_ranges: unknown input {name!r}, expected one of {sorted(names)}"
                )
            try:
                lo, hi = (float(b) for b in bounds)
            except (TypeError, ValueError):
                raise InputError(
                    f"input_ranges[{name!r}]: expected (lo, hi) numbers, got {bounds!r}"
                ) from None
            if not (np.isfinite(lo) and np.isfinite(hi) and lo <= hi):
                raise InputError(
                    f"input_ranges[{name!r}]: expected finite lo <= hi, got {bounds!r}"
                )
            out[name] = (lo, hi)
        return out

    def _scanned_inputs(self) -> list[str]:
        """Float inputs whose range fp16 must measure on each run (none declared)."""
        if self.precision != "fp16":
            return []
        return [
            s.name for s in self.inputs if s.dtype.kind == "f" and s.name not in self.input_ranges
        ]

    def _ranges(self, arrays: Sequence[np.ndarray]) -> dict[str, tuple[float, float]]:
        """fp16 only: each float input's range for the scales. Declared ranges are checked
        against the data (a value outside raises: a silently overflowing scale is never run);
        undeclared ones are measured and widened to powers of two, so that inputs of a similar
        range share one compiled model."""
        if self.precision != "fp16":
            return {}
        out = {}
        for sig, array in zip(self.inputs, arrays, strict=True):
            if sig.dtype.kind != "f":
                continue
            if on_device(array):
                raise InputError(
                    f"input {sig.name!r}: an fp16 model checks its float inputs' values on the"
                    " host, and this one is a device array: pass a host array, or compile"
                    " with precision='fp32'"
                )
            if array.size == 0:
                continue
            lo, hi = float(np.min(array)), float(np.max(array))
            if not (np.isfinite(lo) and np.isfinite(hi)):
                raise InputError(
                    f"input {sig.name!r}: fp16 scaling needs finite values, got NaN or inf"
                )
            declared = self.input_ranges.get(sig.name)
            if declared is not None:
                if lo < declared[0] or hi > declared[1]:
                    raise InputError(
                        f"input {sig.name!r}: values in [{lo:g}, {hi:g}] break the declared"
                        f" input_ranges {declared}; fp16 scales were chosen for that range"
                    )
                out[sig.name] = declared
            else:
                out[sig.name] = (-rupw2(-lo) if lo < 0 else 0.0, rupw2(hi) if hi > 0 else 0.0)
        return out

    # -- names and graphs -------------------------------------------------------------------

    @property
    def input_names(self) -> list[str]:
        return [s.name for s in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [s.name for s in self.outputs]

    @property
    def onnx(self) -> onnx.ModelProto:
        """The graph the backend received for the most recent input shape (the front end's graph
        while a model with free dimensions has not run yet)."""
        return self._last.onnx if self._last is not None else self._source

    @property
    def source_onnx(self) -> onnx.ModelProto:
        """The graph as the front end produced it, free dimensions included."""
        return self._source

    def report(self) -> dict:
        last = self._last
        return {
            "target": self.target.name,
            "backend": self._backend.name,
            "precision": self.precision,
            "fp16": last.fp16 if last else None,
            "rewrites": list(last.rewrites) if last else [],
            "kernels": last.kernels if last else 0,
            "fusion": last.fusion if last else None,
            "cache": last.source if last else None,
            "compile_s": last.compile_s if last else 0.0,
            "load_s": last.load_s if last else 0.0,
            # The input shapes executables were made for, None for a free dimension (the
            # generic executable), least recently used first.
            "shapes": [
                {s.name: s.shape for s in self.inputs}
                if k == GENERIC
                else dict(zip(self.input_names, k[0], strict=True))
                for k in list(self._specialized)
            ],
            # "static" (no free dimension), "generic" (one executable for every shape, plus
            # per-shape ones for hot shapes) or "per-shape" (one executable per shape: asked
            # for, fp16, or the generic compile failed: generic_error says why).
            "shapes_mode": (
                "static"
                if all(s.static for s in self.inputs)
                else "generic"
                if self._generic
                else "per-shape"
            ),
            "generic_error": self.generic_error,
            # The least extents the generic executable serves, {input: {axis: extent}}: a
            # smaller shape compiles its own executable.
            "generic_min_extents": self._generic_min_extents(),
            "specialize": self.specialize,
            "builds": self._builds,
            "specializations_pending": len(self._pending),
            "specializations_failed": dict(
                (str(list(k[0])), why) for k, why in self._failed.items()
            ),
            "evicted": self._evicted,
            "verify": self.verification,
            "verify_s": self.verification["seconds"] if self.verification else 0.0,
        }

    def save(self, path: str | Path) -> None:
        """Write the front end's graph with the target and options; `gdp.load` reads it back and
        takes compiled code from the cache, so a serving process needs no TensorFlow. The file
        records a SHA-256 of its graph (metadata `gdp.sha256`), which `gdp.load` verifies: a
        damaged or edited file is refused. (A saved model is a graph gdp compiles itself, not
        code: the checksum guards its integrity; see docs/reliability.md.)"""
        graph = onnx.ModelProto()
        graph.CopyFrom(self._source)
        meta = {"gdp.target": self.target.name, "gdp.options": json.dumps(self.options)}
        for prop in list(graph.metadata_props):
            if prop.key in meta:
                graph.metadata_props.remove(prop)
        for prop in list(graph.metadata_props):
            if prop.key == SAVED_SHA256:
                graph.metadata_props.remove(prop)
        for k, v in meta.items():
            graph.metadata_props.add(key=k, value=v)
        # A checksum of everything else, last: gdp.load refuses a file changed since.
        graph.metadata_props.add(key=SAVED_SHA256, value=_graph_sha256(graph))
        onnx.save(graph, str(path))

    # -- compilation -----------------------------------------------------------------------

    def _generic_specialization(self) -> Specialization:
        found = self._specialized.get(GENERIC)
        if found is None:
            with self._lock:
                found = self._specialized.get(GENERIC)
                if found is None:
                    free = {s.name: s.shape for s in self.inputs}
                    found = self._build(free, dict(self.input_ranges), generic=True)
                    self._specialized[GENERIC] = found
        self._last = found
        return found

    def _specialization(
        self,
        shapes: Mapping[str, tuple],
        ranges: Mapping[str, tuple],
        arrays: Sequence[np.ndarray] | None = None,
    ) -> Specialization:
        """The executable for inputs of `shapes` (`arrays`, where given, are the call's inputs:
        a background specialisation is timed on them against the generic executable)."""
        shape_key = tuple(tuple(shapes[n]) for n in self.input_names)
        key = (shape_key, tuple(sorted(ranges.items())))
        if self._generic:
            return self._generic_or_specialized(key, shapes, ranges, arrays)
        return self._own_specialization(key, shapes, ranges)

    def _own_specialization(
        self, key: tuple, shapes: Mapping[str, tuple], ranges: Mapping[str, tuple]
    ) -> Specialization:
        """The shape's own executable, compiled now (in this thread) if it was not yet."""
        found = self._specialized.get(key)
        if found is not None:
            self._touch(key)
            self._last = found
            return found
        with self._lock:
            found = self._specialized.get(key)
            if found is None:
                shape_map = {n: tuple(shapes[n]) for n in self.input_names}
                found = self._build(shape_map, {**self.input_ranges, **ranges})
                self._keep(key, found)
        self._last = found
        return found

    def _generic_or_specialized(
        self,
        key: tuple,
        shapes: Mapping[str, tuple],
        ranges: Mapping[str, tuple],
        arrays: Sequence[np.ndarray] | None = None,
    ) -> Specialization:
        """The executable for one call of a model compiled generically: the shape's own where one
        was made, else the generic one; under "auto", a shape's `specialize_after`-th call starts
        its specialisation in a background thread. A shape below the generic executable's least
        extents (`Executable.min_extents`) compiles its own now."""
        found = self._specialized.get(key)
        if found is not None:
            self._touch(key)
            self._last = found
            return found
        if not self._serves_generically(shapes):
            return self._own_specialization(key, shapes, ranges)
        if self.specialize == "auto" and self._backend.static_shapes:
            with self._lock:
                calls = self._calls.pop(key, 0) + 1
                self._calls[key] = calls
                while len(self._calls) > 4 * max(1, self.max_specializations) + 16:
                    self._calls.popitem(last=False)
                start = (
                    calls >= self.specialize_after
                    and self.max_specializations > 0
                    and key not in self._pending
                    and key not in self._failed
                    and key not in self._specialized
                )
                if start:
                    # Not a daemon: the interpreter waits for it at exit. A daemon thread
                    # stopped inside TVM's compiler at shutdown can abort the process
                    # ("terminate called without an active exception").
                    thread = threading.Thread(
                        target=self._specialize_in_background,
                        args=(key, dict(shapes), arrays),
                        name="gdp-specialize",
                    )
                    self._pending[key] = thread
                    thread.start()
        return self._generic_specialization()

    def _generic_min_extents(self) -> dict[str, dict[int, int]]:
        generic = self._specialized.get(GENERIC)
        out: dict[str, dict[int, int]] = {}
        for index, axis, least in generic.executable.min_extents if generic else ():
            out.setdefault(self.input_names[index], {})[axis] = least
        return out

    def _serves_generically(self, shapes: Mapping[str, tuple]) -> bool:
        generic = self._generic_specialization()
        return generic.executable.serves([tuple(shapes[n]) for n in self.input_names])

    def _specialize_in_background(
        self, key: tuple, shapes: dict[str, tuple], sample: Sequence[np.ndarray] | None = None
    ) -> None:
        try:
            built = self._build(shapes, dict(self.input_ranges))
            slower = self._slower(built, sample) if sample is not None else None
        except Exception as err:  # the generic executable keeps serving the shape
            slower = _summary(err)
        with self._lock:
            if slower is None:
                self._keep(key, built)
            else:
                self._failed[key] = slower
            self._pending.pop(key, None)

    def _slower(self, built: Specialization, sample: Sequence[np.ndarray]) -> str | None:
        """Why `built` should not serve its shape (slower than the generic executable on
        `sample`; see TRIAL_RUNS), or None. Runs on the target's worker, so that no other run
        of these executables overlaps the trial's."""
        generic = self._generic_specialization().executable
        own = built.executable

        def trial() -> str | None:
            ratio = trial_ratio(lambda: own.run(list(sample)), lambda: generic.run(list(sample)))
            if ratio <= SLOWER_BY:
                return None
            return (
                f"its own executable was {ratio:.2f}x the generic one's time on the shape's"
                f" inputs (median of {TRIAL_RUNS} runs each): the generic one serves it"
            )

        return queue.worker(self.target.name).call(trial)

    def wait_specializations(self, timeout: float | None = None) -> None:
        """Wait for the specialisations compiling in the background (specialize="auto")."""
        for thread in list(self._pending.values()):
            thread.join(timeout)

    def _touch(self, key) -> None:
        """Mark a specialisation as just used (LRU order)."""
        with contextlib.suppress(KeyError):  # evicted meanwhile by another thread
            self._specialized.move_to_end(key)

    def _keep(self, key, spec: Specialization) -> None:
        """Add a per-shape executable; beyond max_specializations, evict the least recently
        used (never the generic one). Called under self._lock."""
        self._specialized[key] = spec
        per_shape = [k for k in self._specialized if k != GENERIC]
        # A model without free dimensions has one shape: it is never evicted.
        bound = max(1, self.max_specializations)
        for old in per_shape[: max(0, len(per_shape) - bound)]:
            del self._specialized[old]
            self._calls.pop(old, None)  # specialised again only once hot again
            self._evicted += 1

    def _build(
        self, shapes: dict[str, tuple], ranges: dict[str, tuple], generic: bool = False
    ) -> Specialization:
        backend = self._backend
        fp16 = self.precision == "fp16"
        profile = (
            load_profile(self.target.profile, self._cache.root) if self.target.profile else None
        )
        fp16_stage = None
        if fp16:
            fp16_stage = pipeline.Fp16(
                ranges,
                scaling=bool(self.options.get("fp16_scaling", True)),
                arithmetic=self.options.get(
                    "fp16_arithmetic", profile.fp16_arithmetic if profile else "fp16"
                ),
            )
        # The onnxscript optimizer and rewriter are not thread-safe: one graph at a time.
        with compile_cache.COMPILE_LOCK:
            prepared = pipeline.prepare(
                self._source,
                # fp16's range analysis needs every shape; a generic executable keeps them free
                shapes=None if generic or not (backend.static_shapes or fp16) else shapes,
                required=backend.required_rewrites,
                substitute=self.target.substitutes,
                profile=profile,
                fp16=fp16_stage,
                max_ir_version=IR_VERSION,
            )
        graph = prepared.graph
        key = cache_key(
            # Conversions of one program differ in generated names: hash the canonical form.
            canonical_names(graph).SerializeToString(deterministic=True),
            self.target.name,
            backend.name,
            backend.fingerprint(),
            json.dumps(
                {k: v for k, v in self.options.items() if k not in _SHAPE_OPTIONS},
                sort_keys=True,
                default=str,
            ),
            json.dumps(backend.profile_facts(profile), sort_keys=True),
            __version__,
            # A generic executable never shares an entry with one compiled for a shape.
            "shapes: generic" if generic else "shapes: per-shape",
        )
        got = obtain(
            self._cache,
            backend,
            key,
            lambda d: backend.compile(graph, d, self.options, profile),
            load=not self.compile_only,
        )
        outputs = graph_outputs(graph)
        self._builds += 1
        return Specialization(
            key=key,
            executable=got.executable,
            onnx=graph,
            outputs=outputs,
            kernels=got.meta["kernels"],
            fusion=got.meta.get("fusion"),
            rewrites=prepared.rewrites,
            source=got.source,
            compile_s=got.compile_s,
            load_s=got.load_s,
            fp16=prepared.fp16,
        )

    # -- running ---------------------------------------------------------------------------

    def _bind(self, args: Sequence, kwargs: Mapping[str, Any]) -> list[np.ndarray]:
        """Inputs by position or name -> validated arrays in graph input order."""
        try:
            return bind_inputs(self.inputs, args, kwargs)
        except MemoryError:
            raise _out_of_memory(self.inputs, args, kwargs) from None

    def submit(
        self,
        inputs: Mapping[str, Any] | Sequence | np.ndarray,
        outputs: Mapping[str, np.ndarray] | None = None,
        profile: bool = False,
        wait: bool = False,
        block: bool = True,
    ) -> queue.Task:
        """Validate, compile for the shape if needed, and enqueue on the target's worker (with
        `wait`, run in this thread instead when the worker has nothing queued). A full queue
        (queue.MAX_QUEUED) makes this wait for room, or with `block=False` raise
        QueueFullError."""
        if isinstance(inputs, Mapping):
            arrays = self._bind((), inputs)
        elif isinstance(inputs, list | tuple):
            arrays = self._bind(inputs, {})
        else:
            arrays = self._bind((inputs,), {})
        return self._enqueue(arrays, outputs, profile, wait, block)

    def _enqueue(
        self,
        arrays: list[np.ndarray],
        outputs: Mapping[str, np.ndarray] | None,
        profile: bool,
        wait: bool,
        block: bool = True,
    ) -> queue.Task:
        shapes = {s.name: a.shape for s, a in zip(self.inputs, arrays, strict=True)}
        spec = self._specialization(shapes, self._ranges(arrays), arrays)
        buffers = bind_outputs(spec.outputs, outputs or {})
        task = queue.Task(Profile(self.target.name) if profile else None)
        run = _Run(self.output_names, spec, arrays, buffers, task.profile)
        worker = queue.worker(self.target.name)
        return worker.run_now(run, task) if wait else worker.submit(run, task, block)

    def run_arrays(self, arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
        """Run synchronously on arrays a caller already made fit the inputs (in graph input
        order, of their dtypes and ranks, C-contiguous: gdp.cv2's eager calls), in the calling
        thread where nothing is queued: the outputs by name. No task, no output buffers, no
        profile: the least a synchronous call can pay. The executable still checks the shapes
        (a mismatch raises, nothing is written)."""
        shapes = {s.name: a.shape for s, a in zip(self.inputs, arrays, strict=True)}
        spec = self._specialization(shapes, self._ranges(arrays), arrays)
        worker = queue.worker(self.target.name)
        results = worker.call(lambda: spec.executable.run(arrays))
        return {s.name: r for s, r in zip(spec.outputs, results, strict=True)}

    def __call__(self, *args: Any, **kwargs: Any) -> np.ndarray | dict[str, np.ndarray]:
        """Run synchronously: model(x), model(a=x, b=y) or model({"a": x, "b": y}).
        One output -> its array; several -> a dict by output name, in output order."""
        if len(args) == 1 and isinstance(args[0], Mapping) and not kwargs:
            arrays = self._bind((), args[0])
        else:
            arrays = self._bind(args, kwargs)
        # As submit(wait=True) runs it, without the task a caller that waits does not need.
        shapes = {s.name: a.shape for s, a in zip(self.inputs, arrays, strict=True)}
        spec = self._specialization(shapes, self._ranges(arrays), arrays)
        run = _Run(self.output_names, spec, arrays, {}, None)
        result = queue.worker(self.target.name).call(run)
        return next(iter(result.values())) if len(result) == 1 else result

    # -- ragged batches ---------------------------------------------------------------------

    def submit_batch(
        self,
        images: Sequence,
        outputs: Mapping[str, np.ndarray] | np.ndarray | None = None,
        profile: bool = False,
        wait: bool = False,
        block: bool = True,
    ) -> queue.Task:
        """Enqueue one task that runs every entry of `images` (arrays of any size for a model
        with one input; dicts by name or sequences in input order for several) and stacks each
        output along a new first axis: its result is {name: (N, ...) array}. `outputs` are
        (N, ...) buffers by name (a bare array for a one-output model), filled in place once
        every run succeeded. All images are validated here, before anything is queued; a refused
        or failed batch writes nothing."""
        entries = self._bind_batch(images)
        count = len(entries)
        generic = self._generic_specialization() if self._generic else None
        if (
            generic is not None
            and self.specialize == "never"
            and all(generic.executable.serves([a.shape for a in arrays]) for arrays in entries)
        ):
            # Every size runs on the one generic executable: nothing to look up per image.
            specs = [generic] * count
        else:
            by_shape: dict[tuple, Specialization] = {}
            specs = []
            for arrays in entries:
                shapes = tuple(a.shape for a in arrays)
                spec = by_shape.get(shapes) if self.precision != "fp16" else None
                if spec is None:
                    named = dict(zip(self.input_names, shapes, strict=True))
                    spec = self._specialization(named, self._ranges(arrays))
                    by_shape[shapes] = spec
                specs.append(spec)
        # The outputs' shapes (without the batch axis) where every executable declares them.
        declared = _stacked_shapes(self.output_names, {id(s): s for s in specs}.values())
        buffers = self._bind_batch_outputs(outputs, count, declared)
        task = queue.Task(Profile(self.target.name) if profile else None)
        run = _BatchRun(self.output_names, specs, entries, declared, buffers, task.profile)
        worker = queue.worker(self.target.name)
        return worker.run_now(run, task) if wait else worker.submit(run, task, block)

    def run_batch(
        self,
        images: Sequence,
        outputs: Mapping[str, np.ndarray] | np.ndarray | None = None,
    ) -> np.ndarray | dict[str, np.ndarray]:
        """Run synchronously on a ragged batch (images of different sizes) and return the stacked
        outputs: one output -> its (N, ...) array; several -> a dict by output name. See
        `submit_batch`."""
        result = self.submit_batch(images, outputs, wait=True).result()
        return next(iter(result.values())) if len(result) == 1 else result

    def _bind_batch(self, images: Sequence) -> list[list[np.ndarray]]:
        """Every entry of a batch -> validated arrays in graph input order; an error names the
        entry's index."""
        if isinstance(images, np.ndarray):
            if images.ndim == 0:
                raise InputError("run_batch: expected a list of images, got a 0-d array")
            images = list(images)
        elif isinstance(images, Mapping) or not isinstance(images, Sequence):
            raise InputError(
                f"run_batch: expected a list of images (or of input dicts), got "
                f"{type(images).__name__}"
            )
        if len(images) == 0:
            raise InputError("run_batch: the batch is empty; expected at least one image")
        single = self.inputs[0] if len(self.inputs) == 1 else None
        entries = []
        for n, item in enumerate(images):
            try:
                if single is not None and isinstance(item, np.ndarray):
                    try:
                        entries.append([check_input(single, item)])
                    except MemoryError:
                        raise _out_of_memory(self.inputs, (item,), {}) from None
                elif isinstance(item, Mapping):
                    entries.append(self._bind((), item))
                elif single is not None or not isinstance(item, list | tuple):
                    entries.append(self._bind((item,), {}))
                else:
                    entries.append(self._bind(item, {}))
            except InputError as err:
                raise InputError(f"image {n}: {err}") from None
        return entries

    def _bind_batch_outputs(
        self,
        outputs: Mapping[str, np.ndarray] | np.ndarray | None,
        count: int,
        declared: dict[str, tuple[int | None, ...] | None],
    ) -> dict[str, np.ndarray]:
        """Output buffers of a batch: (N, ...) C-contiguous writable arrays of the output's
        dtype; a dimension the executables leave free is checked after the runs."""
        if outputs is None:
            return {}
        if isinstance(outputs, np.ndarray):
            if len(self.outputs) != 1:
                raise OutputBufferError(
                    f"run_batch: the model has outputs {self.output_names}: give the buffers as"
                    " a dict by name"
                )
            outputs = {self.output_names[0]: outputs}
        if not isinstance(outputs, Mapping):
            raise OutputBufferError(
                f"run_batch: expected output buffers as a dict by name, got "
                f"{type(outputs).__name__}"
            )
        sigs = {s.name: s for s in self.outputs}
        buffers = {}
        for name, buf in outputs.items():
            if name not in sigs:
                raise OutputBufferError(
                    f"unknown output {name!r}: expected one of {self.output_names}"
                )
            if not isinstance(buf, np.ndarray):
                raise OutputBufferError(
                    f"output {name!r}: expected a numpy.ndarray to fill, got {type(buf).__name__}"
                )
            if buf.dtype != sigs[name].dtype:
                raise OutputBufferError(
                    f"output {name!r}: expected dtype {sigs[name].dtype.name}, got {buf.dtype.name}"
                )
            if not buf.flags.writeable:
                raise OutputBufferError(f"output {name!r}: the array is read-only")
            if not buf.flags.c_contiguous:
                raise OutputBufferError(f"output {name!r}: expected a C-contiguous array")
            shape = declared[name]
            want = (count, *shape) if shape is not None else None
            ok = (
                buf.ndim >= 1
                and buf.shape[0] == count
                and (
                    want is None
                    or (
                        len(want) == buf.ndim
                        and all(w is None or w == g for w, g in zip(want, buf.shape, strict=True))
                    )
                )
            )
            if not ok:
                dims = (
                    "?"
                    if shape is None
                    else ", ".join("None" if d is None else str(d) for d in shape)
                )
                raise OutputBufferError(
                    f"output {name!r}: expected a buffer of shape ({count}, {dims}) for a batch"
                    f" of {count}, got {buf.shape}"
                )
            buffers[name] = buf
        return buffers

    # -- ahead-of-time bundles ---------------------------------------------------------------

    def export(self, directory: str | Path, shapes: Sequence | None = None) -> Path:
        """Write every executable compiled so far (after compiling `shapes` first: dicts of
        dims, or strings like "image=480x640x3", `?` for the shape-generic executable) with a
        manifest into the bundle `directory`; `gdp.load(directory)` runs them without compiling
        (gdp.bundle)."""
        from gdp import bundle

        return bundle.export(self, directory, shapes)


SAVED_SHA256 = "gdp.sha256"

_models: weakref.WeakSet[Model] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A model's lock held by a compiling thread at the fork stays held in the child, where
    that thread does not exist; background specialisations do not run there either."""
    for model in list(_models):
        model._lock = threading.Lock()
        model._pending = {}


os.register_at_fork(after_in_child=_after_fork_in_child)


def _graph_sha256(graph: onnx.ModelProto) -> str:
    import hashlib

    return hashlib.sha256(graph.SerializeToString(deterministic=True)).hexdigest()


def check_saved(path: Path) -> None:
    """A FrontendError if the file `path`, written by Model.save, no longer matches the SHA-256
    recorded in it. Files without one (any other ONNX file) pass; an unreadable one is left for
    the front end to report."""
    from gdp.errors import FrontendError

    try:
        graph = onnx.load(str(path))
    except Exception:  # protobuf raises its own DecodeError family
        return
    props = [p for p in graph.metadata_props if p.key == SAVED_SHA256]
    if not props:
        return
    recorded = props[-1].value
    for prop in props:
        graph.metadata_props.remove(prop)
    if _graph_sha256(graph) != recorded:
        raise FrontendError(
            f"{path}: the saved model does not match the SHA-256 recorded when it was saved "
            "(the file was damaged or edited since); save it again"
        )


def _out_of_memory(sigs, args: Sequence, kwargs: Mapping[str, Any]) -> InputError:
    """An InputError for a MemoryError met while binding inputs (a copy of a huge input, such as
    a broadcast view, made contiguous or cast): names the largest input given."""
    given = dict(kwargs) if kwargs else {}
    if len(args) == 1 and isinstance(args[0], Mapping):
        given = dict(args[0])
    else:
        given.update({s.name: a for s, a in zip(sigs, args, strict=False)})

    def nbytes(a: Any) -> int:
        shape, dtype = getattr(a, "shape", ()), getattr(a, "dtype", np.dtype(np.float32))
        return int(np.prod(shape, dtype=np.float64)) * np.dtype(dtype).itemsize

    if not given:
        return InputError("inputs: out of memory while reading the inputs")
    name, array = max(given.items(), key=lambda kv: nbytes(kv[1]))
    return InputError(
        f"input {name!r}: out of memory making a contiguous copy of shape "
        f"{tuple(getattr(array, 'shape', ()))} ({nbytes(array) / 2**30:.1f} GiB); "
        "pass a smaller input"
    )


def _summary(err: Exception) -> str:
    """An exception as one line for report()."""
    return f"{type(err).__name__}: {' '.join(str(err).split())[:400]}"


class _Run:
    """One queued execution. Writes the caller's output buffers only after everything succeeded."""

    def __init__(self, names, spec, arrays, buffers, profile) -> None:
        self.names, self.spec, self.arrays = names, spec, arrays
        self.buffers, self.profile = buffers, profile

    def __call__(self) -> dict[str, np.ndarray]:
        return self._deliver(self.spec.executable.run(self.arrays, self.profile))

    @property
    def asynchronous(self) -> bool:
        """Whether launch() returns before the device is done (queue.Worker then launches the
        next queued run before it finishes this one)."""
        return self.spec.executable.launches_asynchronously

    def launch(self) -> Callable[[], dict[str, np.ndarray]]:
        """Start the run on the executable: the function that waits for it and delivers its
        outputs."""
        finish = self.spec.executable.launch(self.arrays, self.profile)
        return lambda: self._deliver(finish())

    def _deliver(self, results: list[np.ndarray]) -> dict[str, np.ndarray]:
        by_name = {s.name: r for s, r in zip(self.spec.outputs, results, strict=True)}
        for name, buf in self.buffers.items():
            got = by_name[name]
            if got.shape != buf.shape or got.dtype != buf.dtype:
                raise ExecutionError(
                    f"output {name!r}: the run produced {got.dtype.name}{list(got.shape)}, which "
                    f"does not fit the given buffer {buf.dtype.name}{list(buf.shape)}"
                )
        t0 = time.perf_counter()
        out: dict[str, np.ndarray] = {}
        for name in self.names:
            if name in self.buffers:
                np.copyto(self.buffers[name], by_name[name])
                out[name] = self.buffers[name]
            else:
                out[name] = by_name[name]
        if self.profile is not None:
            self.profile.copy_out_s += time.perf_counter() - t0
        return out


def _direct_stack(run: _BatchRun) -> dict[str, np.ndarray] | None:
    """A batch on one executable that runs as one kernel (TvmExecutable.direct), each entry
    written straight into its row of the stacks (the caller's buffers, or new arrays): no
    per-image output, no copy. None where that does not apply (a profile, several executables,
    outputs of different shapes, a buffer that does not fit): the general way then runs, and
    says what was wrong."""
    executable = run.specs[0].executable
    shapes_of = getattr(executable, "output_shapes", None)
    if (
        run.profile is not None
        or shapes_of is None
        or any(s is not run.specs[0] for s in run.specs)
    ):
        return None
    first = shapes_of(run.entries[0])
    if first is None or any(shapes_of(e) != first for e in run.entries[1:]):
        return None
    order = [s.name for s in run.specs[0].outputs]
    stacks = {}
    for name, (dtype, shape) in zip(order, first, strict=True):
        buf = run.buffers.get(name)
        if buf is None:
            buf = np.empty((len(run.entries), *shape), dtype)
        elif buf.shape[1:] != shape or buf.dtype != dtype:
            return None
        stacks[name] = buf
    into = [[stacks[name][n] for name in order] for n in range(len(run.entries))]
    executable.run_many(run.entries, None, into)
    return {name: stacks[name] for name in run.names}


def _stacked_shapes(names: list[str], specs) -> dict[str, tuple[int | None, ...] | None]:
    """Each output's shape as the batch's executables declare it (None for a dimension they leave
    free, or for the whole shape where they disagree on the rank)."""
    shapes: dict[str, tuple[int | None, ...] | None] = {}
    for spec in specs:
        for sig in spec.outputs:
            old = shapes.get(sig.name, sig.shape)
            if old is None or len(old) != len(sig.shape):
                shapes[sig.name] = None
            else:
                shapes[sig.name] = tuple(
                    a if a == b else None for a, b in zip(old, sig.shape, strict=True)
                )
    return {name: shapes.get(name) for name in names}


class _BatchRun:
    """One queued ragged batch: every entry run on its executable (one backend call per
    executable, which loops over the entries), the outputs checked to stack, then stacked into
    the caller's buffers or new arrays. Nothing is written before every run succeeded, except
    on the direct way (_direct_stack), where each kernel writes its row in place once every
    entry's inputs are bound: what could refuse a run (dtypes, shapes, the sizes an executable
    serves, binding) is checked before the first kernel, which checks nothing more."""

    def __init__(self, names, specs, entries, declared, buffers, profile) -> None:
        self.names, self.specs, self.entries = names, specs, entries
        self.declared, self.buffers, self.profile = declared, buffers, profile

    def __call__(self) -> dict[str, np.ndarray]:
        stacked = _direct_stack(self)
        if stacked is not None:
            return stacked
        count = len(self.entries)
        # results[n][k]: image n's output k (in self.names' order).
        results: list[list[np.ndarray]] = [[]] * count
        groups: dict[int, list[int]] = {}
        for n, spec in enumerate(self.specs):
            groups.setdefault(id(spec), []).append(n)
        for indices in groups.values():
            spec = self.specs[indices[0]]
            got = spec.executable.run_many([self.entries[n] for n in indices], self.profile)
            order = [s.name for s in spec.outputs]
            if order != self.names:
                got = [[arrays[order.index(name)] for name in self.names] for arrays in got]
            for n, arrays in zip(indices, got, strict=True):
                results[n] = arrays
        first = results[0]
        for k, name in enumerate(self.names):
            want = first[k]
            for n, result in enumerate(results):
                got = result[k]
                if got.shape != want.shape or got.dtype != want.dtype:
                    raise InputError(
                        f"output {name!r} depends on the input size: image 0 gave "
                        f"{want.dtype.name}{list(want.shape)}, image {n} gave "
                        f"{got.dtype.name}{list(got.shape)}; a batch stacks outputs of one shape"
                    )
            buf = self.buffers.get(name)
            if buf is not None and buf.shape[1:] != want.shape:
                raise OutputBufferError(
                    f"output {name!r}: the runs produced {list(want.shape)} per image, which does"
                    f" not fit the given buffer {list(buf.shape)}"
                )
        t0 = time.perf_counter()
        out: dict[str, np.ndarray] = {}
        for k, name in enumerate(self.names):
            buf = self.buffers.get(name)
            if buf is None:
                buf = np.empty((count, *first[k].shape), first[k].dtype)
            for n, result in enumerate(results):
                buf[n] = result[k]
            out[name] = buf
        if self.profile is not None:
            self.profile.copy_out_s += time.perf_counter() - t0
        return out
