"""The gpu target's scheduled kernels computed on the CPU against the same kernels unscheduled.

Each program is compiled for the gpu target as gdp.compile would; every fused kernel is taken
twice: as TVM's lowering hands it to gpu_schedules.schedule (plain loops, int64 indices) and as
the schedule returns it (threads bound, outputs spread over threads, indices narrowed to int32,
reductions in stages). Both are built for the CPU, the scheduled one with its thread loops
made serial, and run on the same random inputs: a schedule must not change what a kernel
computes. Kernels that take index tables (which random data would send out of range) are left
out.

What this cannot see: anything that depends on threads running at once, or on a thread's
registers being its own (a serial run shares one 'local' buffer among its threads);
test_gpu_schedules checks those forms structurally."""

import importlib
import sys

import numpy as np
import pytest
import tensorflow as tf
import tvm

import gdp.cv2 as gcv2
from gdp.frontend import convert
from gdp.runtime.backends.tvm import gpu_schedules
from tests import SAMPLES
from tests.runtime.test_gpu_codegen import compile_for_gpu
from tests.runtime.test_gpu_schedules import _serial

sys.path.insert(0, str(SAMPLES))


def _workload(name: str):
    module = importlib.import_module(name)
    return module.program, {k: v.shape for k, v in module.inputs().items()}


def _cv2(call, shape=(270, 480, 3)):
    spec = [tf.TensorSpec(shape, tf.uint8, name="src")]
    return tf.function(lambda src: {"dst": call(src)}, input_signature=spec), None


PROGRAMS = {
    "tone": lambda: _workload("tone"),  # 1080p: its kernel spreads 4 outputs a thread
    "gaussian": lambda: _workload("gaussian"),
    "sharpness": lambda: _workload("sharpness"),
    "dnn_resize": lambda: _workload("dnn_resize"),
    "dnn_letterbox": lambda: _workload("dnn_letterbox"),
    "GaussianBlur 5x5": lambda: _cv2(lambda s: gcv2.GaussianBlur(s, (5, 5), 0)),
    "blur 3x3": lambda: _cv2(lambda s: gcv2.blur(s, (3, 3))),
    "Sobel dx 16S": lambda: _cv2(lambda s: gcv2.Sobel(s, gcv2.CV_16S, 1, 0, ksize=3)),
    "erode 3x3": lambda: _cv2(lambda s: gcv2.erode(s, np.ones((3, 3), np.uint8))),
    "cvtColor BGR2GRAY": lambda: _cv2(lambda s: gcv2.cvtColor(s, gcv2.COLOR_BGR2GRAY)),
    "flip": lambda: _cv2(lambda s: gcv2.flip(s, -1)),
    "addWeighted": lambda: _cv2(lambda s: gcv2.addWeighted(s, 0.7, s, 0.3, 5)),
}


def _kernels(program, shapes, monkeypatch, tmp_path) -> list[tuple[str, object, object]]:
    """(name, as lowered, as scheduled) for every kernel of `program` compiled for the gpu."""
    pairs: list = []
    schedule = gpu_schedules.schedule

    def recorded(mod, target):
        before = {gv.name_hint: f for gv, f in mod.functions.items()}
        after = schedule(mod, target)
        for gv, func in after.functions.items():
            if isinstance(func, tvm.tirx.PrimFunc) and gv.name_hint in before:
                pairs.append((gv.name_hint, before[gv.name_hint], func))
        return after

    monkeypatch.setattr(gpu_schedules, "schedule", recorded)
    compile_for_gpu(convert(program, None)[0], "sm_90", shapes, tmp_path)
    return pairs


def _buffers(func) -> list | None:
    """(shape, dtype) of each buffer parameter of `func`; None where one is not static or
    another parameter is a scalar."""
    from tvm.tirx.buffer import is_buffer_var

    found = []
    for param in func.params:
        if not is_buffer_var(param):
            return None
        shape = param.ty.shape
        if not all(isinstance(d, tvm.tirx.IntImm) for d in shape):
            return None
        found.append((tuple(int(d) for d in shape), str(param.ty.dtype)))
    return found


# int32/int64 inputs of at most this many values are a program's small constants (fixed-point
# weights, a scalar), given values 0-2 (in range as an index into any axis of 3 or more);
# larger ones are index tables, and their kernels are left out.
SMALL_CONSTANT = 16


def _is_table(shape, dtype) -> bool:
    return dtype in ("int32", "int64") and int(np.prod(shape)) > SMALL_CONSTANT


def _random(shape, dtype, rng):
    if dtype.startswith("float"):
        return rng.random(shape).astype(dtype)
    if dtype in ("int32", "int64"):
        return rng.integers(0, 3, shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -1000), min(info.max, 1000) + 1, shape).astype(dtype)


def _run(func, arrays):
    func = func.with_attr("global_symbol", "main").without_attr("target")
    built = tvm.compile(tvm.IRModule({"main": func}), target="llvm")
    tensors = [tvm.runtime.tensor(a) for a in arrays]
    built["main"](*tensors)
    return [t.numpy() for t in tensors]


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_a_scheduled_kernel_computes_what_it_did_before_scheduling(name, monkeypatch, tmp_path):
    program, shapes = PROGRAMS[name]()
    pairs = _kernels(program, shapes, monkeypatch, tmp_path)
    checked = 0
    rng = np.random.default_rng(11)
    for kernel, before, after in pairs:
        buffers = _buffers(before)
        if buffers is None or _buffers(after) != buffers:
            continue
        *ins, (out_shape, out_dtype) = buffers
        if any(_is_table(s, d) for s, d in ins):
            continue  # an index table: random values would send it out of range
        inputs = [_random(s, d, rng) for s, d in ins]
        poison = np.full(out_shape, 77, out_dtype)
        want = _run(before, [*inputs, poison.copy()])[-1]
        got = _run(_serial(after), [*inputs, poison.copy()])[-1]
        if out_dtype.startswith("float"):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=kernel)
        else:
            np.testing.assert_array_equal(got, want, err_msg=kernel)
        checked += 1
    assert checked, f"no kernel of {name} could be checked: {[k for k, _, _ in pairs]}"
