"""Discrete-event job simulator: replays a job trace through the server's cycle (`compute_plan` on a live
`Cluster` of the trace's nodes) in simulated time. Preempted jobs keep their progress (checkpoint on
SIGTERM), hold their GPUs for the grace period, and pay a restart overhead when they run again."""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from corral.core.pools import PoolNode
from corral.core.resources import NodeInfo, NodeState, Placement
from corral.core.states import JobState
from corral.scheduler.cluster import Cluster
from corral.scheduler.plan import Plan, Snapshot, compute_plan
from corral.scheduler.plugins import DEFAULT_POLICY
from corral.scheduler.queueing import (
    TOTAL,
    QueuedJob,
    QueueingPolicy,
    QueueState,
    QuotaBook,
    RunningJob,
    TenantQuota,
    compute_decayed_usage,
)
from corral.scheduler.queueing.admission import with_attained
from corral.scheduler.queueing.prediction import DurationPredictor, JobFeatures
from corral.sim.jobs_trace import SimCluster, TraceJob, compute_gang
from corral.sim.pools import PoolsConfig, PoolSim
from corral.sim.store import compute_store_time, load_store, submit_request
from corral.store.applier import apply_plan
from corral.store.memory import MemoryStore

ARRIVE, FINISH, EXIT, CYCLE, JOIN, POOL = 0, 1, 2, 3, 4, 5  # JOIN: a pool node joins; POOL: look at the pools
_IDLE_EPS_S = 1e-6  # a node idle for exactly its pool's idle time is past it


@dataclass(frozen=True, slots=True)
class SimConfig:
    """cycle_s: at most one admission cycle per this many simulated seconds (a server's loop period).
    grace_s: a preempted job keeps its GPUs this long. restart_overhead_s: paid on each restart.
    quotas: None = each tenant is guaranteed an equal part of the pool (may borrow up to all of it) when the
    policy does fair share, and no quotas otherwise."""

    policy: QueueingPolicy
    cycle_s: float = 1.0
    placement: str = DEFAULT_POLICY  # the placement policy (the server's default)
    seed: int | None = None  # None: ties go to the first node in the list, as on the server; else seeded draws
    grace_s: float = 5.0
    restart_overhead_s: float = 5.0
    quotas: QuotaBook | None = None
    horizon_s: float | None = None  # stop here even if jobs are left (a run that would never end)
    # Predict run times from the jobs finished so far (None: when the policy's order is `predict`).
    predict: bool | None = None
    # Explain one cycle every this many simulated seconds and score each pending job's ETA against its next
    # start (SimResult.eta_errors_s); None: never (cycles skip reasons and ETAs).
    eta_sample_s: float | None = None
    # Cloud pools (sim/pools.py): the autoscaler's own demand and decide() run after each cycle; None: none.
    pools: PoolsConfig | None = None


@dataclass(frozen=True, slots=True)
class JobRecord:
    id: str
    tenant: str
    gpus: float
    submit_s: float
    first_start_s: float
    end_s: float
    duration_s: float
    preemptions: int

    @property
    def jct_s(self) -> float:
        return self.end_s - self.submit_s

    @property
    def wait_s(self) -> float:
        """Time in the system not spent making progress: queueing, grace periods and restarts."""
        return max(self.jct_s - self.duration_s, 0.0)


@dataclass(frozen=True, slots=True)
class Interval:
    job_id: str
    tenant: str
    start_s: float
    end_s: float
    milli: int
    model: str = ""  # the GPU model held (held intervals); "" for demand intervals


@dataclass(slots=True)
class SimResult:
    records: list[JobRecord]
    held: list[Interval]  # GPUs held by each tenant (running and in grace)
    present: list[Interval]  # jobs in the system (demand): submit to end
    capacity_milli: int
    weights: dict[str, float]
    cycles: int = 0
    preemptions: int = 0
    starts: list[Start] = field(default_factory=list)  # every start (restarts too), in start order
    # With SimConfig.eta_sample_s: |ETA - actual next start| per sampled pending job that had an ETA, and how
    # many sampled pending jobs had none (unknown: only jobs without a time limit or prediction ahead).
    eta_errors_s: list[float] = field(default_factory=list)
    eta_unknown: int = 0
    pool_nodes: tuple[PoolNode, ...] = ()  # with SimConfig.pools: every node the pools started (all released)
    unfinished: list[str] = field(default_factory=list)  # jobs still waiting when the run ended (never ran)
    end_s: float = 0.0  # the last event's time


