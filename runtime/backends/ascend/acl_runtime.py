"""pyACL (the `acl` module of Huawei's CANN) behind gdp's Executable: the ceremony GDPNPU hid behind
compile / run_async / sync.

Protocol, as CANN documents it and as tests/runtime/backends/ascend/test_ascend.py checks
against a recording fake:
- acl.init once per process; per device used: set_device, create_context, create_stream, once;
- each .om loaded once per device (load_from_file), its description read once (create_desc,
  get_desc), one device buffer per input and output allocated once (rt.malloc) and wrapped in
  data buffers and datasets that every run reuses;
- a run: the thread binds the device's context (set_context), copies inputs host -> device,
  queues execute_async on the device's stream, synchronises the stream, and only then copies the
  outputs device -> host into fresh arrays;
- every call's return code is checked: a failure raises gdp.DeviceError with the call and
  ACL's error number;
- teardown (at exit, or `reset_runtime()`): models unloaded and their buffers freed first, then
  streams and contexts destroyed and devices reset, then acl.finalize.

Several devices: a model not pinned to one (`device=`) runs on the device with the fewest runs in
flight (the device manager), and is loaded there on first use.
"""

from __future__ import annotations

import atexit
import importlib
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gdp.errors import CompileError, DeviceError, TargetError
from gdp.runtime.backends.base import Executable
from gdp.runtime.profiling import Profile

# acl constants (CANN's acl_base.h, acl_rt.h, acl_prof.h).
ACL_SUCCESS = 0
ACL_MEM_MALLOC_HUGE_FIRST = 0
ACL_MEMCPY_HOST_TO_DEVICE = 1
ACL_MEMCPY_DEVICE_TO_HOST = 2
ACL_MEMCPY_DEVICE_TO_DEVICE = 3
ACL_DEVICE = 0  # aclrtRunMode: this process runs on the card's own CPU (no PCIe between)
ACL_PROF_ACL_API = 0x0001
ACL_PROF_TASK_TIME = 0x0002
ACL_PROF_AICORE_METRICS = 0x0004
ACL_AICORE_ARITHMETIC_UTILIZATION = 0


def check(ret: int, call: str) -> None:
    if ret != ACL_SUCCESS:
        raise DeviceError(call, int(ret))


def value(result: tuple, call: str):
    """pyACL calls that return something give (value, ret)."""
    got, ret = result
    check(ret, call)
    return got


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


class Device:
    """One card: its context and the stream every run on it uses."""

    def __init__(self, acl, device_id: int) -> None:
        self.acl = acl
        self.id = device_id
        check(acl.rt.set_device(device_id), "acl.rt.set_device")
        self.context = value(acl.rt.create_context(device_id), "acl.rt.create_context")
        self.stream = value(acl.rt.create_stream(), "acl.rt.create_stream")
        on_device = value(acl.rt.get_run_mode(), "acl.rt.get_run_mode") == ACL_DEVICE
        self.copy_in = ACL_MEMCPY_DEVICE_TO_DEVICE if on_device else ACL_MEMCPY_HOST_TO_DEVICE
        self.copy_out = ACL_MEMCPY_DEVICE_TO_DEVICE if on_device else ACL_MEMCPY_DEVICE_TO_HOST

    def bind(self) -> None:
        """ACL contexts are per thread: the worker thread that runs binds it before each run."""
        check(self.acl.rt.set_context(self.context), "acl.rt.set_context")

    def close(self) -> None:
        check(self.acl.rt.destroy_stream(self.stream), "acl.rt.destroy_stream")
        check(self.acl.rt.destroy_context(self.context), "acl.rt.destroy_context")
        check(self.acl.rt.reset_device(self.id), "acl.rt.reset_device")


