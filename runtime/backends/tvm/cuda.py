"""The gpu target: the shared TVM compile (backend.py) for an NVIDIA GPU through LLVM's NVPTX back
end, with the gpu schedules (gpu_schedules.py).

The kernels are PTX for one architecture (`sm_XY`): GDP_GPU_ARCH names it, else the GPU of this
machine, else sm_90 (an H100 or H200). LLVM's NVPTX back end is inside TVM's compiler, so compiling
needs no GPU and no nvcc; kernels that call CUDA's math library (exp, log, pow, erf) need its
libdevice bitcode, from a CUDA toolkit or NVIDIA's pip package (libdevice_path). The driver
JIT-compiles the PTX when the library is loaded on a GPU of that architecture or a later one:
loading and running need a CUDA GPU and TVM's CUDA runtime, not the compiler.

TVM 0.27 marks its kernels with the `nvvm.annotations` metadata, which the LLVM 22 inside its
wheel no longer reads: every kernel came out a `.func` (a device function, which the driver
cannot launch). compile() turns them into `.entry` kernels in the exported library
(kernels_as_entries) and checks the result.

Run on an NVIDIA H200 through benchmarks/gpu.py (docs/gpu.md). TVM's other CUDA path (target kind
"cuda") is not used: 0.27 stores CUDA C in the library and compiles it when the library is loaded
(through NVRTC or nvcc, with --use_fast_math), so every load on the serving machine would compile.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import os
import re
import sys
from pathlib import Path

import onnx
import tvm

from gdp.errors import CompileError, ExecutionError, TargetError
from gdp.runtime.backends.base import CostProfile, Executable
from gdp.runtime.backends.tvm.backend import LIBRARY, TvmBackend, source_file
from gdp.runtime.backends.tvm.cuda_executable import CudaExecutable

# The architecture compiled for where neither GDP_GPU_ARCH nor a present GPU names one.
DEFAULT_ARCH = "sm_90"
ARCH_ENV = "GDP_GPU_ARCH"
_ARCH = re.compile(r"sm_[1-9][0-9]{1,2}[af]?")


def gpu_arch(arch: str | None = None) -> str:
    """The architecture to compile for: `arch`, else $GDP_GPU_ARCH, else this machine's first
    CUDA GPU's compute capability, else DEFAULT_ARCH. TargetError for a malformed name."""
    given = arch if arch is not None else os.environ.get(ARCH_ENV)
    if given is not None:
        if not isinstance(given, str) or not _ARCH.fullmatch(given):
            where = "arch" if arch is not None else ARCH_ENV
            raise TargetError(
                f"{where}: expected a CUDA architecture such as 'sm_80' or 'sm_90', got {given!r}"
            )
        return given
    device = tvm.cuda()
    if device.exist:
        return "sm_" + device.compute_version.replace(".", "")
    return DEFAULT_ARCH


# Where LLVM's NVPTX build looks for libdevice (NVIDIA's math library as LLVM bitcode: exp, log,
# pow, tanh, erf of the kernels call its __nv_* functions) when TVM's own search (CUDA_PATH, or
# the nvcc on PATH) finds none: a CUDA toolkit's usual homes and NVIDIA's pip package.
_LIBDEVICE_GLOBS = (
    "{env}/nvvm/libdevice/libdevice*.bc",
    "/usr/local/cuda/nvvm/libdevice/libdevice*.bc",
    "/usr/local/cuda-*/nvvm/libdevice/libdevice*.bc",
    "/opt/cuda/nvvm/libdevice/libdevice*.bc",
    "/usr/lib/nvidia-cuda-toolkit/libdevice/libdevice*.bc",
    "{site}/nvidia/cuda_nvcc/nvvm/libdevice/libdevice*.bc",
    "{site}/nvidia/cu*/nvvm/libdevice/libdevice*.bc",
)


def _arch_number(arch: str) -> int:
    """sm_90a -> 90: the driver JIT-compiles PTX for its own architecture or a later one."""
    return int(re.sub(r"[^0-9]", "", arch))


