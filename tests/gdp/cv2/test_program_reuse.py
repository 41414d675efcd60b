"""One gdp.cv2 program per function, dtype, channel count and structural parameters (issue 19):
values (thresholds, warp matrices, alpha/beta, Gaussian weights) are run-time inputs and the image
size is free, every result still OpenCV's; programs persist across processes through the disk
cache, and neither `import gdp.cv2` nor a call on a cached program imports TensorFlow."""

import json
import os
import subprocess
import sys
import textwrap

import cv2 as real
import numpy as np
import pytest

import gdp.cv2 as cv2
from gdp.cv2 import engine, kernels
from tests.conformance.core import REL_1E5, bound, max_error
from tests.gdp.cv2.programs_only import programs_only

SIZES = [(17, 23), (40, 31), (9, 64)]


@pytest.fixture(autouse=True)
def _programs(monkeypatch):
    """The compiled programs, as other targets run them: on the cpu target, eager calls of some
    functions run gdp.runtime's hand kernels instead, which compile no program (where
    gdp.cv2.common.on_host says so; their tests are tests/gdp/cv2/test_*_kernel*.py)."""

    programs_only(monkeypatch)


def _image(shape, dtype=np.uint8, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return (rng.random(shape) * 300 - 20).astype(dtype)
    return rng.integers(0, 256, shape, dtype=dtype)


def _programs_made(call) -> int:
    before = cv2.cache_info().programs
    call()
    return cv2.cache_info().programs - before


def test_one_threshold_program_serves_every_size_and_value():
    cv2.clear_cache()
    for i, (h, w) in enumerate(SIZES):
        for thresh in (0, 77.5, 128, 254.9):
            image = _image((h, w, 3), seed=i)
            got = cv2.threshold(image, thresh, 200, cv2.THRESH_BINARY_INV)
            want = real.threshold(image, thresh, 200, real.THRESH_BINARY_INV)
            assert got[0] == want[0]
            np.testing.assert_array_equal(got[1], want[1])
    info = cv2.cache_info()
    assert info.programs == 1
    assert info.hits == len(SIZES) * 4 - 1
    # another channel count is another program
    assert _programs_made(lambda: cv2.threshold(_image((5, 6)), 9, 255, 0)) == 1


def test_one_warp_program_serves_every_matrix_and_source_size():
    cv2.clear_cache()
    for i, (h, w) in enumerate(SIZES):
        image = _image((h, w, 3), np.float32, seed=i)
        for angle, scale in ((0.0, 1.0), (17.0, 0.8), (-133.0, 1.3)):
            matrix = real.getRotationMatrix2D((w / 2, h / 2), angle, scale)
            matrix[:, 2] += (1.5, -2.25)

            def call(m, image=image, matrix=matrix):
                return m.warpAffine(image, matrix, (29, 21), borderMode=m.BORDER_REPLICATE)

            got, want = call(cv2), call(real)
            assert got.shape == want.shape and got.dtype == want.dtype
            assert max_error(got, want, REL_1E5) <= bound(REL_1E5), (h, w, angle)
    assert cv2.cache_info().programs == 1
    # WARP_INVERSE_MAP only changes the matrix given: the same program
    image = _image((12, 10, 3), np.float32)
    matrix = np.float32([[0.9, 0.1, 1.0], [-0.2, 1.1, -3.0]])
    flags = real.INTER_LINEAR | real.WARP_INVERSE_MAP
    got = cv2.warpAffine(image, matrix, (29, 21), flags=flags, borderMode=cv2.BORDER_REPLICATE)
    want = real.warpAffine(image, matrix, (29, 21), flags=flags, borderMode=real.BORDER_REPLICATE)
    assert max_error(got, want, REL_1E5) <= bound(REL_1E5)
    assert cv2.cache_info().programs == 1


def test_alpha_beta_and_gaussian_sigma_are_run_time_inputs():
    cv2.clear_cache()
    image = _image((19, 26, 3))
    floats = _image((19, 26, 3), np.float32)
    for alpha, beta in ((1.0, 0.0), (0.3, -7.0), (-2.7, 100.25)):
        np.testing.assert_array_equal(
            cv2.convertScaleAbs(image, alpha=alpha, beta=beta),
            real.convertScaleAbs(image, alpha=alpha, beta=beta),
        )
        np.testing.assert_array_equal(
            cv2.convertScaleAbs(floats, alpha=alpha, beta=beta),
            real.convertScaleAbs(floats, alpha=alpha, beta=beta),
        )
        np.testing.assert_array_equal(
            cv2.addWeighted(image, alpha, image[::-1].copy(), beta, 2.5),
            real.addWeighted(image, alpha, image[::-1].copy(), beta, 2.5),
        )
    assert cv2.cache_info().programs == 3
    cv2.clear_cache()
    # sigma <= 0 takes OpenCV's fixed table; explicit sigmas compute the weights
    for i, (h, w) in enumerate(SIZES):
        image = _image((h, w, 3), seed=i)
        for sigma_x, sigma_y in ((0, 0), (0.6, 0), (1.9, 0.7), (25.0, 3.0)):
            np.testing.assert_array_equal(
                cv2.GaussianBlur(image, (7, 5), sigma_x, sigmaY=sigma_y),
                real.GaussianBlur(image, (7, 5), sigma_x, sigmaY=sigma_y),
            )
    assert cv2.cache_info().programs == 1
    # an image no larger than the kernel reflects its border more than once: its own program
    tiny = _image((4, 3, 3))
    assert _programs_made(lambda: cv2.GaussianBlur(tiny, (7, 5), 1.0)) == 1
    np.testing.assert_array_equal(
        cv2.GaussianBlur(tiny, (7, 5), 1.0), real.GaussianBlur(tiny, (7, 5), 1.0)
    )


def test_host_kernels_are_gdp_ops_kernels():
    """gdp.cv2 computes Gaussian weights, Canny thresholds and inverse warps on the host with
    copies of gdp.ops's NumPy code (gdp.ops imports TensorFlow): they must stay the same."""
    from gdp.cv2 import filters, geometry
    from gdp.ops import filters as F
    from gdp.ops import geometry as G
    from gdp.ops import image as I

    for n in (1, 3, 5, 7, 9, 11, 31):
        for sigma in (0.0, -1.0, 0.3, 0.8, 1.7, 4.0, 50.0):
            np.testing.assert_array_equal(
                kernels.gaussian_kernel(n, sigma), F.gaussian_kernel(n, sigma)
            )
            for bits in (8, 16):
                np.testing.assert_array_equal(
                    kernels.gaussian_kernel_fixed(n, sigma, bits),
                    F.gaussian_kernel_fixed(n, sigma, bits),
                )
    import tensorflow as tf

    for sigma in (0.0, 0.5, 1.3, 7.2):
        assert kernels.gaussian_ksize(sigma, np.uint8) == F.gaussian_ksize(sigma, tf.uint8)
        assert kernels.gaussian_ksize(sigma, np.float32) == F.gaussian_ksize(sigma, tf.float32)
    for low, high, l2 in ((50, 150, False), (150.7, 20.2, True), (1e6, 3, True)):
        assert filters._canny_thresholds(low, high, l2) == I.canny_thresholds(low, high, l2)
    matrix = np.array([[0.7, -0.3, 12.5], [0.31, 1.2, -4.0]])
    np.testing.assert_array_equal(geometry._invert_affine(matrix), G.invert_affine(matrix))
    np.testing.assert_array_equal(geometry._invert_affine(np.zeros((2, 3))), np.zeros((2, 3)))


def _python(code: str, cache_dir) -> dict:
    env = dict(os.environ, GDP_CACHE_DIR=str(cache_dir), TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_import_gdp_cv2_imports_no_tensorflow(tmp_path):
    got = _python(
        """
        import json, sys
        import gdp.cv2
        heavy = ("tensorflow", "tf2onnx", "tvm", "onnx", "gdp.ops.filters", "gdp.model")
        print(json.dumps({"loaded": [m for m in heavy if m in sys.modules]}))
        """,
        tmp_path,
    )
    assert got == {"loaded": []}


CALL = """
    import json, sys
    import numpy as np
    import cv2 as real
    import gdp.cv2 as cv2
    # float32: a uint8 threshold runs a hand kernel, which compiles no program
    image = np.random.default_rng({seed}).random({shape}, dtype=np.float32) * 255
    got = cv2.threshold(image, {thresh}, 255, cv2.THRESH_TOZERO)
    want = real.threshold(image, {thresh}, 255, real.THRESH_TOZERO)
    print(json.dumps({{
        "same": got[0] == want[0] and bool(np.array_equal(got[1], want[1])),
        "tensorflow": "tensorflow" in sys.modules,
        "traced": cv2.cache_info().traced,
        "programs": cv2.cache_info().programs,
    }}))
"""


def test_a_second_process_runs_a_cached_program_without_tensorflow(tmp_path):
    first = _python(CALL.format(seed=1, shape=(24, 30, 3), thresh=99.5), tmp_path)
    assert first == {"same": True, "tensorflow": True, "traced": 1, "programs": 1}
    # another process, another size and threshold: the program comes from the disk cache
    second = _python(CALL.format(seed=2, shape=(17, 41, 3), thresh=3), tmp_path)
    assert second == {"same": True, "tensorflow": False, "traced": 0, "programs": 1}


def test_graph_mode_takes_values_as_constants():
    """On TF tensors the same graph functions run with the values as constants."""
    import tensorflow as tf

    image = _image((11, 13, 3))
    matrix = real.getRotationMatrix2D((6, 5), 21.0, 1.1)

    @tf.function(autograph=False)
    def chain(x):
        t = cv2.threshold(x, 90, 250, cv2.THRESH_TRUNC)[1]
        return cv2.warpAffine(cv2.convertScaleAbs(t, alpha=0.3, beta=-7), matrix, (13, 11))

    want = real.warpAffine(
        real.convertScaleAbs(
            real.threshold(image, 90, 250, real.THRESH_TRUNC)[1], alpha=0.3, beta=-7
        ),
        matrix,
        (13, 11),
    )
    np.testing.assert_array_equal(chain(tf.constant(image)).numpy(), want)
    assert engine.is_graph_call(tf.constant(image))
