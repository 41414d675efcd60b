"""Every front end against TensorFlow's own output on real photos (fp32, max abs diff <= 1e-5;
means against NumPy in float64, which is exact where TensorFlow's float32 sums are not)."""

import os
import subprocess
import sys

import keras
import numpy as np
import onnx
import pytest
import tensorflow as tf
import tf2onnx

import gdp
from tests import ROOT
from tests.pipelines import NORMALIZE_BLUR, normalize_blur, normalize_blur_oracle

TOL = 1e-5
# onnxruntime (the reference target) sums in float32 in one long chain, as TensorFlow does: its
# mean over a photo is off by up to 2.4e-4. gdp's cpu target sums partial sums, held to TOL.
REFERENCE_MEAN_TOL = 5e-4


def assert_matches_tf(result: dict, expected: dict, tolerances: dict | None = None) -> None:
    assert set(result) == set(expected)
    for name, want in expected.items():
        want = np.asarray(want)
        assert result[name].shape == want.shape, name
        assert result[name].dtype == want.dtype, name
        atol = (tolerances or {}).get(name, TOL)
        np.testing.assert_allclose(result[name], want, rtol=0, atol=atol, err_msg=name)


@pytest.mark.parametrize(
    "target, options", [("cpu", {}), ("cpu", {"specialize": "always"}), ("reference", {})]
)
def test_tf_function_with_free_dims(photos, target, options):
    model = gdp.compile(NORMALIZE_BLUR, target=target, **options)
    assert model.input_names == ["image"]
    assert model.output_names == ["chw", "mean"]
    tolerances = {"mean": REFERENCE_MEAN_TOL} if target == "reference" else None
    for photo in photos:
        assert_matches_tf(model(photo), normalize_blur_oracle(photo), tolerances)
    shapes = model.report()["shapes"]
    if options:  # one specialised model per concrete shape
        assert [s["image"] for s in shapes] == [p.shape for p in photos]
        assert model.onnx.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 300
    else:  # one model takes the free dimensions as they are (TVM's generic kernels, onnxruntime)
        assert len(shapes) == 1


def test_plain_function_with_input_signature(photos):
    photo = photos[1]
    spec = [tf.TensorSpec(photo.shape, tf.uint8, name="pixels")]
    model = gdp.compile(normalize_blur, input_signature=spec)
    assert model.input_names == ["pixels"]
    assert_matches_tf(model(pixels=photo), normalize_blur_oracle(photo))
    assert model.report()["kernels"] >= 1


def test_positional_outputs_are_named_in_order(photos):
    @tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.uint8, name="x")])
    def two(x):
        f = tf.cast(x, tf.float32)
        return f * 2.0, tf.reduce_max(f, axis=2)

    model = gdp.compile(two)
    assert model.output_names == ["output_0", "output_1"]
    got = model(photos[2])
    want = two(photos[2])
    assert_matches_tf(got, {"output_0": want[0], "output_1": want[1]})


# Defined outside the function, as TF's and Keras' docs write normalisation constants.
IMAGENET_MEAN = tf.constant([0.485, 0.456, 0.406])
IMAGENET_STD = tf.Variable([0.229, 0.224, 0.225])


