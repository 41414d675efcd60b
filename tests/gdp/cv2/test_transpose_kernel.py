"""transpose and rotate by 90 degrees on the cpu target run through gdp.runtime.transpose's
kernel: equal to OpenCV's for every dtype and channel count it takes, sizes that are and are not
whole blocks (and that move the strips' boundaries), views and dst, on both thread counts; pixels
of more than 16 bytes still run the compiled program. (rotate by 180: test_flip_kernel.py.)"""

import cv2 as real
import numpy as np
import pytest

import gdp.cv2 as cv2
from gdp.errors import InputError
from gdp.runtime import transpose as rt_transpose
from tests.gdp.cv2.one_thread import run_on_one_thread

ROTATIONS = [real.ROTATE_90_CLOCKWISE, real.ROTATE_90_COUNTERCLOCKWISE]
# pixels of 1, 2, 3, 4, 6, 8, 12 and 16 bytes
KINDS = [
    (np.uint8, 1),
    (np.uint8, 2),
    (np.uint8, 3),
    (np.uint8, 4),
    (np.int16, 3),
    (np.uint16, 4),
    (np.float32, 3),
    (np.float32, 4),
]


def _random(shape, dtype=np.uint8, seed=0):
    values = np.random.default_rng(seed).integers(0, 256, shape)
    return values.astype(dtype)


def _check(images):
    cv2.clear_cache()
    for image in images:
        np.testing.assert_array_equal(cv2.transpose(image), real.transpose(image))
        for code in ROTATIONS:
            got, want = cv2.rotate(image, code), real.rotate(image, code)
            np.testing.assert_array_equal(got, want, err_msg=f"{image.shape} {code}")
    assert cv2.cache_info().programs == 0  # every call ran the hand kernel


def every_pixel_kind(shapes):
    """A random image of each of KINDS at each of `shapes` (h, w)."""
    return [
        _random(s + ((channels,) if channels > 1 else ()), dtype, i)
        for i, s in enumerate(shapes)
        for dtype, channels in KINDS
    ]


def test_matches_opencv_for_every_pixel_size(strips):
    _check(every_pixel_kind([(1, 1), (7, 9), (8, 8), (9, 17), (16, 130), (130, 16), (33, 5)]))


def test_matches_opencv_on_photos_of_many_sizes():
    from skimage import data

    photo = data.astronaut()[..., ::-1]
    # strips of whole 64-row groups, rows below the last 64-row block in 8-row blocks and then
    # one by one: sizes around the boundaries of 1, 4 and 16 strips, and powers of two
    sizes = [(640, 480), (641, 483), (1279, 721), (97, 1023), (1920, 1080), (512, 1024)]
    images = [real.resize(photo, size) for size in sizes]
    _check(images + [real.cvtColor(i, real.COLOR_BGR2GRAY) for i in images])


def test_views_and_dst():
    image = _random((100, 200, 3), seed=3)[::2, 1::3]  # not contiguous
    _check([image])
    dst = np.empty((image.shape[1], image.shape[0], 3), np.uint8)
    assert cv2.rotate(image, real.ROTATE_90_CLOCKWISE, dst) is dst
    np.testing.assert_array_equal(dst, real.rotate(image, real.ROTATE_90_CLOCKWISE))
    dst = np.empty((image.shape[1], image.shape[0], 3), np.uint8)
    assert cv2.transpose(image, dst) is dst
    np.testing.assert_array_equal(dst, real.transpose(image))


def test_on_one_thread():
    run_on_one_thread(
        """
        from tests.gdp.cv2.test_transpose_kernel import _check, _random
        _check([_random((1080, 1920, 3), seed=1), _random((483, 641), seed=2)])
        """
    )


def test_wide_pixels_run_the_program():
    image = _random((9, 11, 3), np.float64, 4)  # 24-byte pixels
    cv2.clear_cache()
    np.testing.assert_array_equal(cv2.transpose(image), real.transpose(image))
    np.testing.assert_array_equal(
        cv2.rotate(image, real.ROTATE_90_CLOCKWISE), real.rotate(image, real.ROTATE_90_CLOCKWISE)
    )
    assert cv2.cache_info().programs == 2


def test_kernel_refuses_what_it_does_not_take():
    with pytest.raises(InputError, match="at most 16 bytes"):
        rt_transpose.move(np.zeros((4, 4, 3), np.float64), "transpose")
    with pytest.raises(InputError, match="expected one of"):
        rt_transpose.move(np.zeros((4, 4), np.uint8), "flip")
    with pytest.raises(InputError, match="expected out"):
        rt_transpose.move(np.zeros((4, 5), np.uint8), "transpose", np.zeros((4, 5), np.uint8))
