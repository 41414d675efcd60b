"""Hand-written TIR kernels for the host CPU: a TVMScript `T.prim_func`, kept as source text,
compiled once per target with TVM's LLVM backend (the target gdp's cpu backend compiles for),
its library kept in gdp's disk cache and loaded with tvm.runtime.load_module.

The cache key is the kernel's source, the target and TVM's version, none of which needs the
compiler to compute: a later process finds the library without parsing or compiling anything.
Each library is loaded once per process.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import tvm
import tvm_ffi

from gdp.errors import CompileError
from gdp.runtime.backends.tvm import thread_pool
from gdp.runtime.cache import DiskCache, cache_key, default_cache_dir

LIBRARY = "kernel.so"
# Bump when the layout of an entry changes.
_FORMAT = 1

# (name, source) -> the library and its function, once loaded: a call after the first hashes
# nothing.
_loaded: dict[tuple[str, str], tuple[tvm.runtime.Module, tvm.runtime.Function]] = {}
_lock = threading.Lock()


def host_target() -> tvm.target.Target:
    """The target gdp's cpu backend compiles for: LLVM for this machine's CPU."""
    from gdp.runtime.backends.tvm.llvm import TvmLlvmBackend

    return TvmLlvmBackend().target()


def _compile(name: str, source: str, target: tvm.target.Target, directory: Path) -> dict:
    from tvm.script import tirx as T

    try:
        func = tvm.script.from_source(source, extra_vars={"T": T})
        if not isinstance(func, tvm.tirx.PrimFunc):
            raise TypeError(f"the source defines a {type(func).__name__}, not one T.prim_func")
        built = tvm.compile(tvm.IRModule({name: func.with_attr("global_symbol", name)}), target)
        built.export_library(str(directory / LIBRARY))
    except Exception as err:
        raise CompileError(
            f"TVM failed to compile the TIR kernel {name!r} for {target}: {err}"
        ) from err
    return {"files": [LIBRARY], "kernel": name, "target": str(target), "tvm": tvm.__version__}


def host_kernel(name: str, source: str, cache: DiskCache | None = None) -> tvm.runtime.Function:
    """The function `name` compiled from `source` (TVMScript of one `T.prim_func`, which may
    refer to `T`, tvm.script's tirx) for this machine's CPU: from this process, else from the
    disk cache (`cache`, else GDP_CACHE_DIR, else ~/.cache/gdp), else compiled into it."""
    hit = _loaded.get((name, source))
    if hit is not None:
        return hit[1]
    with _lock:
        hit = _loaded.get((name, source))
        if hit is None:
            hit = _load(
                name, source, cache if cache is not None else DiskCache(default_cache_dir())
            )
            _loaded[(name, source)] = hit
    return hit[1]


def run_host_kernel(name: str, source: str, *args) -> None:
    """Run `host_kernel(name, source)` on this thread: numpy arrays (C-contiguous) are passed
    as they are (TVM's FFI takes them by DLPack, without a copy), other arguments (integers)
    too. numpy's data need not be 64-byte aligned (TVM's default): a kernel's buffers ask only
    for their element's alignment. A read-only array (an input: numpy exports none by DLPack)
    is passed as a copy. On every eager gdp.cv2 call: a wrapper per argument cost a 64x64
    threshold a fifth of its time."""
    hit = _loaded.get((name, source))
    kernel = hit[1] if hit is not None else host_kernel(name, source)
    thread_pool.before_run()
    try:
        kernel(*args)
    except BufferError:  # raised converting the arguments, before the kernel runs
        kernel(*[_writable(a) for a in args])


def _writable(value):
    if isinstance(value, np.ndarray) and not value.flags.writeable:
        return value.copy()
    return value


def _tensor(array: np.ndarray):
    return tvm_ffi.from_dlpack(_writable(array), require_contiguous=True)


def host_tensors(*arrays: np.ndarray) -> tuple:
    """C-contiguous numpy arrays as the tensors run_host_kernel passes, made once: a kernel's
    constant inputs kept with its plan save their DLPack conversion (about 1.5 us each) on
    every call."""
    return tuple(_tensor(np.ascontiguousarray(a)) for a in arrays)


def _load(
    name: str, source: str, cache: DiskCache
) -> tuple[tvm.runtime.Module, tvm.runtime.Function]:
    from gdp.runtime.backends.tvm.llvm import use_every_core

    use_every_core()  # before the first parallel kernel starts TVM's pool
    target = host_target()
    key = cache_key("gdp-tir-kernel", str(_FORMAT), name, source, str(target), tvm.__version__)
    with cache.lock(key):
        found = cache.lookup(key)
        compiled = found is None
        if compiled:
            found = cache.store(key, lambda d: _compile(name, source, target, d))
        entry, _ = found
        try:
            library = tvm.runtime.load_module(str(entry / LIBRARY))
        except Exception:
            if compiled:
                raise
            # Checksums matched but the library does not load (another toolchain wrote it):
            # rebuild it rather than fail the caller.
            cache.discard(key)
            entry, _ = cache.store(key, lambda d: _compile(name, source, target, d))
            library = tvm.runtime.load_module(str(entry / LIBRARY))
    return library, library[name]