@pytest.mark.parametrize("target", ["cpu", "reference"])
def test_captured_constants_and_variables_are_frozen_into_the_graph(photos, target):
    """A tf.constant and a tf.Variable captured from outside the function (before the fix the
    constant became a graph input: gdp.compile succeeded, every call failed naming 'sub/y:0'),
    and an adapted Keras Normalization layer: the model takes only the signature's input and
    gives TF's result."""
    image = (photos[1][:64, :96] / 255.0).astype(np.float32)
    norm = keras.layers.Normalization(axis=-1)
    norm.adapt(image[None])

    @tf.function(input_signature=[tf.TensorSpec([64, 96, 3], tf.float32, name="img")])
    def preprocess(img):
        return {"imagenet": (img - IMAGENET_MEAN) / IMAGENET_STD, "adapted": norm(img[None])[0]}

    model = gdp.compile(preprocess, target=target)
    assert model.input_names == ["img"]
    got, want = model(image), preprocess(image)
    for name in ("imagenet", "adapted"):
        np.testing.assert_allclose(got[name], want[name].numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("target", ["cpu", "reference"])
@pytest.mark.parametrize("shape", [(1080, 1920), (333, 500), (97, 131)])
@pytest.mark.parametrize("method", ["bilinear", "nearest"])
def test_resize_of_a_static_input_gives_the_size_asked(photos, target, shape, method):
    """tf.image.resize to (224, 224) on a static input: tf2onnx writes float scales, and ONNX
    took floor(1080 * 0.2074074) = 223 rows (the reference silently returned 223 rows, the cpu
    refused the shape). The size asked, and TF's values."""
    image = cv2_resize(photos[0], shape)

    @tf.function(input_signature=[tf.TensorSpec([*shape, 3], tf.float32, name="img")])
    def resize(img):
        return {"out": tf.image.resize(img[None], (224, 160), method=method)[0]}

    got, want = gdp.compile(resize, target=target)(image), resize(image)["out"].numpy()
    assert got.shape == want.shape == (224, 160, 3)
    # TF's bilinear weights and ONNX's differ in the last bits (as in samples/dnn_resize.py).
    np.testing.assert_allclose(got, want, rtol=0, atol=5e-4 if method == "bilinear" else 0)


@pytest.mark.parametrize("shape", [(20, 30), (276, 588), (333, 500)])
@pytest.mark.parametrize("channels", [1, 3])
def test_a_flip_after_a_resize_runs_as_tf(photos, shape, channels):
    """Resize then flip, an augmentation as TF's docs write it, on a static image. tf2onnx's
    shape inference took the resize's columns from its float32 scale (floor(30 * 0.69999999) =
    20 where 21 were asked) and baked that into the flip's constant shapes: the graph was
    invalid (TVM refused a Reshape of 105 values into 100), or kept a ReverseSequence that TVM
    cannot import. Both refused the program; now it runs as TF."""
    image = cv2_resize(photos[0], shape)[None, :, :, :channels]

    @tf.function(input_signature=[tf.TensorSpec([1, *shape, channels], tf.float32)])
    def augment(x):
        return tf.image.flip_up_down(tf.image.resize(x, [5, 21]))

    got, want = gdp.compile(augment)(image), augment(image).numpy()
    assert got.shape == want.shape == (1, 5, 21, channels)
    np.testing.assert_allclose(got, want, rtol=0, atol=5e-4)


@pytest.mark.parametrize("free", [False, True], ids=["static", "free"])
def test_a_returned_tensor_that_a_cond_reads_keeps_its_reader(photos, free):
    """A function returning an image and its rot90 (TF's rot90 branches on k in a tf.cond):
    the returned tensor is read inside the If's subgraph too. gdp renamed the outputs to
    output_0, output_1 in the main graph only, the subgraph kept reading "Identity:0", and
    the graph was refused as invalid."""
    image = cv2_resize(photos[0], (50, 70))[None]
    shape = [1, None, None, 3] if free else [1, 50, 70, 3]

    @tf.function(input_signature=[tf.TensorSpec(shape, tf.float32)])
    def centred_and_turned(x):
        y = x - tf.reduce_max(x, axis=[1, 2], keepdims=True)
        return y, tf.image.rot90(y) * 2.0

    model = gdp.compile(centred_and_turned)
    got, want = model(image), centred_and_turned(image)
    assert list(got) == ["output_0", "output_1"]
    for g, w in zip(got.values(), want, strict=True):
        np.testing.assert_array_equal(g, w.numpy())


def cv2_resize(photo: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """A real photo at `shape` (rows, columns), float32 in [0, 1]."""
    import cv2

    return (cv2.resize(photo, shape[::-1], interpolation=cv2.INTER_AREA) / 255.0).astype(np.float32)


def test_keras3_inputs_and_ops(photos):
    photo = photos[0].astype(np.float32)
    a = keras.Input(shape=photo.shape, batch_size=1, name="a", dtype="float32")
    b = keras.Input(shape=photo.shape, batch_size=1, name="b", dtype="float32")
    c = keras.ops.add(a, b) * 0.5
    d = keras.ops.sqrt(keras.ops.maximum(a - b, 0.0))
    model = gdp.compile([a, b], {"avg": c, "diff": d})
    assert model.input_names == ["a", "b"]
    assert model.output_names == ["avg", "diff"]
    other = np.flip(photo, axis=1).copy()
    want = keras.Model([a, b], {"avg": c, "diff": d})([photo[None], other[None]])
    assert_matches_tf(model(a=photo[None], b=other[None]), {k: v.numpy() for k, v in want.items()})


def test_keras3_output_names_from_layers():
    a = tf.keras.Input(shape=(2, 3), batch_size=1, name="a", dtype=tf.float32)
    b = tf.keras.Input(shape=(2, 3), batch_size=1, name="b", dtype=tf.float32)
    c = tf.keras.layers.Add(name="c")([a, b])
    model = gdp.compile([a, b], [c])
    assert model.output_names == ["c"]


def test_thesis_listing_runs_under_legacy_keras():
    """samples/hello.py: raw tf.add on tf.keras.Input, as the thesis wrote it."""
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1")
    out = subprocess.run(
        [sys.executable, str(ROOT / "samples" / "hello.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "[[2. 2. 2.]\n [2. 2. 2.]]" in out.stdout
    assert "kernel:" in out.stdout  # the profile printed per-kernel device times


@pytest.mark.parametrize("as_path", [True, False])
def test_onnx_file_and_model_proto(photos, tmp_path, as_path):
    photo = photos[0]
    proto, _ = tf2onnx.convert.from_function(
        NORMALIZE_BLUR, input_signature=NORMALIZE_BLUR.input_signature, opset=15
    )
    path = tmp_path / "pipeline.onnx"
    onnx.save(proto, path)
    model = gdp.compile(str(path) if as_path else proto)
    assert_matches_tf(model(image=photo), normalize_blur_oracle(photo))
    # The caller's proto is never modified.
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param


def test_saved_model_loads_without_recompiling(photos, tmp_path):
    model = gdp.compile(NORMALIZE_BLUR)
    photo = photos[2]
    first = model(photo)
    model.save(tmp_path / "m.onnx")
    loaded = gdp.load(tmp_path / "m.onnx")
    assert loaded.target.name == "cpu"
    assert_matches_tf(loaded(photo), normalize_blur_oracle(photo))
    assert loaded.report()["cache"] == "memory"
    np.testing.assert_array_equal(loaded(photo)["chw"], first["chw"])


def _integer_division_model(divisor_from_shape: bool) -> onnx.ModelProto:
    """a // b in int64 (ONNX's Div truncates): b a second input, or a's run-time length."""
    h = onnx.helper
    a = h.make_tensor_value_info("a", onnx.TensorProto.INT64, ["n"])
    out = h.make_tensor_value_info("q", onnx.TensorProto.INT64, ["n"])
    if divisor_from_shape:
        nodes = [h.make_node("Shape", ["a"], ["b"]), h.make_node("Div", ["a", "b"], ["q"])]
        inputs = [a]
    else:
        nodes = [h.make_node("Div", ["a", "b"], ["q"])]
        inputs = [a, h.make_tensor_value_info("b", onnx.TensorProto.INT64, ["n"])]
    graph = h.make_graph(nodes, "divide", inputs, [out])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def test_integer_division_by_a_run_time_divisor_is_refused_not_a_crash():
    """onnxruntime raises on an integer division by zero; TVM's compiled divide traps, and
    the process died of SIGFPE. The cpu refuses a divisor known only at run time."""
    from tests.oracle import run_onnxruntime

    model = _integer_division_model(divisor_from_shape=False)
    a, b = np.array([7, -7, 3, 4], np.int64), np.array([2, 0, 1, 1], np.int64)
    with pytest.raises(Exception, match="Integer division by zero"):
        run_onnxruntime(model, {"a": a, "b": b})
    with pytest.raises(gdp.UnsupportedOpError, match="run time") as info:
        gdp.compile(model, target="cpu")(a, b)
    assert info.value.op == "Div"


def test_integer_division_by_a_free_extent_compiles_per_shape():
    """A divisor read from a free input extent is a constant once the graph is specialised to
    a shape: the generic compile refuses it, each shape compiles, onnxruntime's values."""
    from tests.oracle import run_onnxruntime

    model = _integer_division_model(divisor_from_shape=True)
    compiled = gdp.compile(model, target="cpu")
    for n in (3, 5):
        a = np.arange(-7, -7 + 4 * n, 4, dtype=np.int64)
        np.testing.assert_array_equal(compiled(a), run_onnxruntime(model, {"a": a})[0])
    assert "run time" in (compiled.generic_error or "")
