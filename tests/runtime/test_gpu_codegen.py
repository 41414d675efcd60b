"""The gpu target (runtime/backends/tvm/cuda.py, gpu_schedules.py) on a machine without a GPU:
every workload and a gdp.cv2 chain compile to PTX for sm_80 and sm_90, with launchable (.entry)
kernels, checked by ptxas where the machine has it. The tests that run kernels need a CUDA GPU
and are skipped, with the reason, where there is none.

Compiling goes through the stages gdp.compile runs (conversion, the rewrite pipeline with the
gpu target's rewrites, the backend's compile) without loading the result, which needs a GPU."""

import importlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
import tvm
import tvm_ffi

import gdp
import gdp.api
from gdp.errors import CompileError, ExecutionError, GdpError, TargetError
from gdp.frontend import convert
from gdp.frontend.common import IR_VERSION
from gdp.rewrites import load_profile, pipeline
from gdp.runtime.backends import get_backend
from gdp.runtime.backends.tvm import cuda, gpu_schedules
from gdp.runtime.backends.tvm.backend import LIBRARY
from gdp.runtime.targets import get_target
from gdp.signature import graph_inputs
from tests import SAMPLES

sys.path.insert(0, str(SAMPLES))

import workload

HAS_GPU = tvm.cuda().exist
NO_GPU = (
    "no CUDA GPU on this machine: the gpu target's kernels are compiled and checked as PTX"
    " here, and run only where TVM's CUDA runtime sees a GPU"
)
PTXAS = shutil.which("ptxas")
NO_PTXAS = "ptxas (a CUDA toolkit's PTX assembler) is not on PATH: the PTX is not assembled"
ARCHS = ("sm_80", "sm_90")
# canny's prepare step is one stencil chain whose build takes about 25 s per architecture on
# two cores; the others take under a second each.
SLOW = {"canny"}


def _program(name: str):
    module = importlib.import_module(name)
    if hasattr(module, "program"):
        return module.program
    return module.make_prepare(module.LOW, module.HIGH, module.L2_GRADIENT)  # canny


def _shapes(name: str):
    """The shapes of the workload's own inputs (a per-shape compile, as its first call makes)."""
    return {k: v.shape for k, v in importlib.import_module(name).inputs().items()}


def _cases():
    return [
        pytest.param(name, arch, marks=[pytest.mark.slow] if name in SLOW else [])
        for name in workload.WORKLOADS
        for arch in ARCHS
    ]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """compiled(key, program, arch, shapes=None) -> (library bytes, meta, seconds), once per
    key and arch; `shapes` fix the graph's free dimensions (None: it has none)."""
    done: dict = {}
    graphs: dict = {}

    def build(key: str, program, arch: str, shapes: dict | None = None):
        if (key, arch) not in done:
            if key not in graphs:
                graphs[key] = convert(program, None)[0]
            outdir = tmp_path_factory.mktemp(f"{key}-{arch}")
            meta, seconds = compile_for_gpu(graphs[key], arch, shapes, outdir)
            done[key, arch] = ((outdir / LIBRARY).read_bytes(), meta, seconds)
        return done[key, arch]

    return build


def compile_for_gpu(graph, arch: str, shapes: dict | None, outdir) -> tuple[dict, float]:
    """`graph` through the stages gdp.compile runs for the gpu target (the rewrite pipeline
    with its shapes fixed, the backend's compile) into `outdir`, not loaded: (meta, seconds
    the backend's compile took)."""
    backend = cuda.TvmCudaBackend(arch)
    target = get_target("gpu")
    profile = load_profile(target.profile, outdir)
    prepared = pipeline.prepare(
        graph,
        shapes=shapes or {s.name: s.shape for s in graph_inputs(graph)},
        required=backend.required_rewrites,
        substitute=target.substitutes,
        profile=profile,
        fp16=None,
        max_ir_version=IR_VERSION,
    )
    t0 = time.perf_counter()
    meta = backend.compile(prepared.graph, outdir, {}, profile)
    return meta, time.perf_counter() - t0


