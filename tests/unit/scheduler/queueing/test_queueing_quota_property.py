"""Property: with preemption on, a tenant is never kept below its guarantee longer than the grace period
(plus admission cycles) while it has pending work: every waiting job that would fit within its tenant's
guarantee starts within grace + 2 cycles of becoming so. No tenant ever holds more than its maximum.
Checked over whole simulated runs of random workloads."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral.scheduler.queueing import TOTAL, QueuedJob, QuotaBook, TenantQuota, get_queueing_policy
from corral.sim.jobs import SimConfig, SimResult, simulate_jobs
from corral.sim.jobs_trace import SimCluster, TraceJob

POOL = 8
GRACE_S, CYCLE_S = 5.0, 1.0


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[QuotaBook, list[TraceJob]]:
    n = draw(st.integers(2, 4))
    tenants = [f"t{i}" for i in range(n)]
    nominals = draw(st.lists(st.integers(0, POOL), min_size=n, max_size=n).filter(lambda xs: sum(xs) <= POOL))
    maxima = [draw(st.integers(max(nom, 1), POOL)) for nom in nominals]
    book = QuotaBook({t: TenantQuota(t, {TOTAL: nom * 1000}, {TOTAL: mx * 1000}) for t, nom, mx in zip(tenants, nominals, maxima)})
    jobs = []
    for i in range(draw(st.integers(1, 20))):
        k = draw(st.integers(0, n - 1))
        gpus = draw(st.integers(1, min(3, maxima[k])))
        job = QueuedJob(f"j{i}", tenants[k], gpus, submit_s=float(draw(st.integers(0, 60))),
                        priority=draw(st.integers(0, 2)))
        jobs.append(TraceJob(job, float(draw(st.integers(1, 80)))))
    jobs.sort(key=lambda t: t.job.submit_s)
    return book, jobs


def check_quotas(result: SimResult, book: QuotaBook, trace: list[TraceJob]) -> None:
    need = {t.job.id: t.job.need_milli for t in trace}
    times = sorted({iv.start_s for iv in result.held + result.present} | {iv.end_s for iv in result.held + result.present})
    below_since: dict[str, float] = {}
    for a, b in zip(times, times[1:]):
        mid = (a + b) / 2
        held: dict[str, int] = {}
        holding = set()
        for iv in result.held:
            if iv.start_s <= mid < iv.end_s:
                held[iv.tenant] = held.get(iv.tenant, 0) + iv.milli
                holding.add(iv.job_id)
        for tenant, q in book.quotas.items():
            assert held.get(tenant, 0) <= q.maximum[TOTAL], f"{tenant} above its maximum at t={mid}"
        for iv in result.present:  # each waiting job that fits within its tenant's guarantee
            q = book.quotas[iv.tenant]
            starved = (iv.start_s <= mid < iv.end_s and iv.job_id not in holding
                       and held.get(iv.tenant, 0) + need[iv.job_id] <= q.nominal[TOTAL])
            if not starved:
                below_since.pop(iv.job_id, None)
                continue
            since = below_since.setdefault(iv.job_id, a)
            assert b - since <= GRACE_S + 2 * CYCLE_S + 1e-6, (
                f"{iv.tenant} kept below its guarantee while {iv.job_id} waited from t={since} to t={b}")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_guarantees_are_restored_within_grace_and_maxima_hold(scenario: tuple[QuotaBook, list[TraceJob]]) -> None:
    book, trace = scenario
    cfg = SimConfig(get_queueing_policy("corral"), cycle_s=CYCLE_S, grace_s=GRACE_S, restart_overhead_s=1.0, quotas=book)
    result = simulate_jobs(trace, SimCluster(1, {"V100-32GB": POOL * 1000}), cfg)
    assert len(result.records) == len(trace)  # every job finishes: nobody starves forever
    check_quotas(result, book, trace)
