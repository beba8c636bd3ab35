"""The one scheduling cycle (pure): a snapshot of nodes and queue in, a Plan out (admit with placements,
preempt, nominate, or pending with a reason). The server and the simulators apply the same Plan."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from corral.core.resources import NodeState, Placement
from corral.scheduler.choices import Unschedulable
from corral.scheduler.cluster import Cluster
from corral.scheduler.framework import DEFAULT_CONTEXT, PlacementPolicy, ScoreContext
from corral.scheduler.plugins import DEFAULT_POLICY
from corral.scheduler.queueing import reasons
from corral.scheduler.queueing.admission import QueueState, compute_admission
from corral.scheduler.queueing.jobs import QueuedJob, RunningJob
from corral.scheduler.queueing.node_capacity import NodeLedger
from corral.scheduler.queueing.policy import DEFAULT_QUEUEING, QueueingPolicy, get_queueing_policy
from corral.scheduler.queueing.preemption import Preemption
from corral.scheduler.queueing.reasons import PendingStatus

# The position of a pending job that is not in the GPU queue (no GPUs: placed oldest first, outside it).
UNRANKED = -1


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one cycle reads: every node with what is in use on it (nodes that take no work are
    included with `schedulable=False`), and the queue (pending jobs carry their full request)."""

    nodes: Sequence[NodeState]
    queue: QueueState


@dataclass(frozen=True, slots=True)
class Admit:
    """Start `job_id` now on these placements (one per gang part, on distinct nodes) of GPU `model`
    ("" for a job without GPUs)."""

    job_id: str
    model: str
    placements: tuple[Placement, ...]


@dataclass(frozen=True, slots=True)
class Plan:
    """admit: in the order decided (jobs without GPUs first, then rank order). preempt: victims to signal.
    nominate: jobs waiting on GPUs that preempted jobs release (the caller sets their `nominated_s`).
    pending: every other job's reason, detail, position (UNRANKED for jobs without GPUs) and ETA; the
    server shows `f"{reason}: {detail}"` (e.g. "capacity: 3 nodes: not enough free GPUs")."""

    admit: tuple[Admit, ...]
    preempt: tuple[Preemption, ...]
    nominate: tuple[str, ...]
    pending: Mapping[str, PendingStatus]


def is_quiet(plan: Plan) -> bool:
    """The plan starts, preempts and nominates nothing: every job it saw keeps waiting."""
    return not (plan.admit or plan.preempt or plan.nominate)


def _running_key(r: RunningJob) -> tuple[object, ...]:
    """A running job as is_same_work compares it: a stopping job's deadline (now + grace) moves with time alone."""
    return (r.job, r.start_s, r.model, r.exit_s is None, r.preempted_for, r.parts)


def is_same_work(a: Snapshot, b: Snapshot) -> bool:
    """The two snapshots differ at most in fair share's usage: the same nodes with the same load, the same pending
    jobs (the same objects: a caller that keeps its QueuedJobs between cycles hands back the same ones for jobs
    that did not change) in the same order, the same running jobs, queues and quotas (the pool's GPUs follow from
    the nodes). A quiet plan of `a` (is_quiet) is then what `b` would give too, but for what time alone moves: fair
    share's and attained service's order, ETAs and a stopping job's deadline, a reservation that a running job's
    late end pushes back, a backfill that no longer fits before a reservation, a running job becoming preemptible
    (its minimum run time, or the settling time after a defragmentation, over). A caller may keep the plan for a
    while instead of computing it again (server/background/scheduling.py: Scheduler.recheck_s)."""
    qa, qb = a.queue, b.queue
    return (
        len(qa.pending) == len(qb.pending)
        and all(x is y for x, y in zip(qa.pending, qb.pending))
        and len(qa.running) == len(qb.running)
        and all(_running_key(x) == _running_key(y) for x, y in zip(qa.running, qb.running))
        and qa.queues == qb.queues
        and qa.quotas == qb.quotas
        and a.nodes == b.nodes
    )


