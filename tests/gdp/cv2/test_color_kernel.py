"""cvtColor of uint8 images runs on the cpu target through gdp.runtime.color's kernels: every
colour (all 2^24) of every conversion they take, equal to OpenCV's (which checks HSV's tables,
looked up or float32 divisions, against OpenCV's for every divisor); sizes that move the strips' and
the last step's boundaries, images under one step, views, HxWx1, dst; both thread counts; and
the compiled programs, which chains, graphs and other targets still run, against OpenCV too."""

import cv2 as real
import numpy as np
import pytest
import skimage.data

import gdp.cv2 as cv2
from gdp.cv2 import color as gdp_color
from gdp.errors import InputError
from gdp.runtime import color
from tests.gdp.cv2.one_thread import run_on_one_thread
from tests.gdp.cv2.programs_only import programs_only

# (code, source channels): every conversion the kernels run, each source channel count.
CONVERSIONS = [
    (real.COLOR_BGR2RGB, 3),
    (real.COLOR_BGRA2RGBA, 4),
    (real.COLOR_BGRA2BGR, 4),
    (real.COLOR_BGR2BGRA, 3),
    (real.COLOR_BGR2RGBA, 3),
    (real.COLOR_RGBA2BGR, 4),
    (real.COLOR_GRAY2BGR, 1),
    (real.COLOR_GRAY2BGRA, 1),
    (real.COLOR_BGR2GRAY, 3),
    (real.COLOR_RGB2GRAY, 3),
    (real.COLOR_BGRA2GRAY, 4),
    (real.COLOR_RGBA2GRAY, 4),
    (real.COLOR_BGR2YCrCb, 3),
    (real.COLOR_RGB2YCrCb, 4),
    (real.COLOR_BGR2HSV, 3),
    (real.COLOR_RGB2HSV, 4),
    (real.COLOR_BGR2Lab, 3),
    (real.COLOR_RGB2Lab, 4),
    (real.COLOR_HSV2BGR, 3),
    (real.COLOR_HSV2RGB, 3),
]
NV = [
    real.COLOR_YUV2BGR_NV12,
    real.COLOR_YUV2RGB_NV12,
    real.COLOR_YUV2BGR_NV21,
    real.COLOR_YUV2RGB_NV21,
]
# 1 to 63 pixels (one padded step), exactly one step, a tail after whole steps, several strips
# with a tail, and widths that put the tail anywhere in a row.
SIZES = [(1, 1), (3, 21), (1, 64), (2, 33), (7, 129), (61, 1027), (240, 321), (480, 641)]


def _every_colour(channels: int) -> np.ndarray:
    """A 4096x4096 image of every colour (a random alpha for 4 channels; gray: every level,
    repeated)."""
    if channels == 1:
        return np.tile(np.arange(256, dtype=np.uint8), (64, 4))
    i = np.arange(1 << 24, dtype=np.uint32)
    planes = [(i >> 16) & 255, (i >> 8) & 255, i & 255]
    if channels == 4:
        planes.append(np.random.default_rng(0).integers(0, 256, i.size))
    return np.stack(planes, -1).astype(np.uint8).reshape(4096, 4096, channels)


def _image(shape, channels: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, shape + ((channels,) if channels > 1 else ()), np.uint8)


@pytest.mark.parametrize("code,channels", CONVERSIONS)
def test_every_colour_as_opencv(code, channels):
    src = _every_colour(channels)
    np.testing.assert_array_equal(cv2.cvtColor(src, code), real.cvtColor(src, code))


def _check_sizes(conversions=CONVERSIONS, sizes=SIZES):
    cv2.clear_cache()
    for code, channels in conversions:
        for shape in sizes:
            src = _image(shape, channels, seed=shape[1])
            got, want = cv2.cvtColor(src, code), real.cvtColor(src, code)
            assert got.shape == want.shape, (code, shape)
            np.testing.assert_array_equal(got, want, err_msg=str((code, channels, shape)))
    assert cv2.cache_info().programs == 0  # nothing compiled: the kernels served every size


def test_sizes_as_opencv():
    _check_sizes()


def test_on_one_thread():
    run_on_one_thread(
        """
        from tests.gdp.cv2.test_color_kernel import CONVERSIONS, _check_sizes
        _check_sizes(CONVERSIONS[::3], [(1, 5), (7, 129), (240, 321)])
        """
    )


