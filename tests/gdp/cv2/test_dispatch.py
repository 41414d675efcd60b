"""gdp.cv2's dispatch (issue 20, "never slower by design"): with a calibrated table, an eager call
whose size class measured OpenCV faster runs OpenCV's own function; every other call runs gdp's
kernels. The tables here are given, not measured (tests never time), and each call's result is
held to OpenCV's either way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import cv2 as real
import numpy as np
import pytest

import gdp.api
import gdp.cv2 as cv2
from gdp.cv2 import calibration, common, dispatch


def _table(entries: dict) -> dict:
    return {"format": dispatch.FORMAT, "machine": dispatch.machine(), "entries": entries}


def _slower(gdp_ms=2.0, opencv_ms=1.0):
    return {"gdp_ms": gdp_ms, "opencv_ms": opencv_ms}


@pytest.fixture(params=["C", "Python"])
def opencv_calls(request, monkeypatch):
    """The names of the calls gdp.cv2 handed to OpenCV, in order: by the table (the dispatcher
    then calls the OpenCV function it holds) or as a fallthrough. Each test runs with the C
    dispatcher `make install` builds and with its Python twin (common.PythonDispatcher, where
    the C one is not built)."""
    seen: list[str] = []
    function = common._opencv_function

    def spy(name):
        seen.append(name)
        return function(name)

    def recording(name, opencv):
        def called(*args, **kwargs):
            seen.append(name)
            return opencv(*args, **kwargs)

        return called

    monkeypatch.setattr(common, "_opencv_function", spy)
    for name, accelerated in list(common.ACCELERATED.items()):
        if request.param == "Python":
            accelerated = common.PythonDispatcher(
                name, accelerated.raw, accelerated.gdp, accelerated.opencv
            )
            monkeypatch.setitem(common.ACCELERATED, name, accelerated)
            if "." not in name:
                monkeypatch.setattr(cv2, name, accelerated)
        monkeypatch.setattr(accelerated, "opencv", recording(name, accelerated.opencv))
    yield seen
    dispatch.set_dispatch("auto")


def test_the_c_dispatcher_is_built_and_used():
    """`make install` builds gdp/cv2/_dispatch.c; without it every call pays the Python check
    (9 us after a cache sweep, where a 1080p call OpenCV runs takes 90)."""
    from gdp.cv2 import _dispatch

    assert common.Dispatcher is _dispatch.Dispatcher
    assert all(type(fn) is _dispatch.Dispatcher for fn in common.ACCELERATED.values())
    assert cv2.threshold.__name__ == "threshold" and cv2.dnn.blobFromImage.__wrapped__


def _decisions_grid():
    """Calls whose table answers cover every branch of runs_opencv: sizes on each side of the
    classes' bounds, arguments by position and by keyword, variants as other types, no image."""
    tiny, line = np.zeros((240, 320), np.uint8), np.zeros(500, np.uint8)
    over, big = np.zeros((241, 320, 3), np.uint8), np.zeros((2200, 4000), np.uint8)
    matrix = np.eye(2, 3)
    calls = []
    for image in (tiny, over, big, line):
        calls += [
            ("GaussianBlur", (image, (5, 5), 0), {}),
            ("GaussianBlur", (), {"src": image, "ksize": (5, 5), "sigmaX": 0}),
            ("threshold", (image, 5, 255, 0), {}),
            ("threshold", (image, 5, 255), {"type": np.int64(0)}),
            ("threshold", (image, 5, 255, 1), {}),
            ("threshold", (image, 5, 255, 0.0), {}),
            ("threshold", (image, 5, 255, np.array([0, 0])), {}),
            ("warpAffine", (image, matrix, (9, 9)), {"flags": real.WARP_INVERSE_MAP}),
            ("warpAffine", (image, matrix, (9, 9)), {}),
            ("dnn.blobFromImage", (), {"image": image}),
            ("medianBlur", (image, 5), {}),
        ]
    calls += [("GaussianBlur", ([[1, 2]], (5, 5), 0), {}), ("GaussianBlur", (), {})]
    return calls


