"""meanStdDev, mean and sumElems of uint8 images run on the cpu target through
gdp.runtime.moments' kernels (the sums with their squares, and the sums alone): bit for bit
OpenCV's on real photos, random images of 1 to 4 channels and views, on both thread counts; the
kernels' exact sums against NumPy at sizes that move their strips, vectors and int64 flushes,
with every value 255 (their lanes' largest)."""

import cv2 as real
import numpy as np
import pytest
import skimage.data

import gdp.cv2 as cv2
from gdp.errors import InputError
from gdp.runtime import moments
from tests.gdp.cv2.one_thread import run_on_one_thread


def _random(shape, seed):
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def _images():
    bgr = real.cvtColor(real.resize(skimage.data.astronaut(), (1920, 1080)), real.COLOR_RGB2BGR)
    out = [bgr, real.cvtColor(bgr, real.COLOR_BGR2GRAY), skimage.data.camera()]
    out += [_random(s, i) for i, s in enumerate([(1, 1), (7, 9, 3), (33, 65, 4), (5, 5, 2)])]
    out += [np.full((50, 60, 3), 255, np.uint8), bgr[5:900:3, 1000:17:-2]]
    return out


def _check(images):
    cv2.clear_cache()
    for image in images:
        got, want = cv2.meanStdDev(image), real.meanStdDev(image)
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape and g.dtype == w.dtype, image.shape
            np.testing.assert_array_equal(g, w, err_msg=str(image.shape))
        assert cv2.mean(image) == real.mean(image), image.shape
        assert cv2.sumElems(image) == real.sumElems(image), image.shape
    assert cv2.cache_info().programs == 0


def test_functions_match_opencv_bit_for_bit(strips):
    _check(_images())


def test_functions_on_one_thread():
    run_on_one_thread(
        """
        from tests.gdp.cv2.test_moments_kernel import _check, _random
        _check([_random((1080, 1920, 3), 1), _random((33, 65), 2)])
        """
    )


@pytest.mark.parametrize("channels", [1, 2, 3, 4])
def test_kernel_sums_exactly(channels, strips):
    sizes = [1, 5, 63, 64, 1000, 70000, 1 << 18, 3 * (1 << 18) + 7, (1 << 22) + 5]
    for pixels in sizes:
        shape = (pixels, 1, channels) if channels > 1 else (pixels, 1)
        image = _random(shape, pixels)
        totals, squares = moments.sums(image)
        values = image.reshape(-1, channels).astype(np.int64)
        np.testing.assert_array_equal(totals, values.sum(axis=0), err_msg=str(pixels))
        np.testing.assert_array_equal(squares, (values * values).sum(axis=0), err_msg=str(pixels))
        sums = moments.channel_sums(image)
        np.testing.assert_array_equal(sums, values.sum(axis=0), err_msg=str(pixels))


def test_kernel_lanes_at_their_largest():
    # 16M pixels of 255: each lane's uint32 squares reach FLUSH * 255^2 before a flush
    image = np.full((4000, 4000, 3), 255, np.uint8)
    totals, squares = moments.sums(image)
    np.testing.assert_array_equal(totals, [255 * 16_000_000] * 3)
    np.testing.assert_array_equal(squares, [65025 * 16_000_000] * 3)
    # and the sums' uint16 lanes reach CHUNKS * 255 before theirs
    np.testing.assert_array_equal(moments.channel_sums(image), [255 * 16_000_000] * 3)
    np.testing.assert_array_equal(moments.channel_sums(image[:, :, 0]), [255 * 16_000_000])


def test_kernel_refuses_what_it_does_not_take():
    with pytest.raises(InputError, match="uint8"):
        moments.sums(np.zeros((4, 4), np.float32))
    with pytest.raises(InputError, match="5 channels"):
        moments.sums(np.zeros((4, 4, 5), np.uint8))
    with pytest.raises(InputError, match="uint8"):
        moments.channel_sums(np.zeros((4, 4), np.int16))
    with pytest.raises(InputError, match="got 5"):
        moments.channel_sums(np.zeros((4, 4, 5), np.uint8))
