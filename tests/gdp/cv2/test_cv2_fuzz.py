"""A fuzz of gdp.cv2 against OpenCV (cv2_fuzz_cases.py): random calls of the accelerated
functions, valid and invalid, made on both; each seed's calls run in a child process, so a
crash is this test's failure. Fixed seeds: two here, six more under `-m slow`.

Regressions found by it (each with its own test in test_opencv_parity.py): uint8 blur's
rounding, depth pairs OpenCV refuses, cvtColor of channel counts OpenCV takes (slow seeds 2, 6)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def _fuzz(seed: int, calls: int) -> None:
    run = subprocess.run(
        [sys.executable, os.path.join(HERE, "cv2_fuzz_cases.py"), str(seed), str(calls)],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=HERE,
    )
    cases = [json.loads(ln[5:]) for ln in run.stdout.splitlines() if ln.startswith("CASE ")]
    assert run.returncode == 0 and cases, (
        f"the child died (rc {run.returncode}) in seed {seed}: {run.stderr[-3000:]}"
    )
    failures = cases[0]["failures"]
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("seed", [0, 1])
def test_random_calls_agree_with_opencv(seed):
    _fuzz(seed, 40)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(2, 8))
def test_more_random_calls_agree_with_opencv(seed):
    _fuzz(seed, 100)
