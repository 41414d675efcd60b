"""gdp.cv2.warpAffine's eager calls on the cpu target run gdp.runtime.warp's hand kernel: against
OpenCV for every dtype, channel count, interpolation and border it takes, at sizes that move its
16-pixel blocks and row tails, on views and in dst, on both thread counts; no program compiled."""

import cv2 as real
import numpy as np
import pytest

import gdp.cv2 as cv2
from gdp.errors import InputError
from gdp.runtime import warp
from tests.gdp.cv2.one_thread import run_on_one_thread

# Output widths on both sides of the 16-pixel block (the vector formula) and its scalar tail.
SHAPES = [(1, 1), (2, 3), (5, 15), (7, 16), (9, 17), (31, 33), (40, 47), (23, 64), (18, 100)]
DTYPES = ("uint8", "uint16", "float32")


def _image(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    if dtype == "float32":
        return (rng.random(shape) * 300 - 20).astype(np.float32)
    return rng.integers(0, np.iinfo(dtype).max + 1, shape).astype(dtype)


def _matrices(h, w):
    rotation = real.getRotationMatrix2D((w / 2, h / 2), 23.0, 0.8)
    rotation[:, 2] += (1.5, -2.25)
    half = np.array([[0.5, 0.0, 0.0], [0.0, 0.5, 0.0]])  # nearest taps on exact ties
    shear = np.float32([[0.9, 0.3, -4.0], [-0.2, 1.1, 3.0]])
    return [("rotation", rotation, 0), ("half", half, 0), ("shear", shear, real.WARP_INVERSE_MAP)]


def _assert_warps(image, matrix, dsize, flags, border, value=(9, 8, 7, 6), label=""):
    want = real.warpAffine(image, matrix, dsize, flags=flags, borderMode=border, borderValue=value)
    got = cv2.warpAffine(image, matrix, dsize, flags=flags, borderMode=border, borderValue=value)
    assert got.shape == want.shape and got.dtype == want.dtype, label
    if image.dtype == np.float32:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-3, err_msg=label)
    else:
        # OpenCV's own float arithmetic, so the same values: exact
        np.testing.assert_array_equal(got, want, err_msg=label)


def _check(shapes, dtypes=DTYPES, channels=(1, 3, 4)):
    cv2.clear_cache()
    for i, (h, w) in enumerate(shapes):
        for dtype in dtypes:
            for c in channels:
                image = _image((h, w) if c == 1 else (h, w, c), dtype, seed=i * 7 + c)
                for name, matrix, inverse in _matrices(h, w):
                    for interp in (real.INTER_NEAREST, real.INTER_LINEAR)[: 1 + (w > 1)]:
                        for border in (real.BORDER_CONSTANT, real.BORDER_REPLICATE):
                            dsize = (w + 3, max(1, h - 1)) if name == "rotation" else (2 * w, h)
                            flags = interp | inverse
                            label = f"{dtype} C{c} {h}x{w} {name} {interp} {border}"
                            _assert_warps(image, matrix, dsize, flags, border, label=label)
    assert cv2.cache_info().programs == 0


def test_kernel_matches_opencv_at_sizes_that_move_its_blocks():
    # a kernel a dtype, channel count, interpolation and border (1.5 s of compile each): the
    # quick run takes every uint8 one, and those test_kernel_on_one_thread takes of float32
    _check(SHAPES, ("uint8",))
    _check(SHAPES, ("uint16",), (1,))
    _check(SHAPES, ("float32",), (1, 3))


@pytest.mark.slow
def test_kernel_of_every_dtype_and_channel_count_at_sizes_that_move_its_blocks():
    _check(SHAPES)


def test_random_matrices_and_exact_ties():
    """The block's coordinates are OpenCV's fma(M[0], x, float(y*M[1]) + M[2]) in float32: a
    formula rounded otherwise moves nearest neighbours at ties and bilinear weights. Random
    rotations and scales, and matrices of eighths, whose coordinates fall on exact ties."""
    rng = np.random.default_rng(5)
    image = rng.integers(0, 256, (61, 83, 3), np.uint8)
    for i in range(40):
        centre = (rng.uniform(0, 83), rng.uniform(0, 61))
        matrix = real.getRotationMatrix2D(centre, rng.uniform(-180, 180), rng.uniform(0.3, 3))
        if i % 4 == 0:
            matrix = np.round(matrix * 8) / 8
        for interp in (real.INTER_NEAREST, real.INTER_LINEAR):
            for inverse in (0, real.WARP_INVERSE_MAP):
                label = f"matrix {i} {interp} {inverse}"
                _assert_warps(image, matrix, (97, 53), interp | inverse, 0, label=label)


