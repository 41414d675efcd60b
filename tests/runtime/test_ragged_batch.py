"""Ragged batches (issue 19): `model.run_batch([img1, img2, ...])` and
`gdp.run_async(model, batch=[...])` run images of different sizes as one task and return each
output stacked (N, ...).

Every image's result is checked against TensorFlow running the same tf.function on that image
alone (the independent oracle), and the resize pipeline against OpenCV + NumPy too. Sizes mix
1-pixel, single rows and columns, odd and prime extents and 1080p.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import tensorflow as tf

import gdp

SIZES = [
    (1, 1),
    (1, 7),
    (5, 1),
    (2, 3),
    (97, 131),
    (224, 224),
    (300, 224),
    (333, 517),
    (480, 640),
    (481, 333),
    (3, 1000),
    (1080, 1920),
    (599, 801),
    (17, 19),
    (720, 1279),
    (640, 480),
]


@tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.uint8, name="img")])
def _resize_normalise_chw(img):
    resized = tf.image.resize(tf.cast(img, tf.float32), (224, 224))
    return tf.transpose(resized / 255.0, (2, 0, 1))


@tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.uint8, name="img")])
def _two_outputs(img):
    x = tf.image.resize(tf.cast(img, tf.float32), (64, 96)) / 255.0
    return {"chw": tf.transpose(x, (2, 0, 1)), "mean": tf.reduce_mean(x, axis=(0, 1))}


@tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.uint8, name="img")])
def _letterbox_640(img):
    return {"letterbox": tf.image.resize_with_pad(tf.cast(img, tf.float32), 640, 640) / 255.0}


@tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.uint8, name="img")])
def _same_size(img):
    return tf.cast(img, tf.float32) * 2.0


def _images(sizes=SIZES, seed=0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in sizes]


def _resize_atol(shape) -> float:
    # A bilinear resize's float32 source coordinates round apart from TF's by a few ulp of the
    # image extent (as in test_shape_generic).
    return max(2e-5, 4 * float(np.finfo(np.float32).eps) * max(shape))


@pytest.fixture(scope="module")
def resize_model(tmp_path_factory):
    return gdp.compile(
        _resize_normalise_chw,
        target="cpu",
        cache_dir=tmp_path_factory.mktemp("cache"),
        specialize="never",
    )


def test_resize224_batch_matches_tf_and_opencv(resize_model):
    images = _images()
    got = resize_model.run_batch(images)
    assert got.shape == (len(images), 3, 224, 224) and got.dtype == np.float32
    for n, image in enumerate(images):
        want = _resize_normalise_chw(image).numpy()
        atol = _resize_atol(image.shape[:2])
        np.testing.assert_allclose(got[n], want, rtol=0, atol=atol, err_msg=f"image {n}")
        opencv = cv2.resize(image.astype(np.float32), (224, 224), interpolation=cv2.INTER_LINEAR)
        opencv = (opencv / 255.0).transpose(2, 0, 1)
        np.testing.assert_allclose(got[n], opencv, rtol=0, atol=2e-4, err_msg=f"image {n}")
    report = resize_model.report()
    assert report["shapes_mode"] == "generic" and report["builds"] == 1, report


def test_batch_equals_per_image_calls(resize_model):
    images = _images(seed=1)
    got = resize_model.run_batch(images)
    for n, image in enumerate(images):
        np.testing.assert_array_equal(got[n], resize_model(image), err_msg=f"image {n}")


def test_output_buffer_filled_in_place_and_run_async(resize_model):
    images = _images(seed=2)
    want = np.stack([_resize_normalise_chw(x).numpy() for x in images])
    buf = np.full((len(images), 3, 224, 224), np.nan, np.float32)
    assert resize_model.run_batch(images, outputs=buf) is buf
    np.testing.assert_allclose(buf, want, rtol=0, atol=_resize_atol((1080, 1920)))

    buf2 = np.full_like(buf, np.nan)
    handle = gdp.run_async(resize_model, batch=images, outputs={"output_0": buf2}, profile=True)
    gdp.sync()
    assert handle.result()["output_0"] is buf2
    np.testing.assert_array_equal(buf2, buf)
    assert handle.profile.execute_s > 0 and handle.profile.kernels

    handle = gdp.run_async(resize_model, batch=images[:3])
    assert handle.result()["output_0"].shape == (3, 3, 224, 224)


def test_several_outputs_and_entries_as_dicts(tmp_path):
    model = gdp.compile(_two_outputs, target="cpu", cache_dir=tmp_path, specialize="never")
    images = _images(SIZES[:6], seed=3)
    entries = [images[0], {"img": images[1]}, *images[2:]]
    got = model.run_batch(entries)
    assert set(got) == {"chw", "mean"}
    assert got["chw"].shape == (6, 3, 64, 96) and got["mean"].shape == (6, 3)
    for n, image in enumerate(images):
        want = _two_outputs(image)
        atol = _resize_atol(image.shape[:2])
        np.testing.assert_allclose(got["chw"][n], want["chw"].numpy(), rtol=0, atol=atol)
        # A float32 mean over 6144 values: the summation orders differ (TVM's reduction, TF's).
        np.testing.assert_allclose(got["mean"][n], want["mean"].numpy(), rtol=0, atol=2e-4)


def test_letterbox_640_batch_matches_tf(tmp_path):
    # The letterbox resizes to a size computed from the image's aspect ratio; TVM's importer
    # takes no run-time resize sizes, so it runs on the reference target (onnxruntime), whose
    # graph leaves the output's dimensions free: the batch checks at run time that they stack.
    model = gdp.compile(_letterbox_640, target="reference", cache_dir=tmp_path)
    assert model.outputs[0].shape == (None, None, None)
    images = _images(seed=4)
    got = model.run_batch(images)
    assert got.shape == (len(images), 640, 640, 3)
    for n, image in enumerate(images):
        want = _letterbox_640(image)["letterbox"].numpy()
        atol = max(1e-4, _resize_atol(image.shape[:2]))
        np.testing.assert_allclose(got[n], want, rtol=0, atol=atol, err_msg=f"image {n}")


@pytest.mark.parametrize(
    "bad, words",
    [
        (np.zeros((8, 8, 3), np.float32), ["image 3", "uint8", "float32"]),
        (np.zeros((8, 8, 4), np.uint8), ["image 3", "[None, None, 3]", "(8, 8, 4)"]),
        (np.zeros((8, 8), np.uint8), ["image 3", "(8, 8)"]),
        ("not an image", ["image 3", "str"]),
    ],
)
def test_bad_image_is_named_and_nothing_written(resize_model, bad, words):
    images = _images(SIZES[:6])
    images[3] = bad
    buf = np.full((6, 3, 224, 224), 7.0, np.float32)
    with pytest.raises(gdp.InputError) as err:
        resize_model.run_batch(images, outputs=buf)
    for word in words:
        assert word in str(err.value), (word, str(err.value))
    assert (buf == 7.0).all()


def test_empty_batch_and_not_a_list(resize_model):
    with pytest.raises(gdp.InputError, match="empty"):
        resize_model.run_batch([])
    with pytest.raises(gdp.InputError, match="list of images"):
        resize_model.run_batch({"img": _images(SIZES[:1])[0]})
    with pytest.raises(gdp.InputError, match="not both"):
        gdp.run_async(resize_model, _images(SIZES[:1])[0], batch=_images(SIZES[:1]))
    with pytest.raises(gdp.InputError, match="batch="):
        gdp.run_async(resize_model)
    with pytest.raises(gdp.OutputBufferError, match="dict by output name"):
        gdp.run_async(resize_model, _images(SIZES[:1])[0], np.zeros((3, 224, 224), np.float32))


def test_bad_output_buffers_are_refused(resize_model):
    images = _images(SIZES[:4])
    for buf, words in [
        (np.zeros((3, 3, 224, 224), np.float32), ["(4, 3, 224, 224)", "(3, 3, 224, 224)"]),
        (np.zeros((4, 224, 224, 3), np.float32), ["(4, 3, 224, 224)"]),
        (np.zeros((4, 3, 224, 224), np.float64), ["float32", "float64"]),
        (np.zeros((4, 3, 224, 448), np.float32)[..., ::2], ["C-contiguous"]),
    ]:
        with pytest.raises(gdp.OutputBufferError) as err:
            resize_model.run_batch(images, outputs=buf)
        for word in words:
            assert word in str(err.value), (word, str(err.value))
    with pytest.raises(gdp.OutputBufferError, match="unknown output"):
        resize_model.run_batch(images, outputs={"nope": np.zeros((4, 3, 224, 224), np.float32)})


def test_output_that_depends_on_the_size_cannot_stack(tmp_path):
    model = gdp.compile(_same_size, target="cpu", cache_dir=tmp_path, specialize="never")
    images = _images([(4, 5), (4, 5), (6, 5)])
    with pytest.raises(gdp.InputError, match="depends on the input size") as err:
        model.run_batch(images)
    assert "image 2" in str(err.value) and "[6, 5, 3]" in str(err.value)
    # One size stacks; a buffer left untouched by a refused batch.
    same = model.run_batch(images[:2])
    np.testing.assert_array_equal(same, np.stack(images[:2]).astype(np.float32) * 2)
    buf = np.full((3, 4, 5, 3), 7.0, np.float32)
    with pytest.raises(gdp.InputError, match="depends on the input size"):
        model.run_batch(images, outputs=buf)
    assert (buf == 7.0).all()


def test_a_failing_run_mid_batch_writes_nothing(resize_model, monkeypatch):
    # The fifth image's run fails (injected where the executable binds its input: an empty
    # image, the old trigger, is now refused before any run): the runs before it succeeded, yet
    # nothing reaches the buffer.
    from gdp.runtime.backends.tvm.executable import TvmExecutable

    original, bound = TvmExecutable._to_device, []

    def failing(self, index, array):
        bound.append(array.shape)
        if len(bound) == 5:
            raise RuntimeError("injected kernel failure")
        return original(self, index, array)

    images = _images(SIZES[:5])
    images.append(images[0])
    buf = np.full((6, 3, 224, 224), 7.0, np.float32)
    monkeypatch.setattr(TvmExecutable, "_to_device", failing)
    with pytest.raises(gdp.ExecutionError, match="injected kernel failure"):
        resize_model.run_batch(images, outputs=buf)
    assert len(bound) == 5 and (buf == 7.0).all()
    monkeypatch.undo()
    # The worker goes on serving; an empty image is an InputError naming it, nothing written.
    assert resize_model.run_batch(images[:2]).shape == (2, 3, 224, 224)
    with pytest.raises(gdp.InputError, match="image 1: input .*empty array"):
        resize_model.run_batch([images[0], np.zeros((0, 5, 3), np.uint8)], outputs=buf[:2])
    assert (buf == 7.0).all()


def test_per_shape_model_batches_too(tmp_path):
    # specialize="always": one executable per shape; a batch runs each image on its own.
    model = gdp.compile(
        _resize_normalise_chw, target="cpu", cache_dir=tmp_path, specialize="always"
    )
    images = _images([(5, 7), (9, 4), (5, 7)], seed=5)
    got = model.run_batch(images)
    assert model.report()["builds"] == 2
    for n, image in enumerate(images):
        want = _resize_normalise_chw(image).numpy()
        np.testing.assert_allclose(got[n], want, rtol=0, atol=2e-5, err_msg=f"image {n}")


@tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.uint8, name="img")])
def _identity(img):
    return tf.identity(img)


def test_read_only_images_are_staged_and_not_overwritten(tmp_path):
    # Read-only arrays are copied into one staging tensor the VM reuses from image to image; an
    # output that is that tensor's memory must be copied out before the next image refills it.
    model = gdp.compile(_identity, target="cpu", cache_dir=tmp_path, specialize="never")
    images = _images([(6, 5)] * 3, seed=6)
    for image in images:
        image.flags.writeable = False
    got = model.run_batch(images)
    np.testing.assert_array_equal(got, np.stack(images))
    resize = gdp.compile(
        _resize_normalise_chw, target="cpu", cache_dir=tmp_path, specialize="never"
    )
    images = _images(SIZES[:4], seed=7)
    for image in images:
        image.flags.writeable = False
    got = resize.run_batch(images)
    for n, image in enumerate(images):
        want = _resize_normalise_chw(image).numpy()
        np.testing.assert_allclose(got[n], want, rtol=0, atol=_resize_atol(image.shape[:2]))
