"""Pointwise functions and statistics through gdp: the conformance cases, errors, graph mode,
dst=."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import tensorflow as tf

import gdp.cv2 as gcv2
from tests.conformance.cases_pointwise import cases
from tests.conformance.core import bound


@pytest.mark.parametrize("case", cases(), ids=lambda c: c.id)
def test_case(case):
    if case.known_miss:
        got, want = np.asarray(case.gdp()), np.asarray(case.opencv())
        assert got.shape == want.shape and got.dtype == want.dtype
        return
    err, ok, got, want = case.run()
    assert ok, f"{case.id}: error {err} > {bound(case.tolerance)} ({got.dtype} vs {want.dtype})"


def test_results_shape_like_opencv():
    src = np.random.default_rng(0).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    mean, std = gcv2.meanStdDev(src)
    assert mean.shape == (3, 1) and std.shape == (3, 1) and mean.dtype == np.float64
    assert len(gcv2.mean(src)) == 4 and len(gcv2.sumElems(src)) == 4
    lo, hi, lo_loc, hi_loc = gcv2.minMaxLoc(src[..., 0])
    assert isinstance(lo, float) and isinstance(lo_loc, tuple)
    assert (lo, hi, lo_loc, hi_loc) == cv2.minMaxLoc(src[..., 0])
    assert gcv2.threshold(src, 10.5, 255, cv2.THRESH_BINARY)[0] == 10.0


def test_errors():
    empty = np.zeros((0, 0), np.uint8)
    color = np.zeros((4, 4, 3), np.uint8)
    # An empty image is OpenCV's to answer, except where OpenCV would crash (minMaxLoc: SIGFPE)
    assert gcv2.threshold(empty, 1, 255, cv2.THRESH_BINARY) == cv2.threshold(empty, 1, 255, 0)
    with pytest.raises(gcv2.error, match="empty"):
        gcv2.minMaxLoc(empty)
    with pytest.raises(gcv2.error, match="empty"):
        gcv2.copyMakeBorder(empty, 1, 1, 1, 1, cv2.BORDER_REFLECT)
    with pytest.raises(gcv2.error):
        gcv2.threshold(color, 0, 255, cv2.THRESH_BINARY | cv2.THRESH_OTSU)
    with pytest.raises(gcv2.error):
        gcv2.equalizeHist(color)
    with pytest.raises(gcv2.error):
        gcv2.countNonZero(color)
    with pytest.raises(gcv2.error):
        gcv2.minMaxLoc(color)
    with pytest.raises(gcv2.error):
        gcv2.LUT(color, np.zeros(100, np.uint8))
    with pytest.raises(gcv2.error):
        gcv2.addWeighted(color, 0.5, np.zeros((4, 5, 3), np.uint8), 0.5, 0)


def test_graph_mode():
    src = np.random.default_rng(0).integers(0, 256, (9, 13), dtype=np.uint8)

    @tf.function
    def pipeline(x):
        _, binary = gcv2.threshold(gcv2.equalizeHist(x), 0, 255, cv2.THRESH_BINARY | 8)
        return binary, gcv2.convertScaleAbs(x, alpha=0.5, beta=3), gcv2.mean(x)

    binary, scaled, mean = (t.numpy() for t in pipeline(tf.constant(src)))
    want = cv2.threshold(cv2.equalizeHist(src), 0, 255, cv2.THRESH_BINARY | 8)[1]
    np.testing.assert_array_equal(binary, want)
    np.testing.assert_array_equal(scaled, cv2.convertScaleAbs(src, alpha=0.5, beta=3))
    np.testing.assert_allclose(mean, cv2.mean(src), rtol=1e-12)


@pytest.mark.parametrize("kind", range(5), ids=lambda k: f"type{k}")
def test_threshold_in_a_static_graph_holds_no_image_sized_constant(kind):
    """tf.zeros_like of a static shape is folded into a constant of the image's size by TF's
    graph optimiser (12 MB for a 1080p BGR threshold): the graph holds scalars only, and the
    compiled program is OpenCV's threshold."""
    import gdp
    from gdp.frontend import convert

    spec = [tf.TensorSpec([270, 480, 3], tf.uint8, name="src")]
    program = tf.function(
        lambda src: {"dst": gcv2.threshold(src, 100, 200, kind)[1]}, input_signature=spec
    )
    graph = convert(program, None)[0]
    assert max((t.ByteSize() for t in graph.graph.initializer), default=0) < 1024
    src = np.random.default_rng(kind).integers(0, 256, (270, 480, 3), dtype=np.uint8)
    got = gdp.compile(program, target="cpu")(src)
    np.testing.assert_array_equal(got, cv2.threshold(src, 100, 200, kind)[1])


def test_dst_in_place():
    src = np.random.default_rng(0).integers(0, 256, (5, 7), dtype=np.uint8)
    dst = np.empty_like(src)
    _, out = gcv2.threshold(src, 100, 255, cv2.THRESH_BINARY, dst=dst)
    assert out is dst
    np.testing.assert_array_equal(dst, cv2.threshold(src, 100, 255, cv2.THRESH_BINARY)[1])
    dst = np.empty_like(src)
    assert gcv2.equalizeHist(src, dst=dst) is dst
    np.testing.assert_array_equal(dst, cv2.equalizeHist(src))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16])