def test_kernel_on_one_thread():
    run_on_one_thread(
        f"""
        from tests.gdp.cv2.test_warp_kernel import _check
        _check({SHAPES[3:7]!r}, ("uint8", "float32"), (1, 3))
        """
    )


def test_one_pixel_wide_linear_runs_the_program():
    """LINEAR fetches pixel pairs, so a source 1 pixel wide runs the compiled program."""
    cv2.clear_cache()
    for c in (1, 3):
        image = _image((6, 1) if c == 1 else (6, 1, c), "uint8", seed=c)
        matrix = real.getRotationMatrix2D((0.5, 3), 30.0, 0.7)
        for border in (real.BORDER_CONSTANT, real.BORDER_REPLICATE):
            _assert_warps(image, matrix, (5, 4), real.INTER_LINEAR, border, label=f"C{c}")
    assert cv2.cache_info().programs == 4
    with pytest.raises(InputError, match="at least 2 wide"):
        out = np.empty((4, 5), np.uint8)
        coefficients, rows = np.zeros(4, np.float32), np.zeros(4, np.float32)
        warp.warp_affine(np.zeros((6, 1), np.uint8), out, coefficients, rows, rows, [0], 1, 0)


@pytest.mark.parametrize("channels", [1, 3, 4])
def test_nearest_on_sources_of_one_and_two_pixels(channels):
    """3-value pixels are fetched as words, one value earlier for the image's last pixel, and
    as 3 values from a source of one pixel: tiny sources, every border, the last pixel read."""
    rng = np.random.default_rng(channels)
    for h, w in ((1, 1), (1, 2), (2, 1), (3, 3)):
        shape = (h, w, channels) if channels > 1 else (h, w)
        image = rng.integers(0, 256, shape, np.uint8)
        shrink = np.float64([[0.1, 0, w - 0.6], [0, 0.1, h - 0.6]])  # mostly the last pixel
        for matrix in (real.getRotationMatrix2D((w / 2, h / 2), 33, 0.5), shrink):
            for border in (real.BORDER_CONSTANT, real.BORDER_REPLICATE):
                options = {
                    "flags": real.INTER_NEAREST,
                    "borderMode": border,
                    "borderValue": (1, 2, 3, 4),
                }
                for dsize in ((w, h), (37, 19)):
                    np.testing.assert_array_equal(
                        cv2.warpAffine(image, matrix, dsize, **options),
                        real.warpAffine(image, matrix, dsize, **options),
                    )


@pytest.mark.parametrize("gathers", [True, False], ids=["gathers", "loads"])
def test_both_fetches_of_uint8_pixels(monkeypatch, gathers):
    """uint8 pixels by AVX-512's gathers (the kernel of CPUs where they are fast) and by a load
    each (other CPUs), whatever this CPU is: at sizes that move the blocks, and on sources
    whose last pixels a gathered word would run past (gray: its last 3 pixels, a pair's word
    its last 2; BGR: a pair's 8 bytes its last 2), each taken from the image's last word."""
    from gdp.runtime import color

    if gathers and not color.avx512():
        pytest.skip("this CPU has no AVX-512: no gathers")
    monkeypatch.setattr(warp, "fast_gathers", lambda: gathers)
    _check(SHAPES[3:5], ("uint8",), (1, 3, 4))  # a block and its tail, 15 and 16 wide
    rng = np.random.default_rng(5)
    last = np.float64([[0.05, 0, 0.9], [0, 0.05, 0.9]])  # mostly between the last pixels
    ends = np.float64([[0.1, 0, 0.6], [0, 0.1, 0.6]])  # each of the last pixels, nearest
    for h, w in ((1, 2), (1, 3), (2, 2), (1, 5), (2, 3)):
        for c in (1, 3, 4):
            image = rng.integers(0, 256, (h, w, c) if c > 1 else (h, w), np.uint8)
            for matrix in (real.getRotationMatrix2D((w / 2, h / 2), 33, 0.5), last, ends):
                for border in (real.BORDER_CONSTANT, real.BORDER_REPLICATE):
                    for method in (real.INTER_LINEAR, real.INTER_NEAREST):
                        label = f"{h}x{w}x{c} {border} {method}"
                        _assert_warps(image, matrix, (37, 19), method, border, label=label)
    for c in (1, 3, 4):
        name = warp.source("uint8", c, warp.LINEAR, warp.CONSTANT, gathers)[0]
        assert name.endswith("_gathers") == gathers


