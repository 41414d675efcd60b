"""A fuzz of gdp.cv2.chain against OpenCV (chain_fuzz_cases.py): random chains of two to four
calls, each one program run at three sizes, bit for bit against OpenCV's calls; each batch of
seeds in a child process, so a crash is this test's failure. Every seed compiles its own
program (about a minute each on the 2-core VM), so all of them run under `-m slow`.

Found by a hand run of it (stop 45): a resize then a 5x5 blur then a Sobel gave the last three
rows up to 72 off (test_chain.py holds that case), and convertScaleAbs of Sobel's int16 was
refused inside a chain."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.children import run_cases

HERE = Path(__file__).resolve().parent


def _fuzz(seeds: list[int]) -> None:
    cases = run_cases(HERE / "chain_fuzz_cases.py", seeds, seeds)
    failures = [c for c in cases if c["result"] != "match"]
    assert not failures, "\n".join(map(str, failures))


@pytest.mark.slow
@pytest.mark.parametrize("first", range(0, 40, 8))
def test_random_chains_agree_with_opencv(first):
    _fuzz(list(range(first, first + 8)))
