"""Random small TF programs written with tf.image, tf.nn and tf.math as their docs show
(resize, colour, brightness/contrast, flips, pools, depthwise convolutions, reductions,
clips, standardisation, crops, a CHW transpose), for the fuzz test (test_tf_fuzz.py), and the
check of one against TensorFlow, run in a child process: a crash in gdp or TVM loses the batch,
which the test reports, instead of the CI run.

Each program is a tf.function over a 1xHxWxC float32 image, its height and width fixed or free
(None: the shape-generic path). gdp compiles it with verify=False (so a disagreement is found
here, not refused by gdp's own check) and runs it on the image and, where a dimension is free,
on a second size."""

from __future__ import annotations

import json
import sys

import numpy as np

METHODS = ("bilinear", "nearest", "area", "bicubic")


def _steps(rng: np.random.Generator, channels: int) -> tuple[list, int]:
    """A chain of (name, function of x) steps, and the channel count at its end."""
    import tensorflow as tf

    steps = []
    for _ in range(int(rng.integers(1, 5))):
        kind = str(
            rng.choice(
                [
                    "resize",
                    "gray",
                    "brightness",
                    "contrast",
                    "flip",
                    "pool",
                    "depthwise",
                    "reduce",
                    "clip",
                    "standardize",
                    "crop",
                    "affine",
                ]
            )
        )
        if kind == "resize":
            h, w, m = int(rng.integers(2, 40)), int(rng.integers(2, 40)), str(rng.choice(METHODS))
            steps.append(
                (
                    f"resize {h}x{w} {m}",
                    lambda x, h=h, w=w, m=m: tf.image.resize(x, [h, w], method=m),
                )
            )
        elif kind == "gray" and channels == 3:
            steps.append(("rgb_to_grayscale", tf.image.rgb_to_grayscale))
            channels = 1
        elif kind == "brightness":
            d = float(rng.uniform(-0.5, 0.5))
            steps.append(
                (f"adjust_brightness {d:.2f}", lambda x, d=d: tf.image.adjust_brightness(x, d))
            )
        elif kind == "contrast":
            f = float(rng.uniform(0.2, 2.0))
            steps.append(
                (f"adjust_contrast {f:.2f}", lambda x, f=f: tf.image.adjust_contrast(x, f))
            )
        elif kind == "flip":
            which = str(rng.choice(["flip_left_right", "flip_up_down", "rot90"]))
            steps.append((which, getattr(tf.image, which)))
        elif kind == "pool":
            k, s = int(rng.integers(1, 4)), int(rng.integers(1, 4))
            pad, op = (
                str(rng.choice(["SAME", "VALID"])),
                str(rng.choice(["avg_pool2d", "max_pool2d"])),
            )
            steps.append(
                (
                    f"{op} k{k} s{s} {pad}",
                    lambda x, k=k, s=s, pad=pad, op=op: getattr(tf.nn, op)(x, k, s, pad),
                )
            )
        elif kind == "depthwise":
            k, s = int(rng.choice([1, 3, 5])), int(rng.integers(1, 3))
            pad = str(rng.choice(["SAME", "VALID"]))
            kernel = rng.normal(size=(k, k, channels, 1)).astype(np.float32)
            steps.append(
                (
                    f"depthwise_conv2d k{k} s{s} {pad}",
                    lambda x, kernel=kernel, s=s, pad=pad: tf.nn.depthwise_conv2d(
                        x, kernel, [1, s, s, 1], pad
                    ),
                )
            )
        elif kind == "reduce":
            op = str(rng.choice(["reduce_mean", "reduce_max", "reduce_min", "reduce_sum"]))
            steps.append(
                (
                    f"{op} hw",
                    lambda x, op=op: x - getattr(tf.math, op)(x, axis=[1, 2], keepdims=True),
                )
            )
        elif kind == "clip":
            lo = float(rng.uniform(-1, 0.5))
            steps.append(
                (f"clip_by_value {lo:.2f}", lambda x, lo=lo: tf.clip_by_value(x, lo, lo + 0.5))
            )
        elif kind == "standardize":
            steps.append(("per_image_standardization", tf.image.per_image_standardization))
        elif kind == "crop":
            f = float(rng.uniform(0.3, 1.0))
            steps.append((f"central_crop {f:.2f}", lambda x, f=f: tf.image.central_crop(x, f)))
        elif kind == "affine":
            a, b = float(rng.uniform(-2, 2)), float(rng.uniform(-1, 1))
            steps.append((f"x*{a:.2f}+{b:.2f}", lambda x, a=a, b=b: x * a + b))
    return steps, channels


