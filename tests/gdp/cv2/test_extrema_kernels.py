"""minMaxLoc, normalize of uint8 images (and of float32 ones by their extremes) and countNonZero
on the cpu target run through
gdp.runtime's extrema, convert and nonzero kernels: bit for bit OpenCV's on real photos, random
images and views, on both thread counts; the kernels against NumPy at sizes that move their
strips, blocks and vectors, with the extremes placed at the edges of those (a strip's first and
last value, a block's, the tail past the last vector) and repeated."""

import cv2 as real
import numpy as np
import pytest
import skimage.data

import gdp.cv2 as cv2
from gdp.errors import InputError
from gdp.runtime import extrema, nonzero
from gdp.runtime.convert import scale_to_float32
from tests.gdp.cv2.one_thread import run_on_one_thread


def _random(shape, seed, low=0, high=256):
    return np.random.default_rng(seed).integers(low, high, shape, dtype=np.uint8)


def _images():
    bgr = real.cvtColor(real.resize(skimage.data.astronaut(), (1920, 1080)), real.COLOR_RGB2BGR)
    gray = real.cvtColor(bgr, real.COLOR_BGR2GRAY)
    out = [bgr, gray, skimage.data.camera(), bgr[5:900:3, 1000:17:-2], gray[::2, 7:]]
    out += [_random(s, i) for i, s in enumerate([(1, 1), (7, 9, 3), (33, 65, 4), (224, 224, 3)])]
    out += [np.full((50, 60), 9, np.uint8), _random((333, 517), 5, 100, 120)]
    return out


_NORMALIZE = [
    (0, 255, real.NORM_MINMAX, -1),
    (255, 0, real.NORM_MINMAX, -1),
    (50, 200, real.NORM_MINMAX, -1),
    (0.0, 1.0, real.NORM_MINMAX, real.CV_32F),
    (-1, 2, real.NORM_MINMAX, real.CV_32F),
    (1.0, 0, real.NORM_L2, real.CV_32F),
    (1000, 0, real.NORM_L2, -1),
    (100, 0, real.NORM_L1, -1),
    (3.5, 0, real.NORM_INF, real.CV_32F),
]


def _check(images):
    cv2.clear_cache()
    for image in images:
        for alpha, beta, kind, dtype in _NORMALIZE:
            got = cv2.normalize(image, None, alpha, beta, kind, dtype)
            want = real.normalize(image, None, alpha, beta, kind, dtype)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want, err_msg=f"{image.shape} {alpha, beta, kind}")
        if image.ndim == 2:
            assert cv2.minMaxLoc(image) == real.minMaxLoc(image), image.shape
            floats = image.astype(np.float32) * np.float32(0.37) - np.float32(5)
            assert cv2.minMaxLoc(floats) == real.minMaxLoc(floats), image.shape
            assert cv2.countNonZero(image) == real.countNonZero(image), image.shape
            assert cv2.countNonZero(floats) == real.countNonZero(floats), image.shape
    assert cv2.cache_info().programs == 0  # every call ran a hand kernel


def test_functions_match_opencv_bit_for_bit(strips):
    _check(_images())


def test_functions_on_one_thread():
    run_on_one_thread(
        """
        from tests.gdp.cv2.test_extrema_kernels import _check, _random
        _check([_random((1080, 1920), 1), _random((33, 65), 2), _random((480, 640, 3), 3)])
        """
    )


def test_into_dst_and_in_place():
    image = _random((480, 640), 7)
    dst = np.empty((480, 640), np.float32)
    cv2.normalize(image, dst, 0.0, 1.0, cv2.NORM_MINMAX, cv2.CV_32F)
    np.testing.assert_array_equal(
        dst, real.normalize(image, None, 0.0, 1.0, real.NORM_MINMAX, real.CV_32F)
    )
    want = real.normalize(image, None, 0, 255, real.NORM_MINMAX)
    cv2.normalize(image, image, 0, 255, cv2.NORM_MINMAX)
    np.testing.assert_array_equal(image, want)


