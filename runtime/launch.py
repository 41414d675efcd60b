"""The call that runs a hand-written kernel, for modules on an eager call's path: it binds
gdp.runtime.backends.tvm.kernels (which imports TVM) at its first call, so that importing
gdp.cv2 imports no TVM, and a later call pays no import statement (about 0.5 us each, where
a small image's whole call takes a few microseconds).

A kernel split into strips (`for s in T.parallel(strips)`) runs them on TVM's thread pool, and
a launch waits for every worker, a worker with no strip too: on a 2-core VM whose idle worker
sleeps (TVM_THREAD_POOL_SPIN_COUNT spent, or after OpenCV's threads had the cores), waking it
cost 40-90 us, more than a small image's whole work. So a kernel of one strip runs its serial
twin (`run_strips`), the same TIR with its parallel loops as plain ones, on the calling
thread alone; a module gives small work one strip (SERIAL_BYTES).

A kernel of more strips runs them on gdp.runtime._strips (runtime/_strips.c, built by `make
install`) where its strip loop is its last statement: the calling thread starts on them at once
and helper threads take the rest as they wake, so no launch waits for a sleeping one
(range_twin). Other kernels, and every kernel without the built extension, run on
TVM's pool."""

from __future__ import annotations

import functools
import os
import re

try:  # built by `make install` (runtime/_strips.c); tests hold this machine to it
    from gdp.runtime import _strips
except ImportError:
    _strips = None

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
        import tvm_ffi

        from gdp.runtime.backends.tvm import kernels, thread_pool

        if _strips is not None:
            # helpers pinned to cores where TVM's workers are (TVM_BIND_THREADS=1), as TVM's
            pin = os.environ.get("TVM_BIND_THREADS") == "1" and hasattr(os, "sched_getaffinity")
            _strips.configure(tvm_ffi.Tensor, sorted(os.sched_getaffinity(0)) if pin else [])
            thread_pool.on_threads(_strips.set_threads)
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


# source -> its range twin's (Function, address), or None where it has none (range_twin).
_ranged: dict[str, tuple | None] = {}


def run_strips(name: str, source: str, *args) -> None:
    """run_host_kernel of a kernel whose last argument is its strip count: of one strip, its
    serial twin (run_serial's); of more, its range twin on gdp.runtime._strips where it has
    one. Each function looked up here by source, without run_host_kernel's frame (3-4 us of a
    1080p call after a cache sweep)."""
    if args[-1] == 1:
        kernel = _serial.get(source) or _serial_kernel(name, source)
    else:
        ranged = _ranged.get(source, False)
        if ranged is False:
            ranged = _ranged_kernel(name, source)
        # False: a strip failed or an argument is not one _strips passes; TVM's call below
        # runs the kernel again and raises its error
        if ranged is not None and _strips.run(ranged[1], args):
            return
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


def _ranged_kernel(name: str, source: str):
    twin = range_twin(name, source) if _strips is not None else None
    if twin is not None:
        function = _bound().host_kernel(*twin)
        twin = (function, function.__chandle__())
    _ranged[source] = twin
    return twin


def _parallel_kernel(name: str, source: str):
    kernel = _parallel[source] = _bound().host_kernel(name, source)
    return kernel


@functools.cache
def serial_twin(name: str, source: str) -> tuple[str, str]:
    """(name, TVMScript) of the kernel with its parallel loops as plain loops (the same
    iterations in order: a strip's work is its own either way), under a name of its own."""
    return f"{name}_serial", source.replace("T.parallel(", "range(")


# A kernel's strip loop, and the strip count among its parameters.
_STRIP_LOOP = re.compile(r"^( *)for s in T\.parallel\(strips\):$", re.MULTILINE)
_STRIPS_PARAMETER = "strips: T.int32"
# What a kernel may have before its strip loop and still have a range twin: its attributes and
# one-line bindings of a name (TVMScript writes a store with a subscript: `out[i] = ...`; a
# buffer allocated there is each call's own scratch), no statement (a store there would run
# again with every range).
_DECLARATION = re.compile(r"^ *(#.*|T\.func_attr\(.*\)|\w+ = [^\n]*)?$")


@functools.cache
def range_twin(name: str, source: str) -> tuple[str, str] | None:
    """(name, TVMScript) of the kernel that runs strips [strip_first, strip_last) of `strips`
    (two parameters after it): its strip loop `for s in T.parallel(strips)` as a plain loop
    whose body runs for the strips of that range. None unless that loop is the kernel's one
    parallel loop and its last statement (a kernel that combines its strips' results after the
    loop has no twin: each call would combine only its own)."""
    loops = list(_STRIP_LOOP.finditer(source))
    if len(loops) != 1 or source.count("T.parallel(") != 1:
        return None
    if source.count(_STRIPS_PARAMETER) != 1:
        return None
    loop = loops[0]
    signature_end = source.index("):\n", source.index("def ")) + 3
    for line in source[signature_end : loop.start()].splitlines():
        if not _DECLARATION.match(line):
            return None  # a statement before the loop: each call would run it again
    indent = len(loop.group(1))
    for line in source[loop.end() :].splitlines():
        if line.strip() and len(line) - len(line.lstrip(" ")) <= indent:
            return None  # a statement after the loop
    # Every strip's turn, the body (one level deeper) run for those in the range. Not a loop
    # from strip_first: TVM 0.27 lost a loop's start where the body had loops bounded by its
    # variable (HSV2BGR's twin wrote strip 0's rows for every strip); nor s bound from a loop
    # from 0 (`s = strip_first + strip`), which ran copyMakeBorder's strips 2x slower.
    head = source[: loop.start()].replace(
        _STRIPS_PARAMETER, f"{_STRIPS_PARAMETER}, strip_first: T.int32, strip_last: T.int32"
    )
    inner = " " * (indent + 4)
    rest = "\n".join(
        "    " + line if line.strip() else line for line in source[loop.end() + 1 :].split("\n")
    )
    body = (
        f"{head}{loop.group(1)}for s in range(strips):\n"
        f"{inner}if strip_first <= s and s < strip_last:\n{rest}"
    )
    return f"{name}_range", body


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
