"""The GDPNPU workloads (samples/) on the cpu target, each against its OpenCV/NumPy peer on real
photos (or seeded features). Behaviour only: speed is the benchmark's business."""

import importlib
import sys

import pytest

from tests import SAMPLES

sys.path.insert(0, str(SAMPLES))

import workload


@pytest.mark.parametrize("name", workload.WORKLOADS)
def test_workload_matches_its_peer(name):
    module = importlib.import_module(name)
    workload.run(module, target="cpu")  # raises inside module.check on a mismatch


def test_check_can_fail():
    """The checks are not vacuous: a perturbed result is refused."""
    tone = importlib.import_module("tone")
    want = tone.peer(**tone.inputs())
    bad = {"mapped": want["mapped"] + 1e-3}
    with pytest.raises(AssertionError):
        tone.check(bad, want)


def test_canny_l2_on_other_photos_is_bit_exact():
    """L2 magnitude and other thresholds, on photos other than the workload's, smaller ones."""
    import photos

    canny = importlib.import_module("canny")
    compiled = canny.build("cpu", low=30, high=90, l2_gradient=True)
    for name in ("coffee", "rocket"):
        rgb = photos.photo_1080p(name)[::3, ::3].copy()  # 360x640
        want = canny.peer(rgb, low=30, high=90, l2_gradient=True)
        canny.check(compiled({"rgb": rgb}), want)
