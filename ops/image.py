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

from gdp.ops import border as B
from gdp.ops.color_tables import GRAY_FIXED_RGB, GRAY_FIXED_SHIFT

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


def _spatial_axes(image: tf.Tensor, channels_last: bool) -> tuple[int, int]:
    """The (row, column) axes: the two before the channels (HWC) or the last two (HW)."""
    rank = image.shape.rank
    return (rank - 3, rank - 2) if channels_last else (rank - 2, rank - 1)


def _pad(image: tf.Tensor, rows: int, cols: int, mode: str, channels_last: bool) -> tf.Tensor:
    """Pad the two spatial axes; OpenCV's default border (BORDER_REFLECT_101, ...cb|abcd|cb...)
    is TF's REFLECT."""
    if rows == 0 and cols == 0:
        return image
    row_axis, col_axis = _spatial_axes(image, channels_last)
    paddings = [[0, 0]] * image.shape.rank
    paddings[row_axis], paddings[col_axis] = [rows, rows], [cols, cols]
    return tf.pad(image, paddings, mode=mode)


def _shifted(
    padded: tf.Tensor, dy: int, dx: int, kh: int, kw: int, channels_last: bool
) -> tf.Tensor:
    """The view of `padded` at offset (dy, dx) that a (kh, kw) window leaves: `padded` less
    kh - 1 rows and kw - 1 columns. Negative ends keep unknown sizes working."""
    index = [slice(None)] * padded.shape.rank
    row_axis, col_axis = _spatial_axes(padded, channels_last)
    index[row_axis] = B.window(dy, kh)
    index[col_axis] = B.window(dx, kw)
    return padded[tuple(index)]


def correlate(padded: tf.Tensor, kernel: np.ndarray, channels_last: bool) -> tf.Tensor:
    """sum of kernel[dy, dx] * (`padded` shifted by (dy, dx)) over the non-zero taps: the
    stencil form, every op elementwise, the weights constants of the expression (integers for
    integer images, so integer filters stay exact)."""
    kernel = np.asarray(kernel)
    kh, kw = kernel.shape
    total = None
    for dy in range(kh):
        for dx in range(kw):
            weight = kernel[dy, dx]
            if weight == 0:
                continue
            view = _shifted(padded, dy, dx, kh, kw, channels_last)
            weight = int(weight) if view.dtype.is_integer else float(weight)
            term = view if weight == 1 else view * weight
            total = term if total is None else total + term
    if total is None:  # an all-zero kernel
        return tf.zeros_like(_shifted(padded, 0, 0, kh, kw, channels_last))
    return total


