"""uint8 INTER_LINEAR resize and uint8 blobFromImage run on the cpu target through
gdp.runtime.resize's kernel, OpenCV's own arithmetic: equal to OpenCV bit for bit at random
sizes (down and up on either axis, 2 pixels wide, one row, a last strip of one row), 1-4
channels, fx/fy, views, dst; blobs with every option; both thread counts; both horizontal
passes (byte permutes, and loads of pixel pairs: for large downscales, and CPUs without
AVX-512 VBMI); what the kernel refuses."""

import cv2 as real
import numpy as np
import pytest
import skimage.data

import gdp.cv2 as cv2
from gdp.errors import InputError
from gdp.runtime import resize
from tests.gdp.cv2.one_thread import run_on_one_thread


def _pairs(count: int, seed: int):
    """(source (h, w), output (width, height)) pairs: random, and the edge cases."""
    rng = np.random.default_rng(seed)
    pairs = [((1, 2), (5, 3)), ((7, 2), (1, 1)), ((1, 300), (77, 1)), ((33, 40), (33, 40))]
    pairs += [((2, 5), (3, 900)), ((301, 517), (224, 224)), ((480, 640), (1281, 961))]
    for _ in range(count):
        h, w = (int(v) for v in rng.integers(1, 700, 2))
        width, height = (int(v) for v in rng.integers(1, 900, 2))
        pairs.append(((h, max(w, 2)), (width, height)))
    return pairs


def _check_resizes(count=24, seed=0):
    cv2.clear_cache()
    rng = np.random.default_rng(seed)
    for (h, w), dsize in _pairs(count, seed):
        channels = int(rng.integers(1, 5))
        shape = (h, w, channels) if channels > 1 else (h, w)
        image = rng.integers(0, 256, shape, np.uint8)
        got, want = cv2.resize(image, dsize), real.resize(image, dsize)
        assert got.shape == want.shape, (shape, dsize)
        np.testing.assert_array_equal(got, want, err_msg=str((shape, dsize)))
    assert cv2.cache_info().programs == 0


def test_resizes_as_opencv(strips):
    _check_resizes()


