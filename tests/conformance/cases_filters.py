"""Conformance cases of the filters: GaussianBlur, blur, boxFilter, filter2D, sepFilter2D,
medianBlur, Sobel, Scharr, Laplacian, erode, dilate, morphologyEx, Canny."""

from __future__ import annotations

import itertools

import cv2 as real
import numpy as np

import gdp.cv2 as cv2
from tests.conformance.core import CANNY, EXACT, REL_1E5, Case, images

BORDERS = {
    "CONSTANT": real.BORDER_CONSTANT,
    "REPLICATE": real.BORDER_REPLICATE,
    "REFLECT": real.BORDER_REFLECT,
    "REFLECT_101": real.BORDER_REFLECT_101,
}
SIZE_CLASSES = ("tiny", "odd", "photo")


def _tolerance(dtype) -> str:
    return REL_1E5 if np.dtype(dtype).kind == "f" else EXACT


def _per_image(function, dtype, border, size, params, call, channels=3, tolerance=None):
    """One case per image of the size class (each shape is its own compiled program)."""
    out = []
    for i, image in enumerate(images(dtype, size, channels)):
        shape = "x".join(map(str, image.shape))
        out.append(
            Case(
                function,
                dtype,
                border,
                size,
                f"{params} {shape}#{i}",
                gdp=lambda image=image: call(cv2, image),
                opencv=lambda image=image: call(real, image),
                tolerance=tolerance or _tolerance(call(real, image).dtype),
            )
        )
    return out


