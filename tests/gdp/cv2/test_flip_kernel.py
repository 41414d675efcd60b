"""flip, and rotate by 180 degrees, on the cpu target run through gdp.runtime.flip's kernel:
equal to OpenCV's for every dtype and channel count it takes, every flip code, widths around
its 64-pixel steps, heights that move its strips, views, dst and in place, on both thread
counts; pixels of more than 16 bytes still run the compiled program."""

import cv2 as real
import numpy as np
import pytest

import gdp.cv2 as cv2
from gdp.errors import InputError
from gdp.runtime import flip as rt_flip
from tests.gdp.cv2.one_thread import run_on_one_thread

# pixels of 1, 2, 3, 4, 6, 8, 12 and 16 bytes, and the random images, as transpose's tests
from tests.gdp.cv2.test_transpose_kernel import _random, every_pixel_kind

CODES = [0, 1, -1, 7, -2]


def _check(images):
    cv2.clear_cache()
    for image in images:
        for code in CODES:
            got, want = cv2.flip(image, code), real.flip(image, code)
            np.testing.assert_array_equal(got, want, err_msg=f"{image.shape} {code}")
        got, want = cv2.rotate(image, real.ROTATE_180), real.rotate(image, real.ROTATE_180)
        np.testing.assert_array_equal(got, want, err_msg=f"{image.shape} 180")
    assert cv2.cache_info().programs == 0  # every call ran the hand kernel


def test_matches_opencv_for_every_pixel_size(strips):
    # widths below, at and past the 64-pixel step and two steps; heights of 1 to 17 strips
    _check(every_pixel_kind([(1, 1), (3, 63), (2, 64), (5, 65), (17, 128), (16, 130), (33, 5)]))


def test_matches_opencv_on_photos_of_many_sizes():
    from skimage import data

    photo = data.astronaut()[..., ::-1]
    sizes = [(640, 480), (641, 483), (1279, 721), (97, 1023), (1920, 1080)]
    images = [real.resize(photo, size) for size in sizes]
    _check(images + [real.cvtColor(i, real.COLOR_BGR2GRAY) for i in images])


def test_views_dst_and_in_place():
    image = _random((100, 200, 3), seed=3)[::2, 1::3]  # not contiguous
    _check([image])
    dst = np.empty(image.shape, np.uint8)
    assert cv2.flip(image, -1, dst) is dst
    np.testing.assert_array_equal(dst, real.flip(image, -1))
    dst = np.empty(image.shape, np.uint8)
    assert cv2.rotate(image, real.ROTATE_180, dst) is dst
    np.testing.assert_array_equal(dst, real.rotate(image, real.ROTATE_180))
    for code in CODES:  # dst the source itself: OpenCV flips in place
        mine, theirs = _random((37, 70, 3), seed=code + 9), _random((37, 70, 3), seed=code + 9)
        cv2.flip(mine, code, mine)
        real.flip(theirs, code, theirs)
        np.testing.assert_array_equal(mine, theirs, err_msg=f"in place {code}")


def test_on_one_thread():
    run_on_one_thread(
        """
        from tests.gdp.cv2.test_flip_kernel import _check, _random
        _check([_random((1080, 1920, 3), seed=1), _random((483, 641), seed=2)])
        """
    )


def test_wide_pixels_run_the_program():
    image = _random((9, 11, 3), np.float64, 4)  # 24-byte pixels
    cv2.clear_cache()
    np.testing.assert_array_equal(cv2.flip(image, -1), real.flip(image, -1))
    assert cv2.cache_info().programs == 1


def test_kernel_refuses_what_it_does_not_take():
    with pytest.raises(InputError, match="at most 16 bytes"):
        rt_flip.flip(np.zeros((4, 4, 3), np.float64), 1)
    with pytest.raises(InputError, match="expected out"):
        rt_flip.flip(np.zeros((4, 5), np.uint8), 1, np.zeros((5, 4), np.uint8))
