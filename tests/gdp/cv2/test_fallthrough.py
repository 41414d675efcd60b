"""gdp.cv2's one fallthrough path: a call gdp does not accelerate reaches OpenCV's own function
exactly as the caller made it (the same objects, positional and keyword as given, nothing
added or dropped), or under GDP_CV2_STRICT=1 is refused naming the function and the reason.

The cases are keyed by `gdp.cv2.accelerated()`: a new accelerated function fails here until it
gets a case below or is listed in NEVER_FALLS_THROUGH."""

from __future__ import annotations

import inspect
import re

import cv2 as real
import numpy as np
import pytest
import skimage.data

import gdp.cv2 as cv2
from gdp.cv2 import common, filters

# Accelerated functions with no case that hands the call on to OpenCV.
NEVER_FALLS_THROUGH = {"Canny", "copyMakeBorder", "equalizeHist", "flip", "rotate", "transpose"}


def _image(dtype, shape=(12, 10), seed=0) -> np.ndarray:
    values = np.random.default_rng(seed).integers(0, 200, shape)
    return values.astype(dtype)


def _kernel() -> np.ndarray:
    return np.ones((3, 3), np.uint8)


def _mask(shape=(12, 10)) -> np.ndarray:
    mask = np.zeros(shape, np.uint8)
    mask[2:9, 3:8] = 1
    return mask


def _derivative(dtype=np.int32):
    """Sobel, Scharr, Laplacian: int32 is not a depth gdp filters."""
    return _image(dtype), real.CV_32F


