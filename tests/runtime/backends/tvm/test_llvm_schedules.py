"""gdp's CPU schedules (runtime/backends/tvm/llvm_schedules.py) on kernels that gdp's fusion plans
form and TVM's do not: several outputs, a short reduction and stacked stencils in one kernel.
The numbers are checked against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import te

from gdp.runtime.backends.tvm import llvm_schedules as S

H, W = 64, 48


def grey_blur_thresholds() -> tvm.tirx.PrimFunc:
    """grey = sum over RGB (a reduction of 3); a 3x3 box sum of grey; a 3x3 box sum of that
    (stacked stencils); two threshold maps of the result (two outputs of one shape)."""
    rgb = te.placeholder((H + 4, W + 4, 3), "float32", name="rgb")
    c = te.reduce_axis((0, 3), name="c")
    grey = te.compute((H + 4, W + 4), lambda y, x: te.sum(rgb[y, x, c], axis=c), name="grey")

    def box(src, size, name):
        return te.compute(
            (size[0], size[1]),
            lambda y, x: sum(src[y + dy, x + dx] for dy in range(3) for dx in range(3)),
            name=name,
        )

    once = box(grey, (H + 2, W + 2), "once")
    twice = box(once, (H, W), "twice")
    high = te.compute((H, W), lambda y, x: (twice[y, x] > 200.0).astype("uint8"), name="high")
    low = te.compute((H, W), lambda y, x: (twice[y, x] < 100.0).astype("uint8"), name="low")
    return te.create_prim_func([rgb, high, low])


def numpy_oracle(rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    grey = rgb.sum(axis=2)

    def box(a):
        h, w = a.shape[0] - 2, a.shape[1] - 2
        return sum(a[dy : dy + h, dx : dx + w] for dy in range(3) for dx in range(3))

    twice = box(box(grey))
    return (twice > 200).astype(np.uint8), (twice < 100).astype(np.uint8)


def outer_loop(sch, name: str):
    """The outermost loop around block `name`, and whether it runs in parallel."""
    loop = sch.get_loops(sch.get_sblock(name))[0]
    return sch.get_sref(loop), sch.get(loop).kind == tvm.tirx.ForKind.PARALLEL


def test_two_outputs_a_short_reduction_and_stacked_stencils_run_as_one_strip_loop():
    sch = S._schedule(grey_blur_thresholds(), cores=2)
    assert sch is not None, "gdp's schedule left the kernel to TVM's default"
    func = sch.mod["main"]
    # One parallel loop over row strips computes the grey, the first box sum (the second is
    # inlined into the two outputs) and both outputs.
    strips, parallel = outer_loop(sch, "high")
    assert parallel
    for name in ("grey", "once", "low"):
        assert outer_loop(sch, name)[0].same_as(strips), f"{name} is not under the strip loop"

    rgb = np.random.default_rng(0).uniform(0, 10, (H + 4, W + 4, 3)).astype("float32")
    lib = tvm.compile(func, target="llvm")
    high = tvm.runtime.empty((H, W), "uint8")
    low = tvm.runtime.empty((H, W), "uint8")
    lib(tvm.runtime.tensor(rgb), high, low)
    want_high, want_low = numpy_oracle(rgb.astype(np.float64))
    np.testing.assert_array_equal(high.numpy(), want_high)
    np.testing.assert_array_equal(low.numpy(), want_low)


def test_a_source_read_through_a_reflection_is_computed_once_not_per_strip():
    """A reflected read reaches across the image: computed per strip, the grey image would be
    computed whole by every strip. It is computed in full before the strips instead."""
    rgb = te.placeholder((H, W, 3), "float32", name="rgb")
    c = te.reduce_axis((0, 3), name="c")
    grey = te.compute((H, W), lambda y, x: te.sum(rgb[y, x, c], axis=c), name="grey")

    def reflect(i, n):
        return tvm.tirx.if_then_else(i < 0, -i, tvm.tirx.if_then_else(i >= n, 2 * n - 2 - i, i))

    padded = te.compute(
        (H + 2, W + 2), lambda y, x: grey[reflect(y - 1, H), reflect(x - 1, W)], name="padded"
    )
    out = te.compute(
        (H, W),
        lambda y, x: sum(padded[y + dy, x + dx] for dy in range(3) for dx in range(3)),
        name="out",
    )
    sch = S._schedule(te.create_prim_func([rgb, out]), cores=2)
    assert sch is not None
    func = sch.mod["main"]
    strips, parallel = outer_loop(sch, "out")
    grey_loop, grey_parallel = outer_loop(sch, "grey")
    assert parallel and grey_parallel
    assert not grey_loop.same_as(strips)  # its own parallel loop, before the strips
    assert outer_loop(sch, "padded")[0].same_as(strips)

    x = np.random.default_rng(1).uniform(0, 10, (H, W, 3)).astype("float32")
    lib = tvm.compile(func, target="llvm")
    got = tvm.runtime.empty((H, W), "float32")
    lib(tvm.runtime.tensor(x), got)
    grey_np = np.pad(x.astype(np.float64).sum(axis=2), 1, mode="reflect")
    want = sum(grey_np[dy : dy + H, dx : dx + W] for dy in range(3) for dx in range(3))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5)


def test_a_whole_image_reduction_beside_a_scalar_cast_is_split_across_cores():
    """minMaxLoc's kernel: a max over every pixel, exported, and its cast to float64, a block
    outside any loop (TVM's rfactor failed beside it and the kernel ran as one serial loop)."""
    n = 1 << 16
    x = te.placeholder((n,), "uint8", name="x")
    k = te.reduce_axis((0, n), name="k")
    top = te.compute((), lambda: te.max(x[k], axis=[k]), name="top")
    wide = te.compute((), lambda: top().astype("float64"), name="wide")
    sch = S._schedule(te.create_prim_func([x, top, wide]), cores=2)
    assert sch is not None
    assert outer_loop(sch, "top_rf")[1], "the partial maxima do not run in parallel"

    data = np.random.default_rng(2).integers(0, 200, n, dtype=np.uint8)
    data[12345] = 250
    lib = tvm.compile(sch.mod["main"], target="llvm")
    got_top, got_wide = tvm.runtime.empty((), "uint8"), tvm.runtime.empty((), "float64")
    lib(tvm.runtime.tensor(data), got_top, got_wide)
    assert int(got_top.numpy()) == 250 and float(got_wide.numpy()) == 250.0


def test_an_image_and_its_row_means_are_one_strip_loop_with_vector_partial_sums():
    """Sharpness's first pass: a Laplacian exported (a later pass reads it) and its mean along
    each row, computed strip by strip while the rows are in cache; the row sums accumulate in
    vector lanes, combined per row."""
    h, w = 64, 480
    x = te.placeholder((h + 2, w + 2), "float32", name="x")
    lap = te.compute(
        (h, w),
        lambda y, i: (
            x[y, i + 1] + x[y + 2, i + 1] + x[y + 1, i] + x[y + 1, i + 2] - 4.0 * x[y + 1, i + 1]
        ),
        name="lap",
    )
    k = te.reduce_axis((0, w), name="k")
    sums = te.compute((h,), lambda y: te.sum(lap[y, k], axis=k), name="sums")
    means = te.compute((h,), lambda y: sums[y] / float(w), name="means")
    sch = S._schedule(te.create_prim_func([x, lap, means]), cores=2)
    assert sch is not None
    strips, parallel = outer_loop(sch, "means")
    assert parallel
    # (The Laplacian's block is split into row vectors, its parts renamed.)
    for name in ("sums_rf", "sums"):
        assert outer_loop(sch, name)[0].same_as(strips), f"{name} is not under the strip loop"
    lanes = sch.get(sch.get_loops(sch.get_sblock("sums_rf"))[-1])
    assert lanes.kind == tvm.tirx.ForKind.VECTORIZED

    data = np.random.default_rng(3).normal(0, 1, (h + 2, w + 2)).astype("float32")
    lib = tvm.compile(sch.mod["main"], target="llvm")
    got_lap, got_means = tvm.runtime.empty((h, w), "float32"), tvm.runtime.empty((h,), "float32")
    lib(tvm.runtime.tensor(data), got_lap, got_means)
    d = data.astype(np.float64)
    want = d[:-2, 1:-1] + d[2:, 1:-1] + d[1:-1, :-2] + d[1:-1, 2:] - 4 * d[1:-1, 1:-1]
    np.testing.assert_allclose(got_lap.numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_means.numpy(), want.mean(axis=1), rtol=1e-4, atol=1e-5)


def test_row_sums_that_keep_the_channels_read_each_row_once_in_vector_lanes():
    """mean_std's packed sums: (N, H, W, C) uint8 summed along W per channel, in int64. TOPI
    loops over the channel outside the row (every C-th byte); gdp's schedule reads each row
    once, contiguously, into vector lanes of partial sums, combined per channel after it."""
    n, h, w, c = 2, 70, 96, 3
    x = te.placeholder((n, h, w, c), "uint8", name="x")
    k = te.reduce_axis((0, w), name="k")

    def packed(*i):
        v = x[i].astype("int64")
        return v + v * v * (1 << 20)

    sums = te.compute((n, h, c), lambda b, y, ch: te.sum(packed(b, y, k, ch), axis=k), name="sums")
    sch = S._schedule(te.create_prim_func([x, sums]), cores=2)
    assert sch is not None
    rows, parallel = outer_loop(sch, "sums")
    assert parallel and outer_loop(sch, "sums_rf_update")[0].same_as(rows)
    lanes = sch.get(sch.get_loops(sch.get_sblock("sums_rf_update"))[-1])
    assert lanes.kind == tvm.tirx.ForKind.VECTORIZED
    assert int(lanes.extent) % c == 0, "a lane must add one channel of every piece"

    data = np.random.default_rng(4).integers(0, 256, (n, h, w, c), dtype=np.uint8)
    lib = tvm.compile(sch.mod["main"], target="llvm")
    got = tvm.runtime.empty((n, h, c), "int64")
    lib(tvm.runtime.tensor(data), got)
    v = data.astype(np.int64)
    np.testing.assert_array_equal(got.numpy(), (v + v * v * (1 << 20)).sum(axis=2))


def test_sums_minimum_and_maximum_of_one_batch_read_each_row_once():
    """A kernel of gdp's sibling fusion (mean_std): the packed sums of each row and the minimum
    and maximum per channel of the whole batch, all of one input. The minimum and maximum are
    folded into one partial per row; the three run under one parallel loop over the rows, so
    each row is read once for all of them."""
    n, h, w, c = 2, 70, 96, 3
    x = te.placeholder((n, h, w, c), "uint8", name="x")
    k = te.reduce_axis((0, w), name="k")
    wide = te.compute((n, h, w, c), lambda *i: x[i].astype("int64"), name="wide")
    sums = te.compute((n, h, c), lambda b, y, ch: te.sum(wide[b, y, k, ch], axis=k), name="sums")
    rb, ry, rk = (te.reduce_axis((0, e), name=f"r{e}") for e in (n, h, w))
    low = te.compute((c,), lambda ch: te.min(x[rb, ry, rk, ch], axis=[rb, ry, rk]), name="low")
    rb, ry, rk = (te.reduce_axis((0, e), name=f"s{e}") for e in (n, h, w))
    high = te.compute((c,), lambda ch: te.max(x[rb, ry, rk, ch], axis=[rb, ry, rk]), name="high")
    sch = S._schedule(te.create_prim_func([x, sums, low, high]), cores=2)
    assert sch is not None
    rows, parallel = outer_loop(sch, "sums")
    assert parallel and int(sch.get(rows).extent) == n * h
    # Each piece of a row is loaded once for the three: one loop along the row holds them.
    for name in ("sums_rf_update", "low_rf_rf_update", "high_rf_rf_update"):
        outer, along = (sch.get_sref(lp) for lp in sch.get_loops(sch.get_sblock(name))[:2])
        assert outer.same_as(rows), f"{name} reads the rows again"
        assert along.same_as(sch.get_sref(sch.get_loops(sch.get_sblock("sums_rf_update"))[1])), (
            f"{name} loads the row's pieces again"
        )

    data = np.random.default_rng(5).integers(1, 255, (n, h, w, c), dtype=np.uint8)
    data[1, 33, 7, 2], data[0, 5, 90, 1] = 0, 255
    lib = tvm.compile(sch.mod["main"], target="llvm")
    got = [tvm.runtime.empty((n, h, c), "int64"), tvm.runtime.empty((c,), "uint8")]
    got.append(tvm.runtime.empty((c,), "uint8"))
    lib(tvm.runtime.tensor(data), *got)
    np.testing.assert_array_equal(got[0].numpy(), data.astype(np.int64).sum(axis=2))
    np.testing.assert_array_equal(got[1].numpy(), data.min(axis=(0, 1, 2)))
    np.testing.assert_array_equal(got[2].numpy(), data.max(axis=(0, 1, 2)))


def test_row_sums_of_a_stored_image_accumulate_in_vector_lanes():
    """Sharpness's second pass, (x - mean)^2 summed along each row of a stored image: the
    partial sums run along the row in vector lanes (the lanes innermost, zeroed once per row).
    Before, rfactor left the lanes outermost and each lane stepped through the row alone."""
    h, w = 40, 480
    x = te.placeholder((h, w), "float32", name="x")
    mean = te.placeholder((), "float32", name="mean")
    k = te.reduce_axis((0, w), name="k")
    sums = te.compute(
        (h,), lambda y: te.sum((x[y, k] - mean()) * (x[y, k] - mean()), axis=k), name="sums"
    )
    sch = S._schedule(te.create_prim_func([x, mean, sums]), cores=2)
    assert sch is not None
    rows, parallel = outer_loop(sch, "sums")
    assert parallel and outer_loop(sch, "sums_rf_update")[0].same_as(rows)
    update = sch.get_loops(sch.get_sblock("sums_rf_update"))
    assert sch.get(update[-1]).kind == tvm.tirx.ForKind.VECTORIZED
    assert len(sch.get_loops(sch.get_sblock("sums_rf_init"))) == 2  # outside the row's steps

    data = np.random.default_rng(7).normal(0, 1, (h, w)).astype("float32")
    lib = tvm.compile(sch.mod["main"], target="llvm")
    got = tvm.runtime.empty((h,), "float32")
    lib(tvm.runtime.tensor(data), tvm.runtime.tensor(np.float32(0.25)), got)
    want = ((data.astype(np.float64) - 0.25) ** 2).sum(axis=1)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5)


