"""Verify-on-compile (issue 18, "no silent wrong answer"): gdp.compile of a TF program runs
TensorFlow and gdp on probe inputs; a disagreement is a VerificationError naming the output and
the first TF op whose output disagrees. TensorFlow is the oracle throughout.

The cost, measured on the 49 tests of tests/gdp/frontend + tests/gdp/test_errors.py +
test_iterate.py (24 verified compiles): 1.8-2.9 s of verification in 50-70 s, most of it the
four 1080p static resizes (0.2-0.3 s each: TF, onnxruntime and the compiled model each run on a
full 1080p probe); a small program costs 5-40 ms."""

import os

import keras
import numpy as np
import onnx
import onnx.numpy_helper
import pytest
import tensorflow as tf

import gdp
import gdp.api
from gdp.frontend.verify import compare
from gdp.rewrites import pipeline
from gdp.runtime.backends.onnxruntime import OnnxRuntimeExecutable

HERE = os.path.basename(__file__)


def _cache_entries() -> set[str]:
    root = os.environ["GDP_CACHE_DIR"]
    return set(os.listdir(root)) if os.path.isdir(root) else set()


# -- a real wrong conversion ------------------------------------------------------------------


@tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="q")])
def floor_thirds(q):
    """Floor division of negative integers, converted by tf2onnx's own FloorDiv (the
    `tf2onnx_floordiv` fixture): it writes ONNX Div, which truncates toward zero (-1 // 3 is
    -1 in TF, 0 in the converted graph)."""
    return {"third": tf.math.floordiv(q - 5, 3)}


@pytest.fixture
def tf2onnx_floordiv(monkeypatch):
    """A real wrong conversion to verify: gdp lowers FloorDiv itself (tf_lowerings), so these
    tests take gdp's lowering out and let tf2onnx's truncating one convert it, as before."""
    from gdp.frontend import tf_lowerings

    lowerings = {k: v for k, v in tf_lowerings.LOWERINGS.items() if k != "FloorDiv"}
    monkeypatch.setattr(tf_lowerings, "LOWERINGS", lowerings)


@pytest.mark.usefixtures("tf2onnx_floordiv")
def test_a_wrong_conversion_is_an_error_naming_the_tf_op(monkeypatch, tmp_path):
    # A cache of its own: the run's is shared with other test processes, which may add to it.
    monkeypatch.setenv("GDP_CACHE_DIR", str(tmp_path))
    before = _cache_entries()
    with pytest.raises(gdp.VerificationError) as info:
        gdp.compile(floor_thirds, target="cpu")
    err = info.value
    assert isinstance(err, gdp.FrontendError)
    assert (err.stage, err.output, err.op_type) == ("conversion", "third", "FloorDiv")
    assert err.op_name == "floordiv"
    assert err.max_error == 1 and "exact" in err.tolerance
    text = str(err)
    assert "'third'" in text and "FloorDiv 'floordiv'" in text and "verify=False" in text
    assert f"{HERE}:" in text  # the user's source line of the op
    assert "[37, 53]" in text  # the probe's shape: free dimensions took a probe size
    # Nothing was compiled for a conversion that fails verification.
    assert _cache_entries() == before


@pytest.mark.usefixtures("tf2onnx_floordiv")
def test_verify_false_skips_the_check():
    model = gdp.compile(floor_thirds, target="reference", verify=False)
    assert model.report()["verify"] is None
    assert model.report()["verify_s"] == 0.0
    q = np.arange(12, dtype=np.int32).reshape(3, 4)
    # What verification exists for: unchecked, the converted graph's answer differs from TF's.
    assert not np.array_equal(model(q), floor_thirds(q)["third"].numpy())


@pytest.mark.usefixtures("tf2onnx_floordiv")
def test_sample_is_a_probe():
    """floor(q / 3) is right for q >= 0, which the random integer probe (0..9) holds; the
    caller's sample holds negative numbers and shows the wrong conversion."""

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="q")])
    def thirds(q):
        return tf.math.floordiv(q, 3)

    passed = gdp.compile(thirds, target="reference")
    assert [p["name"] for p in passed.report()["verify"]["probes"]] == ["random"]
    fine = np.arange(0, 30, dtype=np.int32).reshape(5, 6)
    model = gdp.compile(thirds, target="reference", sample=fine)
    probes = model.report()["verify"]["probes"]
    assert probes[1] == {"name": "sample", "shapes": {"q": [5, 6]}}
    negative = np.arange(-15, 15, dtype=np.int32).reshape(5, 6)
    with pytest.raises(gdp.VerificationError, match=r"on the sample probe \(q \[5, 6\]\)") as info:
        gdp.compile(thirds, target="reference", sample={"q": negative})
    assert info.value.op_type == "FloorDiv"
    with pytest.raises(gdp.InputError, match=r"sample: input 'q': expected dtype int32"):
        gdp.compile(thirds, target="reference", sample=negative.astype(np.float32))