class LoadedModel:
    """An .om loaded on one device, with its device buffers and datasets, reused by every run."""

    def __init__(
        self, device: Device, om_path: Path, inputs: list[TensorSpec], outputs: list[TensorSpec]
    ) -> None:
        acl = device.acl
        self.acl = acl
        self.device = device
        self.inputs = inputs
        self.outputs = outputs
        self.buffers: list[int] = []  # device pointers, freed on release
        self.data_buffers: list = []
        self.datasets: list = []
        self.desc = None
        device.bind()
        self.model_id = value(acl.mdl.load_from_file(str(om_path)), "acl.mdl.load_from_file")
        try:
            self.desc = acl.mdl.create_desc()
            check(acl.mdl.get_desc(self.desc, self.model_id), "acl.mdl.get_desc")
            self._check_sizes(om_path)
            self.input_set = self._dataset(inputs)
            self.output_set = self._dataset(outputs)
        except BaseException:
            self.release()
            raise

    def _check_sizes(self, om_path: Path) -> None:
        acl, desc = self.acl, self.desc
        for kind, specs, count, size in (
            ("inputs", self.inputs, acl.mdl.get_num_inputs, acl.mdl.get_input_size_by_index),
            ("outputs", self.outputs, acl.mdl.get_num_outputs, acl.mdl.get_output_size_by_index),
        ):
            got = [size(desc, i) for i in range(count(desc))]
            want = [s.nbytes for s in specs]
            if got != want:
                raise CompileError(
                    f"{om_path}: the model's {kind} take {got} bytes, the exported graph's"
                    f" {want}: the .om was not built from this graph"
                )

    def _dataset(self, specs: list[TensorSpec]):
        acl = self.acl
        dataset = acl.mdl.create_dataset()
        self.datasets.append(dataset)
        for spec in specs:
            pointer = value(acl.rt.malloc(spec.nbytes, ACL_MEM_MALLOC_HUGE_FIRST), "acl.rt.malloc")
            self.buffers.append(pointer)
            buffer = acl.create_data_buffer(pointer, spec.nbytes)
            self.data_buffers.append(buffer)
            value(acl.mdl.add_dataset_buffer(dataset, buffer), "acl.mdl.add_dataset_buffer")
        return dataset

    def run(self, arrays: list[np.ndarray], profile: Profile | None = None) -> list[np.ndarray]:
        acl, device = self.acl, self.device
        n_in = len(self.inputs)
        t0 = time.perf_counter()
        device.bind()
        for array, pointer, spec in zip(arrays, self.buffers[:n_in], self.inputs, strict=True):
            host = np.ascontiguousarray(array, dtype=spec.dtype)
            check(
                acl.rt.memcpy(pointer, spec.nbytes, host.ctypes.data, host.nbytes, device.copy_in),
                "acl.rt.memcpy (input)",
            )
        t1 = time.perf_counter()
        check(
            acl.mdl.execute_async(self.model_id, self.input_set, self.output_set, device.stream),
            "acl.mdl.execute_async",
        )
        check(acl.rt.synchronize_stream(device.stream), "acl.rt.synchronize_stream")
        t2 = time.perf_counter()
        results = []
        for pointer, spec in zip(self.buffers[n_in:], self.outputs, strict=True):
            out = np.empty(spec.shape, spec.dtype)
            check(
                acl.rt.memcpy(out.ctypes.data, out.nbytes, pointer, spec.nbytes, device.copy_out),
                "acl.rt.memcpy (output)",
            )
            results.append(out)
        if profile is not None:
            profile.copy_in_s += t1 - t0
            profile.execute_s += t2 - t1
            profile.copy_out_s += time.perf_counter() - t2
        return results

    def release(self) -> None:
        """Data buffers, datasets and device memory, then the description, then the model."""
        acl = self.acl
        self.device.bind()
        for buffer in self.data_buffers:
            check(acl.destroy_data_buffer(buffer), "acl.destroy_data_buffer")
        for dataset in self.datasets:
            check(acl.mdl.destroy_dataset(dataset), "acl.mdl.destroy_dataset")
        for pointer in self.buffers:
            check(acl.rt.free(pointer), "acl.rt.free")
        self.data_buffers, self.datasets, self.buffers = [], [], []
        if self.desc is not None:
            check(acl.mdl.destroy_desc(self.desc), "acl.mdl.destroy_desc")
            self.desc = None
        check(acl.mdl.unload(self.model_id), "acl.mdl.unload")