def test_rows_of_weight_zero_as_opencv(strips):
    # Downscales and upscales by an odd integer give rows a tap of weight 0, whose
    # source row the kernel does not resample: every factor, channel count and a last row
    # clamped at the border, against OpenCV.
    cv2.clear_cache()
    rng = np.random.default_rng(5)
    for factor in (3, 5, 7, 1 / 3):  # (an even factor puts sources halfway between rows)
        for channels in (1, 2, 3, 4):
            k = round(factor) if factor > 1 else 1
            h, w = (int(v) // k * k for v in rng.integers(40, 400, 2))  # multiples of k
            shape = (h, w, channels) if channels > 1 else (h, w)
            image = rng.integers(0, 256, shape, np.uint8)
            dsize = (round(w / factor), round(h / factor))
            plan = resize.Plan(h, w, channels, *dsize, w / dsize[0], h / dsize[1])
            assert 0 in plan.ytab.reshape(-1, 4)[:, 2:], (shape, dsize)  # some rows skipped
            got, want = cv2.resize(image, dsize), real.resize(image, dsize)
            np.testing.assert_array_equal(got, want, err_msg=str((shape, dsize)))
            if channels != 2:  # (OpenCV's blobs take 1, 3 or 4)
                blob = cv2.dnn.blobFromImage(image, 1 / 255, dsize, swapRB=channels >= 3)
                np.testing.assert_array_equal(
                    blob, real.dnn.blobFromImage(image, 1 / 255, dsize, swapRB=channels >= 3)
                )
    assert cv2.cache_info().programs == 0


def test_both_horizontal_passes(monkeypatch):
    plans = [
        resize.Plan(h, w, 3, width, height, w / width, h / height)
        for (h, w), (width, height) in _pairs(24, 0)
    ]
    # The random pairs above run both: steps whose source bytes fit a window, and not.
    assert {plan.permutes for plan in plans} == {True, False}
    monkeypatch.setattr(resize, "permutes_bytes", lambda: False)
    _check_resizes(count=8, seed=2)


def test_every_group_count_of_the_permuted_pass():
    """A step's 32 values are picked from one 128-byte window (downscales by up to about 4),
    or in two or four groups from a window each (up to about 7.5 and 15), or by loads past
    that: each, 1-4 channels, widths whose last windows end with the row, against OpenCV."""
    rng = np.random.default_rng(4)
    cv2.clear_cache()
    for channels in (1, 2, 3, 4):
        seen = set()
        for w, width in ((1001, 330), (1001, 190), (1001, 100), (1920, 224), (1999, 60)):
            plan = resize.Plan(9, w, channels, width, 7, w / width, 9 / 7)
            seen.add(plan.groups if plan.permutes else "loads")
            shape = (9, w, channels) if channels > 1 else (9, w)
            image = rng.integers(0, 256, shape, np.uint8)
            got, want = cv2.resize(image, (width, 7)), real.resize(image, (width, 7))
            np.testing.assert_array_equal(got, want, err_msg=f"{shape} to {width}")
        assert seen == {1, 2, 4, "loads"}, (channels, seen)
    assert cv2.cache_info().programs == 0


def test_on_one_thread():
    run_on_one_thread(
        """
        from tests.gdp.cv2.test_resize_kernel import _check_resizes
        _check_resizes(count=8, seed=1)
        """
    )


def test_photo_factors_views_and_dst():
    photo = real.resize(skimage.data.astronaut()[:, :, ::-1], (1920, 1080))
    for fx, fy in ((0.37, 0.41), (1.5, 0.5), (0.25, 3.1)):
        np.testing.assert_array_equal(
            cv2.resize(photo, None, fx=fx, fy=fy), real.resize(photo, None, fx=fx, fy=fy)
        )
    view = photo[::-3, 5:900]
    np.testing.assert_array_equal(cv2.resize(view, (300, 97)), real.resize(view, (300, 97)))
    dst = np.zeros((224, 224, 3), np.uint8)
    assert cv2.resize(photo, (224, 224), dst=dst) is dst
    np.testing.assert_array_equal(dst, real.resize(photo, (224, 224)))


BLOBS = [
    {"scalefactor": 1 / 255, "size": (224, 224), "swapRB": True},
    {"size": (300, 200), "mean": (104, 117, 123), "crop": True},
    {"scalefactor": 0.5, "size": (128, 96), "mean": (1.5, 2.5, 3.5, 4.5), "swapRB": True},
    {"scalefactor": 1 / 127.5, "size": (97, 301), "mean": (127.5, 127.5, 127.5), "crop": True},
    {},  # no resize
]


@pytest.mark.parametrize("channels", [1, 3, 4])
def test_blobs_as_opencv(channels):
    cv2.clear_cache()
    rng = np.random.default_rng(channels)
    for h, w in ((480, 640), (1080, 1920), (37, 53), (5, 2)):
        shape = (h, w, channels) if channels > 1 else (h, w)
        image = rng.integers(0, 256, shape, np.uint8)
        for options in BLOBS:
            options = dict(options, swapRB=options.get("swapRB", False) and channels >= 3)
            got = cv2.dnn.blobFromImage(image, **options)
            np.testing.assert_array_equal(got, real.dnn.blobFromImage(image, **options))
    images = [rng.integers(0, 256, (300, 400, 3), np.uint8) for _ in range(3)]
    np.testing.assert_array_equal(
        cv2.dnn.blobFromImages(images, 1 / 255, (224, 224), swapRB=True),
        real.dnn.blobFromImages(images, 1 / 255, (224, 224), swapRB=True),
    )
    assert cv2.cache_info().programs == 0


def test_one_pixel_wide_images_run_the_program():
    image = np.random.default_rng(0).integers(0, 256, (50, 1, 3), np.uint8)
    got = cv2.resize(image, (3, 20)).astype(int)
    assert np.abs(got - real.resize(image, (3, 20))).max() <= 1


def test_kernel_refuses_what_it_does_not_take():
    with pytest.raises(InputError, match="at least 2 wide"):
        resize.Plan(5, 1, 3, 4, 4, 0.25, 1.25)
    with pytest.raises(InputError, match="cut"):
        resize.Plan(5, 5, 3, 4, 4, 1.0, 1.0, cut=(5, 5, 2, 0))
    plan = resize.Plan(5, 6, 3, 4, 4, 1.5, 1.25)
    with pytest.raises(InputError, match="plan is for 5x6x3"):
        resize.resize(np.zeros((5, 6, 4), np.uint8), plan)
    with pytest.raises(InputError, match="uint8"):
        resize.resize(np.zeros((5, 6, 3), np.float32), plan)


def test_ipp_inexact_resizes_asked_for_are_opencvs(monkeypatch):
    """cv2.ipp.setUseIPP_NotExact(True) makes OpenCV's 8-bit LINEAR resize IPP's, which gdp
    does not reproduce: the call is OpenCV's (a FallthroughError under GDP_CV2_STRICT=1), by
    the common call's short path too."""
    image = np.random.default_rng(6).integers(0, 256, (120, 160, 3), np.uint8)
    real.ipp.setUseIPP_NotExact(True)
    try:
        monkeypatch.setenv("GDP_CV2_STRICT", "1")
        with pytest.raises(cv2.FallthroughError, match="IPP"):
            cv2.resize(image, (77, 51))
        monkeypatch.delenv("GDP_CV2_STRICT")
        np.testing.assert_array_equal(cv2.resize(image, (77, 51)), real.resize(image, (77, 51)))
    finally:
        real.ipp.setUseIPP_NotExact(False)
