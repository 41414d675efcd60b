"""Automatic FP16: every workload compiled in fp16 on the cpu (TVM computes fp16 for real there)
against its fp32 OpenCV/NumPy peer, on adversarial 1080p images and a real photo: no inf or
NaN, errors within GDPNPU's table 5-4; naive fp16 (no scaling) overflows where gdp's does not;
range errors are refused, never run with a wrong scale."""

from __future__ import annotations

import importlib
import sys

import numpy as np
import onnx
import pytest

import gdp
from gdp.errors import InputError, TargetError, UnsupportedOpError
from gdp.ops import precision as P
from gdp.rewrites.fp16 import to_fp16
from tests import SAMPLES

sys.path.insert(0, str(SAMPLES))
import workload

# GDPNPU's table 5-4: relative error of fp16 against fp32, per workload (canny and knn: the
# same edges and the same neighbour). gdp measures sum|fp16 - fp32| / sum|fp32| per output.
# knn's distance is an output too: gdp holds it to 1e-4 (the neighbour itself is identical).
THESIS_BOUND = {"tone": 2e-4, "gaussian": 6e-4, "sharpness": 1.8e-3, "mean_std": 8e-4, "knn": 1e-4}
# The bound gdp holds per arithmetic: fp32 arithmetic (cpu, gpu) meets the thesis's; with fp16
# arithmetic (the npu's) every op of tone's rational function rounds, ~0.05% in all (see
# docs/precision.md).
GDP_BOUND = {"fp32": THESIS_BOUND, "fp16": {**THESIS_BOUND, "tone": 6e-4}}


