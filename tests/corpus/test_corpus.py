"""The public-API corpus against TensorFlow: every program compiled with gdp.compile on the cpu
and the reference target, run on real photos and compared with TF running the same function
(with its float64 version where the program sums: TF's float32 sums drift); in fp16 on the cpu
within GDPNPU's table 5-4 bound of the program's class, never inf or NaN where TF is finite.

A program gdp cannot take yet carries its reason (`known_issue`) and runs as a strict xfail:
a fix shows up as XPASS, which fails the run until the mark is removed. `make test` runs the
programs marked `fast` at 120x160 on cpu and reference, and fp16 for a few; `-m slow` the rest:
every program in every mode, and each on the cpu at 1080p (or its serving size)."""

from __future__ import annotations

import inspect
from collections import Counter
from pathlib import Path

import pytest

from tests.corpus import FAMILIES, PROGRAMS, registry
from tests.corpus.check import problems

# fp16 in the default run: one program of each class with a bound.
FAST_FP16 = {
    "keras_rescaling",
    "rgb_to_grayscale",
    "resize_bilinear",
    "gaussian5_reflect_valid",
    "laplacian_variance",
    "mean_per_channel",
}

# Fast programs whose compile in one mode takes over a minute on 2 cores: `slow` there.
# rgb_to_hsv on the cpu (90 s): its reference mode runs by default, and so do
# tests/gdp/frontend/test_tf_lowerings.py's AdjustSaturation and AdjustHue on the cpu.
SLOW_MODES = {("rgb_to_hsv", "cpu")}


def _params():
    for prog in PROGRAMS:
        for mode in registry.MODES:
            if mode == "fp16" and prog.fp16 is None:
                continue
            fast = (
                prog.fast
                and (mode in ("cpu", "reference") or (mode == "fp16" and prog.name in FAST_FP16))
                and (prog.name, mode) not in SLOW_MODES
            )
            marks = [] if fast else [pytest.mark.slow]
            if issue := prog.issue(mode):
                marks.append(pytest.mark.xfail(strict=True, reason=issue))
            yield pytest.param(prog, mode, id=f"{prog.name}-{mode}", marks=marks)


@pytest.mark.parametrize(("program", "mode"), list(_params()))
def test_program_matches_tensorflow(program, mode):
    found = problems(program, mode)
    assert not found, f"{program.name} [{mode}] disagrees with TensorFlow: " + "; ".join(found)


def test_corpus_covers_the_issue():
    """At least 80 programs, every family in the default run on both targets, unique names,
    known issues only for modes that exist, fp16 classes with a bound."""
    assert len(PROGRAMS) >= 80
    fast = Counter(p.family for p in PROGRAMS if p.fast)
    assert set(fast) == set(FAMILIES), set(FAMILIES) - set(fast)
    assert len({p.name for p in PROGRAMS}) == len(PROGRAMS)
    assert {p.name for p in PROGRAMS if p.fast and p.fp16} >= FAST_FP16
    for prog in PROGRAMS:
        assert prog.fp16 in (None, *registry.FP16_BOUNDS), prog.name
        if not isinstance(prog.known_issue, str):
            assert set(prog.known_issue) <= set(registry.MODES), prog.name
        if prog.float64:  # the float64 version is the same function with a dtype
            assert "dtype" in inspect.signature(prog.fn).parameters, prog.name


def test_programs_use_only_public_apis():
    """The corpus is what users write: TF, Keras, NumPy (constants) and nothing of gdp."""
    import ast

    import tests.corpus as corpus

    allowed = {"__future__", "functools", "cv2", "keras", "numpy", "tensorflow", "tests"}
    for path in sorted(Path(corpus.__file__).parent.glob("programs_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] in allowed, f"{path.name} imports {name}"


def test_bench_corpus_writes_its_table(tmp_path):
    """`gdp bench --corpus` on one program at the tests' size: the table has gdp, TF, XLA and
    OpenCV, and the status of the check against TF (timings are the benchmark's, not checked)."""
    from gdp import cli

    out, data = tmp_path / "corpus.md", tmp_path / "corpus.json"
    argv = ["bench", "--corpus", "--small", "--runs", "1", "--only", "gaussian5_reflect_valid"]
    with pytest.raises(SystemExit) as exit_:  # the script ends in sys.exit(main())
        cli.main([*argv, "--out", str(out), "--json", str(data)])
    assert exit_.value.code == 0
    row = __import__("json").loads(data.read_text())["rows"][0]
    assert set(row["peers"]) == {"gdp", "TF", "TF XLA", "OpenCV"}
    assert row["status"] == "matches TF"
    assert "| gaussian5_reflect_valid | filters | 120x160 |" in out.read_text()
