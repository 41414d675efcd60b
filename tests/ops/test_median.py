"""gdp.ops.filters' medians of sorted columns (median_3x3, median_5x5) against the median of
every window computed by NumPy (np.median of the 9 or 25 taps): random values, and values of
four levels only, where ties in every window would show a rank taken from the wrong stage."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from gdp.ops import filters as F


def _window_medians(padded: np.ndarray, k: int) -> np.ndarray:
    h, w = padded.shape[0] - (k - 1), padded.shape[1] - (k - 1)
    taps = [padded[dy : dy + h, dx : dx + w] for dy in range(k) for dx in range(k)]
    return np.median(np.stack(taps), axis=0)


@pytest.mark.parametrize("k", [3, 5])
@pytest.mark.parametrize("levels", [256, 4, 2])
def test_sorted_column_medians_are_exact(k, levels):
    rng = np.random.default_rng(k * 1000 + levels)
    # Widths around the stages' shifts (a window wider than the rest of the row, one pixel).
    for shape in [(k, k), (k + 1, k + 2), (40, 57), (9, 130)]:
        padded = rng.integers(0, levels, (*shape, 2)).astype(np.float32)
        median = F.median_3x3 if k == 3 else F.median_5x5
        got = median(tf.constant(padded)).numpy()
        np.testing.assert_array_equal(got, _window_medians(padded, k))


@pytest.mark.parametrize("dtype", [tf.uint8, tf.uint16, tf.int16, tf.float32])
@pytest.mark.parametrize("native", [False, True])
def test_median_keeps_the_dtype(dtype, native):
    # 16-bit integers are sorted as int32 unless the backend has 16-bit min and max.
    rng = np.random.default_rng(5)
    x = rng.integers(0, 200, (11, 13, 3)).astype(dtype.as_numpy_dtype)
    got = F.median(tf.constant(x), 5, native_16bit=native)
    assert got.dtype == dtype
    padded = np.pad(x, ((2, 2), (2, 2), (0, 0)), mode="edge")
    np.testing.assert_array_equal(got.numpy(), _window_medians(padded, 5))
