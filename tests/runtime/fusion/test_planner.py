"""The fusion planner (gdp.runtime.fusion) on abstract graphs: hand-computed plans and byte
counts, the backend's kernel rules, and random DAGs that must stay legal, acyclic and no more
costly than the plan they start from."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gdp.ops import mapping as M
from gdp.runtime import fusion as F
from gdp.runtime.backends.tvm import llvm_schedules

# Planned under the cpu backend's kernel rules, what its schedules run as one kernel (the
# expected plans below are the cpu's).
CPU = llvm_schedules.KERNEL_RULES


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
