"""OpenCV's image borders as TF ops: which source pixel each pixel outside the image reads.

gdp.ops.border_index holds OpenCV's borderInterpolate, exactly (small images included: a
1-pixel-wide image reflects onto itself). `pad` turns the index list of each axis into the
fewest slices (runs ascending or descending by one) and concatenates them, so the padded image
is plain data movement that a backend inlines into the filter reading it; a constant border is
a fill.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from gdp.ops.border_index import (
    BORDER_CONSTANT,
    BORDER_ISOLATED,
    BORDER_NAMES,
    BORDER_REFLECT,
    BORDER_REFLECT_101,
    BORDER_REPLICATE,
    BORDER_WRAP,
    axis_map,
)
from gdp.ops.scalar import saturated_scalar


def _runs(indices: list[int]) -> list[tuple[int, int, int]]:
    """(first, count, step) runs of indices stepping by +1 or -1; constant pixels (-1) form
    runs of step 0."""
    runs: list[list[int]] = []
    for i in indices:
        if runs:
            first, count, step = runs[-1]
            last = first + (count - 1) * step
            if i == -1 and first == -1:
                runs[-1][1] += 1
                continue
            if i != -1 and first != -1:
                if count == 1 and abs(i - first) == 1:
                    runs[-1] = [first, 2, i - first]
                    continue
                if count > 1 and i == last + step:
                    runs[-1][1] += 1
                    continue
        runs.append([i, 1, 1 if i != -1 else 0])
    return [tuple(r) for r in runs]


def _pad_axis(image: tf.Tensor, axis: int, before: int, after: int, border: int, value):
    length = image.shape[axis]
    if length is None:
        raise ValueError("pad: the padded axes need static sizes")
    indices = axis_map(length, before, after, border).tolist()
    pieces = []
    for first, count, step in _runs(indices):
        index = [slice(None)] * image.shape.rank
        if step == 0:
            shape = list(image.shape)
            shape[axis] = count
            pieces.append(tf.broadcast_to(tf.constant(value, image.dtype), shape))
            continue
        if step == 1:
            index[axis] = slice(first, first + count)
        else:
            last = first - count + 1
            index[axis] = slice(first, last - 1 if last > 0 else None, -1)
        pieces.append(image[tuple(index)])
    return pieces[0] if len(pieces) == 1 else tf.concat(pieces, axis=axis)


def border_value(value, image: tf.Tensor) -> np.ndarray:
    """OpenCV's Scalar `value` as the pixel of a constant border of `image` (saturated_scalar:
    one number per channel of its dtype; a scalar for a 2-D image)."""
    channels = image.shape[2] if image.shape.rank == 3 else 1
    scalar = saturated_scalar(value, channels, image.dtype.as_numpy_dtype)
    return scalar if image.shape.rank == 3 else scalar[0]


def pad(
    image: tf.Tensor,
    top: int,
    bottom: int,
    left: int,
    right: int,
    border: int = BORDER_REFLECT_101,
    value: float = 0.0,
    gather: bool = False,
) -> tf.Tensor:
    """Pad the first two axes of an HW or HWC image as cv2.copyMakeBorder does. `value` is the
    constant of BORDER_CONSTANT: a number, or OpenCV's Scalar (one number per channel, missing
    ones 0: cv2's `value=9` on a BGR image is (9, 0, 0)). `gather`: an image of any size that
    is no graph input is padded by one gather an axis (pad_any_size)."""
    border &= ~BORDER_ISOLATED
    if border not in BORDER_NAMES:
        raise ValueError(f"unknown border type {border}")
    if border == BORDER_CONSTANT:
        value = border_value(value, image)
    if image.shape[0] is None or image.shape[1] is None:
        return pad_any_size(image, top, bottom, left, right, border, value, gather)
    rows = _pad_axis(image, 0, top, bottom, border, value) if top or bottom else image
    return _pad_axis(rows, 1, left, right, border, value) if left or right else rows


def pad_any_size(
    image: tf.Tensor,
    top: int,
    bottom: int,
    left: int,
    right: int,
    border: int,
    value=0.0,
    gather: bool = False,
) -> tf.Tensor:
    """`pad` for an image of any size larger than the padding (its static size may be unknown:
    a shape-generic program), with `value` the constant border's pixel (a number, or one per
    channel as border_value gives it).

    BORDER_REFLECT_101 (OpenCV's default) and BORDER_CONSTANT with one value are TF's own pads
    (ONNX Pad reflect and constant): TVM computes them inside the stencil that reads them, where
    the slices and concats below are kernels of their own that write the padded image out (2.5x
    slower on a 1080p GaussianBlur). TF has no pad that replicates, and its SYMMETRIC
    (BORDER_REFLECT) reaches ONNX as a scatter and compress graph: those two keep the slices.
    So does an image computed inside a gdp.cv2.chain: TVM's importer converts Pad only where
    its input's extents are known expressions, and after some ops (cvtColor's gray) they are
    not; the slices take any. With `gather`, each axis is one gather by the border's index map
    instead (_gather_axis): a stage of a stacked morphology (an opening's dilation of its
    erosion), whose slices and concat of one line per padded position TVM took minutes to
    compile for run-time extents (a 21x21 opening: 6 min, gathered 5 s); the gather's indices
    are kernels of their own, so the stencils gdp tunes keep the slices."""
    border &= ~BORDER_ISOLATED
    values = np.unique(np.ravel(value))
    if (border in (BORDER_REFLECT_101, BORDER_CONSTANT)) and _from_graph_input(image):
        pads = [[top, bottom], [left, right]] + [[0, 0]] * (image.shape.rank - 2)
        if border == BORDER_REFLECT_101:
            return tf.pad(image, pads, mode="REFLECT")
        if values.size == 1:
            fill = tf.constant(values[0], image.dtype)
            return tf.pad(image, pads, mode="CONSTANT", constant_values=fill)
        if image.shape.rank == 3 and np.all(np.isfinite(values)):
            # A constant per channel (OpenCV's Scalar (9, 0, 0) on BGR): the image padded with
            # 0, plus the constants where a pad of zeros with 1 marks the border. The edge lines
            # below made a 21x21 erosion's program take 28 s to compile, and a stack of one pad
            # per channel failed TVM's compile for run-time sizes; these pads are TF's own.
            zeros = tf.cast(tf.logical_and(image < 0, image > 0), image.dtype)  # NaN too
            border_ = tf.pad(zeros, pads, constant_values=tf.constant(1, image.dtype))
            fill = tf.constant(np.ravel(value), image.dtype)
            return tf.pad(image, pads) + border_ * fill
    pad_axis = _gather_axis if gather else _pad_axis_any_size
    rows = pad_axis(image, 0, top, bottom, border, value)
    return pad_axis(rows, 1, left, right, border, value)


def _from_graph_input(x: tf.Tensor) -> bool:
    """Whether `x` is a graph's input, or a cast of one."""
    op = x.op
    while op.type in ("Cast", "Identity") and op.inputs:
        op = op.inputs[0].op
    return op.type == "Placeholder"


