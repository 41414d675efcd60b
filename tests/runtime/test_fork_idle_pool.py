"""Forks after TVM's thread pool has gone idle (issue 21, found through ray.init in issue 22).

An idle worker of TVM's pool sleeps on a condition variable; resetting a copy of that pool in a
forked child waited forever for the sleeper. Every fork that runs Python's at-fork handlers hung:
subprocess.Popen with a preexec_fn (ray.init's helpers), multiprocessing's fork. The scenario runs
in a process of its own, so that a hang is a failed test, not a stuck suite."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCENARIO = textwrap.dedent(
    """
    import os, subprocess, sys, time
    import numpy as np
    import tensorflow as tf
    import gdp

    @tf.function(input_signature=[tf.TensorSpec([480, 640, 3], tf.float32)])
    def affine(x):
        return x * 2.0 + 1.0

    model = gdp.compile(affine, target="cpu")
    x = np.linspace(0, 1, 480 * 640 * 3, dtype=np.float32).reshape(480, 640, 3)
    want = affine(x).numpy()
    np.testing.assert_allclose(model(x), want, rtol=1e-6)
    time.sleep(2)  # the pool's workers stop spinning and sleep
    subprocess.run(["/bin/true"], preexec_fn=lambda: None, check=True)
    print("preexec_fn fork returned", flush=True)
    time.sleep(2)
    pid = os.fork()
    if pid == 0:
        ok = np.allclose(model(x), want, rtol=1e-6)
        os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
    print("child ran the model", flush=True)
    np.testing.assert_allclose(model(x), want, rtol=1e-6)
    """
)


def test_forks_after_the_pool_went_idle_neither_hang_nor_fail(tmp_path):
    env = {"GDP_CACHE_DIR": str(tmp_path / "cache"), "TVM_NUM_THREADS": "2"}
    done = subprocess.run(
        [sys.executable, "-c", SCENARIO],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "preexec_fn fork returned" in done.stdout
    assert "child ran the model" in done.stdout
