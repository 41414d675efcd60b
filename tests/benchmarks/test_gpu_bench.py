"""benchmarks/gpu.py's host side (its GPU side ran on an H200: benchmarks/results/gpu.md): the
samples' peers taken out of their source without TensorFlow are the samples' own, and the
report is written from a run's JSON."""

import importlib
import json
import subprocess
import sys

import numpy as np
import pytest

from tests import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu  # benchmarks/gpu.py


@pytest.mark.parametrize("name", gpu.WORKLOADS)
def test_sample_parts_need_no_tensorflow_and_are_the_samples_own(name):
    parts = gpu.sample_parts(name)
    module = importlib.import_module(name)
    for fn in ("inputs", "peer", "check", "bytes_moved"):
        assert getattr(parts, fn).__code__.co_code == getattr(module, fn).__code__.co_code
    assert "tf" not in vars(parts) and "gdp" not in vars(parts)


def test_sample_parts_compute_the_samples_peer():
    parts = gpu.sample_parts("dnn_letterbox")
    module = importlib.import_module("dnn_letterbox")
    bgr = np.random.default_rng(0).integers(0, 256, (108, 192, 3), dtype=np.uint8)
    np.testing.assert_array_equal(parts.peer(bgr)["tensor"], module.peer(bgr)["tensor"])


def test_the_report_is_written_from_a_runs_json(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "gpu.py"),
            "report",
            str(ROOT / "benchmarks" / "results" / "gpu.json"),
            "--results",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    table = (tmp_path / "gpu.md").read_text()
    data = json.loads((tmp_path / "gpu.json").read_text())
    for workload in data["workloads"]:
        assert f"| {workload['name']} | ok |" in table
    assert (tmp_path / "gpu.png").stat().st_size > 0
