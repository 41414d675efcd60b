"""The call that runs a hand-written kernel, for modules on an eager call's path: it binds
gdp.runtime.backends.tvm.kernels (which imports TVM) at its first call, so that importing
gdp.cv2 imports no TVM, and a later call pays no import statement (about 0.5 us each, where
a small image's whole call takes a few microseconds).

A kernel split into strips (`for s in T.parallel(strips)`) runs them on TVM's thread pool, and
a launch waits for every worker, a worker with no strip too: on a 2-core VM whose idle worker
sleeps (TVM_THREAD_POOL_SPIN_COUNT spent, or after OpenCV's threads had the cores), waking it
cost 40-90 us, more than a small image's whole work. So a kernel of one strip runs its serial
twin (`run_strips`), the same TIR with its parallel loops as plain ones, on the calling
thread alone; a module gives small work one strip (SERIAL_BYTES)."""

from __future__ import annotations

import functools

_kernels = None

# The bytes a memory-bound kernel reads and writes at most to run on the calling thread alone
# (one strip), about 30-40 us of one core's traffic here. Measured on the 2-core VM, each call
# right after OpenCV's (the benchmark's order), TVM's workers spinning 300 rounds: one thread
# took transpose 480p gray 0.05 ms against two threads' 0.09, flip 480p BGR 0.12 against 0.16,
# sumElems 480p BGR 0.06 against 0.12; LUT 480p BGR (1.8 MB) 0.11 against 0.09.
SERIAL_BYTES = 1 << 20


def _bound():
    global _kernels, _before_run
    if _kernels is None:
        from gdp.runtime.backends.tvm import kernels, thread_pool

        _before_run = thread_pool.before_run
        _kernels = kernels
    return _kernels


def _before_run() -> None:
    """thread_pool.before_run, bound with the kernels (_bound)."""
    _bound()
    _before_run()


def run_host_kernel(name: str, source: str, *args) -> None:
    """gdp.runtime.backends.tvm.kernels.run_host_kernel."""
    (_kernels or _bound()).run_host_kernel(name, source, *args)


# source -> its serial twin's function, once loaded: one lookup a call. (After a call that
# swept the caches, each layer of Python on the way to a kernel cost 2-3 us.)
_serial: dict[str, object] = {}


# source -> the kernel's function, once loaded, for run_strips (as _serial).
_parallel: dict[str, object] = {}


def run_strips(name: str, source: str, *args) -> None:
    """run_host_kernel of a kernel whose last argument is its strip count: of one strip, its
    serial twin (run_serial's). Each function looked up here by source, without
    run_host_kernel's frame (3-4 us of a 1080p call after a cache sweep)."""
    if args[-1] == 1:
        kernel = _serial.get(source) or _serial_kernel(name, source)
    else:
        kernel = _parallel.get(source) or _parallel_kernel(name, source)
        _before_run()
    try:
        kernel(*args)
    except BufferError:  # a read-only input: run_host_kernel passes it as a copy
        if args[-1] == 1:
            name, source = serial_twin(name, source)
        _bound().run_host_kernel(name, source, *args)


def run_serial(name: str, source: str, *args) -> None:
    """The kernel's serial twin (serial_twin) on this thread, without TVM's pool (nor its
    thread count)."""
    kernel = _serial.get(source) or _serial_kernel(name, source)
    try:
        kernel(*args)
    except BufferError:  # a read-only input: run_host_kernel passes it as a copy
        (_kernels or _bound()).run_host_kernel(*serial_twin(name, source), *args)


def _serial_kernel(name: str, source: str):
    kernel = _serial[source] = _bound().host_kernel(*serial_twin(name, source))
    return kernel


def _parallel_kernel(name: str, source: str):
    kernel = _parallel[source] = _bound().host_kernel(name, source)
    return kernel


@functools.cache
def serial_twin(name: str, source: str) -> tuple[str, str]:
    """(name, TVMScript) of the kernel with its parallel loops as plain loops (the same
    iterations in order: a strip's work is its own either way), under a name of its own."""
    return f"{name}_serial", source.replace("T.parallel(", "range(")


def host_tensors(*arrays) -> tuple:
    """gdp.runtime.backends.tvm.kernels.host_tensors."""
    return (_kernels or _bound()).host_tensors(*arrays)


def alone(moved: int) -> bool:
    """Whether a memory-bound kernel that reads and writes `moved` bytes runs on the calling
    thread alone (at most SERIAL_BYTES)."""
    return moved <= SERIAL_BYTES


def strips_for(moved: int, strips: int) -> int:
    """A memory-bound kernel's strip count: `strips`, its module's count for the work, or one
    where it runs alone (`moved` bytes read and written)."""
    return 1 if alone(moved) else strips
