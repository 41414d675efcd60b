"""Each measured substitution before and after, on the cpu target at 1080p, beside the decision
the cpu profile makes: the rewrite is worth applying exactly where it measures faster, and the
profile must say so (a "no" where it measures faster is a missed gain; an "applied" where it
measures slower would make a pipeline slower, which the profile must never do).

    python benchmarks/rewrites.py [--runs 20] [--out benchmarks/results]

Writes DIR/rewrites.md. Both forms are compiled for the cpu and timed interleaved in this process
on the same input (gdp.benchmarking.compare).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gdp.rewrites import profiles  # noqa: E402
from gdp.rewrites.control_flow import neighbour_differences  # noqa: E402
from gdp.rewrites.substitute import (  # noqa: E402
    channel_parallel_filters,
    separable_filters,
    split_reduce,
)
from gdp.runtime.cache import default_cache_dir  # noqa: E402
from gdp.runtime.targets import Target  # noqa: E402

import gdp  # noqa: E402
from gdp.benchmarking import compare  # noqa: E402
from gdp.frontend.common import IR_VERSION, OPSET  # noqa: E402

# The cpu backend with no substitution of its own: each form compiles as given.
AS_GIVEN = Target("cpu-as-given", "tvm-llvm", doc="the cpu, substitutions off")


def _model(node, inputs: dict, output: tuple, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(
        [node],
        "case",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(output[0], TensorProto.FLOAT, output[1])],
        list(inits),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model


def _gaussian(channels: int) -> onnx.ModelProto:
    g = np.exp(-0.5 * ((np.arange(5) - 2) / 1.1) ** 2)
    g /= g.sum()
    kernel = np.tile(np.outer(g, g)[None, None], (channels, 1, 1, 1)).astype(np.float32)
    shape = [1, channels, 1080, 1920]
    return _model(
        helper.make_node("Conv", ["x", "k"], ["z"], group=channels, pads=[2, 2, 2, 2]),
        {"x": shape},
        ("z", shape),
        [numpy_helper.from_array(kernel, "k")],
    )


def _vertical_difference() -> onnx.ModelProto:
    """x[1:] - x[:-1] on a 1080p gray image, as tf2onnx writes it."""
    h, w = 1080, 1920

    def const(name, values):
        return numpy_helper.from_array(np.array(values, np.int64), name)

    nodes = [
        helper.make_node("Slice", ["x", "s1", "e1", "ax"], ["below"]),
        helper.make_node("Slice", ["x", "s2", "e2", "ax"], ["above"]),
        helper.make_node("Sub", ["below", "above"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes,
        "difference",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [h, w])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [h - 1, w])],
        [
            const("s1", [1]),
            const("e1", [h]),
            const("s2", [0]),
            const("e2", [h - 1]),
            const("ax", [0]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model


def cases() -> list[tuple[str, onnx.ModelProto, object, tuple]]:
    """(name, graph, rewrite, input shape)."""
    rgb = [1080, 1920, 3]
    axes = numpy_helper.from_array(np.array([0, 1], np.int64), "axes")
    return [
        ("x[1:] - x[:-1], 1080p gray", _vertical_difference(), neighbour_differences, (1080, 1920)),
        (
            "ReduceMax per channel, 1080p RGB",
            _model(
                helper.make_node("ReduceMax", ["x"], ["z"], axes=[0, 1], keepdims=0),
                {"x": rgb},
                ("z", [3]),
            ),
            split_reduce,
            tuple(rgb),
        ),
        (
            "ReduceSum per channel, 1080p RGB",
            _model(
                helper.make_node("ReduceSum", ["x", "axes"], ["z"], keepdims=0),
                {"x": rgb},
                ("z", [3]),
                [axes],
            ),
            split_reduce,
            tuple(rgb),
        ),
        (
            "5x5 Gaussian, depthwise conv, 1080p gray",
            _gaussian(1),
            separable_filters,
            (1, 1, 1080, 1920),
        ),
        (
            "5x5 Gaussian, depthwise conv, 1080p RGB",
            _gaussian(3),
            separable_filters,
            (1, 3, 1080, 1920),
        ),
        (
            "5x5 Gaussian, depthwise conv, 1080p gray",
            _gaussian(1),
            channel_parallel_filters,
            (1, 1, 1080, 1920),
        ),
        (
            "5x5 Gaussian, depthwise conv, 1080p RGB",
            _gaussian(3),
            channel_parallel_filters,
            (1, 3, 1080, 1920),
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args(argv)
    profile = profiles.load_profile("cpu", default_cache_dir())
    rows = [
        "| case | rule | before ms (min-max) | after ms (min-max) | before / after |"
        " profile: predicted ms (direct, rewritten) | profile decision | agrees |",
        "| --- | --- | ---: | ---: | ---: | --- | --- | --- |",
    ]
    rng = np.random.default_rng(0)
    for name, graph, rewrite, shape in cases():
        rewritten, _ = rewrite(graph, None, force=True)
        _, log = rewrite(graph, profile)
        decision = log[0]
        x = rng.random(shape, dtype=np.float32)
        before = gdp.compile(graph, target=AS_GIVEN)
        after = gdp.compile(rewritten, target=AS_GIVEN)
        np.testing.assert_allclose(after(x), before(x), rtol=1e-5, atol=1e-5)
        t = compare(
            {"before": lambda m=before, x=x: m(x), "after": lambda m=after, x=x: m(x)}, args.runs
        )
        b, a = t["before"], t["after"]
        faster = a.median < b.median
        costs = decision.get("costs") or {}
        predicted = ", ".join(f"{v:.2f}" for k, v in costs.items() if k.endswith("_ms"))
        rows.append(
            f"| {name} | {decision['rule']} | {b.cell()} | {a.cell()} |"
            f" {b.median / a.median:.2f}x | {predicted or '-'} |"
            f" {'applied' if decision['applied'] else 'left alone'} |"
            f" {'yes' if decision['applied'] == faster else 'NO'} |"
        )
        print(rows[-1], flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = "\n".join(
        [
            "# Measured substitutions on the cpu target, 1080p",
            "",
            f"`python benchmarks/rewrites.py --runs {args.runs}`; medians of {args.runs}"
            f" interleaved runs. Profile: {profile.source}.",
            "",
            *rows,
            "",
        ]
    )
    (out / "rewrites.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
