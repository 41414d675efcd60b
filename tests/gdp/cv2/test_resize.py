"""gdp.cv2.resize's integer paths against OpenCV on real photos. uint8 INTER_LINEAR runs
gdp.runtime.resize's kernel, OpenCV's own arithmetic (its vector code's 16-bit vertical
rounding): bit-exact at every size. The programs (every other integer resize; linear inside a
graph): the channels flattened into the row, the pass order chosen by cost (vertical first when
it shrinks the rows), taps of weight 0 dropped, identity axes skipped, the unsigned shift.
Bit-exact where OpenCV's own arithmetic is the exact fixed point (nearest, area, cubic by exact
factors); elsewhere OpenCV's vector code rounds the vertical sum otherwise, which the programs do
not mimic: within 1 LSB, as tests/conformance holds it."""

import cv2 as real
import numpy as np
import pytest
import skimage.data

import gdp.cv2 as cv2

NEAREST, LINEAR, CUBIC, AREA = (
    real.INTER_NEAREST,
    real.INTER_LINEAR,
    real.INTER_CUBIC,
    real.INTER_AREA,
)


def _photo(channels: int) -> np.ndarray:
    if channels == 1:
        return skimage.data.camera()  # 512x512
    image = skimage.data.coffee()  # 400x600x3
    if channels == 4:
        return real.cvtColor(image, real.COLOR_RGB2BGRA)
    return real.cvtColor(image, real.COLOR_RGB2BGR)


@pytest.fixture(autouse=True)
def _gdp_kernels(monkeypatch):
    # Every call runs gdp's kernels, never OpenCV's by calibration.
    monkeypatch.setenv("GDP_CV2_STRICT", "1")


# (channels, dsize, interpolation, exact): odd sizes, down and up, both axes and one.
CASES = [
    (3, (200, 200), LINEAR, True),  # 3x down in x, 2x in y
    (3, (300, 200), LINEAR, True),  # halving: the 2x2 area path
    (1, (256, 256), LINEAR, True),  # halving, grey
    (4, (300, 200), LINEAR, True),  # halving, 4 channels
    (3, (211, 97), LINEAR, True),  # odd, down
    (3, (601, 400), LINEAR, True),  # width only (the row pass skipped)
    (1, (777, 1001), LINEAR, True),  # odd, up
    (4, (250, 1000), LINEAR, True),  # down x, up y
    (3, (200, 200), CUBIC, False),
    (1, (97, 61), CUBIC, False),
    (4, (911, 613), CUBIC, False),
    (3, (211, 97), NEAREST, True),
    (4, (1001, 777), NEAREST, True),
    (3, (150, 100), AREA, True),  # integer factor 4
    (1, (97, 61), AREA, True),  # fractional shrink
    (4, (120, 80), AREA, True),  # integer factor 5
    (3, (901, 611), AREA, False),  # enlarging: linear taps with area weights
]


@pytest.mark.parametrize(
    "channels,dsize,interpolation,exact",
    CASES,
    ids=[f"{c}ch-{d[0]}x{d[1]}-i{i}" for c, d, i, _ in CASES],
)
def test_resize_matches_opencv(channels, dsize, interpolation, exact):
    image = _photo(channels)
    got = cv2.resize(image, dsize, interpolation=interpolation)
    want = real.resize(image, dsize, interpolation=interpolation)
    assert got.shape == want.shape and got.dtype == want.dtype
    diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
    assert diff.max() <= (0 if exact else 1), (diff.max(), int((diff > 0).sum()))


def test_resize_1080p_photo_is_bit_exact():
    """The benchmark's shapes: a 1080p photo down by 3 (linear, cubic) and halved."""
    photo = real.resize(skimage.data.astronaut(), (1920, 1080), interpolation=real.INTER_CUBIC)
    photo = real.cvtColor(photo, real.COLOR_RGB2BGR)
    for dsize, interpolation in (((640, 360), LINEAR), ((640, 360), CUBIC), ((960, 540), LINEAR)):
        got = cv2.resize(photo, dsize, interpolation=interpolation)
        np.testing.assert_array_equal(got, real.resize(photo, dsize, interpolation=interpolation))


