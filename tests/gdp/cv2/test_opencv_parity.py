"""Calls OpenCV accepts that gdp.cv2 used to refuse or answer differently (issue 21's cv2 fuzz):
each must now give OpenCV's answer (its shape, dtype and values), run or fall through."""

from __future__ import annotations

import cv2 as real
import numpy as np
import pytest
import skimage.data

import gdp.cv2 as cv2
from gdp.cv2 import common


@pytest.fixture(scope="module")
def photo() -> np.ndarray:
    return real.resize(skimage.data.astronaut()[..., ::-1], (67, 53))


def _same(got, want):
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _same(g, w)
        return
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray)
        assert (got.shape, got.dtype) == (want.shape, want.dtype)
        np.testing.assert_array_equal(got, want)
        return
    assert got == want or (np.isnan(got) and np.isnan(want))


@pytest.mark.parametrize(
    "call",
    [
        lambda cv, x: cv.GaussianBlur(x, (5, 5), 0),
        lambda cv, x: cv.blur(x, (3, 3)),
        lambda cv, x: cv.threshold(x, 100, 255, real.THRESH_BINARY),
        lambda cv, x: cv.flip(x, 1),
        lambda cv, x: cv.resize(x, (31, 17), interpolation=real.INTER_NEAREST),
    ],
    ids=["GaussianBlur", "blur", "threshold", "flip", "resize"],
)
def test_one_channel_axis_is_dropped_as_opencv_does(photo, call):
    gray = real.cvtColor(photo, real.COLOR_BGR2GRAY)[..., None]  # HxWx1
    _same(call(cv2, gray), call(real, gray))


def test_nan_statistics_agree_with_opencv():
    image = np.random.default_rng(1).random((9, 11), dtype=np.float32)
    image[3, 4] = np.nan
    image[0, 0] = 0
    assert cv2.countNonZero(image) == real.countNonZero(image)
    _same(cv2.minMaxLoc(image), real.minMaxLoc(image))
    _same(
        cv2.minMaxLoc(np.full((4, 5), np.nan, np.float32)),
        real.minMaxLoc(np.full((4, 5), np.nan, np.float32)),
    )


def test_calls_gdp_does_not_take_run_as_opencv(photo, monkeypatch):
    common.RESCUED.clear()
    wide = photo.astype(np.uint16) * 200
    args = (wide, (5, 3), 1.5)
    kwargs = {"sigmaY": 1.2, "borderType": real.BORDER_WRAP}
    _same(cv2.GaussianBlur(*args, **kwargs), real.GaussianBlur(*args, **kwargs))
    gray = real.cvtColor(photo, real.COLOR_BGR2GRAY)
    dx, dy = real.Sobel(gray, real.CV_16S, 1, 0), real.Sobel(gray, real.CV_16S, 0, 1)
    _same(cv2.Canny(dx, dy, 50, 150), real.Canny(dx, dy, 50, 150))
    swapped = gray.astype(">f4")  # big-endian: OpenCV reads it as it reads it
    _same(cv2.blur(swapped, (3, 3)), real.blur(swapped, (3, 3)))
    empty = np.zeros((0, 0), np.uint8)
    _same(cv2.threshold(empty, 1, 255, 0), real.threshold(empty, 1, 255, 0))
    monkeypatch.setenv("GDP_CV2_STRICT", "1")
    with pytest.raises(cv2.FallthroughError, match="BORDER_WRAP"):
        cv2.GaussianBlur(*args, **kwargs)


def test_what_opencv_would_crash_on_is_a_clear_error():
    empty = np.zeros((0, 0), np.uint8)
    with pytest.raises(real.error, match="empty"):
        cv2.minMaxLoc(empty)  # OpenCV 5.0 dies of SIGFPE
    with pytest.raises(real.error, match="empty"):
        cv2.copyMakeBorder(empty, 1, 1, 1, 1, real.BORDER_REFLECT)  # OpenCV loops forever


def test_bad_dst_is_an_opencv_error_and_writes_nothing(photo):
    dst = np.zeros_like(photo)
    dst.flags.writeable = False
    with pytest.raises(real.error, match="read-only"):
        cv2.GaussianBlur(photo, (3, 3), 0, dst=dst)
    assert not dst.any()
    out = np.zeros(photo.shape[:2] + (1,), np.uint8)  # HxWx1 dst of an HxW result: reused
    gray = real.cvtColor(photo, real.COLOR_BGR2GRAY)
    assert cv2.blur(gray, (3, 3), dst=out) is out
    np.testing.assert_array_equal(out[..., 0], real.blur(gray, (3, 3)))


@pytest.mark.parametrize("ksize", [(1, 1), (2, 1), (2, 2), (4, 3), (6, 5), (16, 16), (17, 16)])
def test_uint8_box_filter_rounds_as_opencv(ksize):
    """OpenCV's uint8 box filter up to 256 taps is fixed point that rounds a half up (and makes
    a 2-tap mean of 7s 8). A row 64 wide: OpenCV's scalar tail (past its vectors) wraps a 2-tap
    mean of 255s to 0 where its vector code gives 255, as gdp does."""
    rng = np.random.default_rng(sum(ksize))
    constant = np.full((9, 64), 255, np.uint8)
    for image in (rng.integers(0, 256, (23, 37, 3), dtype=np.uint8), constant, constant - 248):
        np.testing.assert_array_equal(cv2.blur(image, ksize), real.blur(image, ksize))


