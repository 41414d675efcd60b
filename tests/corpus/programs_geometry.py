"""Crops, pads, flips, rotations and patches, as tf.image's documentation shows them."""

from __future__ import annotations

import cv2
import numpy as np
import tensorflow as tf

from tests.corpus.registry import Input, program

F32 = Input(dtype="float32")


def crop_to_bounding_box(image):
    h, w = image.shape[0], image.shape[1]
    return tf.image.crop_to_bounding_box(image, h // 8, w // 5, h // 2, w // 2)


def central_crop(image):
    """Inception's eval crop: the central 87.5%."""
    return tf.image.central_crop(image, central_fraction=0.875)


def pad_to_bounding_box(image):
    h, w = image.shape[0], image.shape[1]
    return tf.image.pad_to_bounding_box(image, 7, 12, h + 16, w + 31)


def flip_left_right(image):
    return tf.image.flip_left_right(image)


def flip_up_down(image):
    return tf.image.flip_up_down(image)


def rot90(image):
    return tf.image.rot90(image)


def rot90_k3(image):
    return tf.image.rot90(image, k=3)


def transpose(image):
    return tf.image.transpose(image)


def flip_batch(images):
    """The NHWC form of flip_left_right."""
    return tf.image.flip_left_right(images)


def crop_flip_scale(image):
    """A crop, a flip and a scale to [0, 1]: an eval-time test-time-augmentation branch."""
    h, w = image.shape[0], image.shape[1]
    x = tf.image.crop_to_bounding_box(image, 4, 6, h - 8, w - 12)
    return tf.image.convert_image_dtype(tf.image.flip_left_right(x), tf.float32)


def subsample(image):
    """Every second row and column, as a strided slice."""
    return image[::2, ::2, :]


def extract_patches(image):
    """16x16 patches with stride 16 (a ViT's patchify), flattened per patch."""
    return tf.image.extract_patches(
        image[None],
        sizes=[1, 16, 16, 1],
        strides=[1, 16, 16, 1],
        rates=[1, 1, 1, 1],
        padding="VALID",
    )


def extract_patches_same(image):
    """Overlapping 8x8 patches, stride 4, SAME padding."""
    return tf.image.extract_patches(
        image[None], sizes=[1, 8, 8, 1], strides=[1, 4, 4, 1], rates=[1, 1, 1, 1], padding="SAME"
    )


def _cv_crop(image):
    h, w = image.shape[:2]
    return image[h // 8 : h // 8 + h // 2, w // 5 : w // 5 + w // 2].copy()


program("crop_to_bounding_box", "geometry", crop_to_bounding_box, fast=True, opencv=_cv_crop)
program("central_crop", "geometry", central_crop, inputs=F32)
program(
    "pad_to_bounding_box",
    "geometry",
    pad_to_bounding_box,
    opencv=lambda image: cv2.copyMakeBorder(image, 7, 9, 12, 19, cv2.BORDER_CONSTANT),
)
program(
    "flip_left_right",
    "geometry",
    flip_left_right,
    opencv=lambda image: cv2.flip(image, 1),
)
program(
    "flip_up_down", "geometry", flip_up_down, inputs=F32, opencv=lambda image: cv2.flip(image, 0)
)
program(
    "rot90",
    "geometry",
    rot90,
    opencv=lambda image: cv2.rotate(image, cv2.ROTATE_90_COUNTERCLOCKWISE),
)
program(
    "rot90_k3",
    "geometry",
    rot90_k3,
    inputs=F32,
    opencv=lambda image: cv2.rotate(image, cv2.ROTATE_90_CLOCKWISE),
)
program("transpose", "geometry", transpose, opencv=lambda image: cv2.transpose(image))
program(
    "flip_batch",
    "geometry",
    flip_batch,
    inputs=Input(batch=4),
    opencv=lambda images: np.stack([cv2.flip(i, 1) for i in images]),
)
program("crop_flip_scale", "geometry", crop_flip_scale, fp16="pointwise", fast=True)
program("subsample", "geometry", subsample, opencv=lambda image: image[::2, ::2].copy())
program("extract_patches", "geometry", extract_patches, inputs=F32, size=(128, 160))
program("extract_patches_same", "geometry", extract_patches_same)
