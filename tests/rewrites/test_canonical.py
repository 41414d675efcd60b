"""Each rewrite against the original graph, both run by onnxruntime on random and real images."""

import numpy as np
import onnx
import pytest
import tf2onnx

from gdp.rewrites import REWRITES, apply_rewrites, canonical_names, specialize_shapes
from tests.oracle import run_onnxruntime
from tests.pipelines import NORMALIZE_BLUR


@pytest.fixture(scope="module")
def resize_graph():
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.uint8, name="image")])
    def resize(image):
        x = tf.cast(image, tf.float32)
        return {"small": tf.image.resize(x[None], (97, 131))[0]}

    proto, _ = tf2onnx.convert.from_function(
        resize, input_signature=resize.input_signature, opset=17
    )
    return proto


def test_omit_empty_resize_inputs_keeps_the_result(resize_graph, photos):
    rewritten, count = REWRITES["omit_empty_resize_inputs"].fn(resize_graph)
    assert count == 2  # roi and scales
    resize = next(n for n in rewritten.graph.node if n.op_type == "Resize")
    assert list(resize.input[1:3]) == ["", ""]
    rng = np.random.default_rng(0)
    for image in [*photos, rng.integers(0, 256, (64, 80, 3), dtype=np.uint8)]:
        want = run_onnxruntime(resize_graph, {"image": image})
        got = run_onnxruntime(rewritten, {"image": image})
        np.testing.assert_array_equal(got[0], want[0])


def test_specialize_shapes_folds_shape_arithmetic(photos):
    proto, _ = tf2onnx.convert.from_function(
        NORMALIZE_BLUR, input_signature=NORMALIZE_BLUR.input_signature, opset=17
    )
    photo = photos[1]
    static = specialize_shapes(proto, {"image": photo.shape})
    dims = [d.dim_value for d in static.graph.output[0].type.tensor_type.shape.dim]
    assert dims == [3, *photo.shape[:2]]
    assert not any(n.op_type == "Shape" for n in static.graph.node)
    for a, b in zip(
        run_onnxruntime(proto, {"image": photo}),
        run_onnxruntime(static, {"image": photo}),
        strict=True,
    ):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)


@pytest.mark.parametrize("border", ["CONSTANT", "REFLECT_101"])
def test_specialize_shapes_folds_a_stacked_morphologys_positions(border, photos):
    """A stacked morphology (gdp.cv2.morphologyEx) pads its first stage's result by gathers at
    positions counted from the data (TVM's importer takes no arithmetic on a run-time shape):
    with the shapes fixed, the count folds away (no CumSum left: on the gpu target it was one
    thread's scan along each axis), and the graph computes what it did, NaN-free test or not."""
    import tensorflow as tf

    import gdp.cv2 as cv2

    kernel = np.ones((5, 5), np.uint8)
    border_type = getattr(cv2, f"BORDER_{border}")

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.uint8, name="image")])
    def opening(image):
        return {"opened": cv2.morphologyEx(image, cv2.MORPH_OPEN, kernel, borderType=border_type)}

    proto, _ = tf2onnx.convert.from_function(
        opening, input_signature=opening.input_signature, opset=17
    )
    # onnxruntime takes a uint8 Pad only in its integer form (what every backend requires)
    proto, _ = apply_rewrites(proto, ["pad_in_integer_type"], None)
    assert any(n.op_type == "CumSum" for n in proto.graph.node)
    gray = photos[0][:120, :160, 1].copy()
    static = specialize_shapes(proto, {"image": gray.shape})
    assert not any(n.op_type in ("CumSum", "And") for n in static.graph.node)
    want = run_onnxruntime(proto, {"image": gray})
    got = run_onnxruntime(static, {"image": gray})
    np.testing.assert_array_equal(got[0], want[0])


def test_apply_rewrites_reports_only_what_changed(resize_graph):
    _, applied = apply_rewrites(resize_graph, ["omit_empty_resize_inputs"])
    assert applied == [{"rule": "omit_empty_resize_inputs", "applied": True, "count": 2}]
    again, applied = apply_rewrites(_, ["omit_empty_resize_inputs"])
    assert applied == []


def test_canonical_names_make_two_conversions_identical(photos):
    def convert():
        proto, _ = tf2onnx.convert.from_function(
            NORMALIZE_BLUR, input_signature=NORMALIZE_BLUR.input_signature, opset=17
        )
        return specialize_shapes(proto, {"image": photos[0].shape})

    first, second = convert(), convert()
    assert first.SerializeToString() != second.SerializeToString()  # tf2onnx's fresh names
    a, b = canonical_names(first), canonical_names(second)
    assert a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)
    for x, y in zip(
        run_onnxruntime(first, {"image": photos[0]}),
        run_onnxruntime(a, {"image": photos[0]}),
        strict=True,
    ):
        np.testing.assert_array_equal(x, y)


