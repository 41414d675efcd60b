"""The CUDA runtime calls the gpu executable makes itself: a stream, pinned host memory,
asynchronous copies and events, through ctypes on libcudart (the library TVM's CUDA runtime
links). TVM 0.27's Python API offers none of them: its copies use the default stream and wait
for the device, and it has no events.

`HostRuntime` does the same on host memory (a copy is a memmove, an event reads the clock when
recorded). An executable on the CPU device runs its staging and pipelining with it: that is how
the tests check them on a machine without a GPU.
"""

from __future__ import annotations

import ctypes
import functools
import time
import weakref

import numpy as np

from gdp.errors import ExecutionError

# cudaMemcpyKind
HOST_TO_DEVICE = 1
DEVICE_TO_HOST = 2
# cudaHostAllocPortable: pinned for every CUDA context, not only the allocating thread's.
_HOST_ALLOC_PORTABLE = 1
# cudaEventDisableTiming: an event only waited on is cheaper to record without a timestamp.
_EVENT_DISABLE_TIMING = 2


class CudaRuntime:
    """libcudart's stream, pinned memory, copy and event calls for one device. Every failure is
    an ExecutionError naming the call and CUDA's message."""

    def __init__(self, device_index: int = 0) -> None:
        self.lib = _libcudart()
        self.device_index = device_index

    def _check(self, status: int, call: str) -> None:
        if status != 0:
            message = self.lib.cudaGetErrorString(status)
            text = message.decode() if message else "unknown error"
            raise ExecutionError(f"CUDA {call} failed: {text} (error {status})")

    def _set_device(self) -> None:
        # The runtime API acts on the calling thread's current device (0 unless set).
        self._check(self.lib.cudaSetDevice(self.device_index), "cudaSetDevice")

    def stream(self) -> int:
        """A new stream that synchronises with the legacy default stream (as torch's and CuPy's
        default streams do), so work queued there before a run is ordered before it."""
        self._set_device()
        handle = ctypes.c_void_p()
        self._check(self.lib.cudaStreamCreateWithFlags(ctypes.byref(handle), 0), "cudaStreamCreate")
        return handle.value or 0

    def host_alloc(self, nbytes: int) -> np.ndarray:
        """`nbytes` of pinned (page-locked) host memory as a uint8 array, freed when the last
        array on it is."""
        self._set_device()
        pointer = ctypes.c_void_p()
        self._check(
            self.lib.cudaHostAlloc(ctypes.byref(pointer), max(nbytes, 1), _HOST_ALLOC_PORTABLE),
            f"cudaHostAlloc of {nbytes} bytes",
        )
        return np.asarray(_Block(pointer.value, nbytes, self.lib.cudaFreeHost))

    def is_pinned(self, array: np.ndarray) -> bool:
        """Whether `array`'s memory is page-locked host memory CUDA knows (gdp's pinned_empty,
        torch's pin_memory): a copy from it needs no staging."""
        first = array.ctypes.data
        last = first + max(array.nbytes - 1, 0)
        return all(self._memory_type(p) == _MEMORY_TYPE_HOST for p in (first, last))

    def _memory_type(self, pointer: int) -> int:
        attributes = _PointerAttributes()
        status = self.lib.cudaPointerGetAttributes(ctypes.byref(attributes), pointer)
        if status != 0:
            self.lib.cudaGetLastError()  # an unknown pointer is an answer, not a failure
            return 0
        return attributes.type

    def copy(self, dst: int, src: int, nbytes: int, kind: int, stream: int) -> None:
        """Queue a copy on `stream`; from or to pinned memory it does not wait for it."""
        self._check(
            self.lib.cudaMemcpyAsync(
                ctypes.c_void_p(dst), ctypes.c_void_p(src), nbytes, kind, ctypes.c_void_p(stream)
            ),
            "cudaMemcpyAsync",
        )

    def event(self, timing: bool = False) -> int:
        self._set_device()
        handle = ctypes.c_void_p()
        flags = 0 if timing else _EVENT_DISABLE_TIMING
        self._check(
            self.lib.cudaEventCreateWithFlags(ctypes.byref(handle), flags), "cudaEventCreate"
        )
        return handle.value

    def free_event(self, event: int) -> None:
        self._check(self.lib.cudaEventDestroy(ctypes.c_void_p(event)), "cudaEventDestroy")

    def record(self, event: int, stream: int) -> None:
        self._check(
            self.lib.cudaEventRecord(ctypes.c_void_p(event), ctypes.c_void_p(stream)),
            "cudaEventRecord",
        )

    def wait(self, event: int) -> None:
        """Block the calling thread until the work queued before `event` is done."""
        self._check(self.lib.cudaEventSynchronize(ctypes.c_void_p(event)), "cudaEventSynchronize")

    def stream_wait(self, stream: int, event: int) -> None:
        """Make `stream`'s later work wait for `event` (recorded on another stream)."""
        self._check(
            self.lib.cudaStreamWaitEvent(ctypes.c_void_p(stream), ctypes.c_void_p(event), 0),
            "cudaStreamWaitEvent",
        )

    def elapsed_s(self, start: int, end: int) -> float:
        ms = ctypes.c_float()
        self._check(
            self.lib.cudaEventElapsedTime(
                ctypes.byref(ms), ctypes.c_void_p(start), ctypes.c_void_p(end)
            ),
            "cudaEventElapsedTime",
        )
        return ms.value / 1e3


# cudaMemoryTypeHost: page-locked host memory.
_MEMORY_TYPE_HOST = 1


