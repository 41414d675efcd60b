"""The one exception family of gdp.

Every error gdp raises on purpose is a `GdpError`. Errors about a caller's data also derive from the
builtin the caller would expect (`ValueError`, `TypeError`), so `except ValueError` keeps working.
This module imports nothing, so every layer (front ends, rewrites, runtime) may use it.
"""

from __future__ import annotations


class GdpError(Exception):
    """Base class of every error gdp raises on purpose."""


class FrontendError(GdpError, ValueError):
    """The program handed to `gdp.compile` cannot be turned into an ONNX graph."""


class UnsupportedOpError(FrontendError):
    """An operator has no conversion or no backend implementation."""

    def __init__(self, op: str, node: str, detail: str = "") -> None:
        self.op = op
        self.node = node
        msg = f"unsupported op {op!r} at node {node!r}"
        super().__init__(f"{msg}: {detail}" if detail else msg)


class VerificationError(FrontendError):
    """gdp.compile ran the TensorFlow source and gdp's result on probe inputs and they disagree.

    `stage` is "conversion" (the front end's ONNX graph on onnxruntime) or "compiled" (the
    model on its target); `output`, `max_error` and `tolerance` say what disagreed and by how
    much; `op_type` and `op_name` name the first TF op whose output disagrees, where found."""

    def __init__(
        self,
        message: str,
        *,
        stage: str,
        output: str | None = None,
        max_error: float | None = None,
        tolerance: str | None = None,
        op_type: str | None = None,
        op_name: str | None = None,
    ) -> None:
        self.stage = stage
        self.output = output
        self.max_error = max_error
        self.tolerance = tolerance
        self.op_type = op_type
        self.op_name = op_name
        super().__init__(message)


class InputError(GdpError, ValueError):
    """A run was given an input of the wrong name, shape or dtype."""


class OutputBufferError(GdpError, ValueError):
    """A caller-provided output array has the wrong shape or dtype, or cannot be written."""


class TargetError(GdpError, ValueError):
    """An unknown target or backend name, or an option the target does not take."""


class CompileError(GdpError):
    """A backend failed to compile a graph."""


class ExecutionError(GdpError):
    """A compiled model failed while running."""


class DeviceError(ExecutionError):
    """A device runtime call failed (Ascend ACL): `call` is the API, `code` its error number."""

    def __init__(self, call: str, code: int, detail: str = "") -> None:
        self.call = call
        self.code = code
        msg = f"{call} failed with ACL error {code}"
        super().__init__(f"{msg}: {detail}" if detail else msg)


class CacheError(GdpError):
    """The compile cache cannot be trusted or used: its directory (or key file) can be written by
    others or is owned by another user, so gdp will not load code from it."""


class QueueFullError(GdpError):
    """`run_async(..., block=False)` found its target's queue full (gdp.runtime.queue.MAX_QUEUED
    runs waiting): nothing was queued; try again later, or submit with block=True to wait."""