@dataclass(frozen=True, slots=True)
class Start:
    """A job started at `start_s` on these placements (one per gang part)."""

    job_id: str
    start_s: float
    placements: tuple[Placement, ...]


def equal_quotas(tenants: Sequence[str], pool_milli: dict[str, int]) -> QuotaBook:
    """Each tenant guaranteed an equal part of the pool in total, allowed to borrow up to the whole pool."""
    total = sum(pool_milli.values())
    part = total // max(len(tenants), 1)
    return QuotaBook({t: TenantQuota(t, {TOTAL: part}, {TOTAL: total}) for t in tenants})


@dataclass(slots=True)
class _Sim:
    cfg: SimConfig
    cluster: SimCluster
    quotas: QuotaBook
    engine: Cluster
    store: MemoryStore  # the server's commit path: every start is a guarded assign_job_parts, as on the server
    store_id: dict[str, int] = field(default_factory=dict)  # trace job id -> its id in the store
    trace_id: dict[str, str] = field(default_factory=dict)  # str(store id) -> trace job id
    events: list[tuple[float, int, int, str, int]] = field(default_factory=list)
    seq: int = 0
    pending: dict[str, QueuedJob] = field(default_factory=dict)
    running: dict[str, RunningJob] = field(default_factory=dict)
    remaining: dict[str, float] = field(default_factory=dict)
    duration: dict[str, float] = field(default_factory=dict)
    version: dict[str, int] = field(default_factory=dict)
    first_start: dict[str, float] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)
    overhead: dict[str, float] = field(default_factory=dict)  # restart overhead of the current run
    placed: dict[str, tuple[Placement, ...]] = field(default_factory=dict)  # where running jobs hold GPUs
    usage: dict[str, float] = field(default_factory=dict)
    usage_t: float = 0.0
    last_cycle: float = -1e18
    cycle_at: float | None = None
    result: SimResult | None = None
    predictor: DurationPredictor | None = None
    features: dict[str, JobFeatures] = field(default_factory=dict)
    next_eta_sample: float = 0.0
    eta_open: dict[str, list[float]] = field(default_factory=dict)  # job -> ETAs given while it waited
    pools: PoolSim | None = None
    arrivals_left: int = 0

    def push(self, t: float, kind: int, job_id: str = "", version: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, kind, self.seq, job_id, version))

    def want_cycle(self, t: float) -> None:
        at = max(t, self.last_cycle + self.cfg.cycle_s)
        if self.cycle_at is None or at < self.cycle_at:
            self.cycle_at = at
            self.push(at, CYCLE)