def libdevice_path() -> str | None:
    """The libdevice bitcode the NVPTX build links, or None where this machine has none:
    TVM's search first, then _LIBDEVICE_GLOBS (newest toolkit first)."""
    from tvm.support import nvcc

    try:
        found = nvcc.find_libdevice_path(1000)
        if found and Path(found).is_file():
            return str(found)
    except Exception:  # TVM's search raises where its guessed toolkit has no libdevice
        pass
    return next(_cuda_files(_LIBDEVICE_GLOBS, newest_first=True), None)


def _cuda_files(patterns: tuple[str, ...], newest_first: bool = False):
    """The files matching `patterns` in order, where `{env}` stands for $CUDA_PATH and
    $CUDA_HOME, `{site}` for each site-packages (or dist-packages) directory on sys.path; within
    a pattern in name order (`newest_first`: reversed, a later toolkit first)."""
    sites = {str(Path(p)) for p in sys.path if p.endswith(("site-packages", "dist-packages"))}
    envs = [os.environ[v] for v in ("CUDA_PATH", "CUDA_HOME") if v in os.environ]
    for pattern in patterns:
        roots = envs if "{env}" in pattern else sites if "{site}" in pattern else [""]
        for root in roots:
            name = pattern.format(env=root, site=root)
            yield from sorted(glob.glob(name), reverse=newest_first)


@functools.cache
def _use_libdevice_search() -> None:
    """TVM's libdevice callback replaced by libdevice_path(), which returns "" where none is
    found: TVM then builds without it, and _check_ptx names a kernel that needed it. TVM's own
    callback raises instead, failing every GPU compile on a machine whose nvcc is a wrapper
    script or that has no toolkit at all, though most kernels call no libdevice function."""
    import tvm.support.nvcc  # noqa: F401  (registers TVM's callback first; replaced below)
    import tvm_ffi

    def callback(arch: int) -> str:
        return libdevice_path() or ""

    tvm_ffi.register_global_func("tvm_callback_libdevice_path", callback, override=True)


def ptx_of(library: bytes) -> list[str]:
    """The PTX modules embedded in an exported library, as text."""
    return [library[a:b].decode("latin-1") for a, b in _ptx_spans(library)]


def ptx_kernels(ptx: str) -> list[str]:
    """The kernels (`.entry` functions) a PTX module defines."""
    return re.findall(r"^[ \t]*(?:\.visible[ \t]+|\.weak[ \t]+)?\.entry[ \t]+(\w+)", ptx, re.M)


# A function TVM's NVPTX code generation writes for a kernel: external, returning nothing (the
# compiler-rt helpers LLVM adds, such as __truncsfhf2, are .weak and return a value).
_KERNEL_AS_FUNC = re.compile(rb"^\.visible \.func (\w+)\(", re.M)
_GLOBL_COMMENT = re.compile(rb"^\t// \.globl\t\w+\n", re.M)


def kernels_as_entries(ptx: bytes) -> bytes:
    """`ptx` with every kernel TVM emitted as `.visible .func NAME(` declared `.visible .entry
    NAME(`, at the same length: each such line grows by a byte, paid for by LLVM's
    `// .globl NAME` comment lines, then by the indentation of instructions; the rest padded
    with spaces at the end. The same bytes mean the same length in the library's data, so the
    exported library is patched in place. ValueError where it cannot be made to fit."""
    kernels = len(_KERNEL_AS_FUNC.findall(ptx))
    if not kernels:
        return ptx
    patched = _KERNEL_AS_FUNC.sub(rb".visible .entry \1(", ptx)
    if len(patched) > len(ptx):
        patched = _GLOBL_COMMENT.sub(b"", patched)
    if len(patched) > len(ptx):
        patched = re.sub(rb"^\t+", b"", patched, flags=re.M)
    if len(patched) > len(ptx):
        raise ValueError(f"PTX of {len(ptx)} bytes cannot hold {kernels} kernels as .entry")
    return patched + b" " * (len(ptx) - len(patched))


