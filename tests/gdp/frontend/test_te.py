"""gdp.from_te: TE neighbour comparisons -> the depthwise-conv mask graph (thesis 5.5.1),
checked against NumPy loops (reads outside the image are zeros) on onnxruntime and the cpu."""

from __future__ import annotations

import numpy as np
import pytest
import skimage.data
from hypothesis import given, settings
from hypothesis import strategies as st

import gdp
from tests.oracle import run_onnxruntime

te = pytest.importorskip("tvm.te")
tirx = pytest.importorskip("tvm.tirx")

COMPARE = {
    ">": (lambda a, b: a > b, np.greater),
    ">=": (lambda a, b: a >= b, np.greater_equal),
    "<": (lambda a, b: a < b, np.less),
    "<=": (lambda a, b: a <= b, np.less_equal),
}


def _f32(value: float):
    return tirx.const(value, "float32")


def _neighbour_sum(image: np.ndarray, taps: dict) -> np.ndarray:
    """sum_k w_k * image[i+dy_k, j+dx_k] with zeros outside, by explicit shifts."""
    h, w = image.shape[:2]
    out = np.zeros(image.shape, np.float64)
    for (dy, dx), weight in taps.items():
        shifted = np.zeros(image.shape, np.float64)
        ys, xs = slice(max(0, -dy), min(h, h - dy)), slice(max(0, -dx), min(w, w - dx))
        yd, xd = slice(max(0, dy), min(h, h + dy)), slice(max(0, dx), min(w, w + dx))
        shifted[ys, xs] = image[yd, xd]
        out += weight * shifted
    return out


def test_thesis_figure_5_3_upper_neighbour_on_a_photo():
    """mask[i][j] = img[i][j] > img[i-1][j] ? 1 : 0, the thesis's example, on a real photo."""
    photo = skimage.data.camera().astype(np.float32)
    h, w = photo.shape
    img = te.placeholder((h, w), "float32", name="img")
    mask = te.compute(
        (h, w),
        lambda i, j: tirx.if_then_else(img[i, j] > img[i - 1, j], _f32(1.0), _f32(0.0)),
        name="mask",
    )
    model = gdp.from_te(mask, [img])
    assert [n.op_type for n in model.graph.node].count("Conv") == 1
    want = np.zeros((h, w), np.float32)
    for i in range(h):  # the loop the user wrote, row by row
        upper = photo[i - 1] if i > 0 else np.zeros(w, np.float32)
        want[i] = np.where(photo[i] > upper, 1.0, 0.0)
    for target in ("reference", "cpu"):
        np.testing.assert_array_equal(gdp.compile(model, target=target)(photo), want)


def test_weighted_form_with_tensor_branches_on_a_colour_image():
    """a*img[i][j] - b*img[i-x][j-y] > K with t and f read from two other inputs, HWC."""
    rgb = skimage.data.astronaut()[::4, ::4].astype(np.float32)
    h, w, c = rgb.shape
    img = te.placeholder((h, w, c), "float32", name="img")
    bright = te.placeholder((h, w, c), "float32", name="bright")
    dark = te.placeholder((h, w, c), "float32", name="dark")
    out = te.compute(
        (h, w, c),
        lambda i, j, k: tirx.if_then_else(
            2.0 * img[i, j, k] - 1.5 * img[i - 1, j + 2, k] > 30.0, bright[i, j, k], dark[i, j, k]
        ),
        name="out",
    )
    model = gdp.from_te(out, [img, bright, dark])
    rng = np.random.default_rng(0)
    t = rng.random((h, w, c), dtype=np.float32)
    f = rng.random((h, w, c), dtype=np.float32)
    taken = _neighbour_sum(rgb, {(0, 0): 2.0, (-1, 2): -1.5}) > 30.0
    want = np.where(taken, t, f)
    feeds = {"img": rgb, "bright": t, "dark": f}
    np.testing.assert_array_equal(run_onnxruntime(model, feeds)[0], want)
    np.testing.assert_array_equal(gdp.compile(model, target="cpu")(**feeds), want)


@settings(max_examples=40, deadline=None)
@given(
    height=st.integers(1, 9),
    width=st.integers(1, 9),
    channels=st.sampled_from([0, 1, 3, 4]),
    taps=st.dictionaries(
        st.tuples(st.integers(-2, 2), st.integers(-2, 2)),
        st.integers(-3, 3).filter(bool),
        min_size=1,
        max_size=4,
    ),
    threshold=st.integers(-300, 300),
    compare=st.sampled_from(sorted(COMPARE)),
    values=st.tuples(st.integers(-5, 5), st.integers(-5, 5)),
    seed=st.integers(0, 2**16),
)
def test_any_neighbour_comparison_equals_the_numpy_loop(
    height, width, channels, taps, threshold, compare, values, seed
):
    """Property: for any shape, channel count, taps, weights, comparison and threshold, the
    dense graph equals the pixel rule (integer-valued inputs: the sums are exact)."""
    shape = (height, width) if channels == 0 else (height, width, channels)
    image = np.random.default_rng(seed).integers(0, 256, shape).astype(np.float32)
    img = te.placeholder(shape, "float32", name="img")
    te_compare, np_compare = COMPARE[compare]

    def rule(*index):
        i, j, *rest = index
        total = 0.0
        for (dy, dx), weight in taps.items():
            total = total + float(weight) * img[(i + dy, j + dx, *rest)]
        return tirx.if_then_else(
            te_compare(total, float(threshold)), _f32(values[0]), _f32(values[1])
        )

    out = te.compute(shape, rule, name="out")
    model = gdp.from_te(out, [img])
    taken = np_compare(_neighbour_sum(image, taps), threshold)
    want = np.where(taken, np.float32(values[0]), np.float32(values[1]))
    np.testing.assert_array_equal(run_onnxruntime(model, {"img": image})[0], want)


def _refused(body, match: str, shape=(4, 5), dtype="float32"):
    img = te.placeholder(shape, dtype, name="img")
    other = te.placeholder(shape, dtype, name="other")
    out = te.compute(shape, lambda i, j: body(img, other, i, j), name="out")
    with pytest.raises(gdp.FrontendError, match=match):
        gdp.from_te(out, [img, other])


def test_refuses_forms_it_does_not_take():
    one, zero = _f32(1.0), _f32(0.0)
    _refused(lambda a, b, i, j: a[i, j] * 2.0, "if_then_else")
    _refused(lambda a, b, i, j: tirx.if_then_else(a[i, j] == a[i - 1, j], one, zero), "EQ")
    _refused(
        lambda a, b, i, j: tirx.if_then_else(a[i, j] * a[i - 1, j] > 1.0, one, zero),
        "product of two reads",
    )
    _refused(lambda a, b, i, j: tirx.if_then_else(a[i, j] > b[i - 1, j], one, zero), "two images")
    _refused(
        lambda a, b, i, j: tirx.if_then_else(a[i * 2, j] > 1.0, one, zero), "axis plus a constant"
    )
    _refused(lambda a, b, i, j: tirx.if_then_else(a[i, j] > 1.0, b[i - 1, j], zero), "true_value")
    _refused(
        lambda a, b, i, j: tirx.if_then_else(
            a[i, j] - a[i - 1, j] > tirx.const(3, "uint8"), one, zero
        ),
        "wraps",
        dtype="uint8",
    )
