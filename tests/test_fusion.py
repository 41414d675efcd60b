"""Fusion planning (gdp.runtime.fusion) and its application in the TVM backend
(runtime/backends/tvm/fusion.py), against TVM's own FuseOps as the baseline and NumPy/onnxruntime
as the oracle of the numbers."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import gdp
from gdp.ops import mapping as M
from gdp.runtime import fusion as F
from gdp.runtime.backends.tvm import fusion as T
from gdp.runtime.backends.tvm import llvm_schedules

# The planner's tests run under the cpu backend's kernel rules, what its schedules run as one
# kernel (the expected plans below are the cpu's).
CPU = llvm_schedules.KERNEL_RULES


def legalized(mod: tvm.IRModule) -> tvm.IRModule:
    passes = [
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
    ]
    return tvm.transform.Sequential(passes)(mod)


def tensor(shape) -> relax.TensorType:
    return relax.TensorType(shape, "float32")


def fuseops_example() -> tvm.IRModule:
    """TVM's own FuseOps example: conv2d(x, w) -> add(constant) -> relu; conv * 0.5; the sum."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", tensor((1, 3, 16, 16)))
    w = relax.Var("w", tensor((3, 3, 3, 3)))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            conv = bb.emit(relax.op.nn.conv2d(x, w))
            a = bb.emit(relax.op.add(conv, relax.const(np.ones((1, 3, 14, 14), "float32"))))
            r = bb.emit(relax.op.nn.relu(a))
            m = bb.emit(relax.op.multiply(conv, relax.const(0.5, "float32")))
            z = bb.emit_output(relax.op.add(r, m))
        bb.emit_func_output(z)
    return legalized(bb.get())


def main_calls(mod: tvm.IRModule) -> list:
    calls = []
    relax.analysis.post_order_visit(
        mod["main"].body, lambda e: calls.append(e) if isinstance(e, relax.Call) else None
    )
    return calls


