"""Store records -> the scheduler's inputs: load_snapshot reads a SchedulingStore into a Snapshot (nodes with what
is in use on them, and the queue); the compute_* helpers are the pure conversions it is made of."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from corral.core.pools import CLUSTER_KINDS, NODE_LABEL, POOL_LABEL, SOURCE_AGENT, SOURCE_LABEL, STATIC_POOL
from corral.core.requests import model_matches
from corral.core.resources import NodeInfo, NodeState
from corral.core.states import JobState
from corral.scheduler.plan import Snapshot
from corral.scheduler.queueing import TOTAL, QueueConfig, QueuedJob, QueueState, QuotaBook, RunningJob, TenantQuota
from corral.scheduler.queueing.prediction import DurationPrediction
from corral.scheduler.recheck import compute_node_use
from corral.store.protocols import JobStore, SchedulingStore
from corral.store.records import Job, Node, Queue, Quota, Tenant, compute_placed_parts

DEFAULT_TENANT_NAME = "default"


def load_snapshot(
    store: SchedulingStore,
    now: datetime,
    *,
    grace_s: float,
    nominated: Mapping[int, float],
    usage_gpu_s: Mapping[str, float],
    pending: Sequence[Job] | None = None,
    running: Sequence[Job] | None = None,
    tenants: Sequence[Tenant] | None = None,
    node_taints: Mapping[str, tuple[str, ...]] | None = None,
    predicted: Mapping[int, DurationPrediction | None] | None = None,
    kept: KeptBuilds | None = None,
) -> Snapshot:
    """One cycle's input from the store; `pending` / `running` / `tenants`: already read by the caller (default:
    every PENDING / RUNNING job, every tenant). `nominated`: job id -> when it was first nominated. `node_taints`:
    node -> its taints (the cloud pools' nodes: their pool's taints, and spot). `predicted`: job id -> its
    predicted run time (the `predict` order reads it). `kept`: the queue's jobs and the nodes as the last cycle
    built them (a caller that loads a snapshot each pass: only jobs and nodes that changed are built again)."""
    pending = store.list_jobs(states=[JobState.PENDING]) if pending is None else pending
    running = store.list_jobs(states=[JobState.RUNNING]) if running is None else running
    tenants = store.list_tenants() if tenants is None else tenants
    nodes = store.list_nodes()
    queue = compute_queue_state(
        pending,
        running,
        nodes,
        tenants,
        store.list_quotas(),
        store.list_queues(),
        usage_gpu_s,
        now,
        grace_s,
        nominated,
        predicted=predicted,
        kept=kept,
    )
    return Snapshot(nodes=compute_snapshot(nodes, running, node_taints, kept.nodes if kept else None), queue=queue)


class QueuedJobs:
    """compute_queued_job's results kept per Job object from one call of `build` to the next: a scheduler that loads
    a snapshot every pass built a QueuedJob for each of 10,000 pending jobs each time (and once more with its
    prediction). A job is built again when its row changed (the store hands back another Job object), its
    nomination or its prediction did (another object: RunTimePredictions keeps one until it learns); all are built
    again when the tenants' names or the pool's models change. Holds the jobs of the last call only."""

    def __init__(self) -> None:
        self._context: tuple[dict[int, str], tuple[str, ...]] | None = None
        self._kept: dict[int, tuple[Job, float | None, DurationPrediction | None, QueuedJob]] = {}

    def build(
        self,
        jobs: Sequence[Job],
        tenants: Mapping[int, str],
        models: Sequence[str],
        nominated: Mapping[int, float] | None = None,
        predicted: Mapping[int, DurationPrediction | None] | None = None,
    ) -> list[QueuedJob]:
        context = (dict(tenants), tuple(models))
        if context != self._context:
            self._context, self._kept = context, {}
        old = self._kept
        kept: dict[int, tuple[Job, float | None, DurationPrediction | None, QueuedJob]] = {}
        out = []
        for job in jobs:
            nominated_s = nominated.get(job.id) if nominated else None
            guess = predicted.get(job.id) if predicted else None
            entry = old.get(job.id)
            if entry is not None and entry[0] is job and entry[1] == nominated_s and entry[2] is guess:
                queued = entry[3]
            else:
                queued = compute_queued_job(job, tenants, models, nominated, guess)
            kept[job.id] = (job, nominated_s, guess, queued)
            out.append(queued)
        self._kept = kept
        return out


@dataclass(frozen=True)
class KeptBuilds:
    """What a caller that loads a snapshot every pass keeps between them: its pending and running jobs' QueuedJobs,
    and its nodes' NodeInfos."""

    pending: QueuedJobs = field(default_factory=lambda: QueuedJobs())
    running: QueuedJobs = field(default_factory=lambda: QueuedJobs())
    nodes: NodeInfos = field(default_factory=lambda: NodeInfos())


