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


def test_warp_affine_refuses_a_matrix_of_the_wrong_shape():
    with pytest.raises(real.error, match="2x3"):
        cv2.warpAffine(np.zeros((4, 4), np.uint8), np.eye(3), (4, 4))


def test_warp_affine_runs_opencv_for_what_it_does_not_accelerate(monkeypatch):
    image = np.random.default_rng(4).integers(0, 256, (9, 11), dtype=np.uint8)
    matrix = real.getRotationMatrix2D((5, 4), 20, 1.0)
    args = dict(flags=real.INTER_CUBIC, borderMode=real.BORDER_REFLECT)
    want = real.warpAffine(image, matrix, (11, 9), **args)
    np.testing.assert_array_equal(cv2.warpAffine(image, matrix, (11, 9), **args), want)
    monkeypatch.setenv("GDP_CV2_STRICT", "1")
    with pytest.raises(cv2.FallthroughError, match="interpolation"):
        cv2.warpAffine(image, matrix, (11, 9), **args)
