"""medianBlur of uint8, uint16 and float32 images (ksize 3 and 5) runs on the cpu target
through gdp.runtime.median's kernel: equal to OpenCV at sizes that put the row's vector steps
(64, 32 and 16 values), its border values and the strips anywhere (rows narrower than a step,
one row, one column), 1, 3 and 4 channels, few levels (ties everywhere) and a photo; views and
dst; both thread counts; and the sorting networks against NumPy's median."""

import cv2 as real
import numpy as np
import pytest
import skimage.data

import gdp.cv2 as cv2
from gdp.errors import InputError
from gdp.ops.sorting_network import median_window
from gdp.runtime import median
from tests.gdp.cv2.one_thread import run_on_one_thread

SIZES = [(1, 1), (1, 9), (9, 1), (2, 3), (5, 5), (7, 17), (4, 35), (3, 67), (7, 68), (33, 130)]
SIZES += [(301, 517)]
DTYPES = [np.uint8, np.uint16, np.float32]


def _random(rng, shape, levels: int, dtype):
    """`levels` values (ties everywhere when few) spread over the type's range; float32 ones
    signed, not whole."""
    values = rng.integers(0, levels, shape)
    if dtype == np.uint16:
        return (values * (65535 // (levels - 1))).astype(np.uint16)
    if dtype == np.float32:
        return ((values - levels / 2) * np.float32(0.37)).astype(np.float32)
    return values.astype(np.uint8)


def _evaluate(wire, values, memo):
    if wire not in memo:
        if wire[0] == "in":
            memo[wire] = values[wire[1]]
        else:
            op = np.minimum if wire[0] == "min" else np.maximum
            memo[wire] = op(_evaluate(wire[1], values, memo), _evaluate(wire[2], values, memo))
    return memo[wire]


@pytest.mark.parametrize("ksize", [3, 5])
def test_networks_are_medians(ksize):
    rng = np.random.default_rng(ksize)
    for levels in (3, 256):  # ties everywhere, and few
        values = list(rng.integers(0, levels, (ksize * ksize, 20000)))
        got = _evaluate(median_window(ksize), values, {})
        np.testing.assert_array_equal(got, np.median(np.stack(values), axis=0))


def _check_sizes(ksizes=(3, 5), sizes=SIZES, dtypes=DTYPES, channel_counts=(1, 3, 4)):
    cv2.clear_cache()
    rng = np.random.default_rng(0)
    for dtype in dtypes:
        for ksize in ksizes:
            for channels in channel_counts:
                for h, w in sizes:
                    shape = (h, w, channels) if channels > 1 else (h, w)
                    for levels in (4, 256):
                        image = _random(rng, shape, levels, dtype)
                        got = cv2.medianBlur(image, ksize)
                        assert got.dtype == dtype
                        np.testing.assert_array_equal(
                            got,
                            real.medianBlur(image, ksize),
                            err_msg=str((np.dtype(dtype).name, ksize, shape, levels)),
                        )
    assert cv2.cache_info().programs == 0


def test_sizes_as_opencv():
    # each dtype, ksize and channel count is a kernel of its own, 4 s of compile: the quick run
    # takes every uint8 one and those test_photo_views_and_dst compiles of the other dtypes
    _check_sizes(dtypes=[np.uint8])
    _check_sizes(dtypes=[np.uint16], channel_counts=(1,))
    _check_sizes(dtypes=[np.float32], channel_counts=(3,))


@pytest.mark.slow
def test_sizes_as_opencv_of_every_dtype_and_channel_count():
    _check_sizes()


def test_on_one_thread():
    run_on_one_thread(
        """
        import numpy as np
        from tests.gdp.cv2.test_median_kernel import _check_sizes
        sizes = [(7, 17), (3, 67), (33, 130)]
        _check_sizes(sizes=sizes, dtypes=[np.uint8])
        _check_sizes(sizes=sizes, dtypes=[np.float32], channel_counts=(3,))
        """
    )


def test_photo_views_and_dst():
    bgr = real.resize(skimage.data.astronaut()[:, :, ::-1], (1920, 1080))
    gray = real.cvtColor(bgr, real.COLOR_BGR2GRAY)
    images = [gray, bgr, bgr[::-2, 3:700], gray[:, ::3]]
    images += [gray.astype(np.uint16) * 257, bgr.astype(np.float32) / 255]
    for image in images:
        for ksize in (3, 5):
            np.testing.assert_array_equal(
                cv2.medianBlur(image, ksize), real.medianBlur(image, ksize)
            )
    dst = np.zeros_like(gray)
    assert cv2.medianBlur(gray, 5, dst=dst) is dst
    np.testing.assert_array_equal(dst, real.medianBlur(gray, 5))


def test_kernel_refuses_what_it_does_not_take():
    with pytest.raises(InputError, match="ksize 3 or 5"):
        median.median_blur(np.zeros((4, 4), np.uint8), 7)
    for dtype in (np.int16, np.float64):
        with pytest.raises(InputError, match="uint8, uint16 or float32"):
            median.median_blur(np.zeros((4, 4), dtype), 3)
