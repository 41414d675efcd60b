"""OpenCV's border rules in Python and NumPy alone (gdp.ops.border builds TF ops on them;
gdp.cv2's hand kernels take them without importing TensorFlow)."""

from __future__ import annotations

import numpy as np

# OpenCV's border codes (cv2.BORDER_*), so ops/ needs no cv2.
BORDER_CONSTANT = 0
BORDER_REPLICATE = 1
BORDER_REFLECT = 2
BORDER_WRAP = 3
BORDER_REFLECT_101 = 4
BORDER_ISOLATED = 16
BORDER_NAMES = {
    BORDER_CONSTANT: "BORDER_CONSTANT",
    BORDER_REPLICATE: "BORDER_REPLICATE",
    BORDER_REFLECT: "BORDER_REFLECT",
    BORDER_WRAP: "BORDER_WRAP",
    BORDER_REFLECT_101: "BORDER_REFLECT_101",
}


def border_index(p: int, length: int, border: int) -> int:
    """cv::borderInterpolate: the source index pixel `p` of an axis of `length` reads; -1 for a
    constant border."""
    if 0 <= p < length:
        return p
    if border == BORDER_REPLICATE:
        return 0 if p < 0 else length - 1
    if border in (BORDER_REFLECT, BORDER_REFLECT_101):
        if length == 1:
            return 0
        delta = 1 if border == BORDER_REFLECT_101 else 0
        while not 0 <= p < length:
            p = -p - 1 + delta if p < 0 else length - 1 - (p - length) - delta
        return p
    if border == BORDER_WRAP:
        return p % length
    if border == BORDER_CONSTANT:
        return -1
    raise ValueError(f"unknown border type {border}")


def axis_map(length: int, before: int, after: int, border: int) -> np.ndarray:
    """int32 source index of each of the before + length + after positions of an axis padded
    by `before` and `after` (-1: the constant border)."""
    first = [border_index(p, length, border) for p in range(-before, 0)]
    last = [border_index(p, length, border) for p in range(length, length + after)]
    own = np.arange(length, dtype=np.int32)
    return np.concatenate([np.array(first, np.int32), own, np.array(last, np.int32)])