def _ptx_spans(library: bytes) -> list[tuple[int, int]]:
    """(start, end) of each PTX text in an exported library (TVM stores a CUDA module's code as
    a string: a little-endian 8-byte length, then the text)."""
    spans = []
    for match in re.finditer(rb"//\n// Generated by [^\n]*\n", library):
        start = match.start()
        size = int.from_bytes(library[start - 8 : start], "little") if start >= 8 else 0
        if not 0 < size <= len(library) - start:
            end = library.find(b"\0", start)
            size = (end if end >= 0 else len(library)) - start
        spans.append((start, start + size))
    return spans


def _entries_in_library(path: Path) -> None:
    """The exported library at `path` with its PTX's kernels made .entry (kernels_as_entries),
    rewritten in place (atomically)."""
    data = path.read_bytes()
    out = bytearray(data)
    for start, end in _ptx_spans(data):
        out[start:end] = kernels_as_entries(data[start:end])
    if out != data:
        tmp = path.with_suffix(".entries.tmp")
        tmp.write_bytes(bytes(out))
        tmp.chmod(path.stat().st_mode)
        tmp.replace(path)


def _check_ptx(library: bytes, arch: str, kernels: int) -> None:
    """CompileError unless the library holds PTX for `arch` that defines at least `kernels`
    launchable kernels, none of them left a .func, and no libdevice function undefined (built
    without libdevice: libdevice_path() found none)."""
    modules = [m for m in ptx_of(library) if re.search(rf"^\.target {arch}\b", m, re.M)]
    if not modules:
        raise CompileError(f"the gpu library holds no PTX for {arch}")
    for module in modules:
        left = _KERNEL_AS_FUNC.findall(module.encode("latin-1"))
        if left:
            raise CompileError(f"the gpu library's kernels {left[:5]} are not .entry kernels")
        missing = sorted(set(re.findall(r"^\.extern \.func[^\n]*?\b(__nv_\w+)", module, re.M)))
        if missing:
            raise CompileError(
                f"the gpu kernels call libdevice's {missing}, and no libdevice was found to link"
                " (a CUDA toolkit's nvvm/libdevice: set CUDA_PATH to the toolkit)"
            )
    entries = sum(len(ptx_kernels(m)) for m in modules)
    if entries < kernels:
        raise CompileError(
            f"the gpu library's PTX for {arch} defines {entries} kernels, expected {kernels}"
        )


def _cuda_pipeline():
    from tvm.relax.backend.cuda import pipeline

    return pipeline


