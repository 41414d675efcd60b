"""ONNX graphs on the cpu target against onnxruntime (issue 21): out-of-range gather and
scatter indices raise a GdpError (run in a child process, so that a crash is a failure of the
test, not a lost run), NaN through Max/Min/Relu/Clip as onnxruntime returns it, graphs ending in
Clip under gdp's default fusion, and Resize given scales whose product with the extent is not
a whole number."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tvm
import tvm_ffi
from onnx import TensorProto as T
from onnx import helper as h

import gdp


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    graph = h.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 18)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def _vi(name, shape, dtype=T.FLOAT):
    return h.make_tensor_value_info(name, dtype, shape)


def _oracle(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def _gdp(model, feeds):
    return gdp.compile(model, target="cpu")(feeds)


# -- out-of-range indices, each graph run in a child process -----------------------------------

_CHILD = textwrap.dedent(
    """
    import sys
    import numpy as np, onnx
    import gdp
    sys.path.insert(0, {here!r})
    from test_kernel_correctness import _index_case, _oracle
    model, feeds = _index_case({case!r}, {indices!r})
    try:
        want = _oracle(model, feeds)
    except Exception as err:
        want = None
    try:
        got = gdp.compile(model, target="cpu")(feeds)
    except gdp.GdpError as err:
        print("RESULT refused", type(err).__name__, str(err).replace(chr(10), " "), flush=True)
        print("ORACLE", "raised" if want is None else "ran", flush=True)
        sys.exit(0)
    ok = want is not None and want.shape == got.shape and np.array_equal(want, got)
    print("RESULT", "match" if ok else "mismatch", flush=True)
    print("ORACLE", "raised" if want is None else "ran", flush=True)
    """
)


def _index_case(case: str, indices: list) -> tuple[onnx.ModelProto, dict]:
    """One gather or scatter of a 4x5 float image with the given (run-time) indices."""
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    index = np.array(indices, np.int64)
    if case == "Gather0":
        node = h.make_node("Gather", ["x", "i"], ["z"], axis=0)
        out = [*index.shape, 5]
    elif case == "Gather1":
        node = h.make_node("Gather", ["x", "i"], ["z"], axis=1)
        out = [4, *index.shape]
    elif case == "GatherElements":
        node = h.make_node("GatherElements", ["x", "i"], ["z"], axis=1)
        out = list(index.shape)
    elif case == "GatherND":
        node = h.make_node("GatherND", ["x", "i"], ["z"])
        out = list(index.shape[:-1])
    else:  # ScatterElements
        node = h.make_node("ScatterElements", ["x", "i", "u"], ["z"], axis=0)
        update = h.make_tensor("u", T.FLOAT, list(index.shape), [-1.0] * index.size)
        model = _model(
            [node],
            [_vi("x", [4, 5]), _vi("i", list(index.shape), T.INT64)],
            [_vi("z", [4, 5])],
            [update],
        )
        return model, {"x": x, "i": index}
    model = _model(
        [node], [_vi("x", [4, 5]), _vi("i", list(index.shape), T.INT64)], [_vi("z", out)]
    )
    return model, {"x": x, "i": index}


def _in_child(case: str, indices: list, tmp_path) -> tuple[str, str]:
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "GDP_CACHE_DIR": str(tmp_path / "cache")}
    run = subprocess.run(
        [sys.executable, "-c", _CHILD.format(here=here, case=case, indices=indices)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith(("RESULT", "ORACLE"))]
    assert run.returncode == 0 and len(lines) == 2, (
        f"the child died (rc {run.returncode}): {run.stderr[-2000:]}"
    )
    return lines[0], lines[1]


# Each case runs in a child process (2-3 s): one per op, and the index that crashed the process,
# by default; the rest with -m slow.
_SLOW = pytest.mark.slow
OUT_OF_RANGE = [
    ("Gather0", [0, 4]),
    pytest.param("Gather0", [0, -5], marks=_SLOW),
    ("Gather0", [1 << 30, 0]),
    pytest.param("Gather0", [-(1 << 40)], marks=_SLOW),
    ("Gather1", [[0, 5], [1, 2]]),
    ("GatherElements", [[0, 1, 2, 3, 9]] * 4),
    pytest.param("GatherElements", [[0, 1, 2, 3, 1 << 33]] * 4, marks=_SLOW),
    ("GatherND", [[0, 1], [4, 0]]),
    pytest.param("GatherND", [[0, 1], [0, -6]], marks=_SLOW),
    ("ScatterElements", [[0, 1, 2, 3, 1000000]] * 2),
    pytest.param("ScatterElements", [[0, -5, 2, 3, 1]] * 2, marks=_SLOW),
]
IN_RANGE = [
    ("Gather0", [0, 3, -1, -4]),
    pytest.param("Gather1", [[0, 4], [-1, -5]], marks=_SLOW),
    pytest.param("GatherElements", [[0, 1, 2, 3, -1]] * 4, marks=_SLOW),
    ("GatherND", [[0, 1], [-1, -5], [3, 4]]),
    pytest.param("ScatterElements", [[0, 1, 2, 3, -1], [1, 2, 3, 0, 0]], marks=_SLOW),
]


@pytest.mark.parametrize(("case", "indices"), OUT_OF_RANGE)
def test_out_of_range_indices_raise(case, indices, tmp_path):
    result, oracle = _in_child(case, indices, tmp_path)
    assert oracle == "ORACLE raised"  # onnxruntime refuses these too
    assert result.startswith("RESULT refused ExecutionError"), result
    assert "an index of" in result and "input 'i'" in result, result


@pytest.mark.parametrize(("case", "indices"), IN_RANGE)
def test_in_range_indices_match_onnxruntime(case, indices, tmp_path):
    result, oracle = _in_child(case, indices, tmp_path)
    assert (result, oracle) == ("RESULT match", "ORACLE ran")


def test_constant_indices_in_range_stay_unchecked():
    from gdp.runtime.backends.tvm import relax_import

    index = h.make_tensor("i", T.INT64, [3], [0, -1, 2])
    model = _model(
        [h.make_node("Relu", ["x"], ["r"]), h.make_node("Gather", ["r", "i"], ["z"], axis=0)],
        [_vi("x", [4, 5])],
        [_vi("z", [3, 5])],
        [index],
    )
    mod = relax_import.import_onnx(model)
    assert not any("gdp_check_indices" in g.name_hint for g in mod.functions)
    x = np.random.default_rng(1).uniform(-3, 3, (4, 5)).astype(np.float32)
    np.testing.assert_array_equal(_gdp(model, {"x": x}), _oracle(model, {"x": x}))


def _pair_lookup(table_size: int, scale: int):
    # A table indexed by two uint8 images, as gdp.cv2's addWeighted looks its result up:
    # index = int32(a) * scale + int32(b).
    table = h.make_tensor(
        "t", T.FLOAT, [table_size], (np.arange(table_size) % 1000).astype(np.float32).tolist()
    )
    factor = h.make_tensor("k", T.INT32, [], [scale])
    nodes = [
        h.make_node("Cast", ["a"], ["a32"], to=T.INT32),
        h.make_node("Cast", ["b"], ["b32"], to=T.INT32),
        h.make_node("Mul", ["a32", "k"], ["high"]),
        h.make_node("Add", ["high", "b32"], ["i"]),
        h.make_node("Gather", ["t", "i"], ["z"], axis=0),
    ]
    inputs = [_vi("a", [3, 7], T.UINT8), _vi("b", [3, 7], T.UINT8)]
    return _model(nodes, inputs, [_vi("z", [3, 7])], [table, factor])


@pytest.mark.parametrize(
    ("table_size", "scale", "checked"),
    [
        (65536, 256, False),  # every index inside: no check, the gather fuses
        (65535, 256, True),  # one short: the largest index would read past it
        (1 << 16, 1 << 24, True),  # a product past int32's range wraps: unbounded
    ],
)
def test_indices_bounded_by_their_arithmetic(table_size, scale, checked):
    from gdp.runtime.backends.tvm import relax_import

    model = _pair_lookup(table_size, scale)
    mod = relax_import.import_onnx(model)
    assert any("gdp_check_indices" in g.name_hint for g in mod.functions) == checked
    if not checked:
        rng = np.random.default_rng(3)
        feeds = {n: rng.integers(0, 256, (3, 7), dtype=np.uint8) for n in ("a", "b")}
        feeds["a"][0, 0] = feeds["b"][0, 0] = 255  # the largest index
        np.testing.assert_array_equal(_gdp(model, feeds), _oracle(model, feeds))


def _gather_at_arg(op: str, gather_rows: int, shape: list[int]):
    # knn's lookup: the distance at the position argmin picked (along the last axis), from a
    # table of `gather_rows`.
    nodes = [
        h.make_node(op, ["x"], ["i"], axis=len(shape) - 1, keepdims=0),
        h.make_node("Gather", ["t", "i"], ["z"], axis=0),
    ]
    table = h.make_tensor("t", T.FLOAT, [gather_rows], np.arange(gather_rows).tolist())
    return _model(nodes, [_vi("x", shape)], [_vi("z", shape[:-1])], [table])


@pytest.mark.parametrize(
    ("op", "gather_rows", "shape", "checked"),
    [
        ("ArgMin", 9, [5, 9], False),  # a position along the 9 reduced: inside 9 rows
        ("ArgMax", 9, [5, 9], False),
        ("ArgMin", 8, [5, 9], True),  # one row short: position 8 would read past it
        ("ArgMin", 45, [45], False),  # knn's case: one vector, a scalar position
        ("ArgMax", 44, [45], True),
    ],
)
def test_indices_from_argmin_and_argmax_are_bounded_by_the_reduced_extent(
    op, gather_rows, shape, checked
):
    from gdp.runtime.backends.tvm import relax_import

    model = _gather_at_arg(op, gather_rows, shape)
    mod = relax_import.import_onnx(model)
    assert any("gdp_check_indices" in g.name_hint for g in mod.functions) == checked
    x = np.random.default_rng(4).uniform(-3, 3, shape).astype(np.float32)
    x.reshape(-1, shape[-1])[0, -1] = -9 if op == "ArgMin" else 9  # the last position picked
    if not checked:
        np.testing.assert_array_equal(_gdp(model, {"x": x}), _oracle(model, {"x": x}))


# Rows whose values all equal the type's extreme (which TVM's arg-reductions start from, at
# index -1), ties elsewhere, and one row with a single extreme value.
_TIES = {
    np.uint8: [[0, 0, 0, 0], [255, 255, 255, 255], [3, 7, 7, 3], [0, 0, 255, 0]],
    np.int32: [[-(2**31)] * 4, [2**31 - 1] * 4, [5, -5, 5, -5], [1, 1, 1, 2]],
    np.float32: [[-np.inf] * 4, [np.inf] * 4, [2.5, 2.5, -1.0, 2.5], [0.0, -0.0, 0.0, 1.0]],
}
_ONNX_TYPES = {np.uint8: T.UINT8, np.int32: T.INT32, np.float32: T.FLOAT}


@pytest.mark.parametrize("dtype", list(_TIES), ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_reductions_of_ties_at_the_types_extremes_as_onnxruntime(dtype, op, last):
    """TVM's arg-reductions gave -1 (select_last_index: 4, past the row) where every value of
    a row was the type's extreme: the first (last) index, as onnxruntime, NumPy and TF."""
    x = np.array(_TIES[dtype], dtype)
    model = _model(
        [h.make_node(op, ["x"], ["z"], axis=1, keepdims=0, select_last_index=last)],
        [_vi("x", [4, 4], _ONNX_TYPES[dtype])],
        [_vi("z", [4], T.INT64)],
    )
    want = _oracle(model, {"x": x})
    picked = np.argmax(x, axis=1) if op == "ArgMax" else np.argmin(x, axis=1)
    if not last:
        np.testing.assert_array_equal(want, picked)  # the oracle agrees with NumPy
    np.testing.assert_array_equal(_gdp(model, {"x": x}), want)