# name -> a function building (args, kwargs) of a call gdp hands on to OpenCV, with every
# optional argument OpenCV takes given by keyword (and, where it must fall through by one of
# them, the required ones too).
CASES = {
    "GaussianBlur": lambda: (
        (_image(np.int16), (3, 3), 1.5),
        dict(
            dst=np.empty((12, 10), np.int16),
            sigmaY=2.0,
            borderType=real.BORDER_REFLECT,
            hint=real.ALGO_HINT_ACCURATE,
        ),
    ),
    "boxFilter": lambda: (
        (_image(np.int32), -1, (3, 3)),
        dict(
            dst=np.empty((12, 10), np.int32),
            anchor=(0, 0),
            normalize=False,
            borderType=real.BORDER_REPLICATE,
        ),
    ),
    "blur": lambda: (
        (_image(np.int32), (3, 3)),
        dict(dst=np.empty((12, 10), np.int32), anchor=(0, 0), borderType=real.BORDER_REPLICATE),
    ),
    "filter2D": lambda: (
        (_image(np.int32), -1, np.full((3, 3), 0.1)),
        dict(
            dst=np.empty((12, 10), np.int32),
            anchor=(1, 0),
            delta=2.0,
            borderType=real.BORDER_REFLECT,
        ),
    ),
    "sepFilter2D": lambda: (
        (_image(np.int32), -1, np.array([1.0, 2.0, 1.0]), np.array([0.5, 0.5])),
        dict(
            dst=np.empty((12, 10), np.int32),
            anchor=(1, 0),
            delta=2.0,
            borderType=real.BORDER_REFLECT,
        ),
    ),
    "Sobel": lambda: (
        (*_derivative(), 1, 0),
        dict(
            dst=np.empty((12, 10), np.float32),
            ksize=5,
            scale=2.0,
            delta=1.0,
            borderType=real.BORDER_REPLICATE,
        ),
    ),
    "Scharr": lambda: (
        (*_derivative(), 0, 1),
        dict(
            dst=np.empty((12, 10), np.float32),
            scale=2.0,
            delta=1.0,
            borderType=real.BORDER_REPLICATE,
        ),
    ),
    "Laplacian": lambda: (
        _derivative(),
        dict(
            dst=np.empty((12, 10), np.float32),
            ksize=3,
            scale=2.0,
            delta=1.0,
            borderType=real.BORDER_REPLICATE,
        ),
    ),
    "medianBlur": lambda: ((_image(np.uint8), 7), dict(dst=np.empty((12, 10), np.uint8))),
    "erode": lambda: (
        (_image(np.int32), _kernel()),
        dict(
            dst=np.empty((12, 10), np.int32),
            anchor=(1, 1),
            iterations=2,
            borderType=real.BORDER_CONSTANT,
            borderValue=(7.0,),
        ),
    ),
    "dilate": lambda: (
        (_image(np.int32), _kernel()),
        dict(
            dst=np.empty((12, 10), np.int32),
            anchor=(1, 1),
            iterations=2,
            borderType=real.BORDER_CONSTANT,
            borderValue=(7.0,),
        ),
    ),
    "morphologyEx": lambda: (
        (_image(np.uint8), real.MORPH_HITMISS, np.array([[0, 1, 0], [1, -1, 1], [0, 1, 0]])),
        dict(
            dst=np.empty((12, 10), np.uint8),
            anchor=(1, 1),
            iterations=1,
            borderType=real.BORDER_CONSTANT,
            borderValue=(0.0,),
        ),
    ),
    "resize": lambda: (
        (_image(np.uint8), (5, 6)),
        dict(
            dst=np.empty((6, 5), np.uint8),
            fx=0.5,
            fy=0.5,
            interpolation=real.INTER_LANCZOS4,
        ),
    ),
    "warpAffine": lambda: (
        (_image(np.uint8, (12, 10, 3)), real.getRotationMatrix2D((5, 6), 20, 1.0), (10, 12)),
        dict(
            dst=np.empty((12, 10, 3), np.uint8),
            flags=real.INTER_CUBIC,
            borderMode=real.BORDER_CONSTANT,
            borderValue=(1.0, 2.0, 3.0),
            hint=real.ALGO_HINT_ACCURATE,
        ),
    ),
    "threshold": lambda: (
        (_image(np.uint8),),
        dict(
            thresh=0,
            maxval=255,
            type=real.THRESH_BINARY | real.THRESH_TRIANGLE,
            dst=np.empty((12, 10), np.uint8),
        ),
    ),
    "convertScaleAbs": lambda: (
        (_image(np.int32),),
        dict(dst=np.empty((12, 10), np.uint8), alpha=0.5, beta=3.0),
    ),
    "addWeighted": lambda: (
        (_image(np.uint8), 0.5, _image(np.uint8, seed=1), 0.25, 1.0),
        dict(dst=np.empty((12, 10), np.float32), dtype=real.CV_32F),
    ),
    "LUT": lambda: (
        (_image(np.int8),),
        dict(lut=np.arange(256, dtype=np.uint8)[::-1].copy(), dst=np.empty((12, 10), np.uint8)),
    ),
    "normalize": lambda: (
        (_image(np.uint8),),
        dict(
            dst=np.empty((12, 10), np.float32),
            alpha=0.0,
            beta=1.0,
            norm_type=real.NORM_MINMAX,
            dtype=real.CV_32F,
            mask=_mask(),
        ),
    ),
    "meanStdDev": lambda: (
        (_image(np.uint8),),
        dict(mean=np.empty((1, 1)), stddev=np.empty((1, 1)), mask=_mask()),
    ),
    "mean": lambda: ((_image(np.uint8),), dict(mask=_mask())),
    "minMaxLoc": lambda: ((_image(np.uint8),), dict(mask=_mask())),
    # No optional arguments: the source by keyword.
    "sumElems": lambda: ((), dict(src=_image(np.int16))),
    "countNonZero": lambda: ((), dict(src=_image(np.float64))),
    "cvtColor": lambda: (
        (_image(np.uint8, (12, 10, 3)), real.COLOR_BGR2Luv),
        dict(dst=np.empty((12, 10, 3), np.uint8), dstCn=3, hint=real.ALGO_HINT_ACCURATE),
    ),
    "dnn.blobFromImage": lambda: (
        (_image(np.uint16, (12, 10, 3)),),
        dict(
            scalefactor=0.5,
            size=(8, 6),
            mean=(1.0, 2.0, 3.0),
            swapRB=True,
            crop=True,
            ddepth=real.CV_32F,
        ),
    ),
    "dnn.blobFromImages": lambda: (
        ([_image(np.uint8, (12, 10, 3)), _image(np.uint8, (14, 9, 3))],),
        dict(
            scalefactor=0.5,
            size=(8, 6),
            mean=(1.0, 2.0, 3.0),
            swapRB=True,
            crop=True,
            ddepth=real.CV_32F,
        ),
    ),
}


def _gdp(name: str):
    fn = cv2
    for part in name.split("."):
        fn = getattr(fn, part)
    return fn


def _opencv_owner(name: str):
    """(the module holding OpenCV's `name`, as gdp.cv2.common sees it; the attribute)."""
    *path, attr = name.split(".")
    owner = common._cv2
    for part in path:
        owner = getattr(owner, part)
    return owner, attr