def test_a_grey_image_with_a_channel_axis_of_one_is_vectorised_along_its_rows():
    """HW1 images (gdp's grey images keep OpenCV's channel axis): the row and its unit channel
    axis are one vector loop. Before, the unit axis alone was the 'row': vectors of one lane."""
    x = te.placeholder((H + 2, W + 2, 1), "float32", name="x")
    box = te.compute(
        (H, W, 1),
        lambda y, i, c: sum(x[y + dy, i + dx, c] for dy in range(3) for dx in range(3)),
        name="box",
    )
    sch = S._schedule(te.create_prim_func([x, box]), cores=2)
    assert sch is not None
    vectorised = [
        sch.get(lp)
        for b in sch.get_child_blocks(sch.get_sblock("root"))
        if sch.get(b).name_hint.startswith("box")
        for lp in sch.get_loops(b)
        if sch.get(lp).kind == tvm.tirx.ForKind.VECTORIZED
    ]
    assert vectorised and all(int(lp.extent) >= 8 for lp in vectorised)

    data = np.random.default_rng(8).normal(0, 1, (H + 2, W + 2, 1)).astype("float32")
    lib = tvm.compile(sch.mod["main"], target="llvm")
    got = tvm.runtime.empty((H, W, 1), "float32")
    lib(tvm.runtime.tensor(data), got)
    want = sum(data[dy : dy + H, dx : dx + W] for dy in range(3) for dx in range(3))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


