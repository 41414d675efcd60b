"""Front ends: everything a user hands to `gdp.compile` becomes one ONNX graph here."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import onnx

from gdp.errors import FrontendError
from gdp.frontend.common import OPSET, finalize
from gdp.frontend.onnx_file import from_onnx
from gdp.frontend.te import from_te
from gdp.frontend.tensorflow import from_keras, from_tf_function, is_keras_tensor

__all__ = [
    "OPSET",
    "finalize",
    "from_keras",
    "from_onnx",
    "from_te",
    "from_tf_function",
    "to_onnx",
]


def to_onnx(
    program: Any,
    outputs: Sequence | Mapping | None = None,
    *,
    input_signature: Sequence | None = None,
    opset: int | None = None,
) -> onnx.ModelProto:
    """Dispatch on what `program` is: ONNX (file or proto), Keras inputs, or a (tf.)function."""
    if opset is not None and not 11 <= opset <= 18:
        raise FrontendError(f"opset: expected 11..18 (tf2onnx's range), got {opset}")
    if isinstance(program, onnx.ModelProto | str | os.PathLike):
        _no_extra("an ONNX model", outputs=outputs, input_signature=input_signature)
        return from_onnx(program)
    if isinstance(program, Sequence) and program and all(is_keras_tensor(t) for t in program):
        if outputs is None:
            raise FrontendError("Keras inputs given without outputs: gdp.compile([a, b], [c])")
        _no_extra("Keras inputs", input_signature=input_signature)
        return from_keras(program, outputs, opset or OPSET)
    if is_keras_tensor(program):
        raise FrontendError("inputs: expected a list of Keras tensors, got a single one: use [a]")
    if callable(program):
        _no_extra("a function", outputs=outputs)
        return from_tf_function(program, input_signature, opset or OPSET)
    raise FrontendError(
        "gdp.compile takes a tf.function, a function with input_signature=, a list of Keras "
        "inputs with outputs, an ONNX file path or an onnx.ModelProto; "
        f"got {type(program).__name__}"
    )


def _no_extra(what: str, **given: Any) -> None:
    for name, value in given.items():
        if value is not None:
            raise FrontendError(f"{name}= does not apply to {what}; leave it out")
