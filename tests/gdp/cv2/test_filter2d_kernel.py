"""filter2D with a 2-D kernel over 25 taps that is not rank one runs on the cpu target through
gdp.runtime.filter2d's kernel, for every image size (it used to compile a program per size):
against cv2.filter2D for kernels from 7x7 to 21x21 and sparse ones, every border type, anchors,
delta, uint8 into uint8/int16/float32 and float32 into float32, 1 to 4 channels, sizes that
move the kernel's strips and vector blocks and images smaller than the kernel, on both thread
counts; no program compiled. And the kernel's own refusals.

Where OpenCV filters directly (uint8 kernels under 130 taps) gdp's result is identical. From
130 taps (50 into float32) OpenCV correlates by DFT, whose own result is off the exact sum by
its rounding: there uint8 results differ by at most 1, float32 ones by 1e-5 of the range."""

import cv2 as real
import numpy as np
import pytest
import skimage.data

import gdp.cv2 as cv2
from gdp.errors import InputError
from gdp.runtime import filter2d
from tests.gdp.cv2.one_thread import run_on_one_thread

BORDERS = [real.BORDER_CONSTANT, real.BORDER_REPLICATE, real.BORDER_REFLECT, real.BORDER_DEFAULT]
# Heights around the strips (16 at most, each at least as high as the kernel) and widths whose
# values move across the 64-value blocks; smaller than the kernel; one pixel.
SHAPES = [(1, 1), (5, 3), (9, 12, 3), (40, 50, 3), (33, 70, 4), (100, 129), (131, 67, 3)]


@pytest.fixture(autouse=True)
def _strict(monkeypatch):
    """Every call runs gdp's kernels: a fallthrough to OpenCV would compare OpenCV to itself."""
    monkeypatch.setenv("GDP_CV2_STRICT", "1")


def _kernel(kh, kw, seed=0, sparse=False):
    kernel = np.random.default_rng(seed).normal(size=(kh, kw)).astype(np.float32) / kw
    if sparse:  # zero taps skipped, as OpenCV's preprocess2DKernel does
        kernel[::2, 1::3] = 0
    return kernel


def _image(shape, dtype, seed):
    if dtype == np.uint8 and len(shape) == 3 and shape[2] == 3 and shape[0] > 8:
        return real.resize(skimage.data.astronaut(), (shape[1], shape[0]))
    rng = np.random.default_rng(seed)
    if dtype == np.uint8:
        return rng.integers(0, 256, shape, dtype=np.uint8)
    return (rng.normal(size=shape) * 100).astype(np.float32)


def _compare(got, want, kernel, ddepth_dtype, label):
    assert got.shape == want.shape and got.dtype == want.dtype, label
    if ddepth_dtype == np.float32:
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * scale, err_msg=label)
    elif kernel.size < 130:  # OpenCV's direct filter: the same arithmetic
        np.testing.assert_array_equal(got, want, err_msg=label)
    else:  # OpenCV's DFT
        diff = np.abs(got.astype(np.int32) - want.astype(np.int32)).max()
        assert diff <= 1, f"{label}: differs by {diff}"


def _check(shapes=SHAPES):
    cv2.clear_cache()
    kernels = {
        "7x7": _kernel(7, 7, 1),
        "9x5 sparse": _kernel(9, 5, 2, sparse=True),
        "11x11": _kernel(11, 11, 3),
        "13x13": _kernel(13, 13, 4),
        "5x21": _kernel(5, 21, 5),
    }
    types = [
        (np.uint8, -1, np.uint8),
        (np.uint8, real.CV_16S, np.int16),
        (np.uint8, real.CV_32F, np.float32),
        (np.float32, -1, np.float32),
    ]
    for i, shape in enumerate(shapes):
        for j, (name, kernel) in enumerate(kernels.items()):
            src_type, ddepth, dst_type = types[(i + j) % len(types)]
            image = _image(shape, src_type, i)
            kh, kw = kernel.shape
            for border in BORDERS:
                for anchor, delta in (((-1, -1), 0), ((0, kh - 1), 3.5), ((kw - 1, 0), -20)):
                    args = dict(anchor=anchor, delta=delta, borderType=border)
                    got = cv2.filter2D(image, ddepth, kernel, **args)
                    want = real.filter2D(image, ddepth, kernel, **args)
                    label = f"{shape} {src_type.__name__}->{ddepth} {name} {args}"
                    _compare(got, want, kernel, dst_type, label)
    assert cv2.cache_info().programs == 0


def test_kernel_matches_opencv():
    _check()


def test_kernel_on_one_thread():
    run_on_one_thread(
        f"""
        from tests.gdp.cv2.test_filter2d_kernel import _check
        _check({SHAPES[:5]!r})
        """
    )


def test_dst_zero_kernel_and_a_single_channel_axis():
    image = _image((40, 50, 3), np.uint8, 0)
    kernel = _kernel(9, 9, 7)
    want = real.filter2D(image, -1, kernel)
    dst = np.zeros_like(image)
    assert cv2.filter2D(image, -1, kernel, dst) is dst
    np.testing.assert_array_equal(dst, want)
    in_place = image.copy()  # dst the image itself: OpenCV filters a copy
    cv2.filter2D(in_place, -1, kernel, in_place)
    np.testing.assert_array_equal(in_place, want)
    zero = np.zeros((9, 9), np.float32)  # every tap zero: delta everywhere
    got = cv2.filter2D(image, real.CV_16S, zero, delta=-7)
    np.testing.assert_array_equal(got, real.filter2D(image, real.CV_16S, zero, delta=-7))
    one = image[:, :, :1]  # (h, w, 1) and not contiguous
    np.testing.assert_array_equal(cv2.filter2D(one, -1, kernel), real.filter2D(one, -1, kernel))


def test_kernel_refuses_what_it_does_not_index():
    image = np.zeros((4, 5), np.uint8)
    kernel = np.ones((3, 3), np.float32)
    with pytest.raises(InputError, match="uint8 image into uint8, int16 or float32"):
        filter2d.filter2d(image.astype(np.uint16), kernel, (1, 1), 4, np.uint16)
    with pytest.raises(InputError, match="non-empty 2-D kernel"):
        filter2d.filter2d(image, np.ones(3), (1, 1), 4, np.uint8)
    with pytest.raises(InputError, match="outside the 3x3 kernel"):
        filter2d.filter2d(image, kernel, (1, 3), 4, np.uint8)
    with pytest.raises(InputError, match="unknown border type 9"):
        filter2d.filter2d(image, kernel, (1, 1), 9, np.uint8)
