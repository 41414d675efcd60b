"""Random gdp.cv2 calls for the fuzz against OpenCV (test_cv2_fuzz.py), run in a child process
(`python cv2_fuzz_cases.py SEED CALLS`: one JSON line per seed) so that a crash in gdp, TVM or
OpenCV is the test's failure, not a lost CI run.

Random calls of the accelerated functions as people make them (dtypes, channel counts, sizes,
kernel sizes, borders, flags, some invalid), each made on both. Where OpenCV raises, gdp must
raise (a cv2.error); where OpenCV answers, gdp must answer the same shape and dtype and the same
values (exact for uint8 results, to float32 rounding for float ones), and no call OpenCV accepts
may have needed rescuing from a gdp refusal (common.RESCUED).

Calls OpenCV itself crashes or hangs on (empty images into minMaxLoc and copyMakeBorder) are
not drawn: test_opencv_parity.py holds gdp's clear error for those."""

from __future__ import annotations

import json
import sys

import cv2 as real
import numpy as np

import gdp.cv2 as cv2
from gdp.cv2 import common
from gdp.errors import GdpError

DTYPES = [np.uint8, np.uint8, np.uint8, np.float32, np.uint16, np.int16, np.float64]
BORDERS = [
    real.BORDER_DEFAULT,
    real.BORDER_REFLECT,
    real.BORDER_REPLICATE,
    real.BORDER_CONSTANT,
    real.BORDER_WRAP,
]


def _image(rng: np.random.Generator) -> np.ndarray:
    dtype = DTYPES[rng.integers(len(DTYPES))]
    h, w = int(rng.integers(1, 70)), int(rng.integers(1, 90))
    channels = [None, None, 1, 3, 3, 4][rng.integers(6)]
    shape = (h, w) if channels is None else (h, w, channels)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(info.min, int(info.max) + 1, shape).astype(dtype)
    return (rng.random(shape) * 300 - 20).astype(dtype)


