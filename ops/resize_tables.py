"""cv::resize's interpolation tables, in NumPy alone: which source pixels each output pixel of an
axis reads and with which weights, as OpenCV computes them, and the plan of a separable resize
built from them (gdp.ops.geometry runs it as TF ops).

A plan is a structure (what the program looks like: its passes, their tap counts, the work type)
and the tables (its data). The structure depends on the sizes only through a few choices, so
gdp.cv2 compiles one program per structure and feeds the tables to it at run time: a new source
size runs without compiling. No TensorFlow here: gdp.cv2 computes tables on every new size.
"""

from __future__ import annotations

import math

import numpy as np

# cv::resize's interpolation codes, so ops/ needs no cv2.
INTER_NEAREST = 0
INTER_LINEAR = 1
INTER_CUBIC = 2
INTER_AREA = 3
# OpenCV's fixed point for 8-bit resize: weights scaled by 2^11, two passes -> 2^22.
RESIZE_COEF_BITS = 11
CUBIC_A = -0.75
# How much more a gathered tap costs than a tap of a pass along the rows (whole rows weighed and
# summed in vectors): what the pass order of an integer resize is chosen by (see _order).
GATHER_COST = 8


def _cubic_weights(x: np.ndarray) -> np.ndarray:
    """The four cubic weights of each fraction in `x` (float64), as cv::interpolateCubic."""
    a = CUBIC_A
    c0 = ((a * (x + 1) - 5 * a) * (x + 1) + 8 * a) * (x + 1) - 4 * a
    c1 = ((a + 2) * x - (a + 3)) * x * x + 1
    c2 = ((a + 2) * (1 - x) - (a + 3)) * (1 - x) * (1 - x) + 1
    return np.stack([c0, c1, c2, 1.0 - c0 - c1 - c2], axis=1)


def axis_taps(
    src: int, dst: int, scale: float, method: int, ipp: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(indices, weights), each (dst, taps): the source pixels and float weights each output
    pixel of one axis reads, as cv::resize computes them (`scale` = source / destination).

    `ipp`: LINEAR and CUBIC as Intel IPP's resize computes them, which OpenCV hands some calls
    (gdp.cv2.geometry.ipp_resizes): the source position in double, where OpenCV's own code
    rounds it to float (on a 500-pixel axis the two put a 0-255 image's values up to 0.008
    apart)."""
    d = np.arange(dst, dtype=np.float64)
    if method == INTER_NEAREST:
        idx = np.minimum(np.floor(d * scale).astype(np.int64), src - 1)
        return idx[:, None], np.ones((dst, 1))
    if method == INTER_AREA:  # enlarging by "area": linear taps with area coefficients
        s = np.floor(d * scale).astype(np.int64)
        f = ((d + 1) - (s + 1) / scale).astype(np.float32).astype(np.float64)
        f = np.where(f <= 0, 0.0, f - np.floor(f))
    else:
        f = (d + 0.5) * scale - 0.5
        if not ipp:
            f = f.astype(np.float32)  # OpenCV computes the position in float
        s = np.floor(f).astype(np.int64)
        f = f.astype(np.float64) - s
    if method in (INTER_LINEAR, INTER_AREA):
        low, high = s < 0, s >= src - 1
        f = np.where(low | high, 0.0, f)
        s = np.where(low, 0, np.where(high, src - 1, s))
        indices = np.stack([s, np.minimum(s + 1, src - 1)], axis=1)
        return indices, np.stack([1.0 - f, f], axis=1)
    indices = np.clip(s[:, None] - 1 + np.arange(4)[None, :], 0, src - 1)
    return indices, _cubic_weights(f)


def area_taps(src: int, dst: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """(indices, weights) of INTER_AREA shrinking by a non-integer `scale` (>= 1) along one
    axis: each output pixel is the mean of the source cells its footprint covers, partial
    cells weighted by their covered part (cv::computeResizeAreaTab, weights in float32).
    Rows shorter than the longest are padded with zero-weight taps."""
    rows: list[list[tuple[int, float]]] = []
    for d in range(dst):
        f1 = d * scale
        f2 = f1 + scale
        cell = min(scale, src - f1)
        s1, s2 = math.ceil(f1), math.floor(f2)
        s2 = min(s2, src - 1)
        s1 = min(s1, s2)
        row = []
        if s1 - f1 > 1e-3:
            row.append((s1 - 1, (s1 - f1) / cell))
        row += [(s, 1.0 / cell) for s in range(s1, s2)]
        if f2 - s2 > 1e-3:
            row.append((s2, min(min(f2 - s2, 1.0), cell) / cell))
        rows.append(row)
    taps = max(len(row) for row in rows)
    indices = np.zeros((dst, taps), np.int64)
    weights = np.zeros((dst, taps), np.float32)
    for d, row in enumerate(rows):
        for k, (index, weight) in enumerate(row):
            indices[d, k], weights[d, k] = index, np.float32(weight)
    return indices, weights


def _fixed(weights: np.ndarray) -> np.ndarray:
    """OpenCV's 11-bit weights: each rounded, the largest absorbing the rounding so that every
    row sums to exactly 2^11."""
    one = 1 << RESIZE_COEF_BITS
    fixed = np.rint(weights.astype(np.float32) * one).astype(np.int64)
    largest = np.argmax(weights, axis=1)
    fixed[np.arange(len(fixed)), largest] += one - fixed.sum(axis=1)
    return fixed


def linear_taps_fixed(src: int, dst: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """(indices, weights), each (dst, 2): INTER_LINEAR's taps along the columns of a uint8
    resize, as cv::resize's horizontal pass takes them (11-bit weights, a border pixel's pair
    (s, s) or (s, s + 1) with weights (2^11, 0))."""
    indices, weights = axis_taps(src, dst, scale, INTER_LINEAR)
    return indices, _fixed(weights)


def cubic_taps_fixed(
    src: int, dst: int, scale: float, ipp: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(indices, weights), each (dst, 4): INTER_CUBIC's taps along one axis of a uint8 resize as
    gdp's program takes them (plan): clamped source indices, 11-bit weights summing to 2^11."""
    indices, weights = axis_taps(src, dst, scale, INTER_CUBIC, ipp)
    return indices, _fixed(weights)


