"""Quotas per tenant, per GPU model and in total: a guarantee (nominal) and a maximum, borrowing within a
cohort (Kueue's ClusterQueue/cohort model). Amounts are milli-GPUs; the key "*" is the total over models."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from corral.core.errors import ValidationError
from corral.scheduler.queueing import reasons
from corral.scheduler.queueing.jobs import QueuedJob, RunningJob

TOTAL = "*"
Usage = dict[str, dict[str, int]]  # tenant -> key (model or "*") -> milli-GPUs in use


@dataclass(frozen=True, slots=True)
class TenantQuota:
    """nominal: guaranteed milli-GPUs per key; maximum: never exceeded (a key missing = no limit beyond the
    pool). A tenant borrows when its use goes above nominal; it may only borrow GPUs idle in its cohort
    (cohort "" = the whole pool). weight: its fair-share weight (default: its total nominal, or 1)."""

    tenant: str
    nominal: Mapping[str, int] = field(default_factory=dict)
    maximum: Mapping[str, int] = field(default_factory=dict)
    cohort: str = ""
    weight: float | None = None

    def fair_weight(self) -> float:
        if self.weight is not None:
            return self.weight
        return float(self.nominal.get(TOTAL, sum(self.nominal.values()))) or 1.0


@dataclass(frozen=True, slots=True)
class QuotaBook:
    """All tenants' quotas. require_quota: a tenant (or model) without an entry may not run at all."""

    quotas: Mapping[str, TenantQuota] = field(default_factory=dict)
    require_quota: bool = False
    cohort_parent: Mapping[str, str] = field(default_factory=dict)  # cohort -> parent cohort (hierarchy)

    def get(self, tenant: str) -> TenantQuota | None:
        return self.quotas.get(tenant)

    def cohort_members(self, cohort: str) -> list[TenantQuota]:
        return [q for q in self.quotas.values() if q.cohort == cohort]

    def cohort_root(self, cohort: str) -> str:
        """The top of `cohort`'s hierarchy (department above teams); validate_quotas rejects cycles."""
        seen = {cohort}
        while self.cohort_parent.get(cohort) and self.cohort_parent[cohort] not in seen:
            cohort = self.cohort_parent[cohort]
            seen.add(cohort)
        return cohort

    def members_under(self, cohort: str) -> list[TenantQuota]:
        """Tenants whose cohort is `cohort` or lies below it in the hierarchy."""
        return [q for q in self.quotas.values() if q.cohort and self._descends(q.cohort, cohort)]

    def _descends(self, cohort: str, ancestor: str) -> bool:
        seen: set[str] = set()
        while cohort and cohort not in seen:
            if cohort == ancestor:
                return True
            seen.add(cohort)
            cohort = self.cohort_parent.get(cohort, "")
        return False


def validate_quotas(book: QuotaBook, pool_milli: Mapping[str, int]) -> None:
    """Raise ValidationError when nominal > maximum, when the guarantees of all tenants exceed the pool for a
    model (or in total), or when the cohort hierarchy has a cycle."""
    for q in book.quotas.values():
        for key, nom in q.nominal.items():
            if nom < 0 or (key in q.maximum and q.maximum[key] < nom):
                raise ValidationError(f"quota.{q.tenant}.{key}", f"nominal {nom / 1000:g} must be in 0..maximum")
            if key != TOTAL and key not in pool_milli:
                raise ValidationError(f"quota.{q.tenant}.{key}", f"no GPU model {key!r} in the pool")
    keys = {k for q in book.quotas.values() for k in q.nominal}
    for key in keys:
        cap = sum(pool_milli.values()) if key == TOTAL else pool_milli.get(key, 0)
        total = sum(q.nominal.get(key, 0) for q in book.quotas.values())
        if total > cap:
            raise ValidationError(
                f"quota.{key}", f"guarantees add up to {total / 1000:g} GPUs; the pool has {cap / 1000:g}"
            )
    for start in book.cohort_parent:
        seen = [start]
        node = book.cohort_parent.get(start)
        while node:
            if node in seen:
                raise ValidationError("cohort", f"cycle in the cohort hierarchy: {' -> '.join(seen + [node])}")
            seen.append(node)
            node = book.cohort_parent.get(node)


def compute_usage(running: Iterable[RunningJob]) -> Usage:
    """Milli-GPUs each tenant holds per model and in total (jobs being preempted still hold theirs)."""
    usage: Usage = {}
    for r in running:
        u = usage.setdefault(r.job.tenant, {})
        u[r.model] = u.get(r.model, 0) + r.job.need_milli
        u[TOTAL] = u.get(TOTAL, 0) + r.job.need_milli
    return usage