def adversarial(shape, dtype, value_max) -> dict[str, np.ndarray]:
    """GDPNPU's hard cases: saturated, empty, a checkerboard (the largest gradients everywhere)
    and one bright pixel on black."""
    checker = (np.indices(shape).sum(axis=0) % 2 * value_max).astype(dtype)
    bright = np.zeros(shape, dtype)
    bright[tuple(d // 2 for d in shape)] = value_max
    return {
        "all max": np.full(shape, value_max, dtype),
        "all zero": np.zeros(shape, dtype),
        "checkerboard": checker,
        "one bright pixel": bright,
    }


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    scale = np.abs(want).sum()
    return float(np.abs(got - want).sum() / scale) if scale else float(np.abs(got).sum())


@pytest.mark.parametrize(
    ("name", "arithmetic"),
    [
        (name, arithmetic)
        if (name, arithmetic) != ("mean_std", "fp32")
        # 28 s of compiling on 2 cores; mean_std's fp16 arithmetic stays in the default run
        else pytest.param(name, arithmetic, marks=pytest.mark.slow)
        for name in ["tone", "gaussian", "sharpness", "mean_std", "knn"]
        for arithmetic in ["fp32", "fp16"]
    ],
)
def test_workloads_in_fp16_stay_finite_and_within_the_thesis_errors(name, arithmetic):
    module = importlib.import_module(name)
    fp16 = gdp.compile(module.program, target="cpu", precision="fp16", fp16_arithmetic=arithmetic)
    photo = module.inputs()
    cases = {"photo": photo}
    image_input = next(iter(photo))
    if name != "knn":  # images: the adversarial set at 1080p
        x = photo[image_input]
        top = 255 if x.dtype == np.uint8 else 1.0
        for label, image in adversarial(x.shape, x.dtype, top).items():
            cases[label] = {**photo, image_input: image}
    for label, inputs in cases.items():
        want = module.peer(**inputs)  # fp32 in OpenCV / NumPy
        got = fp16.submit(inputs, wait=True).result()
        for key in want:
            assert np.isfinite(np.asarray(got[key], np.float64)).all(), (label, key)
            if label == "photo":
                error = relative_error(got[key], want[key])
                assert error <= GDP_BOUND[arithmetic][name], (key, error)
            else:  # flat and extreme images: the fp32 answer within fp16's rounding
                # (sharpness: its Laplacian differences grey values of ~150 that are stored
                # in fp16, rounded by up to 2^-11 * 150 each, and squares them: up to ~0.6%.)
                rtol = 6e-3 if name == "sharpness" else 2e-3
                np.testing.assert_allclose(got[key], want[key], rtol=rtol, atol=2e-3 * top)
    assert fp16.report()["precision"] == "fp16"
    assert fp16.report()["fp16"]["arithmetic"] == arithmetic


def test_fp32_arithmetic_rounds_only_stored_values():
    """(x * 3 + 1) * x with fp32 arithmetic: the chain computes in fp32 and only the output is
    rounded to fp16, so the result is the fp32 answer rounded once; with fp16 arithmetic each op
    rounds. Constants keep their exact values (not 3 rounded to fp16's 11 bits)."""
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("Mul", ["x", "k"], ["a"]),
        helper.make_node("Add", ["a", "one"], ["b"]),
        helper.make_node("Mul", ["b", "x"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4096])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4096])],
        initializer=[
            numpy_helper.from_array(np.array(0.1, np.float32), "k"),
            numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(0).uniform(0.01, 1, 4096).astype(np.float32)
    want = (x.astype(np.float64) * 0.1 + 1) * x  # NumPy, in float64
    errors = {}
    for arithmetic in ("fp32", "fp16"):
        half, report = to_fp16(model, {"x": (0.0, 1.0)}, arithmetic=arithmetic)
        assert report["arithmetic"] == arithmetic
        got = gdp.compile(half, target="cpu")(x)  # TVM rounds fp16 for real (onnxruntime not)
        errors[arithmetic] = float(np.max(np.abs(got - want) / want))
        if arithmetic == "fp32":
            # The fp32 input is read as it is, the chain runs in fp32, and the result is
            # rounded to fp16 once (stored) and cast back: the casts are the output's two.
            casts = [n for n in half.graph.node if n.op_type == "Cast"]
            assert len(casts) == 2, [n.name for n in casts]
    assert errors["fp32"] <= 2.0**-11 * 1.001  # one rounding to fp16: half an ulp at most
    assert errors["fp16"] > 2.0**-11  # rounded after every op (and 0.1 rounded to fp16)


def test_naive_fp16_overflows_where_scaling_does_not():
    """sharpness squares Laplacians of 0..255 images (up to 4 million): plain fp16 gives inf."""
    module = importlib.import_module("sharpness")
    from gdp.frontend import to_onnx
    from gdp.rewrites import specialize_shapes

    graph = specialize_shapes(to_onnx(module.program), {"rgb": (1080, 1920, 3)})
    checker = adversarial((1080, 1920, 3), np.uint8, 255)["checkerboard"]
    outputs = {}
    for scaling in (True, False):
        half, report = to_fp16(graph, scaling=scaling)
        assert report["scaling"] is scaling
        outputs[scaling] = gdp.compile(half, target="cpu")(checker)
    want = module.peer(checker)["sharpness"]
    assert not np.isfinite(outputs[False]).all()
    np.testing.assert_allclose(outputs[True], want, rtol=2e-3)


def test_scales_are_powers_of_two_restored_in_fp32():
    """x * x + x with x up to 1000: the product passes fp16's bound, so gdp scales it by a power
    of two and the output comes back in fp32 to the exact fp32 answer's precision."""
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Mul", ["x", "x"], ["sq"]),
        helper.make_node("Add", ["sq", "x"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    half, report = to_fp16(model, {"x": (-1000.0, 1000.0)})
    exponent = int(report["output_scales"]["y"].split("^")[1])
    assert exponent < 0  # scaled down
    x = np.linspace(-1000, 1000, 64, dtype=np.float32)
    got = gdp.compile(half, target="cpu")(x)
    np.testing.assert_allclose(got, x * x + x, rtol=2e-3)
    naive, _ = to_fp16(model, {"x": (-1000.0, 1000.0)}, scaling=False)
    assert not np.isfinite(gdp.compile(naive, target="cpu")(x)).all()


def test_every_workload_op_has_precision_facts():
    for name in workload.WORKLOADS:
        module = importlib.import_module(name)
        models = workload.build(module, "reference").models
        for model in models:
            for node in model.source_onnx.graph.node:
                if node.op_type == "Constant":
                    continue
                assert node.op_type in P.PRECISION_CLASS, (name, node.op_type)
                assert node.op_type in P.RANGE_TRANSFER, (name, node.op_type)


def test_an_op_without_facts_is_refused_by_name():
    from onnx import TensorProto, helper

    node = helper.make_node("Celu", ["x"], ["y"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedOpError, match="Celu"):
        to_fp16(model, {"x": (0.0, 1.0)})
    onnx.checker.check_model(model)


def test_ranges_are_checked_and_bad_options_refused():
    module = importlib.import_module("tone")
    photo = module.inputs()
    declared = gdp.compile(
        module.program, target="cpu", precision="fp16", input_ranges={"rgb": (0.0, 1.0)}
    )
    declared(photo)  # inside the declared range
    with pytest.raises(InputError, match="declared input_ranges"):
        declared({"rgb": photo["rgb"] * 2})
    nan = photo["rgb"].copy()
    nan[0, 0, 0] = np.nan
    measured = gdp.compile(module.program, target="cpu", precision="fp16")
    with pytest.raises(InputError, match="NaN"):
        measured({"rgb": nan})
    # A wider measured range compiles another model with smaller scales, and stays right.
    wide = {"rgb": photo["rgb"] * 300.0}
    got = measured(wide)
    want = module.peer(**wide)["mapped"]
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=3e-3, atol=1e-3)
    with pytest.raises(TargetError, match="precision"):
        gdp.compile(module.program, target="cpu", precision="fp8")
    with pytest.raises(InputError, match="input_ranges"):
        gdp.compile(module.program, target="cpu", input_ranges={"nope": (0, 1)})
    assert gdp.compile(module.program, target="cpu").report()["precision"] == "fp32"


def test_canny_in_fp16_gives_identical_edges():
    """Canny's integer arithmetic (written in float by tf2onnx) stays exact: values past 2^11
    are kept in fp32, so the edge maps are OpenCV's, as in fp32."""
    module = importlib.import_module("canny")
    fp32 = workload.build(module, "cpu", precision="fp32")
    fp16 = workload.build(module, "cpu", precision="fp16")
    photo = module.inputs()
    checker = adversarial(photo["rgb"].shape, np.uint8, 255)["checkerboard"]
    for inputs in (photo, {"rgb": checker}):
        want = module.peer(**inputs)["edges"]  # cv2.Canny
        np.testing.assert_array_equal(fp16(inputs)["edges"], want)
        np.testing.assert_array_equal(fp32(inputs)["edges"], want)
    assert any("exact integers" in op for op in fp16.models[0].report()["fp16"]["fp32_ops"])


@pytest.mark.slow
def test_image_gradients_in_fp16_stay_finite_and_within_the_inputs_own_rounding():
    """Issue 18: tf.image.image_gradients of a 480x640 RGB float image, compiled in fp16 on the
    cpu, returned NaN. Not reproduced here (at aafe207 or now; static or free shapes; declared,
    measured, 0..1 and 0..255 ranges; 2 and 8 TVM threads): its fp16 graph (slices, a
    subtraction, a concat with zeros, all scales 1) has no op that makes a NaN from finite
    inputs, so the NaN was unwritten memory read as fp16, the row-strip race the same program
    showed in fp32 (tests/runtime/backends/tvm/test_strip_boundaries.py). Held to TF here on
    both targets over repeated runs: finite, and no further from TF than TF's own result on the
    input rounded to fp16, plus the output's rounding (a smooth photo's gradients are small:
    the input's rounding alone is 0.5% of them, above table 5-4's 0.18% for derivatives, which
    the thesis measured on uint8 input)."""
    import cv2
    import skimage.data
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([480, 640, 3], tf.float32, name="img")])
    def gradients(img):
        dy, dx = tf.image.image_gradients(img[None])
        return {"dy": dy, "dx": dx}

    photo = cv2.resize(skimage.data.astronaut(), (640, 480), interpolation=cv2.INTER_AREA)
    rng = np.random.default_rng(3)
    images = {
        "photo 0..1": photo.astype(np.float32) / 255,
        "random 0..255": (rng.random((480, 640, 3)) * 255).astype(np.float32),
        **adversarial((480, 640, 3), np.float32, 1.0),
    }
    models = [gdp.compile(gradients, target=t, precision="fp16") for t in ("cpu", "reference")]
    for label, image in images.items():
        want = {k: v.numpy() for k, v in gradients(image).items()}
        rounded = image.astype(np.float16).astype(np.float32)
        floor = {k: relative_error(v.numpy(), want[k]) for k, v in gradients(rounded).items()}
        for model in models:
            for _ in range(3):
                got = model(image)
                for key in want:
                    assert np.isfinite(got[key]).all(), (label, key)
                    error = relative_error(got[key], want[key])
                    # the input's rounding, and the output's (stored in fp16): 2^-12 at most
                    assert error <= floor[key] + 2.0**-12, (label, key, error, floor[key])
