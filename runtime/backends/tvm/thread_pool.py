"""TVM's CPU thread pool across os.fork.

TVM keeps one pool of worker threads per thread that runs parallel kernels. A forked child
inherits the forking thread's pool object but none of its threads, so the child's first
parallel kernel would wait on them forever; TVM's threading::ResetThreadPool (what TVM's RPC
server calls in its forked children) makes it start new ones. It is called in the child at
once, before the child makes threads of its own (later, a new thread may take a dead worker's
identity, and the reset's join of that worker aborts the child: measured).

The reset is safe only if no worker of the copied pool was asleep at the fork: a worker idle
for a while sleeps on a condition variable, and ResetThreadPool then waits in the child, forever,
for a sleeper that does not exist there (a model run, 3 s idle, then subprocess.Popen with a
preexec_fn, or ray.init, hung). So before a thread that has run kernels forks, its workers are
woken (a parallel launch of nothing): a woken worker spins for a while before it sleeps again,
long past the fork.

Both use TVM runtime symbols looked up once here, in the parent: a forked child must not
dlopen, since another thread of the parent may have held the dynamic loader's lock at the fork
(ray.init, forking its helper processes, deadlocked in such a lookup in the child).

The number of threads a kernel runs on (set_threads, which gdp.cv2.setNumThreads calls as
OpenCV's does) is TVM's runtime.config_threadpool, which sets the pool of the thread that calls
it: so each thread applies the latest setting to its own pool before its next kernel."""

from __future__ import annotations

import ctypes
import os
import threading

import tvm
import tvm_ffi


def _runtime_library():
    try:
        return ctypes.CDLL(os.path.join(os.path.dirname(tvm.__file__), "lib", "libtvm_runtime.so"))
    except OSError:  # another TVM build: nothing to reset by these names
        return None


_LIB = _runtime_library()
# C++ tvm::runtime::threading::ResetThreadPool(), by its mangled name.
_RESET = getattr(_LIB, "_ZN3tvm7runtime9threading15ResetThreadPoolEv", None)
# int TVMBackendParallelLaunch(FTVMParallelLambda flambda, void* cdata, int num_task); ctypes
# releases the GIL for the call, so the workers may take it to run the lambda.
_LAUNCH = getattr(_LIB, "TVMBackendParallelLaunch", None)
_LAMBDA = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
_NOTHING = _LAMBDA(lambda task, env, data: 0)

# runtime.config_threadpool(mode, threads): the calling thread's pool, its workers of TVM's
# AffinityMode `mode` (1, kBig: every core of a machine without big and little ones, and the
# pool's default) and `threads` of them (0: the default). TVM never grows a pool past the size it
# started with (TVM_NUM_THREADS, gdp's one per physical core), so more is that many.
_CONFIGURE = tvm_ffi.get_global_func("runtime.config_threadpool", allow_missing=True)

# Whether this thread has run TVM kernels (so has a pool), and the setting its pool has.
_local = threading.local()

# set_threads' count (0: the pool's default) and how many times it was set: a thread whose pool
# has an older setting applies this one before its next kernel.
_threads = 0
_generation = 0
_set_lock = threading.Lock()


def set_threads(count: int) -> None:
    """Run gdp's CPU kernels on `count` threads (at least 1; 0: every thread of the pool), from
    the next kernel on, on every thread that runs them. Kernels split their work as before; a
    count above the pool's size (one thread per physical core, or TVM_NUM_THREADS) is the
    pool's size."""
    global _threads, _generation
    if not isinstance(count, int) or count < 0:
        raise ValueError(f"set_threads: expected a count >= 0, got {count!r}")
    with _set_lock:
        _threads = count
        _generation += 1
        for listener in _listeners:
            listener(_thread_count())


# Called with the thread count at once and after each set_threads (gdp.runtime._strips's pool).
_listeners: list = []


def on_threads(listener) -> None:
    """Calls `listener(count)` with the threads kernels run on now, and again whenever
    set_threads changes them: the pool of gdp.runtime._strips follows TVM's."""
    with _set_lock:
        _listeners.append(listener)
        listener(_thread_count())


def _thread_count() -> int:
    """The threads set_threads' count (0: the pool's size) gives a kernel."""
    from gdp.runtime.backends.tvm.llvm import pool_threads

    return min(_threads, pool_threads()) if _threads else pool_threads()


def before_run() -> None:
    """Called before kernels run on this thread: marks that it has a pool, and gives that pool
    set_threads' count if it has an older one (one attribute read when it has neither to do:
    a thread-local write on every kernel cost 1-2 us)."""
    if getattr(_local, "generation", -1) != _generation:
        _mark_and_apply()


def _mark_and_apply() -> None:
    """This thread's first kernel (generation -1: marked as having a pool; the pool's own count
    kept unless set_threads set one) or a newer setting."""
    first = not hasattr(_local, "generation")
    _local.used = True
    with _set_lock:
        count, generation = _threads, _generation
    if _CONFIGURE is not None and not (first and generation == 0):
        _CONFIGURE(1, count)
    _local.generation = generation


def _wake_before_fork() -> None:
    if _LAUNCH is not None and getattr(_local, "used", False):
        _LAUNCH(_NOTHING, None, 0)


def _reset_in_child() -> None:
    if _RESET is not None and getattr(_local, "used", False):
        _RESET()
        # the new pool starts with the default count: set_threads' is applied again
        _local.generation = 0


os.register_at_fork(before=_wake_before_fork, after_in_child=_reset_in_child)