class JobCache:
    """The jobs in some states, as a reader that asks again and again (the scheduler, each pass) sees them: kept
    between reads, and loaded again only when their row changed (JobStore.list_jobs_changed). `read` returns what a
    list_jobs(states=...) would, by id; a job that changed state between the store's two reads is left out until the
    next read."""

    def __init__(self, store: JobStore, states: Sequence[JobState]) -> None:
        self._store = store
        self._states = tuple(states)
        self._jobs: dict[int, tuple[int, Job]] = {}  # id -> (row version, job)

    def read(self) -> list[Job]:
        ids, changed = self._store.list_jobs_changed(self._states, {i: v for i, (v, _) in self._jobs.items()})
        jobs = self._jobs
        for job, version in changed:
            if job.state in self._states:
                jobs[job.id] = (version, job)
            else:
                jobs.pop(job.id, None)
        self._jobs = {i: jobs[i] for i in ids if i in jobs}
        return [job for _, job in self._jobs.values()]


# ---- nodes: what is in use on each ----------------------------------------------
def _usage(
    placed: Iterable[tuple[int, Sequence[tuple[str, Sequence[int]]], int]],
) -> dict[tuple[str, int], tuple[int, int]]:
    """(node, gpu index) -> (used milli, id of the last job seen on it), from (job id, parts, milli) each."""
    usage: dict[tuple[str, int], tuple[int, int]] = {}
    for job_id, parts, milli in placed:
        for node, gpus in parts:
            for idx in gpus:
                used, _ = usage.get((node, idx), (0, 0))
                usage[(node, idx)] = (used + milli, job_id)
    return usage


def compute_usage(jobs: Sequence[Job]) -> dict[tuple[str, int], tuple[int, int]]:
    """(node, gpu index) -> (used milli, job id of the last job seen on it) for RUNNING jobs."""
    return _usage((job.id, job.placed_parts, job.spec.gpu_milli) for job in jobs)


def compute_usage_from_holders(
    holders: Sequence[tuple[int, str | None, list[int], list[Any], int]],
) -> dict[tuple[str, int], tuple[int, int]]:
    """compute_usage over the columns of JobStore.list_gpu_holders (no full job records)."""
    return _usage(
        (job_id, compute_placed_parts(node, gpus, parts), milli) for job_id, node, gpus, parts, milli in holders
    )


def compute_node_info(node: Node, taints: tuple[str, ...] = ()) -> NodeInfo:
    """The placement engine's view of a node: its GPUs, CPU, memory, labels (its pool, source and own name added),
    `taints` (and a cluster pool's kind), runtimes and cached images."""
    source = node.labels.get(SOURCE_LABEL, SOURCE_AGENT)
    # a cluster pool's node (slurm, kubernetes) carries its kind as a taint: only the jobs it can run tolerate it
    cluster_taint = (source,) if source in CLUSTER_KINDS else ()
    return NodeInfo(
        name=node.name,
        gpus=node.gpus,
        cpu_milli=node.cpu_milli,
        memory_mib=node.memory_mib,
        # a node no pool started: static; its own name last (never an agent's label): staged jobs ask for it
        labels=tuple(
            sorted({POOL_LABEL: STATIC_POOL, SOURCE_LABEL: source, **node.labels, NODE_LABEL: node.name}.items())
        ),
        taints=taints + cluster_taint,
        runtimes=node.runtimes,
        images=frozenset(node.images),
    )


