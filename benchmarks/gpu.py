"""gdp's gpu target on an NVIDIA GPU: every workload, a gdp.cv2 subset and an inference server's
preprocessing, checked against their OpenCV/NumPy peers and timed against the GPU peers
(torchvision.transforms.v2, kornia, CV-CUDA: benchmarks/gpu_peers.py), same process, same
input, interleaved, median of many runs with min and max, with the device-copy roofline
measured in the same run.

The GPU machine has neither TensorFlow nor TVM's compiler, so the work is split in three:

    python benchmarks/gpu.py prepare --out .gpu      # here: compile (gpu, compile_only) and
                                                     # export every program as a bundle; a
                                                     # runtime-only TVM; gdp as a wheel
    python3 benchmarks/gpu.py run --prepared .gpu --out OUT   # there, TVM_USE_RUNTIME_LIB=1:
                                                     # gdp.load each bundle, check, time
    python benchmarks/gpu.py report OUT/gpu.json     # here: benchmarks/results/gpu.{json,md,png}

The `run` step takes each workload's inputs, peer and check from its sample (samples/*.py)
without importing it (the samples import TensorFlow for their programs): sample_parts() runs
the sample's source less its imports of TensorFlow and gdp and its tf.function.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(SAMPLES))

import photos  # noqa: E402  (samples/: skimage's photos at 1080p; no TensorFlow)
from workload import WORKLOADS  # noqa: E402  (samples/: GDPNPU's six, then the DNN cases)

# The architecture compiled for: the H100 and H200 are sm_90 (a later GPU JIT-compiles it).
ARCH = "sm_90"
H, W = 1080, 1920


# -- the programs -----------------------------------------------------------------------------

# gdp.cv2 calls on a 1080p BGR photo, each written once for both modules: `cv` is gdp.cv2 inside
# a tf.function when preparing, OpenCV itself when checking. The tolerance is the most a gdp
# value may differ from OpenCV's (the conformance suite's: exact, or 1 where OpenCV rounds
# through fixed point differently). Not here: warpAffine, whose program inside a tf.function
# holds image-sized constants (66 MB, three times over in a bundle): too much to carry to the GPU
# machine (64 MiB a run); and threshold, which held a 12 MB one until after the H200 runs.
CV2_CASES = {
    "cvtColor BGR2GRAY": (lambda cv, s: cv.cvtColor(s, cv.COLOR_BGR2GRAY), 1),
    "cvtColor BGR2HSV": (lambda cv, s: cv.cvtColor(s, cv.COLOR_BGR2HSV), 1),
    "GaussianBlur 5x5": (lambda cv, s: cv.GaussianBlur(s, (5, 5), 0), 1),
    "blur 3x3": (lambda cv, s: cv.blur(s, (3, 3)), 1),
    "resize LINEAR 640x360": (
        lambda cv, s: cv.resize(s, (640, 360), interpolation=cv.INTER_LINEAR),
        1,
    ),
    "resize AREA 960x540": (lambda cv, s: cv.resize(s, (960, 540), interpolation=cv.INTER_AREA), 1),
    "flip 1": (lambda cv, s: cv.flip(s, 1), 0),
    "Sobel dx 16S": (lambda cv, s: cv.Sobel(s, cv.CV_16S, 1, 0, ksize=3), 0),
    "erode 3x3": (lambda cv, s: cv.erode(s, np.ones((3, 3), np.uint8)), 0),
    "addWeighted": (lambda cv, s: cv.addWeighted(s, 0.7, s, 0.3, 5), 1),
    "convertScaleAbs": (lambda cv, s: cv.convertScaleAbs(s, alpha=1.5, beta=-20), 1),
}

# The inference server's preprocessing (the issue's end-to-end case): uint8 BGR 1080p on the
# host -> 224x224 bilinear -> RGB -> /255 -> ImageNet mean/std -> CHW float16 on the GPU.
SERVER_SIZE = 224
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def _server_program():
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.uint8, name="bgr")])
    def server(bgr):
        rgb = tf.reverse(tf.cast(bgr, tf.float32), axis=[2])
        x = tf.image.resize(rgb[None], (SERVER_SIZE, SERVER_SIZE), antialias=False)[0]
        x = (x / 255.0 - MEAN) / STD
        return {"tensor": tf.cast(tf.transpose(x, [2, 0, 1]), tf.float16)}

    return server


def _server_opencv(bgr: np.ndarray) -> np.ndarray:
    """What servers run today on the host: OpenCV's uint8 resize, then NumPy."""
    import cv2

    x = cv2.resize(bgr, (SERVER_SIZE, SERVER_SIZE), interpolation=cv2.INTER_LINEAR)
    x = cv2.cvtColor(x, cv2.COLOR_BGR2RGB).astype(np.float32)
    return np.ascontiguousarray(((x / 255.0 - MEAN) / STD).transpose(2, 0, 1)).astype(np.float16)


