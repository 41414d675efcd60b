"""gdp.cv2's host kernels write their result into the caller's `dst` itself (common.into) where
OpenCV would fill it: the same array back, OpenCV's values, in place where the kernel is
elementwise (cv2.threshold(img, ..., dst=img)), and through a new array where dst overlaps an
input a stencil reads around (an in-place blur), an HxWx1 dst of an HxW result, or a dst that
is a view into a larger array."""

import cv2 as real
import numpy as np
import pytest
import skimage.data

import gdp.cv2 as cv2
import gdp.cv2.filters
import gdp.runtime.lut

BGR = real.resize(skimage.data.astronaut()[:, :, ::-1], (203, 131))
GRAY = real.cvtColor(BGR, real.COLOR_BGR2GRAY)
TABLE = np.arange(256, dtype=np.uint8)[::-1].copy()

# (label, call(module, src, dst) -> result, source)
CALLS = [
    ("threshold", lambda m, x, d: m.threshold(x, 100, 200, real.THRESH_BINARY, dst=d)[1], GRAY),
    (
        "threshold OTSU",
        lambda m, x, d: m.threshold(x, 0, 255, real.THRESH_BINARY | real.THRESH_OTSU, dst=d)[1],
        GRAY,
    ),
    ("LUT", lambda m, x, d: m.LUT(x, TABLE, dst=d), BGR),
    ("convertScaleAbs", lambda m, x, d: m.convertScaleAbs(x, dst=d, alpha=1.7, beta=-9), BGR),
    ("equalizeHist", lambda m, x, d: m.equalizeHist(x, dst=d), GRAY),
    ("addWeighted", lambda m, x, d: m.addWeighted(x, 0.3, BGR[::-1].copy(), 0.6, 4, dst=d), BGR),
    ("cvtColor BGR2RGB", lambda m, x, d: m.cvtColor(x, real.COLOR_BGR2RGB, dst=d), BGR),
    ("cvtColor BGR2GRAY", lambda m, x, d: m.cvtColor(x, real.COLOR_BGR2GRAY, dst=d), BGR),
    ("GaussianBlur", lambda m, x, d: m.GaussianBlur(x, (5, 5), 0, dst=d), BGR),
    ("blur 31", lambda m, x, d: m.blur(x, (31, 31), dst=d), BGR),
    ("medianBlur", lambda m, x, d: m.medianBlur(x, 5, dst=d), BGR),
    ("resize LINEAR", lambda m, x, d: m.resize(x, (97, 61), dst=d), BGR),
]
IDS = [c[0] for c in CALLS]
SAME_SHAPE = [c for c in CALLS if c[0] not in ("cvtColor BGR2GRAY", "resize LINEAR")]


@pytest.fixture(autouse=True)
def _strict(monkeypatch):
    """Every call runs gdp's kernels: a fallthrough to OpenCV would compare OpenCV to itself."""
    monkeypatch.setenv("GDP_CV2_STRICT", "1")


@pytest.mark.parametrize("label, call, src", CALLS, ids=IDS)
def test_dst_is_filled_and_returned(label, call, src):
    want = call(real, src, None)
    dst = np.full_like(want, 7)
    assert call(cv2, src, dst) is dst
    np.testing.assert_array_equal(dst, want, err_msg=label)
    # a view of the first rows of a larger array (its memory not its own)
    big = np.full((want.shape[0] + 5, *want.shape[1:]), 7, want.dtype)
    view = big[: want.shape[0]]
    assert call(cv2, src, view) is view
    np.testing.assert_array_equal(view, want, err_msg=label)
    assert (big[want.shape[0] :] == 7).all(), label
    if want.ndim == 2:  # an HxWx1 dst of an HxW result
        column = np.zeros((*want.shape, 1), want.dtype)
        assert call(cv2, src, column) is column
        np.testing.assert_array_equal(column[..., 0], want, err_msg=label)


@pytest.mark.parametrize("label, call, src", SAME_SHAPE, ids=[c[0] for c in SAME_SHAPE])
def test_in_place(label, call, src):
    want = call(real, src, None)
    image = src.copy()
    assert call(cv2, image, image) is image
    np.testing.assert_array_equal(image, want, err_msg=label)


def test_kernels_get_dst_as_their_output(monkeypatch):
    """The result is not computed into a new array and copied: the kernel is handed dst."""
    seen = []

    def spy(module, name):
        kernel = getattr(module, name)

        def call(*args, **kwargs):
            seen.append((name, kwargs.get("out", args[-1] if name == "threshold" else None)))
            return kernel(*args, **kwargs)

        monkeypatch.setattr(module, name, call)

    spy(gdp.runtime.lut, "threshold")
    # gdp.cv2.filters reaches gdp.runtime.separable through a LazyModule, which keeps the
    # function it read first: the spy goes there
    spy(gdp.cv2.filters.rt_separable, "separable")
    dst = np.empty_like(GRAY)
    cv2.threshold(GRAY, 100, 255, real.THRESH_BINARY, dst=dst)
    blurred = np.empty_like(BGR)
    cv2.blur(BGR, (9, 9), dst=blurred)
    assert [name for name, _ in seen] == ["threshold", "separable"]
    assert seen[0][1] is dst and seen[1][1] is blurred