def compute_plan(
    snapshot: Snapshot,
    now_s: float,
    placement: PlacementPolicy | str = DEFAULT_POLICY,
    queueing: QueueingPolicy | str = DEFAULT_QUEUEING,
    *,
    rng: random.Random | None = None,
    ctx: ScoreContext = DEFAULT_CONTEXT,
    explain: bool = True,
    cluster: Cluster | None = None,
) -> Plan:
    """One cycle. `cluster`: a live engine the caller keeps across cycles (then `snapshot.nodes` is not
    read); admitted placements are applied to it, and the caller releases what its store rejected and
    what ends. Without it a throwaway engine is built from `snapshot.nodes`. `rng` seeds tie-breaking."""
    policy = get_queueing_policy(queueing) if isinstance(queueing, str) else queueing
    engine = cluster if cluster is not None else Cluster.from_states(snapshot.nodes, placement, ctx, rng)
    queue = snapshot.queue
    eligible, held_back = select_within_group_limits(queue.pending, queue.running)
    cpu_only = [j for j in eligible if j.gpus == 0]
    gpu_jobs = [j for j in eligible if j.gpus > 0]
    # Jobs without GPUs use no quota and hold no GPUs: placed first, oldest first, outside the queue.
    admit, pending = compute_cpu_only(engine, cpu_only)
    pending.update(held_back)
    state = replace(queue, pending=gpu_jobs, pool_milli=queue.pool_milli or engine.pool_milli())
    # The same engine decides the GPU jobs: admission's fit is the placement the plan carries.
    ledger = NodeLedger((), state.running, cluster=engine)
    try:
        decided = compute_admission(state, ledger, policy, now_s, explain)
    finally:
        ledger.end_cycle()  # nodes and spots kept for waiting jobs are kept again, if still needed, next cycle
    admit += [Admit(a.job_id, a.model, tuple(ledger.placements[a.job_id])) for a in decided.admit]
    pending.update(decided.pending)
    return Plan(tuple(admit), decided.preempt, decided.nominate, pending)


def select_within_group_limits(
    pending: Sequence[QueuedJob], running: Sequence[RunningJob]
) -> tuple[list[QueuedJob], dict[str, PendingStatus]]:
    """The pending jobs this cycle may consider: of a group with a limit (a job array's `%N`), only as many as
    it has room for beside its running tasks, first submitted first (then in the given order); the others
    wait with reason `array-limit`."""
    limited = [j for j in pending if j.group and j.group_limit > 0]
    if not limited:
        return list(pending), {}
    room: dict[str, int] = {}
    for j in limited:
        room.setdefault(j.group, j.group_limit)
    for r in running:
        if r.job.group in room:
            room[r.job.group] -= 1
    ahead = {j.id: i for i, j in enumerate(pending)}
    chosen: set[str] = set()
    held: dict[str, PendingStatus] = {}
    for j in sorted(limited, key=lambda j: (j.submit_s, ahead[j.id])):
        if room[j.group] > 0:
            room[j.group] -= 1
            chosen.add(j.id)
        else:
            held[j.id] = PendingStatus(
                reasons.ARRAY_LIMIT,
                f"its array runs at most {j.group_limit} tasks at once",
                UNRANKED,
                text=f"its array already runs {j.group_limit} tasks at once, its limit (%{j.group_limit})",
            )
    return [j for j in pending if not (j.group and j.group_limit > 0) or j.id in chosen], held


def compute_cpu_only(engine: Cluster, jobs: Sequence[QueuedJob]) -> tuple[list[Admit], dict[str, PendingStatus]]:
    """Place jobs without GPUs, oldest first (each gang part on its own node); the rest wait for capacity."""
    admit: list[Admit] = []
    pending: dict[str, PendingStatus] = {}
    for job in sorted(jobs, key=lambda j: j.submit_s):
        request = job.to_request()
        got = engine.place(request) if job.nodes == 1 else engine.place_gang(request, job.nodes)
        if isinstance(got, Unschedulable):
            text = f"waiting for CPU and memory on a node: {got.reason}"
            pending[job.id] = PendingStatus(reasons.CAPACITY, got.reason, UNRANKED, text=text)
        else:
            admit.append(Admit(job.id, "", tuple(got) if isinstance(got, list) else (got,)))
    return admit, pending


__all__ = ["UNRANKED", "Admit", "Plan", "Snapshot", "compute_cpu_only", "compute_plan", "select_within_group_limits"]
