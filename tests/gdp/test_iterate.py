"""gdp.fixed_point against NumPy: a compiled step repeated until its state stops changing."""

import numpy as np
import pytest
import tensorflow as tf

import gdp


@tf.function(
    input_signature=[
        tf.TensorSpec([None], tf.int32, name="x"),
        tf.TensorSpec([None], tf.int32, name="limit"),
    ]
)
def grow(x, limit):
    """One step of x <- min(x + 1, limit)."""
    return {"next": tf.minimum(x + 1, limit), "twice": 2 * x}


def test_runs_until_nothing_changes():
    step = gdp.compile(grow)
    x = np.array([0, 5, 9], np.int32)
    limit = np.array([7, 5, 20], np.int32)
    out, runs = gdp.fixed_point(step, {"x": x, "limit": limit}, carry={"x": "next"})
    np.testing.assert_array_equal(out["next"], limit)  # NumPy's answer: the limits
    np.testing.assert_array_equal(out["twice"], 2 * limit)
    assert runs == 12  # 11 steps from 9 to 20, one more that changes nothing


def test_gives_up_after_max_iterations():
    step = gdp.compile(grow)
    x, limit = np.zeros(2, np.int32), np.full(2, 100, np.int32)
    with pytest.raises(gdp.ExecutionError, match="no fixed point after 3 iterations"):
        gdp.fixed_point(step, {"x": x, "limit": limit}, carry={"x": "next"}, max_iterations=3)


def test_names_wrong_carry():
    step = gdp.compile(grow)
    x = np.zeros(2, np.int32)
    with pytest.raises(gdp.InputError, match=r"unknown inputs \['y'\].*unknown outputs \['nope'\]"):
        gdp.fixed_point(step, {"x": x, "limit": x}, carry={"y": "nope"})
    with pytest.raises(gdp.InputError, match="expected dtype int32, got int64"):
        gdp.fixed_point(step, {"x": x, "limit": x.astype(np.int64)}, carry={"x": "next"})
