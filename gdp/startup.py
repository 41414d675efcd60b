"""A quiet TensorFlow start-up.

TensorFlow's first import prints notices on stderr that say nothing about the program: the CUDA
stubs' "Could not find cuda drivers", absl's "All log messages before absl::InitializeLog()", the
oneDNN and CPU-instruction notices, and the `cuInit` failure when it first lists its devices.
TF_CPP_MIN_LOG_LEVEL hides only some of them (the stubs log before TensorFlow reads it).

`quiet_tensorflow()` (called by `import gdp`) arranges that the first `import tensorflow` in the
process, gdp's own (front ends, gdp.ops, gdp.cv2) or the program's after `import gdp`, runs with
TF_CPP_MIN_LOG_LEVEL defaulted to 2 (errors only; a value the user set wins) and, unless that
level is 0 (everything asked for), with its start-up notices taken out of what it writes on
stderr meanwhile; every other line it writes there (a warning, an error) is written back
unchanged when the import ends.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import os
import re
import sys
import tempfile
import threading

LOG_LEVEL = "TF_CPP_MIN_LOG_LEVEL"
DEFAULT_LOG_LEVEL = "2"

# TensorFlow's and XLA's C++ log lines, absl's ("I0000 00:00:1795452489.067779 123 f.cc:31] ...",
# its seconds since the epoch before absl is initialised) and
# TF's own ("2025-01-01 12:00:00.000: I file.cc:31] ..."), with their severity letter.
_CPP_LOG = re.compile(
    r"^(?:(?P<a>[IWEF])\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ "
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: (?P<b>[IWEF]) )"
)
# The errors that only say CUDA is absent (tensorflow-cpu on a machine without a GPU driver).
_NO_CUDA = re.compile(r"cuInit|cuda_platform|cudart_stub|Unable to register cu(?:DNN|FFT|BLAS)")


def is_notice(line: str, level: int = 2) -> bool:
    """Whether a line TensorFlow wrote on stderr while starting is one of its start-up notices
    under TF_CPP_MIN_LOG_LEVEL `level`: an info line (level 1 and up), a warning (2 and up), an
    error that only says CUDA is absent, absl's banner, the CPU-instruction notice."""
    if line.startswith("WARNING: All log messages before absl::InitializeLog()"):
        return True
    if line.startswith("To enable the following instructions:"):  # cpu_feature_guard's 2nd line
        return True
    log = _CPP_LOG.match(line)
    if log is None:
        return False
    severity = log.group("a") or log.group("b")
    if severity == "E":
        return bool(_NO_CUDA.search(line))
    return severity == "I" or (severity == "W" and level >= 2)


def drop_notices(text: str, level: int = 2) -> str:
    """`text` without TensorFlow's start-up notices, every other line kept in order."""
    lines = text.splitlines(keepends=True)
    return "".join(line for line in lines if not is_notice(line, level))


@contextlib.contextmanager
def _filtered_stderr(level: int):
    """Collect what is written on file descriptor 2 (C++ and Python alike) and write it back
    without TensorFlow's start-up notices."""
    try:
        saved = os.dup(2)
    except OSError:  # no stderr at all: nothing to keep quiet
        yield
        return
    with tempfile.TemporaryFile(mode="w+b") as sink:
        sys.stderr.flush()
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            kept = drop_notices(sink.read().decode(errors="replace"), level)
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()


class _QuietLoader(importlib.abc.Loader):
    """TensorFlow's own loader, run with its start-up notices filtered; its device listing (the
    cuInit call) is made inside, so that its failure notice is filtered too."""

    def __init__(self, inner: importlib.abc.Loader) -> None:
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module) -> None:
        spec = module.__spec__
        # The module is TensorFlow's, loaded by its own loader.
        module.__loader__ = spec.loader = self.inner
        try:
            level = int(os.environ.setdefault(LOG_LEVEL, DEFAULT_LOG_LEVEL))
        except ValueError:
            level = int(DEFAULT_LOG_LEVEL)  # not a number: filtered as at the default
        if level <= 0:
            self.inner.exec_module(module)  # the user asked for all of TensorFlow's logs
            return
        with _filtered_stderr(level):
            self.inner.exec_module(module)
            with contextlib.suppress(Exception):  # a TensorFlow without tf.config: not ours
                module.config.list_physical_devices()


class _Finder(importlib.abc.MetaPathFinder):
    """Finds `tensorflow` through the other finders and gives it the quiet loader."""

    _busy = threading.local()

    def find_spec(self, name, path, target=None):
        if name != "tensorflow" or "tensorflow" in sys.modules or getattr(self._busy, "on", False):
            return None
        self._busy.on = True
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
        finally:
            self._busy.on = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _QuietLoader(spec.loader)
        return spec


_finder = _Finder()


def quiet_tensorflow() -> None:
    """Make the process's first `import tensorflow` quiet (see the module's doc). Idempotent; does
    nothing where TensorFlow is imported already."""
    if "tensorflow" in sys.modules or _finder in sys.meta_path:
        return
    sys.meta_path.insert(0, _finder)


__all__ = ["drop_notices", "is_notice", "quiet_tensorflow"]
