"""Helpers for gdp.runtime's hand-written kernels: TVMScript text built from pieces, and arrays
as their error messages name them.

Names in TVM 0.27's TVMScript: `name = value` declares a mutable local, which TVM allocates
(inside a parallel loop, from its workspace, at every step: a 5x5 median ran 10x slower so);
`name: T.let = value` binds an immutable value (a LetStmt: a register). The kernels written as
explicit vectors (color, resize, median, warp) bind with T.let; those written over
T.vectorized loops substitute their names instead (`inline`)."""

from __future__ import annotations

import re

import numpy as np

# Taps summed in one expression between two stores of the sums: LLVM keeps a sum in registers
# within an expression but stores it after each (a kernel's sums live in TVM's workspace
# memory), and a store a tap made the kernels bound by memory operations.
GROUP = 8


def indent(text: str, spaces: int) -> str:
    """`text` with each non-blank line indented by `spaces` (TVMScript built from pieces)."""
    return "".join(" " * spaces + line if line.strip() else line for line in text.splitlines(True))


def byte_shuffle(base: str, size: int, picks: list[int | None]) -> str:
    """64 bytes picked from the kernel's input `img`, of the `size` bytes from `base` (byte
    `picks[i]`, None for 255), as one
    T.Shuffle of the one 64-byte window, or two, that hold them (and a vector of 255s where a
    pick is None): LLVM makes it one byte permute (vpermb, or vpermt2b of two registers).
    The windows stay within the `size` bytes, which are at least 64."""
    taken = [p for p in picks if p is not None]
    lo = min(taken)
    width = 64 if max(taken) - lo < 64 and size >= 64 else 128
    start = max(0, min(lo, size - width))
    vectors = [f"img[T.Ramp({base} + {start}, 1, {width})]"]
    if len(taken) < len(picks):  # 255: lane `width`, the first of a vector of 255s
        vectors.append(f"T.Broadcast(T.uint8(255), {width})")
    lanes = ", ".join(str(width if p is None else p - start) for p in picks)
    return f"T.Shuffle([{', '.join(vectors)}], [{lanes}])"


def permute_bytes(low: str, index: str, high: str, dtype: str = "uint8x64") -> str:
    """AVX-512 VBMI's byte permute of two registers (vpermi2b): byte i is byte index[i] % 128
    of the 128 bytes `low` (64) then `high` (64), as a vector of `dtype` (8-bit lanes)."""
    return (
        f'T.call_llvm_pure_intrin("{dtype}", "llvm.x86.avx512.vpermi2var.qi.512",'
        f" {low}, {index}, {high})"
    )


def byte_lookup(table: str, first: int, index: str) -> str:
    """table[first + i] for each of the 64 byte indices i of `index` (a uint8x64 expression)
    into a 256-byte table at `first` in the uint8 buffer `table`, with AVX-512 VBMI: a byte
    permute of two registers (vpermi2b picks by an index's low 7 bits) over each half of the
    table, and a select on the index's top bit."""
    halves = [
        permute_bytes(
            f"{table}[T.Ramp({first + half}, 1, 64)]",
            index,
            f"{table}[T.Ramp({first + half + 64}, 1, 64)]",
        )
        for half in (0, 128)
    ]
    return f"T.Select({index} >= T.Broadcast(T.uint8(128), 64), {halves[1]}, {halves[0]})"


def inline(text: str, names: tuple[str, ...] | None = None) -> str:
    """`name = expression` lines (of `names`, else of any name) substituted into the lines
    after them, so that the kernel binds no names: TVM 0.27's loop vectorizer broadcasts a
    let-bound value as if it were the same in every lane (measured: a vectorized row of levels
    came out as one value), and in a parallel loop's body LLVM reloaded let-bound row offsets
    from memory at every vector step (measured: a 1080p kernel took 2.7 ms, 2.2 ms inlined)."""
    bound: dict[str, str] = {}
    out = []

    def substitute(code: str) -> str:
        for name, value in bound.items():
            code = re.sub(rf"\b{name}\b", f"({value})", code)
        return code

    for line in text.splitlines():
        target, _, value = line.partition(" = ")
        name = target.strip()
        if re.fullmatch(r"[a-z_0-9]+", name) and (names is None or name in names):
            bound[name] = substitute(value)
        else:
            out.append(substitute(line))
    return "\n".join(out) + "\n"


