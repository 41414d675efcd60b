"""gdp.cv2's filters with large kernels (13..31 taps: loops over the taps, not unrolled
stencils) against OpenCV: every border type, uint8 and float32, images smaller than the
kernel, and the shape of the programs (a gather and a reduction, not one term per tap)."""

import cv2 as real
import numpy as np
import pytest

import gdp.cv2 as cv2
from gdp.cv2 import engine, filters, kernels
from gdp.cv2.filters import rank_one

RNG = np.random.default_rng(19)
U8 = RNG.integers(0, 256, (40, 50, 3), dtype=np.uint8)
F32 = RNG.normal(size=(40, 50, 3)).astype(np.float32) * 50
SMALL = RNG.integers(0, 256, (9, 12, 3), dtype=np.uint8)  # smaller than the kernels
GRAY = RNG.integers(0, 256, (40, 50), dtype=np.uint8)
RANDOM_13 = RNG.normal(size=(13, 13)).astype(np.float32)
RANDOM_17x15 = RNG.normal(size=(17, 15)).astype(np.float32)
TAPS_21, TAPS_17 = RNG.normal(size=21).astype(np.float32), RNG.normal(size=17).astype(np.float32)

C, REP, REF, R101 = (
    real.BORDER_CONSTANT,
    real.BORDER_REPLICATE,
    real.BORDER_REFLECT,
    real.BORDER_REFLECT_101,
)
ELLIPSE_21 = real.getStructuringElement(real.MORPH_ELLIPSE, (21, 21))
CROSS_13 = real.getStructuringElement(real.MORPH_CROSS, (13, 13))
ELLIPSE_15 = real.getStructuringElement(real.MORPH_ELLIPSE, (15, 15))


def _check(call, image):
    got, want = call(cv2, image), call(real, image)
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    else:
        np.testing.assert_array_equal(got, want)


# Each border type of each family at least once; uint8 exact, float32 to OpenCV's 1e-5.
CASES = {
    "GaussianBlur 31 u8 REFLECT_101": (lambda m, x: m.GaussianBlur(x, (31, 31), 0), U8),
    "GaussianBlur 17x23 f32 REFLECT": (
        lambda m, x: m.GaussianBlur(x, (17, 23), 4.0, borderType=REF),
        F32,
    ),
    "GaussianBlur 21 u8 REPLICATE smaller than kernel": (
        lambda m, x: m.GaussianBlur(x, (21, 21), 0, borderType=REP),
        SMALL,
    ),
    "blur 31 u8 CONSTANT": (lambda m, x: m.blur(x, (31, 31), borderType=C), U8),
    "blur 13x29 f32 REPLICATE": (lambda m, x: m.blur(x, (13, 29), borderType=REP), F32),
    "blur 31 u8 REFLECT_101 smaller than kernel": (lambda m, x: m.blur(x, (31, 31)), SMALL),
    "filter2D box 13 u8 (rank one)": (
        lambda m, x: m.filter2D(x, -1, np.ones((13, 13), np.float32) / 169),
        U8,
    ),
    "filter2D 13 random u8 CONSTANT": (
        lambda m, x: m.filter2D(x, -1, RANDOM_13, borderType=C),
        U8,
    ),
    "filter2D 17x15 random f32 REPLICATE": (
        lambda m, x: m.filter2D(x, -1, RANDOM_17x15, borderType=REP),
        F32,
    ),
    "filter2D 13 random f32 REFLECT smaller than kernel": (
        lambda m, x: m.filter2D(x, real.CV_32F, RANDOM_13, borderType=REF),
        SMALL,
    ),
    "sepFilter2D 21x17 f32 REFLECT_101": (
        lambda m, x: m.sepFilter2D(x, -1, TAPS_21, TAPS_17),
        F32,
    ),
    "Laplacian 7 u8 CV_32F (rank two)": (
        lambda m, x: m.Laplacian(x, real.CV_32F, ksize=7),
        GRAY,
    ),
    "erode ellipse 21 u8 default border": (lambda m, x: m.erode(x, ELLIPSE_21), U8),
    "dilate rect 15x21 f32 REPLICATE": (
        lambda m, x: m.dilate(x, np.ones((21, 15), np.uint8), borderType=REP),
        F32,
    ),
    "morphologyEx GRADIENT cross 13 u8 REFLECT": (
        lambda m, x: m.morphologyEx(x, real.MORPH_GRADIENT, CROSS_13, borderType=REF),
        U8,
    ),
    "erode ellipse 15 u8 REFLECT_101 anchor, 2 iterations": (
        lambda m, x: m.erode(x, ELLIPSE_15, anchor=(3, 9), iterations=2, borderType=R101),
        U8,
    ),
    "dilate rect 13x17 u8 CONSTANT 7 anchor": (
        lambda m, x: m.dilate(
            x, np.ones((17, 13), np.uint8), anchor=(2, 11), borderType=C, borderValue=7
        ),
        U8,
    ),
    "erode ellipse 21 u8 smaller than kernel": (lambda m, x: m.erode(x, ELLIPSE_21), SMALL),
    # Colour Canny with the 5x5 Sobel (gdp.runtime.canny's column and row sums): ties between
    # channels (a gray image in two of them).
    "Canny colour with channel ties": (
        lambda m, x: m.Canny(
            np.dstack([x[..., 0], x[..., 0], x[..., 1]]), 240, 720, apertureSize=5
        ),
        U8,
    ),
    "medianBlur 5 u8": (lambda m, x: m.medianBlur(x, 5), U8),
    "medianBlur 5 u8 smaller than kernel": (lambda m, x: m.medianBlur(x, 5), SMALL[:3, :4]),
}


