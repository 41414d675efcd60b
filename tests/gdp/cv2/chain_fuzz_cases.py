"""Random gdp.cv2.chain programs against OpenCV's calls (test_chain_fuzz.py), run in a child
process (`python chain_fuzz_cases.py SEED...`: one JSON line per seed), so that a crash in gdp or
TVM is the test's failure, not a lost CI run.

Each seed draws two to four calls people chain on a photo (colour conversions, blurs, morphology,
a threshold, a flip, a resize, a border, a weighted sum, Sobel back to 8 bits), traces them into
one program (choose=False: the program, never the calls one by one) and runs it at three sizes
that move its row strips, each against the same calls made on OpenCV. Every call drawn is one
gdp's programs compute as OpenCV does, bit for bit (a resize by INTER_NEAREST: its area and linear
shrinks are within 1 LSB, which a later colour conversion can turn into a hue's wrap-around)."""

from __future__ import annotations

import json
import sys

import cv2 as real
import numpy as np

BORDERS = (real.BORDER_DEFAULT, real.BORDER_REFLECT, real.BORDER_REPLICATE, real.BORDER_CONSTANT)


def _half(m, x):
    size = (max(1, x.shape[1] // 2), max(1, x.shape[0] // 2))
    return m.resize(x, size, interpolation=real.INTER_NEAREST)


def _edges(m, x):
    return m.convertScaleAbs(m.Sobel(x, real.CV_16S, 1, 0, ksize=3))


def _steps(rng: np.random.Generator, colour: bool) -> list[tuple[str, object]]:
    steps = []
    for _ in range(int(rng.integers(2, 5))):
        k = int(rng.choice([3, 5, 7, 9, 15]))
        border = int(rng.choice(BORDERS))
        ellipse = real.getStructuringElement(real.MORPH_ELLIPSE, (k, k))
        choices = [
            (
                f"GaussianBlur {k}",
                lambda m, x, k=k, b=border: m.GaussianBlur(x, (k, k), 0, borderType=b),
            ),
            (f"blur {k}", lambda m, x, k=k, b=border: m.blur(x, (k, k), borderType=b)),
            ("medianBlur 3", lambda m, x: m.medianBlur(x, 3)),
            (
                f"erode {k}",
                lambda m, x, k=k, b=border: m.erode(x, np.ones((k, k), np.uint8), borderType=b),
            ),
            (f"dilate ellipse {k}", lambda m, x, e=ellipse: m.dilate(x, e)),
            ("threshold 100", lambda m, x: m.threshold(x, 100, 255, real.THRESH_BINARY)[1]),
            ("flip 1", lambda m, x: m.flip(x, 1)),
            ("resize nearest to half", _half),
            ("copyMakeBorder", lambda m, x, b=border: m.copyMakeBorder(x, 3, 1, 2, 5, b)),
            ("addWeighted", lambda m, x: m.addWeighted(x, 0.7, x, 0.4, 3.0)),
            ("Sobel 16S, convertScaleAbs", _edges),
        ]
        if colour:
            choices.append(("BGR2GRAY", lambda m, x: m.cvtColor(x, real.COLOR_BGR2GRAY)))
            choices.append(("BGR2HSV", lambda m, x: m.cvtColor(x, real.COLOR_BGR2HSV)))
        name, step = choices[int(rng.integers(len(choices)))]
        colour = colour and name != "BGR2GRAY"
        steps.append((name, step))
    return steps


def check(seed: int) -> dict:
    """One chain at three sizes: 'match', or 'mismatch'/'error' with what differed."""
    import skimage.data

    import gdp.cv2 as gcv2

    rng = np.random.default_rng(seed)
    colour = bool(rng.random() < 0.7)
    steps = _steps(rng, colour)

    def calls(m, x):
        for _, step in steps:
            x = step(m, x)
        return x

    sizes = [(int(h), int(w)) for h, w in rng.integers(80, 600, (3, 2))]
    case = {"seed": seed, "calls": [n for n, _ in steps], "colour": colour, "sizes": sizes}
    program = gcv2.chain(choose=False)(lambda x: calls(gcv2, x))
    photo = real.cvtColor(skimage.data.astronaut(), real.COLOR_RGB2BGR)
    for h, w in sizes:
        image = real.resize(photo, (w, h), interpolation=real.INTER_AREA)
        if not colour:
            image = real.cvtColor(image, real.COLOR_BGR2GRAY)
        want = calls(real, image)
        try:
            got = program(image)
        except Exception as err:
            return {**case, "result": "error", "error": f"{(h, w)}: {type(err).__name__}: {err}"}
        if got.shape != want.shape or got.dtype != want.dtype:
            where = f"{(h, w)}: {got.shape} {got.dtype}, OpenCV {want.shape} {want.dtype}"
            return {**case, "result": "mismatch", "error": where}
        diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
        if diff.max() > 0:
            where = f"{(h, w)}: {int((diff > 0).sum())} values differ, by up to {diff.max()}"
            return {**case, "result": "mismatch", "error": where}
    return {**case, "result": "match"}


if __name__ == "__main__":  # python chain_fuzz_cases.py SEED...
    for arg in sys.argv[1:]:
        print("CASE " + json.dumps(check(int(arg))), flush=True)
