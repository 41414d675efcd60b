"""What every TVM backend shares: compile = import the ONNX graph into Relax (relax_import.py),
lower it through the one pipeline with the backend's schedules and fusion plan (lowering.py),
build and export a shared library; load = the library on the backend's device, run by the Relax
VM (executable.py).

A backend (llvm.py, and a GPU one beside it) subclasses TvmBackend and provides:
- `name`, and `target()`: the tvm.target.Target it compiles for;
- `device()`: the tvm.runtime.Device its executables run on;
- `pipeline`: TVM's own pass lists for that target (tvm.relax.backend.<kind>.pipeline);
- `schedules_module`: the name of its schedule module, publishing schedule(mod, target),
  KERNEL_RULES (what one kernel may hold, for the fusion planner) and row_scan(stmt)
  (fusion.Schedules), imported when compiling (`schedules`; a backend may set `schedules`
  itself instead);
- `toolchain()`: what of the target and its compiler changes the code (for the cache key);
optionally `finish(mod)` (the last step on the scheduled module) and `prepare_load()` (what
must be set before the first kernel runs, such as a thread pool's size).

Loading needs TVM's runtime only (`TVM_USE_RUNTIME_LIB=1`, no libtvm_compiler.so): what imports
TVM's compiler (Relax, the importer, the lowering, the schedules) is imported by compile(), and
the code hash reads the compiling modules' files without importing them.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.util
import inspect
import traceback
from abc import abstractmethod
from pathlib import Path
from types import ModuleType

import onnx
import tvm

from gdp.errors import CompileError, TargetError
from gdp.runtime.backends.base import Backend, CostProfile, Executable
from gdp.runtime.backends.tvm.executable import TvmExecutable

LIBRARY = "model.so"

# The modules every TVM backend compiles with (the shared lowering, the fusion planner and its
# adapter, the executable, this module): their code shapes the compiled kernels.
SHARED_CODE = (
    "gdp.runtime.backends.tvm.relax_import",
    "gdp.runtime.backends.tvm.lowering",
    "gdp.runtime.backends.tvm.fusion",
    "gdp.runtime.backends.tvm.executable",
    "gdp.runtime.fusion.planner",
    __name__,
)


def source_file(module: str) -> Path:
    """The file of `module`, found without importing it (a compiling module imports TVM's
    compiler, which a runtime-only TVM lacks)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ImportError(f"no source file for module {module}")
    return Path(spec.origin)


# The least file-size limit (RLIMIT_FSIZE's hard limit) a compile is tried under: a library
# is a few MB; below this, the compile is refused before LLVM writes anything.
MIN_FILE_SIZE_LIMIT = 256 << 20