def _check_library(library: bytes, meta: dict, arch: str) -> list[str]:
    modules = cuda.ptx_of(library)
    assert modules, "no PTX in the library"
    for module in modules:
        assert re.search(rf"^\.target {arch}\b", module, re.M), f"PTX not for {arch}"
        assert not re.search(r"^\.visible \.func", module, re.M), "a kernel left a .func"
    kernels = [k for m in modules for k in cuda.ptx_kernels(m)]
    assert len(kernels) >= meta["kernels"] >= 1
    assert meta["gpu_arch"] == arch
    return modules


def _assemble(modules: list[str], arch: str, tmp_path) -> None:
    for i, ptx in enumerate(modules):
        source = tmp_path / f"kernels{i}.ptx"
        source.write_text(ptx)
        done = subprocess.run(
            [PTXAS, f"-arch={arch}", str(source), "-o", str(tmp_path / f"kernels{i}.cubin")],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]


# -- the target and its names ------------------------------------------------------------------


def test_gpu_target_is_served_by_the_cuda_backend():
    target = get_target("gpu")
    backend = get_backend(target.backend)
    assert target.backend == "tvm-cuda"
    assert isinstance(backend, cuda.TvmCudaBackend)
    assert backend.schedules is gpu_schedules
    assert backend.static_shapes and not backend.generic_shapes


def test_architecture_from_the_environment_and_its_errors(monkeypatch):
    monkeypatch.setenv(cuda.ARCH_ENV, "sm_80")
    backend = cuda.TvmCudaBackend()
    assert backend.target().attrs["mcpu"] == "sm_80"
    sm80 = backend.fingerprint()
    monkeypatch.setenv(cuda.ARCH_ENV, "sm_90")
    assert backend.target().attrs["mcpu"] == "sm_90"
    assert backend.fingerprint() != sm80  # the cache never serves one arch's code to another
    monkeypatch.setenv(cuda.ARCH_ENV, "90")
    with pytest.raises(TargetError, match="GDP_GPU_ARCH.*'90'"):
        backend.target()
    with pytest.raises(TargetError, match="arch.*'compute_90'"):
        cuda.TvmCudaBackend("compute_90")
    assert cuda.TvmCudaBackend("sm_80").target().attrs["mcpu"] == "sm_80"


def test_default_architecture_without_a_gpu(monkeypatch):
    monkeypatch.delenv(cuda.ARCH_ENV, raising=False)
    if HAS_GPU:
        major, minor = tvm.cuda().compute_version.split(".")
        assert cuda.gpu_arch() == f"sm_{major}{minor}"
    else:
        assert cuda.gpu_arch() == cuda.DEFAULT_ARCH == "sm_90"


# -- the PTX patch -------------------------------------------------------------------------

_PTX = (
    b"//\n// Generated by LLVM NVPTX Back-End\n//\n\n.version 7.8\n.target sm_90\n"
    b".address_size 64\n\n\t// .globl\tscale_kernel\n"
    b".visible .func scale_kernel(\n\t.param .b64 scale_kernel_param_0\n)\n{\n"
    b"\t.reg .b64 \t%rd<2>;\n\n\tld.param.b64 \t%rd1, [scale_kernel_param_0];\n\tret;\n\n}\n"
    b"\t// .weak\t__truncsfhf2\n.weak .func  (.param .b32 func_retval0) __truncsfhf2(\n"
    b"\t.param .b32 __truncsfhf2_param_0\n)\n{\n\tret;\n\n}\n"
)


def test_kernels_become_entries_at_the_same_length():
    patched = cuda.kernels_as_entries(_PTX)
    assert len(patched) == len(_PTX)
    text = patched.decode()
    assert cuda.ptx_kernels(text) == ["scale_kernel"]
    assert ".visible .entry scale_kernel(" in text
    assert ".weak .func  (.param .b32 func_retval0) __truncsfhf2(" in text  # a helper stays
    assert cuda.kernels_as_entries(patched) == patched  # nothing left to patch


