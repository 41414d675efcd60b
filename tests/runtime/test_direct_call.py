"""A program that is one kernel runs without the Relax VM on the cpu (lowering.direct_call,
TvmExecutable.direct): its outputs allocated by gdp, or a ragged batch's rows written in place.
Results against TensorFlow running the same tf.function (the oracle), at sizes that move the
generic kernels' strip and vector boundaries; a program of several kernels keeps the VM."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import gdp


@tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.uint8, name="img")])
def _resize_chw(img):
    resized = tf.image.resize(tf.cast(img, tf.float32), (64, 48))
    return tf.transpose(resized / 255.0, (2, 0, 1))


@tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.uint8, name="img")])
def _scaled_swap(img):
    # An output whose extents are the input's free ones, the axes swapped.
    return tf.transpose(tf.cast(img, tf.float32) * 0.5, (1, 0, 2))


@tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.float32, name="img")])
def _two_kernels(img):
    return {"sum": tf.reduce_sum(img), "scaled": img * 3.0}


SIZES = [(1, 1), (5, 3), (97, 131), (333, 517), (64, 48), (1, 1000), (480, 640)]


def _images(dtype=np.uint8, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (h, w, 3)).astype(dtype) for h, w in SIZES]


def _executable(model):
    return model._specialized["generic"].executable


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.mark.parametrize("program", [_resize_chw, _scaled_swap], ids=["resize", "swap"])
def test_one_kernel_runs_direct_and_matches_tensorflow(program, cache):
    model = gdp.compile(program, target="cpu", cache_dir=cache, specialize="never")
    assert _executable(model).direct is not None
    for image in _images():
        want = program(tf.constant(image)).numpy()
        got = model(image)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        # A view of another array (not contiguous) is copied for the kernel, as the VM did.
        strided = np.repeat(image, 2, axis=1)[:, ::2]
        np.testing.assert_allclose(model(strided), want, rtol=1e-5, atol=1e-5)


def test_ragged_batch_writes_each_row_in_place(cache):
    model = gdp.compile(_resize_chw, target="cpu", cache_dir=cache, specialize="never")
    images = _images(seed=1)
    buf = np.full((len(images), 3, 64, 48), np.nan, np.float32)
    out = model.run_batch(images, outputs=buf)
    assert out is buf
    for n, image in enumerate(images):
        want = _resize_chw(tf.constant(image)).numpy()
        np.testing.assert_allclose(buf[n], want, rtol=1e-5, atol=1e-5)
    # Without buffers: one stack, the same values.
    np.testing.assert_array_equal(model.run_batch(images), buf)


def test_output_shapes_follow_the_inputs(cache):
    model = gdp.compile(_scaled_swap, target="cpu", cache_dir=cache, specialize="never")
    executable = _executable(model)
    image = np.zeros((7, 11, 3), np.uint8)
    assert executable.output_shapes([image]) == [(np.dtype(np.float32), (11, 7, 3))]
    # A batch of one size stacks in place; of two sizes, the outputs cannot stack.
    same = [np.full((7, 11, 3), k, np.uint8) for k in range(3)]
    stacked = model.run_batch(same)
    np.testing.assert_array_equal(stacked[:, 0, 0, 0], [0.0, 0.5, 1.0])
    with pytest.raises(gdp.InputError, match="depends on the input size"):
        model.run_batch([image, np.zeros((8, 11, 3), np.uint8)])


def test_several_kernels_keep_the_vm(cache):
    model = gdp.compile(_two_kernels, target="cpu", cache_dir=cache, specialize="never")
    assert _executable(model).direct is None
    image = np.random.default_rng(2).random((33, 45, 3)).astype(np.float32)
    got = model(image)
    np.testing.assert_allclose(got["scaled"], image * 3, rtol=1e-6)
    np.testing.assert_allclose(got["sum"], image.astype(np.float64).sum(), rtol=1e-5)
