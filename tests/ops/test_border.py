"""gdp.ops.border.pad on an image of free size computed in the graph (not its input: TF's own
pads serve only those), run by TensorFlow against cv2.copyMakeBorder. Each end of an axis is
padded with one block of lines (the edge line broadcast, or one slice of that end put in the
border's order): a concat of one piece per line, read by a 21x21 erosion's taps, nested TVM's
conditions ten deep and took 43 s to compile, minutes for the reflected borders (issue 19)."""

from __future__ import annotations

import cv2 as real
import numpy as np
import pytest
import tensorflow as tf

from gdp.ops import border as B

PADS = [(10, 10, 10, 10), (3, 0, 1, 7), (0, 2, 5, 0)]


def _padded(image: np.ndarray, pads, border: int, value) -> tf.types.experimental.ConcreteFunction:
    spec = tf.TensorSpec([None, None, *image.shape[2:]], tf.as_dtype(image.dtype))

    @tf.function(input_signature=[spec])
    def padded(x):
        # `x + 0`: an image computed in the graph, as a gdp.cv2.chain's cvtColor result is
        return B.pad(x + 0, *pads, border, value)

    return padded.get_concrete_function()


BORDERS = [
    (B.BORDER_CONSTANT, 0),
    (B.BORDER_CONSTANT, 255),
    (B.BORDER_REPLICATE, 0),
    (B.BORDER_REFLECT, 0),
    (B.BORDER_REFLECT_101, 0),
    (B.BORDER_WRAP, 0),
]
# (border, value, channels); a constant per channel on the colour image only
CASES = [(*b, c) for b in BORDERS for c in (1, 3)] + [(B.BORDER_CONSTANT, (9, 200, 3), 3)]


@pytest.mark.parametrize("border, value, channels", CASES)
def test_a_free_size_pad_is_opencvs_with_a_block_of_lines_an_end(border, value, channels):
    rng = np.random.default_rng(channels)
    for pads in PADS:
        for h, w in [(11, 11), (37, 13), (64, 81)]:  # longer than the pads (as callers ask)
            image = rng.integers(0, 256, (h, w, channels)).astype(np.uint8)
            image = image[:, :, 0] if channels == 1 else image
            if h == 37:  # floats whose edges hold -0.0, NaN and infinities, copied as they are
                image = (image.astype(np.float32) - 128) / 7
                edge = np.resize(np.float32([-0.0, np.nan, np.inf, -np.inf, 1.5]), image.shape[1:])
                image[0], image[-1] = edge, edge[::-1]
                image[:, 0] = image[:, -1] = -0.0
            padded = _padded(image, pads, border, value)
            top, bottom, left, right = pads
            want = real.copyMakeBorder(image, top, bottom, left, right, border, value=value)
            got = padded(image).numpy()
            np.testing.assert_array_equal(got, want, err_msg=f"{pads} {h}x{w}")
            np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
            concats = [op for op in padded.graph.get_operations() if op.type == "ConcatV2"]
            # the pieces and the axis: before, the image, after
            assert all(len(op.inputs) <= 4 for op in concats), [len(op.inputs) for op in concats]
