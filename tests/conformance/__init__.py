"""The gdp.cv2 conformance matrix: gdp.cv2 against real OpenCV, case by case, with OpenCV's own
tests' tolerances. `cases_*.py` list the cases; tests/gdp/cv2/test_*.py run them and
docs/make_conformance.py writes docs/conformance.md from them."""
