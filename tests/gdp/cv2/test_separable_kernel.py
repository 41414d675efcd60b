"""GaussianBlur, blur and boxFilter of uint8 images, Sobel and Scharr of uint8 into CV_16S,
sepFilter2D of uint8 by kernels OpenCV runs in 8-bit fixed point (its rounding half to even in
its vector loop and half up in its tail, at the ties such kernels make often), blur
and boxFilter of float32 (identical to OpenCV's: sums in float64), and where a program would
serve one image size only (kernels longer than 31 taps, images smaller than the kernel)
GaussianBlur and sepFilter2D of float32 run on the cpu target through
gdp.runtime.separable's kernel: against OpenCV (identical for uint8, within 1e-5 of the range
for float32) for every border type, anchors, 1 to 4 channels, sizes that move the kernel's
strips and vector blocks, tap counts on either side of its STATIC_TAPS, on both thread counts;
no program compiled. And the kernel's choice of sum types and its refusals."""

import cv2 as real
import numpy as np
import pytest
import skimage.data

import gdp.cv2 as cv2
from gdp.errors import InputError
from gdp.runtime import separable
from tests.gdp.cv2.one_thread import run_on_one_thread

BORDERS = [real.BORDER_CONSTANT, real.BORDER_REPLICATE, real.BORDER_REFLECT, real.BORDER_DEFAULT]
# (29, 263, 3): rows of blocks that read the image itself between blocks at either end that
# read the strip's line (separable._row_pass).
SHAPES = [
    (1, 1),
    (3, 4),
    (9, 12, 3),
    (40, 50, 3),
    (33, 70, 4),
    (100, 129),
    (131, 67, 2),
    (29, 263, 3),
]
# (width, height): longer than 31 taps, or larger than the smaller images; and short ones (a
# kernel of their tap counts, separable.STATIC_TAPS).
GAUSSIAN_SIZES = [(33, 33), (45, 9), (1, 35), (5, 5), (3, 7), (9, 9)]
# (20, 30): an even area over 256, whose sums times the scale can lie next to a half, where
# OpenCV's float32 vectors and float64 tail round apart (separable.SCALED_TAIL).
BOX_SIZES = [(33, 7), (7, 33), (41, 41), (5, 5), (3, 1), (8, 9), (20, 30)]
# sepFilter2D kernels OpenCV filters uint8 by in 8-bit fixed point (each weight times 256 an
# integer): gaussians of sigma 0, and (1, 2, 1) / 4
FIXED_POINT = [
    (real.getGaussianKernel(5, 0), real.getGaussianKernel(5, 0)),
    (real.getGaussianKernel(3, 0), real.getGaussianKernel(7, 0)),
    (real.getGaussianKernel(7, 0), np.array([0.25, 0.5, 0.25])),
]
# dx, dy, ksize (-1: Scharr; 1: the derivative alone)
SOBEL = [(1, 0, 3), (0, 1, 5), (1, 1, 7), (2, 0, 9), (1, 0, -1), (0, 1, 1), (2, 1, 1)]


@pytest.fixture(autouse=True)
def _strict(monkeypatch):
    """Every call runs gdp's kernels: a fallthrough to OpenCV would compare OpenCV to itself."""
    monkeypatch.setenv("GDP_CV2_STRICT", "1")