def _large_image(rng: np.random.Generator) -> np.ndarray:
    """A 100-1400 pixel image (where gdp's kernels split rows into strips and OpenCV uses its
    vector and IPP paths), often a view: an ROI, every other column, or upside down."""
    dtype = DTYPES[rng.integers(len(DTYPES))]
    h, w = int(rng.integers(100, 1300)), int(rng.integers(100, 1400))
    channels = [None, None, 1, 3, 3, 4][rng.integers(6)]
    pad_h, pad_w = int(rng.integers(0, 9)), int(rng.integers(0, 9))
    shape = (h + pad_h, w + pad_w) if channels is None else (h + pad_h, w + pad_w, channels)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        x = rng.integers(info.min, int(info.max) + 1, shape).astype(dtype)
    else:
        x = (rng.random(shape) * 300 - 20).astype(dtype)
    view = rng.integers(4)
    if view == 1:
        return x[pad_h // 2 : pad_h // 2 + h, pad_w // 2 : pad_w // 2 + w]
    if view == 2:
        return x[:, ::2]
    if view == 3 and rng.random() < 0.3:
        return x[::-1]
    return x


def _odd(rng, low=1, high=7) -> int:
    return int(rng.choice(range(low, high + 1, 2)))


def _call(rng: np.random.Generator, image=_image):
    """(name, args, kwargs) of one random call on an image drawn by `image`."""
    x = image(rng)
    k = _odd(rng)
    border = BORDERS[rng.integers(len(BORDERS))]
    choices = [
        (
            "GaussianBlur",
            (x, (k, _odd(rng)), float(rng.choice([0, 0.8, 1.5]))),
            {"borderType": border},
        ),
        # up to 40x40: over 256 values a box's sums are scaled in float32 (and an even area's
        # rounding differs from float64's)
        ("blur", (x, (int(rng.integers(1, 41)), int(rng.integers(1, 41)))), {"borderType": border}),
        ("boxFilter", (x, -1, (k, k)), {"normalize": bool(rng.integers(2)), "borderType": border}),
        (
            "Sobel",
            (x, int(rng.choice([-1, real.CV_16S, real.CV_32F])), 1, int(rng.integers(2))),
            {"ksize": int(rng.choice([1, 3, 5])), "borderType": border},
        ),
        ("Scharr", (x, real.CV_32F, 1, 0), {"borderType": border}),
        (
            "Laplacian",
            (x, int(rng.choice([real.CV_16S, real.CV_32F]))),
            {"ksize": int(rng.choice([1, 3])), "borderType": border},
        ),
        ("medianBlur", (x, int(rng.choice([3, 5, 4]))), {}),
        ("erode", (x, np.ones((3, 3), np.uint8)), {"iterations": int(rng.integers(1, 3))}),
        ("dilate", (x, np.ones((k, k), np.uint8)), {}),
        (
            "threshold",
            (x, float(rng.integers(0, 200)) + 0.5, 255.0, int(rng.choice([0, 1, 2, 3, 4, 8, 9]))),
            {},
        ),
        (
            "cvtColor",
            (
                x,
                int(
                    rng.choice(
                        [
                            real.COLOR_BGR2GRAY,
                            real.COLOR_BGR2RGB,
                            real.COLOR_GRAY2BGR,
                            real.COLOR_BGR2HSV,
                            real.COLOR_BGRA2BGR,
                        ]
                    )
                ),
            ),
            {},
        ),
        (
            "resize",
            (x, (int(rng.integers(1, 50)), int(rng.integers(1, 50)))),
            {"interpolation": int(rng.choice([0, 1, 2, 3]))},
        ),
        ("flip", (x, int(rng.choice([-1, 0, 1]))), {}),
        ("transpose", (x,), {}),
        (
            "convertScaleAbs",
            (x,),
            {"alpha": float(rng.choice([0.5, 1.0, 2.0])), "beta": float(rng.choice([0, 3]))},
        ),
        ("countNonZero", (x,), {}),
        ("mean", (x,), {}),
        ("minMaxLoc", (x,), {}),
        ("LUT", (x, rng.integers(0, 256, 256).astype(np.uint8)), {}),
        ("equalizeHist", (x,), {}),
        ("copyMakeBorder", (x, 1, 2, 3, 0, int(rng.choice([0, 1, 2, 4]))), {}),
        ("normalize", (x, None, 0, 255, real.NORM_MINMAX), {}),
        (
            "warpAffine",
            (x, _affine(rng), (int(rng.integers(1, 60)), int(rng.integers(1, 60)))),
            {
                "flags": int(rng.choice([real.INTER_NEAREST, real.INTER_LINEAR])),
                "borderMode": int(rng.choice([0, 1, 2, 4])),
            },
        ),
        (
            "sepFilter2D",
            (x, int(rng.choice([-1, real.CV_32F])), _taps(rng), _taps(rng)),
            {"borderType": border},
        ),
        ("filter2D", (x, -1, rng.normal(size=(k, _odd(rng))).astype(np.float32)), {}),
        (
            "morphologyEx",
            (x, int(rng.integers(0, 7)), np.ones((k, k), np.uint8)),
            {"borderType": int(rng.choice([0, 1, 4]))},
        ),
        ("meanStdDev", (x,), {}),
        ("sumElems", (x,), {}),
        ("addWeighted", (x, float(rng.uniform(-1, 2)), x[::-1].copy(), 0.5, 3.0), {}),
        ("Canny", (x, float(rng.integers(0, 100)), float(rng.integers(100, 300))), {}),
        ("rotate", (x, int(rng.integers(0, 3))), {}),
        (
            "dnn.blobFromImage",
            (x, float(rng.choice([1.0, 1 / 255])), (int(rng.integers(1, 40)), 24)),
            {"swapRB": bool(rng.integers(2)), "crop": bool(rng.integers(2))},
        ),
    ]
    choices += _styled_calls(rng, x, k, border)
    return choices[rng.integers(len(choices))]


# Call styles as OpenCV's documentation and tutorials write them: keyword forms, fx/fy, masks,
# ddepth, anchors, more colour codes and interpolations (found resize's partial area blocks, a
# float morphology's infinite border, medianBlur(img, 1)).
STYLE_CODES = [
    real.COLOR_BGR2YCrCb,
    real.COLOR_YCrCb2BGR,
    real.COLOR_BGR2Lab,
    real.COLOR_Lab2BGR,
    real.COLOR_BGR2YUV,
    real.COLOR_YUV2BGR,
    real.COLOR_BGR2BGRA,
    real.COLOR_GRAY2BGRA,
    real.COLOR_RGBA2GRAY,
    real.COLOR_BGR2HLS,
    real.COLOR_HSV2BGR,
    real.COLOR_BGR2XYZ,
    real.COLOR_BGR2HSV_FULL,
    real.COLOR_RGB2HSV,
    real.COLOR_BGRA2RGBA,
    real.COLOR_BGR2Luv,
    real.COLOR_YUV2BGR_NV12,
    real.COLOR_BGR2YUV_I420,
]


def _styled_calls(rng: np.random.Generator, x: np.ndarray, k: int, border: int) -> list:
    mask = (rng.random(x.shape[:2]) > 0.5).astype(np.uint8)
    return [
        (
            "resize",
            (x, None),
            {
                "fx": float(rng.choice([0.5, 0.3, 1.7, 2.0, 0.25])),
                "fy": float(rng.choice([0.5, 0.3, 1.7, 2.0, 0.25])),
                "interpolation": int(rng.choice([0, 1, 2, 3, 4, 5, 6])),
            },
        ),
        ("resize", (x, (0, 0)), {"fx": 0.5, "fy": 0.5, "interpolation": int(rng.choice([1, 3]))}),
        (
            "resize",
            (x, (int(rng.integers(1, 90)), int(rng.integers(1, 90)))),
            {"interpolation": int(rng.choice([4, 5, 6, 7]))},
        ),
        (
            "GaussianBlur",
            (x, (0, 0)),
            {
                "sigmaX": float(rng.choice([0.5, 1.0, 2.0, 3.3])),
                "sigmaY": float(rng.choice([0, 1.2])),
                "borderType": border,
            },
        ),
        ("GaussianBlur", (x, (k, k), 0), {"sigmaY": 0}),
        ("cvtColor", (x, int(rng.choice(STYLE_CODES))), {}),
        ("cvtColor", (x, real.COLOR_BGR2RGB), {"dstCn": int(rng.choice([0, 3, 4]))}),
        (
            "normalize",
            (x, None),
            {
                "alpha": float(rng.choice([1, 255, 100])),
                "beta": 0.0,
                "norm_type": int(
                    rng.choice([real.NORM_L2, real.NORM_INF, real.NORM_L1, real.NORM_MINMAX])
                ),
                "dtype": int(rng.choice([-1, real.CV_32F, real.CV_8U])),
            },
        ),
        ("normalize", (x, None, 0, 1, real.NORM_MINMAX, real.CV_32F), {}),
        ("normalize", (x, None, 0, 255, real.NORM_MINMAX), {"mask": mask}),
        (
            "Canny",
            (x, 50.0, 150.0),
            {"apertureSize": int(rng.choice([3, 5, 7])), "L2gradient": bool(rng.integers(2))},
        ),
        (
            "warpAffine",
            (x, _affine(rng), (int(rng.integers(1, 90)), int(rng.integers(1, 90)))),
            {
                "flags": int(rng.choice([0, 1, 2, 3]))
                | int(rng.choice([0, real.WARP_INVERSE_MAP])),
                "borderMode": int(rng.choice([0, 1, 2, 3, 4])),
                "borderValue": (int(rng.integers(0, 255)), 3, 200, 7),
            },
        ),
        (
            "addWeighted",
            (x, 0.7, x[::-1].copy(), 0.4, 1.5),
            {"dtype": int(rng.choice([-1, real.CV_32F, real.CV_8U, real.CV_16S]))},
        ),
        ("minMaxLoc", (x,), {"mask": mask}),
        ("mean", (x,), {"mask": mask}),
        ("meanStdDev", (x,), {"mask": mask}),
        ("medianBlur", (x, int(rng.choice([7, 9, 1]))), {}),
        (
            "dnn.blobFromImage",
            (x,),
            {
                "scalefactor": float(rng.choice([1.0, 1 / 127.5])),
                "size": (int(rng.integers(1, 50)), int(rng.integers(1, 50))),
                "mean": (104.0, 117.0, 123.0),
                "swapRB": bool(rng.integers(2)),
                "crop": bool(rng.integers(2)),
                "ddepth": int(rng.choice([real.CV_32F, real.CV_8U])),
            },
        ),
        ("dnn.blobFromImages", ([x, x[::-1].copy()], 1 / 255, (24, 32)), {"swapRB": True}),
        (
            "Sobel",
            (x, real.CV_32F, int(rng.integers(0, 3)), 1),
            {
                "ksize": int(rng.choice([-1, 1, 3, 5, 7])),
                "scale": float(rng.choice([1, 0.5, 2])),
                "delta": float(rng.choice([0, 10])),
                "borderType": border,
            },
        ),
        (
            "Laplacian",
            (x, real.CV_32F),
            {"ksize": int(rng.choice([1, 3, 5])), "scale": 2.0, "delta": 1.0},
        ),
        (
            "filter2D",
            (
                x,
                int(rng.choice([-1, real.CV_32F, real.CV_16S])),
                rng.normal(size=(k, _odd(rng))).astype(np.float32),
            ),
            {"anchor": (-1, -1), "delta": float(rng.choice([0, 5])), "borderType": border},
        ),
        (
            "erode",
            (x, real.getStructuringElement(int(rng.integers(0, 3)), (k, _odd(rng)))),
            {
                "iterations": int(rng.integers(1, 4)),
                "borderType": int(rng.choice([0, 1, 4])),
                "borderValue": 7,
            },
        ),
        (
            "dilate",
            (x, real.getStructuringElement(int(rng.integers(0, 3)), (k, k))),
            {"anchor": (0, 0)},
        ),
        (
            "boxFilter",
            (x, int(rng.choice([-1, real.CV_32F])), (k, _odd(rng))),
            {"anchor": (-1, -1), "normalize": bool(rng.integers(2)), "borderType": border},
        ),
        ("LUT", (x, rng.integers(0, 256, (256, 1, 3)).astype(np.uint8)), {}),
        ("LUT", (x, rng.random(256).astype(np.float32)), {}),
        (
            "copyMakeBorder",
            (
                x,
                int(rng.integers(0, 9)),
                int(rng.integers(0, 9)),
                int(rng.integers(0, 9)),
                int(rng.integers(0, 9)),
                int(rng.choice([0, 1, 2, 3, 4])),
            ),
            {"value": (int(rng.integers(0, 255)), 2, 3, 4)},
        ),
        (
            "threshold",
            (
                x,
                0,
                255,
                int(rng.choice([0, 1]) | rng.choice([real.THRESH_OTSU, real.THRESH_TRIANGLE])),
            ),
            {},
        ),
        (
            "threshold",
            (x, float(rng.uniform(-10, 300)), float(rng.uniform(0, 300)), int(rng.integers(0, 5))),
            {},
        ),
        ("convertScaleAbs", (x, None, float(rng.uniform(-3, 3)), float(rng.uniform(-50, 50))), {}),
        ("flip", (x, int(rng.choice([-1, 0, 1]))), {"dst": None}),
        (
            "morphologyEx",
            (
                x,
                int(rng.integers(0, 8)),
                real.getStructuringElement(int(rng.integers(0, 3)), (k, k)),
            ),
            {"iterations": int(rng.integers(1, 3))},
        ),
        ("sepFilter2D", (x, -1, _taps(rng), _taps(rng)), {"delta": 3.0, "anchor": (-1, -1)}),
        ("equalizeHist", (x,), {}),
        ("countNonZero", (x,), {}),
        ("transpose", (x,), {}),
        ("rotate", (x, int(rng.integers(0, 3))), {}),
        (
            "Scharr",
            (x, int(rng.choice([-1, real.CV_32F, real.CV_16S])), int(rng.integers(0, 2)), 1),
            {"scale": 0.5, "delta": 2.0, "borderType": border},
        ),
    ]


def _affine(rng) -> np.ndarray:
    angle, scale = float(rng.uniform(-180, 180)), float(rng.uniform(0.5, 1.5))
    m = real.getRotationMatrix2D(
        (float(rng.uniform(0, 40)), float(rng.uniform(0, 40))), angle, scale
    )
    return m.astype(rng.choice([np.float32, np.float64]))


def _taps(rng) -> np.ndarray:
    return rng.normal(size=int(rng.choice([1, 3, 5]))).astype(np.float32)


def _function(module, name: str):
    for part in name.split("."):
        module = getattr(module, part)
    return module


# Where OpenCV's uint8 result is not its exact fixed point (resize's vector code rounds the
# vertical sum in 16 bits; area and cubic weights in float), gdp is within 1 LSB, as
# tests/gdp/cv2/test_resize.py documents.
_WITHIN_ONE = ("cv2.resize",)


def _compare(got, want, where: str, lsb: float = 0.0, within_one: bool = False):
    if isinstance(want, tuple | list):
        assert isinstance(got, tuple | list) and len(got) == len(want), where
        for g, w in zip(got, want, strict=True):
            _compare(g, w, where, lsb, within_one)
        return
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), where
        assert (got.shape, got.dtype) == (want.shape, want.dtype), where
        if want.dtype == np.uint8 and not (where.startswith(_WITHIN_ONE) or within_one):
            np.testing.assert_array_equal(got, want, err_msg=where)
        elif np.issubdtype(want.dtype, np.integer):
            # OpenCV computes 16- and 32-bit results in float: its rounding is not bit-exact
            np.testing.assert_allclose(got, want, rtol=0, atol=1, err_msg=where)
        else:  # float results: to float32 rounding of the largest value
            scale = float(np.nanmax(np.abs(want))) if want.size and not np.isnan(want).all() else 1
            atol = max(1e-5 * max(scale, 1), lsb)
            np.testing.assert_allclose(got, want, rtol=0, atol=atol, err_msg=where)
        return
    if want is None:
        assert got is None, where
        return
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=where)


