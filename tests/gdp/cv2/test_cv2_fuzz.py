"""A fuzz of gdp.cv2 against OpenCV (cv2_fuzz_cases.py): random calls of the accelerated
functions, valid and invalid, made on both; each seed's calls run in a child process, so a
crash is this test's failure. Fixed seeds: two here, six more and four of large views under
`-m slow`.

Regressions found by it (each with its own test in test_opencv_parity.py or test_resize.py):
uint8 blur's rounding, depth pairs OpenCV refuses, cvtColor of channel counts OpenCV takes
(slow seeds 2, 6); resize's IPP source positions (large views); resize by fx=0.5 of odd sizes,
a float morphology's infinite border, medianBlur(img, 1) (call styles)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.children import run_cases

HERE = Path(__file__).resolve().parent


def _fuzz(seed: int, calls: int, large: bool = False) -> None:
    args = [seed, calls, "large"] if large else [seed, calls]
    cases = run_cases(HERE / "cv2_fuzz_cases.py", args, [seed])
    failures = cases[0]["failures"]
    assert not failures, "\n".join(failures)


# seed 1 under `slow` (a minute of CI): seed 0 runs in `make test`, seeds 1-7 and the large
# views' under `make test-slow`
@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_random_calls_agree_with_opencv(seed):
    _fuzz(seed, 40)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(2, 8))
def test_more_random_calls_agree_with_opencv(seed):
    _fuzz(seed, 100)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(30, 34))
def test_random_calls_on_large_views_agree_with_opencv(seed):
    """100-1400 pixel images, often ROIs and strided views: sizes that move gdp's row strips
    and take OpenCV's IPP paths (this fuzz found resize's IPP source positions)."""
    _fuzz(seed, 30, large=True)