class NodeInfos:
    """compute_node_info kept per Node object (the store hands back the same one until the node's row changes) and
    taints, for a caller that builds a snapshot every pass. Holds the nodes of the last call only."""

    def __init__(self) -> None:
        self._kept: dict[str, tuple[Node, tuple[str, ...], NodeInfo]] = {}

    def build(self, nodes: Sequence[Node], taints: Mapping[str, tuple[str, ...]]) -> list[NodeInfo]:
        old, kept, out = self._kept, {}, []
        for node in nodes:
            node_taints = taints.get(node.name, ())
            entry = old.get(node.name)
            if entry is None or entry[0] is not node or entry[1] != node_taints:
                entry = (node, node_taints, compute_node_info(node, node_taints))
            kept[node.name] = entry
            out.append(entry[2])
        self._kept = kept
        return out


def compute_snapshot(
    nodes: Sequence[Node],
    running: Sequence[Job],
    node_taints: Mapping[str, tuple[str, ...]] | None = None,
    infos: NodeInfos | None = None,
) -> list[NodeState]:
    """Every node (those that take no work flagged unschedulable) with the GPU, CPU and memory its RUNNING jobs use,
    and its taints (`node_taints`). `infos`: the nodes' NodeInfo as the last call built them (only changed nodes
    are built again)."""
    taints = node_taints or {}
    use = compute_node_use((j.placed_parts, j.spec.gpu_milli, j.spec.cpu_milli, j.spec.memory_mib) for j in running)
    built = (infos or NodeInfos()).build(nodes, taints)
    states = []
    for n, info in zip(nodes, built):
        u = use.get(n.name)
        if u is None:  # nothing runs there
            used, cpu, memory = (0,) * len(n.gpus), 0, 0
        else:
            used = tuple(min(1000, u.gpu_milli.get(g.index, 0)) for g in n.gpus)
            cpu, memory = u.cpu_milli, u.memory_mib
        states.append(
            NodeState(
                info=info,
                gpu_used_milli=used,
                cpu_used_milli=cpu,
                memory_used_mib=memory,
                schedulable=n.state == "READY" and not n.cordoned,
            )
        )
    return states


# ---- the queue ----------------------------------------------------------------
def compute_pool_milli(nodes: Sequence[Node]) -> dict[str, int]:
    """Milli-GPUs per model on nodes that take work (READY, not cordoned), healthy GPUs only."""
    pool: dict[str, int] = {}
    for n in nodes:
        if n.state != "READY" or n.cordoned:
            continue
        for g in n.gpus:
            if g.healthy:
                pool[g.model] = pool.get(g.model, 0) + 1000
    return pool


def resolve_model(wanted: Sequence[str], models: Sequence[str]) -> str:
    """The one pool model a request's allowed models select, else "" (any: placement checks the rest)."""
    if not wanted:
        return ""
    matching = [m for m in models if model_matches(m, tuple(wanted))]
    return matching[0] if len(matching) == 1 else ""


def compute_queued_job(
    job: Job,
    tenants: Mapping[int, str],
    models: Sequence[str],
    nominated: Mapping[int, float] | None = None,
    predicted: DurationPrediction | None = None,
) -> QueuedJob:
    """The queueing core's view of a job; it carries the job's full per-node request (JobSpec.request) and its
    predicted run time (`predicted`, None: unknown)."""
    s = job.spec
    tenant = tenants.get(s.tenant_id or 0, DEFAULT_TENANT_NAME)
    return QueuedJob(
        id=str(job.id),
        tenant=tenant,
        gpus=s.gpus,
        gpu_milli=s.gpu_milli if s.gpus else 1000,
        nodes=s.nodes,
        model=resolve_model(s.gpu_models, models),
        priority=s.priority,
        submit_s=job.created_at.timestamp(),
        time_limit_s=float(s.time_limit_s) if s.time_limit_s else None,
        queue=f"{tenant}/{s.queue}",
        attained_gpu_s=job.attained_gpu_s,
        nominated_s=(nominated or {}).get(job.id),
        request=s.request,
        group=f"array:{s.array_id}" if s.array_id is not None and s.array_limit else "",
        group_limit=s.array_limit or 0,
        predicted=predicted,
    )


