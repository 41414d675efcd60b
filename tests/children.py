"""Test code run in a child Python, so that a crash there (gdp's, TVM's, OpenCV's) is the test's
failure, not a lost test run: `run_child` for a snippet that prints one JSON line, `run_cases`
for the fuzz scripts (`*_fuzz_cases.py`) that print a `CASE {json}` line per seed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests import ROOT


def _env(cache_dir: Path | None) -> dict:
    return dict(os.environ, **({"GDP_CACHE_DIR": str(cache_dir)} if cache_dir else {}))


def run_child(code: str, cache_dir: Path, *args: str) -> dict:
    """Run `code` in a fresh Python with its own cache dir; return its last line, parsed."""
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=_env(cache_dir),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_cases(
    script: Path, args: list, seeds: list[int], cache_dir: Path | None = None
) -> list[dict]:
    """The CASE lines `script ARGS...` printed; a failure unless it ended well with one for
    every seed of `seeds`. Without `cache_dir` the child shares this process's cache."""
    run = subprocess.run(
        [sys.executable, str(script), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=1800,
        env=_env(cache_dir),
        cwd=ROOT,
    )
    cases = [json.loads(ln[5:]) for ln in run.stdout.splitlines() if ln.startswith("CASE ")]
    lost = [s for s in seeds if s not in {c["seed"] for c in cases}]
    assert run.returncode == 0 and not lost, (
        f"the child died (rc {run.returncode}) before seeds {lost}: {run.stderr[-3000:]}"
    )
    return cases
