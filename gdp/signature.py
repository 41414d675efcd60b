"""The inputs and outputs of an ONNX graph as names, dtypes and shapes (None for a free dim), and
the binding of a call's arrays to them: inputs by position or name, output buffers by name, each
checked against its signature."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from gdp.errors import InputError, OutputBufferError


@dataclass(frozen=True)
class TensorSig:
    name: str
    dtype: np.dtype
    shape: tuple[int | None, ...]

    @property
    def static(self) -> bool:
        return all(d is not None for d in self.shape)

    def describe(self) -> str:
        dims = ", ".join("None" if d is None else str(d) for d in self.shape)
        return f"{self.dtype.name}[{dims}]"


def _sig(value: onnx.ValueInfoProto) -> TensorSig:
    ttype = value.type.tensor_type
    dims: list[int | None] = []
    if ttype.HasField("shape"):
        for d in ttype.shape.dim:
            dims.append(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None)
    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(ttype.elem_type))
    return TensorSig(value.name, dtype, tuple(dims))


def graph_inputs(model: onnx.ModelProto) -> list[TensorSig]:
    # Graphs from older exporters also list their initializers as inputs; those are not inputs.
    initializers = {t.name for t in model.graph.initializer}
    return [_sig(v) for v in model.graph.input if v.name not in initializers]


def graph_outputs(model: onnx.ModelProto) -> list[TensorSig]:
    return [_sig(v) for v in model.graph.output]


def bind_inputs(sigs: Sequence[TensorSig], args: Sequence, kwargs: Mapping[str, Any]) -> list:
    """Inputs by position or name -> validated arrays in graph input order."""
    names = [s.name for s in sigs]
    if len(args) > len(names):
        raise InputError(f"expected at most {len(names)} inputs {names}, got {len(args)}")
    given: dict[str, Any] = dict(zip(names, args, strict=False))
    for name, value in kwargs.items():
        if name not in names:
            raise InputError(f"unknown input {name!r}: expected one of {names}")
        if name in given:
            raise InputError(f"input {name!r} given twice (by position and by name)")
        given[name] = value
    missing = [n for n in names if n not in given]
    if missing:
        raise InputError(f"missing input(s) {missing}: the model takes {names}")
    return [check_input(sig, given[sig.name]) for sig in sigs]


def bind_outputs(sigs: Sequence[TensorSig], outputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Output buffers by name -> validated arrays viewed with their output's shape."""
    index = {s.name: s for s in sigs}
    buffers: dict[str, np.ndarray] = {}
    for name, buf in outputs.items():
        if name not in index:
            raise OutputBufferError(
                f"unknown output {name!r}: expected one of {[s.name for s in sigs]}"
            )
        sig = index[name]
        if not isinstance(buf, np.ndarray):
            raise OutputBufferError(
                f"output {name!r}: expected a numpy.ndarray to fill, got {type(buf).__name__}"
            )
        if buf.dtype != sig.dtype:
            raise OutputBufferError(
                f"output {name!r}: expected dtype {sig.dtype.name}, got {buf.dtype.name}"
            )
        if not buf.flags.writeable:
            raise OutputBufferError(f"output {name!r}: the array is read-only")
        if not buf.flags.c_contiguous:
            raise OutputBufferError(f"output {name!r}: expected a C-contiguous array")
        view = fit_shape(buf, sig.shape)
        if view is None:
            raise OutputBufferError(
                f"output {name!r}: expected shape {sig.describe()}, got {buf.shape}"
            )
        buffers[name] = view
    return buffers


def fit_shape(array: np.ndarray, shape: tuple[int | None, ...]) -> np.ndarray | None:
    """`array` viewed with `shape`, or None. Free dims match anything; leading dims of size 1 may be
    left out (GDPNPU's listing passes (2, 3) arrays to (1, 2, 3) inputs)."""
    got = array.shape
    if len(got) < len(shape):
        lead = len(shape) - len(got)
        if all(d == 1 for d in shape[:lead]):
            shape_tail = shape[lead:]
            if all(e is None or e == g for e, g in zip(shape_tail, got, strict=True)):
                return array.reshape((1,) * lead + got)
        return None
    if len(got) == len(shape) and all(e is None or e == g for e, g in zip(shape, got, strict=True)):
        return array
    return None