def along(x: tf.Tensor, axis: int, part: slice) -> tf.Tensor:
    """x[..., part, ...] with `part` on `axis`."""
    index = [slice(None)] * x.shape.rank
    index[axis] = part
    return x[tuple(index)]


def _pad_axis_any_size(x: tf.Tensor, axis: int, before: int, after: int, border: int, value):
    """_pad_axis for an axis of any length L > before, after (its static size may be unknown):
    a concat of three pieces, each end's padded lines one block taken from that end of the axis
    (BORDER_WRAP's too: for such an L it wraps once)."""
    if not before and not after:
        return x
    if border in (BORDER_CONSTANT, BORDER_REPLICATE):
        # The lines beyond each end as one block (an edge line broadcast over `n` lines), so
        # the concat has three pieces, not one per line: one piece per line (10 a side), read
        # by a 21x21 erosion's taps, nested TVM's conditions 10 deep in every tap, and the
        # erosion of a chain's gray took 43 s to compile.
        def block(first: bool, n: int) -> list[tf.Tensor]:
            if not n:
                return []
            line = along(x, axis, slice(0, 1) if first else slice(-1, None))
            lines = np.ones([n if k == axis else 1 for k in range(x.shape.rank)])
            if border == BORDER_REPLICATE:  # times 1: -0.0 stays -0.0, as OpenCV copies it
                return [line * tf.constant(lines.astype(x.dtype.as_numpy_dtype))]
            # The fill: zeros from a comparison that is false for every value (NaN included),
            # plus the value (per channel, on the last axis). tf.zeros_like of a run-time shape
            # becomes ConstantOfShape, which TVM's importer takes only for a static shape.
            zeros = tf.cast(tf.logical_and(line < 0, line > 0), x.dtype)
            fill = lines * np.asarray(value)
            return [zeros + tf.constant(fill.astype(x.dtype.as_numpy_dtype))]

        head = block(True, before)
        tail = block(False, after)
    else:
        # Each end's lines as one slice of static extent from that end, in the border's order
        # by a gather of static positions: a slice with a negative step of a run-time extent
        # has no extent the shape-generic compile can prove, and one concat piece per line
        # nested TVM's conditions in every tap (a 21x21 erosion of a computed image: 173 s to
        # compile, a 31x31 dilation 665 s).
        def lines(first: bool, n: int, order: range | None) -> list[tf.Tensor]:
            part = along(x, axis, slice(0, n) if first else slice(-n, None))
            return [part if order is None else tf.gather(part, list(order), axis=axis)]

        if border == BORDER_REFLECT:  # x[k-1] .. x[0] | x | x[L-1] .. x[L-k]
            head = lines(True, before, range(before - 1, -1, -1)) if before else []
            tail = lines(False, after, range(after - 1, -1, -1)) if after else []
        elif border == BORDER_WRAP:  # x[L-k] .. x[L-1] | x | x[0] .. x[k-1]
            head = lines(False, before, None) if before else []
            tail = lines(True, after, None) if after else []
        else:  # BORDER_REFLECT_101: x[k] .. x[1] | x | x[L-2] .. x[L-1-k]
            head = lines(True, before + 1, range(before, 0, -1)) if before else []
            tail = lines(False, after + 1, range(after - 1, -1, -1)) if after else []
    pieces = [*head, x, *tail]
    return pieces[0] if len(pieces) == 1 else tf.concat(pieces, axis=axis)