def test_the_c_dispatcher_decides_as_runs_opencv(monkeypatch):
    """Each call's answer from the C dispatcher (Dispatcher.runs_opencv, without calling) is
    dispatch.runs_opencv's, table by table and with each switch set."""
    table = _table(
        {
            "GaussianBlur": {"240p": _slower(), "1080p": _slower()},
            "threshold:0": {"480p": _slower(), "4k": _slower()},
            "warpAffine:1": {"240p": _slower(), "480p": _slower()},
            "dnn.blobFromImage": {"480p": _slower()},
            "medianBlur": {"240p": _slower(1.0, 2.0)},
        }
    )
    monkeypatch.setattr(gdp.api, "_default_target", None)
    switches = [{}, {"GDP_CV2_STRICT": "1"}, {"GDP_CV2_DISPATCH": "0"}, {"GDP_TARGET": "cpu"}]
    answers = []
    try:
        for given in (table, None, "auto"):
            cv2.set_dispatch(given)
            for setting in switches:
                for key, value in setting.items():
                    monkeypatch.setenv(key, value)
                for name, args, kwargs in _decisions_grid():
                    want = dispatch.runs_opencv(name, args, kwargs)
                    got = common.ACCELERATED[name].runs_opencv(*args, **kwargs)
                    assert got is want, (name, args[1:], kwargs, setting)
                    answers.append(want)
                for key in setting:
                    monkeypatch.delenv(key)
        # With the table and no switch, the C dispatcher answers by itself but for the variant
        # that is no number (an array: runs_opencv's _variant_flags).
        cv2.set_dispatch(table)
        asked = []
        python = dispatch.runs_opencv
        monkeypatch.setattr(dispatch, "runs_opencv", lambda *a: asked.append(a) or python(*a))
        grid = _decisions_grid()
        for name, args, kwargs in grid:
            common.ACCELERATED[name].runs_opencv(*args, **kwargs)
        assert len(asked) == 4 and all(isinstance(a[1][3], np.ndarray) for a in asked)
        monkeypatch.setattr(dispatch, "runs_opencv", python)
        cv2.set_target("reference")
        for name, args, kwargs in _decisions_grid():
            assert common.ACCELERATED[name].runs_opencv(*args, **kwargs) is False
    finally:
        cv2.set_target(None)
        dispatch.set_dispatch("auto")
    assert True in answers and False in answers


@pytest.fixture
def photo():
    bgr, _ = calibration.photo(480, 640)
    return bgr


def test_size_classes():
    assert dispatch.size_class(1, 1) == "240p"
    assert dispatch.size_class(240, 320) == "240p"
    assert dispatch.size_class(241, 320) == "480p"
    assert dispatch.size_class(1080, 1920) == "1080p"
    assert dispatch.size_class(1081, 1920) == "4k"
    assert dispatch.size_class(10000, 10000) == "4k"