def test_kernels_that_cannot_fit_are_refused():
    tight = _PTX.replace(b"\t// .globl\tscale_kernel\n", b"").replace(b"\t", b"")
    with pytest.raises(ValueError, match="cannot hold 1 kernels"):
        cuda.kernels_as_entries(tight)


@pytest.mark.skipif(PTXAS is None, reason=NO_PTXAS)
def test_patched_kernel_assembles(tmp_path):
    _assemble([cuda.kernels_as_entries(_PTX).decode()], "sm_90", tmp_path)


# -- the schedules -------------------------------------------------------------------------


def test_every_kernel_is_bound_with_int32_thread_indices():
    from tvm import te

    n = tvm.tirx.IntImm("int64", 1 << 20)
    a = te.placeholder((n, tvm.tirx.IntImm("int64", 3)), "float32", name="a")
    b = te.compute(a.shape, lambda i, c: a[i, c] * 2.0, name="b")
    total = te.compute((n,), lambda i: a[i, 0] + a[i, 1] + a[i, 2], name="total")
    mod = tvm.IRModule(
        {
            "scale": te.create_prim_func([a, b]),
            "total": te.create_prim_func([a, total]),
        }
    )
    target = cuda.TvmCudaBackend("sm_90").target()
    scheduled = gpu_schedules.schedule(mod, target)
    for gvar, func in scheduled.functions.items():
        bound = []

        def seen(loop, bound=bound):
            if loop.thread_binding is not None:
                bound.append(loop)
            return loop

        tvm_ffi.structural_map(func, [(tvm.tirx.For, seen)], order="post")
        assert bound, f"{gvar.name_hint} has no thread binding"
        assert all(str(loop.loop_var.ty.dtype) == "int32" for loop in bound)
    assert gpu_schedules.row_scan(None) is None
    assert gpu_schedules.KERNEL_RULES.many_to_many == 1


# -- the workloads and gdp.cv2 -------------------------------------------------------------


@pytest.mark.parametrize(("name", "arch"), _cases())
def test_workload_compiles_to_ptx(name, arch, compiled):
    library, meta, seconds = compiled(name, _program(name), arch, _shapes(name))
    _check_library(library, meta, arch)
    print(f"{name} {arch}: {meta['kernels']} kernels in {seconds:.1f} s")


@pytest.mark.skipif(PTXAS is None, reason=NO_PTXAS)
@pytest.mark.parametrize(("name", "arch"), _cases())
def test_workload_ptx_assembles(name, arch, compiled, tmp_path):
    library, meta, _ = compiled(name, _program(name), arch, _shapes(name))
    _assemble(_check_library(library, meta, arch), arch, tmp_path)


def _cv2_programs():
    import tensorflow as tf

    import gdp.cv2 as cv2

    @tf.function(input_signature=[tf.TensorSpec([480, 640, 3], tf.uint8, name="src")])
    def blur_gray(src):
        return {"gray": cv2.cvtColor(cv2.GaussianBlur(src, (5, 5), 0), cv2.COLOR_BGR2GRAY)}

    @tf.function(input_signature=[tf.TensorSpec([480, 640, 3], tf.uint8, name="src")])
    def resize_flip(src):
        small = cv2.resize(src, (320, 240), interpolation=cv2.INTER_LINEAR)
        return {"flipped": cv2.flip(cv2.cvtColor(small, cv2.COLOR_BGR2RGB), 1)}

    @tf.function(input_signature=[tf.TensorSpec([480, 640, 3], tf.uint8, name="src")])
    def gray_threshold(src):
        gray = cv2.cvtColor(src, cv2.COLOR_BGR2GRAY)
        return {"mask": cv2.threshold(gray, 100, 255, cv2.THRESH_BINARY)[1]}

    return {
        "cv2_blur_gray": blur_gray,
        "cv2_resize_flip": resize_flip,
        "cv2_gray_threshold": gray_threshold,
    }


