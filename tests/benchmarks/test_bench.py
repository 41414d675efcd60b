"""The benchmark runs end to end and writes its JSON and markdown (speed itself is not tested)."""

import json
import subprocess
import sys

import pytest

from tests import ROOT


@pytest.mark.slow  # 33 s on 2 cores: every workload compiled and run against its peers
def test_gdp_bench_writes_json_and_markdown(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gdp.cli",
            "bench",
            "--runs",
            "1",
            "--only",
            "tone",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads((tmp_path / "bench.json").read_text())
    assert result["copy_bandwidth_Bps"] > 0
    (row,) = result["rows"]
    assert row["workload"] == "tone" and set(row["peers"]) == {
        "gdp fp32",
        "gdp fp16",
        "OpenCV/NumPy",
    }
    assert row["roofline_ms"] > 0 and row["speedup"]["OpenCV/NumPy"] > 0
    assert "| tone |" in (tmp_path / "bench.md").read_text()
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