def linear_rows_opencv(src: int, dst: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """(rows, weights), each (dst, 2): INTER_LINEAR's taps along the rows of a uint8 resize as
    cv::resize's vertical pass takes them: the float32 position's rows clamped into the image,
    its fraction f kept there (unlike the columns), weights round((1 - f) * 2^11) and
    round(f * 2^11) in float32, each rounded on its own."""
    d = np.arange(dst, dtype=np.float64)
    position = ((d + 0.5) * scale - 0.5).astype(np.float32)
    first = np.floor(position)
    f = (position - first).astype(np.float32)
    one = np.float32(1 << RESIZE_COEF_BITS)
    weights = np.stack([np.rint((np.float32(1) - f) * one), np.rint(f * one)], axis=1)
    first = first.astype(np.int64)
    rows = np.stack([np.clip(first, 0, src - 1), np.clip(first + 1, 0, src - 1)], axis=1)
    return rows, weights.astype(np.int64)


def _used(indices: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The taps without those of weight 0 for every output pixel (an exact factor's second
    linear tap, area's padding): a tap fewer is a gather fewer."""
    used = np.any(weights != 0, axis=0)
    used[int(np.argmax(used))] = True  # at least one
    return indices[:, used], weights[:, used]


def _is_identity(taps, src: int, one: float) -> bool:
    """Whether taps copy each source pixel with the weight `one` (1, or 2^11 in fixed point)."""
    indices, weights = taps
    return (
        indices.shape == (src, 1)
        and np.array_equal(indices[:, 0], np.arange(src))
        and bool(np.all(weights == one))
    )


def _order(h: int, w: int, rows, cols) -> bool:
    """Whether the pass along the columns (rows of the result: vertical) goes first, for an
    integer resize, whose sums are exact in any order: the order that costs less, a gathered
    tap (horizontal pass) counted GATHER_COST times a row pass's tap. Shrinking the rows first
    makes the horizontal pass gather only the rows the result has, as OpenCV computes only the
    rows it needs; enlarging them, the horizontal pass first gathers the fewer source rows."""
    height, width = rows[0].shape[0], cols[0].shape[0]
    ty, tx = rows[0].shape[1], cols[0].shape[1]
    vertical_first = height * w * ty + GATHER_COST * height * width * tx
    horizontal_first = GATHER_COST * h * width * tx + height * width * ty
    return vertical_first <= horizontal_first


def plan(
    h: int,
    w: int,
    channels: int,
    width: int,
    height: int,
    scale_x: float,
    scale_y: float,
    method: int,
    dtype: str,
    ipp: bool = False,
) -> tuple[dict, dict[str, np.ndarray]]:
    """cv::resize of an (h, w, channels) image of numpy dtype name `dtype` to (height, width),
    as (structure, tables). `structure` holds the program's shape: a separable resize
    ("separable", or "area" with fx, fy: an integer INTER_AREA shrink, unit taps summed then
    scaled, `partial` where its last blocks run past the image, their taps there weighted 0)
    with `work` (its accumulation type), `passes` in order, each (axis, taps) where axis 0 is
    the vertical pass, `bits` (the fixed point's shift, uint8) and `weighted` (False for
    nearest and a whole "area": no weights). `tables` holds each pass's table `pass{axis}`, a row
    per output pixel (height rows for axis 0, width * channels for axis 1: the column pass
    reads the (H, W*channels) flattened image, each output element gathering its own element):
    its taps' source indices, then (weighted) their weights, all in `work` (else int32). An
    axis that copies its source has no pass. The structure does not hold the sizes: one
    program of it serves every size. `ipp`: LINEAR and CUBIC positions as Intel IPP computes
    them (axis_taps)."""
    floats = "float64" if dtype == "float64" else "float32"
    if method == INTER_AREA and scale_x >= 1 and scale_y >= 1:
        if scale_x == round(scale_x) and scale_y == round(scale_y):
            # The mean of each fx x fy block: unit taps summed (in int32 for integers), then
            # scaled (see gdp.ops.geometry).
            fx, fy = int(round(scale_x)), int(round(scale_y))
            rows = np.arange(height)[:, None] * fy + np.arange(fy)[None, :]
            cols = np.arange(width)[:, None] * fx + np.arange(fx)[None, :]
            work = dtype if dtype.startswith("float") else "int32"
            # fx, fy from the caller (resize(img, None, fx=0.5, fy=0.5) of an odd size): the
            # last blocks may run past the image, and OpenCV takes the mean of the pixels
            # they hold. Their taps past the edge weigh 0 (the weights' sums are the counts).
            partial = bool(rows.max() >= h or cols.max() >= w)
            structure, tables = _separable(
                h,
                w,
                channels,
                (np.minimum(rows, h - 1), (rows < h).astype(np.float64)),
                (np.minimum(cols, w - 1), (cols < w).astype(np.float64)),
                work,
                True,
                None,
                0,
                partial,
            )
            # OpenCV's 2x2 vector loop, (sum + 2) >> 2, takes 1, 3 and 4 channels; 2 take its
            # scalar one, rounded half to even
            vector = channels != 2
            return dict(
                structure, kind="area", fx=fx, fy=fy, partial=partial, vector=vector
            ), tables
        rows = _used(*area_taps(h, height, scale_y))
        cols = _used(*area_taps(w, width, scale_x))
        return _separable(h, w, channels, rows, cols, floats, False, 1.0, 0, True)
    rows = axis_taps(h, height, scale_y, method, ipp)
    cols = axis_taps(w, width, scale_x, method, ipp)
    if method == INTER_NEAREST:
        return _separable(h, w, channels, rows, cols, dtype, True, 1.0, 0, False)
    if dtype == "uint8":
        rows, cols = _used(rows[0], _fixed(rows[1])), _used(cols[0], _fixed(cols[1]))
        one = 1 << RESIZE_COEF_BITS
        first = _order(h, w, rows, cols)
        return _separable(h, w, channels, rows, cols, "int32", first, one, RESIZE_COEF_BITS, True)
    return _separable(h, w, channels, rows, cols, floats, False, 1.0, 0, True)


def _separable(h, w, channels, rows, cols, work, vertical_first, one, bits, weighted):
    passes, tables = [], {}
    order = [(rows, 0, h), (cols, 1, w)]
    if not vertical_first:
        order.reverse()
    for (indices, weights), axis, src in order:
        if one is not None and _is_identity((indices, weights), src, one):
            continue
        if axis == 1:  # per element of the flattened row: pixel index * channels + channel
            lanes = np.arange(channels)
            indices = (indices[:, None, :] * channels + lanes[None, :, None]).reshape(
                -1, indices.shape[1]
            )
            weights = np.repeat(weights, channels, axis=0)
        passes.append((axis, int(indices.shape[1])))
        # One array per pass, so that the program knows its columns to be of one length: the
        # indices, then the weights in `work` (indices below 2^24 are exact in float32).
        table = np.concatenate([indices, weights], axis=1) if weighted else indices
        tables[f"pass{axis}"] = np.ascontiguousarray(table, work if weighted else np.int32)
    structure = {
        "kind": "separable",
        "work": work,
        "passes": tuple(passes),
        "bits": bits * len(passes),
        "weighted": weighted,
    }
    return structure, tables
