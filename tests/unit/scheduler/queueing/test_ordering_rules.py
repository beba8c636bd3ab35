"""Rank keys (ordering.py): the fair-share tier (0 within share, 1 borrowed), then priority, the LAS level,
the tenant's decayed usage per unit of weight, and arrival."""

from __future__ import annotations

import math

from queue_builders import admit, admitted, job

from corral.scheduler.queueing import CountLedger, QueueState, QuotaBook, TenantQuota, compute_admission
from corral.scheduler.queueing.ordering import RankContext, compute_las_level, compute_rank, compute_tenant_order_key
from corral.scheduler.queueing.policy import get_queueing_policy

CORRAL = get_queueing_policy("corral")
MODEL = "V100-32GB"


def test_corral_rank_key_is_tier_priority_level_usage_submit() -> None:
    ctx = RankContext(frozenset({"in"}), {"t": 2.5})
    assert compute_rank(job("in", "t", submit=7, priority=3), CORRAL, ctx, 4) == (0.0, -3.0, 0.0, 2.5, 7.0, 4)
    assert compute_rank(job("out", "t", submit=7), CORRAL, ctx, 5, attained_gpu_s=500.0) == (
        1.0, 0.0, 1.0, 2.5, 7.0, 5,
    )  # fmt: skip
    assert compute_rank(job("new", "u", submit=1), CORRAL, ctx, 0) == (1.0, 0.0, 0.0, 0.0, 1.0, 0)


def test_a_high_priority_cannot_put_one_tenants_borrowed_work_ahead_of_anothers_share() -> None:
    # Any member may set priority 1000. On 2 GPUs, tenants a and b have a fair share of 1 GPU each; a's two
    # top-priority jobs ask for both. b's job is within b's share and a's second job is not: b's starts.
    pending = [job("a1", "a", submit=1, priority=1000), job("a2", "a", submit=2, priority=1000)]
    pending.append(job("b1", "b", submit=3))
    state = QueueState(pending, [], {}, QuotaBook(), {}, {MODEL: 2000})
    plan = compute_admission(state, CountLedger({MODEL: 2000}, []), CORRAL, 10.0)
    assert sorted(admitted(plan)) == ["a1", "b1"]
    # Within a tenant's share, priority still orders its jobs (and across tenants within a tier): a2 first.
    pending = [job("a1", "a", submit=1), job("a2", "a", submit=2, priority=5)]
    state = QueueState(pending, [], {}, QuotaBook(), {}, {MODEL: 1000})
    assert admitted(compute_admission(state, CountLedger({MODEL: 1000}, []), CORRAL, 10.0)) == ["a2"]


def test_the_tenant_with_less_decayed_usage_per_weight_goes_first() -> None:
    # One GPU, two tenants each asking one: both borrow (share 0.5 each), same level. a arrived first, but
    # it has used more, so b starts.
    pending = [job("a1", "a", submit=1), job("b1", "b", submit=2)]
    state = QueueState(pending, [], {}, QuotaBook(), {"a": 100.0, "b": 10.0}, {MODEL: 1000})
    plan = compute_admission(state, CountLedger({MODEL: 1000}, []), CORRAL, 10.0)
    assert admitted(plan) == ["b1"]
    assert plan.pending["a1"].position == 0


def test_usage_is_divided_by_the_tenants_weight() -> None:
    # a used twice as much as b but weighs four times as much: a's usage per weight is lower, a goes first.
    quotas = QuotaBook({"a": TenantQuota("a", weight=4.0), "b": TenantQuota("b", weight=1.0)})
    pending = [job("b1", "b", submit=1), job("a1", "a", submit=2)]
    state = QueueState(pending, [], {}, quotas, {"a": 200.0, "b": 100.0}, {MODEL: 1000})
    plan = compute_admission(state, CountLedger({MODEL: 1000}, []), CORRAL, 10.0)
    assert admitted(plan) == ["a1"]


def test_without_usage_arrival_decides() -> None:
    plan = admit([job("a1", "a", submit=1), job("b1", "b", submit=2)], gpus=1, policy="corral", now=10.0)
    assert admitted(plan) == ["a1"]


def test_baseline_rank_keys() -> None:
    ctx = RankContext()
    j = job("j", "t", submit=5.0, priority=2, time_limit_s=300.0, attained_gpu_s=4000.0)
    assert compute_rank(j, get_queueing_policy("fifo"), ctx, 3) == (-2.0, 5.0, 3)
    assert compute_rank(j, get_queueing_policy("sjf"), ctx, 3) == (-2.0, 300.0, 5.0, 3)  # no oracle: the limit
    oracle = job("o", "t", submit=5.0, time_limit_s=300.0, known_duration_s=42.0)
    assert compute_rank(oracle, get_queueing_policy("sjf"), ctx, 0) == (0.0, 42.0, 5.0, 0)
    assert compute_rank(job("u", "t"), get_queueing_policy("sjf"), ctx, 0)[1] == math.inf  # unknown: last
    assert compute_rank(j, get_queueing_policy("las"), ctx, 3) == (-2.0, 1.0, 5.0, 3)  # 4,000 >= 3,200 GPU-s
    assert compute_rank(j, get_queueing_policy("las"), ctx, 3, attained_gpu_s=10.0) == (-2.0, 0.0, 5.0, 3)


def test_las_levels_and_the_order_inside_a_tenant() -> None:
    thresholds = (120.0, 960.0)
    assert [compute_las_level(a, thresholds) for a in (0.0, 119.9, 120.0, 959.0, 960.0, 1e9)] == [0, 0, 1, 1, 2, 2]
    key = compute_tenant_order_key(job("j", "t", submit=3.0, priority=1), CORRAL, 500.0)
    assert key == (-1.0, 1.0, 3.0)
