"""gdp.cv2.Canny bit for bit against cv2.Canny (real photos, random images, sizes from 1x1 to
1080p, L1 and L2, apertures 3/5/7, swapped thresholds, OpenCV on 1 and 2 threads), and
gdp.runtime.hysteresis, its flood-fill kernel, against connected components (scipy) and on its
own terms: errors, in place or not, the disk cache a later process loads without compiling."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import cv2 as real
import numpy as np
import pytest
import scipy.ndimage
import skimage.data

import gdp
import gdp.cv2 as cv2
from gdp.runtime import hysteresis as H
from gdp.runtime.backends.tvm import kernels
from gdp.runtime.cache import DiskCache
from tests.gdp.cv2.one_thread import run_on_one_thread

PHOTO_SIZE = (160, 120)  # cv2's (width, height): one compiled program for every photo


@pytest.fixture(autouse=True)
def _strict(monkeypatch):
    """Every call runs gdp's kernels: a fallthrough to OpenCV would compare OpenCV to itself."""
    monkeypatch.setenv("GDP_CV2_STRICT", "1")


@pytest.fixture(scope="module")
def gray_photos() -> dict[str, np.ndarray]:
    out = {}
    for name in ("astronaut", "camera", "coffee", "chelsea"):
        image = getattr(skimage.data, name)()
        if image.ndim == 3:
            image = real.cvtColor(image, real.COLOR_RGB2GRAY)
        out[name] = real.resize(image, PHOTO_SIZE, interpolation=real.INTER_AREA)
    return out


def _random(shape, seed=0) -> np.ndarray:
    """Smoothed noise: edges of every direction and strength, rather than all-strong noise."""
    noise = np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)
    return real.GaussianBlur(noise, (3, 3), 0)


def _assert_same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, what
    differ = int(np.count_nonzero(got != want))
    assert differ == 0, f"{what}: {differ} of {want.size} pixels differ from cv2.Canny"


# Thresholds in each aperture's gradient units (7's gradients are 16x 3's).
THRESHOLDS = {3: (50, 150), 5: (200, 600), 7: (1500, 4500)}


# Each (aperture, L2) compiles a kernel of its own (2-5 s).
@pytest.mark.parametrize(
    "aperture, l2",
    [
        (3, False),
        (3, True),
        (5, False),
        pytest.param(5, True, marks=pytest.mark.slow),
        pytest.param(7, False, marks=pytest.mark.slow),
        (7, True),
    ],
)
def test_photos_and_noise_every_aperture(gray_photos, aperture, l2):
    low, high = THRESHOLDS[aperture]
    images = dict(gray_photos, noise=_random(gray_photos["camera"].shape))
    for name, image in images.items():
        for t1, t2 in ((low, high), (high, low), (low / 3, high / 2)):
            want = real.Canny(image, t1, t2, apertureSize=aperture, L2gradient=l2)
            got = cv2.Canny(image, t1, t2, apertureSize=aperture, L2gradient=l2)
            _assert_same(got, want, f"{name} {t1}/{t2} aperture {aperture} L2={l2}")


@pytest.mark.parametrize("threads", [1, 2])
def test_opencv_threads_do_not_change_its_edges(gray_photos, threads):
    before = real.getNumThreads()
    real.setNumThreads(threads)
    try:
        for name, image in gray_photos.items():
            _assert_same(cv2.Canny(image, 50, 150), real.Canny(image, 50, 150), name)
    finally:
        real.setNumThreads(before)


