"""A gpu model run by the Relax VM on a CUDA device, on gdp's stream, with pinned host staging.

- **One stream per device** (gdp's, shared by every gpu executable of the process: they run one
  task at a time on the target's worker, and the VM's memory pool, shared too, reuses a freed
  buffer only in stream order). It synchronises with the legacy default stream, so work that
  torch or CuPy queued on their default streams before a run is done before its kernels read
  it, and their work queued after a run waits for it. A torch.cuda tensor or CuPy array made
  on another stream of theirs is handed over with events both ways.
- **Host arrays** go to the device asynchronously: from where they are when in pinned memory
  (gdp.pinned_empty), else through CUDA's staging (or gdp's pinned buffers: STAGE_PAGEABLE);
  outputs come back through pinned buffers. Each executable keeps two slots of such buffers:
  `launch()` queues one run's copies and kernels and returns at once, and its `finish()` waits
  for it. The target's worker launches the next queued run before it finishes the previous one,
  so one run's host work (staging, the VM's calls) overlaps the previous run's copies and
  kernels (`run_async`), as does `run_many`.
- **profile=True** times the copies and each kernel with CUDA events, without waiting for the
  device between kernels.

The same code runs on the CPU device with HostRuntime (copies are memmoves): the tests check
the staging, the pipelining and the profile on a machine without a GPU.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import tvm
import tvm_ffi

from gdp.runtime.backends.tvm import thread_pool
from gdp.runtime.backends.tvm.cuda_runtime import (
    DEVICE_TO_HOST,
    HOST_TO_DEVICE,
    CudaRuntime,
    HostRuntime,
)
from gdp.runtime.backends.tvm.executable import _DLPACK_CPU, TvmExecutable, _like
from gdp.runtime.profiling import Profile

_streams: dict[tuple[str, int], int] = {}
_streams_lock = threading.Lock()


def _stream(runtime, device: tvm.runtime.Device) -> int:
    """gdp's stream on `device`, created on first use."""
    key = (type(runtime).__name__, device.index)
    with _streams_lock:
        if key not in _streams:
            _streams[key] = runtime.stream()
        return _streams[key]


# Whether an input in pageable host memory is copied into gdp's pinned buffer by the host
# (then to the GPU without waiting for the stream's earlier work), or handed to CUDA as it is
# (its driver stages it, after that work). On the H200 machine 64 1080p photos through
# run_async took 51 and 57 ms the driver's way, 61 and 57 ms gdp's, in two runs; both are
# bound by that host's copies (about 7 GB/s), so the simpler way is the default.
STAGE_PAGEABLE = False


class _Slot:
    """One run's staging: per input a pinned host buffer and a device tensor, per output a
    pinned host buffer (each grown to the largest size seen, never shrunk), and the event
    recorded after its last copy out."""

    def __init__(self, runtime) -> None:
        self.runtime = runtime
        self.host_in: dict[int, np.ndarray] = {}
        self.device_in: dict[int, tvm.runtime.Tensor] = {}
        self.host_out: dict[int, np.ndarray] = {}
        self.done = None

    def record_done(self, stream: int) -> None:
        if self.done is None:
            self.done = self.runtime.event()
        self.runtime.record(self.done, stream)

    def pinned(self, table: dict[int, np.ndarray], index: int, nbytes: int) -> np.ndarray:
        buffer = table.get(index)
        if buffer is None or buffer.nbytes < nbytes:
            buffer = table[index] = self.runtime.host_alloc(nbytes)
        return buffer[:nbytes]

    def stage_in(self, index: int, array: np.ndarray, device, stream: int) -> tvm.runtime.Tensor:
        """`array` copied (queued on `stream`) into this slot's device tensor: from where it
        is when that is pinned memory (gdp.pinned_empty's, torch's pin_memory); from pageable
        memory, through this slot's pinned buffer (the host copies it there first) where
        STAGE_PAGEABLE, else by CUDA's own staging (the call returns once CUDA has read the
        array, after the stream's earlier work)."""
        tensor = self.device_in.get(index)
        if tensor is None or tuple(tensor.shape) != array.shape or tensor.dtype != array.dtype:
            tensor = self.device_in[index] = tvm.runtime.empty(
                array.shape, str(array.dtype), device
            )
        if not array.nbytes:
            return tensor
        source = array
        direct = array.flags.c_contiguous and (not STAGE_PAGEABLE or self.runtime.is_pinned(array))
        if not direct:
            source = self.pinned(self.host_in, index, array.nbytes)
            copy_host(source.view(array.dtype).reshape(array.shape), array)
        self.runtime.copy(
            tensor.data_ptr(), source.ctypes.data, array.nbytes, HOST_TO_DEVICE, stream
        )
        return tensor

    def stage_out(self, index: int, tensor: tvm.runtime.Tensor, stream: int) -> np.ndarray:
        """A view of this slot's pinned buffer that `tensor` is copied into (queued on
        `stream`: read it after `done`)."""
        dtype = np.dtype(str(tensor.dtype))
        shape = tuple(int(d) for d in tensor.shape)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        host = self.pinned(self.host_out, index, nbytes)
        if nbytes:
            self.runtime.copy(host.ctypes.data, tensor.data_ptr(), nbytes, DEVICE_TO_HOST, stream)
        return host.view(dtype).reshape(shape)

    def free(self) -> None:
        self.host_in.clear()  # pinned memory is freed with its last array
        self.host_out.clear()
        if self.done is not None:
            self.runtime.free_event(self.done)
            self.done = None