def build(seed: int):
    """(tf.function, the input image, a second image of another size or None, step names)."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    channels = int(rng.choice([1, 3, 3, 4]))
    h, w = int(rng.integers(4, 48)), int(rng.integers(4, 48))
    free = bool(rng.random() < 0.4)
    steps, _ = _steps(rng, channels)
    if rng.random() < 0.3:
        steps.append(("transpose to CHW", lambda x: tf.transpose(x, [0, 3, 1, 2])))
    # A last step whose answer hinges on a reduction's start (drawn from a generator of its
    # own, so that the seeds' chains and images are as they were): a max of what a mask
    # keeps, -inf where it keeps nothing (TOPI started it from -FLT_MAX). (Not an argmax: TF
    # leaves a tie's index open, and its graph mode gave the last of float ties, NumPy and
    # ONNX the first.)
    last = np.random.default_rng([seed, 1])
    if last.random() < 0.2:
        t = float(last.uniform(0.2, 1.2))
        steps.append(
            (
                f"max of values over {t:.2f}",
                lambda x, t=t: tf.reduce_max(tf.where(x > t, x, float("-inf")), axis=-1),
            )
        )
    spec = tf.TensorSpec([1, None if free else h, None if free else w, channels], tf.float32)

    @tf.function(input_signature=[spec])
    def program(x):
        for _, step in steps:
            x = step(x)
        return x

    image = rng.random((1, h, w, channels), dtype=np.float32)
    other = rng.random((1, h + 7, w + 3, channels), dtype=np.float32) if free else None
    return program, image, other, [name for name, _ in steps] + (["free H, W"] if free else [])


def check(seed: int) -> dict:
    """One case: 'match', 'refused' (a GdpError; TF refusing too included) or 'mismatch'."""
    import gdp

    program, image, other, names = build(seed)
    case = {"seed": seed, "steps": names}
    try:
        model = gdp.compile(program, target="cpu", verify=False)
    except gdp.GdpError as err:
        return {**case, "result": "refused", "error": str(err)[:300]}
    except Exception as err:
        return {**case, "result": "error", "error": repr(err)[-300:]}
    for x in (image, other):
        if x is None:
            continue
        try:
            want = program(x).numpy()
        except Exception as err:  # TF refuses this size: gdp must refuse it too
            want, oracle_error = None, str(err)[:200]
        try:
            got = np.asarray(model(x))
        except gdp.GdpError as err:
            if want is None:
                continue
            return {**case, "result": "refused", "error": f"size {x.shape}: {str(err)[:300]}"}
        except Exception as err:
            return {**case, "result": "error", "error": repr(err)[-300:]}
        if want is None:
            return {**case, "result": "mismatch", "error": f"TF refuses {x.shape}: {oracle_error}"}
        if got.shape != want.shape:
            return {
                **case,
                "result": "mismatch",
                "error": f"size {x.shape}: shape {got.shape} != {want.shape}",
            }
        # Equal values (infinities of one sign included) differ by 0; the scale is the finite
        # values' (an infinity would allow any error).
        finite = np.abs(want[np.isfinite(want)])
        scale = max(1.0, float(np.max(finite)) if finite.size else 1.0)
        wide = got.astype(np.float64)
        diff = np.where(wide == want, 0.0, np.abs(wide - want))
        err = float(np.nanmax(diff)) if want.size and not np.all(np.isnan(diff)) else 0.0
        if err > 2e-4 * scale or not np.array_equal(np.isnan(got), np.isnan(want)):
            return {**case, "result": "mismatch", "error": f"size {x.shape}: max error {err:.3g}"}
    return {**case, "result": "match"}


if __name__ == "__main__":  # python tf_fuzz_cases.py SEED...: one JSON line per case
    import gdp  # noqa: F401 - quiets TF's start-up logging before TF is imported

    for arg in sys.argv[1:]:
        print("CASE " + json.dumps(check(int(arg))), flush=True)