def fuzz(seed: int, calls: int, large: bool = False) -> list[str]:
    """The failures of `calls` random calls drawn from `seed` (empty: all agree), on small
    images or with `large` on _large_image's."""
    rng = np.random.default_rng(seed)
    failures = []
    for i in range(calls):
        name, args, kwargs = _call(rng, _large_image if large else _image)
        image = args[0][0] if isinstance(args[0], list) else args[0]  # blobFromImages' list
        where = (
            f"cv2.{name} (seed {seed} call {i}) on {image.dtype} {image.shape},"
            f" {[a if np.isscalar(a) or isinstance(a, tuple) else '...' for a in args[1:]]},"
            f" {kwargs}"
        )
        rescued = sum(common.RESCUED.values())
        try:
            want = _function(real, name)(*args, **kwargs)
        except real.error:
            try:
                _function(cv2, name)(*args, **kwargs)
                failures.append(f"{where}: OpenCV raises, gdp answered")
            except (real.error, GdpError):
                pass
            continue
        try:
            # a blob of a uint8 image is resized in uint8 (within 1 LSB), then scaled
            scale = args[1] if len(args) > 1 else kwargs.get("scalefactor", 1.0)
            lsb = 1.0001 * scale if name.startswith("dnn.blobFromImage") else 0.0
            # A float kernel's delta: OpenCV's column pass starts its float32 sum from it
            # (k0 * x0 + delta, then the other taps), gdp adds it last; where the sum lies at a
            # half, the two round apart (1 of 733824 pixels of a large-view seed)
            delta = name in ("sepFilter2D", "filter2D") and kwargs.get("delta", 0) != 0
            _compare(_function(cv2, name)(*args, **kwargs), want, where, lsb, delta)
        except Exception as err:
            failures.append(f"{where}: {type(err).__name__}: {str(err)[:300]}")
        if sum(common.RESCUED.values()) > rescued:
            failures.append(f"{where}: gdp refused it with an error, OpenCV accepts it")
    return failures


if __name__ == "__main__":  # python cv2_fuzz_cases.py SEED CALLS [large]
    seed, calls, large = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:] == ["large"]
    print("CASE " + json.dumps({"seed": seed, "failures": fuzz(seed, calls, large)}), flush=True)