def test_a_call_runs_where_the_table_says(opencv_calls, photo):
    cv2.set_dispatch(
        _table(
            {
                "GaussianBlur": {"480p": _slower(), "1080p": _slower(1.0, 2.0)},
                "cvtColor:6": {"480p": _slower()},  # COLOR_BGR2GRAY
                "cvtColor:40": {"480p": _slower(1.0, 2.0)},  # COLOR_BGR2HSV
                "warpAffine:0": {"480p": _slower()},  # INTER_NEAREST, with or without
                # WARP_INVERSE_MAP
            }
        )
    )
    want = real.GaussianBlur(photo, (5, 5), 0)
    np.testing.assert_array_equal(cv2.GaussianBlur(photo, (5, 5), 0), want)
    assert opencv_calls == ["GaussianBlur"]
    # 1080p: gdp measured faster; 240p: not calibrated, gdp.
    big = real.resize(photo, (1920, 1080))
    np.testing.assert_array_equal(
        cv2.GaussianBlur(big, (5, 5), 0), real.GaussianBlur(big, (5, 5), 0)
    )
    small = real.resize(photo, (320, 240))
    np.testing.assert_array_equal(
        cv2.GaussianBlur(small, (5, 5), 0), real.GaussianBlur(small, (5, 5), 0)
    )
    assert opencv_calls == ["GaussianBlur"]
    # Per variant: the gray conversion runs OpenCV's, the HSV one gdp's.
    gray = cv2.cvtColor(photo, real.COLOR_BGR2GRAY)
    np.testing.assert_array_equal(gray, real.cvtColor(photo, real.COLOR_BGR2GRAY))
    hsv = cv2.cvtColor(photo, code=real.COLOR_BGR2HSV)
    np.testing.assert_array_equal(hsv, real.cvtColor(photo, real.COLOR_BGR2HSV))
    assert opencv_calls == ["GaussianBlur", "cvtColor"]
    matrix = np.array([[0.9, 0.1, 5], [-0.1, 0.9, 7]])
    for flags in (real.INTER_NEAREST | real.WARP_INVERSE_MAP, real.INTER_LINEAR):
        got = cv2.warpAffine(photo, matrix, (640, 480), flags=flags)
        np.testing.assert_array_equal(got, real.warpAffine(photo, matrix, (640, 480), flags=flags))
    assert opencv_calls == ["GaussianBlur", "cvtColor", "warpAffine"]
    where = cv2.accelerated()
    assert where["GaussianBlur"] == {"240p": "gdp", "480p": "opencv", "1080p": "gdp", "4k": "gdp"}
    assert where["cvtColor"]["480p"] == "opencv for code=6"
    assert where["cvtColor"]["1080p"] == "gdp"
    assert set(where) == set(common.ACCELERATED)


def test_strict_and_the_switch_turn_dispatch_off(opencv_calls, photo, monkeypatch):
    cv2.set_dispatch(_table({"GaussianBlur": {"480p": _slower()}}))
    monkeypatch.setenv("GDP_CV2_STRICT", "1")
    cv2.GaussianBlur(photo, (5, 5), 0)
    assert cv2.accelerated()["GaussianBlur"]["480p"] == "gdp"
    monkeypatch.delenv("GDP_CV2_STRICT")
    monkeypatch.setenv("GDP_CV2_DISPATCH", "0")
    cv2.GaussianBlur(photo, (5, 5), 0)
    assert opencv_calls == []
    monkeypatch.delenv("GDP_CV2_DISPATCH")
    cv2.GaussianBlur(photo, (5, 5), 0)
    assert opencv_calls == ["GaussianBlur"]
    cv2.set_dispatch(None)
    cv2.GaussianBlur(photo, (5, 5), 0)
    assert opencv_calls == ["GaussianBlur"]


def test_the_table_applies_on_the_cpu_target_only(opencv_calls, photo, monkeypatch):
    """The table times gdp's cpu kernels: another target, by GDP_TARGET or set_target, runs
    gdp's; a switch set to its default (GDP_CV2_DISPATCH=1) leaves dispatch on."""
    monkeypatch.setattr(gdp.api, "_default_target", None)  # no set_target of another test's
    cv2.set_dispatch(_table({"GaussianBlur": {"480p": _slower()}}))
    monkeypatch.setenv("GDP_TARGET", "reference")
    cv2.GaussianBlur(photo, (5, 5), 0)
    assert opencv_calls == []
    monkeypatch.setenv("GDP_TARGET", "cpu")
    monkeypatch.setenv("GDP_CV2_DISPATCH", "1")
    cv2.GaussianBlur(photo, (5, 5), 0)
    assert opencv_calls == ["GaussianBlur"]
    monkeypatch.delenv("GDP_TARGET")
    monkeypatch.delenv("GDP_CV2_DISPATCH")
    cv2.set_target("reference")
    try:
        cv2.GaussianBlur(photo, (5, 5), 0)
    finally:
        cv2.set_target(None)
    assert opencv_calls == ["GaussianBlur"]
    cv2.GaussianBlur(photo, (5, 5), 0)
    assert opencv_calls == ["GaussianBlur", "GaussianBlur"]


