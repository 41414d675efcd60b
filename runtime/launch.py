"""The call that runs a hand-written kernel, for modules on an eager call's path: it binds
gdp.runtime.backends.tvm.kernels (which imports TVM) at its first call, so that importing
gdp.cv2 imports no TVM, and a later call pays no import statement (about 0.5 us each, where
a small image's whole call takes a few microseconds)."""

from __future__ import annotations

_kernels = None


def _bound():
    global _kernels
    if _kernels is None:
        from gdp.runtime.backends.tvm import kernels

        _kernels = kernels
    return _kernels


def run_host_kernel(name: str, source: str, *args) -> None:
    """gdp.runtime.backends.tvm.kernels.run_host_kernel."""
    (_kernels or _bound()).run_host_kernel(name, source, *args)


def host_tensors(*arrays) -> tuple:
    """gdp.runtime.backends.tvm.kernels.host_tensors."""
    return (_kernels or _bound()).host_tensors(*arrays)
