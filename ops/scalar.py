"""OpenCV's Scalar arguments in NumPy alone: gdp.cv2's hand kernels take them without importing
TensorFlow, and gdp.ops' graphs take the same values."""

from __future__ import annotations

import functools

import numpy as np


def saturated_scalar(value, channels: int, dtype) -> np.ndarray:
    """OpenCV's Scalar `value` as one number per channel of `dtype` (missing ones 0: cv2's
    `value=9` on a BGR image is (9, 0, 0)), converted by saturate_cast (rounded half to even
    and clamped, for integers). NumPy only: gdp.cv2's hand kernels take it without TF."""
    opencv_scalar = [*np.ravel(value).tolist(), 0.0, 0.0, 0.0, 0.0][:4]
    scalar = np.array((opencv_scalar + [0.0] * channels)[:channels])
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        scalar = np.clip(np.rint(scalar), info.min, info.max)
    return scalar.astype(dtype)


@functools.lru_cache(maxsize=64)
def saturated_values(value: tuple, channels: int, dtype: np.dtype) -> tuple:
    """saturated_scalar of a Scalar given as a tuple, as Python numbers, kept for the calls'
    last values (a hand kernel's constant border: computing it cost a call about 8 us)."""
    return tuple(saturated_scalar(value, channels, dtype).tolist())