class CudaExecutable(TvmExecutable):
    """A gpu model: see the module's docstring. Works on any device (the tests use the CPU's,
    with HostRuntime)."""

    def __init__(self, library: tvm.runtime.Module, device: tvm.runtime.Device) -> None:
        super().__init__(library, device)
        self.zero_copy_inputs = False  # host arrays are staged (pinned), never read in place
        on_cuda = device.dlpack_device_type() != _DLPACK_CPU
        self.runtime = CudaRuntime(device.index) if on_cuda else HostRuntime()
        self.launches_asynchronously = on_cuda
        self.stream = _stream(self.runtime, device)
        # Two slots: a run's buffers are refilled two launches later, after its finish().
        self._slots = [_Slot(self.runtime), _Slot(self.runtime)]
        self._turn = 0
        self._kernel_events: list[tuple[str, object, object]] = []
        self._kernel_start_event = None

    def __del__(self) -> None:
        for slot in getattr(self, "_slots", ()):
            with contextlib.suppress(Exception):  # the CUDA runtime may be unloading at exit
                slot.free()

    def _instrument(self, func, func_symbol, before_run, ret_value, *args) -> int:
        # An event on the stream before and after each kernel (VM builtins are not kernels):
        # nothing waits for the device between kernels.
        name = str(func_symbol)
        if name.startswith("vm.builtin"):
            return 0
        event = self.runtime.event(timing=True)
        self.runtime.record(event, self.stream)
        if before_run:
            self._kernel_start_event = event
        else:
            self._kernel_events.append((name, self._kernel_start_event, event))
        return 0

    def run(self, inputs: list, profile: Profile | None = None) -> list:
        return self.launch(inputs, profile)()

    def launch(self, inputs: list, profile: Profile | None = None) -> Callable[[], list]:
        """Queue one run (its input copies, kernels and output copies) on gdp's stream and
        return the function that waits for it and returns its outputs: host arrays, or for a
        run given a device array, its library's device tensors (nothing to wait for). Two
        launches may be outstanding; the caller finishes the first before a third."""
        thread_pool.before_run()
        runtime, stream = self.runtime, self.stream
        slot = self._slots[self._turn]
        self._turn ^= 1
        example = next((x for x in inputs if not isinstance(x, np.ndarray)), None)
        marks = _Marks(runtime, stream) if profile is not None else None
        if marks:
            marks.record("start")
        producer = _producer_stream(example) if example is not None else 0
        if producer:
            _handover(runtime, producer, stream)
        args = [
            slot.stage_in(i, x, self.device, stream)
            if isinstance(x, np.ndarray)
            else self._to_device(i, x)
            for i, x in enumerate(inputs)
        ]
        if marks:
            marks.record("in")
            # This run's kernels (the VM's hooks append here while it runs): a list of its
            # own, since the next run may be launched before this one is finished.
            marks.kernels = self._kernel_events = []
        with tvm_ffi.use_raw_stream(self.device, stream):
            if profile is None:
                if self._main is None:
                    self._main = self.vm["main"]
                result = self._main(*args)
            else:
                result = self._vm_for(profile)["main"](*args)
        tensors = [result] if isinstance(result, tvm.runtime.Tensor) else list(result)
        if marks:
            marks.record("executed")
        if example is not None:
            if producer:
                _handover(runtime, stream, producer)
            outputs = [_like(t, example) for t in tensors]
            if any(isinstance(x, np.ndarray) for x in inputs):
                # Host inputs beside device ones: this call returns without waiting for the
                # GPU, and their copies read the caller's pinned array or this slot's buffer,
                # which must not change before the copies are done.
                slot.record_done(stream)
                runtime.wait(slot.done)
            if marks is None:
                return lambda: outputs
            marks.record("out")
            return lambda: self._profiled(marks, profile, outputs, 0.0)
        staged = [slot.stage_out(j, t, stream) for j, t in enumerate(tensors)]
        slot.record_done(stream)
        if marks:
            marks.record("out")

        def finish() -> list[np.ndarray]:
            runtime.wait(slot.done)
            t0 = time.perf_counter()
            # The slot is refilled two launches later: the caller keeps copies.
            outputs = []
            for source in staged:
                outputs.append(np.empty(source.shape, source.dtype))
                copy_host(outputs[-1], source)
            if marks is None:
                return outputs
            return self._profiled(marks, profile, outputs, time.perf_counter() - t0)

        # The VM may hand the outputs' device memory to the next run before these copies are
        # done: that run's kernels are queued behind them on the same stream.
        return finish

    def _profiled(self, marks: _Marks, profile: Profile, outputs: list, host_copy_s: float):
        """Fill `profile` from a finished run's events: the copies in and out, the kernels."""
        marks.wait("out")
        profile.copy_in_s += marks.elapsed("start", "in")
        profile.execute_s += marks.elapsed("in", "executed")
        profile.copy_out_s += marks.elapsed("executed", "out") + host_copy_s
        for name, start, end in marks.kernels:
            profile.kernels.append((name, self.runtime.elapsed_s(start, end)))
            self.runtime.free_event(start)
            self.runtime.free_event(end)
        marks.free()
        return outputs

    def run_many(
        self, batch: list[list], profile: Profile | None = None, into=None
    ) -> list[list[np.ndarray]]:
        """Each entry launched before the previous one is finished: one run's staging and
        VM calls overlap the previous run's copies and kernels."""
        if profile is not None:
            return [self.run(inputs, profile) for inputs in batch]
        results: list[list[np.ndarray]] = []
        pending = None
        for inputs in batch:
            finish = self.launch(inputs)
            if pending is not None:
                results.append(pending())
            pending = finish
        if pending is not None:
            results.append(pending())
        return results


