"""`gdp` on the command line: what is installed, and ahead-of-time compilation into the cache."""

from __future__ import annotations

import argparse
import json
import sys

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
    args = parser.parse_args(argv)

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


if __name__ == "__main__":
    sys.exit(main())
