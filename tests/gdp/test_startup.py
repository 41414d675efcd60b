"""A quiet start-up (gdp.startup): a program that imports gdp and then TensorFlow prints none of
TensorFlow's start-up notices (CUDA stubs, cuInit, absl, oneDNN) on stderr, and keeps what else
is written there; the user's own TF_CPP_MIN_LOG_LEVEL wins."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gdp.startup import drop_notices, is_notice

ROOT = Path(__file__).resolve().parents[2]

# Lines TensorFlow 2.21 (tensorflow-cpu) printed on this project's machine, without a GPU.
NOTICES = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n",
    "I0000 00:00:1795452383.331106   24083 cudart_stub.cc:31] Could not find cuda drivers on your"
    " machine, GPU will not be used.\n",
    "I0000 00:00:1795452496.694314   26564 cpu_feature_guard.cc:227] This TensorFlow binary is"
    " optimized to use available CPU instructions in performance-critical operations.\n",
    "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow with"
    " the appropriate compiler flags.\n",
    "E0000 00:00:1795452387.277690   24083 cuda_platform.cc:52] failed call to cuInit: INTERNAL:"
    " CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)\n",
    "2023-08-25 11:11:47.546940: I tensorflow/tsl/cuda/cudart_stub.cc:28] Could not find cuda"
    " drivers on your machine, GPU will not be used.\n",
    "2025-09-17 14:44:05.176998: E external/local_xla/xla/stream_executor/cuda/cuda_fft.cc:467]"
    " Unable to register cuFFT factory: Attempting to register factory for plugin cuFFT when one"
    " has already been registered\n",
]
# What is not a start-up notice stays: an error of the program's, a Python warning.
KEPT = [
    "E0000 00:00:1795452387.277690   24083 op_kernel.cc:1857] OP_REQUIRES failed at"
    " strided_slice_op.cc:117 : INVALID_ARGUMENT: slice index 5 out of bounds\n",
    "/x/y.py:3: UserWarning: something the user should see\n",
    "Traceback (most recent call last):\n",
]


def run(code: str, env: dict | None = None, path: str | None = None):
    environ = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    environ["PYTHONPATH"] = os.pathsep.join(p for p in (path, str(ROOT)) if p)
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=environ,
        timeout=300,
    )


WARNING = (
    "W0000 00:00:1795452383.331106   24083 gpu_device.cc:2344] Cannot dlopen some GPU libraries.\n"
)


def test_notices_are_dropped_and_everything_else_kept():
    assert all(is_notice(line) for line in NOTICES)
    assert not any(is_notice(line) for line in KEPT)
    mixed = [NOTICES[0], KEPT[0], NOTICES[1], KEPT[1], NOTICES[4], KEPT[2]]
    assert drop_notices("".join(mixed)) == "".join(KEPT)
    # A warning is a notice at level 2 (errors only), kept where the user asked for warnings.
    assert is_notice(WARNING, level=2) and not is_notice(WARNING, level=1)
    assert drop_notices(WARNING + NOTICES[1], level=1) == WARNING


def test_gdp_then_tensorflow_compiles_without_startup_notices():
    done = run(
        """
        import os
        import numpy as np
        import gdp
        import tensorflow as tf

        print(os.environ["TF_CPP_MIN_LOG_LEVEL"])  # (tf2onnx's convert sets 3 when imported)

        @tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.uint8, name="image")])
        def double(image):
            return {"out": tf.cast(image, tf.float32) * 2.0}

        model = gdp.compile(double, target="reference")
        print(float(model(np.full((2, 3, 3), 7, np.uint8)).sum()))
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "252.0"]
    # Nothing at all on stderr: no notice of TensorFlow's, CUDA's or absl's.
    assert done.stderr == "", done.stderr


def test_the_op_library_imports_tensorflow_quietly():
    """gdp.ops' modules import TensorFlow at their top: the first import of the process."""
    done = run(
        """
        import sys
        import gdp.ops.color
        print("tensorflow" in sys.modules)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True"]
    assert done.stderr == "", done.stderr


# What the stand-in `tensorflow` writes on fd 2 while it imports.
WRITTEN = [NOTICES[0], NOTICES[1], KEPT[0], NOTICES[3], KEPT[1]]


@pytest.fixture
def fake_tensorflow(tmp_path) -> str:
    """A directory holding a stand-in `tensorflow` that writes notices and other lines on fd 2
    while it imports and lists its devices."""
    fake = tmp_path / "tensorflow"
    fake.mkdir()
    lines = WRITTEN
    (fake / "__init__.py").write_text(
        textwrap.dedent(
            f"""
            import os
            for line in {lines!r}:
                os.write(2, line.encode())

            class config:
                @staticmethod
                def list_physical_devices():
                    os.write(2, {NOTICES[4]!r}.encode())
                    return []

            VALUE = 42
            """
        )
    )
    return str(tmp_path)


def test_the_import_keeps_other_stderr_output(fake_tensorflow):
    """The notices go, the rest comes through in order, the module works."""
    done = run(
        """
        import gdp
        import tensorflow
        print(tensorflow.VALUE, tensorflow.__loader__.__class__.__name__)
        """,
        path=fake_tensorflow,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["42", "SourceFileLoader"]
    assert done.stderr == KEPT[0] + KEPT[1]


@pytest.mark.parametrize("level", ["0", "1", "3"])
def test_the_users_log_level_wins(fake_tensorflow, level):
    """A level the user set is kept; asked for every log (0), nothing is filtered."""
    code = "import os, gdp, tensorflow; print(os.environ['TF_CPP_MIN_LOG_LEVEL'])"
    done = run(code, env={"TF_CPP_MIN_LOG_LEVEL": level}, path=fake_tensorflow)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [level]
    assert done.stderr == ("".join(WRITTEN) if level == "0" else KEPT[0] + KEPT[1])