class _Marks:
    """Named timing events recorded on a stream."""

    def __init__(self, runtime, stream: int) -> None:
        self.runtime, self.stream = runtime, stream
        self.events: dict[str, object] = {}
        self.kernels: list[tuple[str, object, object]] = []  # (name, start, end) each kernel

    def record(self, name: str) -> None:
        event = self.events[name] = self.runtime.event(timing=True)
        self.runtime.record(event, self.stream)

    def wait(self, name: str) -> None:
        self.runtime.wait(self.events[name])

    def elapsed(self, start: str, end: str) -> float:
        return self.runtime.elapsed_s(self.events[start], self.events[end])

    def free(self) -> None:
        for event in self.events.values():
            self.runtime.free_event(event)
        self.events.clear()


# Host copies of at least this many bytes (into and out of the pinned buffers) are split over
# the copy threads: one thread copies 6-8 GB/s, a 1080p float32 image is 25 MB.
PARALLEL_COPY_BYTES = 1 << 22
_copy_threads: ThreadPoolExecutor | None = None
_copy_threads_lock = threading.Lock()


def copy_host(dst: np.ndarray, src: np.ndarray) -> None:
    """np.copyto(dst, src) for arrays of one shape and dtype; a large C-contiguous pair in
    parts on up to 8 threads (numpy copies without the GIL)."""
    nbytes = dst.nbytes
    if nbytes < PARALLEL_COPY_BYTES or not (src.flags.c_contiguous and dst.flags.c_contiguous):
        np.copyto(dst, src)
        return
    global _copy_threads
    with _copy_threads_lock:
        if _copy_threads is None:
            workers = max(1, min(8, os.cpu_count() or 1))
            _copy_threads = ThreadPoolExecutor(workers, thread_name_prefix="gdp-copy")
        pool = _copy_threads
    flat_dst, flat_src = dst.reshape(-1).view(np.uint8), src.reshape(-1).view(np.uint8)
    parts = max(1, min(pool._max_workers, nbytes // (PARALLEL_COPY_BYTES // 4)))
    edges = [nbytes * k // parts for k in range(parts + 1)]
    spans = [slice(a, b) for a, b in zip(edges, edges[1:], strict=False)]
    for done in pool.map(lambda span: np.copyto(flat_dst[span], flat_src[span]), spans):
        del done


def _forget_copy_threads() -> None:
    # A forked child has none of its parent's threads: it starts its own pool when it copies.
    global _copy_threads, _copy_threads_lock
    _copy_threads, _copy_threads_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_copy_threads)


def _producer_stream(example) -> int:
    """The stream a torch.cuda tensor's or CuPy array's library queues work on now, where it is
    not the legacy default stream (which gdp's stream synchronises with): 0 otherwise, and for
    other libraries' arrays."""
    library = type(example).__module__.split(".")[0]
    if library == "torch":
        torch = sys.modules["torch"]
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # 5 us less a call
        if raw is not None:
            return int(raw(example.device.index))
        return int(torch.cuda.current_stream(example.device).cuda_stream)
    if library == "cupy":
        cupy = sys.modules["cupy"]
        return int(cupy.cuda.get_current_stream().ptr)
    return 0


def _handover(runtime, before: int, after: int) -> None:
    """Make stream `after`'s later work wait for the work queued on `before` so far."""
    event = runtime.event()
    runtime.record(event, before)
    runtime.stream_wait(after, event)
    runtime.free_event(event)  # CUDA releases it once the wait no longer needs it
