"""The independent oracle for graphs: onnxruntime's CPU provider runs an ONNX model as written."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort


def run_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """`model`'s outputs, in graph order, for `feeds` (input name -> array)."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)
