"""OpenCV's linear filters as TF ops, with OpenCV's kernels, borders and roundings.

Every filter pads with ops/border.py (OpenCV's exact borders) and sums shifted views, so it is
elementwise arithmetic a backend fuses into one kernel. uint8 Gaussian blur is OpenCV's
bit-exact fixed point: 8-fraction-bit kernels, exact integer sums, one rounding at the end.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from gdp.ops import border as B
from gdp.ops.derivatives import deriv_kernel
from gdp.ops.image import correlate
from gdp.ops.sorting_network import INF, SORT5, batcher_pairs, inputs, merged, network

# cv::getGaussianKernel's tables for sigma <= 0 and ksize <= 9 (imgproc/src/smooth.dispatch.cpp).
_SMALL_GAUSSIAN = {
    1: [1.0],
    3: [0.25, 0.5, 0.25],
    5: [0.0625, 0.25, 0.375, 0.25, 0.0625],
    7: [0.03125, 0.109375, 0.21875, 0.28125, 0.21875, 0.109375, 0.03125],
    9: [v / 256 for v in (4, 13, 30, 51, 60, 51, 30, 13, 4)],
}


# Above this many taps a stencil is written as a loop (window_rows, window_cols below) rather
# than unrolled: the unrolled expression's compile time grows with its taps.
# One axis of a separable filter (STENCIL_TAPS), a 2-D kernel (STENCIL_TAPS_2D).
STENCIL_TAPS = 15
STENCIL_TAPS_2D = 25


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
    """The integer kernel (sum 2^fraction_bits) OpenCV's bit-exact Gaussian uses: values
    rounded with error diffusion from the outside in, the centre taking the remainder
    (getGaussianKernelFixedPoint_ED)."""
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


def gaussian_ksize(sigma: float, dtype: tf.DType) -> int:
    """OpenCV's kernel size for ksize 0: 3 sigma each side for uint8, 4 for the rest."""
    radius = 3 if dtype == tf.uint8 else 4
    return (int(round(sigma * radius * 2 + 1)) | 1) if sigma > 0 else 1


def taps(padded: tf.Tensor, kernel: np.ndarray, axis: int) -> tf.Tensor:
    """sum of kernel[t] * padded shifted by t along `axis` (0: rows, 1: columns), skipping
    zero taps, a weight of 1 not multiplied. The views are cut from both ends, so the sum is
    written for any length."""
    n = len(kernel)

    def view(t: int) -> tf.Tensor:
        return B.along(padded, axis, B.window(t, n))

    total = None
    for t, weight in enumerate(kernel):
        if weight == 0:
            continue
        term = view(t) if weight == 1 else view(t) * tf.constant(weight, padded.dtype)
        total = term if total is None else total + term
    return total if total is not None else tf.zeros_like(view(0))


def sep_filter(
    image: tf.Tensor,
    kernel_x: np.ndarray,
    kernel_y: np.ndarray,
    anchor: tuple[int, int] = (-1, -1),
    border: int = B.BORDER_REFLECT_101,
    value: float = 0.0,
) -> tf.Tensor:
    """Row pass with kernel_x, then column pass with kernel_y, in the image's dtype (cast it
    first to accumulate wider). anchor (x, y), -1 for the centre."""
    kx, ky = len(kernel_x), len(kernel_y)
    ax = anchor[0] if anchor[0] >= 0 else kx // 2
    ay = anchor[1] if anchor[1] >= 0 else ky // 2
    padded = B.pad(image, ay, ky - 1 - ay, ax, kx - 1 - ax, border, value)
    rows = taps(padded, np.asarray(kernel_x), 1)
    return taps(rows, np.asarray(kernel_y), 0)


def filter_2d(
    image: tf.Tensor,
    kernel: np.ndarray,
    anchor: tuple[int, int] = (-1, -1),
    border: int = B.BORDER_REFLECT_101,
) -> tf.Tensor:
    """Correlation with a 2-D kernel (cv::filter2D), in the image's dtype."""
    kernel = np.asarray(kernel)
    kh, kw = kernel.shape
    ax = anchor[0] if anchor[0] >= 0 else kw // 2
    ay = anchor[1] if anchor[1] >= 0 else kh // 2
    padded = B.pad(image, ay, kh - 1 - ay, ax, kw - 1 - ax, border)
    return correlate(padded, kernel, image.shape.rank == 3)


