"""`gdp serve`: its options reach gdp.serving.run, bad ones are refused before anything
starts; and (slow) the real command in its own process, over HTTP, stopped by SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import gdp
from gdp import cli
from gdp.serving import codec, server
from tests.serving import helpers


def test_serve_options_reach_the_server(monkeypatch, tmp_path):
    got = {}
    monkeypatch.setattr(server, "run", lambda model, **kw: got.update(model=model, **kw))
    rc = cli.main(
        [
            "serve",
            str(tmp_path / "m.onnx"),
            "--port",
            "8123",
            "--replicas",
            "3",
            "--max-batch-size",
            "16",
            "--batch-wait-ms",
            "2.5",
            "--target",
            "reference",
            "--max-pixels",
            "1000",
            "--channel-order",
            "bgr",
        ]
    )
    assert rc == 0
    assert got["model"] == str(tmp_path / "m.onnx")
    assert (got["port"], got["replicas"], got["max_batch_size"]) == (8123, 3, 16)
    assert (got["batch_wait_ms"], got["target"], got["max_pixels"]) == (2.5, "reference", 1000)
    assert (got["host"], got["channel_order"], got["address"]) == ("127.0.0.1", "bgr", None)


def test_serve_refuses_bad_options_and_a_missing_model(tmp_path, capsys):
    assert cli.main(["serve", "m.onnx", "--replicas", "0"]) == 2
    assert "--replicas must be >= 1" in capsys.readouterr().err
    assert cli.main(["serve", "m.onnx", "--batch-wait-ms", "-1"]) == 2
    missing = tmp_path / "none.onnx"
    assert cli.main(["serve", str(missing)]) == 2  # refused before Ray starts
    err = capsys.readouterr().err
    assert "none.onnx" in err and "no such file" in err


@pytest.mark.slow
def test_gdp_serve_end_to_end(tmp_path):
    import httpx

    path = tmp_path / "preprocess.onnx"
    model = gdp.compile(helpers.preprocess_graph(), target="cpu")
    model.save(path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    gdp_cli = [sys.executable, "-m", "gdp.cli"]
    proc = subprocess.Popen(
        [*gdp_cli, "serve", str(path), "--port", str(port), "--num-cpus", "2"],
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 180
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            while True:
                if proc.poll() is not None:
                    pytest.fail(f"gdp serve exited with {proc.returncode}: {proc.stdout.read()}")
                try:
                    if http.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "gdp serve did not come up"
                time.sleep(0.5)
            rgb = helpers.photos()[2]
            data = helpers.encode(rgb)
            response = http.post("/", content=data, headers={"accept": "application/json"})
            assert response.status_code == 200, response.text
            got = codec.decode_outputs(response.content, response.headers["content-type"])
            np.testing.assert_allclose(
                got["tensor"], model(helpers.decode(data)), rtol=0, atol=1e-6
            )
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
