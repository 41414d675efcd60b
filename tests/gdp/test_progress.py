"""gdp.progress: a bar on a terminal once the work has run 2 s, nothing when stderr is not one."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import textwrap

from tests import ROOT

WORK = """
import time
from gdp.progress import progress, write
for i in progress(range(3), desc="compiling", unit="shape"):
    time.sleep({pause})
    write(f"done {{i}}")
"""


def run(pause: float, terminal: bool) -> tuple[str, str]:
    """The work's (stdout, stderr), stderr a pipe or a terminal of 100x30."""
    code = textwrap.dedent(WORK.format(pause=pause))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if not terminal:
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
        )
        assert done.returncode == 0, done.stderr
        return done.stdout, done.stderr
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=child, env=env, text=True
    )
    os.close(child)
    out, _ = proc.communicate(timeout=120)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # the terminal's other end is closed: all read
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    assert proc.returncode == 0
    return out, b"".join(chunks).decode(errors="replace")


def test_a_bar_on_a_terminal_after_two_seconds():
    out, err = run(pause=1.2, terminal=True)
    assert out.split("\n")[:3] == ["done 0", "done 1", "done 2"]
    assert "compiling:" in err and "3/3" in err


def test_nothing_when_stderr_is_not_a_terminal():
    out, err = run(pause=1.2, terminal=False)
    assert out.split() == ["done", "0", "done", "1", "done", "2"]
    assert err == ""


def test_no_bar_for_work_under_two_seconds():
    out, err = run(pause=0.01, terminal=True)
    assert out.split() == ["done", "0", "done", "1", "done", "2"]
    assert "compiling" not in err
