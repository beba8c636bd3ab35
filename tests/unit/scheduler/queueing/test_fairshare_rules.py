"""Fair share (fairshare.py, admission.compute_rank_context): a job is tier 0 when, taking its tenant's jobs in
order, it fits within the tenant's water-filled share of the pool; demand is all of a tenant's pending and
running jobs."""

from __future__ import annotations

import math

from queue_builders import MODEL, job, running

from corral.scheduler.queueing import QueueState
from corral.scheduler.queueing.admission import compute_rank_context
from corral.scheduler.queueing.fairshare import (
    compute_decayed_usage,
    compute_fair_shares,
    select_share_tiers,
    select_within_share,
)
from corral.scheduler.queueing.ordering import compute_rank
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


def test_a_share_is_rounded_to_the_nearest_whole_job() -> None:
    # Share 17 GPUs, all of it unused by jobs that fit: the 32-GPU gang, which 17 is more than half of, is rounded
    # in (the tenant ends 15 over rather than 17 under), and only the first such job in the tenant's order is;
    # with 15 left (less than half of 32) the gang is not, but the 20-GPU job after it is; on a tie (16 of 32)
    # neither.
    gang, other = job("gang", "a", gpus=32, submit=1), job("other", "a", gpus=20, submit=2)
    order = lambda j: (j.submit_s,)  # noqa: E731
    none: frozenset[str] = frozenset()
    assert select_share_tiers([gang, other], {"a": 17_000.0}, order) == (none, frozenset({"gang"}))
    assert select_share_tiers([gang, other], {"a": 15_000.0}, order) == (none, frozenset({"other"}))
    assert select_share_tiers([gang], {"a": 16_000.0}, order) == (none, none)
    # Jobs that fit come first: a 4-GPU job takes 4 of 21, and the gang is rounded in with the 17 left.
    small = job("small", "a", gpus=4, submit=3)
    assert select_share_tiers([gang, small], {"a": 21_000.0}, order) == (frozenset({"small"}), frozenset({"gang"}))
    assert select_share_tiers([gang, small], {"a": 19_000.0}, order) == (frozenset({"small"}), none)


def test_a_job_rounded_into_a_share_ranks_after_every_share_and_before_borrowed_work() -> None:
    # Pool 48; a asks 33 (a 32-GPU gang and a 1-GPU job), b asks 30 (1-GPU jobs): shares are 24 each. a's job of
    # 1 fits, 23 are left, and the gang (less than twice 23) is rounded in. Even at priority 100 it ranks after
    # b's 24 jobs within b's share (tier 0), and before b's 6 borrowed ones (tier 1): rounding never takes
    # from another tenant's share.
    pending = [job("gang", "a", gpus=32, submit=1, priority=100), job("a1", "a", submit=2)]
    pending += [job(f"b{i}", "b", submit=3 + i) for i in range(30)]
    policy = get_queueing_policy("corral")
    ctx = compute_rank_context(QueueState(pending, [], pool_milli={MODEL: 48_000}), policy, {}, 0.0)
    assert ctx.rounded_in == frozenset({"gang"}) and "gang" not in ctx.within_share
    assert "a1" in ctx.within_share and sum(j.startswith("b") for j in ctx.within_share) == 24
    ranks = {j.id: compute_rank(j, policy, ctx, i) for i, j in enumerate(pending)}
    b_share = [ranks[i] for i in ctx.within_share if i.startswith("b")]
    b_borrowed = [ranks[j.id] for j in pending if j.id.startswith("b") and j.id not in ctx.within_share]
    assert max(b_share) < ranks["gang"] < min(b_borrowed)
