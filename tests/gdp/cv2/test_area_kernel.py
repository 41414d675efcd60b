"""resize with INTER_AREA shrinking uint8 images by a factor that is not an integer on both axes
runs gdp.runtime.area's kernel on the cpu target: within 1 of OpenCV's values (its float32
arithmetic, which LLVM may fuse where OpenCV does not: a value next to a half may round the
other way) and equal to them almost everywhere, for 1 to 4 channels, every window width the
kernel picks (shrinks by 1.1 to 30), one axis an integer factor, odd sizes, views and dst, on
both thread counts; no program compiled. Shrinks past its widest window keep the program."""

import cv2 as real
import numpy as np
import pytest
import skimage.data

import gdp.cv2 as cv2
from gdp.errors import InputError
from gdp.runtime import area
from tests.gdp.cv2.one_thread import run_on_one_thread

# (source (w, h), output (w, h)): 224x224 from a photo's sizes, shrinks by 1.1-30 (windows of 4,
# 8, 16 and 32 source pixels), an integer factor on one axis, odd sizes
SIZES = [
    ((640, 480), (224, 224)),
    ((1920, 1080), (224, 224)),
    ((641, 483), (427, 321)),
    ((300, 200), (100, 90)),
    ((97, 61), (33, 20)),
    ((900, 100), (30, 91)),
    ((700, 300), (45, 47)),
    ((20, 20), (17, 13)),
]


@pytest.fixture(autouse=True)
def _strict(monkeypatch):
    monkeypatch.setenv("GDP_CV2_STRICT", "1")


def _close(got, want, label):
    assert got.shape == want.shape and got.dtype == want.dtype, label
    diff = np.abs(got.astype(np.int16) - want)
    assert diff.max() <= 1, label
    # next to a half only (the program this kernel replaced: 0.2% of a random image's values)
    assert np.count_nonzero(diff) <= max(2, want.size // 100), label


def _check(sizes=SIZES):
    photo = real.cvtColor(skimage.data.astronaut(), real.COLOR_RGB2BGR)
    rng = np.random.default_rng(0)
    cv2.clear_cache()
    for size, dsize in sizes:
        bgr = real.resize(photo, size)
        images = [bgr, real.cvtColor(bgr, real.COLOR_BGR2GRAY)]
        images += [rng.integers(0, 256, (size[1], size[0], c), dtype=np.uint8) for c in (2, 4)]
        for image in images:
            got = cv2.resize(image, dsize, interpolation=real.INTER_AREA)
            want = real.resize(image, dsize, interpolation=real.INTER_AREA)
            _close(got, want, f"{image.shape} to {dsize}")
    assert cv2.cache_info().programs == 0


def test_kernel_matches_opencv():
    _check()


def test_kernel_on_one_thread():
    run_on_one_thread(
        f"""
        from tests.gdp.cv2.test_area_kernel import _check
        _check({SIZES[:4]!r})
        """
    )


def test_views_dst_and_scales():
    photo = real.resize(skimage.data.astronaut(), (1000, 800))
    view = photo[3:700:2, 900:10:-3]
    _close(
        cv2.resize(view, (150, 100), interpolation=real.INTER_AREA),
        real.resize(view, (150, 100), interpolation=real.INTER_AREA),
        "view",
    )
    dst = np.zeros((224, 224, 3), np.uint8)
    assert cv2.resize(photo, (224, 224), dst, interpolation=real.INTER_AREA) is dst
    _close(dst, real.resize(photo, (224, 224), interpolation=real.INTER_AREA), "dst")
    got = cv2.resize(photo, None, fx=0.37, fy=0.61, interpolation=real.INTER_AREA)
    _close(got, real.resize(photo, None, fx=0.37, fy=0.61, interpolation=real.INTER_AREA), "fx")
    assert cv2.cache_info().programs == 0


def test_shrinks_past_the_widest_window_keep_the_program():
    image = real.resize(skimage.data.astronaut(), (2000, 100))  # by 40 across: 41 taps
    cv2.clear_cache()
    got = cv2.resize(image, (50, 90), interpolation=real.INTER_AREA)
    _close(got, real.resize(image, (50, 90), interpolation=real.INTER_AREA), "by 40")
    assert cv2.cache_info().programs == 1


def test_plan_refuses_what_the_kernel_does_not_take():
    with pytest.raises(InputError, match="at most 32 taps"):
        area.Plan(100, 2000, 3, 50, 90, 40.0, 100 / 90)
    with pytest.raises(InputError, match="shrinks only"):
        area.Plan(100, 100, 1, 150, 90, 100 / 150, 100 / 90)
    with pytest.raises(InputError, match="1 to 4 channels"):
        area.Plan(100, 100, 5, 50, 90, 2.0, 100 / 90)
    plan = area.Plan(100, 100, 3, 50, 90, 2.0, 100 / 90)
    with pytest.raises(InputError, match="the plan is for a uint8 image"):
        area.resize(np.zeros((100, 100), np.uint8), plan)
