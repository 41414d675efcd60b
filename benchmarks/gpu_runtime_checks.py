"""The gpu runtime's behaviour on a GPU (docs/gpu.md), against the tone sample's NumPy peer:
a torch side stream handed over both ways, profile events, run_async's order with pageable
and pinned inputs, run_batch pipelined. Run on the GPU machine after `benchmarks/gpu.py
prepare` (TVM's runtime only; torch needed):

    python benchmarks/gpu_runtime_checks.py [.gpu]

Prints PASS or FAIL per check and exits 1 on any failure. Ran on the H200 in stop 36: all
passed."""

import sys
from pathlib import Path

import numpy as np
import torch

import gdp

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "samples"))
import gpu

TONE = gpu.sample_parts("tone")


def _close(got, image) -> bool:
    return float(np.abs(np.asarray(got) - TONE.peer(rgb=image)["mapped"]).max()) < 1e-5


def checks(model) -> dict[str, bool]:
    rgb = TONE.inputs()["rgb"]
    found: dict[str, bool] = {}
    # A side stream writes the input after 25 ms of sleep, and reads the output at once: gdp's
    # stream must wait for it, and it for gdp's.
    src = torch.from_numpy(rgb).cuda()
    for trial in range(3):
        side = torch.cuda.Stream()
        x = torch.zeros_like(src)
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            torch.cuda._sleep(50_000_000)
            x.copy_(src)
            y = model(x) * 1.0
        torch.cuda.synchronize()
        found[f"side stream in and out, trial {trial}"] = _close(y.cpu().numpy(), rgb)
    task = model.submit({"rgb": src}, profile=True, wait=True)
    task.result()
    kernels = task.profile.kernels
    found[f"profile on device arrays: {[round(s * 1e3, 4) for _, s in kernels]} ms"] = len(
        kernels
    ) == 1 and all(s > 0 for _, s in kernels)
    task = model.submit({"rgb": rgb}, profile=True, wait=True)
    task.result()
    p = task.profile
    found[
        f"profile on host arrays: in {p.copy_in_s * 1e3:.3f}, execute {p.execute_s * 1e3:.3f},"
        f" out {p.copy_out_s * 1e3:.3f} ms"
    ] = p.copy_in_s > 0 and p.copy_out_s > 0 and bool(p.kernels)
    images = [np.ascontiguousarray(np.roll(rgb, k, axis=1)) for k in range(6)]
    tasks = [gdp.run_async(model, image) for image in images]
    gdp.sync()
    found["run_async, results in order"] = all(
        _close(t.result()["mapped"], image) for t, image in zip(tasks, images, strict=True)
    )
    pinned = []
    for image in images:
        pinned.append(gdp.pinned_empty(image.shape, image.dtype))
        pinned[-1][...] = image
    tasks = [gdp.run_async(model, image) for image in pinned]
    gdp.sync()
    found["run_async, pinned inputs"] = all(
        _close(t.result()["mapped"], image) for t, image in zip(tasks, images, strict=True)
    )
    stacked = model.run_batch(images)
    found["run_batch"] = all(_close(stacked[i], image) for i, image in enumerate(images))
    return found


if __name__ == "__main__":
    prepared = Path(sys.argv[1] if len(sys.argv) > 1 else ".gpu")
    results = checks(gdp.load(prepared / "bundles" / "tone"))
    for name, passed in results.items():
        print(("PASS " if passed else "FAIL ") + name, flush=True)
    print("ALL OK" if all(results.values()) else "SOME FAILED")
    sys.exit(0 if all(results.values()) else 1)
