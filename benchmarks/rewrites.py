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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gdp
from gdp.benchmarking import compare
from gdp.calibrate import model_of
from gdp.rewrites import profiles
from gdp.rewrites.rule import Rewrite
from gdp.rewrites.rules import RULES
from gdp.runtime.cache import default_cache_dir
from gdp.runtime.targets import Target

# The cpu backend with no substitution of its own: each form compiles as given.
AS_GIVEN = Target("cpu-as-given", "tvm-llvm", doc="the cpu, substitutions off")


def cases() -> list[tuple[str, onnx.ModelProto, Rewrite, dict]]:
    """(name, graph, rewrite, its inputs): every measured rule's cases, in the rules' order."""
    out = []
    for rule in RULES.values():
        for name, build in rule.cases.items():
            graph = build()
            out.append((name, model_of(graph), rule, graph.feeds))
    return out


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
    for name, graph, rewrite, feeds in cases():
        rewritten, _ = rewrite(graph, None, force=True)
        _, log = rewrite(graph, profile)
        decision = log[0]
        (x,) = feeds.values()
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