def _as_on_cpu(dispatch: tvm.transform.Pass) -> tvm.transform.Pass:
    """`dispatch` run as for the CPU: the TIR it writes is then plain loops."""

    @tvm.transform.module_pass(opt_level=0, name=f"{dispatch.info.name}AsOnCpu")
    def run(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        with tvm.target.Target({"kind": "llvm"}):
            return dispatch(mod)

    return run


class _Pipeline:
    """TVM's CUDA pass lists (tvm.relax.backend.cuda.pipeline) less the dlight scheduling its
    legalize step ends with: lowering.py fuses after legalisation, and the fused kernels are
    scheduled afterwards by gpu_schedules (a kernel scheduled before FuseTIR would be fused with
    its thread bindings). Imported when compiling: loading needs no compiler."""

    @staticmethod
    def library_dispatch_passes(target: tvm.target.Target) -> list:
        # DispatchSortScan as for the CPU: its GPU scans and sorts are TIR written for the GPU
        # with shared memory, block barriers and int64 thread loops, which TVM 0.27's NVPTX
        # code generation does not build (a stacked morphology's gather positions, a cumsum,
        # failed to compile); the CPU's are loops gdp's schedules bind.
        passes = _cuda_pipeline().library_dispatch_passes(target)
        return [_as_on_cpu(p) if p.info.name == "DispatchSortScan" else p for p in passes]

    @staticmethod
    def legalize_passes(target: tvm.target.Target) -> list:
        return [
            p
            for p in _cuda_pipeline().legalize_passes(target)
            if p.info.name != "ApplyDefaultSchedule"
        ]

    @staticmethod
    def dataflow_lower_passes(target: tvm.target.Target) -> list:
        return _cuda_pipeline().dataflow_lower_passes(target)

    @staticmethod
    def finalize_passes(target: tvm.target.Target) -> list:
        return _cuda_pipeline().finalize_passes(target)


def load_cuda_runtime() -> None:
    """TVM's CUDA runtime (libtvm_runtime_cuda: the CUDA device API and the loader of CUDA
    modules) loaded where `import tvm` has not: with TVM_USE_RUNTIME_LIB=1, TVM loads no device
    backend. ExecutionError where it cannot load (no CUDA driver's libcuda.so.1, or no
    libcudart.so.13)."""
    import tvm_ffi

    if tvm_ffi.get_global_func("ffi.Module.load_from_bytes.cuda", allow_missing=True):
        return
    from tvm.base import _LOADED_LIBS
    from tvm_ffi.libinfo import load_lib_ctypes

    directory = Path(_LOADED_LIBS["tvm_runtime"]._name).resolve().parent

    def load():
        _LOADED_LIBS["tvm_runtime_cuda"] = load_lib_ctypes(
            package="tvm",
            target_name="tvm_runtime_cuda",
            extra_lib_paths=[directory],
            mode="RTLD_LOCAL",
        )

    try:
        try:
            load()
        except (OSError, RuntimeError):
            # libcudart.so.13 not on the loader's path: load it from where a CUDA toolkit or
            # NVIDIA's pip package (PyTorch's) keeps it, then TVM's runtime finds it by name.
            if not _load_cudart():
                raise
            load()
    except (OSError, RuntimeError) as err:
        raise ExecutionError(
            "target 'gpu' needs TVM's CUDA runtime (tvm/lib/libtvm_runtime_cuda.so, which links"
            f" the CUDA driver's libcuda.so.1 and libcudart.so.13), and it did not load: {err}"
        ) from err


_CUDART_GLOBS = (
    "{env}/lib64/libcudart.so.13*",
    "/usr/local/cuda/lib64/libcudart.so.13*",
    "/usr/local/cuda-13*/lib64/libcudart.so.13*",
    "{site}/nvidia/cu13/lib/libcudart.so.13*",
    "{site}/nvidia/cuda_runtime/lib/libcudart.so.13*",
)


def _load_cudart() -> bool:
    """libcudart.so.13 loaded (globally, so that a library needing it by name finds it) from
    _CUDART_GLOBS; False where none loads."""
    import ctypes

    for path in _cuda_files(_CUDART_GLOBS):
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            return True
        except OSError:
            continue
    return False


def _wide(dtype: str) -> str | None:
    """The float32 type of the same lanes for a 16-bit float type (float16, bfloat16, with
    or without lanes), else None."""
    for half in ("bfloat16", "float16"):
        if dtype == half or dtype.startswith(half + "x"):
            return "float32" + dtype[len(half) :]
    return None


def half_sums_without_fma(mod: tvm.IRModule) -> tvm.IRModule:
    """Every 16-bit float sum or difference with a product operand computed as the float32 sum
    of the two operands, rounded back: `f16(f32(a * b) + f32(c))`.

    TVM's LowerIntrin turns a float `a * b + c` into its fma intrinsic, and the NVPTX rule for
    it calls libdevice's __nv_fmaf / __nv_fma, which exist for float32 and float64 only: every
    kernel of a model compiled with fp16 arithmetic failed ("Only support float32 or float64").
    The product keeps its own rounding to 16 bits; the sum of two 16-bit values rounded to
    float32 and then to 16 bits is the correctly rounded 16-bit sum (float32 carries more than
    2p + 2 bits of a 16-bit float's p), so the TIR's values are those of rounding every op.
    LLVM's NVPTX back end may still contract the product and the sum into one fma.rn.f16 (its
    default, as nvcc's, for float32 too), which rounds once: docs/gpu.md."""
    import tvm_ffi
    from tvm import tirx

    def widened(expr, op):
        wide = _wide(str(expr.ty.dtype))
        if wide is None or not (isinstance(expr.a, tirx.Mul) or isinstance(expr.b, tirx.Mul)):
            return expr
        total = op(tirx.Cast(wide, expr.a), tirx.Cast(wide, expr.b))
        return tirx.Cast(str(expr.ty.dtype), total)

    callbacks = [
        (tirx.Add, lambda e: widened(e, tirx.Add)),
        (tirx.Sub, lambda e: widened(e, tirx.Sub)),
    ]
    for gvar, func in list(mod.functions.items()):
        if isinstance(func, tvm.tirx.PrimFunc):
            mod[gvar] = tvm_ffi.structural_map(func, callbacks, order="post")
    return mod


class TvmCudaBackend(TvmBackend):
    name = "tvm-cuda"
    pipeline = _Pipeline
    schedules_module = "gdp.runtime.backends.tvm.gpu_schedules"
    # One compiled model per input shape: dlight's rules read static extents.
    generic_shapes = False

    def __init__(self, arch: str | None = None) -> None:
        # None: read at each compile (GDP_GPU_ARCH, else the present GPU, else DEFAULT_ARCH).
        if arch is not None:
            gpu_arch(arch)  # a malformed name fails here
        self.arch = arch

    def target(self) -> tvm.target.Target:
        return tvm.target.Target({"kind": "nvptx", "mcpu": gpu_arch(self.arch)})

    def device(self) -> tvm.runtime.Device:
        return tvm.cuda()

    def toolchain(self) -> str:
        llvm_version = tvm.support.libinfo().get("LLVM_VERSION", "unknown")
        return f"nvptx-{gpu_arch(self.arch)}-llvm{llvm_version}"

    @functools.cached_property
    def code_hash(self) -> str:
        # The min/max rewrite of finish() lives in llvm.py: its changes recompile too.
        digest = hashlib.sha256(super().code_hash.encode())
        digest.update(source_file("gdp.runtime.backends.tvm.llvm").read_bytes())
        return digest.hexdigest()[:16]

    def finish(self, mod: tvm.IRModule) -> tvm.IRModule:
        # TF's and ONNX's min, max and clip return NaN for a NaN operand; the min/max selects
        # TVM's LLVM code generation writes (for the GPU as for the CPU) would not.
        from gdp.runtime.backends.tvm import llvm

        return half_sums_without_fma(llvm.nan_propagating_min_max(mod))

    def compile(
        self, model: onnx.ModelProto, outdir: Path, options: dict, profile: CostProfile | None
    ) -> dict:
        _use_libdevice_search()
        meta = super().compile(model, outdir, options, profile)
        arch = gpu_arch(self.arch)
        library = outdir / LIBRARY
        try:
            _entries_in_library(library)
        except ValueError as err:
            raise CompileError(f"the gpu kernels could not be made launchable: {err}") from err
        _check_ptx(library.read_bytes(), arch, meta["kernels"])
        meta["gpu_arch"] = arch
        return meta

    def tir_pipeline(self) -> str:
        # TVM's, with gdp's device pass (gpu_schedules.loads_before_stores) at its end.
        return self.schedules.register_pipeline()

    def prepare_load(self) -> None:
        load_cuda_runtime()

    def load(self, artifact_dir: Path, meta: dict) -> Executable:
        load_cuda_runtime()
        if not tvm.cuda().exist:
            raise ExecutionError(
                "target 'gpu' needs a CUDA GPU to run, and this machine has none visible to"
                f" TVM's CUDA runtime; the compiled library is {artifact_dir / LIBRARY}"
            )
        built_for = meta.get("gpu_arch")
        here = "sm_" + tvm.cuda().compute_version.replace(".", "")
        if built_for and _arch_number(here) < _arch_number(built_for):
            raise ExecutionError(
                f"the gpu library {artifact_dir / LIBRARY} was compiled for {built_for}, and this"
                f" GPU is {here}: compile it for {here} (GDP_GPU_ARCH={here})"
            )
        loaded = CudaExecutable(tvm.runtime.load_module(str(artifact_dir / LIBRARY)), self.device())
        loaded.min_extents = tuple(tuple(m) for m in meta.get("min_extents", ()))
        return loaded
