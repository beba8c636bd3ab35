"""A scenario in the style of Kueue's baseline performance test, run in the simulator: cohorts of queues
with nominal quotas and borrowing limits, small/medium/large workloads at fixed rates. Reports admission
waits per class (printed; see bench/queueing_kueue.py for the full run) and checks the quota rules."""

from __future__ import annotations

from corral.scheduler.queueing import TOTAL, get_queueing_policy
from corral.sim.jobs import SimConfig, simulate_jobs
from corral.sim.jobs_scenarios import compute_class_waits, kueue_baseline


def test_kueue_style_scenario_admits_everything_within_quota_rules() -> None:
    sc = kueue_baseline(horizon_s=1800.0)
    result = simulate_jobs(sc.trace, sc.cluster, SimConfig(get_queueing_policy("corral"), quotas=sc.quotas))
    assert len(result.records) == len(sc.trace)
    waits = compute_class_waits(result, sc.job_class)
    print("admission waits per class:", waits)
    assert set(waits) == {"small", "medium", "large"}
    times = sorted({iv.start_s for iv in result.held})
    for t in times:
        held: dict[str, int] = {}
        for iv in result.held:
            if iv.start_s <= t < iv.end_s:
                held[iv.tenant] = held.get(iv.tenant, 0) + iv.milli
        for tenant, q in sc.quotas.quotas.items():
            assert held.get(tenant, 0) <= q.maximum[TOTAL]  # nominal + borrowing limit
        for cohort in {q.cohort for q in sc.quotas.quotas.values()}:
            members = sc.quotas.cohort_members(cohort)
            used = sum(held.get(m.tenant, 0) for m in members)
            assert used <= sum(m.nominal[TOTAL] for m in members)  # borrowing stays inside the cohort