class _Returned:
    """What the recorder hands back: gdp must return it as it is."""


@pytest.mark.parametrize("name", cv2.accelerated())
def test_a_fallthrough_reaches_opencv_with_the_call_as_given(name, monkeypatch):
    assert not (name in CASES and name in NEVER_FALLS_THROUGH), name
    if name in NEVER_FALLS_THROUGH:
        return
    assert name in CASES, (
        f"cv2.{name} is accelerated but has no fallthrough case in this file: add one to"
        " CASES, or name it in NEVER_FALLS_THROUGH"
    )
    args, kwargs = CASES[name]()

    # Under GDP_CV2_STRICT=1 the call is refused, naming the function and the reason.
    monkeypatch.setenv("GDP_CV2_STRICT", "1")
    with pytest.raises(cv2.FallthroughError) as e:
        _gdp(name)(*args, **kwargs)
    assert str(e.value).startswith(f"cv2.{name}: ") and "accelerated" in str(e.value)
    assert str(e.value).endswith(", so it would run in OpenCV; GDP_CV2_STRICT=1 forbids that")
    monkeypatch.delenv("GDP_CV2_STRICT")

    # Every accelerated name's OpenCV function records its calls: only `name`'s may be called
    # (a gdp function that calls another, blur -> boxFilter, hands on the outer call), once.
    calls = []
    returned = _Returned()
    for other in cv2.accelerated():

        def record(*a, _name=other, **kw):
            calls.append((_name, a, kw))
            return returned

        monkeypatch.setattr(*_opencv_owner(other), record)
    assert _gdp(name)(*args, **kwargs) is returned
    assert [c[0] for c in calls] == [name]
    _, got_args, got_kwargs = calls[0]
    assert len(got_args) == len(args)
    assert all(g is a for g, a in zip(got_args, args, strict=True)), "not the caller's objects"
    assert list(got_kwargs) == list(kwargs)
    assert all(got_kwargs[k] is v for k, v in kwargs.items()), "not the caller's objects"


def _opencv_signature(name: str) -> tuple[list[str], list[str]]:
    """(every parameter, the required ones) of OpenCV's first overload of `name`, from its
    docstring: `GaussianBlur(src, ksize, sigmaX[, dst[, sigmaY[, borderType[, hint]]]]) -> dst`."""
    owner, attr = _opencv_owner(name)
    doc = getattr(owner, attr).__doc__
    inner = re.search(rf"^{attr}\((.*?)\) ->", doc, re.M).group(1)
    required = re.findall(r"\w+", inner.split("[", 1)[0])
    return re.findall(r"\w+", inner), required


@pytest.mark.parametrize("name", cv2.accelerated())
def test_signature_is_opencvs(name):
    """Each gdp function takes OpenCV's parameters, by OpenCV's names, in OpenCV's order, and
    requires none that OpenCV makes optional."""
    names, required = _opencv_signature(name)
    params = inspect.signature(_gdp(name)).parameters
    assert list(params) == names
    own_required = [p for p, v in params.items() if v.default is inspect.Parameter.empty]
    assert set(own_required) <= set(required)


def _photo() -> np.ndarray:
    return skimage.data.astronaut()[::2, ::2, ::-1].copy()  # BGR, 256x256


def _camera() -> np.ndarray:
    return skimage.data.camera()[::2, ::2].copy()


# Calls on real photos that gdp hands on to OpenCV: gdp's answer must be OpenCV's.
PHOTO_CALLS = {
    # borderValue used to be dropped: the default border (the maximum) was used instead.
    "morphologyEx HITMISS borderValue": (
        "morphologyEx",
        lambda: (
            (
                np.where(_camera() > 128, 255, 0).astype(np.uint8),
                real.MORPH_HITMISS,
                np.array([[0, 1, 0], [1, -1, 1], [0, 1, 0]]),
            ),
            dict(borderType=real.BORDER_CONSTANT, borderValue=0),
        ),
    ),
    # dtype=CV_8U (0) used to be passed on as -1: the result stayed int16.
    "normalize int16 to CV_8U": (
        "normalize",
        lambda: (
            (_camera().astype(np.int16) - 100, None, 0, 255, real.NORM_MINMAX, real.CV_8U),
            {},
        ),
    ),
    # The image used to be passed on wrapped in a list, which OpenCV refused.
    "blobFromImage uint16": (
        "dnn.blobFromImage",
        lambda: (
            (_photo().astype(np.uint16) * 257,),
            dict(scalefactor=1 / 65535, size=(96, 64), mean=(0.5, 0.4, 0.3), swapRB=True),
        ),
    ),
    "GaussianBlur int16": (
        "GaussianBlur",
        lambda: (
            (_photo().astype(np.int16) - 128, (5, 5), 1.2),
            dict(sigmaY=2.5, borderType=real.BORDER_REFLECT, hint=real.ALGO_HINT_ACCURATE),
        ),
    ),
    "warpAffine cubic": (
        "warpAffine",
        lambda: (
            (_photo(), real.getRotationMatrix2D((128, 128), 30, 0.9), (256, 256)),
            dict(flags=real.INTER_CUBIC, borderValue=(10, 200, 30)),
        ),
    ),
    "cvtColor Luv": ("cvtColor", lambda: ((_photo(), real.COLOR_BGR2Luv), {})),
}


