"""gdp's preprocessing stage on Ray Serve and Ray Data against the same stage with OpenCV + NumPy.

Serve: two deployments in one Ray instance, identical but for the preprocess: gdp.serving's
Preprocess with the gdp model (224x224 bilinear, ImageNet mean/std, CHW float32), and the same
Preprocess class given an OpenCV + NumPy stage (cv2.resize INTER_LINEAR on uint8, then NumPy
float arithmetic and transpose: what servers run today, samples/dnn_resize.py's peer); the
same request decoding, batching (max 8, 5 ms), replica count, CPUs and threads. Clients are
asyncio httpx clients in this process sending photos (scikit-image's, five sizes from 240p to
1080p) as JPEG and as .npy; each point is requests/s and p50/p99 latency over a fixed time at
1, 8 and 32 concurrent clients, gdp and OpenCV interleaved, repeated; medians with min-max.

Ray Data: the same photos as arrays (mixed sizes), 256 rows, map_batches with gdp.ray's
Preprocessor against a callable class doing OpenCV + NumPy per image, one actor each, timed
end to end (actor start included), interleaved, repeated.

    python benchmarks/serve.py [--seconds 4] [--repeats 3] [--out benchmarks/results]

The machine's other load moves every number: the load average is recorded beside each one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import cv2
import numpy as np
import onnx
import skimage.data
from onnx import TensorProto, helper

SIZE = 224
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)
SIZES = [(240, 320), (480, 640), (600, 400), (720, 1280), (1080, 1920)]
SOURCES = ["astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry"]
CLIENTS = [1, 8, 32]
THREADS = 2  # per replica, for TVM and OpenCV alike


def preprocess_graph() -> onnx.ModelProto:
    """uint8 RGB HxWx3 -> 224x224 bilinear (half-pixel, no antialias) -> mean/std -> CHW."""
    image = helper.make_tensor_value_info("image", TensorProto.UINT8, ["h", "w", 3])
    out = helper.make_tensor_value_info("tensor", TensorProto.FLOAT, [3, SIZE, SIZE])
    consts = [
        helper.make_tensor("sizes", TensorProto.INT64, [4], [1, 3, SIZE, SIZE]),
        helper.make_tensor("scale", TensorProto.FLOAT, [3, 1, 1], (1 / (255 * STD)).tolist()),
        helper.make_tensor("shift", TensorProto.FLOAT, [3, 1, 1], (-MEAN / STD).tolist()),
        helper.make_tensor("axis0", TensorProto.INT64, [1], [0]),
    ]
    nodes = [
        helper.make_node("Cast", ["image"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["f", "axis0"], ["nhwc"]),
        helper.make_node("Transpose", ["nhwc"], ["nchw"], perm=[0, 3, 1, 2]),
        helper.make_node(
            "Resize",
            ["nchw", "", "", "sizes"],
            ["resized"],
            mode="linear",
            coordinate_transformation_mode="half_pixel",
        ),
        helper.make_node("Squeeze", ["resized", "axis0"], ["chw"]),
        helper.make_node("Mul", ["chw", "scale"], ["scaled"]),
        helper.make_node("Add", ["scaled", "shift"], ["tensor"]),
    ]
    graph = helper.make_graph(nodes, "preprocess", [image], [out], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def opencv_numpy(rgb: np.ndarray) -> np.ndarray:
    x = cv2.resize(rgb, (SIZE, SIZE), interpolation=cv2.INTER_LINEAR).astype(np.float32)
    return np.ascontiguousarray(((x / 255.0 - MEAN) / STD).transpose(2, 0, 1))


class OpenCVStage:
    """gdp.serving.stage.Stage's interface around OpenCV + NumPy: the same decoding and
    validation (gdp.serving.codec), a loop over the batch instead of the gdp model."""

    def __init__(self) -> None:
        from gdp.serving.codec import DEFAULT_MAX_PIXELS
        from gdp.signature import TensorSig

        cv2.setNumThreads(THREADS)
        self.inputs = [TensorSig("image", np.dtype(np.uint8), (None, None, 3))]
        self.outputs = [TensorSig("tensor", np.dtype(np.float32), (3, SIZE, SIZE))]
        self.max_pixels = DEFAULT_MAX_PIXELS

    def metadata(self) -> dict:
        return {"model": "OpenCV + NumPy", "target": "opencv", "precision": "fp32"}

    def decode(self, body: bytes, content_type: str) -> list[np.ndarray]:
        from gdp.serving.codec import decode_request

        return decode_request(body, content_type, self.inputs, max_pixels=self.max_pixels)

    def coerce(self, value) -> list[np.ndarray]:
        return [np.asarray(value)]

    def run(self, entries):
        return [{"tensor": opencv_numpy(e[0])} for e in entries]


class OpenCVMapper:
    """Ray Data's callable class for the OpenCV + NumPy peer."""

    def __init__(self) -> None:
        cv2.setNumThreads(THREADS)

    def __call__(self, batch: dict) -> dict:
        images = list(batch["image"])
        return {"tensor": np.stack([opencv_numpy(x) for x in images])}


