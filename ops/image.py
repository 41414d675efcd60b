"""Image ops as TF functions over HWC tensors (any leading batch dims), with OpenCV's conventions
(kernels, borders, colour weights), so graphs built from them agree with OpenCV. They import
nothing of gdp.

Filters are written in stencil form, a weighted sum of shifted views of the padded image, as
OpenCV computes them for small kernels: every op is elementwise, so a backend fuses the padding,
all taps and whatever follows into one kernel, and the weights are constants of the expression
rather than a weight tensor. Rank-1 kernels (Gaussian) run as a row pass and a column pass, as
cv2.sepFilter2D does. (The depthwise-convolution form, which an NPU prefers, is a rewrite's job.)
"""

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


def _pad_reflect_101(image: tf.Tensor, rows: int, cols: int) -> tf.Tensor:
    """OpenCV's default border (BORDER_REFLECT_101: ...cb|abcd|cb...), which is TF's REFLECT."""
    if rows == 0 and cols == 0:
        return image
    leading = [[0, 0]] * (image.shape.rank - 3)
    return tf.pad(image, [*leading, [rows, rows], [cols, cols], [0, 0]], mode="REFLECT")


def _shifted(padded: tf.Tensor, dy: int, dx: int, pad_rows: int, pad_cols: int) -> tf.Tensor:
    """The view of `padded` that lines up with the unpadded image moved by (dy, dx)."""
    row_end = dy - 2 * pad_rows or None  # negative ends keep unknown sizes working
    col_end = dx - 2 * pad_cols or None
    return padded[..., dy:row_end, dx:col_end, :]


def _weighted_sum(terms: list[tuple[tf.Tensor, float]]) -> tf.Tensor:
    total = None
    for view, weight in terms:
        if weight == 0:
            continue
        term = view if weight == 1 else view * np.float32(weight)
        total = term if total is None else total + term
    if total is None:  # an all-zero kernel
        return tf.zeros_like(terms[0][0])
    return total


def filter2d(image: tf.Tensor, kernel: np.ndarray) -> tf.Tensor:
    """cv2.filter2D(image, -1, kernel) for float images: correlate every channel with the same
    2-D kernel, anchor at the centre, BORDER_REFLECT_101, output the same size."""
    kernel = np.asarray(kernel, np.float32)
    kh, kw = kernel.shape
    padded = _pad_reflect_101(image, kh // 2, kw // 2)
    return _weighted_sum(
        [
            (_shifted(padded, dy, dx, kh // 2, kw // 2), float(kernel[dy, dx]))
            for dy in range(kh)
            for dx in range(kw)
        ]
    )


def sep_filter2d(image: tf.Tensor, kernel_x: np.ndarray, kernel_y: np.ndarray) -> tf.Tensor:
    """cv2.sepFilter2D(image, -1, kernel_x, kernel_y) for float images: extrapolate the border
    (BORDER_REFLECT_101), a row pass with `kernel_x` over every padded row, then a column pass
    with `kernel_y`, as OpenCV's separable filter engine runs."""
    kx = np.asarray(kernel_x, np.float32).ravel()
    ky = np.asarray(kernel_y, np.float32).ravel()
    rx, ry = len(kx) // 2, len(ky) // 2
    padded = _pad_reflect_101(image, ry, rx)
    rows = _weighted_sum([(_shifted(padded, 0, dx, 0, rx), w) for dx, w in enumerate(kx)])
    return _weighted_sum([(_shifted(rows, dy, 0, ry, 0), w) for dy, w in enumerate(ky)])


def gaussian_blur(image: tf.Tensor, ksize: int = 5, sigma: float = 0.0) -> tf.Tensor:
    """cv2.GaussianBlur(image, (ksize, ksize), sigma) for float images."""
    g = gaussian_kernel_1d(ksize, sigma)
    return sep_filter2d(image, g, g)


def rgb_to_gray(image: tf.Tensor) -> tf.Tensor:
    """HWC RGB float -> HW1 gray, cv2.cvtColor(COLOR_RGB2GRAY)'s weights (an explicit weighted
    sum of the three channels: elementwise, so it fuses with what follows)."""
    r, g, b = (image[..., c : c + 1] for c in range(3))
    wr, wg, wb = (np.float32(w) for w in GRAY_WEIGHTS_RGB)
    return r * wr + g * wg + b * wb


def laplacian(image: tf.Tensor) -> tf.Tensor:
    """cv2.Laplacian(image, CV_32F) (ksize=1: the 3x3 four-neighbour kernel)."""
    return filter2d(image, LAPLACIAN_3X3)