def saturate(x: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    """cv::saturate_cast from float: round half to even, clamp to the type's range."""
    if dtype.is_floating:
        return tf.cast(x, dtype)
    x = tf.clip_by_value(tf.round(x), dtype.min, dtype.max)
    return tf.cast(x, dtype)


def gaussian_blur(
    image: tf.Tensor,
    ksize: tuple[int, int],
    sigma_x: float,
    sigma_y: float = 0.0,
    border: int = B.BORDER_REFLECT_101,
) -> tf.Tensor:
    """cv::GaussianBlur. uint8 and uint16: OpenCV's bit-exact fixed point (8-bit kernels and
    (v + 2^15) >> 16; 16-bit kernels and (v + 2^31) >> 32). Floats: float64 kernels rounded to
    the image's type."""
    kw, kh = ksize
    sigma_y = sigma_y if sigma_y > 0 else sigma_x
    if kw <= 0:
        kw = gaussian_ksize(sigma_x, image.dtype)
    if kh <= 0:
        kh = gaussian_ksize(sigma_y, image.dtype)
    if image.dtype == tf.uint8:
        kx = gaussian_kernel_fixed(kw, sigma_x).astype(np.int32)
        ky = gaussian_kernel_fixed(kh, sigma_y).astype(np.int32)
        total = sep_filter(tf.cast(image, tf.int32), kx, ky, border=border)
        return tf.cast(tf.bitwise.right_shift(total + (1 << 15), 16), tf.uint8)
    if image.dtype == tf.uint16:
        # OpenCV's ufixedpoint32 path: 16-bit kernels, exact sums (a row sum is below 2^32,
        # a column sum below 2^48: int64 holds both), one rounding (v + 2^31) >> 32.
        kx = gaussian_kernel_fixed(kw, sigma_x, 16)
        ky = gaussian_kernel_fixed(kh, sigma_y, 16)
        total = sep_filter(tf.cast(image, tf.int64), kx, ky, border=border)
        # (v + 2^31) >> 32 as a floor division: the sums are non-negative, and tf2onnx cannot
        # convert a right shift of int64.
        return tf.cast(tf.math.floordiv(total + (1 << 31), 1 << 32), tf.uint16)
    np_dtype = image.dtype.as_numpy_dtype
    kx = gaussian_kernel(kw, sigma_x).astype(np_dtype)
    ky = gaussian_kernel(kh, sigma_y).astype(np_dtype)
    return sep_filter(image, kx, ky, border=border)


def box_kernel(n: int) -> np.ndarray:
    return np.ones(n)


def morphology(
    image: tf.Tensor,
    kernel: np.ndarray,
    anchor: tuple[int, int],
    dilate: bool,
    border: int,
    border_value,
    stacked: bool = False,
) -> tf.Tensor:
    """cv::erode / cv::dilate, one iteration: min (max) over the kernel's non-zero taps.
    border_value is OpenCV's Scalar (a number is (v, 0, 0, 0): the other channels' border is
    0); None is OpenCV's morphologyDefaultBorderValue: outside pixels never win. `stacked`:
    the image is another morphology's result, padded by gathers where its size is free
    (B.pad_any_size: as slices, TVM took minutes to compile an opening)."""
    kernel = np.asarray(kernel)
    kh, kw = kernel.shape
    ax = anchor[0] if anchor[0] >= 0 else kw // 2
    ay = anchor[1] if anchor[1] >= 0 else kh // 2
    if border_value is None and (border & ~B.BORDER_ISOLATED) == B.BORDER_CONSTANT:
        dtype = image.dtype
        if dtype.is_floating:  # OpenCV's FLT_MAX (DBL_MAX), not an infinity
            largest = float(np.finfo(dtype.as_numpy_dtype).max)
            extreme = -largest if dilate else largest
        else:
            extreme = dtype.min if dilate else dtype.max
        border_value = [extreme] * 4
    value = border_value if border_value is not None else 0.0
    padded = B.pad(image, ay, kh - 1 - ay, ax, kw - 1 - ax, border, value, gather=stacked)
    if np.count_nonzero(kernel) > STENCIL_TAPS_2D:
        return morphology_runs(padded, kernel, dilate)
    pick = tf.maximum if dilate else tf.minimum
    offsets = [(dy, dx) for dy in range(kh) for dx in range(kw) if kernel[dy, dx]]
    total = None
    for view in B.shifted_views(padded, kh, kw, offsets):
        total = view if total is None else pick(total, view)
    return total if total is not None else image


class _Wires:
    """Graph ops for wires over `values` (("in", k) is values[k]), each built once."""

    def __init__(self, values: list[tf.Tensor]) -> None:
        self.values = values
        self.built: dict[tuple, tf.Tensor] = {}

    def __call__(self, wire: tuple) -> tf.Tensor:
        if wire not in self.built:
            if wire[0] == "in":
                self.built[wire] = self.values[wire[1]]
            else:
                op = tf.minimum if wire[0] == "min" else tf.maximum
                self.built[wire] = op(self(wire[1]), self(wire[2]))
        return self.built[wire]


def median_select(values: list[tf.Tensor]) -> tf.Tensor:
    """The elementwise median of an odd number of tensors, exact for any dtype: a sorting
    network of min/max, pruned to the ops the middle wire depends on (9 inputs: 40
    min/max, 25 inputs: 202)."""
    n = 1 << (len(values) - 1).bit_length()
    wires = network(inputs(0, len(values)) + [INF] * (n - len(values)), batcher_pairs(0, n - 1))
    return _Wires(values)(wires[len(values) // 2])


def _sort3(a: tf.Tensor, b: tf.Tensor, c: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """(smallest, middle, largest) of three tensors, elementwise: three compare-exchanges."""
    low, high = tf.minimum(a, b), tf.maximum(a, b)
    low2, largest = tf.minimum(high, c), tf.maximum(high, c)
    return tf.minimum(low, low2), tf.maximum(low, low2), largest


def _median3(a: tf.Tensor, b: tf.Tensor, c: tf.Tensor) -> tf.Tensor:
    return tf.maximum(tf.minimum(a, b), tf.minimum(tf.maximum(a, b), c))


def median_3x3(padded: tf.Tensor) -> tf.Tensor:
    """The median of each 3x3 window of a padded image (any size, any dtype with an order),
    exact: each column of three sorted once (every window that holds the column shares it);
    sorting the rows of that column-sorted 3x3 matrix would keep its columns sorted, and the
    median of a matrix sorted both ways is the median of its anti-diagonal: the largest of the
    columns' smallest, the median of their middles, the smallest of their largest. 18 min/max
    a pixel against 40 for a pruned sorting network, and no chain of compare-exchanges deep
    enough to slow the compiler (a generic uint8 median 3 by bits took 28 s to compile)."""
    rows = [B.along(padded, 0, B.window(t, 3)) for t in range(3)]
    columns = _sort3(*rows)  # (low, mid, high) per column, for every window holding it

    def across(plane: tf.Tensor) -> list[tf.Tensor]:
        return [B.along(plane, 1, B.window(t, 3)) for t in range(3)]

    low, mid, high = (across(p) for p in columns)
    largest_low = tf.maximum(tf.maximum(low[0], low[1]), low[2])
    smallest_high = tf.minimum(tf.minimum(high[0], high[1]), high[2])
    return _median3(largest_low, _median3(*mid), smallest_high)


def median_5x5(padded: tf.Tensor) -> tf.Tensor:
    """The median of each 5x5 window of a padded image (any size, any dtype with an order),
    exact, in 116 min/max a pixel (a pruned sorting network of the 25 taps: 202):
    1. each column of five sorted (9 comparators), stored: every window holding it shares it;
    2. the window's pairs of columns at x and x + 2 each merged into ten sorted values (odd-even
       merge, 26 min/max each), from the sorted columns at shifted positions;
    3. ranks 7-12 of those two pairs merged (36 min/max): the median's rank, 12, among the
       window's first four columns and its fifth is one of these;
    4. the 12th of 25 from those and the fifth column: the smallest over i of
       max(quad[7 + i], fifth[4 - i]), and quad[12] (10 min/max).
    Only the sorted columns are stored (stored pairs too made ten more planes of memory traffic:
    a 480x640 float32 median 7.1 ms, against 3.3 recomputed), and no chain of compare-exchanges
    is deep enough to slow the compiler."""
    rows = [B.along(padded, 0, B.window(t, 5)) for t in range(5)]
    columns = _Wires(rows)
    sorted_columns = [columns(w) for w in network(inputs(0, 5), SORT5)]

    def at(planes: list[tf.Tensor], start: int, taps: int) -> list[tf.Tensor]:
        return [B.along(p, 1, B.window(start, taps)) for p in planes]

    # The pairs at x and x + 2 merged from the sorted columns each window reads, then ranks
    # 7-12 of the window's four first columns merged from them.
    pair_wires = merged(inputs(0, 5), inputs(5, 5))
    pairs = [
        _Wires(at(sorted_columns, start, 5) + at(sorted_columns, start + 1, 5)) for start in (0, 2)
    ]
    quad = _Wires([pair(w) for pair in pairs for w in pair_wires])
    quad_wires = merged(inputs(0, 10), inputs(10, 10))
    fifth = at(sorted_columns, 4, 5)
    terms = [quad(quad_wires[12])]
    terms += [tf.maximum(quad(quad_wires[7 + i]), fifth[4 - i]) for i in range(5)]
    median = terms[0]
    for term in terms[1:]:
        median = tf.minimum(median, term)
    return median


def median(image: tf.Tensor, ksize: int, native_16bit: bool = False) -> tf.Tensor:
    """cv::medianBlur (BORDER_REPLICATE, as OpenCV) of any dtype: ksize 3 and 5 by sorted
    columns (median_3x3, median_5x5), larger ones by a sorting network over the ksize x ksize
    shifted views. 16-bit integers are sorted as int32 unless `native_16bit` (a backend with
    16-bit min and max: ONNX Runtime has none, ONNX before opset 12 neither), at half the
    vector lanes."""
    r = ksize // 2
    wide = image.dtype in (tf.uint16, tf.int16) and not native_16bit
    padded = B.pad(image, r, r, r, r, B.BORDER_REPLICATE)
    padded = tf.cast(padded, tf.int32) if wide else padded
    if ksize == 3:
        out = median_3x3(padded)
    elif ksize == 5:
        out = median_5x5(padded)
    else:
        out = median_select(B.shifted_views(padded, ksize, ksize, _square(ksize)))
    return tf.cast(out, image.dtype) if wide else out


def canny_gradients(gray: tf.Tensor, aperture: int) -> tuple[tf.Tensor, tf.Tensor]:
    """(dx, dy) as cv2.Canny computes them (int32 holding int16 values): Sobel of `aperture`
    (3, 5 or 7) to CV_16S with BORDER_REPLICATE; for 7 OpenCV scales by 1/16 (so that the
    sums fit int16), rounding half to even, and divides the thresholds by 16 to match."""
    from gdp.ops import image as ops_image

    gray = tf.cast(gray, tf.int32)
    if aperture == 3:
        return ops_image.sobel_3x3(gray)
    smooth, diff = deriv_kernel(0, aperture), deriv_kernel(1, aperture)
    out = []
    for kx, ky in ((diff, smooth), (smooth, diff)):
        total = sep_filter(
            gray, kx.astype(np.int32), ky.astype(np.int32), border=B.BORDER_REPLICATE
        )
        if aperture == 7:  # sums up to 163200: exact in float32, and so is / 16
            total = tf.cast(tf.round(tf.cast(total, tf.float32) / 16.0), tf.int32)
        out.append(tf.clip_by_value(total, -32768, 32767))
    return out[0], out[1]


def canny_gradients_color(image: tf.Tensor, aperture: int, l2_gradient: bool):
    """cv2.Canny's gradients of a multi-channel image: each channel's Sobel, and at each pixel
    the (dx, dy) of the channel with the largest magnitude (the first such channel on ties, as
    canny.cpp's strict `>` picks it). Returns (dx, dy, magnitude).

    The largest magnitude is a reduction over the channels, which a backend stores: the
    non-maximum suppression reads it at 9 neighbours, and a chain of selections inlined there
    (each channel's Sobel in every comparison) made a colour Canny take minutes to compile."""
    grads = [canny_gradients(image[:, :, c], aperture) for c in range(image.shape[2])]
    mags = [dx * dx + dy * dy if l2_gradient else tf.abs(dx) + tf.abs(dy) for dx, dy in grads]
    best = tf.reduce_max(tf.stack(mags, axis=-1), axis=-1)
    # The first channel reaching the largest magnitude; its dx and dy picked by sums over the
    # channels (reductions too, so the suppression reads stored gradients, not 3 Sobels).
    hits = [tf.equal(m, best) for m in mags]
    first = [hits[0]]
    for c in range(1, len(hits)):
        first.append(hits[c] & ~tf.reduce_any(tf.stack(hits[:c], axis=-1), axis=-1))

    def pick(axis: int) -> tf.Tensor:
        zero = tf.constant(0, best.dtype)
        parts = [tf.where(f, g[axis], zero) for f, g in zip(first, grads, strict=True)]
        return tf.reduce_sum(tf.stack(parts, axis=-1), axis=-1)

    return pick(0), pick(1), best


# -- Large kernels: loops rather than unrolled stencils ------------------------------------------
#
# A stencil of K taps written as K shifted views is one expression of K terms that a backend
# compiles in time growing with K (a 31x31 Gaussian: ~20 s; a 21x21 erosion or a medianBlur's
# bit-by-bit counting: minutes). The ops below state the same sums as a gather of the K
# shifted positions and a reduction over them: one loop of K iterations, whose compile time
# does not depend on K. Sums run over the taps in order, from 0, as the stencils did.


def window_rows(x: tf.Tensor, k: int, weights=None) -> tf.Tensor:
    """out[i] = sum over t < k of weights[t] * x[i + t] along axis 0 (rows): x.shape[0] - k + 1
    rows (static sizes: TVM's importer gives no shape to the index table of a run-time length).
    `weights` (a sequence or a 1-D tensor) None is all ones. The other axes are read as the
    output is, so a backend runs them as vectors inside the taps loop."""
    n = _static(x, 0) - (k - 1)
    index = tf.range(k, dtype=tf.int64)[:, None] + tf.range(n, dtype=tf.int64)[None, :]
    taps = tf.gather(x, index, axis=0)  # [k, n, ...]
    if weights is not None:
        w = tf.cast(tf.convert_to_tensor(weights), x.dtype)
        taps = taps * tf.reshape(w, [k] + [1] * x.shape.rank)
    return tf.reduce_sum(taps, axis=0)


def _static(x: tf.Tensor, axis: int) -> int:
    if x.shape[axis] is None:
        raise ValueError("the loop forms of large kernels need static image sizes")
    return int(x.shape[axis])


def _swap(x: tf.Tensor) -> tf.Tensor:
    return tf.transpose(x, [1, 0, *range(2, x.shape.rank)])


def window_cols(x: tf.Tensor, k: int, weights=None) -> tf.Tensor:
    """window_rows along axis 1 (columns): the image transposed, its rows reduced, transposed
    back (a gather along the columns would leave only the channels to run as vectors)."""
    return _swap(window_rows(_swap(x), k, weights))


def _square(ksize: int) -> list[tuple[int, int]]:
    return [(dy, dx) for dy in range(ksize) for dx in range(ksize)]


def correlate_taps(x: tf.Tensor, kernel: np.ndarray) -> tf.Tensor:
    """The correlation of the padded image `x` (static size) with a 2-D kernel as one loop
    over its non-zero taps: the image transposed (columns outer), its kernel-row shifts
    stacked [kh, W + kw - 1, H, ...] and flattened on the first two axes, so that tap (dy, dx)
    of output column j is row dy * (W + kw - 1) + dx + j: one gather of a [taps, W] index
    table and one weighted sum, the (H, channels) axes read as the output is."""
    kernel = np.asarray(kernel)
    kh, kw = kernel.shape
    hp, wp = _static(x, 0), _static(x, 1)
    h, w = hp - (kh - 1), wp - (kw - 1)
    offsets = [(dy, dx) for dy in range(kh) for dx in range(kw) if kernel[dy, dx] != 0]
    if not offsets:
        return tf.zeros_like(x[:h, :w])
    across = _swap(x)  # [Wp, Hp, ...]
    rows = sorted({dy for dy, _ in offsets})
    stacked = tf.stack([across[:, dy : dy + h] for dy in rows])  # [rows, Wp, H, ...]
    flat = tf.reshape(stacked, [len(rows) * wp, h, *x.shape[2:]])
    slot = {dy: i for i, dy in enumerate(rows)}
    start = np.array([slot[dy] * wp + dx for dy, dx in offsets])
    index = tf.constant((start[:, None] + np.arange(w)[None, :]).astype(np.int64))
    taps = tf.gather(flat, index, axis=0)  # [taps, W, H, ...]
    weights = np.array([kernel[dy, dx] for dy, dx in offsets])
    w_t = tf.constant(weights.astype(x.dtype.as_numpy_dtype))
    total = tf.reduce_sum(taps * tf.reshape(w_t, [len(offsets)] + [1] * x.shape.rank), axis=0)
    return _swap(total)


def row_runs(kernel: np.ndarray) -> list[tuple[int, int, int]]:
    """(dy, x0, width) of each horizontal run of non-zero taps of a 2-D kernel."""
    runs = []
    for dy, row in enumerate(np.asarray(kernel) != 0):
        dx = 0
        while dx < len(row):
            if row[dx]:
                end = dx
                while end < len(row) and row[end]:
                    end += 1
                runs.append((dy, dx, end - dx))
                dx = end
            else:
                dx += 1
    return runs


def morphology_runs(padded: tf.Tensor, kernel: np.ndarray, dilate: bool) -> tf.Tensor:
    """min (max) over a kernel's non-zero taps of the padded image (any size), as a union of
    horizontal runs: the window mins of widths 2, 4, 8, ... along the rows (each the min of two
    of the one before: a sparse table), and each run of width r the min of two of them,
    2^floor(log2 r) wide, at the run's two ends; a full rectangle the same along the columns of
    its row pass. 2 * runs stored views and log2 of the widest run levels, where the taps are
    K; every slice is cut from both ends, so the program serves any image size."""
    kernel = np.asarray(kernel) != 0
    kh, kw = kernel.shape
    pick = tf.maximum if dilate else tf.minimum
    if kernel.all():
        rows = _window_extreme(padded, 1, kw, 0, kw, pick, {}) if kw > 1 else padded
        return _window_extreme(rows, 0, kh, 0, kh, pick, {}) if kh > 1 else rows
    levels: dict[int, tf.Tensor] = {}
    total = None
    for dy, x0, width in row_runs(kernel):
        run = _window_extreme(padded, 1, kw, x0, width, pick, levels)
        view = B.along(run, 0, B.window(dy, kh))
        total = view if total is None else pick(total, view)
    return total


def _window_extreme(x, axis: int, k: int, start: int, width: int, pick, levels: dict):
    """pick over `width` consecutive positions from `start` of each window of a k-tap kernel
    along `axis` of `x` (padded by k - 1 there): the two ends' window extremes of the largest
    power of two not above `width`. `levels` keeps the window extremes of each power of two
    (level p: the extreme of p positions, p - 1 shorter than `x`) for the other runs."""
    levels.setdefault(1, x)

    def level(p: int) -> tf.Tensor:
        if p not in levels:
            half = level(p // 2)
            q = p // 2
            levels[p] = pick(B.along(half, axis, slice(0, -q)), B.along(half, axis, slice(q, None)))
        return levels[p]

    p = 1 << (width.bit_length() - 1)
    # Output position i reads level(p) at start + i and at start + width - p + i; level(p) is
    # k - p positions longer than the output, so each view ends (start + p - k) from its end.
    views = []
    for begin in (start,) if width == p else (start, start + width - p):
        end = begin + p - k
        views.append(B.along(level(p), axis, slice(begin, end if end < 0 else None)))
    return views[0] if len(views) == 1 else pick(*views)
