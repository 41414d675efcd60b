"""compile / run_async / sync semantics, profiling and the report."""

import threading

import numpy as np
import pytest

import gdp
from gdp.runtime import queue
from tests.models import affine, affine_oracle


@pytest.fixture(scope="module")
def model():
    return gdp.compile(affine((64, 48, 3)))


def test_run_async_returns_before_the_work_ends(model):
    # Hold the cpu worker on an event, so the run cannot have started when run_async returns.
    release = threading.Event()
    blocker = queue.worker("cpu").submit(release.wait, queue.Task())
    x = np.random.default_rng(0).random((64, 48, 3), np.float32)
    z = np.zeros((64, 48, 3), np.float32)
    handle = gdp.run_async(model, {"x": x}, {"y": z})
    assert not handle.done()
    assert not z.any()  # nothing written yet
    release.set()
    gdp.sync()
    assert blocker.done() and handle.done()
    np.testing.assert_array_equal(z, affine_oracle(x))
    assert handle.result()["y"] is z


def test_missing_outputs_are_allocated(model):
    x = np.random.default_rng(1).random((64, 48, 3), np.float32)
    handle = gdp.run_async(model, [x])
    out = handle.result()
    assert list(out) == ["y"]
    np.testing.assert_array_equal(out["y"], affine_oracle(x))
    np.testing.assert_array_equal(model(x), affine_oracle(x))
    np.testing.assert_array_equal(model(x=x), affine_oracle(x))