@contextlib.contextmanager
def _room_to_write():
    """A file-size limit (`ulimit -f`) lifted to its hard limit while LLVM writes the library.

    Past the soft limit the kernel kills the process with SIGXFSZ, or, where that signal is
    ignored, LLVM's failed write ends it with "LLVM ERROR: IO failure on output stream":
    either way the caller's process dies, where a full disk gives a CompileError. Compiles
    take turns (COMPILE_LOCK), so one lift is in force at a time."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    if hard != resource.RLIM_INFINITY and hard < MIN_FILE_SIZE_LIMIT:
        raise CompileError(
            f"the process's file-size limit (RLIMIT_FSIZE, ulimit -f) is {hard} bytes, below"
            f" the {MIN_FILE_SIZE_LIMIT} gdp needs to write a compiled library; raise it"
        )
    if soft == hard:
        yield
        return
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


class TvmBackend(Backend):
    static_shapes = True
    # What TVM's Relax ONNX importer needs of the graph (gdp.rewrites' canonical forms).
    required_rewrites = (
        "omit_empty_resize_inputs",
        "reverse_sequence_to_slice",
        "pad_in_integer_type",
        "static_compress",
    )
    options = frozenset({"fusion"})
    pipeline: ModuleType
    schedules_module: str

    @functools.cached_property
    def schedules(self) -> ModuleType:
        """The schedule module (fusion.Schedules), imported on first use: compiling only."""
        return importlib.import_module(self.schedules_module)

    @abstractmethod
    def target(self) -> tvm.target.Target:
        """The target the kernels are compiled for."""

    @abstractmethod
    def device(self) -> tvm.runtime.Device:
        """The device the executables run on."""

    @abstractmethod
    def toolchain(self) -> str:
        """What of the target and its compiler changes the compiled code (for the cache key)."""

    def finish(self, mod: tvm.IRModule) -> tvm.IRModule:
        """The last step on the scheduled module, before the build."""
        return mod

    def tir_pipeline(self) -> str:
        """The name of the TIR pipeline tvm.compile lowers the kernels with."""
        return "default"

    def prepare_load(self) -> None:
        """What must be set before the first kernel runs."""

    def fingerprint(self) -> str:
        return f"tvm-{tvm.__version__}-{self.toolchain()}-code-{self.code_hash}"

    def runtime_fingerprint(self) -> str:
        # The toolchain (LLVM's version and target) made the code; TVM's runtime and gdp's
        # calling conventions (the code hash) load and run it.
        return f"tvm-{tvm.__version__}-{self.name}-code-{self.code_hash}"

    @functools.cached_property
    def code_hash(self) -> str:
        """A hash of the code that shapes the compiled kernels (the shared lowering, the fusion
        planner and its adapter, this backend and its schedules): a changed schedule must not
        load kernels cached by the old one."""
        digest = hashlib.sha256()
        # ... and the modules defining this backend and its schedules (named, or given).
        schedules = getattr(self, "schedules_module", None)
        if schedules is None:
            schedules = inspect.getmodule(self.schedules).__name__
        own = (inspect.getmodule(type(self)).__name__, schedules)
        for module in (*SHARED_CODE, *own):
            digest.update(source_file(module).read_bytes())
        return digest.hexdigest()[:16]

    def profile_facts(self, profile: CostProfile | None) -> dict:
        if profile is None:
            return {}
        return {"fusion_cost": [profile.fusion_alpha, profile.fusion_beta]}

    def compile(
        self, model: onnx.ModelProto, outdir: Path, options: dict, profile: CostProfile | None
    ) -> dict:
        from gdp.runtime.backends.tvm import lowering, relax_import
        from gdp.runtime.backends.tvm.fusion import DEFAULT_FUSION, FUSIONS
        from gdp.runtime.fusion import CostModel

        mod = relax_import.import_onnx(model)
        # The least run-time extents the generic kernels were written for (inbound slices).
        mod, min_extents = relax_import.min_extents(mod)
        generic = _free_extents(mod)
        target = self.target()
        mode = options.get("fusion", DEFAULT_FUSION)
        if mode not in FUSIONS:
            raise TargetError(f"fusion: expected one of {list(FUSIONS)}, got {mode!r}")
        cost = CostModel(profile.fusion_alpha, profile.fusion_beta) if profile else CostModel()
        try:
            try:
                lowered, report, direct = lowering.lower(
                    mod, target, self.pipeline, self.schedules, mode, cost, self.finish
                )
            except Exception as err:
                if mode != "gdp" or not generic:
                    raise
                # gdp's plan with run-time extents can group kernels FuseTIR then refuses
                # (RenewDefs: a tir variable defined twice): TVM's FuseOps, said in the report.
                lowered, report, direct = lowering.lower(
                    mod, target, self.pipeline, self.schedules, "tvm", cost, self.finish
                )
                report["gdp_plan_failed"] = str(err).strip().splitlines()[-1][:300]
            mod = lowered
            kernels = sum(1 for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc))
            with _build_context(generic), _room_to_write():
                built = tvm.compile(
                    mod, target=target, relax_pipeline=None, tir_pipeline=self.tir_pipeline()
                )
                built.export_library(str(outdir / LIBRARY))
        except CompileError:
            raise
        except Exception as err:
            raise CompileError(
                f"TVM failed to compile the graph for {target}: {_described(err)}"
            ) from err
        return {
            "files": [LIBRARY],
            "kernels": kernels,
            "fusion": report,
            "min_extents": min_extents,
            "direct": direct,
        }

    def load(self, artifact_dir: Path, meta: dict) -> Executable:
        self.prepare_load()
        loaded = TvmExecutable(tvm.runtime.load_module(str(artifact_dir / LIBRARY)), self.device())
        loaded.min_extents = tuple(tuple(m) for m in meta.get("min_extents", ()))
        loaded.set_direct(meta.get("direct"))
        return loaded


# TIR passes left out of a shape-generic build. RemoveNoOp proves statements to be no-ops with
# the arithmetic analyzer, which on kernels of run-time extents (clamped gather indices, border
# partitions) is slow: 18 of 27 s of compiling gdp.cv2's warpAffine, for nothing removed that
# the result depends on (a no-op does nothing; LLVM drops what is dead).
_GENERIC_DISABLED_PASSES = ["tirx.RemoveNoOp"]


def _build_context(generic: bool):
    """The caller's pass context, less _GENERIC_DISABLED_PASSES for a shape-generic module."""
    if not generic:
        return contextlib.nullcontext()
    current = tvm.transform.PassContext.current()
    return tvm.transform.PassContext(
        opt_level=current.opt_level,
        required_pass=list(current.required_pass),
        disabled_pass=[*current.disabled_pass, *_GENERIC_DISABLED_PASSES],
        config=dict(current.config),
    )


def _free_extents(mod: tvm.IRModule) -> bool:
    """Whether `main` takes a tensor whose extents are known only at run time (a shape-generic
    model)."""
    main = mod["main"]
    return any(
        isinstance(p.ty, tvm.relax.TensorType)
        and isinstance(p.ty.shape, tvm.relax.ShapeExpr)
        and not all(isinstance(d, tvm.tirx.IntImm) for d in p.ty.shape.values)
        for p in main.params
    )


def _described(err: Exception) -> str:
    """An exception's message, or where it was raised when it has none (a bare assert in one
    of TVM's Python passes: "AssertionError at .../legalize_ops/manipulate.py:42 in
    reshape_call_te")."""
    message = str(err).strip()
    if message:
        return message
    frames = traceback.extract_tb(err.__traceback__)
    if not frames:
        return type(err).__name__
    last = frames[-1]
    where = "/".join(Path(last.filename).parts[-3:])
    return f"{type(err).__name__} at {where}:{last.lineno} in {last.name}"
