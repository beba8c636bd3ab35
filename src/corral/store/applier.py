"""apply_plan: commit a scheduling Plan to a JobStore (the server loop and the simulators both call it).

The admissions are one guarded assign_jobs_parts (one transaction): the store re-checks, admission by admission, that
every GPU the plan gives is still free (another writer may have taken it since the snapshot); a job whose check fails is `rejected`,
stays PENDING and is placed again next cycle from a fresh snapshot. Preemptions become request_preempt flags.
Nothing here makes a network call: notifying agents is the caller's step, after the commits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from corral.scheduler.plan import Plan
from corral.scheduler.queueing.preemption import Preemption
from corral.store.protocols import JobStore

REASON_RECLAIM = "reclaiming its tenant's guarantee"
REASON_RANK = "higher rank (least attained service)"
REASON_DEFRAG = "it needs this whole node; this job moves to free GPUs elsewhere"


@dataclass(slots=True)
class AppliedPlan:
    """What the store accepted: ids as in the plan (str). `preempted_nodes`: nodes of the jobs flagged (their agents
    must hear of it), in first-seen order."""

    started: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    preempted_nodes: list[str] = field(default_factory=list)


def compute_preempt_reason(p: Preemption) -> str:
    """The reason a preempted job shows (kept as the server wrote it before the plan existed)."""
    why = {"reclaim": REASON_RECLAIM, "defrag": REASON_DEFRAG}.get(p.kind, REASON_RANK)
    return f"preempted for job {p.for_job_id}: {why}"


def apply_plan(store: JobStore, plan: Plan, now: datetime) -> AppliedPlan:
    """Commit `plan`: admissions in plan order, in one transaction (each all-or-nothing across its gang), then
    preemptions."""
    out = AppliedPlan()
    batch = [(int(a.job_id), [(p.node, tuple(p.gpu_indices)) for p in a.placements]) for a in plan.admit]
    for admit, placed in zip(plan.admit, store.assign_jobs_parts(batch, now), strict=True):
        (out.started if placed else out.rejected).append(admit.job_id)
    for p in plan.preempt:
        job = store.get_job(int(p.job_id))
        if job is not None and store.request_preempt(job.id, compute_preempt_reason(p), now, int(p.for_job_id)):
            out.preempted.append(p.job_id)
            out.preempted_nodes.extend(n for n, _ in job.placed_parts if n not in out.preempted_nodes)
    return out
