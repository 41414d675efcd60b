"""gdp's gpu schedules (runtime/backends/tvm/gpu_schedules.py) checked for what they compute on a
machine without a GPU: each scheduled kernel with its thread loops made serial is built for the
CPU and run against NumPy. A schedule whose threads exchange no values (all of gdp's) computes
the same on the GPU as serially; one that reduces across threads is refused.

The reductions are the ones the first GPU run (an H200) found wrong under dlight's
cross-thread rules: a row mean (sharpness), a per-channel min over a batch of HWC images and a
sum to a scalar with an epilogue (mean_std), an argmin (knn)."""

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm.script import tirx as T

from gdp.runtime.backends.tvm import gpu_schedules

GPU = tvm.target.Target({"kind": "nvptx", "mcpu": "sm_90"})


@T.prim_func(s_tir=True)
def row_mean(a: T.Buffer((1080, 1920), "float32"), out: T.Buffer((1080,), "float32")):
    total = T.sblock_alloc_buffer((1080,))
    for i, k in T.grid(1080, 1920):
        with T.sblock("sum"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                total[vi] = T.float32(0)
            total[vi] = total[vi] + a[vi, vk]
    for i in range(1080):
        with T.sblock("divide"):
            vi = T.axis.remap("S", [i])
            out[vi] = total[vi] / T.float32(1920)


@T.prim_func(s_tir=True)
def channel_min(a: T.Buffer((4, 270, 480, 3), "uint8"), out: T.Buffer((3,), "uint8")):
    for n, h, w, c in T.grid(4, 270, 480, 3):
        with T.sblock("min"):
            vn, vh, vw, vc = T.axis.remap("RRRS", [n, h, w, c])
            with T.init():
                out[vc] = T.uint8(255)
            out[vc] = T.min(out[vc], a[vn, vh, vw, vc])


@T.prim_func(s_tir=True)
def scalar_mean(a: T.Buffer((1081,), "float32"), out: T.Buffer((), "float32")):
    total = T.sblock_alloc_buffer(())
    for k in range(1081):
        with T.sblock("sum"):
            vk = T.axis.remap("R", [k])
            with T.init():
                total[()] = T.float32(0)
            total[()] = total[()] + a[vk]
    with T.sblock("divide"):
        out[()] = total[()] / T.float32(1081)


@T.prim_func(s_tir=True)
def argmin(a: T.Buffer((5003,), "float32"), index: T.Buffer((), "int64")):
    # TOPI's argmin (tf.argmin through gdp): the smaller index wins a tie
    best_i = T.sblock_alloc_buffer((), "int64")
    best_v = T.sblock_alloc_buffer(())
    for k in range(5003):
        with T.sblock("argmin"):
            vk = T.axis.reduce(5003, k)
            with T.init():
                best_i[()] = T.int64(-1)
                best_v[()] = T.float32(3.4028234663852886e38)
            i: T.let[T.int64] = T.Select(
                best_v[()] < a[vk] or best_v[()] == a[vk] and best_i[()] < T.Cast("int64", vk),
                best_i[()],
                T.Cast("int64", vk),
            )
            v: T.let[T.float32] = T.Select(best_v[()] < a[vk], best_v[()], a[vk])
            best_i[()] = i
            best_v[()] = v
    with T.sblock("out"):
        index[()] = best_i[()]


@T.prim_func(s_tir=True)
def index_check(
    indices: T.Buffer((270, 480), "int32"), n0: T.int64, checked: T.Buffer((270, 480), "int32")
):
    # relax_import's check of a gather's indices (gdp_check_indices), as it comes to the
    # schedules: an assertion, and the index made non-negative
    with T.sblock("root"):
        for k0, k1 in T.grid(270, 480):
            assert T.Cast("int32", n0) * -1 <= indices[k0, k1] and indices[k0, k1] < T.Cast(
                "int32", n0
            ), ("IndexError", ["an index lies outside the data's axis"])
            checked[k0, k1] = T.Select(
                indices[k0, k1] < 0, indices[k0, k1] + T.Cast("int32", n0), indices[k0, k1]
            )


def _serial(func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc:
    """`func` with every thread-bound loop made a serial one (each kernel's threads in turn)."""

    def serial(loop):
        if loop.thread_binding is None:
            return loop
        return tvm.tirx.For(
            loop.loop_var, loop.min, loop.extent, tvm.tirx.ForKind.SERIAL, loop.body
        )

    return tvm_ffi.structural_map(func, [(tvm.tirx.For, serial)], order="post")


def _scheduled(func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc:
    mod = gpu_schedules.schedule(tvm.IRModule({"main": func}), GPU)
    return mod["main"]


def _run(func: tvm.tirx.PrimFunc, *arrays: np.ndarray) -> None:
    built = tvm.compile(tvm.IRModule({"main": func}), target="llvm")
    built["main"](
        *(tvm.runtime.tensor(a) for a in arrays[:-1]), out := tvm.runtime.tensor(arrays[-1])
    )
    arrays[-1][...] = out.numpy()


@pytest.mark.parametrize(
    ("func", "make", "oracle"),
    [
        (
            row_mean,
            lambda rng: [rng.random((1080, 1920), dtype=np.float32), np.zeros(1080, np.float32)],
            lambda a: a.astype(np.float64).mean(axis=1),
        ),
        (
            channel_min,
            lambda rng: [
                rng.integers(1, 256, (4, 270, 480, 3), dtype=np.uint8),
                np.zeros(3, np.uint8),
            ],
            lambda a: a.reshape(-1, 3).min(axis=0),
        ),
        (
            scalar_mean,
            lambda rng: [rng.random(1081, dtype=np.float32), np.zeros((), np.float32)],
            lambda a: a.astype(np.float64).mean(),
        ),
        (
            argmin,
            lambda rng: [rng.random(5003, dtype=np.float32), np.zeros((), np.int64)],
            lambda a: np.argmin(a),
        ),
    ],
    ids=["row_mean", "channel_min", "scalar_mean", "argmin"],
)
def test_reductions_are_scheduled_in_stages_that_compute_what_numpy_does(func, make, oracle):
    scheduled = _scheduled(func)
    assert gpu_schedules._bound(scheduled)
    assert not gpu_schedules._reduces_across_threads(scheduled)
    rng = np.random.default_rng(0)
    arrays = make(rng)
    if func is channel_min:
        arrays[0][1, 2, 3, 1] = 0  # one smallest value, deep inside the batch
    _run(_serial(scheduled), *arrays)
    want = oracle(arrays[0])
    np.testing.assert_allclose(arrays[-1], want, rtol=1e-5)


def test_a_reduction_across_threads_is_recognised():
    """dlight's Reduction rule reduces a row across a block's threads: the guard that keeps
    such a schedule out (gdp's int32 thread indices hid it from TVM's lowering, and every
    thread kept its own partial) recognises it."""
    from tvm.s_tir import dlight as dl

    with GPU:
        dlight = dl.ApplyDefaultSchedule(dl.gpu.Reduction())(tvm.IRModule({"main": row_mean}))
    assert gpu_schedules._bound(dlight["main"])
    assert gpu_schedules._reduces_across_threads(dlight["main"])
    assert not gpu_schedules._reduces_across_threads(_scheduled(row_mean))


def test_an_index_check_runs_one_thread_per_index_and_still_writes_its_indices():
    """The check's output (the indices made non-negative) is what the gather reads: a first
    GPU run that dropped the kernel as a mere check returned garbage for cvtColor to HSV."""
    mod = gpu_schedules.schedule(tvm.IRModule({"gdp_check_indices": index_check}), GPU)
    scheduled = mod["gdp_check_indices"]
    assert gpu_schedules._bound(scheduled)
    rng = np.random.default_rng(2)
    indices = rng.integers(-256, 256, (270, 480), dtype=np.int32)
    built = tvm.compile(tvm.IRModule({"main": _serial(scheduled)}), target="llvm")
    out = tvm.runtime.tensor(np.zeros_like(indices))
    built["main"](tvm.runtime.tensor(indices), 256, out)
    np.testing.assert_array_equal(out.numpy(), np.where(indices < 0, indices + 256, indices))


def test_a_buffer_one_kernel_alone_uses_is_local():
    """An argmin's value half is read by its last stage only, its index by the epilogue that
    the last stage's thread computes: left in global memory, TVM allocates them inside that
    kernel (an illegal memory access on an H200)."""
    scheduled = _scheduled(argmin)
    scopes = {b.name: b.scope() for b in scheduled.body.block.alloc_buffers}
    assert scopes.get("best_v_local") == "local", scopes
    # read by the epilogue, which the last stage's thread computes after it
    assert scopes.get("best_i_local") == "local", scopes


def _tone(h: int, w: int):
    @T.prim_func(s_tir=True)
    def tone(a: T.Buffer((h, w, 3), "float32"), out: T.Buffer((h, w, 3), "float32")):
        for i, j, c in T.grid(h, w, 3):
            with T.sblock("tone"):
                vi, vj, vc = T.axis.remap("SSS", [i, j, c])
                out[vi, vj, vc] = (
                    a[vi, vj, vc]
                    * (T.float32(2.51) * a[vi, vj, vc] + T.float32(0.03))
                    / (
                        a[vi, vj, vc] * (T.float32(2.43) * a[vi, vj, vc] + T.float32(0.59))
                        + T.float32(0.14)
                    )
                )

    return tone


def _tone_numpy(x):
    return x * (2.51 * x + 0.03) / (x * (2.43 * x + 0.59) + 0.14)


@T.prim_func(s_tir=True)
def box3(a: T.Buffer((543, 961), "float32"), out: T.Buffer((541, 959), "float32")):
    # a stencil: a short reduction per output, serial inside each of a thread's outputs
    for i, j, di, dj in T.grid(541, 959, 3, 3):
        with T.sblock("box"):
            vi, vj, vdi, vdj = T.axis.remap("SSRR", [i, j, di, dj])
            with T.init():
                out[vi, vj] = T.float32(0)
            out[vi, vj] = out[vi, vj] + a[vi + vdi, vj + vdj]


def _box3(a: np.ndarray) -> np.ndarray:
    h, w = a.shape
    return sum(a[di : h - 2 + di, dj : w - 2 + dj] for di in range(3) for dj in range(3))


@pytest.mark.parametrize(
    ("func", "shape", "out_shape", "spread", "oracle"),
    [
        (_tone(1080, 1920), (1080, 1920, 3), (1080, 1920, 3), 4, _tone_numpy),
        # too few outputs for 4 a thread (see _spread_of)
        (_tone(544, 960), (544, 960, 3), (544, 960, 3), 1, _tone_numpy),
        # no multiple of a block's outputs: one output a thread
        (_tone(541, 963), (541, 963, 3), (541, 963, 3), 1, _tone_numpy),
        # a short reduction per output: one output a thread
        (box3, (543, 961), (541, 959), 1, _box3),
    ],
    ids=["elementwise", "elementwise-small", "elementwise-tail", "stencil"],
)
def test_a_spatial_kernel_spreads_outputs_over_threads_and_computes_what_numpy_does(
    func, shape, out_shape, spread, oracle
):
    """Where a kernel's outputs fill whole blocks, each thread computes SPREAD_ELEMENTS of
    them a block apart; every output is written once, with the value NumPy computes."""
    scheduled = _scheduled(func)
    text = scheduled.script()
    assert 'thread="threadIdx.x"' in text, text
    assert ("T.unroll(4)" in text) == (spread == 4), text
    rng = np.random.default_rng(3)
    a = rng.random(shape, dtype=np.float32)
    out = np.full(out_shape, np.nan, np.float32)  # poisoned: an output left unwritten shows
    _run(_serial(scheduled), a, out)
    np.testing.assert_allclose(out, oracle(a.astype(np.float64)), rtol=1e-5)


def test_a_threads_loads_come_before_its_stores_in_the_ptx(tmp_path):
    """loads_before_stores: the PTX of a spread kernel loads all of a thread's inputs before
    its first store (generic loads after a store wait for the one before them: one load in
    flight a thread)."""
    from gdp.runtime.backends.tvm import cuda

    cuda._use_libdevice_search()
    func = _scheduled(_tone(1080, 1920)).with_attr("global_symbol", "tone")
    built = tvm.compile(
        tvm.IRModule({"tone": func}), target=GPU, tir_pipeline=gpu_schedules.register_pipeline()
    )
    built.export_library(str(tmp_path / "tone.so"))
    (ptx,) = cuda.ptx_of((tmp_path / "tone.so").read_bytes())
    body = ptx[ptx.index("tone_kernel(") :]
    body = body[: body.index("ret;")]
    memory = [
        line.split()[0] for line in body.splitlines() if line.strip().startswith(("ld.", "st."))
    ]
    loads = [
        k for k, op in enumerate(memory) if op.startswith("ld.") and not op.startswith("ld.param")
    ]
    stores = [k for k, op in enumerate(memory) if op.startswith("st.")]
    assert len(loads) == 4 and len(stores) == 4, memory
    assert max(loads) < min(stores), memory


def test_a_reductions_epilogue_runs_in_its_last_stage():
    """An epilogue that reads its own output's reduction alone (a row mean's division) is
    computed by the thread that finishes that reduction: no launch of its own."""
    scheduled = _scheduled(row_mean)
    launches = [
        loop
        for loop in _loops(scheduled)
        if loop.thread_binding is not None and loop.thread_binding.thread_tag == "blockIdx.x"
    ]
    text = scheduled.script()
    assert len(launches) == 2, text  # the partials, then the sums and their division
    scopes = {b.name: b.scope() for b in scheduled.body.block.alloc_buffers}
    assert scopes.get("total_local") == "local", scopes


@pytest.mark.parametrize(("func", "epilogue"), [(row_mean, "divide"), (argmin, "out")])
def test_an_epilogue_in_the_last_stage_runs_in_no_thread_past_the_last_output(func, epilogue):
    """The last stage's threads run in blocks of BLOCK_THREADS: those past the last output
    (all but one for an argmin's scalar) must not run the epilogue, whose inputs they never
    computed (thread-local on the GPU: garbage; an H200 run without this guard crashed knn
    with an illegal memory access and gave mean_std NaNs, where the serial CPU run of the
    kernel, sharing one 'local' among its threads, was right)."""
    from tvm.s_tir import SBlockRealize

    realizes = []

    def seen(node):
        if node.block.name_hint == epilogue:
            realizes.append(node)
        return node

    tvm_ffi.structural_map(_scheduled(func), [(SBlockRealize, seen)], order="post")
    (realize,) = realizes
    assert not isinstance(realize.predicate, tvm.tirx.IntImm), realize.predicate


def _loops(func: tvm.tirx.PrimFunc) -> list:
    found = []

    def loop(node):
        found.append(node)
        return node

    tvm_ffi.structural_map(func, [(tvm.tirx.For, loop)], order="post")
    return found


@T.prim_func(s_tir=True)
def channel_std(
    a: T.Buffer((4096, 3), "int64"),
    mean: T.Buffer((3,), "int64"),
    scaled: T.Buffer((3,), "float64"),
    out: T.Buffer((3,), "float64"),
):
    # mean_std's std: an epilogue that also reads another output of the kernel (the mean)
    total = T.sblock_alloc_buffer((3,), "int64")
    for k, c in T.grid(4096, 3):
        with T.sblock("sum"):
            vk, vc = T.axis.remap("RS", [k, c])
            with T.init():
                total[vc] = T.int64(0)
            total[vc] = total[vc] + a[vk, vc]
    for c in range(3):
        with T.sblock("scaled"):
            vc = T.axis.remap("S", [c])
            scaled[vc] = T.Cast("float64", mean[vc]) * T.float64(0.5)
    for c in range(3):
        with T.sblock("std"):
            vc = T.axis.remap("S", [c])
            out[vc] = T.sqrt(
                T.Cast("float64", total[vc]) * T.float64(0.25) - scaled[vc] * scaled[vc]
            )


def test_an_epilogue_reading_every_output_is_not_run_by_each_thread():
    """An epilogue block that needs other blocks' results for every output would, moved into
    the last stage, loop over all outputs in each thread, reading other threads' registers (on
    an H200 mean_std's std came out NaN): it stays a kernel of its own, and the reduction's
    results stay in global memory."""
    scheduled = _scheduled(channel_std)
    scopes = {b.name: b.scope() for b in scheduled.body.block.alloc_buffers}
    assert scopes.get("total") == "global", scopes
    rng = np.random.default_rng(5)
    a = rng.integers(0, 1000, (4096, 3), dtype=np.int64)
    mean = rng.integers(0, 10, 3, dtype=np.int64)
    out = np.full(3, np.nan)
    _run(_serial(scheduled), a, mean, np.zeros(3), out)
    want = np.sqrt(a.sum(axis=0) * 0.25 - (mean * 0.5) ** 2)
    np.testing.assert_allclose(out, want, rtol=1e-12)


@T.prim_func(s_tir=True)
def resize_rows(
    a: T.Buffer((T.int64(1080), T.int64(640)), "uint8"),
    out: T.Buffer((T.int64(360), T.int64(640)), "float32"),
):
    # as Relax writes kernels: int64 extents and a coordinate computed in float, cast to int64
    for i, j in T.grid(T.int64(360), T.int64(640)):
        with T.sblock("rows"):
            vi, vj = T.axis.remap("SS", [i, j])
            out[vi, vj] = T.Cast(
                "float32",
                a[
                    T.min(
                        T.max(
                            T.Cast(
                                "int64",
                                T.floor(T.Cast("float32", vi) * T.float32(3.0) + T.float32(1.0)),
                            ),
                            T.int64(0),
                        ),
                        T.int64(1079),
                    ),
                    vj,
                ],
            )


def test_a_kernels_int64_indices_are_computed_in_int32_and_still_right():
    """NARROW_INDICES: a kernel whose buffers fit int32 indices is scheduled with them (the
    GPU computes int64 in pairs of instructions), and computes what NumPy does."""
    scheduled = _scheduled(resize_rows)
    text = scheduled.script()
    assert "int64" not in text, text
    rng = np.random.default_rng(7)
    a = rng.integers(0, 256, (1080, 640), dtype=np.uint8)
    out = np.full((360, 640), np.nan, np.float32)
    _run(_serial(scheduled), a, out)
    rows = np.clip(np.floor(np.arange(360) * 3.0 + 1.0).astype(np.int64), 0, 1079)
    np.testing.assert_array_equal(out, a[rows].astype(np.float32))
