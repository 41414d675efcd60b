"""Measured operator substitutions (GDPNPU thesis 5.5.2), by their old import path: each is a
rule of rewrites/rules/ (split_reduce, separable_filters, channel_parallel_filters), called as
rule(model, profile, force=False) -> (model, log), and `decide` is gdp.rewrites.rule's."""

from gdp.rewrites.rule import decide
from gdp.rewrites.rules import RULES

split_reduce = RULES["split_reduce"]
separable_filters = RULES["separable_filters"]
channel_parallel_filters = RULES["channel_parallel_filters"]

__all__ = ["channel_parallel_filters", "decide", "separable_filters", "split_reduce"]
