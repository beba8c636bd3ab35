"""Weighted max-min fair shares and decayed usage."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st
from queue_builders import admit, admitted, job, running

from corral.scheduler.queueing import compute_decayed_usage, compute_fair_shares


@dataclass
class Case:
    name: str
    demand: dict[str, float]
    weight: dict[str, float]
    capacity: float
    expect: dict[str, float]


CASES = [
    Case("equal split", {"a": 10, "b": 10}, {}, 8, {"a": 4, "b": 4}),
    Case("small demand leaves the rest", {"a": 1, "b": 10}, {}, 8, {"a": 1, "b": 7}),
    Case("weights", {"a": 10, "b": 10}, {"a": 3, "b": 1}, 8, {"a": 6, "b": 2}),
    Case("all satisfied", {"a": 1, "b": 2}, {}, 8, {"a": 1, "b": 2}),
    Case("three-way with a capped one", {"a": 1, "b": 10, "c": 10}, {}, 9, {"a": 1, "b": 4, "c": 4}),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_fair_shares(case: Case) -> None:
    got = compute_fair_shares(case.demand, case.weight, case.capacity)
    assert got == pytest.approx(case.expect)


@given(
    st.dictionaries(st.sampled_from("abcdef"), st.floats(0, 100), min_size=1),
    st.dictionaries(st.sampled_from("abcdef"), st.floats(0.1, 10)),
    st.floats(0, 300),
)
def test_shares_are_max_min_fair(demand: dict[str, float], weight: dict[str, float], capacity: float) -> None:
    share = compute_fair_shares(demand, weight, capacity)
    assert sum(share.values()) <= capacity + 1e-6
    assert all(-1e-9 <= share[t] <= demand[t] + 1e-6 for t in demand)
    if sum(demand.values()) > capacity:  # work-conserving
        assert sum(share.values()) == pytest.approx(capacity, rel=1e-6, abs=1e-6)
    for t in demand:  # an unsatisfied tenant has at least its weighted part relative to anyone else
        if share[t] < demand[t] - 1e-6:
            for u in demand:
                wt, wu = weight.get(t, 1.0), weight.get(u, 1.0)
                assert share[t] / wt >= share[u] / wu - 1e-6


def test_decayed_usage_halves_each_half_life_and_accrues() -> None:
    u = compute_decayed_usage({"a": 100.0}, [], 60.0, 60.0)
    assert u["a"] == pytest.approx(50.0)
    held = compute_decayed_usage({}, [running(job("x", "b", 2))], 1.0, 1e9)
    assert held["b"] == pytest.approx(2.0, rel=1e-6)  # 2 GPUs for 1 s, no decay to speak of


def test_corral_gives_the_lighter_tenant_the_next_gpu() -> None:
    # Tenant a already holds 3 of 4 GPUs; the free GPU goes to b's later job, not a's earlier one.
    run = [running(job(f"a{i}", "a")) for i in range(3)]
    plan = admit([job("a-next", "a", submit=1), job("b1", "b", submit=2)], gpus=4, run=run, policy="corral")
    assert admitted(plan) == ["b1"]