def test_a_variant_given_as_another_type_is_the_same_variant(opencv_calls, photo):
    """The table's variants are ints; OpenCV takes NumPy's integers for them too, and
    warpAffine's flags with more than the interpolation. A variant argument no table could
    hold (an array) leaves the call to gdp's function, which hands it to OpenCV to refuse."""
    cv2.set_dispatch(
        _table({"cvtColor:6": {"480p": _slower()}, "warpAffine:0": {"480p": _slower()}})
    )
    for code in (real.COLOR_BGR2GRAY, np.int64(real.COLOR_BGR2GRAY)):
        np.testing.assert_array_equal(cv2.cvtColor(photo, code), real.cvtColor(photo, code))
    assert opencv_calls == ["cvtColor", "cvtColor"]
    matrix = np.array([[1.0, 0.1, 5], [-0.1, 1.0, 7]])
    flags = np.int32(real.INTER_NEAREST | real.WARP_FILL_OUTLIERS)
    cv2.warpAffine(photo, matrix, (640, 480), flags=flags)
    assert opencv_calls[2:] == ["warpAffine"]
    with pytest.raises((real.error, TypeError)):
        cv2.cvtColor(photo, np.array([6, 6]))


def test_images_past_the_largest_class_count_as_it(opencv_calls):
    cv2.set_dispatch(_table({"threshold:0": {"4k": _slower()}}))
    huge = np.full((2200, 4000), 7, np.uint8)
    _, got = cv2.threshold(huge, 5, 255, real.THRESH_BINARY)
    assert opencv_calls == ["threshold"] and got.min() == 255
    cv2.threshold(huge[:1080, :1920], 5, 255, real.THRESH_BINARY)
    assert opencv_calls == ["threshold"]


def test_graph_mode_never_dispatches(opencv_calls):
    tf = pytest.importorskip("tensorflow")
    cv2.set_dispatch(_table({"GaussianBlur": {"240p": _slower()}}))
    x = np.random.default_rng(0).integers(0, 256, (40, 50, 3), np.uint8)
    out = cv2.GaussianBlur(tf.constant(x), (5, 5), 0)
    assert tf.is_tensor(out) and opencv_calls == []


def test_the_stored_table_applies_only_on_its_machine(opencv_calls, photo, tmp_path, monkeypatch):
    monkeypatch.setenv("GDP_CACHE_DIR", str(tmp_path))
    table = _table({"GaussianBlur": {"480p": _slower()}})
    dispatch.table_path().write_text(json.dumps(table))
    cv2.set_dispatch("auto")
    cv2.GaussianBlur(photo, (5, 5), 0)
    assert opencv_calls == ["GaussianBlur"]
    # The same table measured on another CPU: ignored, every call runs gdp.
    other = {**table, "machine": {**table["machine"], "cpu": "another CPU"}}
    dispatch.table_path().write_text(json.dumps(other))
    cv2.set_dispatch("auto")
    cv2.GaussianBlur(photo, (5, 5), 0)
    assert opencv_calls == ["GaussianBlur"]
    # Unreadable: ignored too.
    dispatch.table_path().write_text("{not json")
    cv2.set_dispatch("auto")
    cv2.GaussianBlur(photo, (5, 5), 0)
    assert opencv_calls == ["GaussianBlur"]


@pytest.mark.parametrize(
    ("table", "match"),
    [
        ({"format": 99, "entries": {}}, "format"),
        ({"format": dispatch.FORMAT}, "entries"),
        (_table({"GaussianBlur": {"720p": _slower()}}), "720p"),
        (_table({"GaussianBlur": {"480p": {"gdp_ms": 1.0}}}), "opencv_ms"),
    ],
)
def test_a_bad_table_is_named(table, match):
    with pytest.raises(ValueError, match=match):
        cv2.set_dispatch(table)