def cases() -> list[Case]:
    out: list[Case] = []
    # GaussianBlur: kernel sizes x sigma (derived and explicit), every border, sizes, dtypes.
    for dtype, k, sigma in itertools.product(
        ("uint8", "uint16", "float32"), (1, 3, 5, 7), (0.0, 1.3)
    ):
        if k == 1 and sigma == 0:
            continue

        def call(m, x, k=k, sigma=sigma):
            return m.GaussianBlur(x, (k, k), sigma)

        out += _per_image("GaussianBlur", dtype, "REFLECT_101", "odd", f"k{k} s{sigma}", call)
    for (name, border), dtype, size in itertools.product(
        BORDERS.items(), ("uint8", "uint16", "float32"), SIZE_CLASSES
    ):

        def call(m, x, border=border):
            return m.GaussianBlur(x, (5, 5), 0, borderType=border)

        out += _per_image("GaussianBlur", dtype, name, size, "k5 s0", call)
    out += _per_image(
        "GaussianBlur",
        "uint8",
        "REFLECT_101",
        "photo",
        "k0 s2.0 (size from sigma)",
        lambda m, x: m.GaussianBlur(x, (0, 0), 2.0),
    )
    for dtype in ("uint16", "uint8"):
        out += _per_image(
            "GaussianBlur",
            dtype,
            "REFLECT_101",
            "1080p" if dtype == "uint8" else "photo",
            "k0 s2.0 (size from sigma)" if dtype == "uint16" else "k5 s0 full HD",
            (lambda m, x: m.GaussianBlur(x, (0, 0), 2.0))
            if dtype == "uint16"
            else (lambda m, x: m.GaussianBlur(x, (5, 5), 0)),
        )
    # Box filters.
    for (name, border), dtype in itertools.product(BORDERS.items(), ("uint8", "float32")):
        out += _per_image(
            "blur",
            dtype,
            name,
            "odd",
            "k3x5",
            lambda m, x, b=border: m.blur(x, (3, 5), borderType=b),
        )
    out += _per_image(
        "boxFilter",
        "uint8",
        "REFLECT_101",
        "odd",
        "CV_16S k5 unnormalized",
        lambda m, x: m.boxFilter(x, real.CV_16S, (5, 5), normalize=False),
    )
    # filter2D and sepFilter2D with a fixed random kernel.
    kernel = np.random.default_rng(1).normal(size=(3, 5)).astype(np.float32)
    for (name, border), dtype in itertools.product(BORDERS.items(), ("uint8", "float32")):
        out += _per_image(
            "filter2D",
            dtype,
            name,
            "odd",
            "3x5 kernel",
            lambda m, x, b=border: m.filter2D(x, -1, kernel, borderType=b),
        )
    for dtype in ("uint8", "float32"):
        out += _per_image(
            "sepFilter2D",
            dtype,
            "REFLECT_101",
            "odd",
            "5 x 3 taps",
            lambda m, x: m.sepFilter2D(x, real.CV_32F, kernel[0], kernel[1, :3]),
        )
    # Gradients.
    for k, (name, border) in itertools.product((1, 3, 5, 7), BORDERS.items()):
        out += _per_image(
            "Sobel",
            "uint8",
            name,
            "odd",
            f"CV_16S dx1 k{k}",
            lambda m, x, k=k, b=border: m.Sobel(x, real.CV_16S, 1, 0, ksize=k, borderType=b),
            channels=1,
        )
    out += _per_image(
        "Sobel",
        "float32",
        "REFLECT_101",
        "photo",
        "CV_32F dy1 k3",
        lambda m, x: m.Sobel(x, real.CV_32F, 0, 1),
        channels=1,
    )
    out += _per_image(
        "Scharr",
        "uint8",
        "REFLECT_101",
        "odd",
        "CV_32F dx1",
        lambda m, x: m.Scharr(x, real.CV_32F, 1, 0),
        channels=1,
    )
    for k in (1, 3, 5):
        out += _per_image(
            "Laplacian",
            "uint8",
            "REFLECT_101",
            "odd",
            f"CV_16S k{k}",
            lambda m, x, k=k: m.Laplacian(x, real.CV_16S, ksize=k),
            channels=1,
        )
    # Median and morphology.
    for dtype, k, size in itertools.product(
        ("uint8", "uint16", "float32"), (3, 5), ("tiny", "odd", "photo")
    ):
        out += _per_image(
            "medianBlur", dtype, "REPLICATE", size, f"k{k}", lambda m, x, k=k: m.medianBlur(x, k)
        )
    out += _per_image(
        "medianBlur", "uint16", "REPLICATE", "1080p", "k5", lambda m, x: m.medianBlur(x, 5)
    )
    ellipse = real.getStructuringElement(real.MORPH_ELLIPSE, (5, 5))
    for fn, dtype in itertools.product(("erode", "dilate"), ("uint8", "float32")):
        out += _per_image(
            fn,
            dtype,
            "CONSTANT (default value)",
            "odd",
            "ellipse 5x5",
            lambda m, x, fn=fn: getattr(m, fn)(x, ellipse),
        )
    for op in ("OPEN", "CLOSE", "GRADIENT", "TOPHAT", "BLACKHAT"):
        out += _per_image(
            "morphologyEx",
            "uint8",
            "CONSTANT (default value)",
            "odd",
            f"MORPH_{op} 3x3",
            lambda m, x, op=op: m.morphologyEx(
                x, getattr(real, f"MORPH_{op}"), np.ones((3, 3), np.uint8)
            ),
        )
    # 16-bit images through every linear and morphological filter that takes them.
    ones = np.ones((3, 3), np.uint8)
    laplace = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], np.float32)
    binomial = np.array([1, 2, 1], np.float32) / 4
    sixteen = {
        "blur": ("(3,5)", lambda m, x: m.blur(x, (3, 5))),
        "boxFilter": (
            "-1 (5,3) unnormalized",
            lambda m, x: m.boxFilter(x, -1, (5, 3), normalize=False),
        ),
        "filter2D": ("-1 laplace", lambda m, x: m.filter2D(x, -1, laplace)),
        "sepFilter2D": ("-1 binomial", lambda m, x: m.sepFilter2D(x, -1, binomial, binomial)),
        "Sobel": ("CV_32F dx", lambda m, x: m.Sobel(x, real.CV_32F, 1, 0)),
        "Laplacian": ("CV_32F", lambda m, x: m.Laplacian(x, real.CV_32F)),
        "erode": ("3x3", lambda m, x: m.erode(x, ones)),
        "dilate": ("3x3", lambda m, x: m.dilate(x, ones)),
        "morphologyEx": ("GRADIENT 3x3", lambda m, x: m.morphologyEx(x, real.MORPH_GRADIENT, ones)),
    }
    for dtype, (name, (params, call)) in itertools.product(("uint16", "int16"), sixteen.items()):
        out += _per_image(name, dtype, "REFLECT_101", "odd", params, call)
    # Canny, L1 and L2, every aperture (7's thresholds are in its 16x larger gradient units).
    thresholds = {3: (50, 150), 5: (200, 600), 7: (1500, 4500)}
    for l2, aperture, size in itertools.product((False, True), (3, 5, 7), ("photo", "odd")):
        low, high = thresholds[aperture]
        out += _per_image(
            "Canny",
            "uint8",
            "REPLICATE",
            size,
            f"{low}/{high} aperture {aperture} L2={l2}",
            lambda m, x, l2=l2, a=aperture, lo=low, hi=high: m.Canny(
                x, lo, hi, apertureSize=a, L2gradient=l2
            ),
            channels=1,
            tolerance=CANNY,
        )
    # Colour Canny: per pixel, the gradient of the channel with the largest magnitude.
    for l2, aperture in itertools.product((False, True), (3, 5)):
        low, high = thresholds[aperture]
        out += _per_image(
            "Canny",
            "uint8",
            "REPLICATE",
            "photo",
            f"{low}/{high} aperture {aperture} L2={l2} colour",
            lambda m, x, l2=l2, a=aperture, lo=low, hi=high: m.Canny(
                x, lo, hi, apertureSize=a, L2gradient=l2
            ),
            tolerance=CANNY,
        )
    out += _per_image(
        "Canny",
        "uint8",
        "REPLICATE",
        "1080p",
        "50/150 aperture 3",
        lambda m, x: m.Canny(x, 50, 150),
        channels=1,
        tolerance=CANNY,
    )
    return out
