"""Mapping classes (how an op's outputs map to its inputs) and the fusion rules between them: the
fusion sources' OpMapPatternKind ([000] in shared/reference/fusion-sources.md), with its holes
fixed. gdp.runtime.fusion plans with these; the TVM backend classifies each kernel from TVM's
own access-pattern analysis and the kernel's TIR (runtime/backends/tvm/fusion.py).
"""

from __future__ import annotations

ONE_TO_ONE = "one-to-one"  # y[d] = F(x[f(d)]): elementwise, broadcast operands
REORGANIZE = "reorganize"  # y[d] = x[f(d)], no arithmetic, order kept: reshape, slice, pad, flip
SHUFFLE = "shuffle"  # y[d] = x[perm(d)]: transpose
ONE_TO_MANY = "one-to-many"  # output rank or size above the input's: expand, broadcast_to
MANY_TO_MANY = "many-to-many"  # conv, matmul, reductions (many-to-one included)
NOT_FUSABLE = "not-fusable"  # sort, scan, data-dependent shapes, external calls

CLASSES = (ONE_TO_ONE, REORGANIZE, SHUFFLE, ONE_TO_MANY, MANY_TO_MANY, NOT_FUSABLE)

# producer class -> consumer classes it may fuse into (the consumer reads the producer's value
# inside the same kernel). One-to-one fuses with anything, both ways: the paper's table omits
# many-to-many -> one-to-one, yet its own conv -> bias_add -> relu example fuses it.
# Reorganize keeps the element order, so a many-to-many consumer still reads it contiguously;
# a shuffle does not. One-to-many never feeds a many-to-many op (the expanded reads break its
# contiguity), and many-to-many -> many-to-many would need a stencil fusion with halo
# recompute, which gdp's schedules do not do yet.
_FUSES: dict[str, frozenset[str]] = {
    ONE_TO_ONE: frozenset({ONE_TO_ONE, REORGANIZE, SHUFFLE, ONE_TO_MANY, MANY_TO_MANY}),
    REORGANIZE: frozenset({ONE_TO_ONE, REORGANIZE, SHUFFLE, ONE_TO_MANY, MANY_TO_MANY}),
    SHUFFLE: frozenset({ONE_TO_ONE, REORGANIZE, SHUFFLE}),
    ONE_TO_MANY: frozenset({ONE_TO_ONE, REORGANIZE, SHUFFLE, ONE_TO_MANY}),
    MANY_TO_MANY: frozenset({ONE_TO_ONE, REORGANIZE}),
    NOT_FUSABLE: frozenset(),
}


def may_fuse(producer: str, consumer: str) -> bool:
    """Whether a `producer`-class op may run in one kernel with its `consumer`-class reader."""
    return consumer in _FUSES[producer]
