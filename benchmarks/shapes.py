"""Shape-generic compilation (issue 19) measured: programs with free height and width, compiled
once for every size, against the same programs compiled per shape.

For each program:
- first call at a new size / cached call, on the generic executable: every new size runs
  without compiling (the goal: at most 2x); and the first call at a new size / the first call
  on a fresh array of a size already met (what any first touch of new memory costs);
- the per-shape compile's first call at a new size (the stall shape-generic compilation removes);
- steady state, generic / specialised, the two executables interleaved on one 1080p input
  (the goal: within 1.15x).
Medians of many runs with min and max; the machine's load moves them, run it on a quiet one.

    python benchmarks/shapes.py [--runs 30] [--new-sizes 8] [--only resize224,tone]
    gdp bench --shapes [same options]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "samples"))

import gdp  # noqa: E402
from gdp.benchmarking import Timing, compare  # noqa: E402

BASE = (1080, 1920)


def _resize224():
    @tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.uint8, name="image")])
    def resize224(image):
        # An inference server's preprocessing: any size -> 224x224, [0, 1], CHW.
        resized = tf.image.resize(tf.cast(image, tf.float32), (224, 224))
        return tf.transpose(resized / 255.0, (2, 0, 1))

    return resize224, np.uint8


def _free(sample: str):
    """A workload sample's program with its height and width left free."""
    module = __import__(sample)
    spec = module.program.input_signature[0]
    free = tf.TensorSpec([None, None, spec.shape[-1]], spec.dtype, name=spec.name)
    program = tf.function(module.program.python_function, input_signature=[free])
    return program, spec.dtype.as_numpy_dtype


PROGRAMS = {
    "resize224": _resize224,
    "tone": lambda: _free("tone"),
    "gaussian": lambda: _free("gaussian"),
    "sharpness": lambda: _free("sharpness"),
}


def _image(shape, dtype, seed) -> np.ndarray:
    x = np.random.default_rng(seed).integers(0, 256, (*shape, 3), dtype=np.uint8)
    return x if dtype == np.uint8 else (x.astype(np.float32) / 255).astype(dtype)


def _median(values):
    return statistics.median(values), min(values), max(values)


def _ratio(num: Timing | list, den: Timing | list) -> str:
    a = num.seconds if isinstance(num, Timing) else num
    b = den.seconds if isinstance(den, Timing) else den
    med, lo, hi = (x / statistics.median(b) for x in _median(a))
    return f"{med:.2f}x ({lo:.2f}-{hi:.2f})"


def _ms(values) -> str:
    med, lo, hi = (v * 1e3 for v in _median(values))
    return f"{med:.2f} ({lo:.2f}-{hi:.2f})"


def bench(name: str, runs: int, new_sizes: int, cache: Path) -> dict:
    program, dtype = PROGRAMS[name]()
    t0 = time.perf_counter()
    generic = gdp.compile(program, target="cpu", cache_dir=cache, specialize="never")
    generic_compile = time.perf_counter() - t0
    report = generic.report()
    row = {"name": name, "mode": report["shapes_mode"], "generic_compile_s": generic_compile}
    if report["shapes_mode"] != "generic":
        row["error"] = report["generic_error"]
        return row
    # First call at sizes never met, each beside the cached calls at that size.
    firsts, cached = [], []
    rng = np.random.default_rng(0)
    for k in range(new_sizes):
        shape = (BASE[0] - int(rng.integers(1, 64)), BASE[1] - int(rng.integers(1, 64)))
        x = _image(shape, dtype, k)
        t1 = time.perf_counter()
        generic(x)
        firsts.append(time.perf_counter() - t1)
        again = compare({"cached": lambda x=x: generic(x)}, runs=max(5, runs // 4), warmup=1)
        cached.append(again["cached"].median)
    assert generic.report()["builds"] == 1, "a new size compiled"
    # The same sizes again, each on a fresh array: what a first call costs without a new size
    # (the input not yet in cache, the outputs' pages new).
    fresh = []
    rng = np.random.default_rng(0)
    for k in range(new_sizes):
        shape = (BASE[0] - int(rng.integers(1, 64)), BASE[1] - int(rng.integers(1, 64)))
        x = _image(shape, dtype, 1000 + k)
        t1 = time.perf_counter()
        generic(x)
        fresh.append(time.perf_counter() - t1)
    # The per-shape compile's first call at a new size (today's stall without the generic one).
    special = gdp.compile(program, target="cpu", cache_dir=cache, specialize="always", verify=False)
    x = _image(BASE, dtype, 99)
    t1 = time.perf_counter()
    special(x)
    special_first = time.perf_counter() - t1
    steady = compare({"generic": lambda: generic(x), "specialised": lambda: special(x)}, runs=runs)
    row.update(
        first_ms=_ms(firsts),
        cached_ms=_ms(cached),
        first_over_cached=_ratio(firsts, cached),
        fresh_ms=_ms(fresh),
        first_over_fresh=_ratio(firsts, fresh),
        per_shape_first_ms=f"{special_first * 1e3:.0f}",
        generic_ms=steady["generic"].cell(),
        specialised_ms=steady["specialised"].cell(),
        generic_over_specialised=_ratio(steady["generic"], steady["specialised"]),
    )
    return row


def markdown(rows: list[dict]) -> str:
    lines = [
        "| program | generic compile s | first call at a new size ms | cached call ms "
        "| first / cached | known size, fresh array ms | first / fresh | per-shape first call ms "
        "| generic 1080p ms | specialised 1080p ms | generic / specialised |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        if r["mode"] != "generic":
            lines.append(
                f"| {r['name']} | {r['generic_compile_s']:.1f} | per-shape fallback: "
                f"{r.get('error', '')[-160:]} | | | | | | | | |"
            )
            continue
        lines.append(
            f"| {r['name']} | {r['generic_compile_s']:.1f} | {r['first_ms']} | {r['cached_ms']} "
            f"| {r['first_over_cached']} | {r['fresh_ms']} | {r['first_over_fresh']} "
            f"| {r['per_shape_first_ms']} | {r['generic_ms']} "
            f"| {r['specialised_ms']} | {r['generic_over_specialised']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--new-sizes", type=int, default=8)
    parser.add_argument("--only", default=",".join(PROGRAMS))
    parser.add_argument("--cache-dir", default=None, help="default: a fresh temporary one")
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    unknown = sorted(set(names) - set(PROGRAMS))
    if unknown:
        parser.error(f"unknown program {unknown[0]!r}: expected some of {list(PROGRAMS)}")
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(args.cache_dir or tmp)
        rows = []
        for name in names:
            rows.append(bench(name, args.runs, args.new_sizes, cache))
            print(f"{name}: done", file=sys.stderr, flush=True)
    print(f"threads: {os.environ['TVM_NUM_THREADS']}, cpus: {os.cpu_count()}\n")
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