def test_tf_argmax_of_a_photos_coarse_levels_is_the_first_of_ties():
    """tf.argmax over channels of x // 64: dark pixels are all 0 in every channel. TF leaves a
    tie's index open (its docs; graph mode gave the last of float ties); gdp gives the first,
    as NumPy and ONNX do."""
    import skimage.data
    import tensorflow as tf

    image = skimage.data.astronaut()[::4, ::4]

    @tf.function(input_signature=[tf.TensorSpec(image.shape, tf.uint8)])
    def levels(x):
        return {"max": tf.argmax(x // 64, axis=-1), "min": tf.argmin(x // 32, axis=-1)}

    got = gdp.compile(levels, target="cpu", verify=False)(image)
    np.testing.assert_array_equal(got["max"], np.argmax(image // 64, axis=-1))
    np.testing.assert_array_equal(got["min"], np.argmin(image // 32, axis=-1))


@pytest.mark.parametrize("shape", [(4, 5), (3, 1080 * 1920)], ids=["small", "split"])
@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_extrema_of_infinities_as_onnxruntime(op, shape):
    """A float max (min) of values that are all -inf (+inf) is -inf (+inf), not the lowest
    (largest) finite float TOPI started the reduction from; over a row long enough for a
    split reduction too."""
    sign = -1 if op == "ReduceMax" else 1
    x = np.full(shape, sign * np.inf, np.float32)
    x[1, 3] = 7.0  # one row with a finite extreme
    x[2, :] = np.linspace(-5, 5, shape[1], dtype=np.float32)
    model = _model(
        [h.make_node(op, ["x", "axes"], ["z"], keepdims=0)],
        [_vi("x", list(shape))],
        [_vi("z", [shape[0]])],
        [h.make_tensor("axes", T.INT64, [1], [1])],
    )
    want = _oracle(model, {"x": x})
    assert want[0] == sign * np.inf
    np.testing.assert_array_equal(_gdp(model, {"x": x}), want)


def test_a_masked_max_where_nothing_is_kept_is_minus_infinity_as_tf():
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([6, 8], tf.float32)])
    def masked(x):
        kept = tf.where(x > 0.5, x, float("-inf"))
        return {
            "max": tf.reduce_max(kept, axis=1),
            "pool": tf.nn.max_pool2d(kept[None, ..., None], 2, 2, "VALID"),
        }

    x = np.random.default_rng(6).uniform(0, 1, (6, 8)).astype(np.float32)
    x[2] = 0.1  # nothing kept in row 2
    x[4:] = 0.2  # nor in the last two rows: their pool windows are all -inf (TF: -FLT_MAX)
    want = {k: v.numpy() for k, v in masked(x).items()}
    got = gdp.compile(masked, target="cpu", verify=False)(x)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


# -- NaN ---------------------------------------------------------------------------------------

_X = np.array([[np.nan, 1, -1, np.nan, 0.5], [0, np.nan, 3, -2, np.inf]], np.float32)
_Y = np.array([[0, np.nan, np.nan, 2, -np.inf], [1, 1, 1, np.nan, np.nan]], np.float32)


def _scalar(name, value):
    return h.make_tensor(name, T.FLOAT, [], [value])


NAN_CASES = {
    "max": ([h.make_node("Max", ["x", "y"], ["z"])], []),
    "min": ([h.make_node("Min", ["x", "y"], ["z"])], []),
    "max3": ([h.make_node("Max", ["y", "x", "y"], ["z"])], []),
    "min3": ([h.make_node("Min", ["x", "y", "x"], ["z"])], []),
    "relu": ([h.make_node("Relu", ["x"], ["z0"]), h.make_node("Add", ["z0", "y"], ["z"])], []),
    "clip": ([h.make_node("Clip", ["x", "lo", "hi"], ["z"])], [_scalar("lo", 0), _scalar("hi", 2)]),
    "clip_min_only": ([h.make_node("Clip", ["y", "lo"], ["z"])], [_scalar("lo", 0.5)]),
    "clip_nan_low": (
        [h.make_node("Clip", ["x", "lo", "hi"], ["z"])],
        [_scalar("lo", float("nan")), _scalar("hi", 2)],
    ),
    "clip_nan_high": (
        [h.make_node("Clip", ["x", "lo", "hi"], ["z"])],
        [_scalar("lo", 0), _scalar("hi", float("nan"))],
    ),
    # operands that are expressions (computed once, as lets), nested as HSV's V is
    "max_of_max_of_sums": (
        [
            h.make_node("Add", ["x", "y"], ["s"]),
            h.make_node("Sub", ["x", "y"], ["d"]),
            h.make_node("Max", ["s", "d"], ["m"]),
            h.make_node("Mul", ["x", "y"], ["p"]),
            h.make_node("Max", ["m", "p"], ["z0"]),
            h.make_node("Min", ["z0", "s"], ["z"]),
        ],
        [],
    ),
}


@pytest.mark.parametrize("name", sorted(NAN_CASES))
def test_nan_as_onnxruntime(name):
    nodes, inits = NAN_CASES[name]
    used = {i for n in nodes for i in n.input}
    inputs = [_vi(v, [2, 5]) for v in ("x", "y") if v in used]
    model = _model(nodes, inputs, [_vi("z", [2, 5])], inits)
    feeds = {k: v for k, v in (("x", _X), ("y", _Y)) if k in used}
    want = _oracle(model, feeds)
    np.testing.assert_array_equal(_gdp(model, feeds), want)  # NaN where onnxruntime has NaN


def test_nan_min_max_reads_each_operand_once():
    """nan_propagating_min_max's select reads an operand up to three times: one that is an
    expression is a let, so nested min/max do not grow (HSV's float kernel wrote max(max(r, g),
    b) out with r nine times, and took TVM's simplifier 55 s)."""
    from tvm import te, tirx

    from gdp.runtime.backends.tvm.llvm import nan_propagating_min_max

    a = te.placeholder((16,), "float32", "a")
    b = te.placeholder((16,), "float32", "b")
    c = te.placeholder((16,), "float32", "c")
    out = te.compute(
        (16,), lambda i: tirx.max(tirx.max(a[i] + 1.0, b[i] * 2.0), c[i] - 1.0), name="out"
    )
    func = te.create_prim_func([a, b, c, out])
    rewritten = nan_propagating_min_max(tvm.IRModule({"main": func}))["main"]
    loads = Counter()

    def count(node):
        loads[node.source.name] += 1
        return node

    tvm_ffi.structural_map(rewritten, [(tvm.ir.expr.TensorLoad, count)], order="post")
    assert loads == {"a": 1, "b": 1, "c": 1}, loads
    assert "isnan" in rewritten.script()


@pytest.mark.parametrize("op", ["Max", "Min"])
def test_integer_min_max(op):
    rng = np.random.default_rng(3)
    x = rng.integers(-100, 100, (3, 7)).astype(np.int32)
    y = rng.integers(-100, 100, (3, 7)).astype(np.int32)
    model = _model(
        [h.make_node(op, ["x", "y"], ["z"])],
        [_vi("x", [3, 7], T.INT32), _vi("y", [3, 7], T.INT32)],
        [_vi("z", [3, 7], T.INT32)],
    )
    np.testing.assert_array_equal(_gdp(model, {"x": x, "y": y}), _oracle(model, {"x": x, "y": y}))


# -- graphs ending in Clip (and other ops) under the default fusion ----------------------------

_LO, _HI = _scalar("lo", -1.0), _scalar("hi", 1.5)
LAST_OP = {
    "clip": [h.make_node("Clip", ["x", "lo", "hi"], ["z"])],
    "scaled_clip": [
        h.make_node("Mul", ["x", "hi"], ["m"]),
        h.make_node("Clip", ["m", "lo", "hi"], ["z"]),
    ],
    "clip_identity": [
        h.make_node("Clip", ["x", "lo", "hi"], ["c"]),
        h.make_node("Identity", ["c"], ["z"]),
    ],
    "relu_identity": [h.make_node("Relu", ["x"], ["c"]), h.make_node("Identity", ["c"], ["z"])],
    "max_last": [h.make_node("Abs", ["x"], ["a"]), h.make_node("Max", ["a", "lo"], ["z"])],
    "reduce_clip": [
        h.make_node("ReduceMax", ["x"], ["r"], keepdims=1),
        h.make_node("Clip", ["r", "lo", "hi"], ["z"]),
    ],
}


@pytest.mark.parametrize("name", sorted(LAST_OP))
def test_graph_ending_in_clip_compiles(name):
    x = np.random.default_rng(5).uniform(-3, 3, (6, 7)).astype(np.float32)
    shape = [1, 1] if name == "reduce_clip" else [6, 7]
    model = _model(LAST_OP[name], [_vi("x", [6, 7])], [_vi("z", shape)], [_LO, _HI])
    model_ = gdp.compile(model, target="cpu")  # gdp's default fusion
    np.testing.assert_allclose(model_({"x": x}), _oracle(model, {"x": x}), rtol=1e-6, atol=1e-6)


# -- Resize with scales ------------------------------------------------------------------------

RESIZES = [
    ((1, 1, 7, 9), (1, 1, 1.7, 2.3), "linear", "half_pixel", "round_prefer_floor"),
    ((1, 2, 7, 9), (1, 1, 0.6, 1.3), "nearest", "asymmetric", "round_prefer_floor"),
    ((1, 2, 7, 9), (1, 1, 0.6, 1.3), "nearest", "half_pixel", "round_prefer_ceil"),
    ((1, 1, 9, 5), (1, 1, 1.3, 0.7), "nearest", "tf_half_pixel_for_nn", "floor"),
    ((1, 1, 5, 5), (1, 1, 2.5, 2.5), "linear", "pytorch_half_pixel", "round_prefer_floor"),
    ((1, 3, 10, 11), (1, 1, 1.5, 0.7), "linear", "align_corners", "round_prefer_floor"),
    ((1, 1, 11, 6), (1, 1, 0.75, 1.5), "linear", "asymmetric", "round_prefer_floor"),
    ((1, 1, 11, 6), (1, 1, 0.75, 2.0), "linear", "half_pixel_symmetric", "round_prefer_floor"),
    ((1, 1, 8, 6), (1, 1, 2.0, 0.5), "linear", "half_pixel", "round_prefer_floor"),  # whole
    ((1, 1, 13, 3), (1, 1, 0.35, 3.3), "nearest", "half_pixel", "ceil"),
]


@pytest.mark.parametrize(("shape", "scales", "mode", "coordinates", "nearest"), RESIZES)
def test_resize_scales_as_onnxruntime(shape, scales, mode, coordinates, nearest):
    x = np.random.default_rng(11).uniform(-3, 3, shape).astype(np.float32)
    out = [int(np.floor(d * s)) for d, s in zip(shape, scales, strict=True)]
    node = h.make_node(
        "Resize",
        ["x", "", "scales"],
        ["z"],
        mode=mode,
        coordinate_transformation_mode=coordinates,
        nearest_mode=nearest,
    )
    model = _model(
        [node],
        [_vi("x", list(shape))],
        [_vi("z", out)],
        [h.make_tensor("scales", T.FLOAT, [4], list(scales))],
    )
    want = _oracle(model, {"x": x})
    got = _gdp(model, {"x": x})
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_cubic_resize_of_inexact_scales_refused():
    node = h.make_node("Resize", ["x", "", "scales"], ["z"], mode="cubic")
    model = _model(
        [node],
        [_vi("x", [1, 1, 7, 9])],
        [_vi("z", [1, 1, 11, 20])],
        [h.make_tensor("scales", T.FLOAT, [4], [1, 1, 1.7, 2.3])],
    )
    with pytest.raises(gdp.UnsupportedOpError, match="cubic resize"):
        gdp.compile(model, target="cpu")


def test_checked_gathers_from_tables_of_different_sizes():
    """Two gathers with run-time indices from constant tables of one dtype and different sizes
    (gdp.cv2's uint8 BGR2Lab reads a 256- and a 3072-entry table): each gets a check of its own
    table's extent (one shared check kernel was called with the wrong table shape)."""
    small = h.make_tensor("small", T.FLOAT, [256], np.linspace(0, 1, 256, dtype=np.float32))
    large = h.make_tensor("large", T.FLOAT, [3072], np.linspace(2, 3, 3072, dtype=np.float32))
    nodes = [
        h.make_node("Gather", ["small", "i"], ["a"], axis=0),
        h.make_node("Gather", ["large", "i"], ["b"], axis=0),
        h.make_node("Add", ["a", "b"], ["y"]),
    ]
    model = _model(nodes, [_vi("i", [5], T.INT64)], [_vi("y", [5])], [small, large])
    feeds = {"i": np.array([0, 255, -1, 7, -256])}
    np.testing.assert_array_equal(_gdp(model, feeds), _oracle(model, feeds))


@pytest.mark.parametrize("width", [15, 16, 17, 33, 641])
@pytest.mark.parametrize("dtype", [T.UINT8, T.FLOAT])
def test_channels_chosen_by_channel_match_onnxruntime(width, dtype):
    # HWC rows whose channels are reordered (a reversed channel axis, a concat of planes)
    # or chosen from computed values (Where on a channel's mask) run as a loop of pixels with
    # the channels unrolled (llvm_schedules._unrolled_channels), at widths around LLVM's
    # vector lengths.
    shape = [9, width, 3]
    reverse = h.make_tensor("rev", T.INT64, [3], [2, 1, 0])
    mask = h.make_tensor("mask", T.BOOL, [3], [True, False, True])
    nodes = [
        h.make_node("Gather", ["x", "rev"], ["swapped"], axis=2),
        h.make_node("Split", ["x"], ["b", "g", "r"], axis=2, num_outputs=3),
        h.make_node("Concat", ["g", "r", "b"], ["planes"], axis=2),
        h.make_node("Add", ["swapped", "planes"], ["both"]),
        h.make_node("Where", ["mask", "both", "x"], ["y"]),
    ]
    model = _model(nodes, [_vi("x", shape, dtype)], [_vi("y", shape, dtype)], [reverse, mask])
    rng = np.random.default_rng(width)
    if dtype == T.UINT8:
        x = rng.integers(0, 128, shape, dtype=np.uint8)
    else:
        x = rng.standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(_gdp(model, {"x": x}), _oracle(model, {"x": x}))


@pytest.mark.parametrize("width", [15, 16, 17, 33, 641])
@pytest.mark.parametrize("channels", [3, 4])
def test_weighted_channel_sums_match_onnxruntime(width, channels):
    # A weighted sum of each pixel's channels, rounded back to uint8 (a grey conversion): at
    # static sizes its channel loop is unrolled inside the pixel loop (llvm_schedules.
    # _channel_sum), at widths around LLVM's vector lengths.
    shape = [9, width, channels]
    weights = h.make_tensor("w", T.INT32, [channels], [4899, 9617, 1868, 2000][:channels])
    half = h.make_tensor("half", T.INT32, [], [16384])
    one = h.make_tensor("one", T.INT32, [], [32768])
    axes = h.make_tensor("axes", T.INT64, [1], [2])
    nodes = [
        h.make_node("Cast", ["x"], ["xi"], to=T.INT32),
        h.make_node("Mul", ["xi", "w"], ["weighted"]),
        h.make_node("ReduceSum", ["weighted", "axes"], ["sum"], keepdims=0),
        h.make_node("Add", ["sum", "half"], ["rounded"]),
        h.make_node("Div", ["rounded", "one"], ["scaled"]),
        h.make_node("Cast", ["scaled"], ["y"], to=T.UINT8),
    ]
    inits = [weights, half, one, axes]
    model = _model(nodes, [_vi("x", shape, T.UINT8)], [_vi("y", shape[:2], T.UINT8)], inits)
    x = np.random.default_rng(width * channels).integers(0, 256, shape, dtype=np.uint8)
    np.testing.assert_array_equal(_gdp(model, {"x": x}), _oracle(model, {"x": x}))


@pytest.mark.parametrize("depth", [np.array(4), np.array([4])], ids=["scalar", "one-element"])
@pytest.mark.parametrize("axis", [-1, 0, 1, 2, -2, -3])
def test_one_hot_as_onnxruntime(depth, axis):
    """TVM's importer failed on a one-element depth, and made a float32 OneHot float64 with a
    scalar one. Negative indices count from depth; one outside [-depth, depth) is all off."""
    x = np.array([[0, 1, -1], [3, 5, -5]], np.int64)
    shape = [2, 3]
    shape.insert(axis if axis >= 0 else 3 + axis, 4)
    model = _model(
        [h.make_node("OneHot", ["x", "depth", "values"], ["z"], axis=axis)],
        [_vi("x", [2, 3], T.INT64)],
        [_vi("z", shape)],
        [
            onnx.numpy_helper.from_array(depth.astype(np.int64), "depth"),
            onnx.numpy_helper.from_array(np.array([0.5, 2.0], np.float32), "values"),
        ],
    )
    want = _oracle(model, {"x": x})
    got = _gdp(model, {"x": x})
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_array_equal(got, want)