def test_mean_std_dev_of_integers_is_exact(dtype):
    # Integer images are summed in integers (rows in int64): the sums are the exact integers,
    # as OpenCV's. The oracle: NumPy's int64 sums, scaled as OpenCV scales them. Extremes
    # (every pixel at the type's maximum) and random values; gray, 3 and 4 channels; sizes
    # that move the row-sum vectors' tails.
    info = np.iinfo(dtype)
    rng = np.random.default_rng(7)
    for shape in [(61, 203, 3), (97, 131), (33, 17, 4), (540, 961, 3)]:
        for extreme in (False, True):
            x = rng.integers(info.min, int(info.max) + 1, shape, dtype=dtype)
            if extreme:
                x[:] = info.max
            mean, std = gcv2.meanStdDev(x)
            flat = x.reshape(shape[0] * shape[1], -1).astype(np.int64)
            scale = 1.0 / flat.shape[0]
            want_mean = flat.sum(0) * scale
            square = (flat * flat).sum(0) * scale
            want_std = np.sqrt(np.maximum(square - want_mean * want_mean, 0.0))
            np.testing.assert_array_equal(mean.ravel(), want_mean)
            # sq - mean^2 may round once less (a fused multiply-add): an ulp of the variance
            np.testing.assert_allclose(std.ravel(), want_std, rtol=1e-13, atol=1e-5)
            ref_mean, ref_std = cv2.meanStdDev(x)
            np.testing.assert_array_equal(mean, ref_mean)
            np.testing.assert_allclose(std, ref_std, rtol=1e-12, atol=1e-5)


def test_uint8_threshold_at_the_edges_of_its_range():
    # uint8 compares in uint8: thresholds below 0 (every pixel above), between levels, at and
    # past 255, and maxvals outside [0, 255], for each kind, against OpenCV.
    x = np.random.default_rng(0).integers(0, 256, (37, 41), dtype=np.uint8)
    x[0, :3] = [0, 255, 1]
    for t in (-5, -1, -0.5, 0, 0.5, 127, 254.9, 255, 300):
        for m in (-3, 0, 100.5, 255, 300):
            for kind in range(5):
                got, want = gcv2.threshold(x, t, m, kind), cv2.threshold(x, t, m, kind)
                assert got[0] == want[0], (t, m, kind)
                np.testing.assert_array_equal(got[1], want[1], err_msg=f"{(t, m, kind)}")


@pytest.mark.parametrize("dtype", [np.int16, np.uint16])
def test_convert_scale_abs_of_16_bit_images_is_opencvs(dtype, monkeypatch):
    """Sobel's and Laplacian's CV_16S results taken back to 8 bits, as OpenCV's tutorials
    write it: inside a gdp.cv2.chain this was refused ("int16 is not accelerated"), eagerly it
    ran OpenCV's. float32 arithmetic with one rounding, as OpenCV's vector code: exact."""
    monkeypatch.setenv("GDP_CV2_STRICT", "1")  # gdp's kernels, never OpenCV's
    info = np.iinfo(dtype)
    rng = np.random.default_rng(0)
    wide = rng.integers(info.min, int(info.max) + 1, (97, 131, 3)).astype(dtype)
    near = rng.integers(max(info.min, -600), 600, (97, 131)).astype(dtype)  # not all saturated
    for image in (wide, near):
        for alpha, beta in ((1.0, 0.0), (0.25, -7.5), (1.7, 0.3), (1 / 255, 0.0), (-1.3, 2.5)):
            np.testing.assert_array_equal(
                gcv2.convertScaleAbs(image, alpha=alpha, beta=beta),
                cv2.convertScaleAbs(image, alpha=alpha, beta=beta),
            )


def test_the_sobel_tutorial_runs_as_one_chain():
    import skimage.data

    def edges(m, gray):
        gx = m.convertScaleAbs(m.Sobel(gray, cv2.CV_16S, 1, 0, ksize=3))
        gy = m.convertScaleAbs(m.Sobel(gray, cv2.CV_16S, 0, 1, ksize=3))
        return m.addWeighted(gx, 0.5, gy, 0.5, 0)

    program = gcv2.chain(choose=False)(lambda x: edges(gcv2, x))
    gray = cv2.cvtColor(skimage.data.astronaut(), cv2.COLOR_RGB2GRAY)
    for h, w in ((512, 512), (333, 517), (97, 131)):
        image = cv2.resize(gray, (w, h), interpolation=cv2.INTER_AREA)
        np.testing.assert_array_equal(program(image), edges(cv2, image))


@pytest.mark.parametrize("channels", [0, 1, 2, 3, 4])
def test_uint8_threshold_calls_as_opencv_answers_them(channels):
    """Plain calls (a C-contiguous uint8 image, no dst) take threshold's short path, and views,
    dst= and HxWx1 images the general one: both as OpenCV, over thresholds and maxvals out of
    range, halves and numpy scalars."""
    shape = (13, 70) if channels == 0 else (13, 70, channels)
    image = np.random.default_rng(channels).integers(0, 256, shape, dtype=np.uint8)
    read_only = image.copy()
    read_only.flags.writeable = False
    for thresh in (-3.5, -1, 0, 0.5, 127, np.float32(127.5), 254.5, 255, 300):
        for maxval in (-3, 0, 127.5, 128.5, 255, 400):
            for kind in range(5):
                want = cv2.threshold(image, thresh, maxval, kind)
                for src in (image, read_only, image[:, ::-1]):
                    got = gcv2.threshold(src, thresh, maxval, kind)
                    expected = cv2.threshold(src, thresh, maxval, kind)
                    assert got[0] == expected[0], (thresh, maxval, kind)
                    np.testing.assert_array_equal(got[1], expected[1], err_msg=f"{thresh}")
                dst = np.empty_like(image)
                assert gcv2.threshold(image, thresh, maxval, kind, dst)[1] is dst
                np.testing.assert_array_equal(dst.reshape(want[1].shape), want[1])