class AclRuntime:
    """The process's ACL state: devices opened on first use, models loaded once per device, the
    device manager's run counts, and the teardown."""

    def __init__(self, acl) -> None:
        self.acl = acl
        self._lock = threading.Lock()
        self._initialized = False
        self._devices: dict[int, Device] = {}
        self._models: dict[tuple[str, int], LoadedModel] = {}
        self._running: dict[int, int] = {}
        self._profiling_dir: str | None = None

    def _init(self) -> None:
        if not self._initialized:
            check(self.acl.init(), "acl.init")
            self._initialized = True
            atexit.register(self.teardown)

    def device_count(self) -> int:
        with self._lock:
            self._init()
            return value(self.acl.rt.get_device_count(), "acl.rt.get_device_count")

    def _device(self, device_id: int) -> Device:
        device = self._devices.get(device_id)
        if device is None:
            device = self._devices[device_id] = Device(self.acl, device_id)
        return device

    def acquire(self, pinned: int | None) -> int:
        """The device a run goes to: the pinned one, else the one with the fewest runs in
        flight (lowest id on ties). Counted until release()."""
        with self._lock:
            self._init()
            count = value(self.acl.rt.get_device_count(), "acl.rt.get_device_count")
            if pinned is not None:
                if not 0 <= pinned < count:
                    raise TargetError(f"device: expected an id in 0..{count - 1}, got {pinned}")
                chosen = pinned
            else:
                chosen = min(range(count), key=lambda d: (self._running.get(d, 0), d))
            self._running[chosen] = self._running.get(chosen, 0) + 1
            return chosen

    def release(self, device_id: int) -> None:
        with self._lock:
            self._running[device_id] -= 1

    def model(
        self, om_path: Path, device_id: int, inputs: list[TensorSpec], outputs: list[TensorSpec]
    ) -> LoadedModel:
        key = (str(om_path), device_id)
        with self._lock:
            loaded = self._models.get(key)
            if loaded is None:
                loaded = LoadedModel(self._device(device_id), om_path, inputs, outputs)
                self._models[key] = loaded
            return loaded

    def profiled(self, device_id: int) -> _Profiling:
        with self._lock:
            if self._profiling_dir is None:
                self._profiling_dir = tempfile.mkdtemp(prefix="gdp-acl-profile-")
                check(self.acl.prof.init(self._profiling_dir), "acl.prof.init")
            return _Profiling(self.acl, device_id, self._profiling_dir)

    def teardown(self) -> None:
        """Models (buffers freed, then unloaded) first, then streams, contexts and devices, then
        profiling and acl.finalize. Every step runs; the first failure is raised at the end."""
        with self._lock:
            failures: list[DeviceError] = []

            def attempt(step) -> None:
                try:
                    step()
                except DeviceError as err:
                    failures.append(err)

            for loaded in self._models.values():
                attempt(loaded.release)
            self._models.clear()
            for device in self._devices.values():
                attempt(device.close)
            self._devices.clear()
            if self._profiling_dir is not None:
                attempt(lambda: check(self.acl.prof.finalize(), "acl.prof.finalize"))
                self._profiling_dir = None
            if self._initialized:
                attempt(lambda: check(self.acl.finalize(), "acl.finalize"))
                self._initialized = False
                atexit.unregister(self.teardown)
            if failures:
                raise failures[0]


class _Profiling:
    """acl.prof around one run: ACL API times, task times and AI Core metrics of the device,
    written under the runtime's profiling directory (read it with msprof)."""

    def __init__(self, acl, device_id: int, directory: str) -> None:
        self.acl = acl
        self.device_id = device_id
        self.directory = directory
        self.config = None

    def __enter__(self) -> _Profiling:
        acl = self.acl
        self.config = acl.prof.create_config(
            [self.device_id],
            ACL_AICORE_ARITHMETIC_UTILIZATION,
            0,
            ACL_PROF_ACL_API | ACL_PROF_TASK_TIME | ACL_PROF_AICORE_METRICS,
        )
        if not self.config:
            raise DeviceError("acl.prof.create_config", -1, "returned no config")
        check(acl.prof.start(self.config), "acl.prof.start")
        return self

    def __exit__(self, *exc) -> None:
        check(self.acl.prof.stop(self.config), "acl.prof.stop")
        check(self.acl.prof.destroy_config(self.config), "acl.prof.destroy_config")


_runtime: AclRuntime | None = None
_runtime_lock = threading.Lock()


def runtime() -> AclRuntime:
    """The process's AclRuntime over the installed `acl` module (CANN's pyACL)."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            try:
                acl = importlib.import_module("acl")
            except ImportError as err:
                raise TargetError(
                    "target 'npu' runs models through pyACL, and the `acl` module is not"
                    " installed: install CANN's toolkit and source its set_env.sh (docs/ascend.md),"
                    " or use target='npu-emulate'"
                ) from err
            _runtime = AclRuntime(acl)
        return _runtime


def reset_runtime() -> None:
    """Tear the process's ACL state down now (tests; a server that hands its cards back)."""
    global _runtime
    with _runtime_lock:
        if _runtime is not None:
            current, _runtime = _runtime, None
            current.teardown()


class AclExecutable(Executable):
    """A compiled .om as gdp's Executable: each run on the pinned or the idlest device."""

    def __init__(
        self,
        om_path: Path,
        inputs: list[TensorSpec],
        outputs: list[TensorSpec],
        device: int | None,
    ) -> None:
        self.om_path = om_path
        self.inputs = inputs
        self.outputs = outputs
        self.pinned = device
        self.runtime = runtime()
        # Load now on the first device a run would use, so a broken .om fails at load time.
        device_id = self.runtime.acquire(device)
        try:
            self.runtime.model(om_path, device_id, inputs, outputs)
        finally:
            self.runtime.release(device_id)

    def run(self, inputs: list[np.ndarray], profile: Profile | None = None) -> list[np.ndarray]:
        rt = self.runtime
        device_id = rt.acquire(self.pinned)
        try:
            loaded = rt.model(self.om_path, device_id, self.inputs, self.outputs)
            if profile is None:
                return loaded.run(inputs)
            with rt.profiled(device_id) as profiling:
                results = loaded.run(inputs, profile)
            profile.trace_dir = profiling.directory
            return results
        finally:
            rt.release(device_id)
