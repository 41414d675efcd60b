"""gdp.benchmarking.compare's rounds: every peer timed once a round, in a fixed order or, shuffled,
in orders that vary (so no peer always follows the same one) and repeat from run to run."""

import pytest

from gdp.benchmarking import compare


def _calls(shuffled: bool, runs: int = 40) -> list[str]:
    order: list[str] = []
    peers = {name: (lambda name=name: order.append(name)) for name in "abc"}
    timings = compare(peers, runs=runs, warmup=0, shuffled=shuffled)
    assert all(len(t.seconds) == runs for t in timings.values())
    return order


def test_a_fixed_order_runs_the_peers_round_robin():
    assert _calls(False, runs=3) == list("abcabcabc")


def test_shuffled_rounds_time_each_peer_once_a_round_in_orders_that_vary():
    order = _calls(True)
    rounds = [order[i : i + 3] for i in range(0, len(order), 3)]
    assert all(sorted(r) == list("abc") for r in rounds)
    # each peer follows each other one somewhere
    after = {(order[i], order[i + 1]) for i in range(len(order) - 1)}
    assert {(x, y) for x in "abc" for y in "abc" if x != y} <= after
    assert _calls(True) == order  # seeded: the same orders every time


def test_runs_must_be_positive():
    with pytest.raises(ValueError, match="runs"):
        compare({"a": lambda: None}, runs=0)
