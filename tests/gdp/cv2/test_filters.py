"""gdp.cv2's filters against OpenCV (the conformance cases), and the shim's behaviour: cache,
graph mode, fallthrough, strict mode, errors, dst=."""

import re

import cv2 as real
import numpy as np
import pytest

import gdp
import gdp.cv2 as cv2
from tests.conformance import cases_filters
from tests.conformance.core import check, split_core
from tests.gdp.cv2.programs_only import programs_only


@pytest.mark.parametrize("case", split_core(cases_filters.cases()))
def test_filters_match_opencv(case):
    check(case)


def test_a_second_call_does_not_compile():
    cv2.clear_cache()  # counts from here: other tests may have made these programs
    # uint16: a program (uint8 colour runs gdp.runtime.separable's kernel, no program)
    image = np.random.default_rng(0).integers(0, 65536, (13, 11, 3), dtype=np.uint16)
    cv2.GaussianBlur(image, (3, 3), 0)
    before = cv2.cache_info()
    out = cv2.GaussianBlur(image, (3, 3), 0)
    after = cv2.cache_info()
    assert after.compilations == before.compilations
    assert after.hits == before.hits + 1
    np.testing.assert_array_equal(out, real.GaussianBlur(image, (3, 3), 0))
    cv2.GaussianBlur(image, (5, 5), 0)  # other parameters: another program
    assert cv2.cache_info().compilations == after.compilations + 1


def test_names_fall_through_to_opencv_and_strict_mode_refuses(monkeypatch):
    assert "GaussianBlur" in cv2.accelerated()
    assert cv2.imread is real.imread
    assert cv2.BORDER_REFLECT_101 == real.BORDER_REFLECT_101
    assert cv2.error is real.error
    monkeypatch.setenv("GDP_CV2_STRICT", "1")
    # strict mode vets calls of accelerated functions only: OpenCV's other names are OpenCV's
    assert cv2.imread is real.imread
    assert cv2.BORDER_CONSTANT == 0
    with pytest.raises(cv2.FallthroughError, match="int16"):
        cv2.GaussianBlur(np.zeros((4, 4), np.int16), (3, 3), 0)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda x: cv2.GaussianBlur(x, (4, 4), 0), "ksize.width"),
        (lambda x: cv2.GaussianBlur(x, (0, 0), 0), "sigma"),
        (lambda x: cv2.GaussianBlur(x[:0], (3, 3), 0), "empty"),
        (lambda x: cv2.Sobel(x, real.CV_16S, 0, 0), "dx+dy"),
        (lambda x: cv2.medianBlur(x, 4), "ksize"),
        (lambda x: cv2.blur(x, (3, 3), borderType=real.BORDER_WRAP), "BORDER_WRAP"),
        (lambda x: cv2.GaussianBlur("image", (3, 3), 0), "numpy array"),
    ],
)
def test_bad_arguments_raise_cv2_error(call, message):
    image = np.zeros((8, 8), np.uint8)
    with pytest.raises(real.error, match=re.escape(message)):
        call(image)


def test_dst_is_filled_in_place():
    image = np.random.default_rng(1).integers(0, 256, (9, 7), dtype=np.uint8)
    dst = np.empty_like(image)
    out = cv2.medianBlur(image, 3, dst=dst)
    assert out is dst
    np.testing.assert_array_equal(dst, real.medianBlur(image, 3))


def test_a_chain_in_a_tf_function_compiles_to_fewer_kernels_than_the_calls(monkeypatch):
    import tensorflow as tf

    # The calls one by one through their programs (on the host these three run gdp.runtime's
    # hand kernels, which compile no program to count).
    programs_only(monkeypatch)

    rgb = np.random.default_rng(2).integers(0, 256, (48, 64, 3), dtype=np.uint8)

    def chain(x):
        blurred = cv2.GaussianBlur(x, (5, 5), 0)
        gray = cv2.erode(blurred, np.ones((3, 3), np.uint8))
        return cv2.Sobel(gray, real.CV_16S, 1, 0)

    @tf.function(input_signature=[tf.TensorSpec(rgb.shape, tf.uint8, name="rgb")])
    def fused(x):
        return {"dx": chain(x)}

    model = gdp.compile(fused, target="cpu")
    got = model(rgb)
    want = real.Sobel(
        real.erode(real.GaussianBlur(rgb, (5, 5), 0), np.ones((3, 3), np.uint8)), real.CV_16S, 1, 0
    )
    np.testing.assert_array_equal(got, want)
    one_by_one = 0
    gdp.set_target("cpu")
    try:
        cv2.clear_cache()
        chain(rgb)
        for program in cv2.engine._programs.values():
            one_by_one += program.report()["kernels"]
    finally:
        gdp.set_target(None)
    assert model.report()["kernels"] < one_by_one


@pytest.mark.parametrize("border", [real.BORDER_REFLECT_101, real.BORDER_CONSTANT])
def test_gaussian_of_a_single_pixel_image(border):
    """A 1x1 image's kernel has a row loop of one pixel: the cpu schedule's row vectoriser was
    handed no loop and raised IndexError (a slow conformance case, uint16 5x5)."""
    x = np.array([[[1000, 2000, 65535]]], np.uint16)
    got = cv2.GaussianBlur(x, (5, 5), 0, borderType=border)
    np.testing.assert_array_equal(got, real.GaussianBlur(x, (5, 5), 0, borderType=border))


@pytest.mark.parametrize("ksize, sigma", [((3, 3), 0), ((5, 5), 0), ((7, 7), 0), ((9, 3), 2.5)])
def test_gaussian_of_uint8_at_the_row_buffers_largest_values(ksize, sigma):
    """uint8 GaussianBlur stores its horizontal pass in 16 bits (at most 255 * 256, the fixed-
    point weights summing to 256): all-255 images and 0/255 stripes, whose rows reach it."""
    full = np.full((23, 37, 3), 255, np.uint8)
    stripes = np.zeros((23, 37), np.uint8)
    stripes[:, ::2] = 255
    for image in (full, stripes, np.ascontiguousarray(stripes.T)):
        want = real.GaussianBlur(image, ksize, sigma)
        np.testing.assert_array_equal(cv2.GaussianBlur(image, ksize, sigma), want)
