"""`gdp calibrate --target T`: measure a target's cost profile (gdp.rewrites.profiles.OPS)
with microbenchmarks compiled for it, and store it in the cache, where the profile-driven
rewrites find it. Each op is a one-node ONNX graph on float32 data at table 5-1's sizes
(1024x2048; GEMV 1024x1024 by a vector; matmul 512^3, a size a CPU measures in well under a
second); the split reductions and the separable and channel-parallel filters are their
rewrites' own forms of the same graphs. Each is timed as the median of its execute phase over
many runs, data already staged."""

from __future__ import annotations

import dataclasses
import statistics
from datetime import date

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import gdp
from gdp.frontend.common import IR_VERSION, OPSET
from gdp.rewrites.profiles import OPS, CostProfile, OpCost, store_profile
from gdp.rewrites.substitute import channel_parallel_filters, separable_filters, split_reduce
from gdp.runtime.cache import default_cache_dir
from gdp.runtime.targets import get_target

H, W = 1024, 2048


def _model(nodes, inputs: dict, output: tuple, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "microbenchmark",
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(output[0], output[1], output[2])],
        list(inits),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model


def microbenchmarks() -> dict[str, tuple[onnx.ModelProto, dict, int]]:
    """op -> (one-node model, its inputs, input elements counted by the profile)."""
    rng = np.random.default_rng(0)
    f32 = TensorProto.FLOAT
    x = rng.random((H, W), dtype=np.float32)
    y = rng.random((H, W), dtype=np.float32)
    hw = {"x": (f32, [H, W])}
    two = {"x": (f32, [H, W]), "y": (f32, [H, W])}
    out: dict[str, tuple[onnx.ModelProto, dict, int]] = {}
    out["transpose"] = (
        _model([helper.make_node("Transpose", ["x"], ["z"], perm=[1, 0])], hw, ("z", f32, [W, H])),
        {"x": x},
        H * W,
    )
    for name, op in (("abs", "Abs"),):
        out[name] = (
            _model([helper.make_node(op, ["x"], ["z"])], hw, ("z", f32, [H, W])),
            {"x": x},
            H * W,
        )
    for name, op in (("add", "Add"), ("max", "Max")):
        out[name] = (
            _model([helper.make_node(op, ["x", "y"], ["z"])], two, ("z", f32, [H, W])),
            {"x": x, "y": y},
            H * W,
        )
    bools = {"x": (TensorProto.BOOL, [H, W]), "y": (TensorProto.BOOL, [H, W])}
    out["and"] = (
        _model(
            [helper.make_node("And", ["x", "y"], ["z"])], bools, ("z", TensorProto.BOOL, [H, W])
        ),
        {"x": x > 0.5, "y": y > 0.5},
        H * W,
    )
    out["compare"] = (
        _model(
            [helper.make_node("Greater", ["x", "y"], ["z"])], two, ("z", TensorProto.BOOL, [H, W])
        ),
        {"x": x, "y": y},
        H * W,
    )
    axes = numpy_helper.from_array(np.array([0, 1], np.int64), "axes")
    out["reduce_sum"] = (
        _model(
            [helper.make_node("ReduceSum", ["x", "axes"], ["z"], keepdims=0)],
            hw,
            ("z", f32, []),
            [axes],
        ),
        {"x": x},
        H * W,
    )
    out["reduce_max"] = (
        _model(
            [helper.make_node("ReduceMax", ["x"], ["z"], axes=[0, 1], keepdims=0)],
            hw,
            ("z", f32, []),
        ),
        {"x": x},
        H * W,
    )
    # The split forms of the two reductions, as the split_reduce rewrite writes them.
    for name in ("reduce_sum", "reduce_max"):
        model, inputs, elements = out[name]
        split, log = split_reduce(model, None, force=True)
        assert log[0]["applied"], log
        out[f"split_{name}"] = (split, inputs, elements)
    matrix = numpy_helper.from_array(rng.random((1024, 1024), dtype=np.float32), "m")
    out["gemv"] = (
        _model(
            [helper.make_node("MatMul", ["v", "m"], ["z"])],
            {"v": (f32, [1, 1024])},
            ("z", f32, [1, 1024]),
            [matrix],
        ),
        {"v": rng.random((1, 1024), dtype=np.float32)},
        1024 * 1024,
    )
    n = 512
    b = numpy_helper.from_array(rng.random((n, n), dtype=np.float32), "b")
    out["matmul"] = (
        _model(
            [helper.make_node("MatMul", ["a", "b"], ["z"])],
            {"a": (f32, [n, n])},
            ("z", f32, [n, n]),
            [b],
        ),
        {"a": rng.random((n, n), dtype=np.float32)},
        n * n,
    )
    for c in (1, 3, 16):
        # About 2M elements at every channel count, rows a multiple of 16 (strips divide them).
        h, w = {1: H, 3: 336, 16: H // 16}[c], W
        # Rank one, as the filters separable_filters splits are (a Gaussian, a box).
        taps = rng.random((c, 5, 1), dtype=np.float32) * rng.random((c, 1, 5), dtype=np.float32)
        kernel = numpy_helper.from_array(taps[:, None], "k")
        out[f"depthwise_conv_c{c}"] = (
            _model(
                [helper.make_node("Conv", ["x", "k"], ["z"], group=c, pads=[2, 2, 2, 2])],
                {"x": (f32, [1, c, h, w])},
                ("z", f32, [1, c, h, w]),
                [kernel],
            ),
            {"x": rng.random((1, c, h, w), dtype=np.float32)},
            c * h * w,
        )
        model, inputs, elements = out[f"depthwise_conv_c{c}"]
        separable, log = separable_filters(model, None, force=True)
        assert log[0]["applied"], log
        out[f"separable_conv_c{c}"] = (separable, inputs, elements)
        if c <= 4:
            parallel, log = channel_parallel_filters(model, None, force=True)
            assert log[0]["applied"], log
            out[f"channel_parallel_conv_c{c}"] = (parallel, inputs, elements)
    assert set(out) == set(OPS), set(OPS) ^ set(out)
    return out


def calibrate(target: str = "cpu", runs: int = 30, store: bool = True) -> CostProfile:
    """Measure every op of the profile on `target`; store the profile in the cache."""
    # Each form exactly as given: the target's own substitutions would turn the direct form
    # into the one the current profile favours, and the two would measure the same.
    as_given = dataclasses.replace(get_target(target), substitutions=())
    ops = {}
    for name, (model, inputs, elements) in microbenchmarks().items():
        compiled = gdp.compile(model, target=as_given)
        for _ in range(3):
            compiled.submit(inputs, wait=True).result()
        times = []
        for _ in range(runs):
            task = compiled.submit(inputs, profile=True, wait=True)
            task.result()
            times.append(task.profile.execute_s)
        ops[name] = OpCost(round(statistics.median(times) * 1e3, 4), elements)
    profile = CostProfile(
        target=target,
        source=f"gdp calibrate on this machine, {date.today().isoformat()}",
        dtype="float32",
        ops=ops,
        fp16_arithmetic="fp32",  # the cpu and gpu convert fp16 to fp32 to compute
    )
    if store:
        store_profile(profile, default_cache_dir())
    return profile
