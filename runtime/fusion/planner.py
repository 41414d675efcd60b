"""Fusion planning: which ops of a graph run as one kernel (the fusion sources' mapping-type
fusion, [000] in shared/reference/fusion-sources.md, with its holes fixed). Target-neutral: what
one kernel may hold beyond the class rules is the backend's to say (KernelRules, published by its
schedule module and passed in).

The planner works on an abstract DAG: each op has a mapping class (gdp.ops.mapping) and the bytes
of its output. A plan assigns every op to one group; a group is legal when
- every edge inside it is allowed by the class rules (gdp.ops.mapping.may_fuse; one-to-one fuses
  both ways, which the paper's table omits although its own conv -> bias_add -> relu needs it),
- it holds no not-fusable op beside others,
- it holds what the backend's kernel rules allow: at most `many_to_many` many-to-many ops, or
  (with `row_scans_share`) several reductions that each scan one input row by row over rows of
  one count (Op.row_scan); with `private_anchor_inputs`, the ops feeding its many-to-many ops
  are read only inside it, except (with `row_reductions_store_inputs`) where the op reduces rows
  (a row-strip schedule stores a reduction's input on the way, computed per strip); without
  `stack_slice_stencils`, a step does not stack stencils written with slices (values read
  through several shifted views) beyond what one of its parts held,
- it is convex: no path leaves it and comes back (the paper's {4,5,6,9} without 8 would make a
  cycle group -> 8 -> group), and connected, except for siblings (below).
Values read outside their group are materialised (the group's outputs).

Cost of a complete plan: alpha * (bytes crossing group boundaries + bytes of graph inputs read
again by a second group) + beta * the variance of the group sizes (the paper's FusedCost, which
counts only the first term), alpha and beta from the target's profile.

Search, given a baseline plan (TVM's): best-first steps from it while the cost falls, each
merging two groups joined by an edge, merging two sibling groups (no edge between them, one
value read by both, each holding a row scan: one pass then reads it once; only where the rules
let row scans share a kernel), or moving a group's private tail into the group that consumes it.
Without one: ops are placed in topological order, each into a new group, or into the group of one
of its producers, or into the union of all its producers' groups, when that stays legal; graphs
of up to EXACT_LIMIT ops are searched exhaustively (branch and bound on the partial cost), larger
ones greedily (each op where it saves the most bytes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gdp.ops import mapping as M

EXACT_LIMIT = 14


@dataclass(frozen=True)
class Op:
    name: str
    klass: str  # a gdp.ops.mapping class
    out_bytes: int
    inputs: tuple[int, ...]  # indices of producer ops (graph inputs and constants not listed)
    is_output: bool = False
    # A many-to-many op that reduces each row of its input to one value (a mean along the
    # image's rows): a row-strip kernel computes it beside the rows it reads, so its input may
    # also leave the group.
    reduces_rows: bool = False
    # For a reduction computed one input row at a time (a sum along each row of an NHWC batch,
    # or a minimum per channel of the whole batch, folded per row), the number of rows; else 0.
    # Such reductions of inputs with the same rows may share a kernel, which reads each row
    # once for all of them.
    row_scan: int = 0
    # The graph inputs it reads, with their bytes: each group reading an input reads it whole.
    sources: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class KernelRules:
    """What one kernel of a backend may hold beyond the class rules: each backend's schedule
    module publishes its own (the cpu's: runtime/backends/tvm/llvm_schedules.py), since what
    runs well as one kernel depends on how the backend schedules it."""

    # Many-to-many ops (reductions, convolutions) one kernel may hold.
    many_to_many: int = 1
    # Whether several reductions that each scan one input row by row, over rows of one count
    # (Op.row_scan), may share a kernel beyond `many_to_many` (one pass reads the rows for all).
    row_scans_share: bool = False
    # Whether the ops feeding a many-to-many op must be read only inside its kernel (a kernel
    # that reduces and also stores an intermediate of its input may run slower than two).
    private_anchor_inputs: bool = True
    # With private_anchor_inputs: except where the op reduces rows (Op.reduces_rows), which a
    # row-strip schedule computes beside the rows it stores.
    row_reductions_store_inputs: bool = False
    # Whether a step may stack stencils written with slices beyond what one of its parts held.
    stack_slice_stencils: bool = False


@dataclass(frozen=True)
class CostModel:
    alpha: float = 1.0  # per byte crossing a group boundary
    beta: float = 0.0  # per unit of variance of the group sizes


class Graph:
    """The DAG's derived facts (consumers, and ancestors as bit sets), and the backend's rules
    for what one kernel may hold."""

    def __init__(self, ops: Sequence[Op], rules: KernelRules) -> None:
        self.ops = list(ops)
        self.rules = rules
        n = len(self.ops)
        self.consumers: list[list[int]] = [[] for _ in range(n)]
        self.ancestors: list[int] = [0] * n  # bit i set: op i reaches this op
        for j, op in enumerate(self.ops):
            for i in op.inputs:
                if not 0 <= i < j:
                    raise ValueError(f"op {j} ({op.name}): inputs must come earlier, got {i}")
                self.consumers[i].append(j)
                self.ancestors[j] |= self.ancestors[i] | (1 << i)
        # The views (shifted slices) that read each op, as a bit set (_stencil_sources), and
        # the counts found per group: a plan's search asks for the same groups again and again
        # (a 31-tap Gaussian's 250 ops: 2.2 s of its compile counting them op by op).
        self.views: list[int] = [
            sum(1 << c for c in self.consumers[i] if self.ops[c].klass in _VIEWS) for i in range(n)
        ]
        self.stencil_counts: dict[int, int] = {}

    def boundary_bytes(self, group_of: Sequence[int]) -> int:
        """Bytes written by one group and read by another (each value once per reading group)."""
        total = 0
        for i, op in enumerate(self.ops):
            readers = {group_of[j] for j in self.consumers[i]} - {group_of[i]}
            total += op.out_bytes * len(readers)
        return total

    def reread_bytes(self, group_of: Sequence[int]) -> int:
        """Bytes of graph inputs read again: each input once per group reading it, less the one
        read no plan avoids."""
        readers: dict[str, set[int]] = {}
        size: dict[str, int] = {}
        for v, op in enumerate(self.ops):
            for name, nbytes in op.sources:
                readers.setdefault(name, set()).add(group_of[v])
                size[name] = nbytes
        return sum(size[name] * (len(groups) - 1) for name, groups in readers.items())


def cost(graph: Graph, group_of: Sequence[int], model: CostModel) -> float:
    sizes: dict[int, int] = {}
    for g in group_of:
        sizes[g] = sizes.get(g, 0) + 1
    counts = list(sizes.values())
    mean = sum(counts) / len(counts) if counts else 0.0
    variance = sum((c - mean) ** 2 for c in counts) / len(counts) if counts else 0.0
    moved = graph.boundary_bytes(group_of) + graph.reread_bytes(group_of)
    return model.alpha * moved + model.beta * variance


def legal_join(graph: Graph, members: int, v: int) -> bool:
    """Whether op v may join the legal group `members` (a bit set of ops placed before v)
    through one of its producers."""
    connected = any(members >> i & 1 for i in graph.ops[v].inputs)
    return connected and group_ok(graph, members | (1 << v))


def group_ok(graph: Graph, members: int, part: int | None = None, stencils: int = 1) -> bool:
    """The whole group's legality: no not-fusable op beside others, the many-to-many ops the
    kernel rules allow, their feeding ops read only inside where the rules say so, at most
    `stencils` slice-read stencil sources (unless the rules stack them), the class rules on its
    edges, convex. With `part` (one of two groups being merged), only the edges between `part`
    and the rest are checked: each side's own edges were accepted before (a baseline's groups
    may hold edges gdp's rules would not form)."""
    ops, rules = graph.ops, graph.rules
    group = [i for i in range(len(ops)) if members >> i & 1]
    if len(group) > 1 and any(ops[i].klass == M.NOT_FUSABLE for i in group):
        return False
    anchors = [a for a in group if ops[a].klass == M.MANY_TO_MANY]
    if len(anchors) > rules.many_to_many and not _row_scans_alike(graph, anchors):
        return False
    if not all(_inputs_private(graph, members, a) for a in anchors):
        return False
    if not rules.stack_slice_stencils and _stencil_sources(graph, members) > stencils:
        return False
    for j in group:
        for i in ops[j].inputs:
            if not members >> i & 1:
                continue
            if part is not None and bool(part >> i & 1) == bool(part >> j & 1):
                continue
            if not M.may_fuse(ops[i].klass, ops[j].klass):
                return False
    return _convex(graph, members)


def is_legal(graph: Graph, group_of: Sequence[int]) -> bool:
    """Every group of the plan legal under gdp's rules."""
    members: dict[int, int] = {}
    for v, g in enumerate(group_of):
        members[g] = members.get(g, 0) | (1 << v)
    return all(group_ok(graph, m) for m in members.values())


_VIEWS = (M.REORGANIZE, M.SHUFFLE)


def _stencil_sources(graph: Graph, members: int) -> int:
    """Members read through two or more views (shifted slices) inside the group: each is a
    stencil written with slices. gdp's schedules compute stacked ones per row strip, halo
    included, and at run time one kernel beats two (Canny's blur -> Sobel -> non-maximum
    suppression: 4.2 vs 4.7 ms), but their border conditions pile up: on cv2.Canny with a 5x5
    Sobel, TVM's lowering (InsertHoistIfThenElse, then Simplify) ran for minutes where the
    kernels apart compile in seconds. So a merge keeps the count of the larger part."""
    count = graph.stencil_counts.get(members)
    if count is None:
        count, rest = 0, members
        while rest:
            x = (rest & -rest).bit_length() - 1
            rest &= rest - 1
            count += (graph.views[x] & members).bit_count() >= 2
        graph.stencil_counts[members] = count
    return count


def _inputs_private(graph: Graph, members: int, anchor: int) -> bool:
    """Whether the group's ops that feed its many-to-many anchor are read only inside the group:
    a kernel that reduces (or convolves) and also stores one of its inputs' intermediates runs
    far slower under gdp's schedules than the two kernels apart (measured on sharpness), except
    where the anchor reduces rows: then the kernel runs as row strips, each storing its rows
    and reducing them while they are in cache. Always true where the kernel rules do not ask
    for private inputs."""
    rules = graph.rules
    if not rules.private_anchor_inputs:
        return True
    if rules.row_reductions_store_inputs and graph.ops[anchor].reduces_rows:
        return True
    feeding = graph.ancestors[anchor] & members
    return all(
        all(members >> c & 1 for c in graph.consumers[x]) for x in range(anchor) if feeding >> x & 1
    )


def _row_scans_alike(graph: Graph, anchors: list[int]) -> bool:
    """Whether several many-to-many ops may share a kernel: all reductions computed one row at a
    time over rows of one count, which gdp's cpu schedule runs under one loop over the rows,
    where the kernel rules let row scans share a kernel."""
    if not graph.rules.row_scans_share:
        return False
    scans = {graph.ops[a].row_scan for a in anchors}
    return len(scans) == 1 and 0 not in scans


def _convex(graph: Graph, members: int) -> bool:
    last = members.bit_length() - 1
    for x in range(last + 1):
        if members >> x & 1:
            continue
        if graph.ancestors[x] & members and any(
            graph.ancestors[y] >> x & 1 for y in range(x + 1, last + 1) if members >> y & 1
        ):
            return False
    return True


def _options(graph: Graph, groups: dict[int, int], group_of: list[int], v: int) -> list:
    """Where op v may go: (group id or None for a new one, the groups it merges)."""
    producer_groups = sorted({group_of[i] for i in graph.ops[v].inputs})
    options: list[tuple[int | None, tuple[int, ...]]] = [(None, ())]
    for g in producer_groups:
        if legal_join(graph, groups[g], v):
            options.append((g, (g,)))
    if len(producer_groups) > 1:
        union = 0
        for g in producer_groups:
            union |= groups[g]
        if legal_join(graph, union, v):
            options.append((producer_groups[0], tuple(producer_groups)))
    # Each group convex is not enough: two groups may feed each other through different ops.
    return [o for o in options if o[0] is None or acyclic(graph, _placed(group_of, v, o))]


def _placed(group_of: list[int], v: int, option) -> list[int]:
    """The group of each op up to v once v is placed as `option` says."""
    target, merged = option
    return [target if g in merged else g for g in group_of] + [target]


def _place(groups, group_of, v, option, next_id):
    target, merged = option
    if target is None:
        groups[next_id] = 1 << v
        group_of.append(next_id)
        return
    for g in merged[1:]:
        groups[target] |= groups.pop(g)
        for i, gi in enumerate(group_of):
            if gi == g:
                group_of[i] = target
    groups[target] |= 1 << v
    group_of.append(target)


def _partial_bytes(graph: Graph, group_of: list[int]) -> int:
    """Bytes that already cross boundaries among the placed ops (a lower bound of the rest)."""
    placed = len(group_of)
    total = 0
    for i in range(placed):
        readers = {group_of[j] for j in graph.consumers[i] if j < placed} - {group_of[i]}
        total += graph.ops[i].out_bytes * len(readers)
    return total


def plan(
    ops: Sequence[Op],
    rules: KernelRules,
    model: CostModel | None = None,
    baseline: Sequence[int] | None = None,
) -> list[int]:
    """The fusion plan: a group id per op (groups numbered in order of first op), each group a
    kernel the backend's `rules` allow.

    With a baseline (TVM's plan), the plan starts from it and steps while a step is legal and
    lowers the cost: never more bytes across kernel boundaries than the baseline, and kernels of
    the shapes the backend's schedules are tuned for. Without one, it searches from scratch."""
    model = model or CostModel()
    graph = Graph(ops, rules)
    if baseline is not None:
        return _renumber(_merge_down(graph, list(baseline), model))
    best = _exact(graph, model) if len(graph.ops) <= EXACT_LIMIT else _greedy(graph)
    return _renumber(best)


def _merge_down(graph: Graph, group_of: list[int], model: CostModel) -> list[int]:
    """Best-first steps from a plan while the cost falls. A step merges two groups joined by an
    edge, or two siblings (_siblings), or moves the tail of a group (ops whose values only it
    and the other group read) into the group that consumes it: TVM fuses a reduction with the
    elementwise ops after it, and when those ops feed a second reduction, moving them to it
    keeps their large result in registers (sharpness's (x - mean)^2 before its mean). A step
    must keep the pairwise rules on the edges it internalises, the kernel rules (many-to-many
    ops, row scans alike, the anchors' inputs private, and unless they allow it, no stacked
    stencils: no more slice-read stencil sources than the larger of the two parts had),
    convexity; the plan after it must be acyclic."""
    while True:
        members: dict[int, int] = {}
        for v, g in enumerate(group_of):
            members[g] = members.get(g, 0) | (1 << v)
        current = cost(graph, group_of, model)
        trials = []
        edges = {
            (i, j)
            for j, op in enumerate(graph.ops)
            for i in op.inputs
            if group_of[i] != group_of[j]
        }
        pairs = {(group_of[i], group_of[j]) for i, j in edges} | _siblings(graph, group_of)
        for a, b in pairs:
            if _step_ok(graph, members, a, b, members[b]):
                trials.append([a if g == b else g for g in group_of])
        for i, j in edges:
            a, b = group_of[i], group_of[j]
            for tail in _tails(graph, members[a], members[b], i):
                if _step_ok(graph, members, b, a, tail):
                    trials.append([b if tail >> v & 1 else g for v, g in enumerate(group_of)])
        # The cheapest step that keeps the plan acyclic. Each group convex is not enough: group
        # A may feed group B through one op while B feeds A through another (found by the
        # random-DAG property test), a cycle no single group's convexity sees.
        priced = sorted(
            ((cost(graph, t, model), k) for k, t in enumerate(trials)), key=lambda p: p[0]
        )
        step = next(
            (trials[k] for c, k in priced if c < current and acyclic(graph, trials[k])), None
        )
        if step is None:
            return group_of
        group_of = step


def _siblings(graph: Graph, group_of: list[int]) -> set[tuple[int, int]]:
    """Pairs of groups joined by no edge that read one value (a graph input, or an op's result
    from a third group) and each hold a row-scan reduction (Op.row_scan): merged, they read it
    once. TVM's FuseOps never groups siblings; gdp does only where its schedule runs the
    union as one pass (mean_std: the packed row sums, the minimum and the maximum of one
    batch)."""
    if not graph.rules.row_scans_share:
        return set()
    scanning = {group_of[v] for v, op in enumerate(graph.ops) if op.row_scan}
    readers: dict[object, set[int]] = {}
    for v, op in enumerate(graph.ops):
        if group_of[v] not in scanning:
            continue
        for name, _ in op.sources:
            readers.setdefault(name, set()).add(group_of[v])
        for i in op.inputs:
            if group_of[i] != group_of[v]:
                readers.setdefault(i, set()).add(group_of[v])
    return {(a, b) for groups in readers.values() for a in groups for b in groups if a < b}


def _step_ok(graph: Graph, members: dict[int, int], into: int, source: int, moved: int) -> bool:
    """Whether moving the ops `moved` (all or part of group `source`) into group `into` leaves
    both groups legal."""
    union = members[into] | moved
    stencils = max(_stencil_sources(graph, members[into]), _stencil_sources(graph, moved))
    if not group_ok(graph, union, part=members[into], stencils=stencils):
        return False
    rest = members[source] & ~moved
    return rest == 0 or _remainder_ok(graph, rest)


def _remainder_ok(graph: Graph, members: int) -> bool:
    """A legal group less some of its ops: still connected and convex, and its anchor's inputs
    still private (its other edges were accepted before)."""
    anchors = [a for a in range(len(graph.ops)) if members >> a & 1]
    anchors = [a for a in anchors if graph.ops[a].klass == M.MANY_TO_MANY]
    if not all(_inputs_private(graph, members, a) for a in anchors):
        return False
    return _connected(graph, members) and _convex(graph, members)


def _connected(graph: Graph, members: int) -> bool:
    first = (members & -members).bit_length() - 1
    seen, frontier = 1 << first, [first]
    while frontier:
        v = frontier.pop()
        for w in (*graph.ops[v].inputs, *graph.consumers[v]):
            if members >> w & 1 and not seen >> w & 1:
                seen |= 1 << w
                frontier.append(w)
    return seen == members


def _tails(graph: Graph, source: int, into: int, start: int) -> list[int]:
    """Growing sets of ops of group `source`, from op `start` upwards through producers, each
    set closed under consumers: every value it computes is read only by itself or group
    `into` (graph outputs may be computed in either group)."""
    tails, tail = [], 0
    frontier = [start]
    while frontier:
        v = frontier.pop(0)
        if tail >> v & 1 or not all((tail | into | 1 << v) >> c & 1 for c in graph.consumers[v]):
            continue
        tail |= 1 << v
        if tail != source:
            tails.append(tail)
        frontier += [i for i in graph.ops[v].inputs if source >> i & 1]
    return tails


def _greedy(graph: Graph) -> list[int]:
    groups: dict[int, int] = {}
    group_of: list[int] = []
    for v in range(len(graph.ops)):
        options = _options(graph, groups, group_of, v)

        def saved(option, v=v) -> tuple[int, int]:
            target, merged = option
            if target is None:
                return (0, 0)
            inside = set(merged)
            read = {i for i in graph.ops[v].inputs if group_of[i] in inside}
            return (sum(graph.ops[i].out_bytes for i in read), len(merged))

        _place(groups, group_of, v, max(options, key=saved), len(graph.ops) + v)
    return group_of


def _exact(graph: Graph, model: CostModel) -> list[int]:
    n = len(graph.ops)
    best: list[list[int] | float] = [_greedy(graph), 0.0]
    best[1] = cost(graph, best[0], model)

    def search(groups: dict[int, int], group_of: list[int]) -> None:
        v = len(group_of)
        if model.alpha * _partial_bytes(graph, group_of) >= best[1]:
            return  # the bytes already crossing only grow (variance may fall: beta ignored)
        if v == n:
            c = cost(graph, group_of, model)
            if c < best[1]:
                best[0], best[1] = list(group_of), c
            return
        for option in _options(graph, groups, group_of, v):
            g2, o2 = dict(groups), list(group_of)
            _place(g2, o2, v, option, n + v)
            search(g2, o2)

    search({}, [])
    return best[0]


def acyclic(graph: Graph, group_of: Sequence[int]) -> bool:
    """Whether the plan's condensed graph (one node per group) has no cycle (of a partial plan,
    one that places the first len(group_of) ops, among those)."""
    placed = graph.ops[: len(group_of)]
    edges = {(group_of[i], group_of[j]) for j, op in enumerate(placed) for i in op.inputs}
    edges = {(a, b) for a, b in edges if a != b}
    remaining = set(group_of)
    while remaining:
        sources = {g for g in remaining if not any(b == g and a in remaining for a, b in edges)}
        if not sources:
            return False
        remaining -= sources
    return True


def _renumber(group_of: Sequence[int]) -> list[int]:
    ids: dict[int, int] = {}
    return [ids.setdefault(g, len(ids)) for g in group_of]


def groups(group_of: Sequence[int]) -> list[list[int]]:
    out: dict[int, list[int]] = {}
    for v, g in enumerate(group_of):
        out.setdefault(g, []).append(v)
    return list(out.values())