def simulate_jobs(
    trace: Sequence[TraceJob],
    cluster: SimCluster,
    cfg: SimConfig,
    progress: Callable[[int], None] | None = None,
) -> SimResult:
    """Run the trace to completion; `progress(n)` is told each finished job."""
    tenants = sorted({t.job.tenant for t in trace})
    quota_milli = dict(cluster.pool_milli)
    if cfg.pools is not None:  # the most GPUs the cluster can hold, its pools at their maximum
        for model, milli in cfg.pools.max_pool_milli().items():
            quota_milli[model] = quota_milli.get(model, 0) + milli
    quotas = (
        cfg.quotas
        if cfg.quotas is not None
        else (equal_quotas(tenants, quota_milli) if cfg.policy.fair_share else QuotaBook())
    )
    weights = {t: (q.fair_weight() if (q := quotas.get(t)) else 1.0) for t in tenants}
    engine = Cluster(cluster.infos(), cfg.placement, rng=None if cfg.seed is None else random.Random(cfg.seed))
    sim = _Sim(cfg, cluster, quotas, engine, load_store(engine.infos))
    if cfg.predict or (cfg.predict is None and cfg.policy.order == "predict"):
        sim.predictor = DurationPredictor()
        sim.features = {t.job.id: t.features or JobFeatures(t.job.tenant, t.job.tenant, gpus=t.job.gpus) for t in trace}
    per_node = cluster.max_gpus_per_node()
    if cfg.pools is not None:
        sim.pools = PoolSim(cfg.pools)
        per_node = max(per_node, cfg.pools.max_gpus_per_node)
    sim.arrivals_left = len(trace)
    sim.result = SimResult([], [], [], sum(cluster.pool_milli.values()), weights)
    jobs = {t.job.id: t for t in trace}
    for t in trace:
        sim.push(t.job.submit_s, ARRIVE, t.job.id)
        sim.duration[t.job.id] = t.duration_s
        sim.remaining[t.job.id] = t.duration_s
    now = 0.0
    while sim.events:
        now, kind, _, job_id, version = heapq.heappop(sim.events)
        if cfg.horizon_s is not None and now > cfg.horizon_s:
            break
        if kind == ARRIVE:
            sim.arrivals_left -= 1
            tj = jobs[job_id]
            job = tj.job if cfg.policy.order == "sjf" else replace(tj.job, known_duration_s=None)
            job = compute_gang(job, per_node)
            if sim.predictor is not None:  # from the jobs finished before now only
                job = replace(job, predicted=sim.predictor.predict(sim.features[job_id]))
            sim.pending[job_id] = job
            sim.store_id[job_id] = submit_request(
                sim.store, job.to_request(), job.id, compute_store_time(now), nodes=job.nodes, priority=job.priority
            )
            sim.trace_id[str(sim.store_id[job_id])] = job_id
            sim.version[job_id] = 0
            sim.want_cycle(now)
        elif kind in (FINISH, EXIT):
            if version != sim.version.get(job_id) or job_id not in sim.running:
                continue
            _leave(sim, job_id, now, finished=kind == FINISH)
            if kind == FINISH and progress:
                progress(1)
            sim.want_cycle(now)
        elif kind == CYCLE:
            if sim.cycle_at != now:
                continue
            sim.cycle_at = None
            _cycle(sim, now)
        elif kind == JOIN:
            assert sim.pools is not None
            _add_node(sim, sim.pools.join(job_id, now), now)
            _wake_when_idle(sim, job_id, now)
            sim.want_cycle(now)
        elif kind == POOL:
            sim.want_cycle(now)
    sim.result.unfinished = sorted(sim.pending)
    sim.result.end_s = now
    if sim.pools is not None:
        sim.pools.end(now)
        sim.result.pool_nodes = tuple(sim.pools.nodes.values())
    return sim.result


def _leave(sim: _Sim, job_id: str, now: float, finished: bool) -> None:
    r = sim.running.pop(job_id)
    for p in sim.placed.pop(job_id, ()):
        sim.engine.release(p)
    sid, at = sim.store_id[job_id], compute_store_time(now)
    ok = (
        sim.store.finish_job(sid, JobState.SUCCEEDED, 0, "", at)
        if finished
        else sim.store.requeue_job(sid, "preempted", at, preempted=True)
    )
    assert ok, f"the store refused the end of job {job_id}"
    res = sim.result
    assert res is not None
    res.held.append(Interval(job_id, r.job.tenant, r.start_s, now, r.job.need_milli, r.model))
    if finished and sim.predictor is not None:
        sim.predictor.record(sim.features[job_id], sim.duration[job_id])
    if finished:
        job = r.job
        res.present.append(Interval(job.id, job.tenant, job.submit_s, now, job.need_milli))
        res.records.append(
            JobRecord(
                job.id,
                job.tenant,
                job.need_milli / 1000,
                job.submit_s,
                sim.first_start[job_id],
                now,
                sim.duration[job_id],
                sim.restarts.get(job_id, 0),
            )
        )
    else:
        requeued = with_attained(r.job, r, now)  # keeps its submit time: its place in line
        if sim.predictor is not None:  # predicted again from what has finished since it arrived
            requeued = replace(requeued, predicted=sim.predictor.predict(sim.features[job_id]))
        sim.pending[job_id] = requeued


