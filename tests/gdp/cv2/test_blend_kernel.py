"""addWeighted of uint8 images runs on the cpu target through gdp.runtime.blend's kernel: every
pair of uint8 values, for many weights, through its vector lanes and its scalar tail, equal to
OpenCV's (the kernel relies on LLVM contracting its multiply-adds into OpenCV's two fmas); real
photos, views and dst; both thread counts."""

import cv2 as real
import numpy as np
import pytest
import skimage.data

import gdp.cv2 as cv2
from gdp.errors import InputError
from gdp.runtime import blend
from tests.gdp.cv2.one_thread import run_on_one_thread

# Every pair (a, b), then 37 more: a tail past the last whole vector.
A = np.concatenate([np.repeat(np.arange(256), 256), np.arange(37)]).astype(np.uint8)
B = np.concatenate([np.tile(np.arange(256), 256), np.arange(37)[::-1]]).astype(np.uint8)
WEIGHTS = [(0.5, 0.5, 0.0), (0.3, 0.7, 5.0), (1.0, 1.0, 0.0), (-0.25, 1.75, 3.3)]
WEIGHTS += [(0.123456, 0.987654, -7.77), (2.5, -1.3, 100.5), (1e-8, 1.0, 0.5), (0.0, 0.0, 127.5)]
WEIGHTS += [tuple(np.random.default_rng(0).normal(0, 2, 3)) for _ in range(8)]


def _check_every_pair(weights=WEIGHTS):
    cv2.clear_cache()
    for alpha, beta, gamma in weights:
        got = cv2.addWeighted(A[:, None], alpha, B[:, None], beta, gamma)
        want = real.addWeighted(A[:, None], alpha, B[:, None], beta, gamma)
        np.testing.assert_array_equal(got, want, err_msg=str((alpha, beta, gamma)))
    assert cv2.cache_info().programs == 0


def test_every_pair_of_values_as_opencv(strips):
    _check_every_pair()


def test_on_one_thread():
    run_on_one_thread(
        """
        from tests.gdp.cv2.test_blend_kernel import WEIGHTS, _check_every_pair
        _check_every_pair(WEIGHTS[:4])
        """
    )


def test_photos_views_and_dst():
    bgr = real.cvtColor(real.resize(skimage.data.astronaut(), (1920, 1080)), real.COLOR_RGB2BGR)
    other = bgr[::-1, ::-1]  # a reversed view
    for a, b in ((bgr, other), (bgr[:, :, 0], bgr[:, :, 2]), (bgr[1:2, 1:2], bgr[3:4, 7:8])):
        np.testing.assert_array_equal(
            cv2.addWeighted(a, 0.3, b, 0.7, 5), real.addWeighted(a, 0.3, b, 0.7, 5)
        )
    dst = np.zeros_like(bgr)
    assert cv2.addWeighted(bgr, 0.6, other, 0.4, 0, dst) is dst
    np.testing.assert_array_equal(dst, real.addWeighted(bgr, 0.6, other, 0.4, 0))


def test_kernel_refuses_what_it_does_not_take():
    with pytest.raises(InputError, match="uint8"):
        blend.add_weighted(np.zeros(4, np.uint8), 1, np.zeros(4, np.float32), 1, 0)
    with pytest.raises(InputError, match="one shape"):
        blend.add_weighted(np.zeros(4, np.uint8), 1, np.zeros(5, np.uint8), 1, 0)
