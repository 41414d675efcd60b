"""Resizes as tf.image's documentation shows them: every method, antialias, aspect-preserving,
resize_with_pad, resize_with_crop_or_pad, the v1 align_corners form."""

from __future__ import annotations

import cv2
import numpy as np
import tensorflow as tf

from tests.corpus.registry import Input, program

F32 = Input(dtype="float32")


def _half(image):
    """Half the rows, a third of the columns of a static HWC or NHWC image."""
    h, w = image.shape[-3], image.shape[-2]
    return (h // 2, w // 3)


def _cv_resize(interpolation, size_of=lambda h, w: (h // 2, w // 3)):
    def run(image):
        h, w = size_of(*image.shape[:2])
        return cv2.resize(image, (w, h), interpolation=interpolation)

    return run


def resize_bilinear(image):
    return tf.image.resize(image, _half(image))


def resize_nearest(image):
    return tf.image.resize(image, _half(image), method="nearest")


def resize_bicubic(image):
    return tf.image.resize(image, _half(image), method="bicubic")


def resize_area(image):
    return tf.image.resize(image, _half(image), method="area")


def resize_lanczos3(image):
    return tf.image.resize(image, _half(image), method="lanczos3")


def resize_lanczos5(image):
    return tf.image.resize(image, _half(image), method="lanczos5")


def resize_mitchellcubic(image):
    return tf.image.resize(image, _half(image), method="mitchellcubic")


def resize_bilinear_antialias(image):
    return tf.image.resize(image, _half(image), antialias=True)


def resize_bicubic_antialias(image):
    return tf.image.resize(image, _half(image), method="bicubic", antialias=True)


def resize_up_bilinear(image):
    """An upscale of a uint8 image by 2 (the float result, as tf.image.resize gives)."""
    h, w = image.shape[0], image.shape[1]
    return tf.image.resize(image, (2 * h, 2 * w))


def resize_to_224(image):
    return tf.image.resize(tf.cast(image, tf.float32) / 255.0, (224, 224))


def resize_dynamic(image):
    """A [None, None, 3] signature: one model per shape met."""
    return tf.image.resize(image, (96, 128))


def resize_preserve_aspect(image):
    return tf.image.resize(image, (100, 100), preserve_aspect_ratio=True)


def resize_with_pad(image):
    return tf.image.resize_with_pad(image, 128, 128)


def resize_crop_or_pad_crop(image):
    return tf.image.resize_with_crop_or_pad(image, 96, 96)


def resize_crop_or_pad_pad(image):
    h, w = image.shape[0], image.shape[1]
    return tf.image.resize_with_crop_or_pad(image, h + 20, w - 30)


def resize_v1_align_corners(image):
    """TF 1 style, still public under tf.compat.v1."""
    return tf.compat.v1.image.resize_bilinear(image[None], (61, 81), align_corners=True)[0]


def resize_nearest_batch(images):
    return tf.image.resize(images, (64, 64), method="nearest")


def _cv_half(interpolation):
    return _cv_resize(interpolation)


program(
    "resize_bilinear",
    "resize",
    resize_bilinear,
    inputs=F32,
    fp16="resize",
    fast=True,
    opencv=_cv_half(cv2.INTER_LINEAR),
)
program("resize_nearest", "resize", resize_nearest, fast=True, opencv=_cv_half(cv2.INTER_NEAREST))
program(
    "resize_bicubic",
    "resize",
    resize_bicubic,
    inputs=F32,
    fp16="resize",
    opencv=_cv_half(cv2.INTER_CUBIC),
)
program(
    "resize_area", "resize", resize_area, inputs=F32, fp16="resize", opencv=_cv_half(cv2.INTER_AREA)
)
program(
    "resize_lanczos3",
    "resize",
    resize_lanczos3,
    inputs=F32,
    fp16="resize",
    opencv=_cv_half(cv2.INTER_LANCZOS4),
)
program("resize_lanczos5", "resize", resize_lanczos5, inputs=F32, fp16="resize")
program("resize_mitchellcubic", "resize", resize_mitchellcubic, inputs=F32, fp16="resize")
program(
    "resize_bilinear_antialias",
    "resize",
    resize_bilinear_antialias,
    inputs=F32,
    fp16="resize",
    opencv=_cv_half(cv2.INTER_AREA),
)
program("resize_bicubic_antialias", "resize", resize_bicubic_antialias, inputs=F32, fp16="resize")
program(
    "resize_up_bilinear",
    "resize",
    resize_up_bilinear,
    fp16="resize",
    opencv=_cv_resize(cv2.INTER_LINEAR, lambda h, w: (2 * h, 2 * w)),
    bench_size=(540, 960),
)
program(
    "resize_to_224",
    "resize",
    resize_to_224,
    fp16="resize",
    opencv=lambda image: cv2.resize(image, (224, 224)).astype(np.float32) / 255.0,
)
program(
    "resize_dynamic",
    "resize",
    resize_dynamic,
    inputs=Input(dtype="float32", dynamic=True),
    opencv=lambda image: cv2.resize(image, (128, 96)),
)
program("resize_preserve_aspect", "resize", resize_preserve_aspect, inputs=F32, fp16="resize")
program("resize_with_pad", "resize", resize_with_pad, inputs=F32, fp16="resize", fast=True)
program("resize_crop_or_pad_crop", "resize", resize_crop_or_pad_crop)
program("resize_crop_or_pad_pad", "resize", resize_crop_or_pad_pad, inputs=F32)
program("resize_v1_align_corners", "resize", resize_v1_align_corners, inputs=F32, fp16="resize")
program("resize_nearest_batch", "resize", resize_nearest_batch, inputs=Input(batch=4))