def filter2d(image: tf.Tensor, kernel: np.ndarray) -> tf.Tensor:
    """cv2.filter2D(image, -1, kernel) for float images: correlate every channel with the same
    2-D kernel, anchor at the centre, BORDER_REFLECT_101, output the same size."""
    kernel = np.asarray(kernel, np.float32)
    kh, kw = kernel.shape
    return correlate(_pad(image, kh // 2, kw // 2, "REFLECT", True), kernel, True)


def sep_filter2d(image: tf.Tensor, kernel_x: np.ndarray, kernel_y: np.ndarray) -> tf.Tensor:
    """cv2.sepFilter2D(image, -1, kernel_x, kernel_y) for float images: extrapolate the border
    (BORDER_REFLECT_101), a row pass with `kernel_x` over every padded row, then a column pass
    with `kernel_y`, as OpenCV's separable filter engine runs."""
    kx = np.asarray(kernel_x, np.float32).ravel()
    ky = np.asarray(kernel_y, np.float32).ravel()
    padded = _pad(image, len(ky) // 2, len(kx) // 2, "REFLECT", True)
    return correlate(correlate(padded, kx[None, :], True), ky[:, None], True)


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


# --- uint8 paths that reproduce OpenCV bit for bit (integer arithmetic throughout) -----------


def rgb_to_gray_u8(image: tf.Tensor) -> tf.Tensor:
    """cv2.cvtColor(uint8 RGB, COLOR_RGB2GRAY), exactly: HWC uint8 -> HW int32 in [0, 255]."""
    weighted = tf.reduce_sum(tf.cast(image, tf.int32) * np.array(GRAY_FIXED_RGB, np.int32), -1)
    return (weighted + (1 << (GRAY_FIXED_SHIFT - 1))) // (1 << GRAY_FIXED_SHIFT)


def gaussian_blur_u8(gray: tf.Tensor, ksize: int = 5) -> tf.Tensor:
    """cv2.GaussianBlur(uint8 gray, (ksize, ksize), 0), bit-exact: OpenCV blurs 8-bit images in
    fixed point with the integer kernel 2^8 * getGaussianKernel (exact for ksize 3 and 5) and
    rounds half up. HW int32 in [0, 255] -> HW int32 in [0, 255]."""
    if ksize not in (3, 5):
        raise ValueError(f"ksize: expected 3 or 5 for the bit-exact uint8 path, got {ksize}")
    g = np.rint(gaussian_kernel_1d(ksize) * 16).astype(np.int64)  # [1 2 1] or [1 4 6 4 1]
    r = ksize // 2
    # Both borders first, then the row pass over every padded row (see sep_filter2d).
    total = correlate(
        correlate(_pad(gray, r, r, "REFLECT", False), g[None, :], False), g[:, None], False
    )
    scale = int(g.sum()) ** 2
    return (total + scale // 2) // scale


SOBEL_X_3X3 = np.array([[-1, 0, 1], [-2, 0, 2], [-1, 0, 1]])


def _pad_replicate_1(image: tf.Tensor) -> tf.Tensor:
    """A one-pixel BORDER_REPLICATE border around a 2-D image, by concatenating its edge rows
    and columns (tf.pad has no edge mode; tf2onnx turns SYMMETRIC into a data-dependent gather
    that loses static shapes)."""
    rows = tf.concat([image[..., :1, :], image, image[..., -1:, :]], axis=-2)
    return tf.concat([rows[..., :1], rows, rows[..., -1:]], axis=-1)


def sobel_3x3(gray: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """(dx, dy) of cv2.Sobel(gray, CV_16S, 1, 0 / 0, 1, ksize=3, borderType=BORDER_REPLICATE) as
    int32, the border cv2.Canny uses."""
    padded = _pad_replicate_1(gray)
    return correlate(padded, SOBEL_X_3X3, False), correlate(padded, SOBEL_X_3X3.T, False)


# Canny's direction test in OpenCV's fixed point: tan(22.5 deg) * 2^15 (imgproc/src/canny.cpp).
CANNY_TG22 = 13573
CANNY_SHIFT = 15


def canny_thresholds(low: float, high: float, l2_gradient: bool) -> tuple[int, int]:
    """The integer thresholds cv2.Canny compares magnitudes with."""
    if low > high:
        low, high = high, low
    if l2_gradient:
        low, high = min(32767.0, low), min(32767.0, high)
        low, high = (t * t if t > 0 else t for t in (low, high))
    return int(np.floor(low)), int(np.floor(high))


def canny_candidates(
    dx: tf.Tensor,
    dy: tf.Tensor,
    low: int,
    high: int,
    l2_gradient: bool = False,
    magnitude: tf.Tensor | None = None,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Non-maximum suppression with OpenCV's direction rule and the double threshold.

    Returns (candidates, strong) as uint8 0/1 maps: candidates are local maxima along the
    gradient direction with magnitude above `low` (the pixels hysteresis may reach), strong the
    candidates above `high` (where it starts). Magnitudes outside the image count as 0.
    `magnitude`, where the caller has it, is dx, dy's (L1 or L2 as `l2_gradient`)."""
    if magnitude is not None:
        mag = magnitude
    else:
        mag = dx * dx + dy * dy if l2_gradient else tf.abs(dx) + tf.abs(dy)
    if mag.shape.rank == 2 and None in mag.shape:
        # A magnitude of run-time size: TVM's importer takes a Pad only of extents it knows as
        # expressions, which a stencil's sum of slices is not (yet): gdp.ops.border's slices.
        padded = B.pad_any_size(mag, 1, 1, 1, 1, B.BORDER_CONSTANT)
    else:
        padded = _pad(mag, 1, 1, "CONSTANT", False)

    def at(oy: int, ox: int) -> tf.Tensor:
        return _shifted(padded, 1 + oy, 1 + ox, 3, 3, False)

    ax = tf.abs(dx)
    ay = tf.abs(dy) * (1 << CANNY_SHIFT)
    tg22x = ax * CANNY_TG22
    tg67x = tg22x + ax * (1 << (CANNY_SHIFT + 1))
    horizontal = ay < tg22x
    vertical = ay > tg67x
    # Diagonal neighbours: (up-left, down-right) when dx and dy have the same sign, else
    # (up-right, down-left) -- OpenCV's s = (dx ^ dy) < 0 ? -1 : 1.
    # (Compared as integers: TVM's LLVM codegen emits a float compare for bool == bool.)
    same_sign = tf.equal(tf.cast(dx < 0, tf.int32), tf.cast(dy < 0, tf.int32))
    left, right, up, down = at(0, -1), at(0, 1), at(-1, 0), at(1, 0)
    up_diag = tf.where(same_sign, at(-1, -1), at(-1, 1))
    down_diag = tf.where(same_sign, at(1, 1), at(1, -1))
    local_max = tf.where(
        horizontal,
        (mag > left) & (mag >= right),
        tf.where(vertical, (mag > up) & (mag >= down), (mag > up_diag) & (mag > down_diag)),
    )
    candidates = local_max & (mag > low)
    strong = candidates & (mag > high)
    return tf.cast(candidates, tf.uint8), tf.cast(strong, tf.uint8)


def hysteresis_step(candidates: tf.Tensor, strong: tf.Tensor, steps: int = 1) -> tf.Tensor:
    """`steps` rounds of hysteresis: every candidate 8-connected to a strong pixel becomes
    strong. Repeated until nothing changes, it is Canny's edge tracking (uint8 0/1 maps): the
    dense form, for a program that must hold hysteresis as a graph (gdp.cv2.Canny and
    samples/canny.py run gdp.runtime.hysteresis's serial flood fill instead).

    Both maps are padded with zeros once, `steps` pixels deep (no pixel outside the image is a
    candidate), and each round works on a region one pixel smaller on every side than the last:
    after `steps` rounds it is the image again. All reads stay plain shifts, which lets a
    backend compute all rounds strip by strip in cache."""
    strong = _pad(strong, steps, steps, "CONSTANT", False)
    candidates = _pad(candidates, steps, steps, "CONSTANT", False)
    for step in range(1, steps + 1):
        grown = None
        for oy in range(3):
            for ox in range(3):
                view = _shifted(strong, oy, ox, 3, 3, False)
                grown = view if grown is None else grown + view
        # The 0/1 maps' neighbourhood max as a sum (at most 9) shifted down by 4 bits: all
        # elementwise uint8 arithmetic, which a backend fuses into one kernel for every round
        # and vectorises in 32-lane bytes (TVM imports ONNX Max as a stack and a reduction, and
        # tf2onnx compares uint8 in float).
        reached = tf.bitwise.right_shift(grown + 15, 4)
        strong = reached * candidates[..., step:-step, step:-step]
    return strong