def _assert_same(got, want) -> None:
    assert type(got) is type(want)
    if isinstance(want, np.ndarray):
        assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("case", list(PHOTO_CALLS))
def test_a_fallthrough_on_a_photo_gives_opencvs_result(case, monkeypatch):
    name, build = PHOTO_CALLS[case]
    args, kwargs = build()
    monkeypatch.setenv("GDP_CV2_STRICT", "1")  # it is a fallthrough, not gdp's own result
    with pytest.raises(cv2.FallthroughError, match=re.escape(f"cv2.{name}:")):
        _gdp(name)(*args, **kwargs)
    monkeypatch.delenv("GDP_CV2_STRICT")
    owner, attr = _opencv_owner(name)
    _assert_same(_gdp(name)(*args, **kwargs), getattr(owner, attr)(*args, **kwargs))


@pytest.mark.parametrize("name", ["erode", "dilate", "morphologyEx"])
def test_a_morphology_fallthrough_keeps_border_value(name, monkeypatch):
    """gdp accelerates every depth OpenCV erodes, so make it decline uint8 here: the photo's
    fallthrough must still erode with the caller's border value (it used to be dropped)."""
    photo = _camera()
    kernel = np.ones((5, 5), np.uint8)
    op = (real.MORPH_GRADIENT,) if name == "morphologyEx" else ()
    kwargs = dict(iterations=2, borderType=real.BORDER_CONSTANT, borderValue=128)
    want = getattr(real, name)(photo, *op, kernel, **kwargs)
    # The border value matters for this call: OpenCV's default border gives another image.
    assert not np.array_equal(want, getattr(real, name)(photo, *op, kernel, iterations=2))
    monkeypatch.setattr(filters, "_takes", lambda src: False)
    monkeypatch.setenv("GDP_CV2_STRICT", "1")
    with pytest.raises(cv2.FallthroughError, match=f"cv2.{name}: "):
        getattr(cv2, name)(photo, *op, kernel, **kwargs)
    monkeypatch.delenv("GDP_CV2_STRICT")
    _assert_same(getattr(cv2, name)(photo, *op, kernel, **kwargs), want)


def test_a_fallthrough_in_a_nested_call_hands_on_the_outer_call():
    """blur runs boxFilter: an unaccelerated case is OpenCV's blur on the caller's arguments
    (the recorder test above shows the same for Scharr -> Sobel), and the next call is gdp's
    own again."""
    image = _image(np.int32, (20, 16))
    dst = np.empty_like(image)
    out = cv2.blur(image, (3, 5), dst, (0, 1), real.BORDER_REFLECT)
    assert out is dst
    np.testing.assert_array_equal(out, real.blur(image, (3, 5), None, (0, 1), real.BORDER_REFLECT))
    small = image.astype(np.uint8)
    np.testing.assert_array_equal(cv2.blur(small, (3, 3)), real.blur(small, (3, 3)))
    assert not common._running.get()


def test_argument_errors_stay_opencvs_errors():
    """A bad argument in a call that would fall through is still gdp's cv2.error, raised
    before any fallthrough (strict mode or not)."""
    with pytest.raises(real.error, match="ksize.width"):
        cv2.GaussianBlur(np.zeros((8, 8), np.int16), (4, 4), 0)
    with pytest.raises(real.error, match="(?i)border"):
        cv2.blur(np.zeros((8, 8), np.int32), (3, 3), borderType=real.BORDER_WRAP)
    with pytest.raises(real.error, match="numpy array"):
        cv2.dnn.blobFromImage("image")
    assert not common._running.get()