def test_resize_writes_dst_and_keeps_a_grey_image_2d():
    image = _photo(1)
    dst = np.zeros((61, 97), np.uint8)
    out = cv2.resize(image, (97, 61), dst=dst, interpolation=AREA)
    assert out is dst
    np.testing.assert_array_equal(dst, real.resize(image, (97, 61), interpolation=AREA))
    sliced = _photo(3)[::2, 1:]  # not contiguous, 200x599
    got = cv2.resize(sliced, (150, 100)).astype(np.int32)
    assert np.abs(got - real.resize(sliced, (150, 100))).max() <= 1


def test_resize_in_a_graph_matches_the_eager_call():
    """On a TF tensor (graph mode) the HWC image is flattened inside the graph: the same
    values as the eager call's flattened program."""
    import tensorflow as tf

    import gdp

    image = _photo(3)[:120, :160]

    @tf.function(input_signature=[tf.TensorSpec(image.shape, tf.uint8)])
    def fn(x):
        return cv2.resize(x, (61, 97), interpolation=LINEAR)

    got = gdp.compile(fn)(image)
    # the eager call runs gdp.runtime.resize's kernel: OpenCV's arithmetic, which the graph's
    # exact sums miss by 1 in places
    np.testing.assert_array_equal(cv2.resize(image, (61, 97)), real.resize(image, (61, 97)))
    assert np.abs(got.astype(np.int32) - real.resize(image, (61, 97))).max() <= 1


@pytest.fixture
def use_ipp(request):
    """cv2.ipp.setUseIPP(request.param) for the test, restored after it."""
    before = real.ipp.useIPP()
    real.ipp.setUseIPP(request.param)
    yield request.param
    real.ipp.setUseIPP(before)


# (channels, dsize, fx, fy): down in x and up in y by sizes, and by factors (OpenCV sizes the
# result from them; IPP then warps by the factors themselves).
FLOAT_CASES = [(c, (211, 397), 0, 0) for c in (1, 2, 3, 4)] + [(3, None, 0.37, 1.6)]


@pytest.mark.parametrize("use_ipp", [True, False], indirect=True, ids=["ipp", "no-ipp"])
@pytest.mark.parametrize("interpolation", [LINEAR, CUBIC], ids=["linear", "cubic"])
@pytest.mark.parametrize(
    "channels,dsize,fx,fy", FLOAT_CASES, ids=[f"{c[0]}ch-{c[2]}" for c in FLOAT_CASES]
)
def test_float_resize_takes_the_source_positions_opencv_takes(
    use_ipp, interpolation, channels, dsize, fx, fy
):
    """OpenCV hands LINEAR and CUBIC of float32 images of 1, 3 or 4 channels to Intel IPP where
    its build has it (pip's), which computes each source position in double; its own code (2
    channels, or IPP turned off) rounds the position to float. On this 600-pixel photo the two
    are up to 0.0044 apart, 15-60 times the tolerances here: gdp must take the ones OpenCV
    takes (it took OpenCV's own everywhere)."""
    image = real.cvtColor(skimage.data.coffee(), real.COLOR_RGB2BGRA).astype(np.float32)
    image = image[..., 0] if channels == 1 else image[..., :channels]
    got = cv2.resize(image, dsize, fx=fx, fy=fy, interpolation=interpolation)
    want = real.resize(image, dsize, fx=fx, fy=fy, interpolation=interpolation)
    assert got.shape == want.shape and got.dtype == want.dtype
    # float32 rounding of sums of 2x2 or 4x4 taps (cubic's of both signs) of values to 255, in
    # another order: 5 and 20 units in the last place
    atol = 7e-5 if interpolation == LINEAR else 3e-4
    np.testing.assert_allclose(got, want, rtol=0, atol=atol)


