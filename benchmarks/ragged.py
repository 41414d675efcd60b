"""Ragged batches (issue 19) measured: 16 real photos of mixed sizes -> (16, 3, 224, 224)
float32 (resize 224 bilinear, [0, 1], CHW), side by side in one process, interleaved:

- gdp `model.run_batch(images, outputs=buf)`: one task, one VM call per image, stacked;
- a per-image gdp loop, `model(x)` then a copy into the stack (what a user writes without it);
- OpenCV + NumPy per image: `cv2.resize(INTER_LINEAR)`, `* (1/255)` in float32, transpose,
  into the stack (cv2.setNumThreads to gdp's thread count);
- the Relax VM called directly per image (no gdp at all), with and without the copy into the
  stack: the floor of any per-image loop around these kernels.
(Two images at a time on two threads, each with its own VM, showed no gain and is left out:
every new thread that runs TVM kernels keeps a thread pool of its own.)

Then the same on a tiny pipeline (resize to 8x8), whose kernel costs microseconds, so that the
per-image overhead of each way (binding, queueing, the VM's call) shows on its own.
Medians of many runs with min and max; the machine's load moves them, run it on a quiet one.

    python benchmarks/ragged.py [--runs 40] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import cv2
import numpy as np
import skimage.data
import tensorflow as tf
import tvm_ffi

import gdp
from gdp.benchmarking import compare
from gdp.runtime.backends.tvm.llvm import physical_cores

# gdp's thread count: TVM's pool, one thread per physical core unless the user sized it.
THREADS = int(os.environ.get("TVM_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS") or 0) or (
    physical_cores()
)
os.environ.setdefault("TVM_NUM_THREADS", str(THREADS))

# Mixed sizes around 300-1080 px, landscape and portrait, odd extents among them.
SIZES = [
    (300, 400),
    (480, 640),
    (720, 1280),
    (1080, 1920),
    (333, 500),
    (600, 800),
    (768, 1024),
    (1080, 1440),
    (427, 640),
    (512, 512),
    (801, 599),
    (1080, 810),
    (375, 667),
    (960, 540),
    (449, 301),
    (1024, 683),
]


def photos() -> list[np.ndarray]:
    """16 real photos (scikit-image's), each resized (INTER_AREA) to one of SIZES."""
    sources = [
        skimage.data.astronaut(),
        skimage.data.coffee(),
        skimage.data.chelsea(),
        skimage.data.rocket(),
        skimage.data.hubble_deep_field(),
        skimage.data.immunohistochemistry(),
    ]
    return [
        np.ascontiguousarray(
            cv2.resize(sources[n % len(sources)], (w, h), interpolation=cv2.INTER_AREA)
        )
        for n, (h, w) in enumerate(SIZES)
    ]


def program(size: int):
    @tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.uint8, name="image")])
    def preprocess(image):
        resized = tf.image.resize(tf.cast(image, tf.float32), (size, size))
        return tf.transpose(resized / 255.0, (2, 0, 1))

    return preprocess


def peers(model, images: list[np.ndarray], size: int) -> dict:
    count = len(images)
    buf = np.empty((count, 3, size, size), np.float32)
    executable = model._specialized["generic"].executable
    main = executable.vm["main"]

    def run_batch():
        model.run_batch(images, outputs=buf)

    def gdp_loop():
        for n, image in enumerate(images):
            buf[n] = model(image)

    def opencv():
        for n, image in enumerate(images):
            resized = cv2.resize(image, (size, size), interpolation=cv2.INTER_LINEAR)
            buf[n] = (resized.astype(np.float32) * np.float32(1 / 255)).transpose(2, 0, 1)

    def vm_only():
        for image in images:
            main(tvm_ffi.from_dlpack(image))

    def vm_copy():
        for n, image in enumerate(images):
            np.copyto(buf[n], np.from_dlpack(main(tvm_ffi.from_dlpack(image))))

    # Every way computes the same stack (checked before timing).
    want = model.run_batch(images)
    for fn in (gdp_loop, vm_copy):
        buf[:] = np.nan
        fn()
        np.testing.assert_array_equal(buf, want)
    opencv()
    np.testing.assert_allclose(buf, want, rtol=0, atol=2.5 / 255)  # OpenCV's uint8 rounding

    return {
        "gdp run_batch": run_batch,
        "gdp loop model(x)": gdp_loop,
        "OpenCV + NumPy loop": opencv,
        "VM call only (no copy)": vm_only,
        "VM call + copy into stack": vm_copy,
    }


def kernel_ms(model, images) -> float:
    """The kernels' own time per image (the VM's instrument), median of 5 batches."""
    times = []
    for _ in range(5):
        handle = gdp.run_async(model, batch=images, profile=True)
        handle.result()
        times.append(sum(t for _, t in handle.profile.kernels) / len(images))
    return float(np.median(times)) * 1e3


def section(title: str, timings: dict, count: int, kernel: float) -> list[str]:
    base = timings["OpenCV + NumPy loop"].median
    loop = timings["gdp loop model(x)"].median
    rows = [
        f"### {title}",
        "",
        f"Kernels alone (the VM's instrument): {kernel:.3f} ms per image.",
        "",
        "| way | batch ms, median (min-max) | per image ms | OpenCV / it | gdp loop / it |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for t in timings.values():
        rows.append(
            f"| {t.name} | {t.cell()} | {t.median * 1e3 / count:.3f} | "
            f"{base / t.median:.2f}x | {loop / t.median:.2f}x |"
        )
    return [*rows, ""]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args(argv)
    cv2.setNumThreads(THREADS)
    images = photos()
    lines = [
        "# Ragged batches: 16 photos of mixed sizes -> (16, 3, 224, 224)",
        "",
        f"`python benchmarks/ragged.py --runs {args.runs}` on {platform.machine()}, "
        f"{os.cpu_count()} CPUs, {THREADS} threads for gdp (TVM) and OpenCV; medians of "
        f"{args.runs} interleaved runs with min and max. Sizes: "
        + ", ".join(f"{h}x{w}" for h, w in SIZES)
        + ' (scikit-image\'s photos resized). Generic kernels (`specialize="never"`: a '
        "ragged stream rarely repeats a size).",
        "",
    ]
    with tempfile.TemporaryDirectory() as cache:
        # The tiny pipeline on thumbnails (the same photos at a tenth of their size): its
        # kernels cost microseconds, so what each way adds per image shows.
        thumbs = [
            cv2.resize(x, (x.shape[1] // 10, x.shape[0] // 10), interpolation=cv2.INTER_AREA)
            for x in images
        ]
        for size, batch, runs, title in (
            (224, images, args.runs, "resize 224 + normalise + CHW, the photos"),
            (8, thumbs, 5 * args.runs, "overhead: thumbnails (30-192 px) -> resize 8"),
        ):
            model = gdp.compile(program(size), target="cpu", cache_dir=cache, specialize="never")
            assert model.report()["shapes_mode"] == "generic"
            ways = peers(model, batch, size)
            load = os.getloadavg()[0]
            timings = compare(ways, runs=runs)
            lines += section(
                f"{title} ({runs} runs, load average {load:.1f} -> {os.getloadavg()[0]:.1f})",
                timings,
                len(batch),
                kernel_ms(model, batch),
            )
            print("\n".join(lines[-len(timings) - 7 :]), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ragged.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / 'ragged.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
