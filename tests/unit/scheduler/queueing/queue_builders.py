"""Builders for queueing tests: job("a", tenant="t", gpus=2, submit=5), running(job, start=0, model=...)."""

from __future__ import annotations

from corral.scheduler.queueing import (
    TOTAL,
    AdmissionPlan,
    CountLedger,
    QueueConfig,
    QueuedJob,
    QueueingPolicy,
    QueueState,
    QuotaBook,
    RunningJob,
    TenantQuota,
    compute_admission,
    get_queueing_policy,
)

MODEL = "V100-32GB"


def job(id: str, tenant: str = "t", gpus: int = 1, submit: float = 0.0, **kw: object) -> QueuedJob:
    return QueuedJob(id=id, tenant=tenant, gpus=gpus, submit_s=submit, **kw)  # type: ignore[arg-type]


def running(j: QueuedJob, start: float = 0.0, model: str = MODEL, exit_s: float | None = None) -> RunningJob:
    return RunningJob(j, start, model, exit_s)


def quota(
    tenant: str, nominal: float, maximum: float | None = None, cohort: str = "", model: str = TOTAL
) -> TenantQuota:
    return TenantQuota(
        tenant, {model: int(nominal * 1000)}, {} if maximum is None else {model: int(maximum * 1000)}, cohort
    )


def book(*quotas: TenantQuota) -> QuotaBook:
    return QuotaBook({q.tenant: q for q in quotas})


def admit(
    pending: list[QueuedJob],
    gpus: int = 8,
    run: list[RunningJob] | None = None,
    policy: str | QueueingPolicy = "fifo",
    now: float = 0.0,
    quotas: QuotaBook | None = None,
    queues: dict[str, QueueConfig] | None = None,
    pool: dict[str, int] | None = None,
) -> AdmissionPlan:
    pool = pool or {MODEL: gpus * 1000}
    run = run or []
    pol = get_queueing_policy(policy) if isinstance(policy, str) else policy
    state = QueueState(pending, run, queues or {}, quotas or QuotaBook(), {}, pool)
    return compute_admission(state, CountLedger(pool, run), pol, now)


def admitted(plan: AdmissionPlan) -> list[str]:
    return [a.job_id for a in plan.admit]
