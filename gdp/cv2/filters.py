"""Filters, gradients and edges: GaussianBlur, blur, boxFilter, sepFilter2D, filter2D,
medianBlur, Sobel, Scharr, Laplacian, erode, dilate, morphologyEx, Canny."""

from __future__ import annotations

import functools
import math

import cv2 as _cv2
import numpy as np

from gdp.cv2 import common, engine, kernels

F = common.LazyModule("gdp.ops.filters")
B = common.LazyModule("gdp.ops.border")
ops_image = common.LazyModule("gdp.ops.image")
rt_separable = common.LazyModule("gdp.runtime.separable")
rt_filter2d = common.LazyModule("gdp.runtime.filter2d")
rt_median = common.LazyModule("gdp.runtime.median")
rt_morph = common.LazyModule("gdp.runtime.morph")
rt_canny = common.LazyModule("gdp.runtime.canny")
rt_hysteresis = common.LazyModule("gdp.runtime.hysteresis")

# The input depths gdp filters (OpenCV takes more: those fall through to OpenCV).
_DEPTHS = {np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.int16)}
_FLOATS = {np.dtype(np.float32), np.dtype(np.float64)}
_CV_DEPTH = {
    _cv2.CV_8U: np.uint8,
    _cv2.CV_16U: np.uint16,
    _cv2.CV_16S: np.int16,
    _cv2.CV_32F: np.float32,
    _cv2.CV_64F: np.float64,
}
_FILTER_BORDERS = (  # gdp.ops.border's codes are OpenCV's
    _cv2.BORDER_CONSTANT,
    _cv2.BORDER_REPLICATE,
    _cv2.BORDER_REFLECT,
    _cv2.BORDER_REFLECT_101,
)


def _border(func: str, border_type: int) -> int:
    base = int(border_type) & ~_cv2.BORDER_ISOLATED
    if base not in _FILTER_BORDERS:
        # OpenCV's filters refuse WRAP, but not everywhere (its bit-exact uint8/uint16
        # Gaussian takes it, a 1x1 box ignores it): OpenCV decides
        name = "BORDER_WRAP" if base == _cv2.BORDER_WRAP else f"border type {border_type}"
        raise common.NotAccelerated(f"{name} is not accelerated")
    return base


def _out_dtype(func: str, src: np.ndarray, ddepth: int) -> np.dtype:
    if ddepth is None or ddepth < 0:
        return common.dtype_of(src)
    if ddepth not in _CV_DEPTH:
        raise common.error(func, f"unsupported ddepth {ddepth}")
    return np.dtype(_CV_DEPTH[ddepth])


# The (source, result) depths OpenCV 5's filter engine refuses ("Unsupported combination of
# source format and destination format"): separable filters (Sobel, Scharr, sepFilter2D, a
# Laplacian of ksize > 3) have no 32S result and no 64F -> 32F; a 2-D kernel (filter2D, a
# Laplacian of ksize 1 or 3) also keeps floats in their own depth and 16-bit images in 16 bits
# or float.
_SEPARABLE_REFUSED = {(src, np.int32) for src in (np.uint8, np.uint16, np.int16, np.float32)} | {
    (np.float64, np.int32),
    (np.float64, np.float32),
}
_2D_REFUSED = _SEPARABLE_REFUSED | {
    (np.uint16, np.uint8),
    (np.uint16, np.int16),
    (np.int16, np.uint8),
    (np.int16, np.uint16),
    *((np.float32, out) for out in (np.uint8, np.uint16, np.int16, np.float64)),
    *((np.float64, out) for out in (np.uint8, np.uint16, np.int16)),
}


# A Sobel's result on the separable kernel, as a dtype (a dtype compared with np.int16 converts
# the type on every call).
_INT16 = np.dtype(np.int16)

# The same as dtype pairs, looked up by hash (a scan converting each type: 3 us a call).
_REFUSED_DTYPES = {
    two_d: frozenset((np.dtype(a), np.dtype(b)) for a, b in refused)
    for two_d, refused in ((False, _SEPARABLE_REFUSED), (True, _2D_REFUSED))
}


def _check_depths(func: str, src_dtype: np.dtype, out: np.dtype, two_d: bool) -> None:
    if (np.dtype(src_dtype), np.dtype(out)) in _REFUSED_DTYPES[two_d]:
        raise common.error(
            func,
            f"Unsupported combination of source format ({src_dtype}) and destination format"
            f" ({out})",
        )


def _linear(src, out_dtype, kernel_x, kernel_y, kernel_2d, anchor, delta, border, scale=1.0):
    """A linear filter as OpenCV computes it: exactly in int32 when the image is an integer
    and the kernel, scale and delta are integers (uint8 -> CV_16S Sobel), else in float32
    (float64 when either end is float64); then saturate to the output type."""
    import tensorflow as tf

    kernels = [k for k in (kernel_x, kernel_y, kernel_2d) if k is not None]
    integral = all(np.array_equal(k, np.round(k)) for k in kernels)
    exact = src.dtype.is_integer and integral and float(scale).is_integer() and float(delta) == 0
    if exact:
        work = tf.int32
    elif tf.float64 in (src.dtype, tf.as_dtype(out_dtype)):
        work = tf.float64
    else:
        work = tf.float32
    x = tf.cast(src, work)
    np_work = work.as_numpy_dtype
    if kernel_2d is not None:
        total = _filter_2d(x, (np.asarray(kernel_2d) * scale).astype(np_work), anchor, border)
    else:
        ky = (np.asarray(kernel_y) * scale).astype(np_work)
        total = _sep_filter(x, np.asarray(kernel_x).astype(np_work), ky, anchor, border)
    if delta:
        total = total + tf.constant(delta, work)
    out = tf.as_dtype(out_dtype)
    if out.is_floating or work == tf.int32:
        if not out.is_floating:
            total = tf.clip_by_value(total, out.min, out.max)
        return tf.cast(total, out)
    return F.saturate(total, out)


