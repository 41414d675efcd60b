"""OpenCV's Gaussian kernels in NumPy, computed on the host for each call: a Gaussian's sigma is
a run-time input of its program, whose weights are these numbers.

The same arithmetic as gdp.ops.filters's gaussian_kernel, gaussian_kernel_fixed and
gaussian_ksize (tests/gdp/cv2/test_program_reuse.py holds the two equal); kept here because
gdp.ops imports TensorFlow, which a call on an already compiled program must not need."""

from __future__ import annotations

import functools
import math

import numpy as np

# Past these many taps a filter runs as loops over its taps (gdp.ops.filters' STENCIL_TAPS and
# STENCIL_TAPS_2D, the same numbers: tests/gdp/cv2/test_large_kernels.py holds them equal):
# one axis of a separable filter, and a 2-D kernel. The loops need static image sizes.
LOOP_TAPS = 15
LOOP_TAPS_2D = 25
# The longest axis of a separable filter whose program serves every image size: the loops need
# static sizes, so a program for any size keeps the taps unrolled up to here (a 31x31 Gaussian on
# uint8 compiles in under 10 s and runs 3x faster than its per-size loops; the loops compiled
# again, about 0.8 s, for every new size).
FREE_TAPS = 31

# cv::getGaussianKernel's tables for sigma <= 0 and ksize <= 9 (imgproc/src/smooth.dispatch.cpp).
_SMALL_GAUSSIAN = {
    1: [1.0],
    3: [0.25, 0.5, 0.25],
    5: [0.0625, 0.25, 0.375, 0.25, 0.0625],
    7: [0.03125, 0.109375, 0.21875, 0.28125, 0.21875, 0.109375, 0.03125],
    9: [v / 256 for v in (4, 13, 30, 51, 60, 51, 30, 13, 4)],
}


def gaussian_kernel(n: int, sigma: float) -> np.ndarray:
    """cv::getGaussianKernel(n, sigma) in float64 (the bit-exact variant's values)."""
    if sigma <= 0 and n in _SMALL_GAUSSIAN:
        return np.array(_SMALL_GAUSSIAN[n])
    sigma = sigma if sigma > 0 else 0.15 * n + 0.35  # ((n - 1) * 0.5 - 1) * 0.3 + 0.8
    half = (n - 1) // 2
    scale = -0.125 / (sigma * sigma)
    values = [math.exp(float((2 * i + 1 - n) ** 2) * scale) for i in range(half)]
    total = 2 * sum(values) + 1.0 + (1.0 if n % 2 == 0 else 0.0)
    kernel = np.empty(n)
    for i, v in enumerate(values):
        kernel[i] = kernel[n - 1 - i] = v / total
    kernel[half] = 1.0 / total
    if n % 2 == 0:
        kernel[half + 1] = kernel[half]
    return kernel


def gaussian_kernel_fixed(n: int, sigma: float, fraction_bits: int = 8) -> np.ndarray:
    """The integer kernel (sum 2^fraction_bits) of OpenCV's bit-exact Gaussian: values rounded
    with error diffusion from the outside in, the centre taking the remainder."""
    kernel = gaussian_kernel(n, sigma)
    one = 1 << fraction_bits
    out = np.zeros(n, np.int64)
    err = 0.0
    total = 0
    for i in range(n // 2):
        adjusted = kernel[i] * one + err
        v = int(np.rint(adjusted))
        err = adjusted - v
        out[i] = out[n - 1 - i] = v
        total += v
    out[n // 2] = one - 2 * total
    return out


def gaussian_ksize(sigma: float, dtype: np.dtype) -> int:
    """OpenCV's kernel size for ksize 0: 3 sigma each side for uint8, 4 for the rest."""
    radius = 3 if np.dtype(dtype) == np.uint8 else 4
    return (int(round(sigma * radius * 2 + 1)) | 1) if sigma > 0 else 1


@functools.lru_cache(maxsize=256)
def gaussian_weights(n: int, sigma: float, dtype: np.dtype) -> tuple[float, ...]:
    """The weights gdp.ops.filters.gaussian_blur uses for an image of `dtype`, as float64:
    8-bit fixed point for uint8, 16-bit for uint16, else the kernel rounded to the dtype.
    Kept per (n, sigma, dtype), as a tuple (shared: immutable): computing them cost a 5x5
    GaussianBlur about 10 us a call, a fifth of a 480p gray one's time."""
    dtype = np.dtype(dtype)
    if dtype == np.uint8:
        weights = gaussian_kernel_fixed(n, sigma)
    elif dtype == np.uint16:
        weights = gaussian_kernel_fixed(n, sigma, 16)
    else:
        weights = gaussian_kernel(n, sigma).astype(dtype)
    return tuple(weights.astype(np.float64).tolist())
