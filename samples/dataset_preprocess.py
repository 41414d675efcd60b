"""A dataset pipeline on Ray Data: images of mixed sizes read from a folder, preprocessed by gdp
(224x224 bilinear, ImageNet mean/std, CHW float32; one model per actor), written as Parquet or
NumPy files.

    .venv/bin/python samples/dataset_preprocess.py [--images DIR] [--out DIR]
                                                   [--format parquet|numpy] [--concurrency 2]

Without --images it writes 48 JPEGs of scikit-image's photos at six sizes into a temporary
folder first. The sample reads its output back and checks every row against `model(x)` run
here on the same file (decoded by Pillow, as Ray Data's read_images decodes it).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cv2
import numpy as np
import skimage.data

SOURCES = ["astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry", "hubble_deep_field"]
SIZES = [(97, 131), (240, 320), (480, 640), (600, 400), (720, 1280), (1080, 1920)]


def write_photos(folder: Path, count: int = 48) -> None:
    for n in range(count):
        name, (h, w) = SOURCES[n % len(SOURCES)], SIZES[(n // len(SOURCES)) % len(SIZES)]
        rgb = getattr(skimage.data, name)()
        rgb = rgb[..., :3] if rgb.ndim == 3 else np.stack([rgb] * 3, -1)
        rgb = cv2.resize(rgb, (w, h), interpolation=cv2.INTER_AREA)
        cv2.imwrite(str(folder / f"{n:03d}_{name}.jpg"), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=Path, help="a folder of images (default: made here)")
    parser.add_argument("--out", type=Path, help="the output folder (default: a temporary one)")
    parser.add_argument("--format", choices=["parquet", "numpy"], default="parquet")
    parser.add_argument("--concurrency", type=int, default=2, help="gdp actors")
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    import ray
    from PIL import Image

    import gdp.ray

    # Ray first: ray.init forks helper processes, which must not follow a gdp run (see
    # docs/serving.md).
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        work = Path(tempfile.mkdtemp(prefix="gdp-dataset-"))
        images = args.images
        if images is None:
            images = work / "images"
            images.mkdir()
            write_photos(images)
        out = args.out or work / "out"
        from serve_classifier import compile_preprocess

        model = compile_preprocess()  # a tf.function, verified against TensorFlow
        model.save(work / "preprocess.onnx")  # what every actor loads (no TensorFlow there)

        t0 = time.perf_counter()
        ds = ray.data.read_images(str(images), include_paths=True, mode="RGB")
        ds = gdp.ray.map_batches(
            ds,
            work / "preprocess.onnx",
            batch_size=args.batch_size,
            concurrency=args.concurrency,
            num_cpus=0.5,
        )
        if args.format == "parquet":
            ds.write_parquet(str(out))
            back = ray.data.read_parquet(str(out))
        else:
            ds.write_numpy(str(out), column="tensor")
            back = None
        elapsed = time.perf_counter() - t0
        files = sorted(p.name for p in out.iterdir())
        print(f"wrote {len(files)} {args.format} file(s) to {out} in {elapsed:.1f} s")

        if back is not None:  # every row against model(x) on the same file
            rows = back.take_all()
            for row in rows:
                rgb = np.asarray(Image.open(row["path"]).convert("RGB"))
                np.testing.assert_allclose(row["tensor"], model(rgb), rtol=0, atol=1e-6)
            print(f"{len(rows)} rows, each equal to model(x) on its own image")
        else:
            arrays = [np.load(out / f) for f in files if f.endswith(".npy")]
            total = sum(len(a) for a in arrays)
            assert all(a.shape[1:] == (3, 224, 224) and a.dtype == np.float32 for a in arrays)
            print(f"{total} tensors of (3, 224, 224) float32 in {len(arrays)} .npy file(s)")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
