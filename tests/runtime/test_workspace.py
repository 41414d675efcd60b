"""gdp.runtime.workspace's new outputs: aligned to a cache line from ALIGNED_FROM bytes on
(a view of a slightly larger array), otherwise numpy's own, and in every case what np.empty
would give (shape, dtype, C order, writable, memory of its own)."""

import ctypes

import numpy as np
import pytest

from gdp.runtime import workspace


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


@pytest.mark.parametrize(
    "shape, dtype",
    [
        ((1080, 1920, 3), np.uint8),
        ((480, 640), np.float32),
        ((3, 224, 224), np.float32),
        ((7, 9999), np.int16),
    ],
)
def test_large_outputs_start_on_a_cache_line(shape, dtype):
    arrays = [workspace.empty(shape, dtype) for _ in range(4)]  # alive together: 4 allocations
    for out in arrays:
        assert out.shape == shape and out.dtype == dtype
        assert out.flags.c_contiguous and out.flags.writeable
        assert _address(out) % workspace.ALIGN == 0
        assert out.nbytes >= workspace.ALIGNED_FROM
    # no two share memory: each is its own allocation
    for i, a in enumerate(arrays):
        for b in arrays[i + 1 :]:
            assert not np.shares_memory(a, b)


@pytest.mark.parametrize("shape", [(0,), (0, 1920, 3), (8, 8), (1,)])
def test_small_and_empty_outputs_are_numpy_own(shape):
    out = workspace.empty(shape, np.uint8)
    assert out.shape == shape and out.dtype == np.uint8 and out.flags.c_contiguous


def test_output_without_out_is_aligned_and_keeps_the_callers_out():
    out = workspace.output(None, (1080, 1920), np.uint8, "test")
    assert _address(out) % workspace.ALIGN == 0
    given = np.empty((1080, 1920), np.uint8)
    assert workspace.output(given, (1080, 1920), np.uint8, "test") is given


def test_the_address_is_numpys():
    # the ctypes view empty() reads the address through agrees with numpy's own
    raw = np.empty(1 << 17, np.uint8)[5:]
    assert ctypes.addressof(ctypes.c_char.from_buffer(raw)) == raw.ctypes.data
