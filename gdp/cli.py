"""`gdp` on the command line: what is installed, ahead-of-time compilation into the cache or
into a bundle directory, and the calibration of a target's cost profile."""

from __future__ import annotations

import argparse
import json
import runpy
import sys
from pathlib import Path

import gdp
from gdp.runtime.backends import BACKENDS
from gdp.runtime.cache import default_cache_dir
from gdp.runtime.targets import TARGETS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gdp", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="versions, targets, backends and the cache directory")
    comp = sub.add_parser("compile", help="compile an ONNX file for a target (fills the cache)")
    comp.add_argument("onnx", help="path of the ONNX model")
    comp.add_argument("--target", default="cpu", choices=sorted(TARGETS))
    cal = sub.add_parser(
        "calibrate", help="measure the target's cost profile and store it in the cache"
    )
    cal.add_argument("--target", default="cpu", choices=sorted(TARGETS))
    cal.add_argument("--runs", type=int, default=30)
    cal.add_argument(
        "--cv2",
        action="store_true",
        help="instead: time gdp.cv2's functions against OpenCV per image size class and store "
        "the dispatch table (a call runs OpenCV's own where OpenCV measured faster)",
    )
    cal.add_argument(
        "--sizes",
        default="",
        help="with --cv2: comma-separated size classes (240p,480p,1080p,4k; default all)",
    )
    exp = sub.add_parser(
        "export",
        help="compile an ONNX file and write an ahead-of-time bundle of its executables "
        "(gdp.load(DIR) runs it without compiling)",
    )
    exp.add_argument("onnx", help="path of the ONNX model")
    exp.add_argument("--target", default="cpu", choices=sorted(TARGETS))
    exp.add_argument(
        "--shapes",
        action="append",
        default=[],
        metavar="NAME=DIMS[,NAME=DIMS]",
        help="input shapes to compile into the bundle, e.g. image=480x640x3 (repeatable; "
        "? marks a free dimension: the shape-generic executable); default: the model's own",
    )
    exp.add_argument("-o", "--output", required=True, help="the bundle directory")
    srv = sub.add_parser(
        "serve",
        help="serve a saved model, ONNX file or bundle over HTTP with Ray Serve: POST / an image"
        " -> the outputs (needs gdp[serve]; docs/serving.md)",
    )
    srv.add_argument("model", help="a file written by Model.save, an ONNX file or a bundle dir")
    srv.add_argument("--host", default="127.0.0.1")
    srv.add_argument("--port", type=int, default=8000)
    srv.add_argument("--replicas", type=int, default=1, help="copies of the model (default 1)")
    srv.add_argument("--replica-cpus", type=float, default=1.0, help="Ray CPUs a replica holds")
    srv.add_argument("--max-batch-size", type=int, default=8)
    srv.add_argument(
        "--batch-wait-ms",
        type=float,
        default=5.0,
        help="the longest a request waits for its batch to fill (default 5)",
    )
    srv.add_argument("--target", default=None, choices=sorted(TARGETS))
    srv.add_argument(
        "--max-pixels",
        type=int,
        default=50_000_000,
        help="images over this many pixels are refused from their header (default 50 Mpx)",
    )
    srv.add_argument("--max-body-bytes", type=int, default=256 * 2**20)
    srv.add_argument(
        "--channel-order",
        default="rgb",
        choices=["rgb", "bgr"],
        help="what decoded images are given to the model as (default rgb)",
    )
    srv.add_argument(
        "--address", default=None, help="join this Ray cluster (e.g. auto) instead of starting one"
    )
    srv.add_argument("--num-cpus", type=int, default=None, help="CPUs of a new local Ray")
    srv.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="where a new local Ray exports its and Serve's metrics (Prometheus)",
    )
    sub.add_parser(
        "bench",
        help="the side-by-side benchmark (needs a source checkout); "
        "options go to benchmarks/bench.py, or with --corpus to benchmarks/corpus.py "
        "(the public-API corpus beside TF, XLA and OpenCV), or with --shapes to "
        "benchmarks/shapes.py (shape-generic against per-shape compilation), or with --cv2 to "
        "benchmarks/cv2_functions.py (gdp.cv2 against OpenCV per function and size)",
    )
    args, rest = parser.parse_known_args(argv)
    if rest and args.command != "bench":
        parser.error(f"unrecognized arguments: {' '.join(rest)}")

    if args.command == "bench":
        name = "corpus.py" if "--corpus" in rest else "bench.py"
        name = "shapes.py" if "--shapes" in rest else name
        name = "cv2_functions.py" if "--cv2" in rest else name
        rest = [a for a in rest if a not in ("--corpus", "--shapes", "--cv2")]
        script = Path(__file__).resolve().parents[1] / "benchmarks" / name
        if not script.is_file():
            print(
                f"gdp: {script} not found: gdp bench runs from a source checkout", file=sys.stderr
            )
            return 2
        sys.argv = [str(script), *rest]
        runpy.run_path(str(script), run_name="__main__")
        return 0

    if args.command == "serve":
        return _serve(args)

    if args.command == "calibrate" and args.cv2:
        from gdp.cv2 import calibration

        sizes = [c for c in args.sizes.split(",") if c] or None
        try:
            found, path = calibration.calibrate(sizes, runs=args.runs)
        except ValueError as err:
            print(f"gdp: {err}", file=sys.stderr)
            return 2
        print(json.dumps(found, indent=1, sort_keys=True))
        print(f"stored in {path}", file=sys.stderr)
        return 0

    if args.command == "calibrate":
        from gdp.calibrate import calibrate
        from gdp.rewrites.profiles import profile_path

        try:
            profile = calibrate(args.target, runs=args.runs)
        except gdp.GdpError as err:
            print(f"gdp: {err}", file=sys.stderr)
            return 2
        print(profile.to_json())
        print(f"stored in {profile_path(args.target, default_cache_dir())}", file=sys.stderr)
        return 0

    if args.command == "export":
        try:
            # Exporting runs nothing: a gpu bundle is built on a machine without a GPU.
            model = gdp.compile(args.onnx, target=args.target, compile_only=True)
            path = model.export(args.output, shapes=args.shapes)
        except gdp.GdpError as err:
            print(f"gdp: {err}", file=sys.stderr)
            return 2
        from gdp.bundle import describe_bundle

        print(json.dumps(describe_bundle(path), indent=2))
        return 0

    if args.command == "info":
        info = {
            "gdp": gdp.__version__,
            "targets": {name: t.doc for name, t in TARGETS.items()},
            "backends": sorted(BACKENDS),
            "cache_dir": str(default_cache_dir()),
        }
        print(json.dumps(info, indent=2))
        return 0
    try:
        model = gdp.compile(args.onnx, target=args.target)
    except gdp.GdpError as err:
        print(f"gdp: {err}", file=sys.stderr)
        return 2
    print(json.dumps(model.report(), indent=2, default=str))
    return 0


def _serve(args: argparse.Namespace) -> int:
    for name in ("replicas", "max_batch_size", "max_pixels", "max_body_bytes"):
        if getattr(args, name) < 1:
            print(f"gdp serve: --{name.replace('_', '-')} must be >= 1", file=sys.stderr)
            return 2
    if args.batch_wait_ms < 0 or args.replica_cpus < 0:
        print("gdp serve: --batch-wait-ms and --replica-cpus must be >= 0", file=sys.stderr)
        return 2
    try:
        from gdp.serving import server
    except ModuleNotFoundError as err:
        print(f"gdp serve needs Ray Serve: pip install 'gdp[serve]' ({err})", file=sys.stderr)
        return 2
    try:
        server.run(
            args.model,
            host=args.host,
            port=args.port,
            replicas=args.replicas,
            replica_cpus=args.replica_cpus,
            max_batch_size=args.max_batch_size,
            batch_wait_ms=args.batch_wait_ms,
            target=args.target,
            max_pixels=args.max_pixels,
            max_body_bytes=args.max_body_bytes,
            channel_order=args.channel_order,
            address=args.address,
            num_cpus=args.num_cpus,
            metrics_port=args.metrics_port,
        )
    except gdp.GdpError as err:
        print(f"gdp serve: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
