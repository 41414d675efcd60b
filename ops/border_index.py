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


def padded_maps(
    shape: tuple[int, int], channels: int, kernel: tuple[int, int], anchor, border: int
) -> tuple[np.ndarray, np.ndarray]:
    """For an (h, w) image of `channels` interleaved values and a (kh, kw) kernel at `anchor`
    (x, y): the image row each padded row reads, and the image value each padded row's value
    reads (int32, -1: the constant border's zeros), as a filter's taps read them."""
    (h, w), (kh, kw), (ax, ay) = shape, kernel, anchor
    rows = axis_map(h, ay, kh - 1 - ay, border)
    cols = axis_map(w, ax, kw - 1 - ax, border)[:, None]
    values = np.where(cols < 0, -1, cols * channels + np.arange(channels, dtype=np.int32))
    return rows, values.reshape(-1).astype(np.int32)
