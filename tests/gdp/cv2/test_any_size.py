"""Functions whose gdp.cv2 program used to be compiled per image size now serve every size from
one program (issue 19): resize and dnn.blobFromImage (the interpolation tables run-time inputs),
erode, dilate, morphologyEx, medianBlur, Canny (gray and colour) and copyMakeBorder (borders padded
for any size, BORDER_WRAP's too), equalizeHist and Otsu (normalised by the histogram's own
sum), mean and meanStdDev (the pixel count from the run's shape), cvtColor to HSV, minMaxLoc
(ArgMin and ArgMax), uint8 addWeighted (its two operands one size in the program). Each size is
checked against OpenCV; the sizes are random, so that they move the generic kernels' strip and
vector boundaries. A size called often still gets a program of its own (resize)."""

import functools
import threading
import time

import cv2 as real
import numpy as np
import pytest

import gdp.cv2 as cv2
from gdp import model as model_module
from gdp.cv2 import engine
from tests.gdp.cv2.programs_only import programs_only


def _sizes(count: int, seed: int, low: int = 20, high: int = 260) -> list[tuple[int, int]]:
    rng = np.random.default_rng(seed)
    return [(int(h), int(w)) for h, w in rng.integers(low, high, (count, 2))]


def _photo(h: int, w: int, channels: int = 3) -> np.ndarray:
    import skimage.data

    photo = real.resize(skimage.data.astronaut()[:, :, ::-1], (w, h), interpolation=real.INTER_AREA)
    return np.ascontiguousarray(photo if channels == 3 else photo[:, :, 1])


def _wait_for_sized_programs() -> None:
    for thread in threading.enumerate():
        if thread.name == "gdp-cv2-sized":
            thread.join()


def _compilations(calls) -> int:
    before = cv2.cache_info().compilations
    calls()
    return cv2.cache_info().compilations - before


# (name, call, largest difference from OpenCV): uint8 cubic differs by 1 where OpenCV (Intel
# IPP's resize) does not sum exactly (see test_resize.py). uint8 linear runs
# gdp.runtime.resize's kernel, OpenCV's own arithmetic. "program": with gdp.runtime.cubic's
# kernel off (a CPU without VBMI), the program.
_CUBIC = lambda m, x: m.resize(x, (150, 100), interpolation=m.INTER_CUBIC)
RESIZES = [
    ("linear to 224x224", lambda m, x: m.resize(x, (224, 224)), 0),
    ("linear by fx, fy", lambda m, x: m.resize(x, None, fx=0.37, fy=0.41), 0),
    ("nearest to 61x97", lambda m, x: m.resize(x, (61, 97), interpolation=m.INTER_NEAREST), 0),
    ("cubic to 150x100", _CUBIC, 1),
    ("cubic to 150x100, program", _CUBIC, 1),
]


def _cubic_kernel(monkeypatch, on: bool) -> bool:
    """gdp.runtime.cubic's kernel on (where the CPU has VBMI) or off (the program) for the
    test, its plans made afresh (they are kept by size, made with the kernel or not); whether
    the kernel runs."""
    from gdp.cv2 import geometry
    from gdp.runtime import cubic

    if not on:
        monkeypatch.setattr(cubic, "permutes_bytes", lambda: False)
    monkeypatch.setattr(
        geometry, "cubic_plan", functools.lru_cache(geometry.cubic_plan.__wrapped__)
    )
    return cubic.permutes_bytes()


@pytest.mark.parametrize("name,call,tolerance", RESIZES, ids=[r[0] for r in RESIZES])
def test_one_resize_program_serves_every_size(monkeypatch, name, call, tolerance):
    kernel = name.startswith(("nearest", "linear"))
    if name.startswith("cubic"):
        kernel = _cubic_kernel(monkeypatch, not name.endswith("program"))
    cv2.clear_cache()
    # Shrinking sizes only: a size's pass order (vertical first or not) is part of the program.
    images = [_photo(h, w) for h, w in _sizes(12, seed=len(name), low=230, high=420)]

    def run():
        for image in images:
            got, want = call(cv2, image), call(real, image)
            assert got.shape == want.shape and got.dtype == want.dtype
            diff = np.abs(got.astype(np.int32) - want.astype(np.int32)).max()
            assert diff <= tolerance, (image.shape, diff)

    # nearest, linear and (with VBMI) cubic run gdp.runtime's hand kernels on the cpu target:
    # no program
    assert _compilations(run) == (0 if kernel else 1)