# GaussianBlur's graph (reflect-101 borders as slices and concats) inlined into one kernel takes
# dlight's Fallback 23 s of compute_inline on two cores.
_CV2_CASES = [
    pytest.param("cv2_blur_gray", marks=pytest.mark.slow),
    "cv2_resize_flip",
    "cv2_gray_threshold",
]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", _CV2_CASES)
def test_cv2_chain_compiles_to_ptx(name, arch, compiled, tmp_path):
    library, meta, _ = compiled(name, _cv2_programs()[name], arch)
    modules = _check_library(library, meta, arch)
    if PTXAS is not None:  # test_workload_ptx_assembles says when it is skipped
        _assemble(modules, arch, tmp_path)


@pytest.mark.parametrize("arithmetic", ["fp16", "fp32"])
def test_fp16_workload_compiles_to_ptx(arithmetic, tmp_path):
    """gdp's fp16 stage (scaled, every op rounded or computed in fp32) on the gpu target: a
    half-precision multiply-add no longer reaches libdevice's fma, which has no fp16 form."""
    tone = importlib.import_module("tone")
    graph = convert(tone.program, None)[0]
    backend = cuda.TvmCudaBackend("sm_80")
    fp16 = pipeline.Fp16({"rgb": (0.0, 1.0)}, scaling=True, arithmetic=arithmetic)
    prepared = pipeline.prepare(
        graph, None, backend.required_rewrites, False, None, fp16, IR_VERSION
    )
    meta = backend.compile(prepared.graph, tmp_path, {}, None)
    modules = _check_library((tmp_path / LIBRARY).read_bytes(), meta, "sm_80")
    assert any(re.search(r"\.f16\b", m) for m in modules)
    if PTXAS is not None:
        _assemble(modules, "sm_80", tmp_path)


def test_half_sums_are_widened_and_others_left_alone():
    from tvm import te, tirx

    a = te.placeholder((8,), "float16", name="a")
    x = te.placeholder((8,), "float32", name="x")
    half = te.compute((8,), lambda i: a[i] * a[i] + a[i], name="half")
    single = te.compute((8,), lambda i: x[i] * x[i] + x[i], name="single")
    mod = tvm.IRModule(
        {"half": te.create_prim_func([a, half]), "single": te.create_prim_func([x, single])}
    )
    before = mod["single"]
    out = cuda.half_sums_without_fma(mod)
    found = {"half": [], "single": []}
    for name in found:

        def seen(add, name=name):
            found[name].append(str(add.ty.dtype))
            return add

        tvm_ffi.structural_map(out[name], [(tirx.Add, seen)], order="post")
    assert found == {"half": ["float32"], "single": ["float32"]}
    assert tvm_ffi.structural_equal(out["single"], before)


# -- every accelerated gdp.cv2 function ----------------------------------------------------


class _Compiled(GdpError):
    """Raised by _CompileOnly once a gdp.cv2 call's program has compiled (nothing can run)."""


class _CompileOnly:
    """What gdp.cv2's engine gets from gdp.compile in test_every_accelerated_cv2_function:
    run_arrays compiles the program for the gpu at the call's shapes (the backend's compile,
    no load), records it and raises _Compiled."""

    def __init__(self, program, record: list, tmp_path) -> None:
        self.source_onnx = (
            program if isinstance(program, onnx.ModelProto) else convert(program, None)[0]
        )
        self.input_names = [s.name for s in graph_inputs(self.source_onnx)]
        self.record, self.tmp_path = record, tmp_path

    def run_arrays(self, arrays):
        backend = cuda.TvmCudaBackend("sm_90")
        shapes = {n: a.shape for n, a in zip(self.input_names, arrays, strict=True)}
        prepared = pipeline.prepare(
            self.source_onnx, shapes, backend.required_rewrites, False, None, None, IR_VERSION
        )
        outdir = Path(tempfile.mkdtemp(dir=self.tmp_path))
        meta = backend.compile(prepared.graph, outdir, {}, None)
        self.record.append(((outdir / LIBRARY).read_bytes(), meta))
        raise _Compiled("compiled")