def _server_reference(bgr: np.ndarray) -> np.ndarray:
    """The same arithmetic on float input (OpenCV's float resize): what gdp is checked with."""
    import cv2

    x = cv2.resize(bgr.astype(np.float32), (SERVER_SIZE, SERVER_SIZE), interpolation=1)
    x = (x[:, :, ::-1] / 255.0 - MEAN) / STD
    return np.ascontiguousarray(x.transpose(2, 0, 1))


def _bgr_photo() -> np.ndarray:
    return np.ascontiguousarray(photos.photo_1080p()[:, :, ::-1])


def sample_parts(name: str) -> SimpleNamespace:
    """A workload sample's inputs(), peer(), check() and bytes_moved() with the constants they
    use, from its source less its imports of TensorFlow and gdp and its tf.function(s) (see the
    module's doc): a function that needs TensorFlow fails only if called."""
    path = SAMPLES / f"{name}.py"
    tree = ast.parse(path.read_text())
    keep = []
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [getattr(node, "module", None) or "", *(a.name for a in node.names)]
            if any(n.split(".")[0] in ("tensorflow", "gdp", "workload") for n in names):
                continue
        if isinstance(node, ast.FunctionDef) and node.decorator_list:
            continue
        keep.append(node)
    namespace: dict = {"__name__": f"sample_{name}"}
    exec(compile(ast.Module(keep, type_ignores=[]), str(path), "exec"), namespace)
    return SimpleNamespace(**namespace)


# -- prepare (here, with TensorFlow and TVM's compiler) --------------------------------------


def _export(program, directory: Path, shapes: list | None = None, cache_dir=None) -> dict:
    import gdp

    t0 = time.perf_counter()
    model = gdp.compile(program, target="gpu", compile_only=True, cache_dir=cache_dir)
    model.export(directory, shapes=shapes)
    return {"compile_s": round(time.perf_counter() - t0, 2), "kernels": model.report()["kernels"]}


def _workload_program(name: str):
    import importlib

    module = importlib.import_module(name)
    if name == "canny":
        return module, module.make_prepare(module.LOW, module.HIGH, module.L2_GRADIENT)
    return module, module.program


def prepare(
    out: Path, only: list[str] | None = None, spread: int | None = None, narrow: bool = False
) -> None:
    """Every program compiled and exported under `out` (those in `only`); with `spread`, the
    workloads in `only` once more as variants `NAME@spreadN`, compiled with gpu_schedules'
    SPREAD_ELEMENTS = N (run times them beside the others); with `narrow`, as `NAME@narrow`
    with its NARROW_INDICES switched."""
    import tempfile

    import tensorflow as tf

    import gdp
    import gdp.cv2 as gcv2

    os.environ["GDP_GPU_ARCH"] = ARCH
    bundles = out / "bundles"
    if out.exists() and not only:
        shutil.rmtree(out)
    bundles.mkdir(parents=True, exist_ok=True)
    done: dict = {"arch": ARCH, "bundles": {}}

    def wanted(key: str) -> bool:
        return not only or key in only

    variant = None
    if spread is not None or narrow:
        from gdp.runtime.backends.tvm import gpu_schedules

        if spread is not None:
            gpu_schedules.SPREAD_ELEMENTS = spread
            variant = f"spread{spread}"
        if narrow:
            gpu_schedules.NARROW_INDICES = not gpu_schedules.NARROW_INDICES
            variant = "narrow" if gpu_schedules.NARROW_INDICES else "wide"
    for name in WORKLOADS:
        if not wanted(name):
            continue
        module, program = _workload_program(name)
        shapes = [{k: v.shape for k, v in module.inputs().items()}]
        if variant is not None:  # a cache of its own: the cache key knows no module constant
            key = f"{name}@{variant}"
            with tempfile.TemporaryDirectory() as cache:
                done["bundles"][key] = _export(program, bundles / key, shapes, cache)
            print(key, done["bundles"][key], flush=True)
            continue
        done["bundles"][name] = _export(program, bundles / name, shapes)
        print(name, done["bundles"][name], flush=True)
        if name == "canny":
            # Hysteresis runs on the host through a TIR kernel the GPU machine cannot compile:
            # there the gpu's maps are checked against the cpu's, computed here.
            rgb = module.inputs()["rgb"]
            maps = gdp.compile(program, target="cpu", verify=False)(rgb)
            np.savez_compressed(out / "canny_maps.npz", rgb=rgb, **maps)
    spec = [tf.TensorSpec([H, W, 3], tf.uint8, name="src")]
    for name, (call, _) in CV2_CASES.items():
        if not wanted(name):
            continue

        def program(src, call=call):
            return {"dst": call(gcv2, src)}

        key = "cv2_" + "_".join(name.split())
        done["bundles"][key] = {
            "case": name,
            **_export(tf.function(program, input_signature=spec), bundles / key),
        }
        print(name, done["bundles"][key], flush=True)
    if wanted("server"):
        done["bundles"]["server"] = _export(
            _server_program(), bundles / "server", [f"bgr={H}x{W}x3"]
        )
    _runtime_only_tvm(out / "site")
    wheels = out / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
        + ["-w", str(wheels), str(ROOT)],
        check=True,
    )
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True, text=True
    ).stdout.strip()
    done["commit"] = commit
    previous = out / "prepared.json"
    if only and previous.exists():
        done["bundles"] = {**json.loads(previous.read_text())["bundles"], **done["bundles"]}
    previous.write_text(json.dumps(done, indent=1))


