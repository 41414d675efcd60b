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
(ray.init, forking its helper processes, deadlocked in such a lookup in the child)."""

from __future__ import annotations

import ctypes
import os
import threading

import tvm


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

# Whether this thread has run TVM kernels (so has a pool).
_local = threading.local()


def before_run() -> None:
    """Called before kernels run on this thread: marks that it has a pool."""
    _local.used = True


def _wake_before_fork() -> None:
    if _LAUNCH is not None and getattr(_local, "used", False):
        _LAUNCH(_NOTHING, None, 0)


def _reset_in_child() -> None:
    if _RESET is not None and getattr(_local, "used", False):
        _RESET()


os.register_at_fork(before=_wake_before_fork, after_in_child=_reset_in_child)