def test_normalize_of_float32_by_its_extremes():
    """NORM_MINMAX and NORM_INF of float32 images into float32: the extremes kernel, then the
    scale kernel's fused multiply-add, bit for bit OpenCV's, for photos, negative and large
    values, a constant image, views, 1-4 channels, dst and in place; no program. An image
    holding a NaN is OpenCV's (its extremes skip NaNs); one holding an infinity the program's,
    as OpenCV's too."""
    rng = np.random.default_rng(11)
    photo = _images()[0].astype(np.float32) * np.float32(1 / 255)
    images = [
        photo,
        photo[5:900:3, 1000:17:-2, 1],
        _random((333, 517), 5).astype(np.float32) * np.float32(3.7) - np.float32(100),
        rng.standard_normal((101, 99, 4)).astype(np.float32) * np.float32(1e3),
        rng.standard_normal((7, 9, 2)).astype(np.float32),
        np.full((40, 50), 2.5, np.float32),
        rng.random((1, 17), dtype=np.float32),
    ]
    cases = [(0, 1, real.NORM_MINMAX), (1, 0, real.NORM_MINMAX), (-3.3, 255, real.NORM_MINMAX)]
    cases += [(1, 0, real.NORM_INF), (7.5, 0, real.NORM_INF)]
    cv2.clear_cache()
    for image in images:
        for alpha, beta, kind in cases:
            for dtype in (-1, real.CV_32F):
                got = cv2.normalize(image, None, alpha, beta, kind, dtype)
                want = real.normalize(image, None, alpha, beta, kind, dtype)
                assert got.dtype == want.dtype == np.float32
                np.testing.assert_array_equal(got, want, err_msg=f"{image.shape} {alpha, kind}")
    image = images[2].copy()
    want = real.normalize(image, None, 0, 1, real.NORM_MINMAX)
    dst = np.empty_like(image)
    assert cv2.normalize(image, dst, 0, 1, cv2.NORM_MINMAX) is dst
    np.testing.assert_array_equal(dst, want)
    cv2.normalize(image, image, 0, 1, cv2.NORM_MINMAX)
    np.testing.assert_array_equal(image, want)
    assert cv2.cache_info().programs == 0
    for special in (np.nan, np.inf):
        image = rng.random((20, 30), dtype=np.float32)
        image[3, 4] = special
        for alpha, beta, kind in cases[:1] + cases[3:4]:
            got = cv2.normalize(image, None, alpha, beta, kind)
            want = real.normalize(image, None, alpha, beta, kind)
            np.testing.assert_array_equal(got, want, err_msg=f"{special} {kind}")


# Sizes around the kernels' vectors (16 float32, 64 uint8), blocks (256 vectors), strips
# (a strip from 2^16 values) and the tail past the last whole vector.
_SIZES = [1, 15, 16, 17, 63, 64, 65, 200, 16384, 16385, 16447, 1 << 16, (1 << 18) + 7, 1 << 20]
_SIZES += [(1 << 21) + 13, 3 * (1 << 20) + 1]


