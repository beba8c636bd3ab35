"""Weighted fair share: max-min water-filling of capacity over tenants' demands, and decayed usage."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

from corral.scheduler.queueing.jobs import QueuedJob, RunningJob


def compute_fair_shares(demand: Mapping[str, float], weight: Mapping[str, float], capacity: float) -> dict[str, float]:
    """Weighted max-min shares: every tenant gets min(demand, its weighted part of what is left), and what a
    satisfied tenant leaves is shared again among the rest. Missing weights count as 1."""
    share = {t: 0.0 for t in demand}
    active = {t for t, d in demand.items() if d > 0}
    left = capacity
    while active and left > 1e-9:
        total_w = sum(max(weight.get(t, 1.0), 1e-12) for t in active)
        offer = {t: left * max(weight.get(t, 1.0), 1e-12) / total_w for t in active}
        capped = {t for t in active if demand[t] - share[t] <= offer[t]}
        if not capped:
            for t in active:
                share[t] += offer[t]
            break
        for t in capped:
            left -= demand[t] - share[t]
            share[t] = demand[t]
        active -= capped
    return share


def compute_decayed_usage(
    usage: Mapping[str, float], running: Iterable[RunningJob], dt_s: float, half_life_s: float
) -> dict[str, float]:
    """Usage (GPU-seconds) after `dt_s` more seconds: old usage halves every `half_life_s`, and the GPUs
    held by `running` during the interval are added with the same decay (exact integral)."""
    decay = 0.5 ** (dt_s / half_life_s) if half_life_s > 0 else 0.0
    out = {t: u * decay for t, u in usage.items()}
    gain = (half_life_s / math.log(2)) * (1 - decay) if half_life_s > 0 else dt_s
    for r in running:
        out[r.job.tenant] = out.get(r.job.tenant, 0.0) + r.job.need_milli / 1000 * gain
    return out


def select_within_share(
    jobs: Iterable[QueuedJob], share_milli: Mapping[str, float], key: Callable[[QueuedJob], tuple[float, ...]]
) -> frozenset[str]:
    """Ids of the jobs that fit inside their tenant's fair share when each tenant's jobs are taken in
    `key` order (a callable job -> sortable); the rest are borrowed work (select_share_tiers)."""
    return select_share_tiers(jobs, share_milli, key)[0]


def select_share_tiers(
    jobs: Iterable[QueuedJob], share_milli: Mapping[str, float], key: Callable[[QueuedJob], tuple[float, ...]]
) -> tuple[frozenset[str], frozenset[str]]:
    """(within, rounded_in): the ids of the jobs that fit inside their tenant's fair share when each tenant's jobs
    are taken in `key` order (a callable job -> sortable), and of the jobs its share is rounded up to.

    Jobs are indivisible, so a share is rounded to whole jobs, to the nearest: when the tenant's jobs that fit
    leave part of its share unused, its first job (in `key` order) left out that needs less than twice that
    part is rounded in (a tie rounds down), taking the tenant less far over its share than leaving it out would
    leave it under. Without this, a tenant whose share ends inside its large job (a 32-GPU gang with 17 GPUs of
    share left) held a fixed part less than its share for as long as the job waited, borrowed, behind every
    other tenant's share. A rounded-in job ranks after every tenant's jobs within their share and before
    borrowed work (ordering.compute_rank), so what a tenant gains by rounding never comes out of another
    tenant's share, whatever priority it gives the job (docs/queueing.md, "Shares of whole jobs")."""
    by_tenant: dict[str, list[QueuedJob]] = {}
    for j in jobs:
        by_tenant.setdefault(j.tenant, []).append(j)
    within: set[str] = set()
    rounded: set[str] = set()
    for tenant, tjobs in by_tenant.items():
        left = share_milli.get(tenant, 0.0)
        skipped: list[QueuedJob] = []
        for j in sorted(tjobs, key=key):
            if j.need_milli <= left + 1e-6:
                within.add(j.id)
                left -= j.need_milli
            else:
                skipped.append(j)
        if left > 1e-6:
            nearest = next((j for j in skipped if j.need_milli < 2 * left - 1e-6), None)
            if nearest is not None:
                rounded.add(nearest.id)
    return frozenset(within), frozenset(rounded)
