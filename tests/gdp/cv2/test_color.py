"""cv2.cvtColor through gdp: the conformance cases, errors, graph mode, dst=."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import tensorflow as tf

import gdp.cv2 as gcv2
from tests.conformance.cases_color import cases
from tests.conformance.core import bound


@pytest.mark.parametrize("case", cases(), ids=lambda c: c.id)
def test_case(case):
    if case.known_miss:
        got, want = np.asarray(case.gdp()), np.asarray(case.opencv())
        assert got.shape == want.shape and got.dtype == want.dtype
        return
    err, ok, got, want = case.run()
    assert ok, f"{case.id}: error {err} > {bound(case.tolerance)} ({got.dtype} vs {want.dtype})"


@pytest.mark.parametrize(
    "code,channels",
    [
        (cv2.COLOR_BGR2GRAY, 2),
        (cv2.COLOR_BGR2HSV, 1),
        (cv2.COLOR_GRAY2BGR, 3),
        (cv2.COLOR_HSV2BGR, 4),
        (cv2.COLOR_BGR2YCrCb, 2),
    ],
)
def test_wrong_channels(code, channels):
    src = np.zeros((4, 6, channels), np.uint8)
    with pytest.raises(cv2.error):
        cv2.cvtColor(src, code)  # OpenCV rejects it ...
    with pytest.raises(gcv2.error, match="Invalid number of channels"):
        gcv2.cvtColor(src, code)  # ... and so does gdp


def test_errors():
    with pytest.raises(gcv2.error):
        gcv2.cvtColor(np.zeros((0, 0, 3), np.uint8), cv2.COLOR_BGR2GRAY)
    with pytest.raises(gcv2.error):
        gcv2.cvtColor(np.zeros((5, 4), np.uint8), cv2.COLOR_YUV2BGR_NV12)


def test_fallthrough():
    src = np.random.default_rng(0).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    # Luv and XYZ are not accelerated: the result is OpenCV's own.
    np.testing.assert_array_equal(
        gcv2.cvtColor(src, cv2.COLOR_BGR2Luv), cv2.cvtColor(src, cv2.COLOR_BGR2Luv)
    )
    np.testing.assert_array_equal(
        gcv2.cvtColor(src, cv2.COLOR_BGR2XYZ), cv2.cvtColor(src, cv2.COLOR_BGR2XYZ)
    )


def test_fallthrough_strict(monkeypatch):
    monkeypatch.setenv("GDP_CV2_STRICT", "1")
    with pytest.raises(gcv2.FallthroughError):
        gcv2.cvtColor(np.zeros((4, 4, 3), np.uint8), cv2.COLOR_BGR2XYZ)


def test_graph_mode():
    src = np.random.default_rng(0).integers(0, 256, (6, 40, 3), dtype=np.uint8)
    src[..., 0] %= 180

    @tf.function
    def pipeline(x):
        return gcv2.cvtColor(gcv2.cvtColor(x, cv2.COLOR_HSV2BGR), cv2.COLOR_BGR2GRAY)

    got = pipeline(tf.constant(src)).numpy()
    want = cv2.cvtColor(cv2.cvtColor(src, cv2.COLOR_HSV2BGR), cv2.COLOR_BGR2GRAY)
    np.testing.assert_array_equal(got, want)


def test_dst_in_place():
    src = np.random.default_rng(0).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    dst = np.empty((5, 7), np.uint8)
    out = gcv2.cvtColor(src, cv2.COLOR_BGR2GRAY, dst=dst)
    assert out is dst
    np.testing.assert_array_equal(dst, cv2.cvtColor(src, cv2.COLOR_BGR2GRAY))