def _cycle(sim: _Sim, now: float) -> None:
    cfg, res = sim.cfg, sim.result
    assert res is not None
    sim.last_cycle = now
    res.cycles += 1
    sim.usage = compute_decayed_usage(sim.usage, sim.running.values(), now - sim.usage_t, cfg.policy.half_life_s)
    sim.usage_t = now
    if not sim.pending:
        _autoscale(sim, now, None)
        return
    running = list(sim.running.values())
    # With pools the cluster grows and shrinks: the plan sees the nodes there now, as the server's does.
    pool_milli = sim.engine.pool_milli() if sim.pools is not None else sim.cluster.pool_milli
    state = QueueState(list(sim.pending.values()), running, {}, sim.quotas, sim.usage, pool_milli)
    explain = cfg.eta_sample_s is not None and now >= sim.next_eta_sample
    before = Snapshot(tuple(sim.engine.node_states()) if sim.pools is not None else (), state)
    # The autoscaler reads each waiting job's reason: with pools every cycle explains, as the server's does.
    plan = compute_plan(
        before, now, sim.engine.policy, cfg.policy, explain=explain or sim.pools is not None, cluster=sim.engine
    )
    plan = _commit(sim, plan, now)
    if explain:
        assert cfg.eta_sample_s is not None
        sim.next_eta_sample = now + cfg.eta_sample_s
        _sample_etas(sim, plan)
    for p in plan.preempt:
        _preempt(sim, p.job_id, p.for_job_id, now)
    for job_id in plan.nominate:  # waiting on GPUs that preempted jobs release: it keeps its claim on them
        waiting = sim.pending[job_id]
        if waiting.nominated_s is None:
            sim.pending[job_id] = replace(waiting, nominated_s=now)
    for a in plan.admit:
        job = sim.pending.pop(a.job_id)
        restart = a.job_id in sim.first_start
        sim.first_start.setdefault(a.job_id, now)
        sim.running[a.job_id] = RunningJob(
            job, now, a.model, parts=tuple((p.node, p.gpu_indices) for p in a.placements)
        )
        sim.placed[a.job_id] = a.placements
        for eta in sim.eta_open.pop(a.job_id, ()):
            res.eta_errors_s.append(abs(eta - now))
        res.starts.append(Start(a.job_id, now, a.placements))
        overhead = cfg.restart_overhead_s if restart else 0.0
        sim.overhead[a.job_id] = overhead
        sim.version[a.job_id] += 1
        sim.push(now + overhead + sim.remaining[a.job_id], FINISH, a.job_id, sim.version[a.job_id])
    _autoscale(sim, now, (before, plan))
    if sim.pending and (cfg.policy.preempt or plan.preempt) and not _stuck(sim):
        sim.want_cycle(now + 30.0)  # service levels change while jobs run: look again even if nothing happens


def _autoscale(sim: _Sim, now: float, cycle: tuple[Snapshot, Plan] | None) -> None:
    """The autoscaler's pass after a cycle (sim/pools.py): launched nodes join `boot_s` later, released ones
    leave the cluster now, and a node that just went idle is looked at again when its idle time is up."""
    if sim.pools is None:
        return
    jobs_on: dict[str, int] = {}
    for placements in sim.placed.values():
        for p in placements:
            jobs_on[p.node] = jobs_on.get(p.node, 0) + 1
    launched, released, idle = sim.pools.step(now, cycle, jobs_on)
    for node in launched:
        sim.push(now + sim.pools.cfg.boot_s, JOIN, node.name)
    for node in released:
        _remove_node(sim, node.name, now)
    for node in idle:
        _wake_when_idle(sim, node.name, now)


