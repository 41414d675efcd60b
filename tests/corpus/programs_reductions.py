"""Reductions over any axes (compared with the float64 version of the program: TF's float32
sums of large images drift), masks with tf.where, clips, cast round trips, floormod."""

from __future__ import annotations

import cv2
import numpy as np
import tensorflow as tf

from tests.corpus.registry import Input, program

F32 = Input(dtype="float32")


def mean_per_channel(image, dtype=tf.float32):
    return tf.reduce_mean(tf.cast(image, dtype), axis=[0, 1])


def mean_last_axis(image, dtype=tf.float32):
    """A grey image as the mean of the channels."""
    return tf.reduce_mean(tf.cast(image, dtype), axis=-1)


def mean_all(image, dtype=tf.float32):
    return tf.reduce_mean(tf.cast(image, dtype))


def variance_all(image, dtype=tf.float32):
    return tf.math.reduce_variance(tf.cast(image, dtype))


def std_per_channel(image, dtype=tf.float32):
    return tf.math.reduce_std(tf.cast(image, dtype), axis=[0, 1])


def mean_std_batch(images, dtype=tf.float32):
    """Dataset statistics of a batch: mean and std per channel over N, H, W."""
    x = tf.cast(images, dtype)
    return {"mean": tf.reduce_mean(x, axis=[0, 1, 2]), "std": tf.math.reduce_std(x, axis=[0, 1, 2])}


def min_max(image):
    return {"min": tf.reduce_min(image), "max": tf.reduce_max(image)}


def max_over_rows(image):
    """The column profile: max over axis 0."""
    return tf.reduce_max(image, axis=0)


def min_per_row(image):
    return tf.reduce_min(image, axis=[1, 2])


def sum_rows(image, dtype=tf.float32):
    """Row sums of a uint8 image (a projection profile)."""
    return tf.reduce_sum(tf.cast(image, dtype), axis=[1, 2])


def min_max_normalise(image):
    """Stretch the image to [0, 1] with its own min and max."""
    lo, hi = tf.reduce_min(image), tf.reduce_max(image)
    return (image - lo) / (hi - lo)


def argmax_channel(image):
    """The dominant channel of each pixel."""
    return tf.argmax(image, axis=-1, output_type=tf.int32)


def where_threshold(image):
    """A binary mask from the grey level, kept as float."""
    grey = tf.image.rgb_to_grayscale(image)
    return tf.where(grey > 0.5, tf.ones_like(grey), tf.zeros_like(grey))


def where_select(image):
    """Dark pixels brightened, the others kept."""
    return tf.where(image < 0.25, image * 2.0, image)


def clip_by_value(image):
    return tf.clip_by_value(image * 1.5 - 0.2, 0.0, 1.0)


def cast_round_trip(image):
    """float -> uint8 -> float: a quantisation, as TF truncates."""
    return tf.cast(tf.cast(image * 255.0, tf.uint8), tf.float32) / 255.0


def cast_round_uint8(image):
    """Rounded to the nearest uint8, as users write to save an image."""
    return tf.cast(tf.round(tf.clip_by_value(image * 255.0, 0.0, 255.0)), tf.uint8)


def floormod(image):
    """A posterisation: the value minus its remainder mod 32 (uint8 arithmetic in int32)."""
    x = tf.cast(image, tf.int32)
    return tf.cast(x - tf.math.floormod(x, 32), tf.uint8)


def floormod_float(image):
    return tf.math.floormod(image * 10.0, 1.0)


def bool_mask_count(image, dtype=tf.float32):
    """The share of bright pixels: a mask, a cast and a mean."""
    grey = tf.reduce_mean(tf.cast(image, dtype), axis=-1)
    return tf.reduce_mean(tf.cast(grey > 128, dtype))


def _cv_mean(image):
    return np.array(cv2.mean(image)[:3])


program(
    "mean_per_channel",
    "reductions",
    mean_per_channel,
    fp16="reduction",
    float64=True,
    fast=True,
    opencv=_cv_mean,
)
program("mean_last_axis", "reductions", mean_last_axis, fp16="reduction", float64=True)
program(
    "mean_all",
    "reductions",
    mean_all,
    fp16="reduction",
    float64=True,
    opencv=lambda image: np.mean(cv2.mean(image)[:3]),
)
program("variance_all", "reductions", variance_all, fp16="reduction", float64=True, fast=True)
program(
    "std_per_channel",
    "reductions",
    std_per_channel,
    fp16="reduction",
    float64=True,
    opencv=lambda image: cv2.meanStdDev(image)[1],
)
program(
    "mean_std_batch",
    "reductions",
    mean_std_batch,
    inputs=Input(batch=4),
    fp16="reduction",
    float64=True,
    bench_size=(1080, 1920),
)
program(
    "min_max",
    "reductions",
    min_max,
    inputs=F32,
    opencv=lambda image: cv2.minMaxLoc(image.reshape(-1))[:2],
)
program(
    "max_over_rows",
    "reductions",
    max_over_rows,
    inputs=F32,
    opencv=lambda image: cv2.reduce(image.reshape(image.shape[0], -1), 0, cv2.REDUCE_MAX),
)
program("min_per_row", "reductions", min_per_row)
program("sum_rows", "reductions", sum_rows, float64=True, fp16="reduction")
program(
    "min_max_normalise",
    "reductions",
    min_max_normalise,
    inputs=F32,
    fp16="pointwise",
    opencv=lambda image: cv2.normalize(image, None, 0, 1, cv2.NORM_MINMAX),
)
program("argmax_channel", "reductions", argmax_channel, inputs=F32)
program(
    "where_threshold",
    "reductions",
    where_threshold,
    inputs=F32,
    fast=True,
    opencv=lambda image: cv2.threshold(
        cv2.cvtColor(image, cv2.COLOR_RGB2GRAY), 0.5, 1, cv2.THRESH_BINARY
    )[1],
)
program("where_select", "reductions", where_select, inputs=F32, fp16="pointwise")
program(
    "clip_by_value",
    "reductions",
    clip_by_value,
    inputs=F32,
    fp16="pointwise",
    opencv=lambda image: np.clip(image * np.float32(1.5) - np.float32(0.2), 0, 1),
)
program("cast_round_trip", "reductions", cast_round_trip, inputs=F32)
program(
    "cast_round_uint8",
    "reductions",
    cast_round_uint8,
    inputs=F32,
    int_tolerance=1,
    opencv=lambda image: cv2.convertScaleAbs(image, alpha=255),
)
program("floormod", "reductions", floormod, fast=True)
program("floormod_float", "reductions", floormod_float, inputs=F32)
program("bool_mask_count", "reductions", bool_mask_count, float64=True)