@pytest.mark.parametrize("code", NV)
def test_nv12_nv21_as_opencv(code):
    """Every (y, u, v) once (4096x4096 pixels, a chroma pair for 2x2 of them), then sizes with
    a row's last step anywhere and rows under one step."""
    cv2.clear_cache()  # programs of other tests in this process are not this test's
    y, x = np.mgrid[:4096, :4096]
    pair = (y // 2) * 2048 + x // 2  # 4M chroma pairs: each (u, v) 64 times
    luma = (pair % 64) * 4 + (y % 2) * 2 + x % 2  # every level at each (u, v)
    uv = np.stack([pair[::2, ::2] // 64 >> 8, pair[::2, ::2] // 64 & 255], -1)
    src = np.concatenate([luma, uv.reshape(2048, 4096)]).astype(np.uint8)
    np.testing.assert_array_equal(cv2.cvtColor(src, code), real.cvtColor(src, code))
    for h, w in [(2, 2), (4, 62), (2, 64), (6, 66), (34, 1002), (480, 640)]:
        src = _image((h * 3 // 2, w), 1, seed=w)
        np.testing.assert_array_equal(cv2.cvtColor(src, code), real.cvtColor(src, code))
    assert cv2.cache_info().programs == 0


def _cpu_without(monkeypatch, feature: str) -> list:
    """gdp.runtime.color told this CPU lacks `feature` (avx512, permutes_bytes): the list
    each ask appends to. cvtColor's short path keeps each conversion as it was first prepared
    (for this CPU): those are forgotten."""
    calls = []
    monkeypatch.setattr(color, feature, lambda: calls.append(1) or False)
    monkeypatch.setattr(gdp_color, "_prepared", {})
    return calls


@pytest.mark.parametrize(
    "code,channels",
    [(real.COLOR_RGB2Lab, 4), (real.COLOR_HSV2BGR, 3), (real.COLOR_BGR2GRAY, 3)],
)
def test_without_avx512_as_opencv(monkeypatch, code, channels):
    """The kernels a CPU without AVX-512 gets (tables loaded a lane at a time), compiled and
    run here: every colour."""
    calls = _cpu_without(monkeypatch, "avx512")
    src = _every_colour(channels)
    np.testing.assert_array_equal(cv2.cvtColor(src, code), real.cvtColor(src, code))
    assert calls  # the kernel asked, and got the one without AVX-512


@pytest.mark.parametrize(
    "code,channels",
    [(real.COLOR_BGR2HSV, 3), pytest.param(real.COLOR_RGB2HSV, 4, marks=pytest.mark.slow)],
)
def test_hsv_without_vbmi_as_opencv(monkeypatch, code, channels):
    """HSV where the CPU lacks AVX-512 VBMI's byte permutes: the tables as float32 divisions,
    compiled and run here; every colour."""
    calls = _cpu_without(monkeypatch, "permutes_bytes")
    src = _every_colour(channels)
    np.testing.assert_array_equal(cv2.cvtColor(src, code), real.cvtColor(src, code))
    assert calls  # the kernel asked, and got the one that divides


def test_photos_views_and_dst():
    bgr = real.resize(skimage.data.astronaut()[:, :, ::-1], (1920, 1080))
    for src in (bgr, bgr[::-1, ::2], bgr[100:101, 3:70], real.cvtColor(bgr, real.COLOR_BGR2BGRA)):
        code = real.COLOR_BGR2HSV if src.shape[2] == 3 else real.COLOR_BGRA2RGBA
        np.testing.assert_array_equal(cv2.cvtColor(src, code), real.cvtColor(src, code))
    gray = real.cvtColor(bgr, real.COLOR_BGR2GRAY)[..., None]  # HxWx1
    np.testing.assert_array_equal(
        cv2.cvtColor(gray, real.COLOR_GRAY2BGR), real.cvtColor(gray, real.COLOR_GRAY2BGR)
    )
    dst = np.zeros_like(bgr)
    assert cv2.cvtColor(bgr, real.COLOR_BGR2Lab, dst=dst) is dst
    np.testing.assert_array_equal(dst, real.cvtColor(bgr, real.COLOR_BGR2Lab))


def test_programs_as_opencv(monkeypatch):
    """Off the host kernels (a chain, a graph, another target runs these programs)."""
    programs_only(monkeypatch)
    cv2.clear_cache()
    for code, channels in CONVERSIONS[::2]:
        src = _image((9, 70), channels)
        np.testing.assert_array_equal(cv2.cvtColor(src, code), real.cvtColor(src, code))
    assert cv2.cache_info().programs > 0


@pytest.mark.parametrize(
    "code", [real.COLOR_BGR2HSV, real.COLOR_RGB2YCrCb], ids=["BGR2HSV", "RGB2YCrCb"]
)
def test_programs_of_every_colour_as_opencv(monkeypatch, code):
    """The programs' own arithmetic (HSV's divisions in place of OpenCV's tables, the
    fixed-point shifts as unsigned shifts) on every colour, bit for bit."""
    programs_only(monkeypatch)
    src = _every_colour(3)
    np.testing.assert_array_equal(cv2.cvtColor(src, code), real.cvtColor(src, code))


def test_hsv_divisions_are_opencvs_tables():
    import tensorflow as tf

    from gdp.ops.color import _hsv_divided
    from gdp.ops.color_tables import HSV_SHIFT, hsv_tables

    levels = tf.range(256, dtype=tf.int32)
    sdiv, hdiv = hsv_tables()
    np.testing.assert_array_equal(_hsv_divided(255 << HSV_SHIFT, levels).numpy(), sdiv)
    np.testing.assert_array_equal(_hsv_divided((180 << HSV_SHIFT) // 6, levels).numpy(), hdiv)


def test_kernel_refuses_what_it_does_not_take():
    with pytest.raises(InputError, match="uint8"):
        color.convert(np.zeros((4, 4, 3), np.float32), "to_gray", bidx=0)
    with pytest.raises(InputError, match="3 or 4 channels, got 2"):
        color.convert(np.zeros((4, 4, 2), np.uint8), "to_hsv", bidx=0)
    with pytest.raises(InputError, match="h and w even, got 9x5"):
        color.convert(np.zeros((9, 5), np.uint8), "nv_to_rgb", bidx=0, uv_first_u=True)
    with pytest.raises(InputError, match="expected one of"):
        color.convert(np.zeros((4, 4, 3), np.uint8), "to_luv", bidx=0)