def _image(shape, seed):
    if len(shape) == 3 and shape[2] == 3 and shape[0] > 8:
        return real.resize(skimage.data.chelsea(), (shape[1], shape[0]))
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def _check(shapes=SHAPES):
    cv2.clear_cache()
    for i, shape in enumerate(shapes):
        image = _image(shape, i)
        for border in BORDERS:
            for ksize in GAUSSIAN_SIZES:
                for sigma in (0, 7.5):
                    args = dict(borderType=border)
                    got = cv2.GaussianBlur(image, ksize, sigma, **args)
                    want = real.GaussianBlur(image, ksize, sigma, **args)
                    label = f"GaussianBlur {shape} {ksize} sigma {sigma} border {border}"
                    np.testing.assert_array_equal(got, want, err_msg=label)
            for kw, kh in BOX_SIZES:
                for anchor in ((-1, -1), (0, 0), (kw - 1, kh - 1)):
                    args = dict(anchor=anchor, borderType=border)
                    label = f"{shape} {kw}x{kh} {args}"
                    got = cv2.blur(image, (kw, kh), **args)
                    np.testing.assert_array_equal(got, real.blur(image, (kw, kh), **args), label)
                    got = cv2.boxFilter(image, -1, (kw, kh), **args)
                    want = real.boxFilter(image, -1, (kw, kh), **args)
                    np.testing.assert_array_equal(got, want, err_msg=f"boxFilter {label}")
            for kx, ky in FIXED_POINT:
                got = cv2.sepFilter2D(image, -1, kx, ky, borderType=border)
                want = real.sepFilter2D(image, -1, kx, ky, borderType=border)
                label = f"sepFilter2D {shape} {len(kx)}x{len(ky)} border {border}"
                np.testing.assert_array_equal(got, want, err_msg=label)
            for dx, dy, ksize in SOBEL:
                got = cv2.Sobel(image, real.CV_16S, dx, dy, ksize=ksize, borderType=border)
                want = real.Sobel(image, real.CV_16S, dx, dy, ksize=ksize, borderType=border)
                label = f"Sobel {shape} {dx} {dy} {ksize} border {border}"
                np.testing.assert_array_equal(got, want, err_msg=label)
    _check_floats(shapes)
    assert cv2.cache_info().programs == 0


def _close(got, want, label):
    assert got.dtype == want.dtype and got.shape == want.shape, label
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * scale, err_msg=label)


def _check_floats(shapes):
    rng = np.random.default_rng(5)
    for i, shape in enumerate(shapes):
        image = (rng.normal(size=shape) * 100).astype(np.float32)
        small = min(shape[:2]) < 9
        for border in BORDERS:
            for ksize in [(33, 35), (5, 5)] if small else [(33, 35)]:
                got = cv2.GaussianBlur(image, ksize, 0, borderType=border)
                want = real.GaussianBlur(image, ksize, 0, borderType=border)
                _close(got, want, f"GaussianBlur {shape} {ksize} border {border}")
            kx = rng.normal(size=33 if i % 2 else 5).astype(np.float32)
            ky = rng.normal(size=3 if i % 2 else 37).astype(np.float32)
            args = dict(anchor=(len(kx) - 1, 0), delta=-4.5, borderType=border)
            got = cv2.sepFilter2D(image, -1, kx, ky, **args)
            want = real.sepFilter2D(image, -1, kx, ky, **args)
            _close(got, want, f"sepFilter2D {shape} {len(kx)}x{len(ky)} {args}")
            # box filters of float32: sums in float64 as OpenCV's, so the same values
            for kw, kh in BOX_SIZES[::2] if small else BOX_SIZES:
                args = dict(anchor=(0, kh - 1), borderType=border)
                got = cv2.boxFilter(image, -1, (kw, kh), **args)
                want = real.boxFilter(image, -1, (kw, kh), **args)
                label = f"boxFilter float32 {shape} {kw}x{kh} {args}"
                np.testing.assert_array_equal(got, want, err_msg=label)
                np.testing.assert_array_equal(cv2.blur(image, (kw, kh)), real.blur(image, (kw, kh)))


def test_kernel_matches_opencv():
    _check()


def test_kernel_on_one_thread():
    run_on_one_thread(
        f"""
        from tests.gdp.cv2.test_separable_kernel import _check
        _check({SHAPES[:5]!r})
        """
    )


def test_dst_and_large_photo():
    photo = real.resize(skimage.data.astronaut(), (301, 203))
    want = real.GaussianBlur(photo, (51, 51), 0)
    dst = np.zeros_like(photo)
    assert cv2.GaussianBlur(photo, (51, 51), 0, dst) is dst
    np.testing.assert_array_equal(dst, want)
    in_place = photo.copy()
    cv2.blur(in_place, (35, 35), in_place)
    np.testing.assert_array_equal(in_place, real.blur(photo, (35, 35)))


