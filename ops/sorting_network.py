"""Comparator networks (min/max) as data: Batcher's odd-even merge sort and merge, an optimal
sort of five, and the median of a 3x3 or 5x5 window built from sorted columns. A network is a
DAG of wires, ("in", k) for input k or ("min"|"max", wire, wire), which gdp.ops.filters turns
into TF ops and gdp.runtime.median into TIR expressions. Pure Python: no TensorFlow here.
"""

from __future__ import annotations


def merge_pairs(lo: int, hi: int, r: int = 1):
    """Batcher's odd-even merge of wires lo..hi (inclusive, a power of two of them), each half
    sorted: comparators (i, j) that leave the smaller value on i."""
    step = r * 2
    if step < hi - lo:
        yield from merge_pairs(lo, hi, step)
        yield from merge_pairs(lo + r, hi, step)
        yield from ((i, i + r) for i in range(lo + r, hi - r, step))
    else:
        yield (lo, lo + r)


def batcher_pairs(lo: int, hi: int):
    """Batcher's odd-even merge sort on wires lo..hi (inclusive, a power of two of them):
    comparators (i, j) that leave the smaller value on i."""
    if hi - lo >= 1:
        mid = lo + (hi - lo) // 2
        yield from batcher_pairs(lo, mid)
        yield from batcher_pairs(mid + 1, hi)
        yield from merge_pairs(lo, hi)


# A wire of a comparator network: ("in", tensor index), INF, or ("min"|"max", wire, wire): a
# DAG over the inputs, emitted lazily (_Wires) so that only what the wanted outputs need
# becomes graph ops. INF pads a network to a power of two and resolves at trace time.
INF = ("inf",)


def network(wires: list[tuple], pairs) -> list[tuple]:
    """`wires` after the comparators `pairs` (each leaves the smaller value on its first)."""
    wires = list(wires)
    for i, j in pairs:
        a, b = wires[i], wires[j]
        if b == INF:
            continue
        if a == INF:
            wires[i], wires[j] = b, a
            continue
        wires[i], wires[j] = ("min", a, b), ("max", a, b)
    return wires


def merged(a: list[tuple], b: list[tuple]) -> list[tuple]:
    """The wires of two sorted wire lists merged into one sorted list (odd-even merge)."""
    n = 1 << (max(len(a), len(b)) - 1).bit_length()
    padded = [*a, *[INF] * (n - len(a)), *b, *[INF] * (n - len(b))]
    return network(padded, merge_pairs(0, 2 * n - 1))[: len(a) + len(b)]


def inputs(first: int, count: int) -> list[tuple]:
    return [("in", k) for k in range(first, first + count)]


# Optimal sorting networks of three and five wires (three and nine comparators).
SORT3 = ((0, 1), (1, 2), (0, 1))
SORT5 = ((0, 1), (3, 4), (2, 4), (2, 3), (0, 3), (0, 2), (1, 4), (1, 3), (1, 2))


def _min(a: tuple, b: tuple) -> tuple:
    return ("min", a, b)


def _max(a: tuple, b: tuple) -> tuple:
    return ("max", a, b)


def _median3(a: tuple, b: tuple, c: tuple) -> tuple:
    return _max(_min(a, b), _min(_max(a, b), c))


def median_window(ksize: int) -> tuple:
    """The wire of the median of a ksize x ksize window (3 or 5) whose input ("in", dy * ksize
    + dx) is the value at row dy, column dx, by sorted columns (gdp.ops.filters.median_3x3 and
    median_5x5 say why each step holds): 3x3 in 18 min/max once the columns are sorted, 5x5 in
    116 (a pruned sorting network of 25: 202)."""
    columns = [
        network([("in", dy * ksize + dx) for dy in range(ksize)], SORT5 if ksize == 5 else SORT3)
        for dx in range(ksize)
    ]
    if ksize == 3:
        lows, mids, highs = zip(*columns, strict=True)
        largest_low = _max(_max(lows[0], lows[1]), lows[2])
        smallest_high = _min(_min(highs[0], highs[1]), highs[2])
        return _median3(largest_low, _median3(*mids), smallest_high)
    if ksize != 5:
        raise ValueError(f"median_window: expected ksize 3 or 5, got {ksize}")
    # the columns 0-1 and 2-3 merged, then the four; the 12th of 25 is among ranks 7-12 of
    # the four and the fifth column
    quad = merged(merged(columns[0], columns[1]), merged(columns[2], columns[3]))
    median = quad[12]
    for i in range(5):
        median = _min(median, _max(quad[7 + i], columns[4][4 - i]))
    return median
