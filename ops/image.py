"""Image ops as TF functions over HWC / NHWC tensors, with OpenCV's conventions (kernels, borders,
colour weights), so graphs built from them agree with OpenCV. They import nothing of gdp."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

# OpenCV's fixed kernels for getGaussianKernel(ksize, sigma <= 0) (imgproc/src/smooth.dispatch.cpp)
_SMALL_GAUSSIAN = {
    1: [1.0],
    3: [0.25, 0.5, 0.25],
    5: [0.0625, 0.25, 0.375, 0.25, 0.0625],
    7: [0.03125, 0.109375, 0.21875, 0.28125, 0.21875, 0.109375, 0.03125],
}

# ITU-R BT.601 luma, as cv2.cvtColor(..., COLOR_RGB2GRAY) uses.
GRAY_WEIGHTS_RGB = (0.299, 0.587, 0.114)

# cv2.Laplacian with ksize=1: the 3x3 four-neighbour kernel.
LAPLACIAN_3X3 = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.float32)


def gaussian_kernel_1d(ksize: int, sigma: float = 0.0) -> np.ndarray:
    """cv2.getGaussianKernel(ksize, sigma) as float32."""
    if ksize < 1 or ksize % 2 == 0:
        raise ValueError(f"ksize: expected a positive odd number, got {ksize}")
    if sigma <= 0 and ksize in _SMALL_GAUSSIAN:
        return np.array(_SMALL_GAUSSIAN[ksize], np.float32)
    if sigma <= 0:
        sigma = 0.3 * ((ksize - 1) * 0.5 - 1) + 0.8
    x = np.arange(ksize, dtype=np.float64) - (ksize - 1) / 2
    g = np.exp(-(x**2) / (2 * sigma**2))
    return (g / g.sum()).astype(np.float32)


def filter2d(image: tf.Tensor, kernel: np.ndarray) -> tf.Tensor:
    """Correlate every channel of an HWC image with a 2-D kernel, OpenCV's default border
    (BORDER_REFLECT_101, which is TF's REFLECT), output the same size (cv2.filter2D)."""
    kh, kw = kernel.shape
    channels = image.shape[-1]
    padded = tf.pad(
        image[None], [[0, 0], [kh // 2, kh // 2], [kw // 2, kw // 2], [0, 0]], mode="REFLECT"
    )
    weights = np.repeat(kernel.astype(np.float32)[:, :, None, None], channels, axis=2)
    return tf.nn.depthwise_conv2d(padded, weights, [1, 1, 1, 1], "VALID")[0]


def gaussian_blur(image: tf.Tensor, ksize: int = 5, sigma: float = 0.0) -> tf.Tensor:
    """cv2.GaussianBlur(image, (ksize, ksize), sigma) for float images."""
    g = gaussian_kernel_1d(ksize, sigma)
    return filter2d(image, np.outer(g, g))


def rgb_to_gray(image: tf.Tensor) -> tf.Tensor:
    """HWC RGB float -> HW1 gray, cv2.cvtColor(COLOR_RGB2GRAY)'s weights."""
    return tf.reduce_sum(image * np.array(GRAY_WEIGHTS_RGB, np.float32), axis=-1, keepdims=True)


def laplacian(image: tf.Tensor) -> tf.Tensor:
    """cv2.Laplacian(image, CV_32F) (ksize=1: the 3x3 four-neighbour kernel)."""
    return filter2d(image, LAPLACIAN_3X3)
