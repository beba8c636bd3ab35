"""Choose which running jobs to preempt so a waiting job can start (pure; returns the victim set).

Two kinds, both only ever taking what is needed and nothing when it would not be enough:
- reclaim: the waiting job fits within its tenant's guarantee; victims are other tenants' borrowed work
  (their tenant is above its guarantee at the time), lowest priority first, most recently started first;
- rank: the policy time-slices (least attained service); victims rank strictly below the waiting job,
  lowest rank first, have run at least `min_run_s`, and another tenant's job is taken only while that
  tenant is above its guarantee, by over half the job when the job lies within its tenant's fair share (so such
  a preemption never takes a tenant further from its guarantee than it was).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from corral.scheduler.queueing.jobs import QueuedJob, RunningJob
from corral.scheduler.queueing.ordering import RankKey
from corral.scheduler.queueing.quota import QuotaBook, Usage, add_usage, is_borrowing

RECLAIM = "reclaim"
RANK = "rank"
DEFRAG = "defrag"  # a lower-ranked job moved off a node that a waiting job needs whole (node_room.py)


@dataclass(frozen=True, slots=True)
class Preemption:
    """Preempt `job_id` (SIGTERM, grace period, requeue keeping its place) so `for_job_id` can start."""

    job_id: str
    for_job_id: str
    kind: str


def order_reclaim_candidates(running: Sequence[RunningJob]) -> list[RunningJob]:
    """Lowest priority first, then most recently started first."""
    return sorted((r for r in running if not r.terminating), key=lambda r: (r.job.priority, -r.start_s, r.job.id))


def order_rank_candidates(running: Sequence[RunningJob], rank_of: Callable[[RunningJob], RankKey]) -> list[RunningJob]:
    """Lowest-ranked (last in line) first."""
    return sorted((r for r in running if not r.terminating), key=rank_of, reverse=True)


def _rank_margin(kind: str, victim: RunningJob, in_share: frozenset[str]) -> int:
    """How far above its guarantee a tenant must be for RANK to take `victim`, a job within (or rounded into) its
    tenant's fair share: by over half the victim, so that taking it leaves the tenant nearer its guarantee than it
    was. A tenant a GPU above its guarantee lost a whole 32-GPU gang to another tenant's time slice before, and held
    a quarter less than its share for as long as the gang waited for four whole nodes again (docs/queueing.md,
    "Shares of whole jobs"). Borrowed work (beyond the share) is taken whenever its tenant borrows, as a tenant
    could otherwise keep one job of up to twice its guarantee out of every other tenant's reach; and RECLAIM
    takes from any borrower: it restores a guarantee."""
    return -(victim.job.need_milli // 2) if kind == RANK and victim.job.id in in_share else 0


def select_victims(
    job: QueuedJob,
    model: str,
    shortfall_milli: int,
    candidates: Sequence[RunningJob],
    taken: set[str],
    settled: Usage,
    book: QuotaBook,
    kind: str,
    job_rank: RankKey | None = None,
    rank_of: Callable[[RunningJob], RankKey] | None = None,
    now_s: float = 0.0,
    min_run_s: float = 0.0,
    cohort: str = "",
    shielded: frozenset[str] = frozenset(),
    in_share: frozenset[str] = frozenset(),
) -> list[RunningJob] | None:
    """Victims on `model` freeing at least `shortfall_milli`, or None when the eligible ones cannot.

    `candidates` come in victim order (order_*_candidates: for RANK, lowest-ranked first); `taken` holds ids already chosen this cycle;
    `settled` is usage without jobs already being preempted, and is updated for the victims returned.
    With a `cohort`, reclaim takes only from tenants of that cohort (their borrowing is what it lacks).
    `shielded`: running jobs that RANK never takes for another tenant (within their tenant's fair share and
    restarted recently: admission.DEFRAG_SETTLE_S). `in_share`: running jobs within or rounded into their tenant's
    fair share, which RANK takes from another tenant only with _rank_margin."""
    chosen: list[RunningJob] = []
    freed = 0
    if cohort and kind == RECLAIM:
        # Within the job's cohort tree; its own (team) cohort's borrowers first, then the wider tree's.
        root = book.cohort_root(cohort)
        tree = {m.tenant: m.cohort for m in book.members_under(root)}
        candidates = sorted((r for r in candidates if r.job.tenant in tree), key=lambda r: tree[r.job.tenant] != cohort)
    for r in candidates:
        if freed >= shortfall_milli:
            break
        if r.model != model or r.job.id in taken:
            continue
        lower = job_rank is not None and rank_of is not None and rank_of(r) > job_rank
        if kind == RANK and not lower and rank_of is not None:
            break  # rank candidates come lowest-ranked first: none after this one ranks below the job
        if kind == RANK and (not lower or now_s - r.start_s < min_run_s):
            continue
        if r.job.tenant == job.tenant:
            if kind == RECLAIM or not lower:  # taking its own work back does not restore a guarantee
                continue
        elif (
            kind == RANK
            and r.job.id in shielded
            or (
                book.quotas
                and not is_borrowing(settled, book.get(r.job.tenant), model, _rank_margin(kind, r, in_share))
                or kind == RECLAIM
                and not book.quotas
            )
        ):
            continue
        chosen.append(r)
        freed += r.job.need_milli
        add_usage(settled, r.job.tenant, model, -r.job.need_milli)
    if freed < shortfall_milli:
        for r in chosen:
            add_usage(settled, r.job.tenant, model, r.job.need_milli)
        return None
    taken.update(r.job.id for r in chosen)
    return chosen