def add_usage(usage: Usage, tenant: str, model: str, milli: int) -> None:
    u = usage.setdefault(tenant, {})
    u[model] = u.get(model, 0) + milli
    u[TOTAL] = u.get(TOTAL, 0) + milli


def is_borrowing(usage: Usage, q: TenantQuota | None, model: str, extra: int = 0) -> bool:
    """True when the tenant's use (plus `extra`) is above its guarantee for `model` or in total. A tenant with no
    guarantee for either (no quota, or guarantees for other models only) is guaranteed nothing here: what it runs
    is borrowed, so it never reclaims, and its jobs are reclaimed like any borrower's."""
    if q is None:
        return True
    keys = [key for key in (model, TOTAL) if key in q.nominal]
    if not keys:
        return True
    u = usage.get(q.tenant, {})
    return any(u.get(key, 0) + extra > q.nominal[key] for key in keys)


def check_quota(book: QuotaBook, usage: Usage, job: QueuedJob, model: str) -> tuple[str, str] | None:
    """(reason, detail) when admitting `job` on `model` breaks a quota; None when it may run.

    A cohort's members together never hold more than the sum of their guarantees: borrowing (going above
    nominal) uses only idle guarantees of the same cohort (the pool's free GPUs are the ledger's business)."""
    q = book.get(job.tenant)
    if q is None:
        return (reasons.QUOTA, f"tenant {job.tenant!r} has no quota") if book.require_quota else None
    if book.require_quota and model not in q.nominal and model not in q.maximum and TOTAL not in q.nominal:
        return reasons.QUOTA, f"tenant {job.tenant!r} has no quota for model {model!r}"
    u = usage.get(job.tenant, {})
    for key in (model, TOTAL):
        if key in q.maximum and u.get(key, 0) + job.need_milli > q.maximum[key]:
            return (
                reasons.QUOTA,
                f"{key}: {(u.get(key, 0) + job.need_milli) / 1000:g} GPUs > maximum {q.maximum[key] / 1000:g}",
            )
    short = compute_cohort_shortfall(book, usage, job, model)
    if short > 0:
        return reasons.BORROW, f"cohort {q.cohort!r} lacks {short / 1000:g} idle guaranteed GPUs"
    return None


def compute_cohort_shortfall(book: QuotaBook, usage: Usage, job: QueuedJob, model: str) -> int:
    """Milli-GPUs by which admitting `job` would take its cohort tree (from the top of the hierarchy down)
    above the sum of its members' guarantees (0 without a cohort): teams of one department borrow each
    other's idle guarantees, never another department's. A borrower must wait; a job within its
    guarantee reclaims that much."""
    q = book.get(job.tenant)
    if q is None or not q.cohort:
        return 0
    members = book.members_under(book.cohort_root(q.cohort))
    short = 0
    for key in (model, TOTAL):
        if any(key in m.nominal for m in members):
            cap = sum(m.nominal.get(key, 0) for m in members)
            used = sum(usage.get(m.tenant, {}).get(key, 0) for m in members)
            short = max(short, used + job.need_milli - cap)
    return short


def select_within_guarantee(ranked: Iterable[QueuedJob], usage: Usage, book: QuotaBook) -> set[str]:
    """Ids of pending jobs that, taken per tenant in the given order, keep their tenant within its guarantee
    (total, and the job's own model when it names one with a guarantee) and its maximum (a job its maximum
    holds back must not keep the guarantee from the tenant's other jobs). They are admitted before any
    borrowing job, whatever the priorities: a guarantee is a promise, borrowing is opportunistic."""
    if not book.quotas:
        return set()
    extra: dict[tuple[str, str], int] = {}
    out: set[str] = set()
    for job in ranked:
        q = book.get(job.tenant)
        if q is None:
            continue
        if not any(k == TOTAL or (job.model and job.matches(k)) for k in q.nominal):
            continue
        limits = {
            k: min(q.nominal.get(k, 1 << 62), q.maximum.get(k, 1 << 62))
            for k in (*q.nominal, *q.maximum)
            if k == TOTAL or (job.model and job.matches(k))
        }
        u = usage.get(job.tenant, {})
        if all(u.get(k, 0) + extra.get((job.tenant, k), 0) + job.need_milli <= lim for k, lim in limits.items()):
            out.add(job.id)
            for k in limits:
                extra[(job.tenant, k)] = extra.get((job.tenant, k), 0) + job.need_milli
    return out
