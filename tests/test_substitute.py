"""Measured substitutions: each rewritten graph against the original on onnxruntime (hypothesis
over shapes, axes and reductions), and the decisions the cost profiles make."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from gdp.rewrites import profiles
from gdp.rewrites.substitute import split_reduce
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import gdp
from gdp.frontend.common import IR_VERSION, OPSET

REDUCTIONS = {
    "ReduceMin": np.min,
    "ReduceMax": np.max,
    "ReduceSum": np.sum,
    "ReduceMean": np.mean,
}


def reduction(op: str, shape: list[int], axes: list[int], keepdims: int = 0) -> onnx.ModelProto:
    inits = []
    if op == "ReduceSum":  # axes are an input from opset 13, an attribute for the others
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
        node = helper.make_node(op, ["x", "axes"], ["z"], keepdims=keepdims)
    else:
        node = helper.make_node(op, ["x"], ["z"], axes=axes, keepdims=keepdims)
    out = [1 if i in axes else d for i, d in enumerate(shape) if keepdims or i not in axes]
    graph = helper.make_graph(
        [node],
        "reduction",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, out)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@settings(max_examples=40, deadline=None)
@given(
    op=st.sampled_from(sorted(REDUCTIONS)),
    shape=st.lists(st.sampled_from([3, 16, 64, 96, 130]), min_size=2, max_size=3),
    data=st.data(),
    keepdims=st.integers(0, 1),
    seed=st.integers(0, 2**16),
)
def test_split_reduce_equals_the_reduction(op, shape, data, keepdims, seed):
    rank = len(shape)
    axes = sorted(data.draw(st.sets(st.integers(0, rank - 1), min_size=1)))
    model = reduction(op, shape, axes, keepdims)
    split, log = split_reduce(model, None, force=True)
    x = np.random.default_rng(seed).random(shape, dtype=np.float32)
    want = REDUCTIONS[op](x.astype(np.float64), axis=tuple(axes), keepdims=bool(keepdims))
    got = run(split, x)
    if np.prod(shape) >= 1 << 16 and shape[axes[0]] % 2 == 0:
        assert log and log[0]["applied"], log
        assert any(n.op_type == "Split" for n in split.graph.node)
    if op in ("ReduceMin", "ReduceMax"):
        np.testing.assert_array_equal(got, run(model, x))  # picks existing values: exact
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_profiles_decide_by_their_measurements():
    model = reduction("ReduceMax", [1080, 1920, 3], [0, 1])
    # The cpu measures the split slower (separate strided slices): left alone, costs logged.
    same, log = split_reduce(model, profiles.CPU_DEFAULT)
    assert same is model
    assert log[0]["applied"] is False
    assert log[0]["costs"]["split_ms"] > log[0]["costs"]["direct_ms"]
    # The thesis's Ascend 310 numbers: 1.50 ms direct, 0.60 ms split over 1080p RGB.
    split, log = split_reduce(model, profiles.NPU_ASCEND310)
    assert log[0]["applied"] is True and log[0]["costs"]["slices"] == 8
    x = np.random.default_rng(1).random((1080, 1920, 3), dtype=np.float32)
    np.testing.assert_array_equal(run(split, x), x.max(axis=(0, 1)))
    # A reduction the profile times only one way is not guessed at.
    _, log = split_reduce(reduction("ReduceSum", [1080, 1920, 3], [0, 1]), profiles.NPU_ASCEND310)
    assert log[0]["applied"] is False and "does not time both" in log[0]["why"]


def test_report_lists_the_rewrites_weighed(tmp_path):
    model = gdp.compile(reduction("ReduceMax", [256, 512], [0, 1]), target="cpu")
    entries = [e for e in model.report()["rewrites"] if e["rule"] == "split_reduce"]
    assert len(entries) == 1
    assert entries[0]["applied"] is False and entries[0]["where"]
    assert {"direct_ms", "split_ms", "slices"} <= set(entries[0]["costs"])
    x = np.random.default_rng(2).random((256, 512), dtype=np.float32)
    np.testing.assert_array_equal(model(x), x.max())


def test_a_stored_profile_overrides_the_shipped_default(tmp_path):
    measured = profiles.CostProfile(
        target="cpu",
        source="test",
        dtype="float32",
        ops={
            "reduce_max": profiles.OpCost(2.0, 1000),
            "split_reduce_max": profiles.OpCost(1.0, 1000),
        },
    )
    profiles.store_profile(measured, tmp_path)
    assert profiles.load_profile("cpu", tmp_path) == measured
    (tmp_path / "profiles" / "cpu.json").write_text("{not json")
    assert profiles.load_profile("cpu", tmp_path) is profiles.CPU_DEFAULT
    assert profiles.load_profile("reference", tmp_path) is None


def test_a_kernel_gdp_cannot_schedule_still_compiles_and_says_so(tmp_path):
    """The split mean over every axis is a fused kernel whose rfactor TVM refuses: it runs
    with TVM's default lowering, correct, and a RuntimeWarning names it."""
    import pytest

    shape = [1080, 1920, 3]
    split, _ = split_reduce(reduction("ReduceMean", shape, [0, 1, 2]), None, force=True)
    with pytest.warns(RuntimeWarning, match="runs unscheduled"):
        model = gdp.compile(split, target="cpu", cache_dir=tmp_path)
    x = np.random.default_rng(3).random(shape, dtype=np.float32)
    np.testing.assert_allclose(model(x), x.astype(np.float64).mean(), rtol=1e-5)
