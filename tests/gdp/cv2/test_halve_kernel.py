"""resize to exactly half (INTER_AREA, and INTER_LINEAR, which OpenCV runs as area there) of
uint8 images of 1, 3 and 4 channels runs gdp.runtime.halve's kernel on the cpu target: equal to
OpenCV's, by dsize and by fx=fy=0.5, on random values (every rounding case) and a photo, at
sizes that move its strips and steps (a row's last step overlapping the one before, the
3-channel window's two starts, one output row), views and dst, on both thread counts; no
program compiled. What it does not take (2 channels, a last column of half a block, rows
narrower than a step, a CPU without VBMI) runs the program, equal to OpenCV too."""

import cv2 as real
import numpy as np
import pytest
import skimage.data

import gdp.cv2 as cv2
from gdp.errors import InputError
from gdp.runtime import halve
from gdp.runtime.lut import permutes_bytes
from tests.gdp.cv2.one_thread import run_on_one_thread

pytestmark = pytest.mark.skipif(
    not permutes_bytes(), reason="the kernel runs only on a CPU with AVX-512 VBMI"
)

# source (w, h): one output row; a row of one step and of one step and a bit (the last
# overlapping); odd sizes (fx=0.5 drops the last column and row); heights that move the strips
SIZES = [(130, 2), (128, 5), (200, 9), (258, 37), (1001, 333), (641, 480), (1920, 1080)]
METHODS = (real.INTER_AREA, real.INTER_LINEAR)


@pytest.fixture(autouse=True)
def _strict(monkeypatch):
    monkeypatch.setenv("GDP_CV2_STRICT", "1")


def _images(w: int, h: int):
    rng = np.random.default_rng(w * h)
    photo = real.resize(real.cvtColor(skimage.data.astronaut(), real.COLOR_RGB2BGR), (w, h))
    yield real.cvtColor(photo, real.COLOR_BGR2GRAY)
    yield photo
    for channels in (1, 3, 4):
        shape = (h, w) if channels == 1 else (h, w, channels)
        yield rng.integers(0, 256, shape, dtype=np.uint8)


def _check(sizes=SIZES):
    cv2.clear_cache()
    for w, h in sizes:
        for image in _images(w, h):
            channels = 1 if image.ndim == 2 else image.shape[2]
            for method in METHODS:
                want = real.resize(image, None, fx=0.5, fy=0.5, interpolation=method)
                assert halve.takes(h, w, channels, want.shape[1], want.shape[0]), image.shape
                got = cv2.resize(image, None, fx=0.5, fy=0.5, interpolation=method)
                np.testing.assert_array_equal(got, want, err_msg=f"{image.shape} {method}")
                if w % 2 == 0 and h % 2 == 0:
                    got = cv2.resize(image, (w // 2, h // 2), interpolation=method)
                    np.testing.assert_array_equal(got, want, err_msg=f"{image.shape} dsize")
    assert cv2.cache_info().programs == 0


def test_kernel_matches_opencv():
    _check()


def test_kernel_on_one_thread():
    run_on_one_thread(
        f"""
        from tests.gdp.cv2.test_halve_kernel import _check
        _check({SIZES[:5]!r})
        """
    )


def test_the_3_channel_window_of_the_first_step_of_each_row():
    """A 3-channel step's blocks are 126 bytes of its rows' 128-byte windows: the window ends
    with them, but for the image's first step, which has nothing before it (its window starts
    with the image, its second row's 128 bytes after the first row's start). Rows of one step,
    of one and a bit, of two."""
    rng = np.random.default_rng(3)
    cv2.clear_cache()
    for w, h in [(42, 4), (45, 6), (44, 8), (84, 5)]:
        image = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        want = real.resize(image, None, fx=0.5, fy=0.5, interpolation=real.INTER_AREA)
        assert halve.takes(h, w, 3, want.shape[1], want.shape[0]), (h, w)
        np.testing.assert_array_equal(cv2.resize(image, None, fx=0.5, fy=0.5), want)
    assert cv2.cache_info().programs == 0


def test_views_and_dst():
    photo = real.resize(skimage.data.astronaut(), (1000, 800))
    view = photo[3:700, 900:10:-1]
    want = real.resize(view, None, fx=0.5, fy=0.5, interpolation=real.INTER_AREA)
    np.testing.assert_array_equal(cv2.resize(view, None, fx=0.5, fy=0.5), want)
    dst = np.zeros((400, 500, 3), np.uint8)
    assert cv2.resize(photo, (500, 400), dst, interpolation=real.INTER_AREA) is dst
    np.testing.assert_array_equal(
        dst, real.resize(photo, (500, 400), interpolation=real.INTER_AREA)
    )
    read_only = photo.copy()
    read_only.flags.writeable = False
    np.testing.assert_array_equal(cv2.resize(read_only, (500, 400)), real.resize(photo, (500, 400)))


def test_what_the_kernel_does_not_take_runs_the_program(monkeypatch):
    """2 channels (OpenCV rounds their halving half to even), a last column of half a block
    (fx=0.5 of an odd width rounded up), a row narrower than a step, no VBMI: the program."""
    rng = np.random.default_rng(5)
    two = rng.integers(0, 256, (40, 200, 2), dtype=np.uint8)
    odd = rng.integers(0, 256, (41, 203, 3), dtype=np.uint8)  # 101.5 -> 102 columns
    narrow = rng.integers(0, 256, (40, 100), dtype=np.uint8)  # 50 of a step's 64
    for image in (two, odd, narrow):
        h, w = image.shape[:2]
        channels = 1 if image.ndim == 2 else image.shape[2]
        want = real.resize(image, None, fx=0.5, fy=0.5, interpolation=real.INTER_AREA)
        assert not halve.takes(h, w, channels, want.shape[1], want.shape[0])
        got = cv2.resize(image, None, fx=0.5, fy=0.5, interpolation=real.INTER_AREA)
        np.testing.assert_array_equal(got, want, err_msg=str(image.shape))
    monkeypatch.setattr(halve, "permutes_bytes", lambda: False)
    image = rng.integers(0, 256, (40, 200, 3), dtype=np.uint8)
    assert not halve.takes(40, 200, 3, 100, 20)
    cv2.clear_cache()
    want = real.resize(image, (100, 20), interpolation=real.INTER_AREA)
    np.testing.assert_array_equal(cv2.resize(image, (100, 20), interpolation=real.INTER_AREA), want)
    assert cv2.cache_info().programs >= 1


def test_refuses_what_it_does_not_take():
    with pytest.raises(InputError, match="whole 2x2 blocks"):
        halve.resize(np.zeros((10, 300, 2), np.uint8), 150, 5)
    with pytest.raises(InputError, match="whole 2x2 blocks"):
        halve.resize(np.zeros((10, 301), np.uint8), 151, 5)
    with pytest.raises(InputError, match="uint8 image"):
        halve.resize(np.zeros((10, 300), np.float32), 150, 5)