def test_sep_filter_of_fixed_point_kernels_at_every_vector_end():
    # rows of every width up to 3 vectors (OpenCV's tail rounds up where its loop rounds to
    # even), a photo, dst, deltas; a kernel OpenCV filters in float32 keeps the program
    cv2.clear_cache()
    kernel = real.getGaussianKernel(5, 0)
    for width in range(1, 50):
        image = _image((20, width), width)
        want = real.sepFilter2D(image, -1, kernel, kernel)
        np.testing.assert_array_equal(cv2.sepFilter2D(image, -1, kernel, kernel), want, str(width))
    photo = real.resize(skimage.data.astronaut(), (1921, 1079))
    dst = np.zeros_like(photo)
    assert cv2.sepFilter2D(photo, -1, kernel, kernel, dst) is dst
    np.testing.assert_array_equal(dst, real.sepFilter2D(photo, -1, kernel, kernel))
    # delta, added to the fixed-point sums as OpenCV rounds it: halves, values of 16 fractional
    # bits and not, negative (the results at least 0)
    for delta in (0.5, 3.25, -2.5, 0.3, 1 / 3, 100.7, -300.0, 255.5):
        for shape in ((30, 77), (17, 33, 3)):
            image = _image(shape, 7)
            want = real.sepFilter2D(image, -1, kernel, kernel, delta=delta)
            got = cv2.sepFilter2D(image, -1, kernel, kernel, delta=delta)
            np.testing.assert_array_equal(got, want, f"{shape} delta {delta}")
    assert cv2.cache_info().programs == 0
    sigma = real.getGaussianKernel(5, 1.3)
    cv2.sepFilter2D(photo, -1, sigma, sigma)
    assert cv2.cache_info().programs == 1


def test_fixed_point_weights_are_opencvs_choice():
    from gdp.cv2.filters import _fixed_point_weights

    gaussian = real.getGaussianKernel(5, 0).ravel()
    np.testing.assert_array_equal(_fixed_point_weights(gaussian, 2), [16, 64, 96, 64, 16])
    assert _fixed_point_weights(gaussian, 1) is None  # not symmetric about its anchor
    assert _fixed_point_weights(real.getGaussianKernel(5, 1.3).ravel(), 2) is None  # not x/256
    assert _fixed_point_weights(np.array([0.5, -0.25, 0.5, 0.25]), 1) is None  # negative
    assert _fixed_point_weights(np.array([0.5, 0.5, 0.5]), 1) is None  # sums to 1.5
    assert _fixed_point_weights(np.array([0.0, 1.0, 0.0]), 1) is None  # integers
    np.testing.assert_array_equal(
        _fixed_point_weights(np.array([0.25, 0.5, 0.25]), 1), [64, 128, 64]
    )


def test_sum_types_hold_every_partial_sum():
    assert separable.sum_types([1] * 5, [1] * 5) == ("int16", "int16")  # 255 * 25
    assert separable.sum_types([-1, 0, 1], [1, 2, 1]) == ("int16", "int16")  # Sobel
    gaussian = [16, 64, 96, 64, 16]  # 8-bit fixed point: rows up to 255 * 256
    assert separable.sum_types(gaussian, gaussian) == ("uint16", "int32")
    assert separable.sum_types([1] * 200, [1]) == ("uint16", "uint16")  # 255 * 200
    assert separable.sum_types([-1] + [1] * 199, [1]) == ("int32", "int32")  # signed, > 32767
    # a negative offset (sepFilter2D's delta) makes the column sums signed
    binomial = [1, 4, 6, 4, 1]
    assert separable.sum_types(binomial, binomial, 128) == ("int16", "uint16")
    assert separable.sum_types(binomial, binomial, 128, negative=True) == ("int16", "int32")


def test_kernel_refuses_what_it_does_not_index():
    image = np.zeros((4, 5), np.uint8)
    ones = np.ones(3)
    with pytest.raises(InputError, match="finish must be one of"):
        separable.separable(image, ones, ones, (1, 1), real.BORDER_DEFAULT, "median")
    with pytest.raises(InputError, match="uint8 image"):
        separable.separable(
            image.astype(np.float32), ones, ones, (1, 1), real.BORDER_DEFAULT, "box"
        )
    with pytest.raises(InputError, match="of integers for uint8 images"):
        separable.separable(image, ones / 3, ones, (1, 1), real.BORDER_DEFAULT, "int16")
    with pytest.raises(InputError, match="outside the 3x3 kernel"):
        separable.separable(image, ones, ones, (3, 1), real.BORDER_DEFAULT, "box")
    with pytest.raises(InputError, match="unknown border type 9"):
        separable.separable(image, ones, ones, (1, 1), 9, "box")
    with pytest.raises(InputError, match="a box's kernels are ones"):
        separable.separable(image, ones * 2, ones, (1, 1), real.BORDER_DEFAULT, "box")
