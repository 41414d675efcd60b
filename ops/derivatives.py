"""OpenCV's derivative kernels in NumPy alone (gdp.ops.filters builds its Sobel on them;
gdp.cv2's hand kernels take them without importing TensorFlow)."""

from __future__ import annotations

import numpy as np


def deriv_kernel(order: int, ksize: int) -> np.ndarray:
    """One axis of cv::getDerivKernels (getSobelKernels): binomial smoothing and `order`
    differences; ksize -1 (FILTER_SCHARR) is Scharr's [3, 10, 3] / [-1, 0, 1]."""
    if ksize == -1:
        return np.array([3.0, 10.0, 3.0]) if order == 0 else np.array([-1.0, 0.0, 1.0])
    if ksize == 1 and order > 0:
        ksize = 3
    if ksize == 1:
        return np.array([1.0])
    if ksize == 3:
        return np.array([[1.0, 2.0, 1.0], [-1.0, 0.0, 1.0], [1.0, -2.0, 1.0]][min(order, 2)])
    kernel = [1] + [0] * ksize
    for _ in range(ksize - order - 1):
        old = kernel[0]
        for j in range(1, ksize + 1):
            new = kernel[j] + kernel[j - 1]
            kernel[j - 1] = old
            old = new
    for _ in range(order):
        old = -kernel[0]
        for j in range(1, ksize + 1):
            new = kernel[j - 1] - kernel[j]
            kernel[j - 1] = old
            old = new
    return np.array(kernel[:ksize], np.float64)