def test_resize_gray_area_and_float_over_sizes():
    cv2.clear_cache()
    for h, w in _sizes(4, seed=3, low=300, high=400):
        gray = _photo(h, w, 1)
        np.testing.assert_array_equal(
            cv2.resize(gray, (64, 48), interpolation=cv2.INTER_AREA),
            real.resize(gray, (64, 48), interpolation=real.INTER_AREA),
        )
        image = _photo(h, w).astype(np.float32) / 255
        np.testing.assert_allclose(
            cv2.resize(image, (100, 80)), real.resize(image, (100, 80)), rtol=0, atol=1e-5
        )


def test_a_large_area_shrink_compiles_once_per_structure_and_matches_opencv(monkeypatch):
    """INTER_AREA thumbnails of photos 16 to 60 times their size: 17-61 taps an axis. The
    program for every size gathered and added each tap on its own and compiled for 15-50 s at
    each new tap count; gdp.ops.geometry now sums many taps as one reduction. One program per
    structure (the passes' tap counts), never per size; each size, and a hot size's own
    program, as OpenCV."""
    from gdp.ops import resize_tables

    cv2.clear_cache()
    _trials_keep_every_sized_program(monkeypatch)
    monkeypatch.setattr(engine, "SIZED_AFTER", 2)
    sizes = [(960 - 7 * k, 1280 - 11 * k) for k in range(4)]
    structures = set()
    for h, w in sizes:
        plan, _ = resize_tables.plan(h, w, 3, 32, 24, w / 32, h / 24, real.INTER_AREA, "uint8")
        structures.add(repr(plan))

    def run():
        for h, w in sizes:
            image = _photo(h, w)
            got = cv2.resize(image, (32, 24), interpolation=cv2.INTER_AREA)
            np.testing.assert_array_equal(
                got, real.resize(image, (32, 24), interpolation=real.INTER_AREA)
            )

    assert _compilations(run) == len(structures) < len(sizes)
    image = _photo(*sizes[0])
    want = real.resize(image, (32, 24), interpolation=real.INTER_AREA)
    for _ in range(3):  # a hot size: its own program, its tables constants
        np.testing.assert_array_equal(
            cv2.resize(image, (32, 24), interpolation=cv2.INTER_AREA), want
        )
        _wait_for_sized_programs()
    assert len(engine._sized) == 1


def _trials_keep_every_sized_program(monkeypatch) -> None:
    """A size's own program is kept only where a trial times it no slower than the generic
    path; on a busy test machine that is noise, so the tests of the mechanism keep it."""
    monkeypatch.setattr(model_module, "SLOWER_BY", float("inf"))


def test_a_size_called_often_gets_its_own_program(monkeypatch):
    cv2.clear_cache()
    _trials_keep_every_sized_program(monkeypatch)
    monkeypatch.setattr(engine, "SIZED_AFTER", 3)
    image = _photo(333, 517)
    _cubic_kernel(monkeypatch, False)
    cubic = cv2.INTER_CUBIC  # a program (uint8 linear runs a hand kernel, no program)
    want = real.resize(image, (224, 224), interpolation=cubic)
    for _ in range(3):
        got = cv2.resize(image, (224, 224), interpolation=cubic).astype(int)
        np.testing.assert_array_equal(np.abs(got - want) <= 1, True)
    _wait_for_sized_programs()
    assert len(engine._sized) == 1
    sized = next(iter(engine._sized.values()))
    assert sized.report()["shapes_mode"] == "static"
    assert [tuple(shape) for shape in sized.report()["shapes"][0].values()] == [(333, 517 * 3)]
    # The sized program serves the size now, with OpenCV's result as before.
    got = cv2.resize(image, (224, 224), interpolation=cubic)
    assert np.abs(got.astype(int) - want).max() <= 1
    other = _photo(300, 400)
    got = cv2.resize(other, (224, 224), interpolation=cubic).astype(int)
    want = real.resize(other, (224, 224), interpolation=cubic)
    np.testing.assert_array_equal(np.abs(got - want) <= 1, True)