def _wake_when_idle(sim: _Sim, name: str, since: float) -> None:
    assert sim.pools is not None
    spec = next(p for p in sim.pools.cfg.pools if p.name == sim.pools.nodes[name].pool)
    sim.push(since + spec.idle_s + _IDLE_EPS_S, POOL)


def _stuck(sim: _Sim) -> bool:
    """With pools: nothing runs, no job is still to arrive and no node is starting, so the jobs left wait for
    nothing that can come (they fit no instance type, or the pools are at their maximum with nothing running)."""
    return sim.pools is not None and not sim.running and sim.arrivals_left == 0 and not sim.pools.launching()


def _rebuild(sim: _Sim, states: list[NodeState]) -> None:
    """The engine over a changed node set, the loads on the nodes that stay kept."""
    sim.engine = Cluster.from_states(states, sim.engine.policy, rng=sim.engine.rng)


def _add_node(sim: _Sim, info: NodeInfo, now: float) -> None:
    """A pool node joins: registered in the store (READY) and in the engine, as an agent's registration does."""
    at = compute_store_time(now)
    sim.store.upsert_node(
        info.name, info.name, "sim", info.cpu_milli, info.memory_mib, dict(info.labels), info.gpus, at
    )
    _rebuild(sim, [*sim.engine.node_states(), NodeState(info)])


def _remove_node(sim: _Sim, name: str, now: float) -> None:
    """A released pool node (no job on it) leaves the engine; the store sees it lost."""
    sim.store.mark_node_lost(name)
    _rebuild(sim, [s for s in sim.engine.node_states() if s.info.name != name])


def _sample_etas(sim: _Sim, plan: Plan) -> None:
    """Keep the ETA of every job still pending after this explained cycle, to score at its next start."""
    assert sim.result is not None
    admitted = {a.job_id for a in plan.admit}
    for job_id, status in plan.pending.items():  # the plan's ids are the trace's (only _commit translates)
        if job_id in admitted or job_id not in sim.pending:
            continue
        if status.eta_s is None:
            sim.result.eta_unknown += 1
        else:
            sim.eta_open.setdefault(job_id, []).append(status.eta_s)


def _preempt(sim: _Sim, job_id: str, for_job_id: str, now: float) -> None:
    r = sim.running[job_id]
    overhead = sim.overhead.get(job_id, 0.0)
    done = max(now - r.start_s - overhead, 0.0)
    finish_at = r.start_s + overhead + sim.remaining[job_id]
    if finish_at <= now + sim.cfg.grace_s:
        sim.running[job_id] = replace(
            r, exit_s=finish_at, preempted_for=for_job_id
        )  # it ends within the grace period anyway
        return
    sim.remaining[job_id] -= done
    sim.restarts[job_id] = sim.restarts.get(job_id, 0) + 1
    sim.running[job_id] = replace(r, exit_s=now + sim.cfg.grace_s, preempted_for=for_job_id)
    sim.version[job_id] += 1
    sim.push(now + sim.cfg.grace_s, EXIT, job_id, sim.version[job_id])
    assert sim.result is not None
    sim.result.preemptions += 1


def _commit(sim: _Sim, plan: Plan, now: float) -> Plan:
    """Apply `plan` to the store with the server's applier (ids translated to the store's); what the store
    rejects is released from the engine and stays pending. Returns the plan of what the store accepted."""
    sid = sim.store_id
    as_stored = replace(
        plan,
        admit=tuple(replace(a, job_id=str(sid[a.job_id])) for a in plan.admit),
        preempt=tuple(replace(p, job_id=str(sid[p.job_id]), for_job_id=str(sid[p.for_job_id])) for p in plan.preempt),
    )
    applied = apply_plan(sim.store, as_stored, compute_store_time(now))
    started = {sim.trace_id[j] for j in applied.started}
    for a in plan.admit:
        if (
            a.job_id not in started
        ):  # another writer cannot exist here: a rejection is a bug, but handled as on the server
            for p in a.placements:
                sim.engine.release(p)
    return replace(plan, admit=tuple(a for a in plan.admit if a.job_id in started))