def columns(body: str, start: str, stop: str, lanes: int) -> str:
    """`body` (a template over {x}) for x in [start, stop): `lanes` columns at a time as TIR
    vectors, then the rest one by one."""
    count = f"T.max({stop} - ({start}), 0)"  # a negative count would run the tail backwards
    vector = inline(body.format(x=f"({start} + xo * {lanes} + xi)"))
    return (
        f"for xo in range({count} // {lanes}):\n"
        f"    for xi in T.vectorized({lanes}):\n"
        + indent(vector, 8)
        + f"for x in range({start} + {count} // {lanes} * {lanes}, {stop}):\n"
        + indent(inline(body.format(x="x")), 4)
    )


def tap_sums(value: str, weight: str, first: str, count: int, kind: str) -> str:
    """`count` (a constant) taps from tap `first`: `value` (a template over {t}, the tap) times
    `weight` ({t} too; "" for ones), each in type `kind`, summed onto sums[i] in order (a
    float multiply-add contracts into an fma)."""
    terms = []
    for k in range(count):
        t = f"{first} + {k}" if count > 1 else first
        term = f'T.Cast("{kind}", {value.format(t=t)})'
        terms.append(term + (f' * T.Cast("{kind}", {weight.format(t=t)})' if weight else ""))
    return " + ".join(["sums[i]", *terms])


def mirrored_sums(value: str, weight: str | tuple[int, ...], count: int, kind: str) -> str:
    """The `count` taps' weighted sum of tap_sums for weights the same read backwards: each
    pair of taps t and count - 1 - t added first, then times their weight (half the
    multiplies; the same integer sums). `weight`: a template over {t}, or the weights as
    constants (LLVM makes their multiplies shifts and adds)."""
    terms = []
    for t in range((count + 1) // 2):
        pair = f'T.Cast("{kind}", {value.format(t=t)})'
        if count - 1 - t != t:
            pair = f'({pair} + T.Cast("{kind}", {value.format(t=count - 1 - t)}))'
        if isinstance(weight, str):
            terms.append(f'{pair} * T.Cast("{kind}", {weight.format(t=t)})')
        else:
            terms.append(pair if weight[t] == 1 else f"{pair} * T.{kind}({weight[t]})")
    return " + ".join(terms)


def block_sums(
    store: str,
    value: str,
    weight: str | tuple[int, ...],
    count: str | int,
    kind: str,
    block: int,
    start: str = "",
    mirrored: bool = False,
) -> str:
    """TVMScript of one block's sums (the buffer `sums`, of type `kind`, `block` values) over
    `count` taps from `start` (else 0): GROUP taps an expression, the rest one by one, then
    `store` (over sums[i]). A constant `count` (an int) is one expression, stored at once;
    `mirrored` (integer weights the same read backwards, a constant count): mirrored_sums, whose
    `weight` may be the weights themselves."""
    if mirrored:
        assert isinstance(count, int) and weight and not start, "mirrored: a constant count"
        taps = mirrored_sums(value, weight, count, kind)
        return f"for i in T.vectorized({block}):\n    {store.replace('sums[i]', f'({taps})')}\n"
    if isinstance(count, int):
        taps = tap_sums(value, weight, "0", count, kind).replace(
            "sums[i]", start or f"T.{kind}(0)", 1
        )
        return f"for i in T.vectorized({block}):\n    {store.replace('sums[i]', f'({taps})')}\n"
    return (
        f"for i in T.vectorized({block}):\n"
        f"    sums[i] = {start or f'T.{kind}(0)'}\n"
        f"for g in range({count} // {GROUP}):\n"
        f"    for i in T.vectorized({block}):\n"
        f"        sums[i] = {tap_sums(value, weight, f'g * {GROUP}', GROUP, kind)}\n"
        f"for t in range({count} // {GROUP} * {GROUP}, {count}):\n"
        f"    for i in T.vectorized({block}):\n"
        f"        sums[i] = {tap_sums(value, weight, 't', 1, kind)}\n"
        f"for i in T.vectorized({block}):\n"
        f"    {store}\n"
    )


def describe(array) -> str:
    """An array as error messages name it: dtype, shape, and layout flags where they matter."""
    if not isinstance(array, np.ndarray):
        return type(array).__name__
    flags = "" if array.flags.c_contiguous else " not C-contiguous"
    flags += "" if array.flags.writeable else " read-only"
    return f"{array.dtype}{list(array.shape)}{flags}"