def compute_running_job(
    job: Job,
    tenants: Mapping[int, str],
    models: Sequence[str],
    gpu_models: Mapping[tuple[str, int], str],
    now: datetime,
    grace_s: float,
    queued: QueuedJob | None = None,
) -> RunningJob:
    """The queueing core's view of a running job; `queued`: its QueuedJob, already built (default: built here)."""
    model = next((gpu_models[(n, i)] for n, gpus in job.placed_parts for i in gpus if (n, i) in gpu_models), "")
    stopping = job.preempt_requested or job.cancel_requested
    return RunningJob(
        job=compute_queued_job(job, tenants, models) if queued is None else queued,
        start_s=(job.started_at or now).timestamp(),
        model=model,
        exit_s=now.timestamp() + grace_s if stopping else None,
        preempted_for=str(job.preempted_for) if job.preempt_requested and job.preempted_for is not None else "",
        parts=tuple((node, tuple(gpus)) for node, gpus in job.placed_parts),
    )


def compute_quota_book(tenants: Sequence[Tenant], quotas: Sequence[Quota], models: Sequence[str]) -> QuotaBook:
    """Every tenant gets an entry (its fair-share weight); quotas become milli-GPU guarantees and maximums.
    A quota's model ("H100") is matched to the pool's model name ("H100-80GB"); "" is the total over models.
    A tenant's parent is its cohort (borrowing first within the department)."""
    names = {t.id: t.name for t in tenants}
    nominal: dict[int, dict[str, int]] = {}
    maximum: dict[int, dict[str, int]] = {}
    for q in quotas:
        key = TOTAL if not q.gpu_model else (resolve_model((q.gpu_model,), models) or q.gpu_model)
        nominal.setdefault(q.tenant_id, {})[key] = q.guaranteed_gpus * 1000
        if q.max_gpus is not None:
            maximum.setdefault(q.tenant_id, {})[key] = q.max_gpus * 1000
    book = {
        t.name: TenantQuota(
            t.name,
            nominal.get(t.id, {}),
            maximum.get(t.id, {}),
            cohort=names.get(t.parent_id or 0, ""),
            weight=t.weight,
        )
        for t in tenants
    }
    parents = {
        t.name: names[t.parent_id]
        for t in tenants
        if t.parent_id in names and any(u.parent_id == t.id for u in tenants)
    }
    return QuotaBook(book, cohort_parent={c: p for c, p in parents.items() if c != p})


def compute_queue_configs(queues: Sequence[Queue], tenants: Mapping[int, str]) -> dict[str, QueueConfig]:
    return {
        f"{tenants.get(q.tenant_id, '?')}/{q.name}": QueueConfig(
            f"{tenants.get(q.tenant_id, '?')}/{q.name}", strict=q.mode == "strict"
        )
        for q in queues
    }


def compute_queue_state(
    pending: Sequence[Job],
    running: Sequence[Job],
    nodes: Sequence[Node],
    tenants: Sequence[Tenant],
    quotas: Sequence[Quota],
    queues: Sequence[Queue],
    usage_gpu_s: Mapping[str, float],
    now: datetime,
    grace_s: float,
    nominated: Mapping[int, float] | None = None,
    *,
    predicted: Mapping[int, DurationPrediction | None] | None = None,
    kept: KeptBuilds | None = None,
) -> QueueState:
    names = {t.id: t.name for t in tenants}
    pool = compute_pool_milli(nodes)
    models = sorted({g.model for n in nodes for g in n.gpus})
    gpu_models = {(n.name, g.index): g.model for n in nodes for g in n.gpus}
    kept = kept or KeptBuilds()
    queued_running = kept.running.build(running, names, models, None, predicted)
    return QueueState(
        pending=kept.pending.build(pending, names, models, nominated, predicted),
        running=[
            compute_running_job(j, names, models, gpu_models, now, grace_s, q) for j, q in zip(running, queued_running)
        ],
        queues=compute_queue_configs(queues, names),
        quotas=compute_quota_book(tenants, quotas, models),
        usage_gpu_s=dict(usage_gpu_s),
        pool_milli=pool,
    )