def test_eight_threads_fifty_calls_each_get_their_own_result(model):
    rng = np.random.default_rng(2)
    inputs = rng.random((8, 50, 64, 48, 3), np.float32)
    outputs = np.zeros_like(inputs)
    handles: list = [[None] * 50 for _ in range(8)]

    def submit(t: int) -> None:
        for i in range(50):
            handles[t][i] = gdp.run_async(model, {"x": inputs[t, i]}, {"y": outputs[t, i]})

    threads = [threading.Thread(target=submit, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    gdp.sync()
    assert all(h.done() for row in handles for h in row)
    np.testing.assert_array_equal(outputs, affine_oracle(inputs))


def test_profile_has_host_phases_and_kernels(model):
    x = np.ones((64, 48, 3), np.float32)
    handle = gdp.run_async(model, {"x": x}, profile=True)
    handle.wait()
    prof = handle.profile
    assert prof.execute_s > 0 and prof.copy_in_s >= 0 and prof.copy_out_s >= 0
    assert prof.kernels and all(s >= 0 for _, s in prof.kernels)
    table = str(prof)
    assert "host: execute" in table and "kernel: " in table
    assert gdp.run_async(model, {"x": x}).profile is None


def test_report(model):
    report = model.report()
    assert report["target"] == "cpu"
    assert report["precision"] == "fp32"
    assert report["rewrites"] == []
    assert report["kernels"] >= 1
    assert report["cache"] in ("compiled", "disk", "memory")
    assert model.onnx.graph.input[0].name == "x"


def test_dynamic_model_compiles_each_shape_once_when_asked():
    model = gdp.compile(affine(), specialize="always")
    assert model.report()["shapes"] == []
    for shape in [(4, 5, 3), (7, 2, 3), (4, 5, 3)]:
        x = np.random.default_rng(3).random(shape, np.float32)
        np.testing.assert_array_equal(model(x), affine_oracle(x))
    # least recently used first
    assert [s["x"] for s in model.report()["shapes"]] == [(7, 2, 3), (4, 5, 3)]


def test_dynamic_model_compiles_once_for_every_shape():
    model = gdp.compile(affine())
    for shape in [(4, 5, 3), (7, 2, 3), (4, 5, 3), (1, 1, 3)]:
        x = np.random.default_rng(3).random(shape, np.float32)
        np.testing.assert_array_equal(model(x), affine_oracle(x))
    report = model.report()
    assert report["shapes_mode"] == "generic" and report["builds"] == 1
    assert len(report["shapes"]) == 1


def test_sync_reports_a_failure_nobody_looked_at(model):
    def boom():
        raise RuntimeError("device fell over")

    queue.worker("cpu").submit(boom, queue.Task())
    with pytest.raises(gdp.ExecutionError, match="device fell over"):
        gdp.sync()
    gdp.sync()  # reported once, then forgotten
    # The worker survived: the model still runs.
    x = np.ones((64, 48, 3), np.float32)
    np.testing.assert_array_equal(model(x), affine_oracle(x))


def test_leading_unit_dims_may_be_left_out():
    """GDPNPU's listing passes (2, 3) arrays to inputs of shape (1, 2, 3)."""
    model = gdp.compile(affine((1, 2, 3)))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    z = np.zeros((2, 3), np.float32)
    gdp.run_async(model, {"x": x}, {"y": z})
    gdp.sync()
    np.testing.assert_array_equal(z, affine_oracle(x))


def test_synchronous_call_queues_behind_earlier_async_work(model):
    """model(x) runs inline only when nothing is queued; otherwise it keeps FIFO order."""
    release = threading.Event()
    order: list[str] = []
    queue.worker("cpu").submit(lambda: (release.wait(), order.append("blocker")), queue.Task())
    x = np.ones((64, 48, 3), np.float32)
    caller = threading.Thread(target=lambda: (model(x), order.append("sync call")))
    caller.start()
    caller.join(timeout=0.5)
    assert caller.is_alive() and order == []  # waiting behind the blocker, not run inline
    release.set()
    caller.join()
    assert order == ["blocker", "sync call"]


def test_cpu_converts_float_to_int_in_one_step_and_matches_numpy():
    """TVM's importer emulates a wrapping float -> int Cast in a dozen ops; the cpu backend
    turns it back into one conversion (ONNX leaves out-of-range casts undefined). In-range
    values convert as NumPy converts them (toward zero)."""
    import onnx
    from onnx import TensorProto, helper
    from tvm.relax.frontend.onnx import from_onnx

    from gdp.runtime.backends.tvm.relax_import import PlainFloatToInt

    targets = {"i32": TensorProto.INT32, "u8": TensorProto.UINT8, "i8": TensorProto.INT8}
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], [name], to=to) for name, to in targets.items()],
        "casts",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 5])],
        [helper.make_tensor_value_info(n, t, [4, 5]) for n, t in targets.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    main = PlainFloatToInt()(from_onnx(model))["main"]
    script = main.script()
    assert "floor_mod" not in script and "bitwise_and" not in script and "isfinite" not in script
    x = np.linspace(0.0, 127.9, 20, dtype=np.float32).reshape(4, 5)
    x[0, :2] = (-3.7, -0.5)
    got = gdp.compile(model, target="cpu")(x)
    np.testing.assert_array_equal(got["i32"], x.astype(np.int32))
    np.testing.assert_array_equal(got["i8"], x.astype(np.int8))
    np.testing.assert_array_equal(got["u8"][1:], x[1:].astype(np.uint8))


def _misaligned(array: np.ndarray, offset: int) -> np.ndarray:
    """A C-contiguous copy of `array` whose data starts `offset` bytes past a 64-byte boundary."""
    raw = np.empty(array.nbytes + 128, np.uint8)
    start = -raw.ctypes.data % 64 + offset
    view = raw[start : start + array.nbytes].view(array.dtype).reshape(array.shape)
    view[...] = array
    assert view.ctypes.data % 64 == offset and view.flags.c_contiguous
    return view


@pytest.mark.parametrize("offset", [4, 16, 36])
def test_inputs_off_64_byte_boundaries_run_in_place_and_match_numpy(model, offset):
    """numpy aligns large arrays to 16 bytes, TVM declares 64: the cpu kernels are compiled to
    assume only element alignment, so such an input is handed over without a copy."""
    from gdp.runtime.backends.tvm.executable import TvmExecutable

    x = _misaligned(np.random.default_rng(offset).random((64, 48, 3), np.float32), offset)
    np.testing.assert_array_equal(model(x), affine_oracle(x))
    executable = TvmExecutable.__new__(TvmExecutable)
    executable._staging = {}
    tensor = executable._to_device(0, x)
    assert np.from_dlpack(tensor).ctypes.data == x.ctypes.data and not executable._staging


def test_odd_uint8_input_matches_opencv_and_read_only_input_is_copied():
    import cv2 as real

    import gdp.cv2 as cv2

    rng = np.random.default_rng(5)
    image = _misaligned(rng.integers(0, 256, (37, 50, 3), dtype=np.uint8), 1)
    np.testing.assert_array_equal(
        cv2.GaussianBlur(image, (5, 5), 0), real.GaussianBlur(image, (5, 5), 0)
    )
    image.flags.writeable = False  # numpy will not export it: it goes through the staging copy
    np.testing.assert_array_equal(
        cv2.GaussianBlur(image, (5, 5), 0), real.GaussianBlur(image, (5, 5), 0)
    )


@pytest.mark.parametrize("preset", [None, "1"])
def test_cpu_kernels_use_one_thread_per_core_unless_the_user_says(preset, tmp_path):
    """TVM alone halves the hardware threads on x86 (for hyper-threads): one thread on a
    2-vCPU machine. gdp sizes the pool to the physical cores; TVM_NUM_THREADS still wins."""
    import os
    import subprocess
    import sys

    from gdp.runtime.backends.tvm.llvm import physical_cores

    script = (
        "import numpy as np, tvm_ffi, gdp\n"
        "from tests.models import affine\n"
        f"m = gdp.compile(affine((64, 48, 3)), cache_dir={str(tmp_path)!r})\n"
        "m(np.zeros((64, 48, 3), np.float32))\n"
        "print(tvm_ffi.get_global_func('runtime.NumThreads')())\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("TVM_NUM_THREADS", "OMP_NUM_THREADS")}
    if preset is not None:
        env["TVM_NUM_THREADS"] = preset
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    want = int(preset) if preset is not None else physical_cores()
    assert int(done.stdout.split()[-1]) == want, done.stderr[-2000:]


@pytest.mark.parametrize("bind", [None, "1"])
def test_cpu_workers_are_not_pinned_unless_the_user_says(bind, tmp_path):
    """TVM pins its workers to cores by default; gdp leaves them to the OS (a worker pinned to a
    core fought OpenCV's threads there, and one library or the other ran 2x slower, at random
    per process). TVM_BIND_THREADS=1 still pins them."""
    import os
    import subprocess
    import sys

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core: nothing to pin a worker away from")
    script = (
        "import os, numpy as np, gdp.cv2 as cv2\n"
        "cv2.cvtColor(np.zeros((480, 640, 3), np.uint8), cv2.COLOR_BGR2GRAY)\n"
        "whole = os.sched_getaffinity(0)\n"
        "tids = [int(t) for t in os.listdir('/proc/self/task')]\n"
        "print(sum(os.sched_getaffinity(t) != whole for t in tids))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TVM_BIND_THREADS"}
    env.update(TVM_NUM_THREADS="2", GDP_CACHE_DIR=str(tmp_path))
    if bind is not None:
        env["TVM_BIND_THREADS"] = bind
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    pinned = int(done.stdout.split()[-1])
    assert (pinned > 0) if bind == "1" else (pinned == 0), done.stderr[-2000:]


def test_calls_from_a_thread_per_request_leave_no_threads_behind():
    """TVM's runtime gives each thread that runs a kernel a thread pool of its own, which
    outlives the thread: a server calling from a new thread per request leaked a pool per
    request (40 requests: 80 threads). Calls from threads other than the main one run on the
    target's worker."""
    import os

    model = gdp.compile(affine((16, 8, 3)))
    x = np.random.default_rng(5).random((16, 8, 3), np.float32)
    np.testing.assert_array_equal(model(x), affine_oracle(x))
    before = len(os.listdir("/proc/self/task"))
    results = []
    for _ in range(40):
        t = threading.Thread(target=lambda: results.append(model(x)))
        t.start()
        t.join()
    assert len(results) == 40
    for got in results:
        np.testing.assert_array_equal(got, affine_oracle(x))
    assert len(os.listdir("/proc/self/task")) - before < 8
