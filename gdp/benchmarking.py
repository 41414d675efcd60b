"""Side-by-side timing: peers run interleaved in one process on the same input, reported as
medians with min and max, and as ratios to a baseline. Speed claims come from here, never tests."""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Timing:
    name: str
    seconds: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    def cell(self) -> str:
        """'median (min-max)' in ms, as the tables show a timing."""
        ms = [s * 1e3 for s in (self.median, min(self.seconds), max(self.seconds))]
        return f"{ms[0]:.2f} ({ms[1]:.2f}-{ms[2]:.2f})"


def compare(
    peers: dict[str, Callable[[], object]],
    runs: int = 30,
    warmup: int = 3,
    shuffled: bool = False,
) -> dict[str, Timing]:
    """Time each peer `runs` times, round-robin so drift in machine load hits all alike.

    `shuffled`: each round in its own random order (seeded: the same orders every time). In
    a fixed order each peer always follows the same one, and the one that follows another
    library's call starts with its code and data out of the caches while the next one finds
    the same work's just used: of three peers the first after OpenCV's call (a gdp.cv2.chain
    that ran the same eager calls) timed 0.20 ms against the second's 0.13. Two peers
    alternate, each after the other, and need no shuffle."""
    if runs < 1:
        raise ValueError(f"runs: expected >= 1, got {runs}")
    for fn in peers.values():
        for _ in range(warmup):
            fn()
    timings = {name: Timing(name, []) for name in peers}
    order = list(peers.items())
    rng = random.Random(0)
    for _ in range(runs):
        if shuffled:
            rng.shuffle(order)
        for name, fn in order:
            t0 = time.perf_counter()
            fn()
            timings[name].seconds.append(time.perf_counter() - t0)
    return timings


def table(timings: dict[str, Timing], baseline: str) -> str:
    """Markdown: median / min / max in ms, and the baseline's median over each peer's median."""
    base = timings[baseline].median
    lines = [
        f"| peer | median ms | min ms | max ms | speedup vs {baseline} |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for t in timings.values():
        lines.append(
            f"| {t.name} | {t.median * 1e3:.3f} | {min(t.seconds) * 1e3:.3f} | "
            f"{max(t.seconds) * 1e3:.3f} | {base / t.median:.2f}x |"
        )
    return "\n".join(lines)
