"""copyMakeBorder of uint8 images on the cpu target runs through gdp.runtime.pad's kernel: equal
to OpenCV's for every border type, constant values as OpenCV saturates them, sides of zero, wider
than the image and uneven, 1 to 4 channels, views and dst, on both thread counts."""

import cv2 as real
import numpy as np
import pytest

import gdp.cv2 as cv2
from gdp.errors import InputError
from gdp.runtime import pad as rt_pad
from tests.gdp.cv2.one_thread import run_on_one_thread

BORDERS = [
    real.BORDER_CONSTANT,
    real.BORDER_REPLICATE,
    real.BORDER_REFLECT,
    real.BORDER_WRAP,
    real.BORDER_REFLECT_101,
    real.BORDER_REFLECT_101 | real.BORDER_ISOLATED,
]
SIDES = [(0, 0, 0, 0), (1, 2, 3, 4), (16, 16, 16, 16), (40, 3, 50, 2), (0, 70, 0, 65)]
VALUES = [None, 5, (300, -4, 2.5), (1.5, 2.5, 3.5, 9)]


def _random(shape, seed):
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def _check(images):
    cv2.clear_cache()
    for image in images:
        for border in BORDERS:
            for sides in SIDES:
                for value in VALUES:
                    kw = {} if value is None else {"value": value}
                    try:
                        want = real.copyMakeBorder(image, *sides, border, **kw)
                    except real.error:  # gdp raises too (tests/gdp/cv2/test_cv2_fuzz.py)
                        continue
                    got = cv2.copyMakeBorder(image, *sides, border, **kw)
                    assert got.shape == want.shape, (image.shape, border, sides)
                    np.testing.assert_array_equal(got, want, err_msg=f"{border} {sides} {value}")
    assert cv2.cache_info().programs == 0  # every call ran the hand kernel


def test_copy_make_border_matches_opencv(strips):
    shapes = [(1, 1), (7, 9, 3), (33, 65, 4), (480, 640), (20, 30, 1), (5, 6, 2), (130, 67, 3)]
    images = [_random(s, i) for i, s in enumerate(shapes)]
    _check(images + [_random((100, 120, 3), 9)[::3, 7:]])


def test_on_one_thread():
    run_on_one_thread(
        """
        from tests.gdp.cv2.test_pad_kernel import _check, _random
        _check([_random((1080, 1920, 3), 1), _random((33, 65), 2)])
        """
    )


def test_into_dst():
    image = _random((40, 50, 3), 3)
    dst = np.empty((42, 52, 3), np.uint8)
    cv2.copyMakeBorder(image, 1, 1, 1, 1, real.BORDER_REFLECT, dst)
    np.testing.assert_array_equal(dst, real.copyMakeBorder(image, 1, 1, 1, 1, real.BORDER_REFLECT))


def test_kernel_refuses_what_it_does_not_take():
    with pytest.raises(InputError, match="uint8"):
        rt_pad.pad(np.zeros((4, 4), np.float32), 1, 1, 1, 1, real.BORDER_REFLECT)
    with pytest.raises(InputError, match="sides"):
        rt_pad.pad(np.zeros((4, 4), np.uint8), -1, 1, 1, 1, real.BORDER_REFLECT)
