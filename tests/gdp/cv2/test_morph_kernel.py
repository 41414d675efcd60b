"""erode, dilate and morphologyEx of uint8 images by rectangles run on the cpu target through
gdp.runtime.morph's kernel where the border clamps the window (the default constant border,
BORDER_REPLICATE): against OpenCV for 1 to 4 channels, window sizes below, at and above the
image's, every anchor corner, iterations (which OpenCV merges into one larger rectangle) and
every morphologyEx op, windows up to 15 values a side and longer ones (their own kernel), on
both thread counts; no program compiled. And the iterations of a rectangle under a reflected
border, which compile a program, as OpenCV merges them."""

import cv2 as real
import numpy as np
import skimage.data

import gdp.cv2 as cv2
from tests.gdp.cv2.one_thread import run_on_one_thread

SHAPES = [(1, 1), (2, 3), (7, 9), (33, 70, 3), (50, 64, 4), (17, 129, 2), (70, 150)]
SIZES = [(1, 1), (3, 3), (5, 5), (1, 7), (9, 2), (4, 6), (31, 31)]
OPS = [
    real.MORPH_ERODE,
    real.MORPH_DILATE,
    real.MORPH_OPEN,
    real.MORPH_CLOSE,
    real.MORPH_GRADIENT,
    real.MORPH_TOPHAT,
    real.MORPH_BLACKHAT,
]


def _random(shape, seed):
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def _check(shapes=SHAPES, sizes=SIZES):
    cv2.clear_cache()
    for i, shape in enumerate(shapes):
        image = _random(shape, i)
        for kw, kh in sizes:
            kernel = np.ones((kh, kw), np.uint8)
            for anchor in ((-1, -1), (0, 0), (kw - 1, kh - 1)):
                for border in (real.BORDER_CONSTANT, real.BORDER_REPLICATE):
                    args = dict(anchor=anchor, borderType=border)
                    label = f"{shape} {kw}x{kh} {anchor} {border}"
                    for name in ("erode", "dilate"):
                        for iterations in (1, 2):
                            got = getattr(cv2, name)(image, kernel, iterations=iterations, **args)
                            want = getattr(real, name)(image, kernel, iterations=iterations, **args)
                            np.testing.assert_array_equal(got, want, err_msg=f"{name} {label}")
                    for op in OPS:
                        got = cv2.morphologyEx(image, op, kernel, **args)
                        want = real.morphologyEx(image, op, kernel, **args)
                        np.testing.assert_array_equal(got, want, err_msg=f"op {op} {label}")
    assert cv2.cache_info().programs == 0


def test_kernel_matches_opencv(strips):
    _check()


def test_kernel_on_one_thread():
    run_on_one_thread(
        """
        from tests.gdp.cv2.test_morph_kernel import _check
        _check([(33, 70, 3), (70, 150)], [(3, 3), (5, 5), (9, 2)])
        """
    )


# Windows over 15 values on a side run the doubling kernel: heights that move its strips (as
# many as the window allows) and widths around its 64-value vectors, windows from 16 to past
# the image, lopsided ones.
LONG_SHAPES = [(16, 16), (100, 33, 3), (37, 150, 4), (241, 319)]
LONG_SIZES = [(16, 1), (1, 16), (17, 40), (40, 17), (63, 5), (31, 31), (100, 100)]


def test_long_windows_match_opencv():
    _check(LONG_SHAPES, LONG_SIZES)


def test_long_windows_on_one_thread():
    run_on_one_thread(
        f"""
        from tests.gdp.cv2.test_morph_kernel import _check
        _check({LONG_SHAPES[1:3]!r}, [(17, 40), (31, 31)])
        """
    )


def test_real_photo_and_the_default_kernel():
    bgr = real.cvtColor(real.resize(skimage.data.astronaut(), (1920, 1080)), real.COLOR_RGB2BGR)
    for image in (bgr, real.cvtColor(bgr, real.COLOR_BGR2GRAY), bgr[::2, 100:700]):
        for kernel in (np.ones((5, 5), np.uint8), None):  # None: OpenCV's 3x3
            np.testing.assert_array_equal(cv2.erode(image, kernel), real.erode(image, kernel))
            got = cv2.dilate(image, kernel, iterations=3)
            np.testing.assert_array_equal(got, real.dilate(image, kernel, iterations=3))


def test_iterations_of_a_rectangle_under_a_reflected_border():
    """OpenCV merges n iterations of a rectangle into one rectangle n - 1 sides larger; under
    a reflected border that differs from applying it n times (gdp did, and differed)."""
    image = _random((7, 9), 1)
    for kw, kh, anchor in ((3, 3, (0, 0)), (9, 2, (-1, -1))):
        kernel = np.ones((kh, kw), np.uint8)
        for name in ("erode", "dilate"):
            args = dict(anchor=anchor, iterations=2, borderType=real.BORDER_REFLECT_101)
            got = getattr(cv2, name)(image, kernel, **args)
            np.testing.assert_array_equal(got, getattr(real, name)(image, kernel, **args))


def test_the_common_calls_short_path_against_opencv():
    """erode/dilate's common call (a rectangle, one iteration, a clamping border) goes straight
    to the kernel: kernels of other dtypes and values, anchors as a tuple or a list, numpy
    integers, a hole in the kernel (not a rectangle), dst, a strided image, as OpenCV."""
    image = _random((40, 70, 3), 7)
    holed = np.ones((5, 5), np.uint8)
    holed[0, 0] = 0
    kernels = [np.full((3, 5), 2.5, np.float32), np.ones((5, 3), bool), holed]
    anchors = [(-1, -1), (0, 2), [1, 1], (np.int64(1), 0)]
    for name in ("erode", "dilate"):
        for kernel in kernels:
            for anchor in anchors:
                got = getattr(cv2, name)(image, kernel, anchor=anchor)
                want = getattr(real, name)(image, kernel, anchor=anchor)
                np.testing.assert_array_equal(got, want, err_msg=f"{name} {kernel} {anchor}")
        dst = np.zeros_like(image)
        got = getattr(cv2, name)(image, kernels[0], dst=dst)
        assert got is dst
        np.testing.assert_array_equal(dst, getattr(real, name)(image, kernels[0]))
        strided = image[::2, 5:60]
        np.testing.assert_array_equal(
            getattr(cv2, name)(strided, kernels[1]), getattr(real, name)(strided, kernels[1])
        )