# DLPack's device type of host memory.
DLPACK_CPU = 1


def on_device(value: Any) -> bool:
    """Whether `value` is an array in an accelerator's memory: a DLPack producer (a torch.cuda
    tensor, a CuPy array) whose device is not the host's."""
    if isinstance(value, np.ndarray):
        return False
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return value.device.type != "cpu"  # 2 us less than asking DLPack
    if not hasattr(value, "__dlpack_device__"):
        return False
    try:
        return int(value.__dlpack_device__()[0]) != DLPACK_CPU
    except Exception:
        return False


# A device array's dtype (torch's, CuPy's) -> numpy's, learnt once each.
_dtypes: dict[Any, np.dtype] = {}


def _numpy_dtype(dtype: Any) -> np.dtype:
    try:
        return _dtypes[dtype]
    except (KeyError, TypeError):  # not seen yet, or not hashable
        found = np.dtype(str(dtype).removeprefix("torch."))
    with contextlib.suppress(TypeError):  # an unhashable dtype is converted every call
        _dtypes[dtype] = found
    return found


def _check_device_input(sig: TensorSig, value: Any) -> Any:
    """A device array checked against `sig` (dtype, shape, C-contiguous), returned as it is:
    the backend reads it in place through DLPack."""
    try:
        dtype = _numpy_dtype(value.dtype)
        shape = tuple(int(d) for d in value.shape)
    except (TypeError, AttributeError):
        raise InputError(
            f"input {sig.name!r}: a device array of dtype {getattr(value, 'dtype', '?')} that"
            f" gdp cannot read (expected {sig.describe()})"
        ) from None
    if dtype != sig.dtype:
        raise InputError(f"input {sig.name!r}: expected dtype {sig.dtype.name}, got {dtype.name}")
    if len(shape) != len(sig.shape) or any(
        e is not None and e != g for e, g in zip(sig.shape, shape, strict=False)
    ):
        raise InputError(f"input {sig.name!r}: expected shape {sig.describe()}, got {shape}")
    if 0 in shape:
        raise InputError(
            f"input {sig.name!r}: expected shape {sig.describe()} with every extent at least 1,"
            f" got the empty device array {shape}"
        )
    contiguous = value.is_contiguous() if hasattr(value, "is_contiguous") else None
    if contiguous is None:
        contiguous = getattr(getattr(value, "flags", None), "c_contiguous", True)
    if not contiguous:
        raise InputError(
            f"input {sig.name!r}: expected a C-contiguous device array, got a strided view"
            " (make it contiguous first: .contiguous() / cupy.ascontiguousarray)"
        )
    return value


def check_input(sig: TensorSig, value: Any) -> np.ndarray:
    if on_device(value):
        return _check_device_input(sig, value)
    if not isinstance(value, np.ndarray):
        if not hasattr(value, "__array__"):
            raise InputError(
                f"input {sig.name!r}: expected a numpy array {sig.describe()}, got "
                f"{type(value).__name__}"
            )
        value = np.asarray(value)
    if value.dtype != sig.dtype:
        raise InputError(
            f"input {sig.name!r}: expected dtype {sig.dtype.name}, got {value.dtype.name}"
        )
    fitted = fit_shape(value, sig.shape)
    if fitted is None:
        raise InputError(f"input {sig.name!r}: expected shape {sig.describe()}, got {value.shape}")
    if fitted.size == 0 and 0 not in sig.shape:
        # A free extent given as 0: the kernels take non-empty arrays (TVM's own check failed
        # later with "Mismatched p0.strides", an ExecutionError that blamed nothing)
        raise InputError(
            f"input {sig.name!r}: expected shape {sig.describe()} with every extent at least 1,"
            f" got the empty array {value.shape}"
        )
    return np.ascontiguousarray(fitted)