def test_real_photo_at_1080p():
    import skimage.data

    bgr = real.cvtColor(real.resize(skimage.data.astronaut(), (1920, 1080)), real.COLOR_RGB2BGR)
    matrix = real.getRotationMatrix2D((960, 540), 17.0, 0.9)
    for image in (bgr, real.cvtColor(bgr, real.COLOR_BGR2GRAY)):
        for interp in (real.INTER_NEAREST, real.INTER_LINEAR):
            _assert_warps(image, matrix, (1920, 1080), interp, real.BORDER_CONSTANT, (0, 0, 0))


def test_views_dst_and_border_values():
    base = _image((30, 50, 3), "uint8", seed=1)
    view = base[3:27:2, 40:5:-3]  # strided and reversed: not contiguous
    matrix = real.getRotationMatrix2D((6, 5), 40.0, 1.2)
    # a border value that saturates, and one per channel
    for value in ((300, -5, 7.5), 9, (1.5, 2.5, 3.5, 4.5)):
        _assert_warps(view, matrix, (17, 13), real.INTER_LINEAR, real.BORDER_CONSTANT, value)
    dst = np.zeros((13, 17, 3), np.uint8)
    out = cv2.warpAffine(view, matrix, (17, 13), dst)
    assert out is dst
    np.testing.assert_array_equal(dst, real.warpAffine(view, matrix, (17, 13)))
    # in place: dst is the source, read whole before it is written
    image = _image((20, 20), "uint8", seed=2)
    want = real.warpAffine(image.copy(), matrix, (20, 20))
    assert cv2.warpAffine(image, matrix, (20, 20), image) is image
    np.testing.assert_array_equal(image, want)


def test_matrices_far_outside_and_not_finite_stay_in_the_image():
    """Coordinates far outside, infinite or NaN are clamped before they index: every tap
    stays in the image (the border for a constant one)."""
    image = _image((12, 14, 3), "uint8", seed=3)
    for matrix in (
        np.array([[1e30, 0, 0], [0, 1e30, 0]]),
        np.array([[1.0, 0, -1e9], [0, 1.0, 1e9]]),
    ):
        _assert_warps(image, matrix, (9, 7), real.INTER_LINEAR, real.BORDER_REPLICATE)
    for bad in (np.inf, np.nan):
        matrix = np.array([[1.0, 0, bad], [0, 1.0, 0]])
        flags = real.INTER_LINEAR | real.WARP_INVERSE_MAP
        out = cv2.warpAffine(image, matrix, (9, 7), flags=flags, borderValue=(1, 2, 3))
        assert out.shape == (7, 9, 3)


def test_kernel_refuses_what_it_does_not_take():
    out = np.empty((4, 4), np.uint8)
    args = (np.zeros(4, np.float32), np.zeros(4, np.float32), np.zeros(4, np.float32))
    with pytest.raises(InputError, match="int8"):
        warp.warp_affine(np.zeros((4, 4), np.int8), out, *args, np.zeros(1), 0, 0)
    with pytest.raises(InputError, match=r"1\|3\|4\), got \(4, 4, 2\)"):
        warp.warp_affine(np.zeros((4, 4, 2), np.uint8), out, *args, np.zeros(2), 0, 0)
    with pytest.raises(InputError, match="out must be"):
        warp.warp_affine(np.zeros((4, 4, 3), np.uint8), out, *args, np.zeros(3), 0, 0)


def test_gathers_are_chosen_by_the_cpus_features_where_its_name_is_masked():
    """A hypervisor may show another model number than the core's (LLVM then names a client
    CPU whose gathers are slow): an Intel CPU with AMX tiles gathers fast, whatever its name."""
    intel = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel\t\t: 167\nflags\t\t: fpu avx512f "
    assert warp.intel_with_amx(intel + "avx512vbmi amx_bf16 amx_tile amx_int8\nprocessor\t: 1\n")
    assert not warp.intel_with_amx(intel + "avx512vbmi avx512_vnni\n")  # Ice Lake, Rocket Lake
    amd = "vendor_id\t: AuthenticAMD\nflags\t\t: avx512f amx_tile\n"
    assert not warp.intel_with_amx(amd)
    assert not warp.intel_with_amx("")