def _gather_axis(x: tf.Tensor, axis: int, before: int, after: int, border: int, value):
    """_pad_axis_any_size as one gather of the axis by the border's index map over
    [-before, L + after) (BORDER_WRAP's too: for such an L it wraps once), the constant
    border's positions then filled."""
    if not before and not after:
        return x
    # The positions as values computed from the data (a running count of ones along the
    # axis), not from tf.shape: TVM's ONNX importer refuses arithmetic on a run-time shape.
    first = [0] * x.shape.rank  # the axis's line through the first value
    first[axis] = slice(None)
    line = x[tuple(first)]
    # 1 for every value, NaN too (no value is both below and above 0); tf.ones_like of a
    # run-time shape becomes ConstantOfShape, which TVM's importer takes only for a static one
    ones = tf.cast(tf.logical_not(tf.logical_and(line < 0, line > 0)), tf.int32)
    inner = tf.cumsum(ones) - 1
    n = tf.reduce_sum(ones)
    i = tf.concat(
        [tf.range(-before, 0, dtype=tf.int32), inner, n + tf.range(after, dtype=tf.int32)], 0
    )
    if border in (BORDER_CONSTANT, BORDER_REPLICATE):
        index = tf.clip_by_value(i, 0, n - 1)
    elif border == BORDER_REFLECT:  # x[k-1] .. x[0] | x | x[L-1] .. x[L-k]
        index = tf.where(i < 0, -1 - i, i)
        index = tf.where(index >= n, 2 * n - 1 - index, index)
    elif border == BORDER_WRAP:  # x[L-k] .. x[L-1] | x | x[0] .. x[k-1]
        # one wrap, by compares: a floor mod by the run-time n is an integer division gdp
        # refuses (its divisor could be zero, where TF raises)
        index = tf.where(i < 0, i + n, tf.where(i >= n, i - n, i))
    else:  # BORDER_REFLECT_101: x[k] .. x[1] | x | x[L-2] .. x[L-1-k]
        index = tf.abs(i)
        index = tf.where(index >= n, 2 * n - 2 - index, index)
    out = tf.gather(x, index, axis=axis)
    if border != BORDER_CONSTANT:
        return out
    inside = tf.logical_and(i >= 0, i < n)
    for k in range(x.shape.rank):  # along `axis`, broadcast over the others
        if k != axis:
            inside = tf.expand_dims(inside, k)
    fill = tf.constant(np.asarray(value, x.dtype.as_numpy_dtype))
    return tf.where(inside, out, fill)


def window(start: int, taps: int) -> slice:
    """Tap `start` of a `taps`-long kernel along an axis padded by taps - 1: the slice
    [start : start + L] (L the unpadded length) cut from both ends, so that it is written for
    an axis of any length."""
    return slice(start, start - (taps - 1) if start < taps - 1 else None)


def shifted_views(padded: tf.Tensor, kh: int, kw: int, offsets) -> list[tf.Tensor]:
    """The windows' tap (dy, dx) of a (kh, kw) kernel over `padded` for each (dy, dx) of
    `offsets`: padded[dy : dy + H, dx : dx + W] for an image of any size."""
    return [padded[window(dy, kh), window(dx, kw)] for dy, dx in offsets]