def photos() -> list[np.ndarray]:
    return [
        np.ascontiguousarray(
            cv2.resize(getattr(skimage.data, n)(), (w, h), interpolation=cv2.INTER_AREA)
        )
        for n, (h, w) in zip(SOURCES, SIZES, strict=True)
    ]


def load_avg() -> float:
    return round(os.getloadavg()[0], 2)


async def _load(url: str, bodies: list[bytes], clients: int, seconds: float) -> dict:
    import httpx

    latencies: list[float] = []
    errors = 0
    stop = time.perf_counter() + seconds

    async def client(k: int) -> None:
        nonlocal errors
        n = k
        async with httpx.AsyncClient(timeout=60) as http:
            while time.perf_counter() < stop:
                body = bodies[n % len(bodies)]
                n += 1
                t0 = time.perf_counter()
                response = await http.post(url, content=body)
                if response.status_code != 200:
                    errors += 1
                    continue
                latencies.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    await asyncio.gather(*(client(k) for k in range(clients)))
    elapsed = time.perf_counter() - t0
    lat = np.array(latencies) * 1e3
    return {
        "req_s": len(latencies) / elapsed,
        "p50_ms": float(np.percentile(lat, 50)) if len(lat) else float("nan"),
        "p99_ms": float(np.percentile(lat, 99)) if len(lat) else float("nan"),
        "requests": len(latencies),
        "errors": errors,
    }


def summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def check_outputs(urls: dict, body: bytes, rgb: np.ndarray, model) -> None:
    """Both deployments answer this body with their own result, checked before timing."""
    import httpx

    from gdp.serving import codec

    for name, url in urls.items():
        r = httpx.post(url, content=body, timeout=60)
        got = codec.decode_outputs(r.content, r.headers["content-type"], ["tensor"])["tensor"]
        want = model(rgb) if name == "gdp" else opencv_numpy(rgb)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def bench_serve(args, folder: Path) -> dict:
    from ray import serve

    import gdp
    from gdp.serving import Preprocess, codec

    path = folder / "preprocess.onnx"
    gdp.compile(preprocess_graph(), target="cpu").save(path)
    env = {"env_vars": {"TVM_NUM_THREADS": str(THREADS), "OMP_NUM_THREADS": str(THREADS)}}
    common = dict(
        num_replicas=1,
        max_ongoing_requests=64,
        ray_actor_options={"num_cpus": 1, "runtime_env": env},
        logging_config={"enable_access_log": False},
    )
    serve.start(http_options={"host": "127.0.0.1", "port": args.port})
    serve.run(
        Preprocess.options(name="gdp", **common).bind(str(path)), name="gdp", route_prefix="/gdp"
    )
    serve.run(
        Preprocess.options(name="opencv", **common).bind(stage=OpenCVStage),
        name="opencv",
        route_prefix="/opencv",
    )
    urls = {p: f"http://127.0.0.1:{args.port}/{p}" for p in ("gdp", "opencv")}
    images = photos()
    model = gdp.load(path)
    payloads = {
        "jpeg": [
            cv2.imencode(".jpg", cv2.cvtColor(x, cv2.COLOR_RGB2BGR))[1].tobytes() for x in images
        ],
        "npy": [codec.npy_bytes(x) for x in images],
    }
    check_outputs(urls, payloads["npy"][2], images[2], model)
    results: dict = {}
    for payload, bodies in payloads.items():
        for clients in CLIENTS:
            runs: dict = {"gdp": [], "opencv": []}
            loads = []
            for peer in ("gdp", "opencv"):  # warm-up
                asyncio.run(_load(urls[peer], bodies, clients, 1.0))
            for _ in range(args.repeats):
                for peer in ("gdp", "opencv"):
                    loads.append(load_avg())
                    runs[peer].append(asyncio.run(_load(urls[peer], bodies, clients, args.seconds)))
            point = {"load_avg_1min": loads}
            for peer, got in runs.items():
                point[peer] = {
                    k: summary([g[k] for g in got]) for k in ("req_s", "p50_ms", "p99_ms")
                }
                point[peer]["errors"] = sum(g["errors"] for g in got)
            point["throughput_ratio"] = (
                point["gdp"]["req_s"]["median"] / point["opencv"]["req_s"]["median"]
            )
            results[f"{payload}/{clients}"] = point
            print(
                f"{payload:5s} {clients:2d} clients: gdp {point['gdp']['req_s']['median']:6.1f}"
                f" req/s p99 {point['gdp']['p99_ms']['median']:6.1f} ms | opencv "
                f"{point['opencv']['req_s']['median']:6.1f} req/s p99 "
                f"{point['opencv']['p99_ms']['median']:6.1f} ms | load {loads}",
                flush=True,
            )
    serve.delete("gdp")
    serve.delete("opencv")
    return results


def bench_data(args, folder: Path) -> dict:
    import ray

    import gdp.ray

    path = folder / "preprocess.onnx"
    images = photos()
    rows = [{"image": images[n % len(images)]} for n in range(args.rows)]
    env = {"env_vars": {"TVM_NUM_THREADS": str(THREADS), "OMP_NUM_THREADS": str(THREADS)}}
    times: dict = {"gdp": [], "opencv": []}
    loads = []
    for _ in range(args.repeats):
        for peer in ("gdp", "opencv"):
            ds = ray.data.from_items(rows)
            loads.append(load_avg())
            t0 = time.perf_counter()
            if peer == "gdp":
                out = gdp.ray.map_batches(
                    ds, path, batch_size=16, concurrency=1, num_cpus=1, runtime_env=env
                )
            else:
                out = ds.map_batches(
                    OpenCVMapper,
                    batch_size=16,
                    batch_format="numpy",
                    concurrency=1,
                    num_cpus=1,
                    runtime_env=env,
                )
            count = len(out.take_all())
            times[peer].append(count / (time.perf_counter() - t0))
    result = {peer: summary(v) for peer, v in times.items()}
    result["ratio"] = result["gdp"]["median"] / result["opencv"]["median"]
    result["rows"] = args.rows
    result["load_avg_1min"] = loads
    print(
        f"ray data: gdp {result['gdp']['median']:.1f} img/s, opencv "
        f"{result['opencv']['median']:.1f} img/s, load {loads}",
        flush=True,
    )
    return result