def _one_case_per_cv2_function() -> dict:
    from tests.conformance import cases_color, cases_filters, cases_geometry, cases_pointwise

    chosen: dict = {}
    for module in (cases_color, cases_filters, cases_geometry, cases_pointwise):
        for case in module.cases():
            best = chosen.get(case.function)
            if best is None or (best.size != "photo" and case.size == "photo"):
                chosen[case.function] = case
    return chosen


@pytest.mark.slow
def test_every_accelerated_cv2_function_compiles_to_ptx(monkeypatch, tmp_path):
    """One conformance case of each accelerated gdp.cv2 function (a photo-sized one where there
    is), called eagerly with target "gpu": its program compiles to sm_90 PTX and assembles."""
    import gdp.cv2 as cv2

    monkeypatch.setenv("GDP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GDP_CV2_STRICT", "1")  # a call gdp does not accelerate fails
    record: list = []
    monkeypatch.setattr(
        gdp, "compile", lambda program, **_: _CompileOnly(program, record, tmp_path)
    )
    cases = _one_case_per_cv2_function()
    assert {name.split(".")[-1] for name in cv2.accelerated()} <= set(cases) | {
        "blobFromImage",
        "blobFromImages",
    }
    previous = gdp.api._default_target  # what set_target chose: None, not the cpu, by default
    gdp.set_target("gpu")
    cv2.clear_cache()
    failed = {}
    try:
        for name, case in sorted(cases.items()):
            before = len(record)
            t0 = time.perf_counter()
            try:
                case.gdp()
                failed[name] = "ran without compiling a program"
            except _Compiled:
                library, meta = record[before]
                try:
                    modules = _check_library(library, meta, "sm_90")
                    if PTXAS is not None:
                        _assemble(modules, "sm_90", tmp_path)
                except AssertionError as err:
                    failed[name] = str(err)[:300]
            except Exception as err:
                failed[name] = f"{type(err).__name__}: {str(err)[:300]}"
            print(f"{name} ({case.id}): {time.perf_counter() - t0:.1f} s", flush=True)
    finally:
        gdp.set_target(previous)
        cv2.clear_cache()
    assert not failed, failed


# -- libdevice (CUDA's math functions) ----------------------------------------------------


def _math_program():
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([64, 64, 3], tf.float32, name="x")])
    def math(x):
        return {"y": tf.exp(x) / (1.0 + tf.math.log(1.0 + tf.abs(x))) + tf.math.erf(x)}

    return math


@pytest.mark.skipif(
    cuda.libdevice_path() is None,
    reason="no libdevice on this machine (a CUDA toolkit's nvvm/libdevice, or nvidia-cuda-nvcc)",
)
def test_math_functions_link_libdevice(compiled, tmp_path):
    library, meta, _ = compiled("math", _math_program(), "sm_90")
    modules = _check_library(library, meta, "sm_90")
    assert not any("__nv_" in m for m in modules)  # linked and inlined, none left to resolve
    if PTXAS is not None:
        _assemble(modules, "sm_90", tmp_path)


def test_math_functions_without_libdevice_are_a_compile_error(monkeypatch, tmp_path):
    graph = convert(_math_program(), None)[0]
    monkeypatch.setattr(cuda, "libdevice_path", lambda: None)
    backend = cuda.TvmCudaBackend("sm_90")
    prepared = pipeline.prepare(
        graph, None, backend.required_rewrites, False, None, None, IR_VERSION
    )
    with pytest.raises(CompileError, match=r"__nv_expf.*set CUDA_PATH"):
        backend.compile(prepared.graph, tmp_path, {}, None)


