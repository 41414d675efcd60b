"""gdp.runtime._strips (runtime/_strips.c): a kernel of several strips runs its range twin on
the calling thread and helper threads. Results against NumPy and OpenCV, at sizes that move
strip boundaries, on one and two threads, from two Python threads at once, in a forked child;
and the twin is made only for kernels whose strip loop is their last statement."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import cv2 as opencv
import numpy as np
import pytest

from gdp.runtime import launch, lut, nonzero
from gdp.runtime.backends.tvm import thread_pool


@pytest.fixture(params=[1, 2], ids=["1-thread", "2-threads"])
def threads(request):
    thread_pool.set_threads(request.param)
    yield request.param
    thread_pool.set_threads(0)


def test_the_pool_is_built_and_used():
    # `make install` builds it; without it every kernel of several strips runs on TVM's pool
    assert launch._strips is not None
    name, text = lut.threshold_source(0)
    image = np.arange(50_000, dtype=np.uint8)
    launch.run_strips(name, text, image, np.empty_like(image), 100, 200, 4)
    function, address = launch._ranged[text]
    assert address == function.__chandle__()
    # the pool itself runs it (a False here would send every kernel back to TVM's pool, and
    # every result test would still pass)
    out = np.zeros_like(image)
    assert launch._strips.run(address, (image, out, 100, 200, 4)) is True
    np.testing.assert_array_equal(out, np.where(image > 100, 200, 0))


KERNEL = """
@T.prim_func
def copy(img_handle: T.handle, out_handle: T.handle, strips: T.int32):
    T.func_attr({"global_symbol": "copy", "tir.noalias": True})
    n = T.int32()
    img = T.match_buffer(img_handle, (n,), "uint8", align=1)
    out = T.match_buffer(out_handle, (n,), "uint8", align=1)
    per_strip = n // strips
    for s in T.parallel(strips):
        for i in range(per_strip * s, T.if_then_else(s == strips - 1, n, per_strip * (s + 1))):
            out[i] = img[i]
"""


def test_a_twin_runs_a_range_of_strips_and_only_where_the_loop_is_the_last_statement():
    name, twin = launch.range_twin("copy", KERNEL)
    assert name == "copy_range" and "T.parallel(" not in twin
    assert "strips: T.int32, strip_first: T.int32, strip_last: T.int32" in twin
    assert (
        launch.range_twin(
            "copy", KERNEL.replace("    per_strip =", "    out[0] = 1\n    per_strip =")
        )
        is None
    )
    assert launch.range_twin("copy", KERNEL + "    out[0] = img[0]\n") is None
    two_loops = KERNEL.replace("for i in range", "for i in T.parallel")
    assert launch.range_twin("copy", two_loops) is None


def test_the_twin_of_a_kernel_copies_every_strip(threads):
    image = np.random.default_rng(1).integers(0, 256, 1_000_003, dtype=np.uint8)
    for strips in (2, 5, 16, 257):
        out = np.zeros_like(image)
        launch.run_strips("copy", KERNEL, image, out, strips)
        np.testing.assert_array_equal(out, image, f"{strips} strips")
    assert launch._ranged[KERNEL] is not None


def test_threshold_and_count_match_numpy_where_strip_boundaries_move(threads):
    rng = np.random.default_rng(2)
    name, text = lut.threshold_source(0)
    for size in (100_003, 2_000_000, 2_000_064, 2_001_001):
        image = rng.integers(0, 256, size, dtype=np.uint8)
        image[rng.integers(0, size, size // 3)] = 0
        for strips in (2, 3, 16, 31, 64):
            out = np.empty_like(image)
            launch.run_strips(name, text, image, out, 100, 200, strips)
            np.testing.assert_array_equal(out, np.where(image > 100, 200, 0), f"{size} {strips}")
        assert nonzero.count_non_zero(image) == np.count_nonzero(image)


def test_a_kernel_with_loops_bounded_by_its_strip_matches_opencv(threads):
    # HSV2BGR runs rows [h * s // strips, h * (s + 1) // strips): its twin wrote strip 0's
    # rows for every strip where the strip loop started at strip_first (TVM 0.27)
    import gdp.cv2 as cv2

    rng = np.random.default_rng(3)
    for h, w in ((1080, 1920), (1091, 1000)):
        hsv = opencv.cvtColor(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), opencv.COLOR_BGR2HSV)
        got = cv2.cvtColor.gdp(hsv, opencv.COLOR_HSV2BGR)
        np.testing.assert_array_equal(got, opencv.cvtColor(hsv, opencv.COLOR_HSV2BGR))


def test_read_only_inputs_and_numpy_scalars_are_passed():
    name, text = lut.threshold_source(0)
    image = np.random.default_rng(4).integers(0, 256, 2_000_000, dtype=np.uint8)
    image.flags.writeable = False
    out = np.empty_like(image)
    launch.run_strips(name, text, image, out, np.uint8(100), np.int64(200), 8)
    np.testing.assert_array_equal(out, np.where(image > 100, 200, 0))


def test_an_argument_the_kernel_refuses_raises_tvms_error():
    name, text = lut.threshold_source(0)
    wrong = np.zeros(100_000, np.float32)
    with pytest.raises(Exception, match="uint8|dtype"):
        launch.run_strips(name, text, wrong, np.empty(100_000, np.uint8), 1, 2, 4)


def test_two_python_threads_at_once_each_get_their_answer():
    name, text = lut.threshold_source(0)
    rng = np.random.default_rng(5)
    images = [rng.integers(0, 256, 3_000_000 + k, dtype=np.uint8) for k in range(4)]
    wrong = []

    def run(image, thresh):
        for _ in range(20):
            out = np.empty_like(image)
            launch.run_strips(name, text, image, out, thresh, 255, 16)
            if not np.array_equal(out, np.where(image > thresh, 255, 0)):
                wrong.append(thresh)

    workers = [threading.Thread(target=run, args=(im, 50 * k)) for k, im in enumerate(images)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not wrong


FORKED = textwrap.dedent(
    """
    import os
    import numpy as np
    from gdp.runtime import launch, lut
    name, text = lut.threshold_source(0)
    image = np.random.default_rng(6).integers(0, 256, 3_000_000, dtype=np.uint8)
    want = np.where(image > 9, 255, 0)
    out = np.empty_like(image)
    launch.run_strips(name, text, image, out, 9, 255, 16)
    assert np.array_equal(out, want)
    pid = os.fork()
    if pid == 0:
        out = np.zeros_like(image)
        launch.run_strips(name, text, image, out, 9, 255, 16)
        os._exit(0 if np.array_equal(out, want) else 3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
    print("child ran its strips", flush=True)
    """
)


def test_a_forked_child_runs_strips_on_helpers_of_its_own(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", FORKED],
        env={**os.environ, "GDP_CACHE_DIR": str(tmp_path / "cache"), "TVM_NUM_THREADS": "2"},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "child ran its strips" in done.stdout
