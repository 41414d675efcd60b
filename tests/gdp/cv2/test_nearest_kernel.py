"""gdp.cv2.resize with INTER_NEAREST runs gdp.runtime.nearest's hand kernel on the cpu target:
against OpenCV for every dtype it takes and 1 to 4 channels (whole-pixel and value-by-value
copies, and the byte permutes' chunks of 64 and 32 bytes), enlarging and shrinking, at sizes
that move a row's last pixel and last chunk and the image's end, on views and into dst, on both
thread counts; no program compiled."""

import cv2 as real
import numpy as np
import pytest
import skimage.data

import gdp.cv2 as cv2
from gdp.errors import InputError
from gdp.runtime import lut, nearest
from tests.gdp.cv2.one_thread import run_on_one_thread

DTYPES = (np.uint8, np.uint16, np.int16, np.float32, np.float64)
SHAPES = [(1, 1), (7, 9), (33, 65), (120, 77), (9, 301), (5, 1001)]


def _image(shape, dtype, seed):
    values = np.random.default_rng(seed).random(shape) * 300 - 20
    return values.astype(dtype) if np.dtype(dtype).kind == "f" else values.clip(0).astype(dtype)


def _same(image, *args, **kwargs):
    kwargs["interpolation"] = real.INTER_NEAREST
    got, want = cv2.resize(image, *args, **kwargs), real.resize(image, *args, **kwargs)
    assert got.shape == want.shape and got.dtype == want.dtype, (image.shape, args, kwargs)
    np.testing.assert_array_equal(got, want, err_msg=f"{image.dtype} {image.shape} {args}")


def _check(dtypes=DTYPES, shapes=SHAPES):
    cv2.clear_cache()
    for dtype in dtypes:
        for c in (1, 2, 3, 4):
            for h, w in shapes:
                image = _image((h, w, c) if c > 1 else (h, w), dtype, seed=h * c)
                for dsize in ((1, 1), (2 * w + 1, 3 * h), (max(1, w // 3), max(1, h // 2))):
                    _same(image, dsize)
                if round(w * 0.37) and round(h * 1.9):
                    _same(image, None, fx=0.37, fy=1.9)
    assert cv2.cache_info().programs == 0


def test_kernel_matches_opencv(strips):
    _check()


def test_kernel_on_one_thread():
    run_on_one_thread(
        """
        import numpy as np
        from tests.gdp.cv2.test_nearest_kernel import _check
        _check((np.uint8, np.float32), [(33, 65), (120, 77)])
        """
    )


def test_real_photo_views_and_dst():
    bgr = real.cvtColor(real.resize(skimage.data.astronaut(), (1920, 1080)), real.COLOR_RGB2BGR)
    for image in (bgr, real.cvtColor(bgr, real.COLOR_BGR2GRAY), bgr[::3, 7:900:2]):
        for dsize in ((640, 360), (224, 224), (3840, 2160)):
            _same(image, dsize)
    dst = np.zeros((360, 640, 3), np.uint8)
    assert cv2.resize(bgr, (640, 360), dst, interpolation=real.INTER_NEAREST) is dst
    np.testing.assert_array_equal(dst, real.resize(bgr, (640, 360), interpolation=0))


def test_any_index_tables_against_numpy():
    # columns in any order (a row's vectors may read up to its largest offset), the source's
    # last pixel anywhere in a row: the kernel's pixels are NumPy's fancy indexing
    for channels in (3, 5):
        image = _image((4, 5, channels), np.uint8, 3)
        for rows, cols in (([3, 0, 3], [4, 0, 4, 2]), ([3], [4, 3, 2, 1, 0]), ([3, 3], [0])):
            plan = nearest.plan(image.shape, image.dtype, rows, cols)
            want = image[np.ix_(rows, cols)]
            np.testing.assert_array_equal(nearest.resize_nearest(image, plan), want)


def test_chunks_of_the_byte_permutes():
    """Which copy a scale takes (a chunk of 64 bytes, of 32, or none), and each against OpenCV;
    the copy without VBMI at the same scales."""
    if not lut.permutes_bytes():
        pytest.skip("this CPU has no AVX-512 VBMI: the permuted copy does not run")
    image = _image((31, 643, 3), np.uint8, 5)
    for width, chunk in ((2000, 64), (643, 64), (400, 64), (214, 32), (170, 32), (130, 0)):
        plan = nearest.plan(
            image.shape, image.dtype, np.arange(31), np.arange(width) * 643 // width
        )
        assert plan.chunk == chunk, width
        _same(image, (width, 17))
    gray = _image((3, 130), np.uint8, 6)  # 130 source bytes a row: the permute's 128 fit
    assert nearest.plan(gray.shape, gray.dtype, [0], np.arange(64) * 2).chunk == 64
    _same(gray, (64, 3))
    _same(gray, (63, 3))  # an output row under a chunk of 64: one of 32


def test_without_byte_permutes(monkeypatch):
    from gdp.cv2 import geometry

    monkeypatch.setattr(nearest, "permutes_bytes", lambda: False)
    geometry._nearest_plan.cache_clear()  # plans are kept by size: made again, without
    try:
        _check((np.uint8, np.float32), [(9, 301), (5, 1001)])
        plan = geometry._nearest_plan((5, 1001, 3), np.dtype(np.uint8), 500, 5, 0.5, 1.0)
        assert plan.chunk == 0
    finally:
        geometry._nearest_plan.cache_clear()


def test_any_index_tables_of_wide_rows_against_numpy():
    """Columns in any order within a chunk's 128 bytes (permuted) or not (the other copy)."""
    rng = np.random.default_rng(7)
    for channels, spread in ((1, 40), (3, 12), (3, 400), (4, 3)):
        image = _image((6, 400, channels), np.uint8, channels)
        cols = np.clip(np.arange(150) * 2 + rng.integers(-spread, spread, 150), 0, 399)
        rows = rng.integers(0, 6, 9)
        plan = nearest.plan(image.shape, image.dtype, rows, cols)
        np.testing.assert_array_equal(
            nearest.resize_nearest(image, plan), image[np.ix_(rows, cols)]
        )


def test_plan_refuses_what_it_does_not_take():
    with pytest.raises(InputError, match="outside the 4x5 image"):
        nearest.plan((4, 5), np.uint8, [0, 4], [0])
    with pytest.raises(InputError, match="outside"):
        nearest.plan((4, 5, 3), np.uint8, [0], [-1])
    with pytest.raises(InputError, match="numbers"):
        nearest.plan((4, 5), np.dtype(object), [0], [0])
    plan = nearest.plan((4, 5), np.uint8, [0, 3], [4])
    with pytest.raises(InputError, match="the plan is for uint8"):
        nearest.resize_nearest(np.zeros((4, 6), np.uint8), plan)


def test_hand_kernels_leave_arrays_of_2_gb_to_the_programs():
    """The hand kernels index with int32 offsets: an input or output of 2 GB or more runs the
    compiled program (an untouched np.empty reserves no memory)."""
    from gdp.cv2 import common

    small = np.zeros((4, 4), np.uint8)
    assert common.on_host(small)
    assert not common.on_host(np.empty(1 << 31, np.uint8))
    assert not common.on_host(small, out_bytes=1 << 31)
