"""Progress bars for long compiles (the conformance generator, `gdp calibrate`, exporting a
bundle of many shapes): a tqdm bar on stderr that appears once the work has run 2 s, and nothing
at all where stderr is not a terminal (a log file, CI, a pipe)."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")

# Work that ends sooner shows no bar.
DELAY_S = 2.0


def on_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


def progress(
    items: Iterable[T], desc: str, total: int | None = None, unit: str = "it"
) -> Iterator[T]:
    """`items`, with a progress bar on stderr while they are consumed (see the module's doc)."""
    if not on_terminal():
        yield from items
        return
    from tqdm import tqdm

    with tqdm(
        items,
        desc=desc,
        total=total,
        unit=unit,
        file=sys.stderr,
        delay=DELAY_S,
        leave=False,
        dynamic_ncols=True,
    ) as bar:
        _bars.append(bar)
        try:
            yield from bar
        finally:
            _bars.remove(bar)


# The bars of progress() now running, innermost last.
_bars: list = []


def _shown(bar) -> bool:
    """Whether a bar has been drawn (its delay has passed), as tqdm itself tells."""
    return bar.last_print_t >= bar.start_t + bar.delay


def write(line: str) -> None:
    """Print a line on stdout without breaking a progress bar drawn on the terminal (and without
    drawing one before its delay)."""
    if any(_shown(bar) for bar in _bars):
        from tqdm import tqdm

        tqdm.write(line, file=sys.stdout)
        sys.stdout.flush()
    else:
        print(line, flush=True)


__all__ = ["DELAY_S", "on_terminal", "progress", "write"]