# -- the op that first disagrees ------------------------------------------------------------


@tf.function(input_signature=[tf.TensorSpec([24, 32, 3], tf.float32, name="img")])
def chain(img):
    a = img * 3.0
    b = tf.sqrt(a + 1.0)
    return {"out": b - 0.25, "peak": tf.reduce_max(a, axis=-1), "total": tf.reduce_sum(b)}


def _corrupting(monkeypatch, node_name: str):
    """gdp.compile's front end, with the constant input of ONNX node `node_name` off by 1%."""
    real = gdp.api.convert

    def convert(*args, **kwargs):
        graph, source = real(*args, **kwargs)
        node = next(n for n in graph.graph.node if n.name == node_name)
        inits = {t.name: t for t in graph.graph.initializer}
        const = next(inits[i] for i in node.input if i in inits)
        value = onnx.numpy_helper.to_array(const) * np.float32(1.01)
        const.CopyFrom(onnx.numpy_helper.from_array(value.astype(np.float32), const.name))
        return graph, source

    monkeypatch.setattr(gdp.api, "convert", convert)


@pytest.mark.parametrize("node, op_type", [("mul", "Mul"), ("add", "AddV2")])
def test_a_corrupted_conversion_names_the_op_whose_output_first_disagrees(
    monkeypatch, node, op_type
):
    _corrupting(monkeypatch, node)
    with pytest.raises(gdp.VerificationError) as info:
        gdp.compile(chain, target="reference")
    err = info.value
    assert (err.op_type, err.op_name) == (op_type, node)
    # The mul feeds both outputs; the add only "out".
    assert err.output == ("out" if node == "add" else err.output)
    assert err.max_error > 1e-3
    assert f"{op_type} {node!r}" in str(err)


def test_an_op_with_no_onnx_counterpart_is_named_from_its_neighbours(monkeypatch):
    """tf2onnx writes tf.image.rgb_to_grayscale as nodes of other names; its output has no ONNX
    tensor to compare. A wrong grayscale weight is still blamed on the TF op it came from."""

    @tf.function(input_signature=[tf.TensorSpec([20, 30, 3], tf.float32, name="img")])
    def gray(img):
        return tf.image.rgb_to_grayscale(img) * 2.0

    real = gdp.api.convert

    def convert(*args, **kwargs):
        graph, source = real(*args, **kwargs)
        for init in graph.graph.initializer:
            value = onnx.numpy_helper.to_array(init)
            if value.dtype == np.float32 and value.size == 3:  # the RGB weights
                init.CopyFrom(onnx.numpy_helper.from_array(value[::-1].copy(), init.name))
        return graph, source

    monkeypatch.setattr(gdp.api, "convert", convert)
    with pytest.raises(gdp.VerificationError) as info:
        gdp.compile(gray, target="reference")
    assert "rgb_to_grayscale" in info.value.op_name


# -- the compiled model ---------------------------------------------------------------------


def test_a_backend_that_disagrees_is_blamed(monkeypatch):
    real = OnnxRuntimeExecutable.run

    def run(self, inputs, profile=None):
        return [o + np.float32(0.01) if o.dtype == np.float32 else o for o in real(self, inputs)]

    monkeypatch.setattr(OnnxRuntimeExecutable, "run", run)
    with pytest.raises(
        gdp.VerificationError, match="the backend 'onnxruntime' is at fault"
    ) as info:
        gdp.compile(chain, target="reference")
    assert info.value.stage == "compiled"