def test_an_exported_image_that_a_stencil_reads_is_computed_before_the_strips():
    """A chain's gray image, exported and also padded for a 5x5 box in the same kernel: in the
    strips it held only each strip's rows, and the box read its halo rows, which another
    strip writes in parallel, or later (merged into the strip loop, the image was even
    written after a source computed in full had read it). It is computed in full first. The
    outputs start poisoned, so a row read before it is written shows."""
    h, w = 64, 48  # strips of 4 rows: every halo crosses a strip
    rgb = te.placeholder((h, w, 3), "uint8", name="rgb")
    c = te.reduce_axis((0, 3), name="c")
    total = te.compute(
        (h, w), lambda y, x: te.sum(rgb[y, x, c].astype("int32"), axis=c), name="total"
    )
    grey = te.compute((h, w), lambda y, x: (total[y, x] // 3).astype("uint8"), name="grey")

    def clamp(i, n):
        return tvm.tirx.max(tvm.tirx.min(i, n - 1), 0)

    padded = te.compute(
        (h + 4, w + 4), lambda y, x: grey[clamp(y - 2, h), clamp(x - 2, w)], name="padded"
    )
    box = te.compute(
        (h, w),
        lambda y, x: sum(
            padded[y + dy, x + dx].astype("int32") for dy in range(5) for dx in range(5)
        ),
        name="box",
    )
    sch = S._schedule(te.create_prim_func([rgb, grey, box]), cores=2)
    assert sch is not None
    strips, parallel = outer_loop(sch, "box")
    assert parallel and not outer_loop(sch, "grey")[0].same_as(strips)

    data = np.random.default_rng(4).integers(0, 256, (h, w, 3), dtype=np.uint8)
    lib = tvm.compile(sch.mod["main"], target="llvm")
    got_grey = tvm.runtime.tensor(np.full((h, w), 255, np.uint8))
    got_box = tvm.runtime.tensor(np.full((h, w), -1, np.int32))
    lib(tvm.runtime.tensor(data), got_grey, got_box)
    grey_np = (data.astype(np.int32).sum(axis=2) // 3).astype(np.uint8)
    edged = np.pad(grey_np, 2, mode="edge").astype(np.int32)
    want = sum(edged[dy : dy + h, dx : dx + w] for dy in range(5) for dx in range(5))
    np.testing.assert_array_equal(got_grey.numpy(), grey_np)
    np.testing.assert_array_equal(got_box.numpy(), want)


def test_a_schedule_that_reads_a_buffer_before_writing_it_is_refused():
    """TVM's merge does not check the order of what it merges: two outputs' loops merged past
    a block between them that reads the first. gdp's check refuses such a schedule (the kernel
    then runs as TVM lowers it by default)."""
    x = te.placeholder((8, 8), "float32", name="x")
    a = te.compute((8, 8), lambda i, j: x[i, j] * 2.0, name="a")
    f = te.compute((8, 8), lambda i, j: a[7 - i, j] + 1.0, name="f")
    b = te.compute((8, 8), lambda i, j: f[i, j] * 3.0, name="b")
    sch = tvm.s_tir.Schedule(te.create_prim_func([x, a, b]))
    S._check_order(sch)  # as written: in order
    sch.merge(sch.get_loops(sch.get_sblock("a"))[0], sch.get_loops(sch.get_sblock("b"))[0])
    with pytest.raises(S._OutOfOrder, match="block f reads a before it is written"):
        S._check_order(sch)
