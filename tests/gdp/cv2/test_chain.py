"""gdp.cv2.chain (issue 20): a function of gdp.cv2 calls compiled into one program, held to the
same calls made in OpenCV on real photos at several sizes."""

from __future__ import annotations

import cv2 as real
import numpy as np
import pytest

import gdp
import gdp.cv2 as cv2
from gdp.cv2 import calibration, engine


@cv2.chain
def _blur_edges(img):
    gray = cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)
    blurred = cv2.GaussianBlur(gray, (5, 5), 0)
    return cv2.Sobel(blurred, cv2.CV_16S, 1, 0), blurred


def _opencv_blur_edges(img):
    gray = real.cvtColor(img, real.COLOR_BGR2GRAY)
    blurred = real.GaussianBlur(gray, (5, 5), 0)
    return real.Sobel(blurred, real.CV_16S, 1, 0), blurred


@cv2.chain
def _network_input(img):
    x = cv2.resize(img, (224, 224), interpolation=cv2.INTER_AREA)
    x = cv2.cvtColor(x, cv2.COLOR_BGR2RGB)
    return cv2.normalize(x, None, 0.0, 1.0, cv2.NORM_MINMAX, cv2.CV_32F)


def _opencv_network_input(img):
    x = real.resize(img, (224, 224), interpolation=real.INTER_AREA)
    x = real.cvtColor(x, real.COLOR_BGR2RGB)
    return real.normalize(x, None, 0.0, 1.0, real.NORM_MINMAX, real.CV_32F)


def test_a_chain_is_one_program_for_every_size():
    before = engine.cache_info().programs
    for h, w in [(120, 160), (97, 131), (481, 640)]:
        bgr, _ = calibration.photo(h, w)
        got_edges, got_blur = _blur_edges(bgr)
        want_edges, want_blur = _opencv_blur_edges(bgr)
        np.testing.assert_array_equal(got_blur, want_blur)
        np.testing.assert_array_equal(got_edges, want_edges)
    # One program, traced with free sizes: no eager program was made, none per size.
    assert len(_blur_edges._models) == 1
    assert engine.cache_info().programs == before
    model = next(iter(_blur_edges._models.values()))
    assert model.report()["shapes_mode"] == "generic", model.report()["generic_error"]


def test_a_chain_that_needs_static_sizes_compiles_per_shape():
    for h, w in [(480, 640), (333, 500)]:
        bgr, _ = calibration.photo(h, w)
        got, want = _network_input(bgr), _opencv_network_input(bgr)
        assert got.shape == want.shape == (224, 224, 3) and got.dtype == np.float32
        # resize AREA agrees with OpenCV within its rounding (uint8 +-1 after the area
        # weights), normalised by the image's range.
        np.testing.assert_allclose(got, want, rtol=0, atol=1.01 / 255 + 1e-6)
    assert len(_network_input._models) == 2  # resize's tables follow the source size


def test_a_chain_must_return_tensors():
    @cv2.chain
    def returns_a_number(img):
        return 3

    with pytest.raises(gdp.GdpError, match="must return TF tensors"):
        returns_a_number(np.zeros((8, 8, 3), np.uint8))
    with pytest.raises(TypeError, match="expected a function"):
        cv2.chain(3)


def test_a_chain_runs_the_way_its_choice_says_and_both_agree_with_opencv():
    """On the cpu target a chain times its program against its calls one by one, per input
    layout and size class (the times are not asserted: tests never time), and runs the
    faster; either way its results are OpenCV's."""
    bgr, _ = calibration.photo(120, 160)
    want_edges, want_blur = _opencv_blur_edges(bgr)
    _blur_edges(bgr)
    ((layout, size), choice), *_ = [(k, v) for k, v in _blur_edges.choices.items()]
    assert size == "240p" and choice["runs"] in ("program", "calls")
    assert choice["program_ms"] > 0 and choice["calls_ms"] > 0
    for runs in ("program", "calls"):
        _blur_edges.choices[(layout, size)] = dict(choice, runs=runs)
        got_edges, got_blur = _blur_edges(bgr)
        np.testing.assert_array_equal(got_blur, want_blur, err_msg=runs)
        np.testing.assert_array_equal(got_edges, want_edges, err_msg=runs)


def test_a_chain_that_cannot_run_on_arrays_runs_its_program_and_choose_false_never_times():
    import tensorflow as tf

    @cv2.chain
    def as_float(img):  # tf.cast of an array gives a tensor: not a call on arrays
        return tf.cast(cv2.cvtColor(img, cv2.COLOR_BGR2GRAY), tf.float32)

    @cv2.chain(choose=False)
    def gray(img):
        return cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)

    bgr, _ = calibration.photo(120, 160)
    want = real.cvtColor(bgr, real.COLOR_BGR2GRAY)
    np.testing.assert_array_equal(as_float(bgr), want.astype(np.float32))
    (choice,) = as_float.choices.values()
    assert choice["runs"] == "program" and choice["calls_ms"] is None
    assert "arrays" in choice["why"], choice  # the calls returned a tensor, not arrays
    np.testing.assert_array_equal(gray(bgr), want)
    assert gray.choices == {}


@pytest.mark.parametrize(
    "interpolation,tolerance",
    [(real.INTER_NEAREST, 0), (real.INTER_AREA, 4)],
    ids=["nearest", "area"],
)
def test_a_resize_then_two_stencils_in_one_chain_match_opencv(interpolation, tolerance):
    """Resize by half (a gather along the rows), a 5x5 blur, then a Sobel: one kernel, where
    the blur's reflected bottom pad reads the resize's gathered rows. Vectorised, TVM's code for
    that pad read other rows: the Sobel's last three rows were up to 72 off, silently. Compared
    with OpenCV's blur and Sobel of gdp's own resize (an area shrink by a non-integer factor is
    within 1 LSB of OpenCV's, 4 after the blur and the Sobel's taps)."""
    import skimage.data

    def half(m, x):
        return m.resize(x, (x.shape[1] // 2, x.shape[0] // 2), interpolation=interpolation)

    def edges(m, x):
        return m.Sobel(m.blur(x, (5, 5)), real.CV_16S, 1, 0, ksize=3)

    program = cv2.chain(choose=False)(lambda x: edges(cv2, half(cv2, x)))
    photo = real.cvtColor(skimage.data.astronaut(), real.COLOR_RGB2BGR)
    for h, w in ((666, 149), (100, 149), (513, 77)):
        image = real.resize(photo, (w, h), interpolation=real.INTER_AREA)
        got = program(image).astype(np.int32)
        want = edges(real, half(cv2, image)).astype(np.int32)
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= tolerance, (h, w)
