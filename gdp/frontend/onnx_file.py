"""Front end for graphs that are already ONNX: a file path or an `onnx.ModelProto`."""

from __future__ import annotations

import os

import onnx

from gdp.errors import FrontendError
from gdp.frontend.common import default_opset, finalize

# Older opsets convert through onnx's version converter; newer ones are kept as they are as long as
# onnx itself knows them (the backends say what they cannot import).
MIN_OPSET = 11


def from_onnx(source: str | os.PathLike | onnx.ModelProto) -> onnx.ModelProto:
    if isinstance(source, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(source)  # never mutate the caller's graph
        origin = "the ONNX model"
    else:
        path = os.fspath(source)
        origin = f"ONNX file {path!r}"
        try:
            model = onnx.load(path)
        except FileNotFoundError as err:
            raise FrontendError(f"{origin} does not exist") from err
        except Exception as err:  # protobuf raises its own DecodeError family
            raise FrontendError(f"{origin} is not a readable ONNX model: {err}") from err
    opset = default_opset(model)
    if opset < MIN_OPSET:
        try:
            model = onnx.version_converter.convert_version(model, MIN_OPSET)
        except Exception as err:
            raise FrontendError(
                f"{origin} uses opset {opset}; expected >= {MIN_OPSET}, and converting it "
                f"failed: {err}"
            ) from err
    return finalize(model, origin)
