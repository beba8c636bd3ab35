"""Synthetic job workloads for the simulator. `kueue_baseline` follows the shape of Kueue's baseline
performance test (test/performance/scheduler): cohorts of queues with nominal quotas and borrowing
limits, and small / medium / large workloads arriving at fixed rates."""

from __future__ import annotations

from dataclasses import dataclass

from corral.scheduler.queueing import TOTAL, QueuedJob, QuotaBook, TenantQuota
from corral.sim.jobs import SimResult
from corral.sim.jobs_metrics import percentile
from corral.sim.jobs_trace import SimCluster, TraceJob

MODEL = "A100-80GB"


@dataclass(frozen=True, slots=True)
class WorkloadClass:
    name: str
    gpus: int
    duration_s: float
    every_s: float  # one per queue every this many seconds
    priority: int


KUEUE_CLASSES = (
    WorkloadClass("small", 1, 60.0, 30.0, 50),
    WorkloadClass("medium", 4, 300.0, 400.0, 100),
    WorkloadClass("large", 8, 600.0, 1800.0, 200),
)


@dataclass(frozen=True, slots=True)
class Scenario:
    cluster: SimCluster
    quotas: QuotaBook
    trace: list[TraceJob]
    job_class: dict[str, str]


def kueue_baseline(
    cohorts: int = 2,
    queues_per_cohort: int = 3,
    nominal_gpus: int = 8,
    borrowing_limit_gpus: int = 8,
    horizon_s: float = 3600.0,
    classes: tuple[WorkloadClass, ...] = KUEUE_CLASSES,
) -> Scenario:
    """Each queue (a tenant) is guaranteed `nominal_gpus`, may borrow up to `borrowing_limit_gpus` more from
    idle guarantees of its own cohort; the pool is exactly the sum of the guarantees."""
    quotas: dict[str, TenantQuota] = {}
    trace: list[TraceJob] = []
    job_class: dict[str, str] = {}
    for c in range(cohorts):
        for q in range(queues_per_cohort):
            tenant = f"cohort{c}-q{q}"
            quotas[tenant] = TenantQuota(
                tenant,
                {TOTAL: nominal_gpus * 1000},
                {TOTAL: (nominal_gpus + borrowing_limit_gpus) * 1000},
                cohort=f"cohort{c}",
            )
            for wc in classes:
                # Queue q submits at (2q + 1) / queues_per_cohort times the base rate: the first queues leave
                # guarantees idle for the busier ones in their cohort to borrow.
                every = wc.every_s * queues_per_cohort / (2 * q + 1)
                k, t = 0, float((q * 7 + c * 3) % wc.every_s)
                while t < horizon_s:
                    jid = f"{tenant}-{wc.name}-{k}"
                    trace.append(
                        TraceJob(
                            QueuedJob(
                                jid, tenant, wc.gpus, priority=wc.priority, submit_s=t, time_limit_s=wc.duration_s * 1.5
                            ),
                            wc.duration_s,
                        )
                    )
                    job_class[jid] = wc.name
                    k, t = k + 1, t + every
    trace.sort(key=lambda tj: (tj.job.submit_s, tj.job.id))
    pool = SimCluster(cohorts * queues_per_cohort, {MODEL: cohorts * queues_per_cohort * nominal_gpus * 1000})
    return Scenario(pool, QuotaBook(quotas), trace, job_class)


def compute_class_waits(result: SimResult, job_class: dict[str, str]) -> dict[str, dict[str, float]]:
    """Admission wait (submit to first start) per workload class: count, mean, p50, p90, max."""
    waits: dict[str, list[float]] = {}
    for r in result.records:
        waits.setdefault(job_class[r.id], []).append(r.first_start_s - r.submit_s)
    return {
        name: {
            "jobs": len(ws),
            "mean_s": round(sum(ws) / len(ws), 1),
            "p50_s": round(percentile(ws, 50), 1),
            "p90_s": round(percentile(ws, 90), 1),
            "max_s": round(max(ws), 1),
        }
        for name, ws in sorted(waits.items())
    }