@pytest.mark.parametrize("use_ipp", [True, False], indirect=True, ids=["ipp", "no-ipp"])
def test_16_bit_resize_is_within_one_of_opencv_with_ipp_and_without(use_ipp):
    image = real.cvtColor(skimage.data.coffee(), real.COLOR_RGB2BGR).astype(np.uint16) * 257
    for dtype in (np.uint16, np.int16):
        x = image.astype(dtype) if dtype == np.uint16 else (image // 2).astype(dtype)
        for interpolation in (LINEAR, CUBIC):
            got = cv2.resize(x, (211, 397), interpolation=interpolation).astype(np.int32)
            want = real.resize(x, (211, 397), interpolation=interpolation)
            assert np.abs(got - want).max() <= 1, (dtype, interpolation)


def _fx_fy_cases():
    """Each scale on 3-channel uint8, and every dtype and channel count at the scale of partial
    blocks in both axes (int16's 2 channels under `slow`: uint16 holds 16 bits, uint8 one
    channel); the rest under `slow` (each case compiles its chain, 8-14 s)."""
    images = [(np.uint8, 3), (np.uint8, 1), (np.uint16, 4), (np.int16, 2), (np.float32, 3)]
    scales = {
        "halve-linear": (0.5, 0.5, LINEAR),
        "halve-area": (0.5, 0.5, AREA),
        "third-quarter": (1 / 3, 0.25, AREA),
        "quarter-columns": (0.25, 1.0, AREA),
    }
    for name, scale in scales.items():
        for dtype, channels in images:
            quick = (dtype, channels) == (np.uint8, 3) or (
                name == "third-quarter" and (dtype, channels) != (np.int16, 2)
            )
            yield pytest.param(
                dtype,
                channels,
                *scale,
                id=f"{name}-{np.dtype(dtype).name}-{channels}",
                marks=() if quick else pytest.mark.slow,
            )


@pytest.mark.parametrize("dtype, channels, fx, fy, interpolation", list(_fx_fy_cases()))
def test_resize_by_fx_fy_of_an_odd_size_averages_the_last_partial_blocks(
    dtype, channels, fx, fy, interpolation
):
    """resize(img, None, fx=0.5, fy=0.5), the common idiom, of a photo of odd size: OpenCV's
    integer area path (LINEAR halving takes it too) rounds the size up and averages the last,
    partial blocks over the pixels they hold ((float)sum / count). gdp gathered past the image
    and raised ExecutionError. Bit for bit, eager and in a chain, at sizes whose remainders are
    0 to 3. (A 16-bit LINEAR halving is IPP's bilinear in OpenCV, which rounds otherwise: within
    1, as test_16_bit_resize_is_within_one_of_opencv_with_ipp_and_without holds.)"""
    lsb = 1 if interpolation == LINEAR and dtype in (np.uint16, np.int16) else 0
    photo = _photo(4 if channels == 2 else channels)
    photo = photo[..., :2] if channels == 2 else photo
    rng = np.random.default_rng(7)
    for h, w in [(95, 131), (98, 129), (7, 3)]:
        image = photo[:h, :w].astype(dtype)
        if dtype == np.int16:
            image = (image.astype(np.int32) * 200 - 25000).astype(np.int16)
        if dtype == np.float32:
            image = image * np.float32(1 / 255) + rng.random(image.shape, dtype=np.float32)
        want = real.resize(image, None, fx=fx, fy=fy, interpolation=interpolation)
        got = cv2.resize(image, None, fx=fx, fy=fy, interpolation=interpolation)
        if dtype == np.float32:
            np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=f"{h}x{w}")
        else:
            np.testing.assert_allclose(got, want, rtol=0, atol=lsb, err_msg=f"{h}x{w}")

    @cv2.chain(choose=False)
    def halved(x):
        return cv2.resize(x, None, fx=fx, fy=fy, interpolation=interpolation)

    image = photo[:95, :131].astype(dtype)
    want = real.resize(image, None, fx=fx, fy=fy, interpolation=interpolation)
    np.testing.assert_allclose(halved(image), want, rtol=1e-6, atol=lsb)