_DEPTH_CALLS = {
    "Sobel": lambda cv, x, d: cv.Sobel(x, d, 1, 0),
    "sepFilter2D": lambda cv, x, d: cv.sepFilter2D(x, d, np.ones(3), np.ones(3)),
    "filter2D": lambda cv, x, d: cv.filter2D(x, d, np.ones((3, 3), np.float32)),
    "Laplacian": lambda cv, x, d: cv.Laplacian(x, d),
    "Laplacian5": lambda cv, x, d: cv.Laplacian(x, d, ksize=5),
}
_DEPTHS = (real.CV_8U, real.CV_16U, real.CV_16S, real.CV_32S, real.CV_32F, real.CV_64F)


def _depth_pairs(func: str, refused: bool):
    """(image, depth) of every source dtype and result depth that OpenCV refuses (or takes)."""
    for dtype in (np.uint8, np.uint16, np.int16, np.float32, np.float64):
        image = np.arange(30, dtype=dtype).reshape(5, 6)
        for depth in _DEPTHS:
            try:
                _DEPTH_CALLS[func](real, image, depth)
                takes = True
            except real.error:
                takes = False
            if takes != refused:
                yield image, depth


@pytest.mark.parametrize("func", list(_DEPTH_CALLS))
def test_result_depths_opencv_refuses_are_refused(func):
    for image, depth in _depth_pairs(func, refused=True):
        with pytest.raises(real.error):
            _DEPTH_CALLS[func](cv2, image, depth)


# slow: each pair OpenCV takes compiles a program (144 s of `make test`)
@pytest.mark.slow
@pytest.mark.parametrize("func", list(_DEPTH_CALLS))
def test_result_depths_opencv_takes_have_its_dtype(func):
    for image, depth in _depth_pairs(func, refused=False):
        want = _DEPTH_CALLS[func](real, image, depth)
        assert _DEPTH_CALLS[func](cv2, image, depth).dtype == want.dtype, (image.dtype, depth)


def test_blob_from_image_refuses_what_opencv_refuses(photo):
    two = np.ascontiguousarray(photo[..., :2])
    for call in (
        lambda cv: cv.dnn.blobFromImage(two, size=(24, 24)),
        lambda cv: cv.dnn.blobFromImages([two, two], size=(24, 24)),
    ):
        with pytest.raises(real.error):
            call(real)
        with pytest.raises(real.error):
            call(cv2)
    wide = photo.astype(np.int16)  # not accelerated: OpenCV's own answer, from the image given
    want = real.dnn.blobFromImages([wide, wide], 1 / 255, (24, 24), swapRB=True)
    _same(cv2.dnn.blobFromImages([wide, wide], 1 / 255, (24, 24), swapRB=True), want)


def test_colour_conversions_opencv_takes_beyond_its_tables(photo):
    gray = real.cvtColor(photo, real.COLOR_BGR2GRAY)
    for code in (real.COLOR_BGR2RGB, real.COLOR_BGRA2BGR):
        _same(cv2.cvtColor(gray, code), real.cvtColor(gray, code))
    with pytest.raises(real.error, match="channels"):
        cv2.cvtColor(gray, real.COLOR_BGR2HSV)


@pytest.mark.parametrize("dtype", [np.uint8, np.float64])
def test_a_median_of_one_pixel_is_a_copy_and_even_or_negative_sizes_are_errors(photo, dtype):
    """medianBlur(img, 1) is OpenCV's copy of any image; gdp refused it with an error, which
    only OpenCV's answer rescued (the styles fuzz). An even or negative ksize is an error in
    both."""
    image = np.dstack([photo, photo[..., :1]]).astype(dtype)  # 4 channels
    rescued = sum(common.RESCUED.values())
    got = cv2.medianBlur(image, 1)
    _same(got, real.medianBlur(image, 1))
    assert got is not image and not np.shares_memory(got, image)
    assert sum(common.RESCUED.values()) == rescued
    for ksize in (0, 2, -1, -3):
        with pytest.raises(real.error):
            real.medianBlur(image, ksize)
        with pytest.raises(real.error):
            cv2.medianBlur(image, ksize)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("morph", ["erode", "dilate"])
def test_a_window_wholly_outside_takes_opencvs_finite_border_value(photo, dtype, morph):
    """A cross kernel anchored at (0, 0): the bottom-right pixel's taps all lie outside the
    image, so its value is the default border's, which OpenCV makes -FLT_MAX (-DBL_MAX) for
    a float dilate and FLT_MAX (DBL_MAX) for an erode; gdp padded with an infinity."""
    image = photo.astype(dtype)
    cross = real.getStructuringElement(real.MORPH_CROSS, (3, 3))
    got = getattr(cv2, morph)(image, cross, anchor=(0, 0))
    want = getattr(real, morph)(image, cross, anchor=(0, 0))
    assert np.isfinite(want).all()
    _same(got, want)