# -- the API without a GPU, and runs on one ------------------------------------------------


@pytest.mark.skipif(HAS_GPU, reason="this machine has a CUDA GPU: the gpu target loads there")
def test_compiling_for_gpu_without_one_is_a_clear_error(tmp_path):
    tone = importlib.import_module("tone")
    # No driver: TVM's CUDA runtime does not load; a driver without a GPU: none is visible.
    with pytest.raises(ExecutionError, match="target 'gpu' needs"):
        gdp.compile(tone.program, target="gpu", verify=False, cache_dir=tmp_path)


def test_a_stacked_morphology_called_on_the_gpu_compiles(monkeypatch, tmp_path):
    """gdp.cv2.morphologyEx's opening, called eagerly with target "gpu": its second stage pads
    by gathers at positions a cumsum makes, and TVM's GPU cumsum (shared memory, barriers,
    int64 threads) did not build (CompileError); the CPU's loop does. Without a GPU the call
    gets as far as loading; with one it matches OpenCV."""
    import cv2 as opencv

    import gdp.cv2 as cv2

    monkeypatch.setenv("GDP_CACHE_DIR", str(tmp_path))
    src = np.random.default_rng(3).integers(0, 256, (7, 5, 3), dtype=np.uint8)
    kernel = np.ones((3, 3), np.uint8)
    previous = gdp.api._default_target  # what set_target chose: None, not the cpu, by default
    gdp.set_target("gpu")
    cv2.clear_cache()
    try:
        if HAS_GPU:
            got = cv2.morphologyEx(src, cv2.MORPH_OPEN, kernel)
            np.testing.assert_array_equal(got, opencv.morphologyEx(src, cv2.MORPH_OPEN, kernel))
        else:
            with pytest.raises(ExecutionError, match="target 'gpu' needs"):
                cv2.morphologyEx(src, cv2.MORPH_OPEN, kernel)
    finally:
        gdp.set_target(previous)
        cv2.clear_cache()


@pytest.mark.skipif(not HAS_GPU, reason=NO_GPU)
@pytest.mark.parametrize("name", workload.WORKLOADS)
def test_workload_on_the_gpu_matches_its_peer(name):
    workload.run(importlib.import_module(name), target="gpu")


@pytest.mark.skipif(not HAS_GPU, reason=NO_GPU)
def test_cv2_chain_on_the_gpu_matches_opencv(tmp_path):
    import cv2 as opencv

    rng = np.random.default_rng(0)
    src = rng.integers(0, 256, (480, 640, 3), dtype=np.uint8)
    model = gdp.compile(_cv2_programs()["cv2_blur_gray"], target="gpu", cache_dir=tmp_path)
    got = model(src)
    got = got["gray"] if isinstance(got, dict) else got
    want = opencv.cvtColor(opencv.GaussianBlur(src, (5, 5), 0), opencv.COLOR_BGR2GRAY)
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1


# -- compile here, run there: compile_only, bundles, device arrays ---------------------------


def test_a_gpu_bundle_is_exported_without_a_gpu_and_refused_where_none_runs(tmp_path):
    """gdp.compile(compile_only=True) compiles for the gpu and loads nothing; the model refuses
    to run, its export holds the library with the runtime's fingerprint, and loading the bundle
    without a GPU is the clear ExecutionError, not a crash."""
    tone = importlib.import_module("tone")
    model = gdp.compile(
        tone.program, target="gpu", compile_only=True, verify=False, cache_dir=tmp_path / "c"
    )
    rgb = np.zeros((1080, 1920, 3), np.float32)
    with pytest.raises(ExecutionError, match="compile_only=True.*gdp.load the bundle"):
        model(rgb)
    bundle = model.export(tmp_path / "bundle")
    manifest = json.loads((bundle / "manifest.json").read_text())
    backend = get_backend("tvm-cuda")
    assert manifest["fingerprint"] == backend.runtime_fingerprint()
    assert "sm_90" in manifest["toolchain"] and "sm_90" not in manifest["fingerprint"]
    (entry,) = manifest["executables"]
    library = (bundle / entry["dir"] / LIBRARY).read_bytes()
    _check_library(library, entry["meta"], cuda.gpu_arch())
    if not HAS_GPU:
        with pytest.raises(ExecutionError, match="target 'gpu' needs"):
            gdp.load(bundle)


