"""uint8 threshold (every kind, THRESH_OTSU too), convertScaleAbs, LUT and equalizeHist run on
the cpu target through gdp.runtime.lut's lookup, threshold and histogram kernels: against
OpenCV on real
photos and random images, at sizes that move the kernels' strips and vectors, on views and into
dst, on both thread counts; the kernels against NumPy, with and without AVX-512 VBMI."""

import cv2 as real
import numpy as np
import pytest
import skimage.data

import gdp.cv2 as cv2
from gdp.errors import InputError
from gdp.runtime import lut
from gdp.runtime.backends.tvm.kernels import run_host_kernel
from tests.gdp.cv2.one_thread import run_on_one_thread

# Pixel counts on both sides of a 64-byte vector, of a strip (STRIP_PIXELS) and of the most
# strips (MAX_STRIPS); 0 is an empty image.
COUNTS = [0, 1, 63, 64, 65, 1000, 65535, 65536, 65537, 3 * 65536 + 17, 16 * 65536 + 5, 2**21 + 3]
KINDS = [
    real.THRESH_BINARY,
    real.THRESH_BINARY_INV,
    real.THRESH_TRUNC,
    real.THRESH_TOZERO,
    real.THRESH_TOZERO_INV,
]


def _random(shape, seed):
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def _photos():
    rgb = skimage.data.astronaut()
    bgr = real.cvtColor(real.resize(rgb, (1920, 1080)), real.COLOR_RGB2BGR)
    gray = real.cvtColor(bgr, real.COLOR_BGR2GRAY)
    return [bgr, gray, skimage.data.camera(), real.cvtColor(bgr, real.COLOR_BGR2BGRA)[:37, :41]]


def _images():
    """Photos, random images of odd sizes and channel counts, one level, two levels, a view."""
    out = _photos()
    out += [_random((7, 9), 1), _random((31, 33, 3), 2), _random((1, 1), 3), _random((5, 3, 4), 4)]
    out += [np.full((11, 13), 77, np.uint8), np.where(_random((12, 10), 5) > 128, 200, 3)]
    out.append(_random((40, 60, 3), 6)[3:31:2, 50:5:-3])  # strided, reversed
    return [np.asarray(image, np.uint8) for image in out]


def _check(images=None):
    images = _images() if images is None else images
    cv2.clear_cache()
    for i, image in enumerate(images):
        label = f"image {i} {image.shape}"
        for kind in KINDS:
            for thresh, maxval in ((-5, 255), (0, 200.5), (0.5, 300), (127.9, -3), (254.5, 7)):
                got = cv2.threshold(image, thresh, maxval, kind)
                want = real.threshold(image, thresh, maxval, kind)
                assert got[0] == want[0], label
                np.testing.assert_array_equal(got[1], want[1], err_msg=f"{label} {kind} {thresh}")
            if image.ndim == 2 and kind != real.THRESH_TRUNC:
                got = cv2.threshold(image, 0, 180, kind | real.THRESH_OTSU)
                want = real.threshold(image, 0, 180, kind | real.THRESH_OTSU)
                assert got[0] == want[0], f"{label} Otsu"
                np.testing.assert_array_equal(got[1], want[1], err_msg=f"{label} Otsu {kind}")
        for alpha, beta in ((1.0, 0.0), (1.5, 3.0), (-0.7, 20.25), (300.0, -1e6)):
            got = cv2.convertScaleAbs(image, alpha=alpha, beta=beta)
            want = real.convertScaleAbs(image, alpha=alpha, beta=beta)
            np.testing.assert_array_equal(got, want, err_msg=f"{label} {alpha} {beta}")
        table = _random(256, i)
        np.testing.assert_array_equal(cv2.LUT(image, table), real.LUT(image, table), label)
        if image.ndim == 2:
            np.testing.assert_array_equal(cv2.equalizeHist(image), real.equalizeHist(image))
    assert cv2.cache_info().programs == 0


def test_functions_match_opencv():
    _check()


def test_functions_on_one_thread():
    run_on_one_thread(
        """
        from tests.gdp.cv2.test_lookup_kernels import _check, _random
        _check([_random((1080, 1920), 1), _random((33, 65, 3), 2)])
        """
    )


def test_dst_in_place_and_empty():
    image = _random((20, 30, 3), 7)
    want = real.threshold(image, 100, 255, real.THRESH_BINARY)[1]
    dst = np.zeros_like(image)
    assert cv2.threshold(image, 100, 255, real.THRESH_BINARY, dst)[1] is dst
    np.testing.assert_array_equal(dst, want)
    gray = _random((20, 30), 8)
    want = real.equalizeHist(gray)
    assert cv2.equalizeHist(gray, gray) is gray  # in place: the histogram is taken first
    np.testing.assert_array_equal(gray, want)
    empty = np.zeros((0, 5), np.uint8)
    assert cv2.threshold(empty, 9, 255, 0) == real.threshold(empty, 9, 255, 0) == (9.0, None)


@pytest.mark.parametrize("vbmi", [True, False])
def test_lookup_kernel_against_numpy(vbmi):
    if vbmi and not lut.permutes_bytes():
        pytest.skip("this CPU has no AVX-512 VBMI")
    name, text = lut.lookup_source(vbmi)
    table = _random(256, 9)
    for n in COUNTS:
        image = _random(n, n)
        for strips in {1, 3, lut._strips(n)}:
            out = np.full(n, 7, np.uint8)
            if n:
                run_host_kernel(name, text, image, out, table, strips)
            np.testing.assert_array_equal(out, table[image], err_msg=f"{n} {strips}")


def test_histogram_kernel_against_numpy():
    for n in COUNTS:
        image = _random(n, n + 1)
        np.testing.assert_array_equal(lut.histogram(image), np.bincount(image, minlength=256))
    runs = np.repeat(np.arange(256, dtype=np.uint8), 4099)  # long runs of one value
    np.testing.assert_array_equal(lut.histogram(runs), np.full(256, 4099))


@pytest.mark.parametrize("kind", KINDS)
def test_threshold_kernel_every_value_and_threshold(kind):
    levels = np.arange(256, dtype=np.uint8)
    values = np.concatenate([levels, levels[::-1], levels[:37]])[None, :]  # vectors and a tail
    for thresh in range(255):
        for maxval in (0, 200, 255):
            want = real.threshold(values, thresh, maxval, kind)[1]
            np.testing.assert_array_equal(lut.threshold(values, kind, thresh, maxval), want)


def test_kernels_refuse_what_they_do_not_take():
    with pytest.raises(InputError, match="threshold 0-254"):
        lut.threshold(np.zeros(5, np.uint8), 0, 255, 0)
    with pytest.raises(InputError, match="uint8"):
        lut.lookup(np.zeros(5, np.int8), np.zeros(256, np.uint8))
    with pytest.raises(InputError, match=r"\(256,\) uint8 table"):
        lut.lookup(np.zeros(5, np.uint8), np.zeros(255, np.uint8))
    with pytest.raises(InputError, match="uint8"):
        lut.histogram(np.zeros(5, np.float32))