def _placements(n):
    """Positions to put the extremes at: each edge the kernel has, where the array reaches it."""
    edges = {0, 1, n - 1, n // 2, n // 3}
    for lanes in (16, 64):
        for span in (lanes, lanes * 256):
            edges |= {span - 1, span, span + 1}
    strips = max(1, min(extrema.MAX_STRIPS, n // extrema.STRIP_VALUES))
    for s in range(1, strips + 1):
        edges |= {n // strips * s - 1, n // strips * s, n // strips * s + 1}
    return sorted(p for p in edges if 0 <= p < n)


@pytest.mark.parametrize("dtype", ["uint8", "float32"])
def test_extrema_first_positions(dtype, strips):
    rng = np.random.default_rng(11)
    for n in _SIZES:
        base = (rng.integers(10, 200, n) if dtype == "uint8" else rng.standard_normal(n)).astype(
            dtype
        )
        for where in _placements(n)[:: max(1, len(_placements(n)) // 12)]:
            values = base.copy()
            low, high = (0, 255) if dtype == "uint8" else (-100.0, 100.0)
            values[where] = low
            values[min(n - 1, where + 7)] = high
            if n > 40:  # the same extremes again later: the first one counts
                values[-1] = low
                values[n - 20] = high
            found = extrema.extrema(values)
            want = (values.min(), values.max(), int(values.argmin()), int(values.argmax()), 0)
            assert tuple(found) == want, (n, where)
            if n >= extrema.LANES[dtype]:  # (fewer values: NumPy's, which has them anyway)
                alone = extrema.extrema(values, positions=False)
                assert tuple(alone) == (*want[:2], -1, -1, 0), (n, where)
    # the extremes also in the first lane of the first strip, past its first block, after
    # their first positions in another lane of that block
    for n in [1 << 16, 1 << 20]:
        values = np.full(n, 100, dtype)
        lanes = extrema.LANES[dtype]
        values[[lanes * 300 + 3, lanes * 310]] = 0
        values[[lanes * 305 + 5, lanes * 311]] = 200
        assert tuple(extrema.extrema(values)) == (0, 200, lanes * 300 + 3, lanes * 305 + 5, 0)
    # every value equal: the first position, whatever the strips and lanes
    assert extrema.extrema(np.full(3 << 20, 7, dtype))[:4] == (7, 7, 0, 0)


def test_extrema_counts_nans():
    values = np.random.default_rng(3).standard_normal(1 << 20).astype(np.float32)
    for where in (0, 5, 1 << 19, (1 << 20) - 1):
        holed = values.copy()
        holed[where] = np.nan
        assert extrema.extrema(holed).nans == 1, where
    assert extrema.extrema(np.full(100, np.nan, np.float32)).nans == 100
    assert extrema.extrema(np.full(5, np.nan, np.float32)).nans == 5


def test_minmaxloc_of_an_image_with_nan_is_opencvs():
    image = np.random.default_rng(4).standard_normal((100, 120)).astype(np.float32)
    image[50, 60] = np.nan
    assert cv2.minMaxLoc(image) == real.minMaxLoc(image)


@pytest.mark.parametrize("dtype", nonzero.DTYPES)
def test_count_non_zero_kernel(dtype, strips):
    rng = np.random.default_rng(5)
    for n in [0, *_SIZES, 255 * 64 + 3]:
        values = (rng.integers(0, 3, n) * rng.integers(1, 100, n)).astype(dtype)
        if dtype == "float32" and n > 10:
            values[3], values[5] = np.nan, -0.0  # NaN counts, -0.0 does not (OpenCV's)
        assert nonzero.count_non_zero(values) == np.count_nonzero(values), (n, dtype)
    # a lane's uint8 count at its largest in a block (255 zeros), in every block
    assert nonzero.count_non_zero(np.zeros(5 << 20, dtype)) == 0


def test_scale_to_float32_is_a_float32_fma(strips):
    # OpenCV's v_fma: the exact value * scale + shift rounded once to float32. In 80-bit long
    # double the product of a level and a float32 is exact, and so is the sum here.
    image = _random((1000, 1001, 3), 6)
    levels = np.arange(256, dtype=np.longdouble)
    for scale, shift in [(1 / 255, 0.0), (0.15789473684210525, -16.789473684210527), (-3.0, 7.5)]:
        s32, b32 = np.float32(scale), np.float32(shift)
        table = (levels * np.longdouble(s32) + np.longdouble(b32)).astype(np.float32)
        np.testing.assert_array_equal(scale_to_float32(image, scale, shift), table[image])


def test_kernels_refuse_what_they_do_not_take():
    with pytest.raises(InputError, match="uint8 or float32"):
        extrema.extrema(np.zeros((4, 4), np.int16))
    with pytest.raises(InputError, match="non-empty"):
        extrema.extrema(np.zeros((0, 4), np.uint8))
    with pytest.raises(InputError, match="float64"):
        nonzero.count_non_zero(np.zeros(4, np.float64))
    with pytest.raises(InputError, match="uint8 or float32 array, got float64"):
        scale_to_float32(np.zeros(4, np.float64), 1.0, 0.0)
