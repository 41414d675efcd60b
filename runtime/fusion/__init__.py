"""The target-neutral fusion planner: which ops run as one kernel (planner.py). Each backend tells
it what one kernel may hold (KernelRules, from the backend's schedule module); the TVM backends'
adapter from Relax to the planner's graph is runtime/backends/tvm/fusion.py."""

from gdp.runtime.fusion.planner import (
    EXACT_LIMIT,
    CostModel,
    Graph,
    KernelRules,
    Op,
    acyclic,
    cost,
    group_ok,
    groups,
    is_legal,
    legal_join,
    plan,
)

__all__ = [
    "EXACT_LIMIT",
    "CostModel",
    "Graph",
    "KernelRules",
    "Op",
    "acyclic",
    "cost",
    "group_ok",
    "groups",
    "is_legal",
    "legal_join",
    "plan",
]