def test_tvm_fuseops_example_is_one_kernel_with_x_w_and_the_constant():
    mod = fuseops_example()
    ops, bindings = T.graph_of(mod, llvm_schedules)
    assert [o.klass for o in ops] == [M.MANY_TO_MANY] + [M.ONE_TO_ONE] * 4
    fused, report = T.fuse(mod, "gdp", F.CostModel(), llvm_schedules)
    assert report["groups"] == 1 and report["boundary_bytes"] == 0
    fused = relax.transform.FuseTIR()(fused)
    kernels = [gv for gv, f in fused.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    (call,) = [c for c in main_calls(fused) if c.args and isinstance(c.args[0], tvm.ir.GlobalVar)]
    assert len(kernels) == 1
    args = list(call.args[1].fields)
    assert [a.name for a in args[:2]] == ["x", "w"] and isinstance(args[2], tvm.ir.Constant)
    # The numbers: the fused kernel against NumPy.
    target = tvm.target.Target("llvm")
    with target:
        rest = relax.backend.cpu_generic.pipeline
        lowered = tvm.transform.Sequential(
            rest.dataflow_lower_passes(target) + rest.finalize_passes(target)
        )(fused)
    vm = relax.VirtualMachine(tvm.compile(lowered, target=target), tvm.cpu())
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 3, 16, 16)).astype("float32")
    w = rng.standard_normal((3, 3, 3, 3)).astype("float32")
    got = vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w)).numpy()
    conv = np.zeros((1, 3, 14, 14), np.float32)
    for f in range(3):
        for i in range(14):
            for j in range(14):
                conv[0, f, i, j] = np.sum(x[0, :, i : i + 3, j : j + 3] * w[f])
    want = np.maximum(conv + 1, 0) + conv * 0.5
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def chain_model() -> onnx.ModelProto:
    """matmul -> reshape -> transpose -> add: TVM fuses nothing into the matmul."""
    b = numpy_helper.from_array(np.linspace(-1, 1, 64 * 64, dtype=np.float32).reshape(64, 64), "b")
    shape = numpy_helper.from_array(np.array([32, 8, 8], np.int64), "shape")
    bias = numpy_helper.from_array(np.linspace(0, 1, 32 * 8 * 8, dtype=np.float32), "bias")
    bias.dims[:] = [8, 32, 8]
    nodes = [
        helper.make_node("MatMul", ["x", "b"], ["m"]),
        helper.make_node("Reshape", ["m", "shape"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[1, 0, 2]),
        helper.make_node("Add", ["t", "bias"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 32, 8])],
        initializer=[b, shape, bias],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_chain_tvm_leaves_unfused_is_one_kernel_under_gdp(tmp_path):
    model = chain_model()
    x = np.random.default_rng(1).standard_normal((32, 64)).astype(np.float32)
    want = gdp.compile(model, target="reference")(x)
    kernels = {}
    for fusion in ("tvm", "gdp"):
        compiled = gdp.compile(model, target="cpu", fusion=fusion, cache_dir=tmp_path)
        np.testing.assert_allclose(compiled(x), want, rtol=1e-5, atol=1e-5)
        kernels[fusion] = compiled.report()["kernels"]
        report = compiled.report()["fusion"]
        if fusion == "tvm":  # TVM's plan as gdp reads it back: one group per FuseOps kernel
            assert report["tvm_groups"] == kernels["tvm"]
    assert kernels["tvm"] >= 2 and kernels["gdp"] == 1, kernels
    assert report["boundary_bytes"] < report["tvm_boundary_bytes"]


def test_a_diamond_never_yields_a_cycle():
    """a -> b -> d and a -> c -> d with c not fusable: {a, b, d} without c would make the cycle
    group -> c -> group; the planner never returns it, and the checker refuses it."""
    ops = [
        F.Op("a", M.ONE_TO_ONE, 100, ()),
        F.Op("b", M.ONE_TO_ONE, 100, (0,)),
        F.Op("c", M.NOT_FUSABLE, 100, (0,)),
        F.Op("d", M.ONE_TO_ONE, 100, (1, 2), is_output=True),
    ]
    graph = F.Graph(ops, CPU)
    assert not F.is_legal(graph, [0, 0, 1, 0])
    for baseline in (None, [0, 1, 2, 3]):
        plan = F.plan(ops, CPU, F.CostModel(), baseline)
        assert F.is_legal(graph, plan)
        assert not (plan[0] == plan[3] and plan[2] != plan[0])


def test_an_elementwise_tail_moves_from_one_reduction_to_the_next():
    """Sharpness's variance: row means of x, their mean, then (x - mean)^2 and its row means.
    TVM fuses the subtract and the square after the mean (an elementwise epilogue) and stores
    the squares; gdp moves them to the reduction they feed, so only the scalar crosses."""
    ops = [
        F.Op("x", M.ONE_TO_ONE, 800, ()),
        F.Op("row_means", M.MANY_TO_MANY, 40, (0,)),
        F.Op("mean", M.MANY_TO_MANY, 4, (1,)),
        F.Op("sub", M.ONE_TO_ONE, 800, (0, 2)),
        F.Op("square", M.ONE_TO_ONE, 800, (3,)),
        F.Op("square_row_means", M.MANY_TO_MANY, 40, (4,), is_output=True),
    ]
    tvm_like = [0, 1, 2, 2, 2, 3]
    graph = F.Graph(ops, CPU)
    plan = F.plan(ops, CPU, F.CostModel(), tvm_like)
    assert plan[3] == plan[4] == plan[5] != plan[2]
    assert F.is_legal(graph, plan) and F.acyclic(graph, plan)
    assert graph.boundary_bytes(plan) == 2 * 800 + 40 + 4  # x read twice, the two means
    assert graph.boundary_bytes(tvm_like) == 2 * 800 + 40 + 800


def test_a_row_reduction_joins_the_stencil_whose_image_also_leaves_the_kernel():
    """A Laplacian read by its row means and by a later pass: a reduction may share a kernel
    with an input that is also exported only where it reduces rows (the kernel runs as row
    strips); any other reduction keeps its inputs private."""
    for reduces_rows, fused in ((True, True), (False, False)):
        ops = [
            F.Op("lap", M.ONE_TO_ONE, 800, ()),
            F.Op("row_means", M.MANY_TO_MANY, 40, (0,), reduces_rows=reduces_rows),
            F.Op("later", M.NOT_FUSABLE, 800, (0, 1), is_output=True),
        ]
        plan = F.plan(ops, CPU, F.CostModel(), [0, 1, 2])
        assert (plan[0] == plan[1]) is fused
        assert F.is_legal(F.Graph(ops, CPU), plan)


IMAGES = (("images", 1000),)
CLASSES = [M.ONE_TO_ONE, M.REORGANIZE, M.SHUFFLE, M.ONE_TO_MANY, M.MANY_TO_MANY, M.NOT_FUSABLE]


def batch_statistics(rows=(80, 80, 80), sum_scans=True) -> list[F.Op]:
    """mean_std's shape: a cast feeding row sums, and a minimum and a maximum of the same
    images, all scanning rows (row counts given), combined by one elementwise op."""
    return [
        F.Op("cast", M.ONE_TO_ONE, 8000, (), sources=IMAGES),
        F.Op("row_sums", M.MANY_TO_MANY, 80, (0,), row_scan=rows[0] if sum_scans else 0),
        F.Op("min", M.MANY_TO_MANY, 3, (), row_scan=rows[1], sources=IMAGES),
        F.Op("max", M.MANY_TO_MANY, 3, (), row_scan=rows[2], sources=IMAGES),
        F.Op("stats", M.ONE_TO_ONE, 24, (1, 2, 3), is_output=True),
    ]


def test_sibling_row_scans_of_one_input_share_a_kernel():
    """TVM's FuseOps reads the images three times (the sums, the minimum, the maximum: three
    kernels). gdp merges the siblings, whose reductions its schedule runs in one pass over the
    rows: the images are read once."""
    ops = batch_statistics()
    graph = F.Graph(ops, CPU)
    tvm_like = [0, 0, 1, 2, 3]
    assert graph.reread_bytes(tvm_like) == 2 * 1000
    plan = F.plan(ops, CPU, F.CostModel(), tvm_like)
    assert plan[0] == plan[1] == plan[2] == plan[3]
    assert graph.reread_bytes(plan) == 0
    assert F.is_legal(graph, plan) and F.acyclic(graph, plan)


@pytest.mark.parametrize(
    "ops, why",
    [
        (batch_statistics(rows=(80, 40, 40)), "rows of another count"),
        (batch_statistics(sum_scans=False), "a reduction that does not scan rows"),
    ],
)
def test_siblings_merge_only_where_one_pass_runs_them(ops, why):
    plan = F.plan(ops, CPU, F.CostModel(), [0, 0, 1, 2, 3])
    assert plan[1] != plan[2] or plan[1] != plan[3], why
    assert F.is_legal(F.Graph(ops, CPU), plan)


def test_the_planner_follows_the_backends_kernel_rules():
    """The planner is target-neutral: what one kernel may hold is the backend's to say. The same
    graphs under other rules: a backend whose kernels hold no row scans together reads the
    images three times, one that stores a reduction's inputs only privately keeps the
    Laplacian apart from its row means, and one that holds two many-to-many ops fuses the row
    sums with the minimum without any row-scan facts."""
    import dataclasses

    stats, tvm_like = batch_statistics(), [0, 0, 1, 2, 3]
    apart = dataclasses.replace(CPU, row_scans_share=False)
    plan = F.plan(stats, apart, F.CostModel(), tvm_like)
    assert len({plan[1], plan[2], plan[3]}) == 3
    assert F.Graph(stats, apart).reread_bytes(plan) == 2 * 1000
    assert not F.is_legal(F.Graph(stats, apart), [0, 0, 0, 0, 1])
    assert F.is_legal(F.Graph(stats, CPU), [0, 0, 0, 0, 1])

    ops = [
        F.Op("lap", M.ONE_TO_ONE, 800, ()),
        F.Op("row_means", M.MANY_TO_MANY, 40, (0,), reduces_rows=True),
        F.Op("later", M.NOT_FUSABLE, 800, (0, 1), is_output=True),
    ]
    private = dataclasses.replace(CPU, row_reductions_store_inputs=False)
    assert F.plan(ops, CPU, F.CostModel(), [0, 1, 2])[0] == 0
    plan = F.plan(ops, private, F.CostModel(), [0, 1, 2])
    assert plan[0] != plan[1]

    plain = batch_statistics(sum_scans=False)
    two = F.KernelRules(many_to_many=2, private_anchor_inputs=False)
    assert not F.is_legal(F.Graph(plain, F.KernelRules()), [0, 0, 0, 1, 2])
    assert F.is_legal(F.Graph(plain, two), [0, 0, 0, 1, 2])


def test_siblings_joined_through_an_outside_op_are_not_merged():
    """The minimum feeds an op that feeds the maximum's input: min and max both read the images,
    but a group of the two would make the cycle group -> scale -> group."""
    ops = [
        F.Op("min", M.MANY_TO_MANY, 3, (), row_scan=80, sources=IMAGES),
        F.Op("scale", M.NOT_FUSABLE, 3, (0,)),
        F.Op("shifted", M.ONE_TO_ONE, 1000, (1,), sources=IMAGES),
        F.Op("max", M.MANY_TO_MANY, 3, (2,), row_scan=80, is_output=True),
    ]
    graph = F.Graph(ops, CPU)
    assert not F.is_legal(graph, [0, 1, 2, 0])
    plan = F.plan(ops, CPU, F.CostModel(), [0, 1, 2, 3])
    assert plan[0] != plan[3] and F.acyclic(graph, plan) and F.is_legal(graph, plan)


def test_two_convex_groups_that_feed_each_other_are_never_formed():
    """Found by the random-DAG test: {a, e} and {b, c, d} are each convex, yet a feeds d and c
    feeds e, so each group waits for the other. Merging a and e saves a read of the images; the
    planner takes the next step instead."""
    ops = [
        F.Op("a", M.MANY_TO_MANY, 100, (), sources=IMAGES),
        F.Op("b", M.ONE_TO_ONE, 200, (), sources=IMAGES),
        F.Op("c", M.MANY_TO_MANY, 300, (1,)),
        F.Op("d", M.ONE_TO_ONE, 400, (0, 1)),
        F.Op("e", M.ONE_TO_ONE, 500, (0, 2), is_output=True, sources=IMAGES),
    ]
    graph = F.Graph(ops, CPU)
    cyclic = [0, 1, 1, 1, 0]
    assert F.is_legal(graph, cyclic) and not F.acyclic(graph, cyclic)
    plan = F.plan(ops, CPU, F.CostModel(alpha=1.0, beta=0.5), list(range(len(ops))))
    assert F.acyclic(graph, plan) and F.is_legal(graph, plan)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(CLASSES),
            st.sets(st.integers(0, 30), max_size=2),
            st.sampled_from([0, 0, 80, 160]),
            st.booleans(),
        ),
        min_size=2,
        max_size=12,
    )
)
def test_plans_with_siblings_stay_legal_acyclic_and_cost_no_more_than_the_start(spec):
    """Abstract DAGs of every class, with row scans and a shared graph input: sibling merges
    included, every plan covers each op once, stays legal and acyclic, and costs no more than
    its start; so does a plan searched from scratch."""
    ops = []
    for v, (klass, inputs, scan, reads) in enumerate(spec):
        producers = tuple(sorted({i % v for i in inputs})) if v else ()
        ops.append(
            F.Op(
                f"op{v}",
                klass,
                100 * (v + 1),
                producers,
                is_output=v == len(spec) - 1,
                row_scan=scan if klass == M.MANY_TO_MANY else 0,
                sources=IMAGES if reads or not producers else (),
            )
        )
    graph = F.Graph(ops, CPU)
    model = F.CostModel(alpha=1.0, beta=0.5)
    start = list(range(len(ops)))
    plan = F.plan(ops, CPU, model, start)
    assert len(plan) == len(ops)
    assert F.acyclic(graph, plan) and F.is_legal(graph, plan)
    assert F.cost(graph, plan, model) <= F.cost(graph, start, model)
    searched = F.plan(ops, CPU, model)  # from scratch: exact below EXACT_LIMIT ops
    assert F.acyclic(graph, searched) and F.is_legal(graph, searched)