def test_a_rewrite_that_disagrees_is_blamed(monkeypatch):
    real = pipeline.prepare

    def prepare(graph, **kwargs):
        prepared = real(graph, **kwargs)
        for init in prepared.graph.graph.initializer:
            value = onnx.numpy_helper.to_array(init)
            if value.dtype == np.float32 and value.size == 1 and value.item() == 3.0:
                init.CopyFrom(onnx.numpy_helper.from_array(value * np.float32(2), init.name))
        return prepared

    monkeypatch.setattr(pipeline, "prepare", prepare)
    with pytest.raises(gdp.VerificationError, match="a rewrite is at fault") as info:
        gdp.compile(chain, target="reference")
    assert info.value.stage == "compiled"


# -- programs that are right ----------------------------------------------------------------


@pytest.mark.parametrize("target", ["cpu", "reference"])
def test_a_correct_program_passes_and_reports_the_cost(target):
    model = gdp.compile(chain, target=target)
    report = model.report()
    assert report["verify_s"] > 0
    verify = report["verify"]
    assert verify["stages"] == {"conversion": "onnxruntime", "compiled": target}
    assert verify["probes"] == [{"name": "random", "shapes": {"img": [24, 32, 3]}}]
    assert set(verify["max_error"]) == {"out", "peak", "total"}  # total: a 0-d output
    errors = verify["max_error"]
    assert errors["out"] < 1e-5 and errors["peak"] < 1e-5
    assert errors["total"] < 1e-6 * 24 * 32 * 3 * 2.0  # a float32 sum of ~4600 terms near 2
    x = np.random.default_rng(1).random((24, 32, 3), dtype=np.float32)
    np.testing.assert_allclose(model(x)["out"], chain(x)["out"].numpy(), rtol=1e-6, atol=1e-6)


def test_keras_inputs_are_verified():
    image = keras.Input(shape=(16, 20, 3), batch_size=1, name="image", dtype="float32")
    scaled = keras.layers.Rescaling(1 / 127.5, offset=-1)(image)
    model = gdp.compile([image], {"scaled": scaled}, target="reference")
    verify = model.report()["verify"]
    assert verify["probes"][0]["shapes"] == {"image": [1, 16, 20, 3]}
    assert verify["max_error"]["scaled"] < 1e-6


def test_free_dimensions_are_verified_at_a_probe_size():
    @tf.function(input_signature=[tf.TensorSpec([None, None, None, 3], tf.uint8, name="batch")])
    def flip_scale(batch):
        return tf.image.flip_left_right(tf.cast(batch, tf.float32) / 255.0)

    model = gdp.compile(flip_scale, target="cpu")
    verify = model.report()["verify"]
    assert verify["probes"][0]["shapes"] == {"batch": [2, 37, 53, 3]}
    assert verify["stages"]["conversion"] == "onnxruntime"
    assert verify["stages"]["compiled"].startswith("skipped: free dimensions")


def test_a_probe_tf_refuses_is_retried_larger():
    @tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.float32, name="img")])
    def crop(img):
        return tf.image.crop_to_bounding_box(img, 10, 20, 100, 120)

    model = gdp.compile(crop, target="reference")
    assert model.report()["verify"]["probes"][0]["shapes"] == {"img": [257, 385, 3]}


def test_a_program_tf_refuses_at_every_probe_size_warns_and_says_so():
    @tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.float32, name="img")])
    def big_crop(img):
        return tf.image.crop_to_bounding_box(img, 0, 0, 300, 10)

    with pytest.warns(RuntimeWarning, match="could not verify tf.function 'big_crop'"):
        model = gdp.compile(big_crop, target="reference")
    verify = model.report()["verify"]
    assert verify["probes"] == []
    assert "TensorFlow refused every probe" in verify["skipped"]["*"]


@pytest.mark.parametrize(
    "program",
    [
        # float32 source coordinates over 1920 columns: onnxruntime and TF differ by 1.5e-4
        lambda x: tf.image.resize(tf.cast(x, tf.float32) / 255.0, (224, 224)),
        # a 1080p mean's float32 drift moves one uint8 value of 256 across a rounding edge
        lambda x: tf.image.adjust_contrast(tf.image.adjust_brightness(x, 0.05), 1.2),
        # an inference server's input: normalised, then cast to float16 at the end, where a
        # float32 value that differs in its last bits may round to the neighbouring half
        lambda x: tf.cast(
            (tf.image.resize(tf.cast(x, tf.float32), (224, 224)) / 255.0 - 0.45) / 0.225,
            tf.float16,
        ),
    ],
    ids=["bilinear_downscale", "uint8_contrast", "normalised_float16"],
)
def test_float32_rounding_at_1080p_is_not_a_disagreement(program):
    spec = [tf.TensorSpec([1080, 1920, 3], tf.uint8, name="image")]
    model = gdp.compile(tf.function(program, input_signature=spec), target="reference")
    assert model.report()["verify"]["stages"]["conversion"] == "onnxruntime"


