"""What the serving tests share: a preprocessing model (uint8 RGB image of any size -> 224x224
bilinear -> ImageNet mean/std -> CHW float32, built with onnx.helper, no TensorFlow), real
photos at five sizes, and an oracle for the model that does not use gdp (OpenCV + NumPy)."""

from __future__ import annotations

import cv2
import numpy as np
import onnx
import skimage.data
from onnx import TensorProto, helper

SIZE = 224
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)
# (height, width): odd, small, landscape, portrait, 720p
SIZES = [(97, 131), (240, 320), (480, 640), (600, 400), (720, 1280)]
SOURCES = ["astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry"]


def preprocess_graph() -> onnx.ModelProto:
    image = helper.make_tensor_value_info("image", TensorProto.UINT8, ["h", "w", 3])
    out = helper.make_tensor_value_info("tensor", TensorProto.FLOAT, [3, SIZE, SIZE])
    consts = [
        helper.make_tensor("sizes", TensorProto.INT64, [4], [1, 3, SIZE, SIZE]),
        helper.make_tensor("scale", TensorProto.FLOAT, [3, 1, 1], (1 / (255 * STD)).tolist()),
        helper.make_tensor("shift", TensorProto.FLOAT, [3, 1, 1], (-MEAN / STD).tolist()),
        helper.make_tensor("axis0", TensorProto.INT64, [1], [0]),
    ]
    nodes = [
        helper.make_node("Cast", ["image"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["f", "axis0"], ["nhwc"]),
        helper.make_node("Transpose", ["nhwc"], ["nchw"], perm=[0, 3, 1, 2]),
        helper.make_node(
            "Resize",
            ["nchw", "", "", "sizes"],
            ["resized"],
            mode="linear",
            coordinate_transformation_mode="half_pixel",
        ),
        helper.make_node("Squeeze", ["resized", "axis0"], ["chw"]),
        helper.make_node("Mul", ["chw", "scale"], ["scaled"]),
        helper.make_node("Add", ["scaled", "shift"], ["tensor"]),
    ]
    graph = helper.make_graph(nodes, "preprocess", [image], [out], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def reference(rgb: np.ndarray) -> np.ndarray:
    """The model's arithmetic in OpenCV + NumPy: float bilinear resize (half-pixel centres, no
    antialiasing, as ONNX's Resize), then mean/std and CHW."""
    x = cv2.resize(rgb.astype(np.float32), (SIZE, SIZE), interpolation=cv2.INTER_LINEAR)
    return np.ascontiguousarray(((x / 255.0 - MEAN) / STD).transpose(2, 0, 1))


# OpenCV's float bilinear weights differ from ONNX's in the last bits (samples/dnn_resize.py).
REFERENCE_ATOL = 5e-4


def photos() -> list[np.ndarray]:
    """Five real photos (scikit-image's), uint8 RGB, one at each of SIZES."""
    return [
        np.ascontiguousarray(
            cv2.resize(getattr(skimage.data, name)(), (w, h), interpolation=cv2.INTER_AREA)
        )
        for name, (h, w) in zip(SOURCES, SIZES, strict=True)
    ]


def encode(rgb: np.ndarray, ext: str = ".jpg") -> bytes:
    ok, data = cv2.imencode(ext, cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    assert ok
    return data.tobytes()


def decode(data: bytes) -> np.ndarray:
    """What a client holds for an encoded image: OpenCV's decode, as RGB."""
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
