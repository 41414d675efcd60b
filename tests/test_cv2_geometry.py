"""gdp.cv2's geometry and DNN input functions against OpenCV (the conformance cases)."""

import cv2 as real
import numpy as np
import pytest

import gdp.cv2 as cv2
from tests.conformance import cases_geometry
from tests.conformance.core import check, split_core


@pytest.mark.parametrize("case", split_core(cases_geometry.cases()))
def test_geometry_matches_opencv(case):
    check(case)


def test_resize_refuses_an_empty_size():
    with pytest.raises(real.error, match="inv_scale"):
        cv2.resize(np.zeros((4, 4), np.uint8), (0, 0))


def test_blob_from_images_stacks_a_batch():
    rng = np.random.default_rng(3)
    batch = [rng.integers(0, 256, (30, 40, 3), dtype=np.uint8) for _ in range(3)]
    got = cv2.dnn.blobFromImages(batch, 1 / 255, (20, 15), swapRB=True)
    want = real.dnn.blobFromImages(batch, 1 / 255, (20, 15), swapRB=True)
    assert got.shape == want.shape == (3, 3, 15, 20)
    np.testing.assert_allclose(got, want, atol=1 / 255 + 1e-6)