def batch_statistics_model() -> onnx.ModelProto:
    """Row sums of the images in int64, and their minimum and maximum per channel."""
    nodes = [
        helper.make_node("Cast", ["images"], ["wide"], to=TensorProto.INT64),
        helper.make_node("ReduceSum", ["wide", "row_axis"], ["row_sums"], keepdims=0),
        helper.make_node("ReduceMin", ["images"], ["min"], axes=[0, 1, 2], keepdims=0),
        helper.make_node("ReduceMax", ["images"], ["max"], axes=[0, 1, 2], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "batch_statistics",
        [helper.make_tensor_value_info("images", TensorProto.UINT8, [2, 30, 64, 3])],
        [
            helper.make_tensor_value_info("row_sums", TensorProto.INT64, [2, 30, 3]),
            helper.make_tensor_value_info("min", TensorProto.UINT8, [3]),
            helper.make_tensor_value_info("max", TensorProto.UINT8, [3]),
        ],
        initializer=[numpy_helper.from_array(np.array([2], np.int64), "row_axis")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_row_sums_minimum_and_maximum_of_one_batch_are_one_kernel_under_gdp(tmp_path):
    images = np.random.default_rng(6).integers(1, 255, (2, 30, 64, 3), dtype=np.uint8)
    images[1, 7, 9, 0], images[0, 29, 63, 2] = 0, 255
    kernels = {}
    for fusion in ("tvm", "gdp"):
        compiled = gdp.compile(
            batch_statistics_model(), target="cpu", fusion=fusion, cache_dir=tmp_path
        )
        got = compiled(images)
        np.testing.assert_array_equal(got["row_sums"], images.astype(np.int64).sum(axis=2))
        np.testing.assert_array_equal(got["min"], images.min(axis=(0, 1, 2)))
        np.testing.assert_array_equal(got["max"], images.max(axis=(0, 1, 2)))
        kernels[fusion] = compiled.report()["kernels"]
        report = compiled.report()["fusion"]
    assert kernels == {"tvm": 3, "gdp": 1}, kernels
    assert report["reread_bytes"] == 0 and report["tvm_reread_bytes"] == 2 * images.nbytes


# Random DAGs as Relax graphs of one tensor shape, one op per mapping class.
OPS = {
    "add": M.ONE_TO_ONE,
    "relu": M.ONE_TO_ONE,
    "flip": M.REORGANIZE,
    "transpose": M.SHUFFLE,
    "conv": M.MANY_TO_MANY,
    "sum": M.MANY_TO_MANY,
}


def relax_dag(spec: list[tuple[str, int, int]]) -> tvm.IRModule:
    shape = (1, 1, 8, 8)
    bb = relax.BlockBuilder()
    x = relax.Var("x", tensor(shape))
    w = relax.const(np.full((1, 1, 3, 3), 0.1, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            values = [x]
            for kind, i, j in spec:
                a, b = values[i % len(values)], values[j % len(values)]
                if kind == "add":
                    expr = relax.op.add(a, b)
                elif kind == "relu":
                    expr = relax.op.nn.relu(a)
                elif kind == "flip":
                    expr = relax.op.flip(a, axis=3)
                elif kind == "transpose":
                    expr = relax.op.permute_dims(a, [0, 1, 3, 2])
                elif kind == "conv":
                    expr = relax.op.nn.conv2d(a, w, padding=1)
                else:
                    expr = relax.op.add(a, relax.op.sum(b, axis=[3], keepdims=True))
                values.append(bb.emit(expr))
            out = bb.emit_output(values[-1])
        bb.emit_func_output(out)
    return legalized(bb.get())


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(sorted(OPS)), st.integers(0, 40), st.integers(0, 40)),
        min_size=2,
        max_size=14,
    )
)
def test_plans_cover_every_op_once_stay_acyclic_and_cost_no_more_than_tvms(spec):
    mod = relax_dag(spec)
    ops, bindings = T.graph_of(mod, llvm_schedules)
    graph = F.Graph(ops, CPU)
    tvm_plan = T.tvm_plan(mod, bindings)
    model = F.CostModel(alpha=1.0, beta=0.5)
    for plan in (F.plan(ops, CPU, model, tvm_plan), F.plan(ops, CPU, model)):
        assert len(plan) == len(ops)  # every op in exactly one group
        assert F.acyclic(graph, plan)
    refined = F.plan(ops, CPU, model, tvm_plan)
    assert F.cost(graph, refined, model) <= F.cost(graph, tvm_plan, model)
    assert F.is_legal(graph, F.plan(ops, CPU, model))


def test_the_fusion_option_is_checked(tmp_path):
    with pytest.raises(gdp.TargetError, match="fusion: expected one of"):
        gdp.compile(chain_model(), target="cpu", fusion="max", cache_dir=tmp_path)
