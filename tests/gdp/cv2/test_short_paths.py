"""The short paths (the common call straight to its kernel: threshold, cvtColor, resize,
countNonZero, minMaxLoc, sumElems, flip, transpose, rotate) take only the arrays they were
written for, and C's plain_image decides which: every other layout a user passes (byte-swapped,
a subclass, read-only, HxWx1, Fortran order, reversed, one row or column) gets OpenCV's answer
or OpenCV's error, as the general path gives them."""

import cv2 as real
import numpy as np
import pytest
import skimage.data

import gdp.cv2 as cv2

BGR = real.resize(skimage.data.astronaut(), (67, 45))
GRAY = real.cvtColor(BGR, real.COLOR_BGR2GRAY)


class Image(np.ndarray):
    """An ndarray subclass, as some libraries hand them out."""


def _layouts(image: np.ndarray) -> dict:
    locked = image.copy()
    locked.flags.writeable = False
    layouts = {
        "plain": image,
        "read-only": locked,
        "subclass": image.view(Image),
        "fortran": np.asfortranarray(image),
        "reversed": image[::-1],
        "every other column": image[:, ::2],
        "one row": image[:1].copy(),
        "one column": image[:, :1].copy(),
        "float32 byte-swapped": image.astype(">f4"),
        "uint16 byte-swapped": image.astype(">u2"),
    }
    if image.ndim == 2:
        layouts["HxWx1"] = image[..., None].copy()
    return layouts


CALLS = {
    "threshold": lambda m, x: m.threshold(x, 100, 255, real.THRESH_BINARY),
    "cvtColor BGR2RGB": lambda m, x: m.cvtColor(x, real.COLOR_BGR2RGB),
    "cvtColor BGR2GRAY": lambda m, x: m.cvtColor(x, real.COLOR_BGR2GRAY),
    "resize LINEAR": lambda m, x: m.resize(x, (31, 20)),
    "resize AREA to half": lambda m, x: m.resize(
        x, (x.shape[1] // 2 or 1, x.shape[0] // 2 or 1), interpolation=real.INTER_AREA
    ),
    "resize NEAREST": lambda m, x: m.resize(x, (31, 20), interpolation=real.INTER_NEAREST),
    "countNonZero": lambda m, x: m.countNonZero(x),
    "minMaxLoc": lambda m, x: m.minMaxLoc(x),
    "sumElems": lambda m, x: m.sumElems(x),
    "flip": lambda m, x: m.flip(x, -1),
    "transpose": lambda m, x: m.transpose(x),
    "rotate 90": lambda m, x: m.rotate(x, real.ROTATE_90_CLOCKWISE),
    "rotate 180": lambda m, x: m.rotate(x, real.ROTATE_180),
}


def _outcome(call, module, x):
    try:
        return call(module, x), None
    except (real.error, TypeError, ValueError) as err:
        return None, type(err)


@pytest.mark.parametrize("name", list(CALLS))
@pytest.mark.parametrize("image", [GRAY, BGR], ids=["gray", "BGR"])
def test_every_layout_as_opencv(name, image):
    call = CALLS[name]
    for layout, x in _layouts(image).items():
        want, refused = _outcome(call, real, x)
        got, gdp_refused = _outcome(call, cv2, x)
        assert gdp_refused == refused, (layout, gdp_refused, refused)
        if refused:
            continue
        if name == "sumElems":  # sums in another order than OpenCV's
            np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=layout)
        elif isinstance(want, tuple | int):  # (retval, dst), minMaxLoc's, a count
            assert got == want if isinstance(want, int) else len(got) == len(want), layout
            for g, w in zip(got, want, strict=True) if isinstance(want, tuple) else ():
                np.testing.assert_array_equal(g, w, err_msg=layout)
        else:
            assert got.dtype == want.dtype and got.shape == want.shape, layout
            # resize: OpenCV's own tests' tolerance, 1 LSB (docs/conformance.md), but for uint8
            # LINEAR, which OpenCV computes bit-exactly
            lsb = 1 if name.startswith("resize") and name != "resize LINEAR" else 0
            diff = np.abs(got.astype(np.float64) - want.astype(np.float64)).max()
            assert diff <= lsb, (layout, diff)


def test_a_one_pixel_wide_uint8_linear_resize_is_opencvs():
    """OpenCV's bit-exact 8-bit LINEAR path and gdp's program differed by 1 LSB on a source one
    pixel wide: such a call runs OpenCV's."""
    rng = np.random.default_rng(2)
    for shape in [(2, 1), (3, 1), (45, 1), (2, 1, 3), (45, 1, 3), (1, 1), (1, 45)]:
        x = rng.integers(0, 256, shape).astype(np.uint8)
        for size in [(31, 20), (3, 90), (1, 7), (7, 1), (20, 20), (1, 90)]:
            np.testing.assert_array_equal(cv2.resize(x, size), real.resize(x, size), (shape, size))