def write(results: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "serve.json").write_text(json.dumps(results, indent=1))
    lines = [
        "# gdp's preprocessing stage on Ray Serve and Ray Data (benchmarks/serve.py)",
        "",
        f"Machine: {results['machine']}. {results['setup']}",
        "",
        f"Load: {results['load_note']}",
        "",
        "| payload | clients | gdp req/s (min-max) | OpenCV+NumPy req/s (min-max) | ratio |"
        " gdp p50 ms | OpenCV p50 ms | gdp p99 ms (min-max) | OpenCV p99 ms (min-max) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]

    def fmt(s, digits=1):
        return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}-{s['max']:.{digits}f})"

    for key, p in results["serve"].items():
        payload, clients = key.split("/")
        lines.append(
            f"| {payload} | {clients} | {fmt(p['gdp']['req_s'])} | {fmt(p['opencv']['req_s'])} |"
            f" {p['throughput_ratio']:.2f}x | {p['gdp']['p50_ms']['median']:.1f} |"
            f" {p['opencv']['p50_ms']['median']:.1f} | {fmt(p['gdp']['p99_ms'])} |"
            f" {fmt(p['opencv']['p99_ms'])} |"
        )
    d = results["data"]
    lines += [
        "",
        f"Ray Data, {d['rows']} images of five sizes as arrays, one actor, end to end (actor"
        " start included):",
        "",
        "| peer | images/s (min-max) |",
        "| --- | ---: |",
        f"| gdp.ray.map_batches | {fmt(d['gdp'])} |",
        f"| map_batches, OpenCV + NumPy | {fmt(d['opencv'])} |",
        f"| ratio | {d['ratio']:.2f}x |",
        "",
    ]
    (out / "serve.md").write_text("\n".join(lines))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    keys = list(results["serve"])
    x = np.arange(len(keys))
    for ax, metric, title in (
        (axes[0], "req_s", "requests/s"),
        (axes[1], "p99_ms", "p99 latency (ms)"),
    ):
        for k, peer in enumerate(("gdp", "opencv")):
            stats = [results["serve"][key][peer][metric] for key in keys]
            med = [s["median"] for s in stats]
            lo = [s["median"] - s["min"] for s in stats]
            hi = [s["max"] - s["median"] for s in stats]
            ax.bar(
                x + (k - 0.5) * 0.4,
                med,
                0.4,
                yerr=[lo, hi],
                label="gdp" if peer == "gdp" else "OpenCV + NumPy",
            )
        ax.set_xticks(x, [k.replace("/", "\n") + " cl." for k in keys], fontsize=8)
        ax.set_title(title)
        ax.legend()
    axes[2].bar(["gdp", "OpenCV + NumPy"], [d["gdp"]["median"], d["opencv"]["median"]])
    axes[2].set_title("Ray Data images/s")
    fig.tight_layout()
    fig.savefig(out / "serve.png", dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()

    import ray

    # Ray before any gdp run in this process: ray.init forks helper processes (docs/serving.md).
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="warning")
    load_before = load_avg()
    try:
        folder = Path(tempfile.mkdtemp(prefix="gdp-bench-serve-"))
        serve_results = bench_serve(args, folder)
        data_results = bench_data(args, folder)
    finally:
        from ray import serve

        serve.shutdown()
        ray.shutdown()
    results = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}"
        f", ray {ray.__version__}",
        "setup": (
            f"One Ray instance (num_cpus=2); two Serve deployments of one replica each (1 CPU,"
            f" {THREADS} threads for TVM and OpenCV), max_batch_size 8, batch wait 5 ms, access"
            f" logs off; clients: asyncio httpx in the benchmark's process, {args.seconds} s per"
            f" point, {args.repeats} repeats interleaved, medians (min-max)."
        ),
        "load_note": (
            f"1-minute load average {load_before} at the start on this 2-core machine (other"
            " sessions' processes, the replicas, Ray's own processes and the clients all share"
            " the two cores); each point's load averages are in serve.json."
        ),
        "serve": serve_results,
        "data": data_results,
    }
    write(results, args.out)
    print((args.out / "serve.md").read_text())


if __name__ == "__main__":
    main()
