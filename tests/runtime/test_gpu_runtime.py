"""The gpu executable's runtime (runtime/backends/tvm/cuda_executable.py) on the CPU device,
where cuda_runtime.HostRuntime stands for CUDA's calls: pinned staging in two slots, launches
finished after the next one starts (run_many, the target's worker), events around each kernel
for profile=True, and the hand-over to a device array's own stream. The outputs are checked
against the tone sample's NumPy peer; the same code runs on a GPU through benchmarks/gpu.py."""

import importlib
import sys
import threading
import types

import numpy as np
import pytest
import tvm
import tvm_ffi

from gdp.frontend import convert
from gdp.frontend.common import IR_VERSION
from gdp.rewrites import pipeline
from gdp.runtime import queue
from gdp.runtime.backends import get_backend
from gdp.runtime.backends.tvm import cuda_executable
from gdp.runtime.backends.tvm.backend import LIBRARY
from gdp.runtime.backends.tvm.cuda_runtime import HostRuntime
from gdp.runtime.profiling import Profile
from tests import SAMPLES

sys.path.insert(0, str(SAMPLES))

tone = importlib.import_module("tone")


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    """The tone sample compiled for the cpu: (library path, meta)."""
    out = tmp_path_factory.mktemp("tone")
    graph = convert(tone.program, None)[0]
    backend = get_backend("tvm-llvm")
    prepared = pipeline.prepare(
        graph, None, backend.required_rewrites, False, None, None, IR_VERSION
    )
    return out / LIBRARY, backend.compile(prepared.graph, out, {}, None)


class Recording(HostRuntime):
    """HostRuntime that logs its calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []

    def host_alloc(self, nbytes):
        self.calls.append(("host_alloc", nbytes))
        return super().host_alloc(nbytes)

    def copy(self, dst, src, nbytes, kind, stream):
        self.calls.append(("copy", kind, stream, src))
        super().copy(dst, src, nbytes, kind, stream)

    def record(self, event, stream):
        self.calls.append(("record", id(event), stream))
        super().record(event, stream)

    def wait(self, event):
        self.calls.append(("wait", id(event)))

    def stream_wait(self, stream, event):
        self.calls.append(("stream_wait", stream, id(event)))

    def named(self, name):
        return [c for c in self.calls if c[0] == name]


def _executable(library) -> cuda_executable.CudaExecutable:
    loaded = cuda_executable.CudaExecutable(tvm.runtime.load_module(str(library[0])), tvm.cpu())
    loaded.runtime = Recording()
    for slot in loaded._slots:
        slot.runtime = loaded.runtime
    return loaded


def _images(count: int, shape=(1080, 1920, 3)) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.random(shape, dtype=np.float32) for _ in range(count)]


def _want(image: np.ndarray) -> np.ndarray:
    return tone.peer(rgb=image)["mapped"]


def test_host_arrays_are_staged_in_two_slots_and_copied_out(library, monkeypatch):
    monkeypatch.setattr(cuda_executable, "STAGE_PAGEABLE", True)
    loaded = _executable(library)
    images = _images(5)
    for image in images:
        (got,) = loaded.run([image])
        np.testing.assert_allclose(got, _want(image), rtol=1e-5, atol=1e-6)
    runtime = loaded.runtime
    # One pinned buffer per input and output per slot, made once: 2 slots x (1 in + 1 out).
    assert len(runtime.named("host_alloc")) == 4
    kinds = [c[1] for c in runtime.named("copy")]
    assert kinds == [1, 2] * len(images)  # in to the device, out to the host, every run
    # The input buffers are the executable's, never the caller's: the caller's array is intact.
    np.testing.assert_array_equal(images[0], _images(1)[0])


def test_pinned_inputs_are_copied_from_where_they_are(library):
    """An input in pinned memory (here: memory the runtime's host_alloc gave, as
    gdp.pinned_empty does) goes to the device without a copy into gdp's own buffer."""
    loaded = _executable(library)
    image = _images(1)[0]
    pinned = loaded.runtime.host_alloc(image.nbytes).view(image.dtype).reshape(image.shape)
    pinned[...] = image
    loaded.runtime.calls.clear()
    (got,) = loaded.run([pinned])
    np.testing.assert_allclose(got, _want(image), rtol=1e-5, atol=1e-6)
    (copy_in,) = [c for c in loaded.runtime.named("copy") if c[1] == 1]
    assert copy_in[3] == pinned.ctypes.data
    assert [c[1] for c in loaded.runtime.named("host_alloc")] == [got.nbytes]  # the output's


