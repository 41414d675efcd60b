"""gdp.runtime.launch: a kernel of one strip runs its serial twin (its parallel loops as plain
ones, on the calling thread) and gives what the parallel kernel gives, against NumPy; small work
is one strip, larger work its module's strips."""

from __future__ import annotations

import numpy as np

from gdp.runtime import launch, lut, moments
from gdp.runtime.backends.tvm import kernels


def test_the_twin_has_no_parallel_loop_and_a_name_of_its_own():
    name, text = lut.threshold_source(0)
    twin_name, twin = launch.serial_twin(name, text)
    assert "T.parallel(" in text and "T.parallel(" not in twin
    assert twin.replace("range(", "") == text.replace("T.parallel(", "").replace("range(", "")
    assert twin_name == f"{name}_serial"
    assert launch.serial_twin(name, text) is launch.serial_twin(name, text)  # made once


def test_one_strip_runs_the_twin_and_both_match_numpy():
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, 100_003, dtype=np.uint8)
    want = np.where(image > 100, 200, 0).astype(np.uint8)
    name, text = lut.threshold_source(0)
    for strips in (1, 2, 3, 7):
        out = np.empty_like(image)
        launch.run_strips(name, text, image, out, 100, 200, strips)
        np.testing.assert_array_equal(out, want, err_msg=f"{strips} strips")
    assert (f"{name}_serial", launch.serial_twin(name, text)[1]) in kernels._loaded


def test_small_work_is_one_strip_and_large_work_the_modules(monkeypatch):
    assert launch.strips_for(launch.SERIAL_BYTES, 5) == 1
    assert launch.strips_for(launch.SERIAL_BYTES + 1, 5) == 5
    assert launch.alone(launch.SERIAL_BYTES) and not launch.alone(launch.SERIAL_BYTES + 1)
    # sums of 3-channel images on both sides of the limit, and with every size split
    rng = np.random.default_rng(1)
    for pixels in (launch.SERIAL_BYTES // 3 - 7, launch.SERIAL_BYTES // 3 + 7):
        image = rng.integers(0, 256, (pixels, 1, 3), dtype=np.uint8)
        want = image.reshape(-1, 3).sum(axis=0, dtype=np.int64)
        np.testing.assert_array_equal(moments.channel_sums(image), want)
        monkeypatch.setattr(launch, "SERIAL_BYTES", 0)
        np.testing.assert_array_equal(moments.channel_sums(image), want)
        monkeypatch.undo()