def _anchor(anchor, kw: int, kh: int) -> tuple[int, int]:
    return (anchor[0] if anchor[0] >= 0 else kw // 2, anchor[1] if anchor[1] >= 0 else kh // 2)


def _pass(padded, kernel: np.ndarray, axis: int):
    """One axis of a separable filter: unrolled taps for a short kernel or an image of free
    size, a loop over them (gdp.ops.filters.window_rows / window_cols, static sizes) for a long
    one (kernels.LOOP_TAPS)."""
    n = len(kernel)
    if n <= kernels.LOOP_TAPS or not _static(padded):
        return F.taps(padded, kernel, axis)
    weights = None if np.all(kernel == 1) else kernel
    return (F.window_rows if axis == 0 else F.window_cols)(padded, n, weights)


def _static(x) -> bool:
    """Whether an image's height and width are known when the graph is traced (the loops of
    large kernels need them; a graph-mode call on tensors of unknown size keeps the unrolled
    stencil)."""
    return x.shape[0] is not None and x.shape[1] is not None


def _sep_filter(image, kernel_x: np.ndarray, kernel_y: np.ndarray, anchor, border: int):
    """gdp.ops.filters.sep_filter for an image of static or free size."""
    kx, ky = len(kernel_x), len(kernel_y)
    ax, ay = _anchor(anchor, kx, ky)
    padded = B.pad(image, ay, ky - 1 - ay, ax, kx - 1 - ax, border)
    return _pass(_pass(padded, kernel_x, 1), kernel_y, 0)


def rank_one(kernel: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(column, row) with np.outer(column, row) == kernel exactly, in the kernel's dtype (for
    an integer kernel, integer factors), or None: a 2-D kernel that runs as two 1-D passes."""
    kernel = np.asarray(kernel)
    if kernel.dtype.kind == "f" and not np.all(np.isfinite(kernel)):
        return None
    nonzero = np.argwhere(kernel != 0)
    if len(nonzero) == 0:
        return None
    r, c = nonzero[0]
    row = kernel[r].astype(np.float64)
    column = kernel[:, c].astype(np.float64) / float(kernel[r, c])
    if kernel.dtype.kind in "iu" and not np.array_equal(column, np.round(column)):
        return None
    column, row = column.astype(kernel.dtype), row.astype(kernel.dtype)
    # The products the two passes form, in the kernel's dtype, are the kernel's values.
    if not np.array_equal(column[:, None] * row[None, :], kernel):
        return None
    return column, row


def _filter_2d(image, kernel: np.ndarray, anchor, border: int):
    """gdp.ops.filters.filter_2d for an image of static or free size. A kernel of more than
    kernels.LOOP_TAPS_2D taps runs as two 1-D passes where it is exactly rank one (_pass), else,
    of static size, as a loop per kernel row (gdp.ops.filters.correlate_taps): not an unrolled
    stencil. Of unknown size (a graph-mode tensor), such a kernel stays unrolled."""
    kh, kw = kernel.shape
    ax, ay = _anchor(anchor, kw, kh)
    padded = B.pad(image, ay, kh - 1 - ay, ax, kw - 1 - ax, border)
    factors = rank_one(kernel) if np.count_nonzero(kernel) > kernels.LOOP_TAPS_2D else None
    if factors is not None:
        column, row = factors
        return _pass(_pass(padded, row, 1), column, 0)
    if np.count_nonzero(kernel) <= kernels.LOOP_TAPS_2D or not _static(padded):
        return ops_image.correlate(padded, kernel, image.shape.rank == 3)
    return F.correlate_taps(padded, kernel)


def _fits(src, kw: int, kh: int) -> bool:
    """Whether a filter's program for any size serves `src`: larger than the kernel (smaller
    images reflect their border more than once, and get a program per size)."""
    if src.shape[0] is None or src.shape[1] is None:  # a graph-mode tensor of unknown size
        return False
    return int(src.shape[0]) > kh and int(src.shape[1]) > kw


def _takes(src) -> bool:
    return common.dtype_of(src) in _DEPTHS | _FLOATS


def _ksize(ksize) -> tuple[int, int]:
    if ksize.__class__ is tuple and len(ksize) == 2:  # the common call (np.isscalar: 0.5 us)
        return int(ksize[0]), int(ksize[1])
    kw, kh = (int(ksize), int(ksize)) if np.isscalar(ksize) else (int(ksize[0]), int(ksize[1]))
    return kw, kh


@common.accelerate("GaussianBlur")
def GaussianBlur(
    src,
    ksize,
    sigmaX,
    dst=None,
    sigmaY=0,
    borderType=_cv2.BORDER_DEFAULT,
    hint=None,
):
    src = common.image("GaussianBlur", src)
    kw, kh = _ksize(ksize)
    if (kw > 0 and kw % 2 == 0) or (kh > 0 and kh % 2 == 0) or kw < 0 or kh < 0:
        raise common.error(
            "createGaussianKernels",
            "ksize.width > 0 && ksize.width % 2 == 1 && ksize.height > 0 && ksize.height % 2 == 1",
        )
    if (kw == 0 and sigmaX <= 0) or (kh == 0 and max(sigmaY, sigmaX) <= 0):
        raise common.error("createGaussianKernels", "ksize is 0 and sigma is not positive")
    border = _border("GaussianBlur", borderType)
    if common.dtype_of(src) not in (np.uint8, np.uint16, np.float32, np.float64):
        raise common.NotAccelerated(
            f"{src.dtype} is not accelerated (uint8, uint16, float32, float64 are)"
        )
    dtype = common.dtype_of(src)
    sigma_x = float(sigmaX)
    sigma_y = float(sigmaY) if sigmaY > 0 else sigma_x
    kw = kw if kw > 0 else kernels.gaussian_ksize(sigma_x, dtype)
    kh = kh if kh > 0 else kernels.gaussian_ksize(sigma_y, dtype)
    # The kernel sizes are structural; the weights, computed here from sigma as OpenCV does
    # (its fixed tables for sigma <= 0 included), are run-time inputs of the program.
    values = {
        "kx": kernels.gaussian_weights(kw, sigma_x, dtype),
        "ky": kernels.gaussian_weights(kh, sigma_y, dtype),
    }
    # On the host, uint8 runs gdp.runtime.separable's kernel, for every size and kernel: as fast
    # as the program for 3x3 and 5x5 kernels, faster for longer ones (31x31 at 480x640 BGR:
    # 1.25 against 1.96 ms), and where the program serves one size only. Else one program for
    # every image size at least a kernel wide (gdp.ops.border.pad_any_size); smaller images,
    # whose borders reflect more than once, and kernels longer than FREE_TAPS (their loops need
    # static sizes) get one program per size (float32 on the host: the kernel instead).
    free = _fits(src, kw, kh) and max(kw, kh) <= kernels.FREE_TAPS
    anchor = (kw // 2, kh // 2)
    if dtype == np.uint8 and _separable_on_host(src, dtype):
        return _separable(src, values["kx"], values["ky"], anchor, border, "gaussian", dst)
    if dtype == np.float32 and not free and _separable_on_host(src, dtype):
        return _separable(src, values["kx"], values["ky"], anchor, border, "float32", dst)
    return engine.call("GaussianBlur", _gaussian, [src], {"border": border}, dst, values, free)


def _on_host_as(src, out: np.dtype, types: frozenset) -> bool:
    """Whether an eager filter of `src` into `out` may run a hand kernel that takes `types`
    ((source, result) dtype names), on the cpu target."""
    if common.is_tensor(src):  # graph mode: the program
        return False
    out = np.dtype(out)
    if (common.dtype_of(src), out) not in _dtype_pairs(types):
        return False
    return common.on_host(src, out_bytes=src.size * out.itemsize)


@functools.cache
def _dtype_pairs(types: frozenset) -> frozenset:
    """`types` as np.dtype pairs (a dtype's .name costs microseconds a call)."""
    return frozenset((np.dtype(a), np.dtype(b)) for a, b in types)


# What gdp.runtime.separable takes: uint8 into uint8 or int16, float32 into float32.
_SEPARABLE_TYPES = frozenset({("uint8", "uint8"), ("uint8", "int16"), ("float32", "float32")})


def _separable_on_host(src, out: np.dtype) -> bool:
    return _on_host_as(src, out, _SEPARABLE_TYPES)


@functools.cache
def _finish_dtype(finish: str) -> np.dtype:
    """The dtype of gdp.runtime.separable's result for `finish` (np.dtype of a name: 1-2 us)."""
    return np.dtype(rt_separable.FINISH[finish])


def _separable(src, kernel_x, kernel_y, anchor, border: int, finish: str, dst, **finishing):
    """gdp.runtime.separable's filter of `src`."""
    into = common.into(dst, src.shape, _finish_dtype(finish), src)
    out = rt_separable.separable(
        src, kernel_x, kernel_y, anchor, border, finish, **finishing, out=into
    )
    return common.finish(out, dst)


def _weighted_taps(padded, weights, axis: int):
    """sum of weights[t] * padded shifted by t along `axis` (0: rows, 1: columns), in order:
    gdp.ops.filters' taps with weights given at run time (a zero weight adds an exact 0), each
    view cast to the weights' type. The views are cut from both ends, so the sum is written for
    any length."""
    import tensorflow as tf

    n = int(weights.shape[0])
    total = None
    for t in range(n):
        term = tf.cast(B.along(padded, axis, B.window(t, n)), weights.dtype) * weights[t]
        total = term if total is None else total + term
    return total


def _gaussian(image, border, kx, ky):
    """gdp.ops.filters.gaussian_blur with its weights float64 scalar tensors: uint8 and uint16
    in OpenCV's fixed point (exact integer sums, one rounding), floats in the image's type."""
    import tensorflow as tf

    if image.dtype == tf.uint8:
        work = tf.int32
    elif image.dtype == tf.uint16:
        work = tf.int64
    else:
        work = image.dtype
    nx, ny = int(kx.shape[0]), int(ky.shape[0])
    ax, ay = nx // 2, ny // 2
    padded = B.pad(tf.cast(image, work), ay, ny - 1 - ay, ax, nx - 1 - ax, border)
    if nx <= kernels.LOOP_TAPS or not _static(padded):
        rows = _weighted_taps(padded, tf.cast(kx, work), 1)
    else:  # a long kernel: a loop over its taps (static sizes)
        rows = F.window_cols(padded, nx, tf.cast(kx, work))
    if image.dtype == tf.uint8:
        # OpenCV's row buffer: a row's weighted sum is at most 255 * 256 (the weights, 8
        # fractional bits, sum to 256), exact in 16 bits, so the pass between the two is
        # stored in half the bytes of int32.
        rows = tf.cast(rows, tf.uint16)
    if ny <= kernels.LOOP_TAPS or not _static(rows):
        total = _weighted_taps(rows, tf.cast(ky, work), 0)
    else:
        total = F.window_rows(tf.cast(rows, work), ny, tf.cast(ky, work))
    if image.dtype == tf.uint8:
        return tf.cast(tf.bitwise.right_shift(total + (1 << 15), 16), tf.uint8)
    if image.dtype == tf.uint16:
        return tf.cast(tf.math.floordiv(total + (1 << 31), 1 << 32), tf.uint16)
    return total


def _box_fixed_point(area: int) -> tuple[int, int]:
    """OpenCV's ColumnSum<ushort, uchar> for a box of `area` (at most 256) values: (delta,
    divide) of (sum + delta) * divide >> 23 in fixed point, which rounds a half up (a float
    division rounds it to even: an even area differed by 1)."""
    exact = (1 << 23) / area
    divide, delta = math.floor(exact), area // 2
    if exact - divide < 0.5:
        delta += 1
    else:
        divide += 1
    return delta, divide


def _box(src, out_dtype, ksize, anchor, normalize, border):
    import tensorflow as tf

    kw, kh = ksize
    area = kw * kh
    ones = np.ones(kw), np.ones(kh)
    if normalize and src.dtype == tf.uint8 and np.dtype(out_dtype) == np.uint8 and 1 < area <= 256:
        shift = 23
        delta, divide = _box_fixed_point(area)
        # (sum + delta) * divide reaches 2**31 (area 2, two 255s): int64, and a saturation as
        # OpenCV's vector code does (a 2-tap mean of 255s is 256 before it; OpenCV's scalar tail
        # wraps it to 0, a quirk gdp does not copy)
        total = _linear(src, np.int32, *ones, None, anchor, 0, border)
        fixed = tf.math.floordiv((tf.cast(total, tf.int64) + delta) * divide, 1 << shift)
        return tf.cast(tf.minimum(fixed, 255), tf.uint8)
    total = _linear(src, np.float64 if normalize else out_dtype, *ones, None, anchor, 0, border)
    if not normalize:
        return total
    out = tf.as_dtype(np.dtype(out_dtype))
    scaled = total * tf.constant(1.0 / area, tf.float64)
    if out in (tf.uint8, tf.uint16, tf.int16) and area <= _INT_SUMS.get(src.dtype.name, 0):
        scaled = _scaled_rows_as_opencv(total, 1.0 / area, scaled)
    return F.saturate(scaled, out)


# The largest box whose sums OpenCV keeps in int for each source type (createBoxFilter).
_INT_SUMS = {"uint8": 1 << 23, "uint16": 1 << 15, "int16": 1 << 16}


def _scaled_rows_as_opencv(total, scale: float, scaled):
    """OpenCV's ColumnSum<int, T> into 8- and 16-bit results: a row's window sums `total`
    times `scale` in float32 vectors of 8 (and wider) values, its last (row values % 8) in
    float64 (`scaled`): the two round apart where a sum times the scale lies next to a half
    (an even area; gdp.runtime.separable.SCALED_TAIL)."""
    import tensorflow as tf

    from gdp.runtime.separable import SCALED_TAIL

    body = tf.cast(tf.cast(total, tf.float32) * tf.constant(np.float32(scale)), tf.float64)
    shape = tf.shape(total)
    columns = tf.range(shape[1])
    if total.shape.rank == 3:  # a row's values: its pixels' channels one after another
        columns = columns[:, None] * shape[2] + tf.range(shape[2])[None, :]
    values = tf.size(columns)
    return tf.where(columns >= values - values % SCALED_TAIL, scaled, body)


@common.accelerate("boxFilter")
def boxFilter(
    src,
    ddepth,
    ksize,
    dst=None,
    anchor=(-1, -1),
    normalize=True,
    borderType=_cv2.BORDER_DEFAULT,
):
    src = common.image("boxFilter", src)
    kw, kh = _ksize(ksize)
    if kw <= 0 or kh <= 0:
        raise common.error("boxFilter", "ksize.width > 0 && ksize.height > 0")
    out = _out_dtype("boxFilter", src, ddepth)
    border = _border("boxFilter", borderType)
    if not _takes(src):
        raise common.NotAccelerated(f"{src.dtype} is not accelerated")
    if normalize and out in _BOX_ON_HOST and _separable_on_host(src, out):
        # gdp.runtime.separable's kernel for every size and kernel, _box's arithmetic: faster
        # than the program (a 5x5 blur at 1080p BGR 1.1 against 2.1 ms, a 31x31 at 480x640
        # 0.72 against 1.62 ms: the column sums run; float32 31x31 at 480x640 BGR 1.45 against 2.4)
        area = kw * kh
        ones = (1,) * kw, (1,) * kh
        anchor = _anchor(anchor, kw, kh)
        if out == _BOX_ON_HOST[1]:  # float32: sums in float64, as _box's and OpenCV's
            return _separable(src, *ones, anchor, border, "box_float32", dst, scale=1.0 / area)
        if 1 < area <= 256:
            delta, divide = _box_fixed_point(area)
            return _separable(src, *ones, anchor, border, "box", dst, p0=delta, p1=divide)
        return _separable(src, *ones, anchor, border, "box_scaled", dst, scale=1.0 / area)
    params = dict(
        out_dtype=common.dtype_name(out),
        ksize=(kw, kh),
        anchor=tuple(anchor),
        normalize=bool(normalize),
        border=border,
    )
    free = _fits(src, kw, kh) and max(kw, kh) <= kernels.FREE_TAPS
    return engine.call("boxFilter", _box, [src], params, dst, free=free)


# The results of a normalized box that gdp.runtime.separable's kernel gives, as dtypes (a dtype
# compared with np.uint8 converts the type on every call).
_BOX_ON_HOST = (np.dtype(np.uint8), np.dtype(np.float32))


@common.accelerate("blur")
def blur(src, ksize, dst=None, anchor=(-1, -1), borderType=_cv2.BORDER_DEFAULT):
    return boxFilter(src, -1, ksize, dst=dst, anchor=anchor, normalize=True, borderType=borderType)


def _linear_graph(
    src, out_dtype, kernel_x, kernel_y, kernel_2d, anchor, delta, border, scale, derive=None
):
    if derive is not None:
        kernel_x, kernel_y, kernel_2d = _derived_kernels(derive).values()
    return _linear(
        src,
        np.dtype(out_dtype),
        None if kernel_x is None else np.array(kernel_x),
        None if kernel_y is None else np.array(kernel_y),
        None if kernel_2d is None else np.array(kernel_2d),
        anchor,
        delta,
        border,
        scale,
    )


def _run_linear(
    func,
    src,
    ddepth,
    dst,
    kernel_x=None,
    kernel_y=None,
    kernel_2d=None,
    anchor=(-1, -1),
    delta=0.0,
    border=_cv2.BORDER_DEFAULT,
    scale=1.0,
    derive=None,
):
    out = _out_dtype(func, src, ddepth)
    two_d = kernel_2d is not None or (
        derive is not None and derive[0] == "laplacian" and derive[1] <= 3
    )
    _check_depths(func, common.dtype_of(src), out, two_d)
    as_list = lambda k: None if k is None else np.asarray(k, np.float64).tolist()
    params = dict(
        out_dtype=common.dtype_name(out),
        kernel_x=as_list(kernel_x),
        kernel_y=as_list(kernel_y),
        kernel_2d=as_list(kernel_2d),
        anchor=tuple(int(a) for a in anchor),
        delta=float(delta),
        border=border,
        scale=float(scale),
        derive=derive,
    )
    # Kernels past FREE_TAPS (one axis of a separable filter) or past LOOP_TAPS_2D (a 2-D kernel
    # that is not exactly rank one) run as loops that need static sizes: one program per size;
    # on the host, such a 2-D kernel runs gdp.runtime.filter2d's kernel instead, for every size.
    if kernel_2d is not None:
        kh, kw = np.shape(kernel_2d)
        loops = np.count_nonzero(kernel_2d) > kernels.LOOP_TAPS_2D and (
            max(kh, kw) > kernels.FREE_TAPS or rank_one(np.asarray(kernel_2d)) is None
        )
        if loops and _correlates_on_host(src, out):
            return _correlate_on_host(src, out, params, dst)
    elif derive is not None:  # a Sobel's or Laplacian's kernels: 3 taps, or ksize
        ksize = derive[3] if derive[0] == "sobel" else derive[1]
        kh = kw = max(3, ksize)
        loops = ksize > kernels.FREE_TAPS if derive[0] == "sobel" else ksize >= 7
    else:
        kh, kw = len(kernel_y), len(kernel_x)
        loops = max(kh, kw) > kernels.FREE_TAPS
    free = _fits(src, kw, kh) and not loops
    floats = kernel_x is not None and common.dtype_of(src) == np.float32
    if not free and floats and _separable_on_host(src, out):
        # sepFilter2D of float32 over 31 taps or larger than the image: gdp.runtime.separable's
        # kernel for every size, _linear's arithmetic
        kernel_y = np.asarray(kernel_y, np.float64) * scale
        anchor = _anchor(anchor, len(kernel_x), len(kernel_y))
        return _separable(src, kernel_x, kernel_y, anchor, border, "float32", dst, delta=delta)
    sobel = derive is not None and derive[0] == "sobel" and (scale, delta) == (1, 0)
    if sobel and out == _INT16 and _separable_on_host(src, out):
        # A Sobel or Scharr of uint8 into CV_16S: gdp.runtime.separable's kernel, for every
        # size, faster than the program (3x3 dx at 1080p gray: 0.40 against 0.68 ms; at
        # 480x640: 0.10 against 0.14 ms).
        kernel_x, kernel_y, _ = _derived_kernels(derive).values()
        anchor = (len(kernel_x) // 2, len(kernel_y) // 2)
        return _separable(src, kernel_x, kernel_y, anchor, border, "int16", dst)
    return engine.call(func, _linear_graph, [src], params, dst, free=free)


def _correlates_on_host(src, out: np.dtype) -> bool:
    """Whether an eager 2-D correlation runs gdp.runtime.filter2d's kernel (its TYPES)."""
    return _on_host_as(src, out, rt_filter2d.TYPES)


def _correlate_on_host(src: np.ndarray, out: np.dtype, params: dict, dst) -> np.ndarray:
    """filter2D as OpenCV's direct filter computes it (gdp.runtime.filter2d)."""
    kernel = np.asarray(params["kernel_2d"], np.float64)
    kh, kw = kernel.shape
    anchor = _anchor(params["anchor"], kw, kh)
    result = rt_filter2d.filter2d(src, kernel, anchor, params["border"], out, params["delta"])
    return common.finish(result, dst)


@common.accelerate("filter2D")
def filter2D(
    src,
    ddepth,
    kernel,
    dst=None,
    anchor=(-1, -1),
    delta=0,
    borderType=_cv2.BORDER_DEFAULT,
):
    src = common.image("filter2D", src)
    kernel = np.asarray(kernel, np.float64)
    if kernel.ndim == 1:
        kernel = kernel[:, None]
    border = _border("filter2D", borderType)
    if not _takes(src):
        raise common.NotAccelerated(f"{src.dtype} is not accelerated")
    return _run_linear(
        "filter2D", src, ddepth, dst, kernel_2d=kernel, anchor=anchor, delta=delta, border=border
    )


@common.accelerate("sepFilter2D")
def sepFilter2D(
    src,
    ddepth,
    kernelX,
    kernelY,
    dst=None,
    anchor=(-1, -1),
    delta=0,
    borderType=_cv2.BORDER_DEFAULT,
):
    src = common.image("sepFilter2D", src)
    border = _border("sepFilter2D", borderType)
    given = (kernelX, kernelY)
    if not all(isinstance(k, np.ndarray) for k in given) or (
        kernelX.dtype != kernelY.dtype
        or any(k.ndim > 2 or (k.ndim == 2 and 1 not in k.shape) for k in given)
    ):
        # what OpenCV refuses (kernels not arrays, of two types, not rows or columns): OpenCV's
        # own error
        raise common.NotAccelerated("kernels not arrays of one type, or not rows or columns")
    if not _takes(src):
        raise common.NotAccelerated(f"{src.dtype} is not accelerated")
    uint8 = np.dtype(np.uint8)
    if (
        common.dtype_of(src) == uint8
        and ddepth in (-1, _cv2.CV_8U)
        and abs(delta) < 1 << 14
        and _separable_on_host(src, uint8)
    ):
        # OpenCV's fixed point (a gaussian of sigma 0 and the like): gdp.runtime.separable's
        # kernel, its rounding OpenCV's vector loop's and scalar tail's, delta added to the sums
        # as OpenCV adds it (rounded to their 16 fractional bits)
        kx, ky = np.ravel(kernelX), np.ravel(kernelY)
        ax, ay = _anchor(anchor, kx.size, ky.size)
        wx, wy, block = _fixed_point_weights(kx, ax), _fixed_point_weights(ky, ay), _sep_block()
        if wx is not None and wy is not None and block:
            end = src.shape[1] * common.channels(src) // block * block
            offset = int(np.rint(float(delta) * (1 << 16)))
            return _separable(
                src, wx, wy, (ax, ay), border, "gaussian_even", dst, vector_end=end, offset=offset
            )
    return _run_linear(
        "sepFilter2D",
        src,
        ddepth,
        dst,
        kernel_x=np.ravel(kernelX),
        kernel_y=np.ravel(kernelY),
        anchor=anchor,
        delta=delta,
        border=border,
    )


def _fixed_point_weights(kernel: np.ndarray, anchor: int) -> np.ndarray | None:
    """The 8-bit fixed-point weights (times 256, rounded) that OpenCV's sepFilter2D of uint8
    into uint8 filters by in integers ("bit-exact" mode: createSeparableLinearFilter) where
    both kernels are of getKernelType's KERNEL_SMOOTH + KERNEL_SYMMETRICAL and no more
    (weights >= 0 summing to 1 within FLT_EPSILON (|sum| + 1), the same read backwards about
    an anchor at the centre, not all integers) and each weight times 256 lies within
    10 FLT_EPSILON 256 of its rounding (createBitExactKernel_32S); else None (OpenCV filters in
    float32). Kept for the kernels met last (the tests cost 33 us a kernel, where a call on a
    480p image takes 0.3 ms; shared: never written)."""
    return _fixed_point_weights_of(tuple(np.asarray(kernel, np.float64).ravel().tolist()), anchor)


@functools.lru_cache(maxsize=64)
def _fixed_point_weights_of(kernel: tuple[float, ...], anchor: int) -> np.ndarray | None:
    k = np.array(kernel)
    eps = float(np.finfo(np.float32).eps)
    total = 0.0
    for value in kernel:  # in order, as OpenCV sums
        total += value
    smooth = bool(np.all(k >= 0)) and abs(total - 1) <= eps * (abs(total) + 1)
    symmetric = anchor * 2 + 1 == k.size and bool(np.all(k == k[::-1]))
    if not (smooth and symmetric) or bool(np.all(k == np.rint(k))):
        return None
    scaled = k * 256
    weights = np.rint(scaled)
    if np.any(np.abs(scaled - weights) > 10 * eps * 256):
        return None
    return weights.astype(np.int64)


@functools.cache
def _sep_block() -> int:
    """The values of OpenCV's vector step in sepFilter2D's fixed-point uint8 column filter on
    this machine: it rounds half to even in its vector loop and half up in its scalar tail (the
    row's last values % step). Asked of OpenCV: rows of 0, 1, 0, 1, ... filtered by
    (1, 2, 1) / 4 both ways are 0.5 everywhere, 0 where the vector loop rounds and 1 in the
    tail. 0 where its answers fit no step (such calls then keep the program)."""
    taps = np.array([0.25, 0.5, 0.25])
    rows = {n: np.tile(np.arange(n, dtype=np.uint8) % 2, (4, 1)) for n in (127, 255)}
    got = {n: _cv2.sepFilter2D(row, -1, taps, taps)[0] for n, row in rows.items()}
    for block in (1, 2, 4, 8, 16, 32, 64, 128):
        if all(np.array_equal(out, np.arange(n) >= n // block * block) for n, out in got.items()):
            return block
    return 0


@common.accelerate("Sobel")
def Sobel(
    src,
    ddepth,
    dx,
    dy,
    dst=None,
    ksize=3,
    scale=1,
    delta=0,
    borderType=_cv2.BORDER_DEFAULT,
):
    src = common.image("Sobel", src)
    if ksize != -1 and (ksize <= 0 or ksize % 2 == 0 or ksize > 31):
        raise common.error("getSobelKernels", "ksize % 2 == 1 && ksize <= 31")
    if dx < 0 or dy < 0 or dx + dy <= 0:
        raise common.error("getSobelKernels", "dx >= 0 && dy >= 0 && dx+dy > 0")
    if ksize == -1 and not (dx + dy == 1):
        raise common.error("getScharrKernels", "dx >= 0 && dy >= 0 && dx+dy == 1")
    border = _border("Sobel", borderType)
    if not _takes(src):
        raise common.NotAccelerated(f"{src.dtype} is not accelerated")
    return _run_linear(
        "Sobel",
        src,
        ddepth,
        dst,
        derive=("sobel", dx, dy, ksize),
        delta=delta,
        border=border,
        scale=scale,
    )


@common.accelerate("Scharr")
def Scharr(
    src,
    ddepth,
    dx,
    dy,
    dst=None,
    scale=1,
    delta=0,
    borderType=_cv2.BORDER_DEFAULT,
):
    src = common.image("Scharr", src)
    if dx < 0 or dy < 0 or dx + dy != 1:
        raise common.error("getScharrKernels", "dx >= 0 && dy >= 0 && dx+dy == 1")
    return Sobel(
        src, ddepth, dx, dy, dst=dst, ksize=-1, scale=scale, delta=delta, borderType=borderType
    )


@common.accelerate("Laplacian")
def Laplacian(
    src,
    ddepth,
    dst=None,
    ksize=1,
    scale=1,
    delta=0,
    borderType=_cv2.BORDER_DEFAULT,
):
    src = common.image("Laplacian", src)
    if ksize <= 0 or ksize % 2 == 0 or ksize > 31:
        raise common.error("Laplacian", "ksize > 0 && ksize % 2 == 1 && ksize <= 31")
    border = _border("Laplacian", borderType)
    if not _takes(src):
        raise common.NotAccelerated(f"{src.dtype} is not accelerated")
    return _run_linear(
        "Laplacian",
        src,
        ddepth,
        dst,
        derive=("laplacian", ksize, float(scale)),
        delta=delta,
        border=border,
    )


@functools.lru_cache(maxsize=64)
def _derived_kernels(derive: tuple) -> dict:
    """The kernels of a Sobel/Scharr ("sobel", dx, dy, ksize) or a Laplacian ("laplacian",
    ksize, scale) (gdp.ops.derivatives, NumPy only: a hand kernel's call imports no TensorFlow)."""
    from gdp.ops.derivatives import deriv_kernel

    if derive[0] == "sobel":
        _, dx, dy, ksize = derive
        kx, ky = deriv_kernel(dx, ksize), deriv_kernel(dy, ksize)
        if ksize == 1 and dx == 0:  # ksize 1: the derivative axis alone (3 taps), no smoothing
            kx = np.array([1.0])
        if ksize == 1 and dy == 0:
            ky = np.array([1.0])
        return {"kernel_x": kx, "kernel_y": ky, "kernel_2d": None}
    _, ksize, scale = derive
    if ksize <= 3:
        kernel = np.array(
            [[0, 1, 0], [1, -4, 1], [0, 1, 0]]
            if ksize == 1
            else [[2, 0, 2], [0, -8, 0], [2, 0, 2]],
            np.float64,
        )
    else:  # d2/dx2 + d2/dy2, both Sobel kernels of size ksize, as one 2-D kernel
        d2, smooth = deriv_kernel(2, ksize), deriv_kernel(0, ksize)
        kernel = np.outer(smooth, d2) + np.outer(d2, smooth)
    return {"kernel_x": None, "kernel_y": None, "kernel_2d": kernel * scale}


@common.accelerate("medianBlur")
def medianBlur(src, ksize, dst=None):
    src = common.image("medianBlur", src)
    if ksize < 1 or ksize % 2 == 0:  # C's ksize % 2 == 1: false for a negative ksize
        raise common.error("medianBlur", "(ksize % 2 == 1)")
    if ksize == 1:  # OpenCV copies the image, of any type
        if engine.is_graph_call(src):
            return src
        return common.finish(np.array(src, copy=True), dst)
    dtype = common.dtype_of(src)
    # OpenCV's own limits: 8U, 16U and 32F for ksize 3 and 5, 8U only above.
    if ksize > 5 or dtype not in (np.uint8, np.uint16, np.float32):
        raise common.NotAccelerated(
            "only ksize 3 and 5 on uint8, uint16 and float32 are accelerated"
        )
    if common.on_host(src):
        # gdp.runtime.median's kernel: the same network in registers, for every size
        into = common.into(dst, src.shape, src.dtype, src)
        return common.finish(rt_median.median_blur(src, int(ksize), into), dst)
    # The median of sorted columns (F.median_3x3, F.median_5x5): one program for every size
    # larger than the kernel.
    free = _fits(src, ksize, ksize)
    # On TF tensors the graph is the user's, for whatever target: sorted as int32 there.
    native = common.tvm_target() and not engine.is_graph_call(src)
    params = {"ksize": int(ksize), "native_16bit": native}
    return engine.call("medianBlur", F.median, [src], params, dst, free=free)


def _morph(src, kernel, anchor, dilate, iterations, border, border_value, stacked=False):
    """`iterations` erosions (dilations) of `src`; `stacked`: src is a morphology's result."""
    out, kernel_u8 = src, np.array(kernel, np.uint8)
    for k in range(iterations):
        out = F.morphology(
            out, kernel_u8, anchor, dilate, border, border_value, stacked=stacked or k > 0
        )
    return out


def _morph_params(func, kernel, anchor, iterations, borderType, borderValue):
    kernel = np.ones((3, 3), np.uint8) if kernel is None or np.size(kernel) == 0 else kernel
    kernel = (np.asarray(kernel) != 0).astype(np.uint8)
    default = borderValue is None or (
        np.ravel(borderValue).size and float(np.ravel(borderValue)[0]) == 1.7976931348623157e308
    )
    anchor = tuple(int(a) for a in anchor)
    iterations = max(int(iterations), 1)
    kh, kw = kernel.shape
    sides = (kw, kh)
    inside = all(-1 <= a < n for a, n in zip(anchor, sides, strict=True))
    if iterations > 1 and kernel.all() and inside:
        # OpenCV's morphOp: a rectangle applied n times is one rectangle n - 1 sides larger,
        # its anchor n times as far in, applied once. The same for a border that clamps, not
        # for a reflected one (both applied n times, a reflection reflects the first result).
        ax, ay = (n // 2 if a < 0 else a for a, n in zip(anchor, sides, strict=True))
        size = (kh + (iterations - 1) * (kh - 1), kw + (iterations - 1) * (kw - 1))
        kernel, anchor, iterations = np.ones(size, np.uint8), (ax * iterations, ay * iterations), 1
    return dict(
        kernel=kernel,  # a uint8 array (its bytes in a program's key): checks read it as it is
        anchor=anchor,
        iterations=iterations,
        border=_border(func, borderType),
        border_value=None if default else tuple(float(v) for v in np.ravel(borderValue)[:4]),
    )


def _morph_call(func, dilate, src, kernel, dst, anchor, iterations, borderType, borderValue):
    size = _plain_rect(src, kernel, anchor, iterations, borderType, borderValue)
    if size is not None:  # the common call, straight to gdp.runtime.morph's kernel
        return common.finish(rt_morph.rect(src, *size, anchor, dilate), dst)
    src = common.image(func, src)
    if not _takes(src):
        raise common.NotAccelerated(f"{src.dtype} is not accelerated")
    params = _morph_params(func, kernel, anchor, iterations, borderType, borderValue)
    if _in_steps(src, params, None):
        return common.finish(_morph_steps(src, params, [dilate] * params["iterations"]), dst)
    free = _morph_free(src, params)
    args = (func, _morph, [src], dict(params, dilate=dilate), dst)
    return engine.call(*args, free=free, sized=_morph_runs(params))


def _plain_rect(src, kernel, anchor, iterations, border, border_value) -> tuple | None:
    """(height, width) of the rectangle of an erode or dilate that gdp.runtime.morph's kernel
    runs as called, without the general path's parameters (which cost a 480p gray erosion a
    third of its time): a uint8 image the host kernels take as it is, a 2-D kernel of every
    tap set, its anchor given as a tuple inside it, one iteration, and a border that clamps
    the window (the default constant, or BORDER_REPLICATE); else None (the general path)."""
    if not (
        src.__class__ is np.ndarray
        and src.dtype is common.UINT8
        and kernel.__class__ is np.ndarray
        and kernel.ndim == 2
        and anchor.__class__ is tuple
        and len(anchor) == 2
        and iterations.__class__ is int
        and iterations == 1
        and border.__class__ is int
        and _clamps(border, border_value)
    ):
        return None
    kh, kw = kernel.shape
    if not (
        kernel.size
        and anchor[0].__class__ is int
        and anchor[1].__class__ is int
        and -1 <= anchor[0] < kw
        and -1 <= anchor[1] < kh
        and common.plain_image(src, out_bytes=src.nbytes)
        and kernel.all()
    ):
        return None
    return kh, kw


# morphologyEx's ops that run one morphology on the result of another (open, close, top hat,
# black hat); gradient runs its two on the input side by side.
_STACKED = (_cv2.MORPH_OPEN, _cv2.MORPH_CLOSE, _cv2.MORPH_TOPHAT, _cv2.MORPH_BLACKHAT)


def _morph_runs(params: dict) -> bool:
    """Whether a morphology runs as window extremes of runs (gdp.ops.filters.morphology_runs):
    over run-time extents its many stored levels and views run as passes over the whole
    image (a 480x640 31x31 gradient 26 ms), where a program of static sizes computes them by
    row strips (5 ms): a size called often gets its own (engine.sized_program)."""
    return np.count_nonzero(params["kernel"]) > kernels.LOOP_TAPS_2D


def _stacked(params: dict, op: int | None) -> bool:
    """Whether a morphology is applied to its own result: iterations, or morphologyEx's open,
    close, top hat and black hat."""
    return params["iterations"] > 1 or op in _STACKED


def _in_steps(src, params: dict, op: int | None) -> bool:
    """Whether an eager morphology runs as single applications, each its own program for
    every size (_morph_steps): a kernel over LOOP_TAPS_2D taps, at most FREE_TAPS on a side,
    applied to its own result (iterations, or morphologyEx's open, close, top hat and black
    hat), on an image larger than the kernel: faster than the stack as one program
    (_morph_free), which graph calls build."""
    if engine.is_graph_call(src):
        return False
    if _rect_on_host(src, params):
        return True
    kernel = np.asarray(params["kernel"])
    kh, kw = kernel.shape
    return (
        _stacked(params, op)
        and _fits(src, kw, kh)
        and np.count_nonzero(kernel) > kernels.LOOP_TAPS_2D
        and max(kh, kw) <= kernels.FREE_TAPS
    )


def _rect_on_host(src, params: dict) -> bool:
    """Whether an eager morphology's steps run gdp.runtime.morph's kernel: a uint8 image, a
    rectangular kernel (every tap set) with its anchor inside it, and a border that clamps the
    window (the default constant, or BORDER_REPLICATE), on the cpu target."""
    kernel = np.asarray(params["kernel"])
    if not (kernel.size and kernel.all() and src.size and common.dtype_of(src) == np.uint8):
        return False
    (kh, kw), (ax, ay) = kernel.shape, params["anchor"]
    anchored = ax in range(-1, kw) and ay in range(-1, kh)
    return anchored and _clamps(params["border"], params["border_value"]) and common.on_host(src)


def _clamps(border: int, border_value) -> bool:
    """Whether a morphology's border clamps its window to the image (gdp.runtime.morph's
    kernel): BORDER_REPLICATE, or the default constant (no value given)."""
    return border == _cv2.BORDER_REPLICATE or (
        border == _cv2.BORDER_CONSTANT and border_value is None
    )


def _morph_steps(src: np.ndarray, params: dict, dilations: list[bool]) -> np.ndarray:
    """`src` eroded or dilated once per entry of `dilations`, in turn, each through the
    program of erode's or dilate's single application (shared with those calls): what
    OpenCV's morphologyEx and iterations do, one whole image after another. One pass more
    over memory than a single program, no compile for a new size."""
    single = dict(params, iterations=1)
    out = src
    if _rect_on_host(src, params):
        kh, kw = np.asarray(params["kernel"]).shape
        for dilate in dilations:
            out = rt_morph.rect(out, kh, kw, params["anchor"], dilate)
        return out
    for dilate in dilations:
        name = "dilate" if dilate else "erode"
        step = dict(single, dilate=dilate)
        out = engine.call(name, _morph, [out], step, None, free=True, sized=True)
    return out


def _morph_ex_steps(src: np.ndarray, params: dict, op: int) -> np.ndarray:
    n = params["iterations"]
    if op in (_cv2.MORPH_ERODE, _cv2.MORPH_DILATE):
        return _morph_steps(src, params, [op == _cv2.MORPH_DILATE] * n)
    if op == _cv2.MORPH_GRADIENT:  # the two side by side, each `iterations` times
        dilated = _morph_steps(src, params, [True] * n)
        return _cv2.subtract(dilated, _morph_steps(src, params, [False] * n))
    opening = op in (_cv2.MORPH_OPEN, _cv2.MORPH_TOPHAT)
    # Open: erode, then dilate; close: the other way round; each `iterations` times.
    stacked = _morph_steps(src, params, [not opening] * n + [opening] * n)
    if op == _cv2.MORPH_TOPHAT:
        return _cv2.subtract(src, stacked)  # OpenCV's saturating difference, as its own
    if op == _cv2.MORPH_BLACKHAT:
        return _cv2.subtract(stacked, src)
    return stacked


def _morph_free(src, params: dict, op: int | None = None) -> bool:
    """Whether one program serves every size: an image larger than the kernel, and a kernel of
    at most LOOP_TAPS_2D taps, or at most FREE_TAPS on a side (its runs' window extremes:
    gdp.ops.filters.morphology_runs). Applied to its own result (an opening, iterations), the
    second stage pads by gathers (F.morphology's `stacked`): as slices and a concat TVM took
    minutes to compile it for run-time extents (a 21x21 opening: 6 min; gathered, about 5 s). Eager
    calls still run such a stack in steps (_in_steps): 1.0 against 1.9 ms for a 480p BGR
    21x21 opening."""
    kernel = np.asarray(params["kernel"])
    kh, kw = kernel.shape
    if not _fits(src, kw, kh):
        return False
    if np.count_nonzero(kernel) <= kernels.LOOP_TAPS_2D:
        return True
    return max(kh, kw) <= kernels.FREE_TAPS


@common.accelerate("erode")
def erode(
    src,
    kernel,
    dst=None,
    anchor=(-1, -1),
    iterations=1,
    borderType=_cv2.BORDER_CONSTANT,
    borderValue=None,
):
    return _morph_call(
        "erode", False, src, kernel, dst, anchor, iterations, borderType, borderValue
    )


@common.accelerate("dilate")
def dilate(
    src,
    kernel,
    dst=None,
    anchor=(-1, -1),
    iterations=1,
    borderType=_cv2.BORDER_CONSTANT,
    borderValue=None,
):
    return _morph_call(
        "dilate", True, src, kernel, dst, anchor, iterations, borderType, borderValue
    )


def _morph_ex(src, op, kernel, anchor, iterations, border, border_value):
    import tensorflow as tf

    def er(x, stacked=False):
        return _morph(x, kernel, anchor, False, iterations, border, border_value, stacked)

    def di(x, stacked=False):
        return _morph(x, kernel, anchor, True, iterations, border, border_value, stacked)

    if op == _cv2.MORPH_ERODE:
        return er(src)
    if op == _cv2.MORPH_DILATE:
        return di(src)
    if op == _cv2.MORPH_OPEN:
        return di(er(src), stacked=True)
    if op == _cv2.MORPH_CLOSE:
        return er(di(src), stacked=True)
    wide = tf.int32 if src.dtype.is_integer else src.dtype
    # GRADIENT, TOPHAT, BLACKHAT: differences, saturated as OpenCV's subtract does.
    if op == _cv2.MORPH_GRADIENT:
        a, b = di(src), er(src)
    elif op == _cv2.MORPH_TOPHAT:
        a, b = src, di(er(src), stacked=True)
    else:
        a, b = er(di(src), stacked=True), src
    return (
        F.saturate(tf.cast(a, wide) - tf.cast(b, wide), src.dtype)
        if src.dtype.is_integer
        else a - b
    )


@common.accelerate("morphologyEx")
def morphologyEx(
    src,
    op,
    kernel,
    dst=None,
    anchor=(-1, -1),
    iterations=1,
    borderType=_cv2.BORDER_CONSTANT,
    borderValue=None,
):
    src = common.image("morphologyEx", src)
    ops = (
        _cv2.MORPH_ERODE,
        _cv2.MORPH_DILATE,
        _cv2.MORPH_OPEN,
        _cv2.MORPH_CLOSE,
        _cv2.MORPH_GRADIENT,
        _cv2.MORPH_TOPHAT,
        _cv2.MORPH_BLACKHAT,
    )
    if op not in ops or not _takes(src):
        raise common.NotAccelerated(f"op {op} / {src.dtype} is not accelerated")
    params = _morph_params("morphologyEx", kernel, anchor, iterations, borderType, borderValue)
    if _in_steps(src, params, int(op)):
        return common.finish(_morph_ex_steps(src, params, int(op)), dst)
    free = _morph_free(src, params, int(op))
    args = ("morphologyEx", _morph_ex, [src], dict(params, op=int(op)), dst)
    return engine.call(*args, free=free, sized=_morph_runs(params))


def _canny_prepare(image, l2, aperture, low, high):
    """Non-maximum suppression and the double threshold; `low` and `high` (integers, as float64
    scalar tensors) are run-time inputs."""
    import tensorflow as tf

    magnitude = None
    if image.shape.rank == 2:
        dx, dy = F.canny_gradients(image, aperture)
    else:
        dx, dy, magnitude = F.canny_gradients_color(image, aperture, l2)
    low, high = tf.cast(low, dx.dtype), tf.cast(high, dx.dtype)
    return ops_image.canny_candidates(dx, dy, low, high, l2, magnitude)


def _canny_thresholds(low: float, high: float, l2_gradient: bool) -> tuple[int, int]:
    """gdp.ops.image.canny_thresholds (the integer thresholds cv2.Canny compares magnitudes
    with), here so that a call on a compiled program imports no TensorFlow."""
    if low > high:
        low, high = high, low
    if l2_gradient:
        low, high = min(32767.0, low), min(32767.0, high)
        low, high = (t * t if t > 0 else t for t in (low, high))
    return int(np.floor(low)), int(np.floor(high))


@common.accelerate("Canny")
def Canny(image, threshold1, threshold2, edges=None, apertureSize=3, L2gradient=False):
    """A compiled program up to the double threshold, then hysteresis as OpenCV runs it (a
    flood fill from the strong pixels, gdp.runtime.hysteresis's TIR kernel)."""
    if isinstance(threshold1, np.ndarray):  # Canny(dx, dy, threshold1, threshold2, ...)
        raise common.NotAccelerated("Canny's derivative overload (dx, dy) is not accelerated")
    image = common.image("Canny", image, "image")
    if apertureSize not in (3, 5, 7):
        raise common.error(
            "Canny", "((aperture_size & 1) != 0) && (aperture_size >= 3) && (aperture_size <= 7)"
        )
    if common.dtype_of(image) != np.uint8:
        raise common.error("Canny", "_src.depth() == CV_8U")
    # Aperture 7's gradients are scaled by 1/16 (see canny_gradients), its thresholds too.
    scale = 16.0 if apertureSize == 7 else 1.0
    low, high = _canny_thresholds(threshold1 / scale, threshold2 / scale, bool(L2gradient))
    if not all(-(1 << 31) <= t < (1 << 31) for t in (low, high)):
        # canny.cpp's cvFloor of a threshold outside int's range is undefined in C (on x86 it
        # gives INT_MIN, or INT_MAX below it): OpenCV's own answers such a call.
        raise common.NotAccelerated(f"thresholds {low}, {high} do not fit OpenCV's int")
    params = dict(l2=bool(L2gradient), aperture=int(apertureSize))
    values = {"low": low, "high": high}
    if engine.is_graph_call(image):
        raise common.error(
            "Canny",
            "graph mode: hysteresis is a serial flood fill, which gdp runs eagerly;"
            " call Canny on arrays",
        )
    if image.shape[0] * image.shape[1] > rt_hysteresis.MAX_PIXELS:
        raise common.NotAccelerated(
            f"{image.shape[0]}x{image.shape[1]} is more than the {rt_hysteresis.MAX_PIXELS} pixels"
            " gdp's hysteresis kernel indexes"
        )
    if (image.ndim == 2 or image.shape[2] in rt_canny.CHANNELS) and common.on_host(image):
        # On the cpu target: one hand TIR kernel for the host to the level map (other targets
        # run the program on their chip), flooded in place (in `edges` where it fits and is not
        # the image: the kernel's strips read rows that others have written by then).
        spare = isinstance(edges, np.ndarray) and not np.may_share_memory(edges, image)
        levels = rt_canny.canny_levels(
            image, low, high, bool(L2gradient), edges if spare else None, int(apertureSize)
        )
        rt_hysteresis.flood_levels(levels, made=True)
        return levels if levels is edges else common.finish(levels, edges)
    # Other targets: one program for every gray image larger than the widest aperture; a
    # colour image's program (a reduction over the channels' stacked gradients) fails to build
    # over run-time extents in TVM 0.27, as medianBlur's k5 counting does: one per size.
    free = image.ndim == 2 and _fits(image, 7, 7)
    candidates, strong = engine.run(
        "Canny.prepare", _canny_prepare, [image], params, outputs=2, values=values, free=free
    )
    if (
        isinstance(edges, np.ndarray)
        and edges.shape == candidates.shape
        and edges.dtype == np.uint8
        and edges.flags.c_contiguous
        and edges.flags.writeable
    ):
        # OpenCV's dst=, filled in place. The maps are the program's 0/1 casts: not checked.
        return rt_hysteresis.hysteresis(candidates, strong, edges, check=False)
    return common.finish(rt_hysteresis.hysteresis(candidates, strong, check=False), edges)
