"""gdp.cv2.resize with INTER_CUBIC of uint8 runs gdp.runtime.cubic's hand kernel on a CPU with
AVX-512 VBMI: against OpenCV (Intel IPP's resize, within 1 of the exact sums; equal where each
output pixel is a source pixel) for 1 to 4 channels, shrinking and enlarging, at sizes that
move the strips', the last step's and the borders' boundaries, a real photo, views and dst, on
both thread counts; equal to the compiled program it replaces; where it does not run, the
program."""

import cv2 as real
import numpy as np
import pytest
import skimage.data

import gdp.cv2 as cv2
from gdp.cv2 import geometry
from gdp.errors import InputError
from gdp.runtime import cubic
from tests.gdp.cv2.one_thread import run_on_one_thread

pytestmark = pytest.mark.skipif(
    not cubic.permutes_bytes(), reason="this CPU has no AVX-512 VBMI: the kernel does not run"
)
CUBIC = real.INTER_CUBIC


@pytest.fixture(autouse=True)
def _gdp_kernels(monkeypatch):
    monkeypatch.setenv("GDP_CV2_STRICT", "1")  # never OpenCV's by calibration


def _image(h, w, c, seed=0):
    rng = np.random.default_rng(seed)
    shape = (h, w, c) if c > 1 else (h, w)
    return rng.integers(0, 256, shape, dtype=np.uint8)


def _plan(image, dsize):
    h, w = image.shape[:2]
    c = image.shape[2] if image.ndim == 3 else 1
    ipp = geometry.ipp_resizes(geometry.INTER_CUBIC, np.uint8, c)
    return cubic.Plan(h, w, c, dsize[0], dsize[1], w / dsize[0], h / dsize[1], ipp)


def _near(image, dsize, exact=False):
    """gdp's cubic resize ran the kernel and is OpenCV's within 1 (equal where `exact`)."""
    assert _plan(image, dsize).runs, (image.shape, dsize)
    before = cv2.cache_info().compilations
    got = cv2.resize(image, dsize, interpolation=CUBIC)
    assert cv2.cache_info().compilations == before  # the kernel: no program
    want = real.resize(image, dsize, interpolation=CUBIC)
    assert got.shape == want.shape and got.dtype == np.uint8
    diff = np.abs(got.astype(np.int32) - want).max()
    assert diff <= (0 if exact else 1), (image.shape, dsize, diff)
    return got


def _check():
    # 1-4 channels; shrinking by 1.3 to 6, enlarging; heights of 1-3 rows a strip and of many
    for c in (1, 2, 3, 4):
        for h, w in ((5, 130), (37, 211), (123, 517)):
            image = _image(h, w, c, seed=h + c)
            for dsize in (
                (max(16 // c + 1, w // 6), h + 9),
                (w // 2, max(1, h // 3)),
                (w * 2 + 1, h * 3),
            ):
                if _plan(image, dsize).runs:
                    _near(image, dsize)
            _near(image, (w // 2 + 3, h // 2 + 1))


def test_kernel_against_opencv():
    _check()


def test_kernel_on_one_thread():
    run_on_one_thread(
        """
        from tests.gdp.cv2.test_cubic_kernel import _check
        _check()
        """
    )


def test_photo_views_and_dst():
    bgr = real.cvtColor(real.resize(skimage.data.astronaut(), (1920, 1080)), real.COLOR_RGB2BGR)
    _near(bgr, (640, 360), exact=True)  # a third: each output pixel a source pixel
    _near(bgr, (384, 216), exact=True)  # a fifth too (three of each row's four taps weigh 0)
    _near(bgr[:101, :77], (231, 303))  # three times: every third row on a source row
    _near(bgr, (960, 540))
    _near(bgr, (1280, 720))
    _near(real.cvtColor(bgr, real.COLOR_BGR2GRAY), (701, 333))
    _near(bgr[::3, 7:900:2], (300, 200))
    dst = np.zeros((360, 640, 3), np.uint8)
    assert cv2.resize(bgr, (640, 360), dst, interpolation=CUBIC) is dst
    np.testing.assert_array_equal(dst, real.resize(bgr, (640, 360), interpolation=CUBIC))


def test_kernel_equals_the_program_it_replaces(monkeypatch):
    """Both sum exactly with the same tables: the same values, borders included."""
    image = _image(61, 300, 3, seed=4)
    dsizes = ((97, 40), (151, 61), (700, 130))
    kernel = [cv2.resize(image, d, interpolation=CUBIC) for d in dsizes]
    monkeypatch.setattr(cubic, "permutes_bytes", lambda: False)
    monkeypatch.setattr(geometry, "cubic_plan", geometry.cubic_plan.__wrapped__)
    for d, got in zip(dsizes, kernel, strict=True):
        np.testing.assert_array_equal(got, cv2.resize(image, d, interpolation=CUBIC))


def test_what_the_kernel_does_not_take():
    """Rows under 128 bytes or 4 pixels, outputs under 16 values, shrinks past the window: the
    plan says so, the call runs the program (OpenCV's within 1), and the kernel refuses."""
    for image, dsize in (
        (_image(40, 42, 3), (20, 20)),  # 126 bytes a row
        (_image(9, 300, 1), (15, 5)),  # 15 values a row
        (_image(20, 1000, 3), (100, 10)),  # by 10: a step's taps span more than 128 bytes
    ):
        plan = _plan(image, dsize)
        assert not plan.runs
        got = cv2.resize(image, dsize, interpolation=CUBIC).astype(np.int32)
        assert np.abs(got - real.resize(image, dsize, interpolation=CUBIC)).max() <= 1
        with pytest.raises(InputError, match="does not take"):
            cubic.resize(image, plan)
    plan = _plan(_image(40, 300, 3), (100, 20))
    with pytest.raises(InputError, match="the plan is for 40x300x3"):
        cubic.resize(_image(40, 301, 3), plan)
