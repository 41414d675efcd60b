"""Neighbour comparisons written with shifted slices -> the convolution-mask form, by its old
import path: the rule is rewrites/rules/neighbour_differences.py, called as
neighbour_differences(model, profile, force=False) -> (model, log)."""

from gdp.rewrites.rules import RULES

neighbour_differences = RULES["neighbour_differences"]

__all__ = ["neighbour_differences"]