def test_calibration_measures_and_makes_a_table(tmp_path, opencv_calls):
    rows = list(calibration.measure(["240p"], runs=2, only=["GaussianBlur", "medianBlur 5"]))
    assert [r.call.label for r in rows] == ["GaussianBlur 5x5 BGR", "medianBlur 5 gray"]
    assert all(r.accelerated and len(r.gdp.seconds) == 2 for r in rows)
    table = calibration.table(rows)
    assert set(table["entries"]) == {"GaussianBlur", "medianBlur"}
    assert set(table["entries"]["GaussianBlur"]) == {"240p"}
    dispatch.validate(table)
    assert opencv_calls == []  # gdp's kernels ran (hand kernels, both), not OpenCV's


def test_a_process_whose_first_call_is_inside_a_tf_function():
    """Autograph runs a converted copy of the dispatch check, whose module state is not the
    module's: before any eager call had read the table, the first gdp.cv2 call inside a
    tf.function failed (AttributeError). A fresh process, as a user's program starts."""
    code = """
        import numpy as np, tensorflow as tf, cv2 as real
        import gdp, gdp.cv2 as cv2

        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.uint8)])
        def blurred(x):
            return cv2.GaussianBlur(x, (5, 5), 0)

        image = np.arange(40 * 30, dtype=np.uint8).reshape(40, 30)
        got = gdp.compile(blurred, target="cpu")(image)
        np.testing.assert_array_equal(got, real.GaussianBlur(image, (5, 5), 0))
    """
    root = Path(__file__).resolve().parents[3]
    env = dict(os.environ, PYTHONPATH=str(root))
    command = [sys.executable, "-c", textwrap.dedent(code)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]


def test_every_accelerated_function_is_calibrated():
    """A function without a calibrated call has no entry in the table, so it runs gdp's kernels
    at every size however slow they measure there: each has one, one call a key (the table
    keeps one time a key and size class)."""
    bgr, gray = calibration.photo(60, 80)
    calls = calibration.calls(bgr, gray)
    assert {c.function for c in calls} == set(common.ACCELERATED)
    keys = [c.key for c in calls]
    assert len(keys) == len(set(keys))


def test_plain_image_in_c_answers_as_in_python(monkeypatch):
    """common.plain_image (the C one: a short path's test on every call) against its Python
    twin, for arrays on each side of every condition, with and without a target switch."""
    from gdp.cv2 import _dispatch

    assert common.plain_image is _dispatch.plain
    base = np.zeros((6, 8, 3), np.uint8)
    arrays = [
        base,
        base[..., 0],
        base[:, :, :1],
        np.zeros((6, 8, 5), np.uint8),
        np.zeros((6, 8, 2), np.float32),
        np.zeros((6, 8, 4), np.float64),
        base[:, ::2],
        base[1:3],
        np.asfortranarray(base[..., 0]),
        np.zeros((0, 8), np.uint8),
        np.zeros((6, 0, 3), np.uint8),
        np.zeros(8, np.uint8),
        np.zeros((2, 3, 4, 5), np.uint8),
        np.zeros((1, 1), np.uint8),
        np.zeros((6, 8), ">u2"),
        np.zeros((6, 8), np.uint8).view(np.recarray),
        np.zeros((1 << 14, 1 << 13), np.uint8),  # 2**27 values: Python's answer
    ]
    sizes = [{}, {"out_bytes": 10}, {"out_bytes": (1 << 31) - 1}, {"out_bytes": 1 << 31}]
    try:
        for target in (None, "cpu", "reference"):
            if target:
                monkeypatch.setenv("GDP_TARGET", target)
            for array in arrays:
                for given in sizes:
                    want = common.plain_image_in_python(array, **given)
                    assert common.plain_image(array, **given) is want, (array.shape, given, target)
                    if given:
                        assert common.plain_image(array, given["out_bytes"]) is want
        monkeypatch.delenv("GDP_TARGET")
        cv2.set_target("reference")
        assert common.plain_image(base) is common.plain_image_in_python(base) is False
    finally:
        cv2.set_target(None)
    assert common.plain_image(base) is True
