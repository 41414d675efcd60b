"""Count the corpus: programs, and those marked with a known issue, per family and mode.

python -m tests.corpus                 # the registry's counts (no compiling)
python -m tests.corpus --run [--modes cpu,reference,fp16] [--only a,b] [--family f]
                                       # run them, print each result and what disagrees
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import sys
import tempfile
import time
import traceback

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# A private compile cache: a run checks what compiles now, not what an older gdp left. Removed
# at exit (where this run made it).
if "GDP_CACHE_DIR" not in os.environ:
    os.environ["GDP_CACHE_DIR"] = tempfile.mkdtemp(prefix="gdp-corpus-")
    atexit.register(shutil.rmtree, os.environ["GDP_CACHE_DIR"], ignore_errors=True)


def counts(programs, modes) -> str:
    families = sorted({p.family for p in programs})
    head = "| family | programs | " + " | ".join(f"{m} marked" for m in modes) + " |"
    lines = [head, "| --- | ---: | " + " | ".join("---:" for _ in modes) + " |"]
    total = [0] * (len(modes) + 1)
    for family in [*families, None]:
        group = [p for p in programs if family is None or p.family == family]
        row = [len(group)]
        for m in modes:
            applicable = [p for p in group if m != "fp16" or p.fp16]
            row.append(sum(bool(p.issue(m)) for p in applicable))
        label = family or "**all**"
        cells = [str(row[0])] + [
            f"{marked} of {len([p for p in group if m != 'fp16' or p.fp16])}"
            for m, marked in zip(modes, row[1:], strict=True)
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
        if family is not None:
            total = [a + b for a, b in zip(total, row, strict=True)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.corpus", description=__doc__)
    parser.add_argument("--run", action="store_true", help="compile and check (slow)")
    parser.add_argument("--modes", default="cpu,reference,fp16")
    parser.add_argument("--only", default="", help="program names, comma-separated")
    parser.add_argument("--family", default="")
    parser.add_argument("--json", default="", help="write the results here")
    args = parser.parse_args(argv)

    from tests.corpus import MODES, PROGRAMS

    programs = [
        p
        for p in PROGRAMS
        if (not args.only or p.name in args.only.split(","))
        and (not args.family or p.family in args.family.split(","))
    ]
    if not args.run:
        print(f"{len(programs)} programs; marked = a known issue, run as a strict xfail\n")
        print(counts(programs, MODES))
        for p in programs:
            for m in MODES:
                if p.issue(m) and (m != "fp16" or p.fp16):
                    print(f"- {p.name} [{m}]: {p.issue(m)}")
        return 0

    from tests.corpus.check import problems

    results = []
    for p in programs:
        for mode in args.modes.split(","):
            if mode == "fp16" and not p.fp16:
                continue
            t0 = time.perf_counter()
            measured: dict = {}
            try:
                found = problems(p, mode, measured)
                status = "fail" if found else "pass"
                detail = "; ".join(found)
            except Exception as err:  # a report: every failure is listed
                status = "error"
                detail = f"{type(err).__name__}: {str(err)[:400]}"
                if not hasattr(err, "__module__") or not type(err).__module__.startswith("gdp"):
                    detail += " | " + traceback.format_exc(limit=-2).replace("\n", " ")[-400:]
            expected = "marked" if p.issue(mode) else "unmarked"
            seconds = time.perf_counter() - t0
            results.append(
                {
                    "name": p.name,
                    "family": p.family,
                    "mode": mode,
                    "status": status,
                    "detail": detail,
                    "marked": p.issue(mode),
                    "seconds": round(seconds, 1),
                    "errors": measured,
                }
            )
            errs = " ".join(f"{k}={v:.2g}" for k, v in measured.items())
            print(
                f"{p.name:36s} {mode:10s} {status:5s} ({expected}, {seconds:.1f} s)",
                errs,
                detail,
                flush=True,
            )
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