def test_a_sized_program_slower_than_the_generic_path_is_dropped(monkeypatch):
    """The trial after a size's compile (engine._slower): its own program, slowed here by 20 ms
    a run, loses to the generic path, which keeps serving the size with the same results."""
    cv2.clear_cache()
    monkeypatch.setattr(engine, "SIZED_AFTER", 2)
    execute = engine.execute

    def slowed(program, *args, **kwargs):
        if program.report()["shapes_mode"] == "static":
            time.sleep(0.02)
        return execute(program, *args, **kwargs)

    monkeypatch.setattr(engine, "execute", slowed)
    image = _photo(123, 157)
    _cubic_kernel(monkeypatch, False)
    cubic = cv2.INTER_CUBIC
    want = real.resize(image, (64, 48), interpolation=cubic)
    for _ in range(3):
        got = cv2.resize(image, (64, 48), interpolation=cubic).astype(int)
        np.testing.assert_array_equal(np.abs(got - want) <= 1, True)
        _wait_for_sized_programs()
    assert not engine._sized and len(engine._sized_failed) == 1


ELLIPSE = real.getStructuringElement(real.MORPH_ELLIPSE, (5, 5))
ELLIPSE_21 = real.getStructuringElement(real.MORPH_ELLIPSE, (21, 21))
CROSS = real.getStructuringElement(real.MORPH_CROSS, (3, 7))
FILTERS = [
    ("erode ellipse", lambda m, x: m.erode(x, ELLIPSE)),
    ("dilate cross twice", lambda m, x: m.dilate(x, CROSS, iterations=2)),
    ("erode anchored", lambda m, x: m.erode(x, CROSS, anchor=(0, 5))),
    ("erode replicate", lambda m, x: m.erode(x, ELLIPSE, borderType=m.BORDER_REPLICATE)),
    ("gradient", lambda m, x: m.morphologyEx(x, m.MORPH_GRADIENT, ELLIPSE)),
    # Past 25 taps: window extremes of the kernel's runs (sparse tables), cut for any size.
    ("gradient ellipse 21", lambda m, x: m.morphologyEx(x, m.MORPH_GRADIENT, ELLIPSE_21)),
    # (a rectangle under a border that clamps runs gdp.runtime.morph: test_morph_kernel.py)
    ("erode rectangle 23x25 reflect", lambda m, x: m.erode(x, np.ones((25, 23)), borderType=4)),
    ("tophat reflect", lambda m, x: m.morphologyEx(x, m.MORPH_TOPHAT, CROSS, borderType=4)),
    ("median 3 uint16", lambda m, x: m.medianBlur(x.astype(np.uint16) * 257, 3)),
    ("median 3 uint8", lambda m, x: m.medianBlur(x, 3)),
    # Four values only: ties in every window, where a median by sorted columns could slip.
    ("median 3 float32 ties", lambda m, x: m.medianBlur((x[:, :, 0] // 64).astype(np.float32), 3)),
    ("median 5 uint8", lambda m, x: m.medianBlur(x, 5)),
    ("median 5 uint16", lambda m, x: m.medianBlur(x.astype(np.uint16) * 257 + 3, 5)),
    ("median 5 float32 ties", lambda m, x: m.medianBlur((x[:, :, 1] // 64).astype(np.float32), 5)),
]


@pytest.mark.parametrize("name,call", FILTERS, ids=[f[0] for f in FILTERS])
def test_one_filter_program_serves_every_size(name, call):
    cv2.clear_cache()
    images = [_photo(h, w) for h, w in _sizes(6, seed=len(name))]

    def run():
        for image in images:
            np.testing.assert_array_equal(call(cv2, image), call(real, image))

    # medians run gdp.runtime.median's kernel on the cpu target: no program
    assert _compilations(run) == (0 if name.startswith("median") else 1)


def test_canny_compiles_no_program_at_any_size():
    """Canny of every aperture, gray or colour, runs gdp.runtime.canny's kernels, one for every
    size."""
    cv2.clear_cache()
    photos = [_photo(h, w) for h, w in _sizes(2, seed=11)]  # test_canny.py: more sizes
    images = [p[:, :, 1].copy() for p in photos] + photos
    thresholds = {3: (50, 150), 5: (100, 400), 7: (1500, 4500)}

    def run():
        for image in images:
            for aperture, l2 in ((3, False), (3, True), (5, False), (7, True)):
                t1, t2 = thresholds[aperture]
                want = real.Canny(image, t1, t2, apertureSize=aperture, L2gradient=l2)
                got = cv2.Canny(image, t1, t2, apertureSize=aperture, L2gradient=l2)
                np.testing.assert_array_equal(got, want)

    assert _compilations(run) == 0


def test_a_large_morphology_called_often_gets_its_own_program(monkeypatch):
    # The generic program stores its runs' levels and views over the whole image; one of
    # static sizes computes them by row strips (engine.sized_program, as resize).
    cv2.clear_cache()
    _trials_keep_every_sized_program(monkeypatch)
    monkeypatch.setattr(engine, "SIZED_AFTER", 2)
    image = _photo(45, 61)
    want = real.dilate(image, ELLIPSE_21)
    for _ in range(2):
        np.testing.assert_array_equal(cv2.dilate(image, ELLIPSE_21), want)
    _wait_for_sized_programs()
    (sized,) = engine._sized.values()
    assert sized.report()["shapes_mode"] == "static"
    np.testing.assert_array_equal(cv2.dilate(image, ELLIPSE_21), want)
    other = _photo(50, 40)
    np.testing.assert_array_equal(cv2.dilate(other, ELLIPSE_21), real.dilate(other, ELLIPSE_21))


@pytest.mark.parametrize(
    "value", [250, (10, 20, 30), (7,)], ids=["scalar", "per channel", "one of four"]
)
def test_morphology_border_value_is_opencvs_scalar(value):
    # OpenCV reads borderValue as a Scalar: a number v is (v, 0, 0, 0), so a colour image's
    # other channels take 0 at the border. gdp gave every channel v (a silent wrong answer).
    image = _photo(41, 57)
    for func in ("erode", "dilate"):
        got = getattr(cv2, func)(image, ELLIPSE, borderType=real.BORDER_CONSTANT, borderValue=value)
        want = getattr(real, func)(
            image, ELLIPSE, borderType=real.BORDER_CONSTANT, borderValue=value
        )
        np.testing.assert_array_equal(got, want)


# (name, call, scale): float32 blobs (programs) differ from OpenCV's by float rounding (the
# scale is its size); uint8 blobs run gdp.runtime.resize's kernel, OpenCV's arithmetic.
BLOBS = [
    ("224 RGB", lambda m, x: m.dnn.blobFromImage(x, 1 / 255, (224, 224), swapRB=True), 1 / 255),
    (
        "crop with mean",
        lambda m, x: m.dnn.blobFromImage(
            x, 1 / 127.5, (300, 200), mean=(127, 120, 110), swapRB=True, crop=True
        ),
        1 / 127.5,
    ),
    ("two images", lambda m, x: m.dnn.blobFromImages([x, x[::-1].copy()], 1.0, (128, 96)), 1),
]


@pytest.mark.parametrize("name,call,scale", BLOBS, ids=[b[0] for b in BLOBS])
def test_one_blob_program_serves_every_size(name, call, scale):
    cv2.clear_cache()
    images = [_photo(h, w) for h, w in _sizes(5, seed=len(name), low=310, high=480)]

    def run(images, tolerance):
        for image in images:
            got, want = call(cv2, image), call(real, image)
            assert got.shape == want.shape and got.dtype == want.dtype
            assert np.abs(got - want).max() <= tolerance, image.shape

    floats = [image.astype(np.float32) for image in images]
    assert _compilations(lambda: run(floats, scale * 0.01)) == 1  # float rounding
    cv2.clear_cache()
    assert _compilations(lambda: run(images, 0)) == 0  # uint8: OpenCV's own result


OTHERS = [
    ("copyMakeBorder reflect", lambda m, x: m.copyMakeBorder(x, 3, 4, 5, 6, m.BORDER_REFLECT)),
    # Wraps once for any image larger than its borders (the 20-pixel one here, at most).
    ("copyMakeBorder wrap", lambda m, x: m.copyMakeBorder(x, 20, 1, 0, 19, m.BORDER_WRAP)),
    (
        "copyMakeBorder wrap gray",
        lambda m, x: m.copyMakeBorder(x[:, :, 1], 2, 3, 4, 5, m.BORDER_WRAP | 16),
    ),
    (
        "copyMakeBorder constant",
        lambda m, x: m.copyMakeBorder(x, 2, 0, 7, 1, m.BORDER_CONSTANT, value=(9, 8, 7)),
    ),
    ("equalizeHist", lambda m, x: m.equalizeHist(x[:, :, 0].copy())),
    ("Otsu", lambda m, x: m.threshold(x[:, :, 2].copy(), 0, 200, m.THRESH_BINARY | m.THRESH_OTSU)),
    ("addWeighted uint8", lambda m, x: m.addWeighted(x, 0.3, x[::-1].copy(), 0.7, 5)),
    # Its steps along the pixels, the last overlapping the one before.
    ("cvtColor BGR2HSV", lambda m, x: m.cvtColor(x, m.COLOR_BGR2HSV)),
    ("cvtColor RGB2HSV", lambda m, x: m.cvtColor(x, m.COLOR_RGB2HSV)),
    ("mean", lambda m, x: np.array(m.mean(x))),
    ("meanStdDev", lambda m, x: np.concatenate(m.meanStdDev(x))),
]


# On the cpu target these run gdp.runtime's hand kernels (lut, moments, blend, color, pad): no
# program. The pads' program (graph mode, the other targets) is tested too.
PADS = {o[0] for o in OTHERS if o[0].startswith("copyMakeBorder")}
HAND_KERNELS = {"equalizeHist", "Otsu", "mean", "meanStdDev", "addWeighted uint8"}
HAND_KERNELS |= {"cvtColor BGR2HSV", "cvtColor RGB2HSV"} | PADS


@pytest.mark.parametrize("name,call", OTHERS, ids=[o[0] for o in OTHERS])
def test_one_program_of_the_others_serves_every_size(name, call, monkeypatch):
    cv2.clear_cache()
    images = [_photo(h, w) for h, w in _sizes(6, seed=len(name))]

    def run():
        for image in images:
            got, want = call(cv2, image), call(real, image)
            if isinstance(want, tuple):  # threshold: (retval, dst)
                assert got[0] == want[0]
                got, want = got[1], want[1]
            if want.dtype == np.float64:  # sums in another order than OpenCV's
                np.testing.assert_allclose(got, want, rtol=1e-12)
            else:
                np.testing.assert_array_equal(got, want)

    assert _compilations(run) == (0 if name in HAND_KERNELS else 1)
    if name in PADS:
        programs_only(monkeypatch)
        assert _compilations(run) == 1


def test_one_min_max_loc_program_serves_every_size(monkeypatch):
    # The first minimum and maximum in row order, as OpenCV: ties everywhere (three values),
    # a flat image, one row, one column; through gdp.runtime.extrema's kernel on the cpu
    # target, then through the program graph mode and the other targets run.
    cv2.clear_cache()
    rng = np.random.default_rng(4)
    images = [rng.integers(0, 3, (h, w), dtype=np.uint8) for h, w in _sizes(5, seed=9)]
    images += [np.full((17, 23), 9, np.uint8), rng.integers(0, 256, (1, 300), dtype=np.uint8)]
    images += [rng.integers(0, 256, (257, 1), dtype=np.uint8)]

    def run():
        for image in images:
            assert cv2.minMaxLoc(image) == real.minMaxLoc(image), image.shape

    assert _compilations(run) == 0
    programs_only(monkeypatch)
    assert _compilations(run) == 1


def test_a_replicated_border_is_computed_inside_its_stencil(monkeypatch):
    # BORDER_REPLICATE's slices and concats of run-time extents, which TVM marks opaque, ran as
    # kernels of their own that wrote the padded image out; now one kernel (and the host's
    # shape function) computes the border where the median reads it.
    cv2.clear_cache()
    # The median's program, which graph mode and the other targets run (on the cpu target,
    # eager medians run gdp.runtime.median's kernel)
    programs_only(monkeypatch)
    image = _photo(67, 91).astype(np.uint16) * 257
    np.testing.assert_array_equal(cv2.medianBlur(image, 3), real.medianBlur(image, 3))
    (model,) = engine._programs.values()
    assert model.report()["shapes"] == [{"src0": (None, None, 3)}]
    assert model.report()["kernels"] <= 2


def test_a_wrap_wider_than_the_image_wraps_again():
    # Borders past the image's own size wrap as often as OpenCV's (gdp.runtime.pad's maps; the
    # program of graph mode takes a program of that size).
    image = _photo(5, 7)
    for top, bottom, left, right in ((12, 3, 9, 20), (5, 5, 7, 7), (0, 11, 0, 0)):
        np.testing.assert_array_equal(
            cv2.copyMakeBorder(image, top, bottom, left, right, cv2.BORDER_WRAP),
            real.copyMakeBorder(image, top, bottom, left, right, real.BORDER_WRAP),
        )


STACKED = [
    ("open", lambda m, x: m.morphologyEx(x, m.MORPH_OPEN, ELLIPSE_21)),
    ("close", lambda m, x: m.morphologyEx(x, m.MORPH_CLOSE, ELLIPSE_21)),
    ("top hat", lambda m, x: m.morphologyEx(x, m.MORPH_TOPHAT, ELLIPSE_21)),
    ("black hat", lambda m, x: m.morphologyEx(x, m.MORPH_BLACKHAT, ELLIPSE_21)),
    ("gradient x2", lambda m, x: m.morphologyEx(x, m.MORPH_GRADIENT, ELLIPSE_21, iterations=2)),
    ("erode x2", lambda m, x: m.erode(x, ELLIPSE_21, iterations=2)),
    ("open x2", lambda m, x: m.morphologyEx(x, m.MORPH_OPEN, ELLIPSE_21, iterations=2)),
    ("dilate x3 reflect", lambda m, x: m.dilate(x, ELLIPSE_21, iterations=3, borderType=2)),
]


def test_a_large_morphology_on_its_own_result_serves_every_size():
    """Over 25 taps, applied to its own result: single applications in turn, through erode's
    and dilate's programs, as OpenCV applies them. The programs are per border and channel
    count (three here: erode and dilate for the default border, dilate for another), never
    per size."""
    cv2.clear_cache()
    images = [_photo(h, w) for h, w in _sizes(4, seed=8, low=30, high=90)]

    def run():
        for name, call in STACKED:
            for image in images:
                np.testing.assert_array_equal(
                    call(cv2, image), call(real, image), err_msg=f"{name} {image.shape}"
                )

    assert _compilations(run) == 3


def test_a_per_channel_constant_border_serves_every_size():
    """OpenCV's Scalar border (a number is (v, 0, 0)) on a colour image: the image padded
    with 0 plus the constants on a border mask, one program for every size (its edge lines
    took a 21x21 erosion 28 s to compile)."""
    cv2.clear_cache()
    images = [_photo(h, w) for h, w in _sizes(3, seed=11, low=30, high=90)]
    floats = [image.astype(np.float32) / 255 for image in images]

    def run():
        for image in images:
            for func in ("erode", "dilate"):
                kw = {"borderType": real.BORDER_CONSTANT, "borderValue": 9}
                want = getattr(real, func)(image, ELLIPSE_21, **kw)
                np.testing.assert_array_equal(getattr(cv2, func)(image, ELLIPSE_21, **kw), want)
        for image in floats:
            kw = {"borderType": real.BORDER_CONSTANT, "borderValue": (0.5, -1.0, 2.0)}
            want = real.erode(image, ELLIPSE, **kw)
            np.testing.assert_array_equal(cv2.erode(image, ELLIPSE, **kw), want)
            want = real.copyMakeBorder(image, 3, 1, 2, 5, real.BORDER_CONSTANT, value=(7, 0, -2))
            got = cv2.copyMakeBorder(image, 3, 1, 2, 5, cv2.BORDER_CONSTANT, value=(7, 0, -2))
            np.testing.assert_array_equal(got, want)

    assert _compilations(run) == 4


def test_stacked_morphologies_in_a_graph_compile_once_for_every_size():
    """An opening and a closing with a replicated border inside a tf.function of free size:
    each second stage pads the first's result by gathers (gdp.ops.border.pad_any_size), which
    TVM compiles for run-time extents; as slices and a concat of one line per padded position
    it took minutes, so such a graph compiled once per size."""
    import tensorflow as tf

    import gdp

    ellipse = real.getStructuringElement(real.MORPH_ELLIPSE, (9, 9))

    @tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.uint8, name="image")])
    def stacked(image):
        closed = cv2.morphologyEx(
            image, real.MORPH_CLOSE, ellipse, borderType=real.BORDER_REPLICATE
        )
        return {"opened": cv2.morphologyEx(image, real.MORPH_OPEN, ellipse), "closed": closed}

    model = gdp.compile(stacked, target="cpu")
    for h, w in [(40, 57), (97, 131), (64, 33)]:
        image = _photo(h, w)
        got = model(image)
        want = real.morphologyEx(image, real.MORPH_OPEN, ellipse)
        np.testing.assert_array_equal(got["opened"], want, err_msg=f"{h}x{w}")
        want = real.morphologyEx(image, real.MORPH_CLOSE, ellipse, borderType=real.BORDER_REPLICATE)
        np.testing.assert_array_equal(got["closed"], want, err_msg=f"{h}x{w}")
    assert model.report()["shapes"] == [{"image": (None, None, 3)}]


def test_a_large_opening_of_a_computed_image_compiles_once_for_every_size():
    """cvtColor's gray, then a 21x21 opening, in a gdp.cv2.chain: the erosion pads an image the
    program computes, by slices and a concat (gdp.ops.border.pad). One concat piece per padded
    line took TVM 43 s to compile; a block of lines an end about 5 s, with the gray computed in
    a pass of its own where the pad's block would read a column of run-time extent per pixel
    (llvm_schedules._computed_per_pixel: the kernel failed to build)."""

    @cv2.chain(choose=False)
    def opened(image):
        return cv2.morphologyEx(cv2.cvtColor(image, cv2.COLOR_BGR2GRAY), cv2.MORPH_OPEN, ELLIPSE_21)

    for h, w in _sizes(3, seed=12, low=30, high=90):
        image = _photo(h, w)
        want = real.morphologyEx(
            real.cvtColor(image, real.COLOR_BGR2GRAY), real.MORPH_OPEN, ELLIPSE_21
        )
        np.testing.assert_array_equal(opened(image), want, err_msg=f"{h}x{w}")
    assert len(opened._models) == 1
    (model,) = opened._models.values()
    assert model.report()["shapes_mode"] == "generic", model.report()["generic_error"]


def _filters_of_one_gray(m, image) -> tuple:
    """Several filters of one gray image, each border type padded: one program exports the gray
    and pads it for a stencil."""
    gray = m.cvtColor(image, m.COLOR_BGR2GRAY)
    return (
        m.dilate(gray, ELLIPSE, borderType=m.BORDER_REPLICATE),
        m.erode(gray, CROSS, borderType=m.BORDER_CONSTANT, borderValue=9),
        m.GaussianBlur(gray, (5, 5), 0, borderType=m.BORDER_CONSTANT),
        m.dilate(gray, ELLIPSE_21, borderType=m.BORDER_REFLECT),
        m.GaussianBlur(gray, (7, 7), 0),
        m.copyMakeBorder(gray, 3, 5, 7, 2, m.BORDER_WRAP),
    )


def test_filters_of_one_computed_gray_in_a_program_of_any_size_and_of_one_size():
    """_filters_of_one_gray as a gdp.cv2.chain (one program for every size) and as programs of
    one size each (what a hot size gets, and a tf.function of static shape). The programs of
    one size gave wrong answers: the gray, exported and padded in one kernel, was written in
    strips of rows while the pads read rows of other strips (llvm_schedules._schedule_rows);
    a reflected border padded line by line took a 21x21 dilation minutes to compile; a
    copyMakeBorder of a tensor of free size raised a TypeError (so the chain compiled per
    size)."""
    import tensorflow as tf

    import gdp

    chained = cv2.chain(choose=False)(lambda image: _filters_of_one_gray(cv2, image))
    sizes = _sizes(3, seed=12, low=30, high=90)
    for h, w in sizes:
        image = _photo(h, w)
        for got, want in zip(chained(image), _filters_of_one_gray(real, image), strict=True):
            np.testing.assert_array_equal(got, want, err_msg=f"{h}x{w}")
    assert len(chained._models) == 1
    (model,) = chained._models.values()
    assert model.report()["shapes_mode"] == "generic", model.report()["generic_error"]
    for h, w in sizes[:1]:  # 4-row strips, halos across them
        image = _photo(h, w)
        spec = tf.TensorSpec(image.shape, tf.uint8)
        sized = gdp.compile(
            tf.function(
                lambda x: {f"o{i}": y for i, y in enumerate(_filters_of_one_gray(cv2, x))},
                input_signature=[spec],
            ),
            verify=False,
        )
        outputs = sized(image)
        for i, want in enumerate(_filters_of_one_gray(real, image)):
            got = outputs[f"o{i}"]
            np.testing.assert_array_equal(got, want, err_msg=f"{h}x{w}")
