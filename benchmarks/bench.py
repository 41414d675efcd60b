"""The side-by-side benchmark of the workload samples: gdp against OpenCV/NumPy, same process,
same input, same thread count, interleaved, median of many runs with min and max, plus a roofline
from this machine's copy bandwidth measured in the same run.

    python benchmarks/bench.py [--runs 20] [--only tone,gaussian] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import threading
import time
from pathlib import Path

THREADS = os.cpu_count() or 1
os.environ.setdefault("TVM_NUM_THREADS", str(THREADS))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import cv2  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "samples"))

import workload  # noqa: E402  (samples/)

from gdp.benchmarking import compare  # noqa: E402


def copy_bandwidth(megabytes: int = 256, repeats: int = 5) -> float:
    """Bytes per second read plus written by a copy on all cores (STREAM's 'copy')."""
    src = np.ones(megabytes << 20, np.uint8)
    dst = np.empty_like(src)
    chunks = np.array_split(np.arange(src.size), THREADS)
    bounds = [(c[0], c[-1] + 1) for c in chunks]

    def part(lo: int, hi: int) -> None:
        np.copyto(dst[lo:hi], src[lo:hi])  # releases the GIL

    best = []
    for _ in range(repeats):
        threads = [threading.Thread(target=part, args=b) for b in bounds]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        best.append(time.perf_counter() - t0)
    return 2 * src.nbytes / float(np.median(best))


def bench_one(name: str, runs: int, bandwidth: float) -> dict:
    module = importlib.import_module(name)
    inputs = module.inputs()
    compiled = workload.build(module, target="cpu")
    module.check(compiled(inputs), module.peer(**inputs))
    # fp16 storage with gdp's scaling (its error against fp32: docs/precision.md, tests).
    half = workload.build(module, target="cpu", precision="fp16")
    if hasattr(module, "timed_peers"):
        peers = module.timed_peers(**inputs)
    else:
        peers = {"OpenCV/NumPy": lambda: module.peer(**inputs)}
    timings = compare(
        {"gdp fp32": lambda: compiled(inputs), "gdp fp16": lambda: half(inputs), **peers},
        runs=runs,
    )
    roofline_s = module.bytes_moved(inputs) / bandwidth
    row = {
        "workload": name,
        "target": "cpu",
        "kernels": compiled.kernels,
        "roofline_ms": roofline_s * 1e3,
        "peers": {
            peer: {
                "median_ms": t.median * 1e3,
                "min_ms": min(t.seconds) * 1e3,
                "max_ms": max(t.seconds) * 1e3,
            }
            for peer, t in timings.items()
        },
    }
    gdp_ms = row["peers"]["gdp fp32"]["median_ms"]
    row["speedup"] = {
        peer: v["median_ms"] / gdp_ms
        for peer, v in row["peers"].items()
        if not peer.startswith("gdp ")
    }
    row["gdp_over_roofline"] = gdp_ms / row["roofline_ms"]
    return row


def markdown(rows: list[dict], bandwidth: float) -> str:
    lines = [
        f"Machine: {platform.machine()}, {THREADS} cores, copy bandwidth "
        f"{bandwidth / 1e9:.1f} GB/s (read + write), {THREADS} threads for every peer.",
        "",
        "| workload | gdp fp32 ms (min-max) | gdp fp16 ms (min-max) | peer "
        "| peer ms (min-max) | speedup | roofline ms | gdp / roofline |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        g = row["peers"]["gdp fp32"]
        h = row["peers"].get("gdp fp16")
        half = f"{h['median_ms']:.2f} ({h['min_ms']:.2f}-{h['max_ms']:.2f})" if h else "n/a"
        for peer, speedup in row["speedup"].items():
            p = row["peers"][peer]
            lines.append(
                f"| {row['workload']} | {g['median_ms']:.2f} ({g['min_ms']:.2f}-{g['max_ms']:.2f}) "
                f"| {half} | {peer} | {p['median_ms']:.2f} ({p['min_ms']:.2f}-"
                f"{p['max_ms']:.2f}) | {speedup:.2f}x | {row['roofline_ms']:.2f} | "
                f"{row['gdp_over_roofline']:.1f}x |"
            )
    return "\n".join(lines)


def chart(rows: list[dict], path: Path) -> None:
    """A bar chart of gdp's speedup over each peer, per workload (log scale, 1x marked)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, values = [], []
    for row in rows:
        for peer, speedup in row["speedup"].items():
            labels.append(f"{row['workload']}\nvs {peer}")
            values.append(speedup)
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(labels)), 4.5))
    ax.bar(range(len(values)), values, color=["tab:green" if v >= 1 else "tab:red" for v in values])
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(labels)), labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("gdp fp32 speedup (peer median / gdp median)")
    ax.set_title(f"gdp cpu vs OpenCV/NumPy, 1080p, {THREADS} threads each")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--only", default=",".join(workload.WORKLOADS))
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args(argv)
    cv2.setNumThreads(THREADS)
    bandwidth = copy_bandwidth()
    rows = [bench_one(name, args.runs, bandwidth) for name in args.only.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"threads": THREADS, "copy_bandwidth_Bps": bandwidth, "rows": rows}
    (out / "bench.json").write_text(json.dumps(result, indent=1))
    table = markdown(rows, bandwidth)
    (out / "bench.md").write_text(table + "\n")
    chart(rows, out / "bench.png")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