# One case per algorithm runs by default (a compile each, seconds on 2 cores); the variants
# (other borders, dtypes, anchors, images smaller than the kernel) are `slow`.
DEFAULT = {
    "GaussianBlur 31 u8 REFLECT_101",
    "blur 31 u8 CONSTANT",
    "filter2D box 13 u8 (rank one)",
    "filter2D 13 random u8 CONSTANT",
    "erode ellipse 21 u8 default border",
    "Canny colour with channel ties",
    "medianBlur 5 u8",
}


@pytest.mark.parametrize(
    "name",
    [n if n in DEFAULT else pytest.param(n, marks=pytest.mark.slow) for n in CASES],
)
def test_large_kernels_match_opencv(name):
    call, image = CASES[name]
    _check(call, image)


def test_a_kernel_past_free_taps_compiles_to_a_loop_not_a_stencil():
    """A 33x33 Gaussian's program of uint16 (one per size: the loops need static sizes; uint8
    and float32 run gdp.runtime.separable's kernel): its taps gathered and reduced (a handful
    of nodes), where the unrolled stencil had a Slice, a Mul and an Add per tap."""
    u16 = U8.astype(np.uint16) * 200
    cv2.GaussianBlur(u16, (33, 33), 0)
    (model,) = [
        m
        for (key, _), m in engine._programs.items()
        if key[:3] == ("GaussianBlur", (u16.shape,), ("<u2",))
        and key[4] == (("kx", 33), ("ky", 33))
    ]
    ops = [node.op_type for node in model.source_onnx.graph.node]
    assert "Gather" in ops and "ReduceSum" in ops
    assert ops.count("Mul") < 10 and len(ops) < 100, ops


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda m, x: m.GaussianBlur(x, (31, 31), 0), id="GaussianBlur 31"),
        # slow: each of these two programs takes 25-40 s to compile on 2 cores
        pytest.param(
            lambda m, x: m.blur(x, (25, 17), borderType=m.BORDER_REPLICATE),
            id="blur 25x17 replicate",
            marks=pytest.mark.slow,
        ),
        pytest.param(lambda m, x: m.blur(x, (20, 30)), id="blur 20x30", marks=pytest.mark.slow),
        pytest.param(
            lambda m, x: m.sepFilter2D(x.astype(np.float32), -1, TAPS_21, TAPS_17),
            id="sepFilter2D 21x17 float32",
        ),
    ],
)
def test_kernels_up_to_free_taps_serve_every_size_from_one_program(call, monkeypatch):
    # Up to FREE_TAPS taps an axis, the taps stay unrolled in a program for any image size (the
    # program's path: on the host, uint8 runs gdp.runtime.separable's kernel, no program).
    monkeypatch.setattr(filters, "_separable_on_host", lambda *args: False)
    cv2.clear_cache()
    before = cv2.cache_info().compilations
    for h, w in [(40, 57), (97, 131), (64, 33)]:
        _check(call, RNG.integers(0, 256, (h, w, 3), dtype=np.uint8))
    assert cv2.cache_info().compilations - before == 1


def test_rank_one_reconstructs_exactly_or_refuses():
    box = np.full((13, 13), 1 / 169, np.float32)
    column, row = rank_one(box)
    np.testing.assert_array_equal(column[:, None] * row[None, :], box)
    binomial = np.array([1, 4, 6, 4, 1]) / 16
    column, row = rank_one(np.outer(binomial, binomial))
    np.testing.assert_array_equal(column[:, None] * row[None, :], np.outer(binomial, binomial))
    assert rank_one(RANDOM_13) is None
    # Integer kernels keep integer factors; [[2, 4], [3, 6]] = [1, 1.5] x [2, 4] has none
    # with the first row as pivot, and the exact int32 path must not turn float.
    ints = np.array([[1, 2, 1], [2, 4, 2], [1, 2, 1]], np.int32)
    column, row = rank_one(ints)
    assert column.dtype == np.int32 and np.array_equal(np.outer(column, row), ints)
    assert rank_one(np.array([[2, 4], [3, 6]], np.int32)) is None
    assert rank_one(np.zeros((3, 3))) is None


def test_loop_thresholds_agree_with_gdp_ops():
    from gdp.ops import filters

    assert (kernels.LOOP_TAPS, kernels.LOOP_TAPS_2D) == (
        filters.STENCIL_TAPS,
        filters.STENCIL_TAPS_2D,
    )


@pytest.mark.parametrize("size", [None, 40])
def test_graph_mode_large_kernels_of_known_and_unknown_size(size):
    """On TF tensors (a user's tf.function, run by TensorFlow here): the loop form where the
    size is known, the unrolled stencil where it is not (the loops need static sizes)."""
    import tensorflow as tf

    spec = tf.TensorSpec([size, None if size is None else 50, 3], tf.uint8)

    @tf.function(input_signature=[spec])
    def chain(x):
        x = cv2.GaussianBlur(x, (21, 17), 0)
        x = cv2.blur(x, (3, 19))
        return cv2.filter2D(x, -1, RANDOM_13)

    want = real.filter2D(real.blur(real.GaussianBlur(U8, (21, 17), 0), (3, 19)), -1, RANDOM_13)
    np.testing.assert_array_equal(chain(U8).numpy(), want)