@pytest.mark.parametrize(
    "shape",
    [
        (1, 1),
        (2, 3),
        pytest.param((3, 2), marks=pytest.mark.slow),  # each size compiles its own prepare
        pytest.param((1, 9), marks=pytest.mark.slow),
        (7, 5),
        (31, 37),
        pytest.param((1080, 1920), marks=pytest.mark.slow),  # 1080p: tests/samples' canny
    ],
    ids=str,
)
def test_sizes(shape):
    """From one pixel (never an edge: OpenCV's magnitudes outside the image are 0 and a lone
    pixel's gradient is 0) to 1080p; odd and prime sides; edges that touch the image's border."""
    h, w = shape
    photo = real.cvtColor(skimage.data.astronaut(), real.COLOR_RGB2GRAY)
    images = {
        "photo": real.resize(photo, (w, h), interpolation=real.INTER_AREA),
        "noise": _random(shape, seed=h * w),
        "stripes": np.tile(np.array([0, 0, 255, 255], np.uint8), (h, w // 4 + 1))[:, :w].copy(),
    }
    for name, image in images.items():
        for t1, t2 in ((50, 150), (150, 50), (1, 2)):
            _assert_same(cv2.Canny(image, t1, t2), real.Canny(image, t1, t2), f"{name} {t1}/{t2}")


def test_colour_and_dst(gray_photos):
    rgb = real.resize(skimage.data.chelsea(), PHOTO_SIZE, interpolation=real.INTER_AREA)
    _assert_same(cv2.Canny(rgb, 60, 180), real.Canny(rgb, 60, 180), "colour")
    image = gray_photos["coffee"]
    dst = np.full(image.shape, 7, np.uint8)
    out = cv2.Canny(image, 50, 150, dst)
    assert out is dst
    _assert_same(dst, real.Canny(image, 50, 150), "dst")


def test_a_larger_image_than_the_kernel_indexes_falls_through(monkeypatch):
    image = _random((9, 8))
    monkeypatch.setattr(H, "MAX_PIXELS", 50)
    with pytest.raises(cv2.FallthroughError, match="pixels"):
        cv2.Canny(image, 50, 150)
    monkeypatch.delenv("GDP_CV2_STRICT")
    _assert_same(cv2.Canny(image, 50, 150), real.Canny(image, 50, 150), "fallthrough")


# -- gray, aperture 3: gdp.runtime.canny's kernel -----------------------------------------------

# Heights around the kernel's 16 strips (fewer rows than strips, a strip of one row, a last
# strip short by one) and widths around its 16-column vectors (and the columns either side).
STRIP_SHAPES = [
    (1, 1),
    (1, 17),
    (17, 1),
    (2, 2),
    (3, 15),
    (15, 33),
    (16, 16),
    (17, 18),
    (31, 47),
    (33, 64),
    (47, 31),
    (100, 129),
    (241, 319),
]


def _against_opencv(images: dict, size: str) -> None:
    """Each image, L1 and L2, at thresholds of edges, swapped ones and tiny ones."""
    for name, image in images.items():
        for l2 in (False, True):
            for t1, t2 in ((50, 150), (150, 30), (1, 2)):
                want = real.Canny(image, t1, t2, L2gradient=l2)
                got = cv2.Canny(image, t1, t2, L2gradient=l2)
                _assert_same(got, want, f"{name} {size} {t1}/{t2} L2={l2}")


def _check_gray_kernel(shapes) -> None:
    photo = real.cvtColor(skimage.data.coffee(), real.COLOR_RGB2GRAY)
    for h, w in shapes:
        images = {
            "photo": real.resize(photo, (w, h), interpolation=real.INTER_AREA),
            "noise": _random((h, w), seed=h * 1000 + w),
        }
        _against_opencv(images, f"{h}x{w}")


def test_gray_kernels_direction_tests_are_canny_cpps():
    """gdp.runtime.canny's 16-bit direction tests against canny.cpp's 32-bit ones, for every
    |dx|, |dy| a Sobel of uint8 gives (up to 12240, aperture 5's; 7's are scaled to 10200)."""
    ay = np.arange(12241, dtype=np.int64)[None, :]
    for first in range(0, 12241, 1024):
        ax = np.arange(first, min(first + 1024, 12241), dtype=np.int64)[:, None]
        k = (ax * 27146) >> 16
        np.testing.assert_array_equal(ay * 32768 < ax * 13573, (ay <= k) & (ax != 0))
        np.testing.assert_array_equal(ay * 32768 > ax * 13573 + ax * 65536, ay > 2 * ax + k)
        assert (2 * ax + k).max() < 32768  # the 16-bit sum does not wrap


def test_gray_kernel_at_sizes_that_move_its_strips_and_vectors():
    _check_gray_kernel(STRIP_SHAPES)


def test_gray_kernel_on_one_thread():
    run_on_one_thread(
        f"""
        from tests.gdp.cv2.test_canny import _check_gray_kernel
        _check_gray_kernel({STRIP_SHAPES[:9]!r})
        """
    )


# -- 2 to 4 channels, aperture 3: the same kernel over interleaved values ----------------------


def _check_colour_kernel(shapes) -> None:
    """Every channel count the kernel takes, photos and noise, and ties between channels (a
    channel repeated: canny.cpp keeps the first of equal magnitudes, whose dx and dy may differ
    in sign from the later one's)."""
    photo = skimage.data.coffee()
    for h, w in shapes:
        rgb = real.resize(photo, (w, h), interpolation=real.INTER_AREA).reshape(h, w, 3)
        noise = _random((h, w * 4), seed=h * 1000 + w).reshape(h, w, 4)
        images = {
            "photo": rgb,
            "photo with alpha": np.dstack([rgb, noise[..., 0]]),
            "noise 2": noise[..., :2].copy(),
            "noise 4": noise,
            "tied": np.dstack([noise[..., 0], 255 - noise[..., 0], noise[..., 0]]),
        }
        _against_opencv(images, f"{h}x{w}")


def test_colour_kernel_at_sizes_that_move_its_strips_and_vectors():
    _check_colour_kernel(STRIP_SHAPES)


def test_colour_kernel_on_one_thread():
    run_on_one_thread(
        f"""
        from tests.gdp.cv2.test_canny import _check_colour_kernel
        _check_colour_kernel({STRIP_SHAPES[:9]!r})
        """
    )


# -- apertures 5 and 7: column sums, then row sums, over the same strips ------------------------


def _check_large_apertures(shapes, cases) -> None:
    """Gray and interleaved images at `shapes` for each (aperture, L2, channels) of `cases`:
    rows narrower than the aperture (whose pads repeat one pixel), the strips' first and last
    rows (their source rows clamped), thresholds in each aperture's units and swapped."""
    photo = skimage.data.coffee()
    for aperture, l2, channels in cases:
        low, high = THRESHOLDS[aperture]
        for h, w in shapes:
            rgb = real.resize(photo, (w, h), interpolation=real.INTER_AREA).reshape(h, w, 3)
            noise = _random((h, w * 4), seed=h * 1000 + w).reshape(h, w, 4)
            image = {1: rgb[:, :, 1].copy(), 3: rgb, 2: noise[..., :2].copy(), 4: noise}[channels]
            for t1, t2 in ((low, high), (high, low / 2), (1, 2)):
                want = real.Canny(image, t1, t2, apertureSize=aperture, L2gradient=l2)
                got = cv2.Canny(image, t1, t2, apertureSize=aperture, L2gradient=l2)
                what = f"{h}x{w}x{channels} aperture {aperture} L2={l2} {t1}/{t2}"
                _assert_same(got, want, what)


LARGE_APERTURE_SHAPES = [(1, 1), (2, 3), (5, 2), (7, 6), *STRIP_SHAPES[5:]]


def test_large_apertures_at_sizes_that_move_strips_vectors_and_pads():
    cases = [(5, False, 1), (5, False, 3), (7, True, 1), (7, True, 4)]
    _check_large_apertures(LARGE_APERTURE_SHAPES, cases)


@pytest.mark.slow
def test_large_apertures_every_kernel():
    cases = [(a, l2, c) for a in (5, 7) for l2 in (False, True) for c in (1, 2, 3, 4)]
    _check_large_apertures(LARGE_APERTURE_SHAPES, cases)


def test_large_apertures_on_one_thread():
    run_on_one_thread(
        f"""
        from tests.gdp.cv2.test_canny import _check_large_apertures
        _check_large_apertures({LARGE_APERTURE_SHAPES[:8]!r}, [(5, False, 3), (7, True, 1)])
        """
    )


def test_colour_kernel_dst_and_a_single_channel_axis():
    image = _random((45, 67 * 3), seed=6).reshape(45, 67, 3)
    want = real.Canny(image, 40, 120)
    dst = np.full(want.shape, 7, np.uint8)
    assert cv2.Canny(image, 40, 120, dst) is dst
    _assert_same(dst, want, "dst")
    one = image[:, :, :1].copy()  # (h, w, 1): OpenCV's gray
    _assert_same(cv2.Canny(one, 40, 120), real.Canny(one, 40, 120), "one channel")
    strided = image[:, ::2]  # not contiguous
    _assert_same(cv2.Canny(strided, 40, 120), real.Canny(strided, 40, 120), "strided")


def test_gray_kernel_thresholds_beyond_any_magnitude():
    image = _random((37, 41), seed=3)
    for l2 in (False, True):
        for t1, t2 in ((0, 0), (-5, -1), (1e9, 2e9), (2040, 2041), (0.5, 1.5), (-2e9, 5)):
            want = real.Canny(image, t1, t2, L2gradient=l2)
            _assert_same(cv2.Canny(image, t1, t2, L2gradient=l2), want, f"{t1}/{t2} L2={l2}")


def test_thresholds_outside_int_are_opencvs_to_answer(monkeypatch):
    """cv2.Canny floors its thresholds into an int: outside int's range C leaves the result
    undefined, and gdp leaves such a call to OpenCV rather than guess."""
    image = _random((9, 11), seed=4)
    with pytest.raises(cv2.FallthroughError, match="do not fit"):
        cv2.Canny(image, 10, 3e9)
    monkeypatch.delenv("GDP_CV2_STRICT")
    _assert_same(cv2.Canny(image, -1e12, 1e12), real.Canny(image, -1e12, 1e12), "fallthrough")


def test_gray_kernel_dst_in_place_and_at_odd_addresses():
    image = _random((45, 67), seed=5)
    want = real.Canny(image, 40, 120)
    dst = np.full(image.shape, 7, np.uint8)
    assert cv2.Canny(image, 40, 120, dst) is dst
    _assert_same(dst, want, "dst")
    odd = np.empty(image.size + 1, np.uint8)[1:].reshape(image.shape)  # not 8-byte aligned
    assert cv2.Canny(image, 40, 120, odd) is odd
    _assert_same(odd, want, "dst at an odd address")
    same = image.copy()  # the image as its own dst, as OpenCV allows
    assert cv2.Canny(same, 40, 120, same) is same
    _assert_same(same, want, "in place")
    wrong = np.zeros((3, 3), np.uint8)  # OpenCV reallocates a dst of another size
    _assert_same(cv2.Canny(image, 40, 120, wrong), want, "dst of another size")


# -- the kernel on its own -------------------------------------------------------------------


def _components(candidates: np.ndarray, strong: np.ndarray) -> np.ndarray:
    """The oracle: 8-connected components of the candidates that hold a strong candidate."""
    labels, _ = scipy.ndimage.label(candidates > 0, structure=np.ones((3, 3), int))
    keep = np.unique(labels[(candidates > 0) & (strong > 0)])
    keep = keep[keep > 0]
    return np.where(np.isin(labels, keep), np.uint8(255), np.uint8(0))


def _maps(levels) -> tuple[np.ndarray, np.ndarray]:
    """Candidates and strong maps from a level map (0 none, 1 weak, 2 strong)."""
    levels = np.asarray(levels, np.uint8)
    return (levels > 0).astype(np.uint8), (levels == 2).astype(np.uint8)


@pytest.mark.parametrize(
    "shape",
    [(1, 1), (1, 2), (2, 1), (2, 3), (3, 3), (1, 97), (97, 1), (13, 17), (64, 64), (480, 641)],
    ids=str,
)
def test_hysteresis_is_connected_components(shape):
    rng = np.random.default_rng(sum(shape))
    for density in (0.2, 0.45, 0.7, 1.0):
        candidates = (rng.random(shape) < density).astype(np.uint8)
        strong = candidates & (rng.random(shape) < 0.02)
        before = candidates.copy(), strong.copy()
        got = H.hysteresis(candidates, strong)
        np.testing.assert_array_equal(candidates, before[0])  # inputs left as they were
        np.testing.assert_array_equal(strong, before[1])
        want = _components(candidates, strong)
        np.testing.assert_array_equal(got, want, err_msg=f"density {density}")
        # A strong pixel that is no candidate starts nothing.
        stray = strong | ((candidates == 0) & (rng.random(shape) < 0.05))
        np.testing.assert_array_equal(H.hysteresis(candidates, stray), want)


def test_hysteresis_long_paths_and_full_images():
    """A spiral one pixel wide (the deepest flood), every pixel a candidate, every pixel strong,
    no strong pixel at all, seeds past the last 8-byte word."""
    n = 257
    spiral = np.zeros((n, n), np.uint8)
    top, left, bottom, right = 0, 0, n - 1, n - 1
    while top <= bottom and left <= right:
        spiral[top, left : right + 1] = 1
        spiral[top : bottom + 1, right] = 1
        spiral[bottom, left : right + 1] = 1
        spiral[top + 2 : bottom + 1, left] = 1
        top, left, bottom, right = top + 2, left + 2, bottom - 2, right - 2
    spiral[n // 2, n // 2] = 2
    for levels in (
        spiral,
        np.ones((50, 60), np.uint8),
        np.full((50, 60), 2, np.uint8),
        np.pad(np.full((3, 3), 2, np.uint8), 4, constant_values=1),
        np.zeros((9, 9), np.uint8),
        [[1, 1, 1], [1, 1, 1], [1, 1, 2]],
        [[2]],
        [[0, 0, 0, 0, 0, 0, 0, 2, 1, 0, 1]],
    ):
        candidates, strong = _maps(levels)
        np.testing.assert_array_equal(
            H.hysteresis(candidates, strong), _components(candidates, strong)
        )


def _check_floods_across_strips(shapes) -> None:
    """Both kernels (from the two maps, and flood_levels in place) at heights whose strips
    (H.STRIPS of them, rows // STRIPS rounded up each, the last ones empty) are 1 to 4 rows:
    random maps, and lines that cross every strip with their one strong pixel at either end
    or in the middle, so that only the serial part can reach most of them."""
    rng = np.random.default_rng(5)
    for h, w in shapes:
        maps = []
        for density in (0.3, 0.6):
            candidates = (rng.random((h, w)) < density).astype(np.uint8)
            maps.append((candidates, candidates & (rng.random((h, w)) < 0.01)))
        for row in (0, h // 2, h - 1):
            line = np.zeros((h, w), np.uint8)
            line[:, w // 2] = 1  # a column through every strip
            line[h // 3, : w // 2] = 1  # and a row off it
            line[:, 0] = 1
            strong = np.zeros_like(line)
            strong[row, w // 2] = 1
            maps.append((line, strong))
            zigzag = np.zeros((h, w), np.uint8)  # diagonal steps between strips
            zigzag[np.arange(h), np.arange(h) % w] = 1
            strong = np.zeros_like(zigzag)
            strong[row, row % w] = 1
            maps.append((zigzag, strong))
        for candidates, strong in maps:
            want = _components(candidates, strong)
            got = H.hysteresis(candidates, strong)
            np.testing.assert_array_equal(got, want, err_msg=f"{h}x{w}")
            levels = np.ascontiguousarray(candidates + (candidates & strong))
            np.testing.assert_array_equal(H.flood_levels(levels), want, err_msg=f"{h}x{w}")


STRIP_FLOOD_SHAPES = [(1, 9), (2, 40), (15, 33), (16, 16), (17, 70), (31, 9), (33, 64), (64, 3)]


def test_hysteresis_across_strips():
    _check_floods_across_strips(STRIP_FLOOD_SHAPES)


def test_hysteresis_across_strips_on_one_thread():
    run_on_one_thread(
        f"""
        from tests.gdp.cv2.test_canny import _check_floods_across_strips
        _check_floods_across_strips({STRIP_FLOOD_SHAPES!r})
        """
    )


def test_hysteresis_out_and_views():
    levels = np.zeros((20, 30), np.uint8)
    levels[5, 3:20] = 1
    levels[5, 10] = 2
    levels[15, 0:5] = 1
    candidates, strong = _maps(levels)
    want = _components(candidates, strong)
    out = np.full(levels.shape, 9, np.uint8)
    assert H.hysteresis(candidates, strong, out) is out
    np.testing.assert_array_equal(out, want)
    # Views that are not contiguous, and data at odd addresses.
    np.testing.assert_array_equal(
        H.hysteresis(np.asfortranarray(candidates), strong[::1, ::1]), want
    )
    odd = [np.empty(levels.size + 1, np.uint8)[1:].reshape(levels.shape) for _ in range(3)]
    odd[0][...], odd[1][...] = candidates, strong
    assert H.hysteresis(odd[0], odd[1], odd[2]) is odd[2]
    np.testing.assert_array_equal(odd[2], want)
    np.testing.assert_array_equal(H.hysteresis(candidates, strong, check=False), want)
    empty = np.zeros((0, 5), np.uint8)
    assert H.hysteresis(empty, empty).shape == (0, 5)


@pytest.mark.parametrize(
    "candidates, strong, message",
    [
        ([[0, 1]], np.zeros((1, 2), np.uint8), "candidates must be a numpy array"),
        (np.zeros((3, 3), np.int32), np.zeros((3, 3), np.uint8), "2-D uint8"),
        (np.zeros((3, 3), np.uint8), np.zeros((3, 3, 1), np.uint8), "strong must be a 2-D"),
        (np.full((3, 3), 255, np.uint8), np.zeros((3, 3), np.uint8), "holds 255"),
        (np.zeros((3, 3), np.uint8), np.full((3, 3), 2, np.uint8), "strong holds 2"),
        (np.zeros((3, 3), np.uint8), np.zeros((3, 4), np.uint8), "differ in shape"),
    ],
)
def test_hysteresis_refuses_what_are_no_maps(candidates, strong, message):
    with pytest.raises(gdp.InputError, match=message):
        H.hysteresis(candidates, strong)


@pytest.mark.parametrize(
    "out",
    [np.zeros((3, 4), np.uint8), np.zeros((3, 3), np.int16), np.zeros((3, 6), np.uint8)[:, ::2]],
)
def test_hysteresis_refuses_an_out_it_cannot_fill(out):
    maps = np.zeros((3, 3), np.uint8)
    with pytest.raises(gdp.OutputBufferError, match="out must be"):
        H.hysteresis(maps, maps, out)
    readonly = np.zeros((3, 3), np.uint8)
    readonly.flags.writeable = False
    with pytest.raises(gdp.OutputBufferError, match="read-only"):
        H.hysteresis(maps, maps, readonly)


def test_a_kernel_tvm_cannot_compile_is_a_compile_error_and_caches_nothing(tmp_path):
    with pytest.raises(gdp.CompileError, match="'broken'"):
        kernels.host_kernel(
            "broken", "@T.prim_func\ndef broken(a: T.handle):\n    x = y\n", DiskCache(tmp_path)
        )
    assert not [p for p in tmp_path.iterdir() if not p.name.startswith(".")]


def test_a_later_process_loads_the_kernel_without_compiling(tmp_path, monkeypatch):
    monkeypatch.setenv("GDP_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(kernels, "_loaded", {})
    candidates, strong = _maps([[2, 1, 0], [0, 0, 1], [1, 0, 0]])
    want = H.hysteresis(candidates, strong)
    assert [p for p in tmp_path.iterdir() if not p.name.startswith(".")], "nothing cached"
    script = textwrap.dedent(
        f"""
        import numpy as np, tvm

        def refuse(*args, **kwargs):
            raise AssertionError("compiled again")

        tvm.compile = refuse
        tvm.script.from_source = refuse
        from gdp.runtime.hysteresis import hysteresis

        candidates = np.array({candidates.tolist()}, np.uint8)
        strong = np.array({strong.tolist()}, np.uint8)
        print(hysteresis(candidates, strong).tolist())
        import sys

        assert "tensorflow" not in sys.modules
        """
    )
    env = dict(os.environ, GDP_CACHE_DIR=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == str(want.tolist())


def test_the_kernel_refuses_an_aperture_it_is_not_made_for():
    from gdp.errors import InputError
    from gdp.runtime import canny

    with pytest.raises(InputError, match=r"aperture of \(3, 5, 7\), got 9"):
        canny.canny_levels(_random((8, 8)), 10, 20, False, aperture=9)
