"""gdp's tests. The folders mirror the source's (tests/gdp/cv2/ for gdp/cv2/, tests/runtime/
fusion/ for runtime/fusion/, ...); shared helpers live here: models.py and pipelines.py (test
programs), oracle.py (onnxruntime, the independent oracle), conformance/ (gdp.cv2's cases)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