def test_outputs_of_random_ops_are_not_compared():
    @tf.function(input_signature=[tf.TensorSpec([8, 8], tf.float32, name="x")])
    def noisy(x):
        return {"noisy": x + tf.random.uniform([8, 8]), "clean": x * 2.0}

    verify = gdp.compile(noisy, target="reference").report()["verify"]
    assert verify["skipped"] == {"noisy": "depends on a random op"}
    assert set(verify["max_error"]) == {"clean"}


def test_onnx_sources_are_not_verified():
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Neg", ["x"], ["y"])],
        "neg",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])],
    )
    proto = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    proto.ir_version = 10
    assert gdp.compile(proto, target="reference").report()["verify"] is None


def test_verify_must_be_a_bool():
    with pytest.raises(gdp.TargetError, match="verify: expected True or False"):
        gdp.compile(chain, target="reference", verify="yes")


# -- tolerances -----------------------------------------------------------------------------


def test_tolerances_per_dtype():
    rng = np.random.default_rng(0)
    w = rng.random(10_000, dtype=np.float32) * 100
    assert compare("f", w, w + w * 5e-5) is None  # within rtol 1e-4
    assert compare("f", w, w + np.float32(0.009)) is None  # atol: 1e-4 of the range of 100
    assert compare("f", w, w + np.float32(0.05)).bad == w.size
    with_nan = w.copy()
    with_nan[3] = np.nan
    assert compare("f", with_nan, with_nan) is None  # NaN where TF has NaN is equal
    assert compare("f", w, with_nan).bad == 1  # NaN where TF is finite is not
    assert compare("f", with_nan, w).bad == 1
    # A 1080p sum drifts in TF's float32: looser where the output depends on one.
    assert compare("f", w, w * np.float32(1 + 1e-3)) is not None
    assert compare("f", w, w * np.float32(1 + 1e-3), terms=1920 * 1080 * 3) is None
    # A resize's float32 coordinates over 1920 columns: 4.6e-4 of the range more.
    assert compare("f", w, w + np.float32(0.04)) is not None
    assert compare("f", w, w + np.float32(0.04), extent=1920) is None
    assert compare("f", w, w + np.float32(0.08), extent=1920) is not None
    # A float16 output (a cast at the end of a float32 program): one unit in its last place.
    h = np.linspace(1.0, 2.5, 1001).astype(np.float16)
    assert compare("h", h, np.nextafter(h, np.float16(np.inf))) is None
    assert compare("h", h, np.nextafter(np.nextafter(h, np.float16(9)), np.float16(9))) is not None
    # fp16: 1% of the range, never non-finite where TF is finite.
    assert compare("f", w, w + np.float32(0.9), fp16=True) is None
    assert compare("f", w, w + np.float32(1.1), fp16=True) is not None
    assert compare("f", w, np.where(w > 99.9, np.inf, w), fp16=True) is not None

    q = rng.integers(0, 256, 10_000).astype(np.uint8)
    nudged = q.copy()
    nudged[:10] ^= 1  # ten elements (0.1%) off by one: a rounding at .5
    assert compare("u", q, nudged) is None
    nudged[:11] = q[:11] ^ 1
    assert compare("u", q, nudged).bad == 11
    far = q.copy()
    far[0] = q[0] + 2 if q[0] < 254 else q[0] - 2
    assert compare("u", q, far).max_error == 2
    assert compare("u", q, nudged, terms=1000) is None  # downstream of a sum: 1%
    nudged[:101] = q[:101] ^ 1
    assert compare("u", q, nudged, terms=1000).bad == 101
    assert compare("u", q, q.astype(np.int32)).max_error == np.inf  # dtype differs
    assert compare("u", q, q[:-1]).max_error == np.inf  # shape differs

    b = rng.random(10_000) < 0.5
    flipped = b.copy()
    flipped[:10] = ~flipped[:10]
    assert compare("b", b, flipped) is None
    flipped[:50] = ~b[:50]
    assert compare("b", b, flipped) is not None
    assert compare("b", b, flipped, fp16=True) is None
