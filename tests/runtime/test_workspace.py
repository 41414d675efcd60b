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


def test_an_output_comes_back_only_once_nothing_holds_it():
    shape = (480, 640, 3)
    # held: the caller's result, a view of it (NumPy makes its base the memory's owner, not
    # the result), a memoryview, an array made on its buffer
    holders = [lambda a: a, lambda a: a[:, :5], memoryview, lambda a: np.frombuffer(a, np.uint8)]
    for hold in holders:
        workspace.clear_outputs()
        first = workspace.empty(shape, np.uint8)
        address = _address(first)
        holder = hold(first)
        del first
        for _ in range(workspace.KEPT + 2):
            assert _address(workspace.empty(shape, np.uint8)) != address
        del holder
    # dropped: the same memory again, and only for the same shape and dtype
    workspace.clear_outputs()
    first = workspace.empty(shape, np.uint8)
    address = _address(first)
    del first
    assert _address(workspace.empty((640, 480, 3), np.uint8)) != address
    assert _address(workspace.empty(shape, np.int8)) != address
    again = workspace.empty(shape, np.uint8)
    assert _address(again) == address and again.shape == shape and again.dtype == np.uint8


def test_kept_outputs_are_few_and_large_ones_not_kept():
    workspace.clear_outputs()
    held = [workspace.empty((256, 256 + i), np.uint8) for i in range(workspace.KEPT + 3)]
    assert len(workspace._workspace.outputs) == workspace.KEPT
    big = (workspace.MOST_KEPT // 3 + 1, 3)
    out = workspace.empty(big, np.uint8)
    assert all(kept is not out for kept in workspace._workspace.outputs)
    assert _address(out) % workspace.ALIGN == 0
    del held
