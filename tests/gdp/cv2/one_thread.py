"""Run a check in a process of its own on one TVM thread: TVM sizes its pool once a process, so
a hand kernel's one-thread schedule cannot be tried in the test process itself."""

import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))


def run_on_one_thread(code: str) -> None:
    """Run `code` (Python, under GDP_CV2_STRICT=1) with TVM_NUM_THREADS=1; fail with its
    stderr if it fails."""
    script = 'import os\nos.environ["GDP_CV2_STRICT"] = "1"\n' + textwrap.dedent(code)
    env = dict(os.environ, TVM_NUM_THREADS="1", PYTHONPATH=ROOT)
    command = [sys.executable, "-c", script]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
