"""The inputs and outputs of an ONNX graph as names, dtypes and shapes (None for a free dim)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx


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