def test_pageable_inputs_go_to_cuda_as_they_are_by_default(library):
    assert cuda_executable.STAGE_PAGEABLE is False
    loaded = _executable(library)
    image = _images(1)[0]
    (got,) = loaded.run([image])
    np.testing.assert_allclose(got, _want(image), rtol=1e-5, atol=1e-6)
    (copy_in,) = [c for c in loaded.runtime.named("copy") if c[1] == 1]
    assert copy_in[3] == image.ctypes.data
    strided = np.asfortranarray(image)  # not C-contiguous: staged, whatever the setting
    (got,) = loaded.run([strided])
    np.testing.assert_allclose(got, _want(image), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("staged", [False, True])
def test_launches_overlap_and_finish_with_their_own_outputs(library, monkeypatch, staged):
    """Two launches outstanding (the worker's and run_many's pattern): each finish returns
    its own run's outputs, though the other slot was filled after it."""
    monkeypatch.setattr(cuda_executable, "STAGE_PAGEABLE", staged)
    loaded = _executable(library)
    a, b, c = _images(3)
    finish_a = loaded.launch([a])
    finish_b = loaded.launch([b])
    (got_a,) = finish_a()
    finish_c = loaded.launch([c])  # refills a's slot: a's outputs were copied by its finish
    (got_b,) = finish_b()
    (got_c,) = finish_c()
    for got, image in ((got_a, a), (got_b, b), (got_c, c)):
        np.testing.assert_allclose(got, _want(image), rtol=1e-5, atol=1e-6)
    got_a_again = got_a.copy()
    loaded.run([b])
    np.testing.assert_array_equal(got_a, got_a_again)  # the caller's copy is not a slot's


@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_run_many_pipelines_and_matches_one_by_one(library, count):
    loaded = _executable(library)
    images = _images(count)
    got = loaded.run_many([[image] for image in images])
    assert len(got) == count
    for (out,), image in zip(got, images, strict=True):
        np.testing.assert_allclose(out, _want(image), rtol=1e-5, atol=1e-6)
    # Each run's outputs are waited for once, after the next run was launched.
    calls = [c[0] for c in loaded.runtime.calls if c[0] in ("copy", "wait")]
    first_wait = calls.index("wait")
    assert count == 1 or calls[:first_wait].count("copy") == 4  # two runs queued before it


def test_profile_times_each_kernel_with_events_and_never_waits_between_them(library):
    loaded = _executable(library)
    image = _images(1)[0]
    profile = Profile("gpu")
    (got,) = loaded.run([image], profile)
    np.testing.assert_allclose(got, _want(image), rtol=1e-5, atol=1e-6)
    assert len(profile.kernels) == library[1]["kernels"] == 1
    assert all(seconds > 0 for _, seconds in profile.kernels)
    assert profile.copy_in_s > 0 and profile.copy_out_s > 0
    assert profile.execute_s >= sum(seconds for _, seconds in profile.kernels)
    runtime = loaded.runtime
    # Nothing waits for the device until the run is finished: one wait, after the last record.
    names = [c[0] for c in runtime.calls]
    assert names.count("wait") >= 1 and "wait" not in names[: names.index("wait")]
    last_record = max(i for i, n in enumerate(names) if n == "record")
    assert names.index("wait") > last_record


def test_profiles_of_overlapping_launches_keep_their_own_kernels(library):
    """The worker launches a profiled run before it finishes the one before: each profile
    gets its own run's kernel (the first version kept one list per executable)."""
    loaded = _executable(library)
    a, b = _images(2)
    first, second = Profile("gpu"), Profile("gpu")
    finish_a = loaded.launch([a], first)
    finish_b = loaded.launch([b], second)
    (got_a,) = finish_a()
    (got_b,) = finish_b()
    np.testing.assert_allclose(got_a, _want(a), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_b, _want(b), rtol=1e-5, atol=1e-6)
    assert len(first.kernels) == len(second.kernels) == library[1]["kernels"] == 1


class _Borrowed:
    """A DLPack producer standing for a device array of a library (`module`) whose current
    stream is not the legacy default one."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_device_arrays_are_handed_over_between_their_stream_and_gdps(library, monkeypatch):
    """A CuPy array made on a stream of its own (7 here): gdp's stream waits for that stream
    before the kernels, and that stream waits for gdp's after them; the outputs are the
    library's arrays, equal to the peer's."""
    fake = types.ModuleType("cupy")
    fake.cuda = types.SimpleNamespace(get_current_stream=lambda: types.SimpleNamespace(ptr=7))
    fake.from_dlpack = np.from_dlpack
    monkeypatch.setitem(sys.modules, "cupy", fake)
    borrowed = type("ndarray", (_Borrowed,), {"__module__": "cupy"})
    loaded = _executable(library)
    image = _images(1)[0]
    (got,) = loaded.run([borrowed(image)])
    assert isinstance(got, np.ndarray)  # the library's from_dlpack made it
    np.testing.assert_allclose(got, _want(image), rtol=1e-5, atol=1e-6)
    runtime, gdp_stream = loaded.runtime, loaded.stream
    records, waits = runtime.named("record"), runtime.named("stream_wait")
    assert [r[2] for r in records] == [7, gdp_stream]
    assert [w[1] for w in waits] == [gdp_stream, 7]
    assert not runtime.named("copy")  # read in place, nothing staged


def test_default_stream_device_arrays_need_no_hand_over(library):
    loaded = _executable(library)
    image = _images(1)[0]
    (got,) = loaded.run([tvm_ffi.from_dlpack(image)])
    np.testing.assert_allclose(np.from_dlpack(got), _want(image), rtol=1e-5, atol=1e-6)
    assert not loaded.runtime.named("stream_wait")


# -- the worker: a run launched before the previous one is finished --------------------------


class _Launchable:
    asynchronous = True

    def __init__(self, name, log, fail=None):
        self.name, self.log, self.fail = name, log, fail

    def __call__(self):
        return self.launch()()

    def launch(self):
        self.log.append(f"launch {self.name}")
        if self.fail == "launch":
            raise ValueError(f"{self.name} could not start")

        def finish():
            self.log.append(f"finish {self.name}")
            if self.fail == "finish":
                raise ValueError(f"{self.name} failed on the device")
            return self.name

        return finish


def test_the_worker_launches_the_next_run_before_finishing_the_previous():
    worker = queue.Worker("test-pipeline")
    log: list[str] = []
    gate = threading.Event()
    blocker = worker.submit(gate.wait, queue.Task())
    runs = [
        _Launchable("a", log),
        _Launchable("b", log, fail="launch"),
        _Launchable("c", log, fail="finish"),
        _Launchable("d", log),
    ]
    tasks = [worker.submit(run, queue.Task()) for run in runs]
    gate.set()
    assert blocker.result(timeout=10) is True
    assert tasks[0].result(timeout=10) == "a"
    with pytest.raises(Exception, match="b could not start"):
        tasks[1].result(timeout=10)
    with pytest.raises(Exception, match="c failed on the device"):
        tasks[2].result(timeout=10)
    assert tasks[3].result(timeout=10) == "d"
    # a's finish waits for b's launch (which failed: b ends there), then c's launch.
    assert log == [
        "launch a",
        "launch b",
        "finish a",
        "launch c",
        "launch d",
        "finish c",
        "finish d",
    ]
    assert worker._unfinished == 0


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [((5,), np.uint8), ((1080, 1920, 3), np.float32), ((2049, 1023, 3), np.uint8)],
)
def test_host_copies_in_parts_are_whole(shape, dtype):
    """copy_host splits a copy of at least PARALLEL_COPY_BYTES over threads, at byte offsets
    that need not fall on an element or a row."""
    rng = np.random.default_rng(5)
    src = rng.integers(0, 255, shape).astype(dtype)
    dst = np.zeros_like(src)
    cuda_executable.copy_host(dst, src)
    np.testing.assert_array_equal(dst, src)
    strided = np.zeros(shape[::-1], dtype).T  # not C-contiguous: one plain copy
    cuda_executable.copy_host(strided, src)
    np.testing.assert_array_equal(strided, src)


def test_pinned_empty_is_an_array_of_the_shape_and_dtype_asked():
    import gdp
    from gdp.errors import InputError

    array = gdp.pinned_empty((4, 5, 3), np.float32)
    assert array.shape == (4, 5, 3) and array.dtype == np.float32 and array.flags.c_contiguous
    array[...] = 1.5  # writable
    assert gdp.pinned_empty(7).shape == (7,)
    assert gdp.pinned_empty((0, 3)).size == 0
    with pytest.raises(InputError, match="non-negative ints, got \\(3, -1\\)"):
        gdp.pinned_empty((3, -1))
    with pytest.raises(InputError, match="not a numpy dtype"):
        gdp.pinned_empty(3, "pixels")


def test_a_synchronous_run_ends_without_waiting_for_the_next():
    """A run whose launch computes it to the end (the cpu's) is finished at once: its task
    does not wait for the next queued run."""
    worker = queue.Worker("test-synchronous")
    log: list[str] = []
    gate = threading.Event()
    blocker = worker.submit(gate.wait, queue.Task())
    runs = [_Launchable("a", log), _Launchable("b", log)]
    for run in runs:
        run.asynchronous = False
    tasks = [worker.submit(run, queue.Task()) for run in runs]
    gate.set()
    assert blocker.result(timeout=10) is True
    assert [t.result(timeout=10) for t in tasks] == ["a", "b"]
    assert log == ["launch a", "finish a", "launch b", "finish b"]


@pytest.fixture(scope="module")
def two_inputs(tmp_path_factory):
    """a * 2 + b over (64, 96) float32, compiled for the cpu: (library path, meta)."""
    import tensorflow as tf

    @tf.function(
        input_signature=[tf.TensorSpec([64, 96], tf.float32), tf.TensorSpec([64, 96], tf.float32)]
    )
    def program(a, b):
        return a * 2.0 + b

    out = tmp_path_factory.mktemp("two")
    graph = convert(program, None)[0]
    backend = get_backend("tvm-llvm")
    prepared = pipeline.prepare(
        graph, None, backend.required_rewrites, False, None, None, IR_VERSION
    )
    return out / LIBRARY, backend.compile(prepared.graph, out, {}, None)


def test_host_inputs_beside_device_ones_are_copied_before_the_call_returns(two_inputs, monkeypatch):
    """A run given a device array returns without waiting for the GPU, but a host input
    beside it (copied from the caller's memory or the slot's pinned buffer) is waited for
    before the call returns: the caller may change it then, and the slot is refilled."""
    monkeypatch.setattr(cuda_executable, "STAGE_PAGEABLE", True)
    loaded = _executable(two_inputs)
    rng = np.random.default_rng(9)
    a = rng.random((64, 96), dtype=np.float32)
    device_a = tvm_ffi.from_dlpack(a)
    waits = []
    for _ in range(4):  # slots 0, 1, 0, 1
        b = rng.random((64, 96), dtype=np.float32)
        (got,) = loaded.run([device_a, b])
        np.testing.assert_allclose(np.from_dlpack(got), a * 2 + b, rtol=1e-6)
        waits.append(len(loaded.runtime.named("wait")))
    assert waits == [1, 2, 3, 4]  # one wait a call, for its copies in
    (got,) = loaded.run([device_a, tvm_ffi.from_dlpack(a)])
    assert len(loaded.runtime.named("wait")) == 4  # device arrays alone: nothing waited for
