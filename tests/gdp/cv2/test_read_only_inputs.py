"""Every hand-written kernel gdp.cv2 runs on the host takes a read-only image (numpy exports
none by DLPack: the kernel reads a copy), with OpenCV's answer."""

import cv2 as real
import numpy as np
import pytest
import skimage.data

import gdp.cv2 as cv2

BGR = real.resize(skimage.data.astronaut(), (67, 45))
GRAY = real.cvtColor(BGR, real.COLOR_BGR2GRAY)
ROTATE = real.getRotationMatrix2D((30, 20), 17, 1.0)
CALLS = {
    "threshold (lut)": (GRAY, lambda m, x: m.threshold(x, 100, 255, real.THRESH_BINARY)[1]),
    "equalizeHist (histogram)": (GRAY, lambda m, x: m.equalizeHist(x)),
    "warpAffine (warp)": (BGR, lambda m, x: m.warpAffine(x, ROTATE, (67, 45))),
    "resize NEAREST (nearest)": (BGR, lambda m, x: m.resize(x, (31, 20), interpolation=0)),
    "meanStdDev (moments)": (BGR, lambda m, x: np.concatenate(m.meanStdDev(x))),
    "addWeighted (blend)": (BGR, lambda m, x: m.addWeighted(x, 0.3, x, 0.6, 2)),
    "erode (morph)": (GRAY, lambda m, x: m.erode(x, np.ones((3, 5), np.uint8))),
    "Canny gray (canny)": (GRAY, lambda m, x: m.Canny(x, 50, 150)),
    "Canny colour (canny)": (BGR, lambda m, x: m.Canny(x, 50, 150)),
    "filter2D 9x9 (filter2d)": (
        BGR,
        lambda m, x: m.filter2D(x, -1, np.arange(81, dtype=np.float32).reshape(9, 9) / 3000),
    ),
    "blur (separable)": (BGR, lambda m, x: m.blur(x, (5, 5))),
}


@pytest.fixture(autouse=True)
def _strict(monkeypatch):
    monkeypatch.setenv("GDP_CV2_STRICT", "1")


@pytest.mark.parametrize("name", list(CALLS))
def test_a_read_only_image(name):
    image, call = CALLS[name]
    locked = image.copy()
    locked.flags.writeable = False
    np.testing.assert_array_equal(call(cv2, locked), call(real, image))