def _runtime_only_tvm(site: Path) -> None:
    """The installed TVM package less its compiler (libtvm_compiler.so), its C++ sources and
    headers: what TVM_USE_RUNTIME_LIB=1 loads (about 17 MB)."""
    import tvm

    source = Path(tvm.__file__).parent
    target = site / "tvm"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(
        source,
        target,
        ignore=shutil.ignore_patterns(
            "libtvm_compiler.so", "3rdparty", "src", "include", "__pycache__"
        ),
    )


# -- run (on the GPU machine) ----------------------------------------------------------------


def _timing(seconds: list[float]) -> dict:
    return {
        "median_ms": statistics.median(seconds) * 1e3,
        "min_ms": min(seconds) * 1e3,
        "max_ms": max(seconds) * 1e3,
        "runs": len(seconds),
    }


def _max_diff(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return float("inf")
    return float(np.max(np.abs(got - want))) if got.size else 0.0


class Device:
    """The torch side of a run: moving arrays, synchronising, timing."""

    def __init__(self, runs: int) -> None:
        import torch

        self.torch = torch
        self.runs = runs

    def put(self, array: np.ndarray):
        return self.torch.from_numpy(np.ascontiguousarray(array)).cuda()

    def host(self, value) -> np.ndarray:
        if hasattr(value, "detach"):
            return value.detach().cpu().numpy()
        return np.asarray(value)

    def timed(self, fns: dict) -> dict:
        """Each fn run `runs` times interleaved, each run ending when the GPU is idle."""
        from gdp.benchmarking import compare

        sync = self.torch.cuda.synchronize

        def synced(fn):
            def run():
                fn()
                sync()

            return run

        timings = compare({k: synced(f) for k, f in fns.items()}, runs=self.runs, warmup=3)
        return {k: _timing(t.seconds) for k, t in timings.items()}

    def copy_bandwidth(self, megabytes: int = 1024) -> dict:
        """Device-to-device copy (bytes read plus written per second) and host-to-device copy
        from pageable and from pinned memory, median of 10."""
        torch = self.torch
        n = megabytes << 20
        src = torch.empty(n, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        host = torch.empty(n, dtype=torch.uint8)
        pinned = host.pin_memory()
        out = {}
        for name, fn, moved in (
            ("device_copy", lambda: dst.copy_(src), 2 * n),
            ("h2d_pageable", lambda: dst.copy_(host), n),
            ("h2d_pinned", lambda: dst.copy_(pinned, non_blocking=True), n),
        ):
            times = []
            for _ in range(12):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                fn()
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
            out[name + "_GBps"] = moved / statistics.median(times[2:]) / 1e9
        return out


def _check_workload(parts, got: dict, want: dict) -> str | None:
    try:
        parts.check(got, want)
        return None
    except AssertionError as err:
        return str(err).strip()[:500]


def _by_name(model, result) -> dict:
    """A model call's result as a dict by output name (one output comes back bare)."""
    return result if isinstance(result, dict) else {model.output_names[0]: result}


def _call_parts(model, on_gpu: dict, device: Device, runs: int = 200) -> dict:
    """Microseconds per call of what a gdp call on device arrays does on the host, each timed
    alone without waiting for the GPU (where the time of a short program goes)."""
    import tvm_ffi

    torch = device.torch
    spec = model._last
    executable = spec.executable
    arrays = [on_gpu[n] for n in model.input_names]
    tensors = [tvm_ffi.from_dlpack(a) for a in arrays]
    out = executable.run(arrays)
    parts = {
        "model call": lambda: model(**on_gpu),
        "executable.run": lambda: executable.run(arrays),
        "VM main (TVM tensors)": lambda: executable._main(*tensors),
        "tvm_ffi.from_dlpack(torch)": lambda: [tvm_ffi.from_dlpack(a) for a in arrays],
        "torch.from_dlpack(output)": lambda: torch.from_dlpack(tvm_ffi.from_dlpack(out[0])),
        "model._bind (input checks)": lambda: model._bind((), on_gpu),
        "torch.cuda.current_stream": lambda: torch.cuda.current_stream(arrays[0].device),
    }
    found = {}
    for name, fn in parts.items():
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(runs):
            fn()
        found[name] = (time.perf_counter() - t0) / runs * 1e6
        torch.cuda.synchronize()
    return found


def _kernel_alone(model, on_gpu: dict, kernels: list, device: Device, launches: int = 200):
    """Milliseconds per launch of a one-kernel program's kernel, launched back to back from
    its library (each launch queues faster than the kernel runs, so this is the GPU's time;
    the profile's events also hold the gap while the host launches); None for programs of
    several kernels."""
    import tvm_ffi

    if len(kernels) != 1:
        return None
    torch = device.torch
    executable = model._last.executable
    kernel = executable.library.get_function(kernels[0][0], True)
    if kernel is None:
        return None
    outs = model(**on_gpu)
    outs = list(outs.values()) if isinstance(outs, dict) else [outs]
    args = [tvm_ffi.from_dlpack(on_gpu[n]) for n in model.input_names]
    args += [tvm_ffi.from_dlpack(o) for o in outs]
    kernel(*args)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(launches):
        kernel(*args)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / launches


def _host_profile(fn, calls: int = 300, lines: int = 18) -> str:
    """cProfile's busiest functions (own time) over `calls` calls of `fn`: where a call's host
    time goes, for the next change."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(lines)
    return text.getvalue()[-6000:]


def run_workload(name: str, prepared: Path, device: Device, roofline: float) -> dict:
    import gpu_peers

    import gdp

    bundle, name = name, name.split("@")[0]  # NAME@VARIANT: a variant's bundle of NAME
    parts = sample_parts(name)
    if name == "canny":  # the input the cpu maps were computed on (see prepare)
        inputs = {"rgb": np.load(prepared / "canny_maps.npz")["rgb"]}
    else:
        inputs = parts.inputs()
    model = gdp.load(prepared / "bundles" / bundle)
    load_s = model.report()["load_s"]
    on_gpu = {k: device.put(v) for k, v in inputs.items()}
    result: dict = {"name": bundle, "load_s": load_s, "kernels": model.report()["kernels"]}

    # Correctness: host arrays in and out, then device arrays in and out.
    host_out = _by_name(model, model(**inputs))
    dev_out = _by_name(model, model(**on_gpu))
    result["device_output_type"] = type(next(iter(dev_out.values()))).__module__
    dev_host = {k: device.host(v) for k, v in dev_out.items()}
    if name == "canny":
        maps = np.load(prepared / "canny_maps.npz")
        differ = {
            k: int(np.count_nonzero(dev_host[k] != maps[k])) for k in ("candidates", "strong")
        }
        result["check"] = None if not any(differ.values()) else f"pixels differ: {differ}"
        result["check_against"] = "gdp's cpu maps (hysteresis needs the host compiler)"
    else:
        want = parts.peer(**inputs)
        result["check"] = _check_workload(parts, dev_host, want)
        result["check_host_io"] = _check_workload(parts, host_out, want)
        result["max_abs_diff"] = {k: _max_diff(dev_host[k], want[k]) for k in want}
        result["check_against"] = "the sample's OpenCV/NumPy peer"

    # Timing, data on the GPU: gdp (device arrays in and out) and each GPU peer.
    peers = gpu_peers.PEERS.get(name, {})
    fns = {"gdp": lambda: model(**on_gpu)}
    peer_diffs = {}
    for label, fn in peers.items():
        fns[label] = lambda fn=fn: fn(**on_gpu)
        try:
            got = {k: device.host(v) for k, v in fn(**on_gpu).items()}
            peer_diffs[label] = {k: _max_diff(got[k], dev_host[k]) for k in got if k in dev_host}
        except Exception as err:
            peer_diffs[label] = f"{type(err).__name__}: {str(err)[:200]}"
            fns.pop(label)
    result["peer_vs_gdp_max_abs_diff"] = peer_diffs
    # Peers whose results differ from the workload's by design (kornia's Canny, torchvision's
    # sigma-1.1 Gaussian for OpenCV's fixed 5-tap table): timed, not compared.
    result["timing_only_peers"] = sorted(
        label for label in peers if (name, label) in gpu_peers.NOT_COMPARABLE
    )
    result["on_device"] = device.timed(fns)
    # Including the host-to-device copy of the inputs (torch's .cuda(), for everyone).
    with_copy = {
        "gdp": lambda: model(**{k: device.put(v) for k, v in inputs.items()}),
        "gdp host arrays in and out": lambda: model(**inputs),
    }
    for label, fn in peers.items():
        if label in fns:
            with_copy[label] = lambda fn=fn: fn(**{k: device.put(v) for k, v in inputs.items()})
    result["with_copy"] = device.timed(with_copy)
    # gdp's kernels alone (profile=True: CUDA events around each kernel).
    kernel_s = []
    for _ in range(10):
        task = model.submit(on_gpu, profile=True, wait=True)
        task.result()
        kernel_s.append(sum(t for _, t in task.profile.kernels))
    result["gdp_kernels"] = _timing(kernel_s)
    result["gdp_kernel_list"] = [(k, t * 1e3) for k, t in task.profile.kernels]
    result["gdp_call_parts"] = _call_parts(model, on_gpu, device)
    try:
        result["gdp_kernel_alone_ms"] = _kernel_alone(model, on_gpu, task.profile.kernels, device)
    except Exception as err:  # a kernel whose arguments are not the program's own
        result["gdp_kernel_alone_ms"] = f"{type(err).__name__}: {str(err)[:200]}"
    result["gdp_call_host_profile"] = _host_profile(lambda: model(**on_gpu))
    result["gdp_host_io_profile"] = _host_profile(lambda: model(**inputs), calls=100)
    task = model.submit(inputs, profile=True, wait=True)
    task.result()
    result["gdp_host_io_phases"] = task.profile.as_dict()
    device.torch.cuda.synchronize()
    moved = parts.bytes_moved(inputs)
    result["bytes_moved"] = moved
    result["roofline_ms"] = moved / roofline * 1e3 if roofline else None
    return result


def run_cv2(key: str, case: str, prepared: Path, device: Device, src: np.ndarray) -> dict:
    import cv2

    import gdp

    call, tolerance = CV2_CASES[case]
    model = gdp.load(prepared / "bundles" / key)
    want = call(cv2, src)
    got = device.host(model(device.put(src)))
    diff = _max_diff(got, want)
    result = {
        "name": case,
        "max_abs_diff": diff,
        "tolerance": tolerance,
        "check": None if diff <= tolerance else f"max |gdp - OpenCV| = {diff} > {tolerance}",
    }
    on_gpu = device.put(src)
    cv2.setNumThreads(os.cpu_count() or 1)
    timings = device.timed({"gdp": lambda: model(on_gpu)})
    from gdp.benchmarking import compare

    host = compare({"OpenCV": lambda: call(cv2, src)}, runs=device.runs)["OpenCV"]
    timings["OpenCV (host, all cores)"] = _timing(host.seconds)
    result["timings"] = timings
    return result


def run_server(prepared: Path, device: Device, batch: int = 64) -> dict:
    """Throughput of the server case over `batch` different 1080p photos: gdp on device arrays
    (the photos in pinned host memory, copied to the GPU by torch; fp16 CHW on the GPU), gdp on
    host arrays (pageable, and gdp.pinned_empty's; through run_async, outputs on the host),
    torchvision and the other GPU peers (the same copy as gdp's first), and OpenCV + NumPy on
    every host core (one image per thread)."""
    from concurrent.futures import ThreadPoolExecutor

    import cv2
    import gpu_peers

    import gdp

    torch = device.torch
    model = gdp.load(prepared / "bundles" / "server")
    # Photos every scikit-image ships in its wheel (others may be downloaded on first use).
    names = ("astronaut", "chelsea", "coffee", "rocket")
    images = [np.ascontiguousarray(photos.photo_1080p(n)[:, :, ::-1]) for n in names]
    images = [images[i % len(images)] for i in range(batch)]
    got = device.host(model(device.put(images[0]))).astype(np.float32)
    want = _server_reference(images[0])
    diff = _max_diff(got, want)
    # fp16 rounding (2^-11 relative, |x| <= 2.7) plus OpenCV's float resize weights (5e-4).
    tolerance = 2.7 * 2.0**-11 + 5e-4
    result = {
        "max_abs_diff": diff,
        "tolerance": tolerance,
        "check": None if diff <= tolerance else f"max |gdp - reference| = {diff} > {tolerance}",
    }
    # As a server holds its decoded images: in pinned host memory, copied to the GPU
    # asynchronously, each copy queued behind the previous image's kernels.
    pinned = [torch.from_numpy(image).pin_memory() for image in images]

    def through_gpu(fn):
        def run():
            outs = [fn(image.cuda(non_blocking=True)) for image in pinned]
            torch.cuda.synchronize()
            return outs

        return run

    workers = os.cpu_count() or 1
    cv2.setNumThreads(1)
    pool = ThreadPoolExecutor(workers)

    def opencv_numpy():
        return list(pool.map(_server_opencv, images))

    def host_arrays_async():
        # gdp from the decoded numpy images (no torch): its worker's pipelining, the fp16
        # outputs back on the host through its pinned buffers.
        tasks = [gdp.run_async(model, image) for image in images]
        gdp.sync()
        return [task.result() for task in tasks]

    from gdp.runtime.backends.tvm import cuda_executable

    def gdp_staging_async():
        # The same, each pageable image copied by the host into gdp's pinned buffer first
        # (the default hands it to CUDA as it is, whose driver stages it).
        default = cuda_executable.STAGE_PAGEABLE
        cuda_executable.STAGE_PAGEABLE = True
        try:
            return host_arrays_async()
        finally:
            cuda_executable.STAGE_PAGEABLE = default

    # As a server would decode into them: gdp's pinned arrays, copied to the GPU in place.
    in_pinned = [gdp.pinned_empty(image.shape, image.dtype) for image in images]
    for buffer, image in zip(in_pinned, images, strict=True):
        buffer[...] = image

    def pinned_async():
        tasks = [gdp.run_async(model, image) for image in in_pinned]
        gdp.sync()
        return [task.result() for task in tasks]

    # Every host-array way gives each image the answer gdp gives it on device arrays (the
    # pipelined launches, the slots and the pinned inputs checked image by image).
    by_image = [device.host(model(device.put(image))) for image in images[:4]]
    host_ways = {
        "run_async": host_arrays_async,
        "run_async, gdp's staging": gdp_staging_async,
        "run_async, pinned inputs": pinned_async,
        "one call at a time": lambda: [model(i) for i in images],
    }
    result["host_arrays_differ"] = {}
    for label, fn in host_ways.items():
        outs = [_by_name(model, o)[model.output_names[0]] for o in fn()]
        differ = [i for i, o in enumerate(outs) if not np.array_equal(o, by_image[i % 4])]
        result["host_arrays_differ"][label] = differ
        if differ:
            result["check"] = f"{label}: images {differ[:8]} differ from the device-array run"

    fns = {
        "gdp": through_gpu(model),
        "gdp, gdp.pinned_empty arrays in, host arrays out (run_async)": pinned_async,
        "gdp, host arrays in and out (run_async)": host_arrays_async,
        "gdp, host arrays in and out, gdp's staging (run_async)": gdp_staging_async,
        "gdp, host arrays in and out (one call at a time)": lambda: [model(i) for i in images],
        "OpenCV + NumPy (host threads)": opencv_numpy,
    }
    for label, fn in gpu_peers.SERVER.items():
        fns[label] = through_gpu(fn)
    from gdp.benchmarking import compare

    timings = compare(fns, runs=max(5, device.runs // 10), warmup=1)
    result["gdp_host_io_profile"] = _host_profile(lambda: model(images[0]), calls=50)
    result["images"] = batch
    result["host_threads"] = workers
    result["timings"] = {k: _timing(t.seconds) for k, t in timings.items()}
    result["images_per_s"] = {k: batch / t.median for k, t in timings.items()}
    pool.shutdown()
    return result


def run(prepared: Path, out: Path, runs: int, only: list[str] | None) -> None:
    import gpu_peers
    import torch

    import gdp

    out.mkdir(parents=True, exist_ok=True)
    device = Device(runs)
    gpu_peers.exact_float32()  # the peers' float32 as IEEE float32, as gdp's (not TF32)
    report: dict = {
        "machine": {
            "gpu": torch.cuda.get_device_name(0),
            "capability": ".".join(map(str, torch.cuda.get_device_capability(0))),
            "cpu_cores": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "gdp_commit": json.loads((prepared / "prepared.json").read_text()).get("commit"),
            "tvm_runtime_only": os.environ.get("TVM_USE_RUNTIME_LIB") == "1",
        },
        "workloads": [],
        "cv2": [],
        "errors": {},
    }
    for module in ("torchvision", "kornia", "cvcuda", "cv2"):
        try:
            report["machine"][module] = __import__(module).__version__
        except Exception as err:
            report["machine"][module] = f"missing: {type(err).__name__}"
    report["copy"] = device.copy_bandwidth()
    roofline = report["copy"]["device_copy_GBps"] * 1e9
    path = out / "gpu.json"

    def save():
        path.write_text(json.dumps(report, indent=1, default=str))

    def attempt(key, fn):
        t0 = time.perf_counter()
        try:
            value = fn()
            print(f"{key}: {time.perf_counter() - t0:.1f} s", json.dumps(value, default=str)[:600])
            return value
        except Exception:
            report["errors"][key] = traceback.format_exc()[-3000:]
            print(f"{key}: FAILED\n{report['errors'][key]}", flush=True)
            return None
        finally:
            save()

    save()
    prepared_cases = json.loads((prepared / "prepared.json").read_text())["bundles"]
    # knn last: its first GPU run ended the process (an illegal memory access poisons the CUDA
    # context), so a repeat would take the cases after it along.
    for name in [w for w in WORKLOADS if w != "knn"]:
        if name in prepared_cases and (not only or name in only):
            value = attempt(name, lambda name=name: run_workload(name, prepared, device, roofline))
            if value:
                report["workloads"].append(value)
    src = _bgr_photo()
    for key, facts in prepared_cases.items():
        if key.startswith("cv2_") and (not only or "cv2" in only):
            case = facts["case"]
            value = attempt(key, lambda k=key, c=case: run_cv2(k, c, prepared, device, src))
            if value:
                report["cv2"].append(value)
    report["variants"] = []
    for key in prepared_cases:
        if "@" in key and (not only or key.split("@")[0] in only):
            value = attempt(key, lambda k=key: run_workload(k, prepared, device, roofline))
            if value:
                report["variants"].append(value)
    if "server" in prepared_cases and (not only or "server" in only):
        report["server"] = attempt("server", lambda: run_server(prepared, device))
    if "knn" in prepared_cases and (not only or "knn" in only):
        value = attempt("knn", lambda: run_workload("knn", prepared, device, roofline))
        if value:
            report["workloads"].append(value)
    report["gdp"] = gdp.__version__
    save()


# -- report (here) ---------------------------------------------------------------------------


def _cell(t: dict | None) -> str:
    if not t:
        return "-"
    return f"{t['median_ms']:.3f} ({t['min_ms']:.3f}-{t['max_ms']:.3f})"


def report(source: Path, results: Path) -> None:
    data = json.loads(source.read_text())
    results.mkdir(parents=True, exist_ok=True)
    (results / "gpu.json").write_text(json.dumps(data, indent=1))
    m = data["machine"]
    lines = [
        '# gdp on the GPU (`target="gpu"`)',
        "",
        f"{m['gpu']} (compute capability {m['capability']}), {m['cpu_cores']} CPU cores,"
        f" Python {m['python']}, torch {m['torch']}, torchvision {m.get('torchvision')},"
        f" kornia {m.get('kornia')}, CV-CUDA {m.get('cvcuda')}, OpenCV {m.get('cv2')}; gdp at"
        f" {m.get('gdp_commit')} loaded its bundles with TVM's runtime only"
        f" ({m.get('tvm_runtime_only')}). Produced by `benchmarks/gpu.py`.",
        "",
        f"Copies measured in the same run: device to device {data['copy']['device_copy_GBps']:.0f}"
        f" GB/s (read + write), host to device {data['copy']['h2d_pageable_GBps']:.1f} GB/s from"
        f" pageable memory, {data['copy']['h2d_pinned_GBps']:.1f} GB/s from pinned memory.",
        "",
        "## Workloads, data on the GPU",
        "",
        "Milliseconds per call, median (min-max), each call ending when the GPU is idle. `gdp`"
        " is a call of the loaded model on torch.cuda tensors, returning torch.cuda tensors;"
        " `kernels` is the sum of its kernels' times (profile=True: CUDA events, which also hold"
        " the host's launch gaps); `kernel alone` is a one-kernel program's kernel launched back"
        " to back (the GPU's own time); the roofline is the workload's least bytes moved at the"
        " device-copy bandwidth. `NAME@VARIANT` rows are the workload compiled with one of"
        " gpu_schedules' constants changed (`gpu.py prepare --spread N` / `--narrow`), timed in"
        " the same run.",
        "",
        "| workload | check | gdp | gdp kernels | kernel alone | roofline | best peer | peer |"
        " gdp speedup |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for w in data["workloads"] + data.get("variants", []):
        timings = w["on_device"]
        peers = {k: v for k, v in timings.items() if k != "gdp"}
        best = min(peers, key=lambda k: peers[k]["median_ms"]) if peers else None
        speed = f"{peers[best]['median_ms'] / timings['gdp']['median_ms']:.2f}x" if best else "-"
        roof = f"{w['roofline_ms']:.3f}" if w.get("roofline_ms") else "-"
        alone = w.get("gdp_kernel_alone_ms")
        alone = f"{alone:.4f}" if isinstance(alone, float) else "-"
        lines.append(
            f"| {w['name']} | {'ok' if w['check'] is None else 'FAIL'} | {_cell(timings['gdp'])}"
            f" | {_cell(w['gdp_kernels'])} | {alone} | {roof} | {best or '-'} |"
            f" {_cell(peers.get(best))} | {speed} |"
        )
    lines += [
        "",
        "Where a gdp call's time goes on the host (microseconds per call, not waiting for the"
        " GPU; `gdp_call_parts` in gpu.json), and its kernels (ms, `gdp_kernel_list`; CUDA"
        " events, with the host's launch gaps). `torch.from_dlpack(out)` is torch's public"
        " conversion of one output, for scale: gdp hands torch a DLPack capsule instead.",
        "",
        "| workload | model call | input checks | executable.run | VM main |"
        " torch.from_dlpack(out) | kernels |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for w in data["workloads"]:
        parts = w.get("gdp_call_parts") or {}
        kernels = ", ".join(f"{k[:24]} {t:.3f}" for k, t in w.get("gdp_kernel_list", []))
        cells = [
            parts.get(k)
            for k in (
                "model call",
                "model._bind (input checks)",
                "executable.run",
                "VM main (TVM tensors)",
                "torch.from_dlpack(output)",
            )
        ]
        lines.append(
            f"| {w['name']} | "
            + " | ".join("-" if c is None else f"{c:.0f}" for c in cells)
            + f" | {kernels} |"
        )
    lines += [
        "",
        "## Workloads, including the host-to-device copy of the inputs",
        "",
        "| workload | peer | ms |",
        "| --- | --- | ---: |",
    ]
    for w in data["workloads"]:
        for label, t in w["with_copy"].items():
            lines.append(f"| {w['name']} | {label} | {_cell(t)} |")
    if data.get("server"):
        s = data["server"]
        lines += [
            "",
            f"## Server case: {s['images']} different 1080p uint8 BGR photos on the host ->"
            " 224x224 -> normalised CHW float16 on the GPU",
            "",
            f"Check against OpenCV's float arithmetic: max |diff| {s['max_abs_diff']:.2e}"
            f" ({'ok' if s['check'] is None else 'FAIL: ' + s['check']}). Each way of giving"
            " gdp host arrays against its device-array answer, image by image: "
            + (
                ", ".join(
                    f"{k} {'identical' if not v else f'{len(v)} differ'}"
                    for k, v in s.get("host_arrays_differ", {}).items()
                )
                or "not run"
            )
            + f". OpenCV + NumPy runs one image per thread on {s['host_threads']} host threads."
            + (f" {data['server_note']}" if data.get("server_note") else ""),
            "",
            "| peer | ms per batch | images/s | vs OpenCV + NumPy |",
            "| --- | ---: | ---: | ---: |",
        ]
        base = s["images_per_s"]["OpenCV + NumPy (host threads)"]
        for label, t in s["timings"].items():
            rate = s["images_per_s"][label]
            lines.append(f"| {label} | {_cell(t)} | {rate:.0f} | {rate / base:.2f}x |")
    if data.get("cv2"):
        lines += [
            "",
            "## gdp.cv2 on the GPU against OpenCV on the host (1080p BGR photo)",
            "",
            "| call | max abs diff | check | gdp (GPU) ms | OpenCV (host, all cores) ms |",
            "| --- | ---: | --- | ---: | ---: |",
        ]
        for c in data["cv2"]:
            t = c["timings"]
            lines.append(
                f"| {c['name']} | {c['max_abs_diff']:g} | {'ok' if c['check'] is None else 'FAIL'}"
                f" | {_cell(t['gdp'])} | {_cell(t['OpenCV (host, all cores)'])} |"
            )
    if data.get("errors"):
        lines += ["", "## Errors", ""]
        for key, text in data["errors"].items():
            lines.append(f"- {key}: `{text.strip().splitlines()[-1][:300]}`")
    (results / "gpu.md").write_text("\n".join(lines) + "\n")
    _plot(data, results / "gpu.png")


def _plot(data: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = data["workloads"]
    if not workloads:
        return
    labels = sorted({k for w in workloads for k in w["on_device"]})
    labels.remove("gdp")
    labels = ["gdp", *labels]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / len(labels)
    for i, label in enumerate(labels):
        xs = [j + i * width for j, w in enumerate(workloads) if label in w["on_device"]]
        ys = [w["on_device"][label]["median_ms"] for w in workloads if label in w["on_device"]]
        ax.bar(xs, ys, width, label=label)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(workloads))])
    ax.set_xticklabels([w["name"] for w in workloads], rotation=20)
    ax.set_ylabel("ms per call (median), data on the GPU")
    ax.set_yscale("log")
    ax.set_title(f"gdp gpu target vs GPU peers on {data['machine']['gpu']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--out", type=Path, default=ROOT / ".gpu")
    p.add_argument("--only", default="", help="comma-separated workloads / cv2 cases / server")
    p.add_argument("--spread", type=int, help="variants of the --only workloads: SPREAD_ELEMENTS")
    p.add_argument("--narrow", action="store_true", help="variants: NARROW_INDICES switched")
    r = sub.add_parser("run")
    r.add_argument("--prepared", type=Path, default=ROOT / ".gpu")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--runs", type=int, default=50)
    r.add_argument("--only", default="")
    q = sub.add_parser("report")
    q.add_argument("json", type=Path)
    q.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    only = [s for s in getattr(args, "only", "").split(",") if s] or None
    if args.step == "prepare":
        prepare(args.out, only, args.spread, args.narrow)
    elif args.step == "run":
        run(args.prepared, args.out, args.runs, only)
    else:
        report(args.json, args.results)


if __name__ == "__main__":
    main()