def test_gdp_export_for_the_gpu_on_the_command_line(tmp_path, monkeypatch, capsys):
    from gdp.cli import main

    tone = importlib.import_module("tone")
    onnx.save(convert(tone.program, None)[0], tmp_path / "tone.onnx")
    monkeypatch.setenv("GDP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GDP_GPU_ARCH", "sm_80")
    code = main(
        ["export", str(tmp_path / "tone.onnx"), "--target", "gpu", "-o", str(tmp_path / "b")]
    )
    assert code == 0, capsys.readouterr().err
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["target"] == "gpu" and manifest["executables"][0]["meta"]["gpu_arch"] == "sm_80"


class _CudaArray:
    """A stand-in for a torch.cuda tensor as gdp's input checks see one: a DLPack producer on
    device type 2 (CUDA) with a dtype, a shape and a contiguity flag. It has no data: the
    checks must refuse it before anything reads it."""

    def __init__(self, shape, dtype="torch.float32", contiguous=True) -> None:
        self.shape, self.dtype, self._contiguous = shape, dtype, contiguous

    def __dlpack_device__(self):
        return (2, 0)

    def is_contiguous(self) -> bool:
        return self._contiguous


@pytest.mark.parametrize(
    ("array", "message"),
    [
        (_CudaArray((1080, 1920, 3), "torch.uint8"), "expected dtype float32, got uint8"),
        (_CudaArray((1080, 1920, 4)), r"expected shape float32\[1080, 1920, 3\], got"),
        (_CudaArray((1080, 1920, 3), contiguous=False), "C-contiguous device array"),
        (_CudaArray((1080, 1920, 3)), "a device array .* given to a model that runs on cpu"),
    ],
)
def test_device_arrays_are_checked_before_anything_reads_them(array, message):
    from gdp.errors import InputError

    tone = importlib.import_module("tone")
    model = gdp.compile(tone.program, target="cpu", verify=False)
    with pytest.raises(InputError, match=message):
        model(array)


def test_device_arrays_are_read_in_place_and_outputs_stay_on_the_device(tmp_path):
    """TvmExecutable's device path (DLPack in, the VM, outputs as the input library's tensors)
    on the CPU device: a cpu library run as if its device were not the host's, its inputs TVM
    tensors, its outputs TVM tensors sharing the VM's memory, equal to the peer's."""
    tone = importlib.import_module("tone")
    graph = convert(tone.program, None)[0]
    backend = get_backend("tvm-llvm")
    prepared = pipeline.prepare(
        graph, None, backend.required_rewrites, False, None, None, IR_VERSION
    )
    backend.compile(prepared.graph, tmp_path, {}, None)
    loaded = cuda.CudaExecutable(tvm.runtime.load_module(str(tmp_path / LIBRARY)), tvm.cpu())
    loaded.zero_copy_inputs = False  # as on a GPU: host arrays would be staged
    rgb = np.random.default_rng(1).random((1080, 1920, 3), dtype=np.float32)
    on_device = tvm_ffi.from_dlpack(rgb)
    (got,) = loaded.run([on_device])
    assert isinstance(got, tvm_ffi.Tensor) and not isinstance(got, np.ndarray)
    np.testing.assert_allclose(
        np.from_dlpack(got), tone.peer(rgb=rgb)["mapped"], rtol=1e-5, atol=1e-6
    )
    assert not loaded._staging  # read in place, nothing staged