def test_canonical_names_ignore_the_node_order(photos):
    """tf2onnx may emit the same graph in another topological order in another process (Canny's
    prepare step does): every valid order gives the same canonical bytes, so the same cache key."""
    import random

    proto, _ = tf2onnx.convert.from_function(
        NORMALIZE_BLUR, input_signature=NORMALIZE_BLUR.input_signature, opset=17
    )
    graph = specialize_shapes(proto, {"image": photos[0].shape})
    want = canonical_names(graph).SerializeToString(deterministic=True)
    nodes = list(graph.graph.node)
    produced = {o: i for i, n in enumerate(nodes) for o in n.output}
    rng = random.Random(0)
    for _ in range(5):  # random topological orders
        placed, order, pending = set(), [], list(range(len(nodes)))
        while pending:
            ready = [
                i
                for i in pending
                if all(produced.get(x) in placed for x in nodes[i].input if x in produced)
            ]
            pick = rng.choice(ready)
            pending.remove(pick)
            placed.add(pick)
            order.append(nodes[pick])
        shuffled = onnx.ModelProto()
        shuffled.CopyFrom(graph)
        del shuffled.graph.node[:]
        shuffled.graph.node.extend(order)
        assert canonical_names(shuffled).SerializeToString(deterministic=True) == want
    got = run_onnxruntime(canonical_names(graph), {"image": photos[0]})
    for x, y in zip(run_onnxruntime(graph, {"image": photos[0]}), got, strict=True):
        np.testing.assert_array_equal(x, y)


def test_reverse_sequence_to_slice_keeps_the_result(photos):
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.uint8, name="bgr")])
    def to_rgb(bgr):
        return {"rgb": tf.reverse(bgr, axis=[2]), "flipped": tf.reverse(bgr, axis=[0])}

    proto, _ = tf2onnx.convert.from_function(to_rgb, input_signature=to_rgb.input_signature)
    for image in photos:
        static = specialize_shapes(proto, {"bgr": image.shape})
        rewritten, count = REWRITES["reverse_sequence_to_slice"].fn(static)
        assert count == 2
        assert not any(n.op_type == "ReverseSequence" for n in rewritten.graph.node)
        names = [o.name for o in rewritten.graph.output]
        got = dict(zip(names, run_onnxruntime(rewritten, {"bgr": image}), strict=True))
        np.testing.assert_array_equal(got["rgb"], image[:, :, ::-1])  # NumPy as the oracle
        np.testing.assert_array_equal(got["flipped"], image[::-1])


def test_pad_in_integer_type_keeps_the_result(photos):
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.uint8, name="image")])
    def pads(image):
        return {
            "zeros": tf.pad(image, [[2, 2], [3, 3], [0, 0]]),
            "reflect": tf.pad(image, [[1, 1], [1, 1], [0, 0]], mode="REFLECT"),
            "filled": tf.pad(image, [[1, 0], [0, 1], [0, 0]], constant_values=7),
        }

    proto, _ = tf2onnx.convert.from_function(pads, input_signature=pads.input_signature)
    assert any(n.op_type == "Cast" for n in proto.graph.node)  # tf2onnx pads uint8 in float
    rewritten, count = REWRITES["pad_in_integer_type"].fn(proto)
    assert count == 3
    assert not any(n.op_type == "Cast" for n in rewritten.graph.node)
    names = [o.name for o in rewritten.graph.output]
    for image in photos:
        got = dict(zip(names, run_onnxruntime(rewritten, {"image": image}), strict=True))
        np.testing.assert_array_equal(got["zeros"], np.pad(image, [(2, 2), (3, 3), (0, 0)]))
        np.testing.assert_array_equal(
            got["reflect"], np.pad(image, [(1, 1), (1, 1), (0, 0)], mode="reflect")
        )
        np.testing.assert_array_equal(
            got["filled"], np.pad(image, [(1, 0), (0, 1), (0, 0)], constant_values=7)
        )


def test_pad_in_integer_type_leaves_float_results_alone():
    import tensorflow as tf

    # The padded float is used as a float: the pad must stay in float.
    @tf.function(input_signature=[tf.TensorSpec([4, 5], tf.uint8, name="image")])
    def scaled(image):
        return {"out": tf.pad(tf.cast(image, tf.float32), [[1, 1], [1, 1]]) * 0.5}

    proto, _ = tf2onnx.convert.from_function(scaled, input_signature=scaled.input_signature)
    _, count = REWRITES["pad_in_integer_type"].fn(proto)
    assert count == 0