class _PointerAttributes(ctypes.Structure):
    # cudaPointerAttributes, with room kept past its four fields: declared with those alone,
    # the first H200 run (CUDA 13) crashed in a later malloc, as if CUDA had written past the
    # end (newer CUDA versions add reserved words to such structs).
    _fields_ = [
        ("type", ctypes.c_int),
        ("device", ctypes.c_int),
        ("devicePointer", ctypes.c_void_p),
        ("hostPointer", ctypes.c_void_p),
        ("reserved", ctypes.c_long * 32),
    ]


class _Block:
    """Pinned memory that numpy arrays are made on (their base): freed with the last of them."""

    def __init__(self, pointer: int, nbytes: int, free) -> None:
        self.__array_interface__ = {
            "data": (pointer, False),
            "shape": (nbytes,),
            "typestr": "|u1",
            "version": 3,
        }
        weakref.finalize(self, free, ctypes.c_void_p(pointer))


class HostRuntime:
    """CudaRuntime's calls on host memory: the device computes synchronously, so a copy is done
    when queued and an event's time is the clock's when it is recorded."""

    def stream(self) -> int:
        return 0

    def __init__(self) -> None:
        self._blocks: weakref.WeakValueDictionary = weakref.WeakValueDictionary()

    def host_alloc(self, nbytes: int) -> np.ndarray:
        block = np.empty(max(nbytes, 1), np.uint8)
        self._blocks[block.ctypes.data] = block
        return block[:nbytes]

    def is_pinned(self, array: np.ndarray) -> bool:
        """Whether `array` lies in memory host_alloc gave (what stands for pinned here)."""
        start, end = array.ctypes.data, array.ctypes.data + array.nbytes
        return any(
            base <= start and end <= base + block.nbytes
            for base, block in list(self._blocks.items())
        )

    def copy(self, dst: int, src: int, nbytes: int, kind: int, stream: int) -> None:
        ctypes.memmove(dst, src, nbytes)

    def event(self, timing: bool = False) -> list[float]:
        return [0.0]

    def free_event(self, event: list[float]) -> None:
        pass

    def record(self, event: list[float], stream: int) -> None:
        event[0] = time.perf_counter()

    def wait(self, event: list[float]) -> None:
        pass

    def stream_wait(self, stream: int, event: list[float]) -> None:
        pass

    def elapsed_s(self, start: list[float], end: list[float]) -> float:
        return end[0] - start[0]


def pinned_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """gdp.pinned_empty: page-locked where a CUDA GPU is present, else np.empty."""
    runtime = _present_gpu_runtime()
    if runtime is None:
        return np.empty(shape, dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    return runtime.host_alloc(nbytes).view(dtype).reshape(shape)


@functools.cache
def _present_gpu_runtime() -> CudaRuntime | None:
    """CUDA's runtime for GPU 0, where TVM's CUDA runtime loads and sees a GPU; else None."""
    import tvm

    from gdp.runtime.backends.tvm import cuda

    try:
        cuda.load_cuda_runtime()
    except ExecutionError:
        return None
    return CudaRuntime(0) if tvm.cuda().exist else None


@functools.cache
def _libcudart() -> ctypes.CDLL:
    """libcudart.so.13 with the signatures used here: the copy TVM's CUDA runtime loaded (the
    dynamic loader returns a library already in the process by its name), else one from where
    cuda.py looks for it."""
    from gdp.runtime.backends.tvm import cuda

    try:
        lib = ctypes.CDLL("libcudart.so.13")
    except OSError:
        path = next(cuda._cuda_files(cuda._CUDART_GLOBS), None)
        if path is None:
            raise ExecutionError(
                "target 'gpu' needs CUDA's runtime library libcudart.so.13, and none was found"
            ) from None
        lib = ctypes.CDLL(path)
    pointer, size = ctypes.c_void_p, ctypes.c_size_t
    signatures = {
        "cudaGetErrorString": ([ctypes.c_int], ctypes.c_char_p),
        "cudaSetDevice": ([ctypes.c_int], ctypes.c_int),
        "cudaStreamCreateWithFlags": ([ctypes.POINTER(pointer), ctypes.c_uint], ctypes.c_int),
        "cudaHostAlloc": ([ctypes.POINTER(pointer), size, ctypes.c_uint], ctypes.c_int),
        "cudaFreeHost": ([pointer], ctypes.c_int),
        "cudaGetLastError": ([], ctypes.c_int),
        "cudaPointerGetAttributes": (
            [ctypes.POINTER(_PointerAttributes), pointer],
            ctypes.c_int,
        ),
        "cudaMemcpyAsync": ([pointer, pointer, size, ctypes.c_int, pointer], ctypes.c_int),
        "cudaEventCreateWithFlags": ([ctypes.POINTER(pointer), ctypes.c_uint], ctypes.c_int),
        "cudaEventDestroy": ([pointer], ctypes.c_int),
        "cudaEventRecord": ([pointer, pointer], ctypes.c_int),
        "cudaEventSynchronize": ([pointer], ctypes.c_int),
        "cudaStreamWaitEvent": ([pointer, pointer, ctypes.c_uint], ctypes.c_int),
        "cudaEventElapsedTime": (
            [ctypes.POINTER(ctypes.c_float), pointer, pointer],
            ctypes.c_int,
        ),
    }
    for name, (args, result) in signatures.items():
        function = getattr(lib, name)
        function.argtypes, function.restype = args, result
    return lib
