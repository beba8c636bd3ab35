"""Fair share (fairshare.py, admission.compute_rank_context): a job is tier 0 when, taking its tenant's jobs in
order, it fits within the tenant's water-filled share of the pool; demand is all of a tenant's pending and
running jobs."""

from __future__ import annotations

import math

from queue_builders import MODEL, job, running

from corral.scheduler.queueing import QueueState
from corral.scheduler.queueing.admission import compute_rank_context
from corral.scheduler.queueing.fairshare import compute_decayed_usage, compute_fair_shares, select_within_share
from corral.scheduler.queueing.policy import get_queueing_policy


def test_a_tenant_without_a_share_has_no_job_within_it() -> None:
    tiny = job("tiny", "x", gpu_milli=1)
    assert select_within_share([tiny], {}, lambda j: (j.submit_s,)) == frozenset()
    assert select_within_share([tiny], {"x": 1.0}, lambda j: (j.submit_s,)) == frozenset({"tiny"})


def test_demand_sums_all_of_a_tenants_jobs() -> None:
    # Pool 4: a asks 3 (three jobs), b asks 1; water-filling gives each its whole demand, so every job is
    # within its tenant's share.
    pending = [job("a1", "a", submit=1), job("a2", "a", submit=2), job("b1", "b", submit=3)]
    state = QueueState(pending, [running(job("a0", "a"))], pool_milli={MODEL: 4000})
    ctx = compute_rank_context(state, get_queueing_policy("corral"), {}, 0.0)
    assert ctx.within_share == frozenset({"a0", "a1", "a2", "b1"})


def test_a_tenant_asking_more_than_its_share_borrows_the_rest() -> None:
    # Pool 4, a asks 5 and b asks 1: b gets 1, a the other 3; a's fourth and fifth jobs (by submit) borrow.
    pending = [job(f"a{i}", "a", submit=i) for i in range(5)] + [job("b1", "b", submit=9)]
    state = QueueState(pending, [], pool_milli={MODEL: 4000})
    ctx = compute_rank_context(state, get_queueing_policy("corral"), {}, 0.0)
    assert ctx.within_share == frozenset({"a0", "a1", "a2", "b1"})


def test_jobs_being_preempted_are_no_demand() -> None:
    pending = [job("a1", "a", 2, submit=1)]
    leaving = running(job("b0", "b", 2), exit_s=5.0)
    state = QueueState(pending, [leaving, running(job("b1", "b", 2))], pool_milli={MODEL: 4000})
    ctx = compute_rank_context(state, get_queueing_policy("corral"), {}, 0.0)
    assert ctx.within_share == frozenset({"a1", "b1"})


def test_water_filling_gives_what_a_satisfied_tenant_leaves_to_the_others_by_weight() -> None:
    # 12 GPUs: a asks 2 (fewer than its third), b and c share the other 10 by weight 1 : 4.
    shares = compute_fair_shares({"a": 2000.0, "b": 9000.0, "c": 9000.0}, {"b": 1.0, "c": 4.0}, 12000.0)
    assert shares["a"] == 2000.0
    assert abs(shares["b"] - 2000.0) < 1e-6 and abs(shares["c"] - 8000.0) < 1e-6
    # Everyone satisfied: each gets its demand, the rest stays unshared; no demand, no share.
    assert compute_fair_shares({"a": 1000.0, "b": 0.0}, {}, 8000.0) == {"a": 1000.0, "b": 0.0}
    assert compute_fair_shares({"a": 1000.0}, {}, 0.0) == {"a": 0.0}


def test_decayed_usage_halves_every_half_life_and_adds_the_held_gpus() -> None:
    two = running(job("r", "a", 2))
    out = compute_decayed_usage({"a": 100.0, "b": 40.0}, [two], 3600.0, 3600.0)
    assert abs(out["b"] - 20.0) < 1e-9  # one half-life: halved
    # a: halved, plus 2 GPUs x H/ln2 x (1 - 1/2)
    assert abs(out["a"] - (50.0 + 2 * 3600.0 / math.log(2) * 0.5)) < 1e-6
    # No half-life: no memory, plain GPU-seconds of the interval.
    assert compute_decayed_usage({"a": 100.0}, [two], 10.0, 0.0) == {"a": 20.0}
