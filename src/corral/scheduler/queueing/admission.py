"""One admission cycle (pure): which pending jobs start now, which running jobs to preempt, and why every
other job waits and until when. The server and the simulator both call `compute_admission`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from corral.core.resources import FULL_GPU_MILLI
from corral.scheduler.queueing import reasons, wording
from corral.scheduler.queueing.backfill import Reservation, allow_backfill, compute_reservation
from corral.scheduler.queueing.capacity import Ledger
from corral.scheduler.queueing.eta import EtaEstimator, compute_predicted_ends
from corral.scheduler.queueing.fairshare import compute_fair_shares, select_share_tiers
from corral.scheduler.queueing.jobs import (
    QueueConfig,
    QueuedJob,
    RunningJob,
    Shape,
    add_shape,
    compute_shape,
    is_dominated,
)
from corral.scheduler.queueing.node_room import MAX_VICTIM_NODES, NodeIndex, is_node_bound, rank_nodes
from corral.scheduler.queueing.ordering import (
    ATTAINED_ORDERS,
    RankContext,
    RankKey,
    compute_rank,
    compute_tenant_order_key,
)
from corral.scheduler.queueing.policy import QueueingPolicy
from corral.scheduler.queueing.preemption import (
    DEFRAG,
    RANK,
    RECLAIM,
    Preemption,
    order_rank_candidates,
    order_reclaim_candidates,
    select_victims,
)
from corral.scheduler.queueing.quota import (
    TOTAL,
    QuotaBook,
    Usage,
    add_usage,
    check_quota,
    compute_cohort_shortfall,
    compute_usage,
    is_borrowing,
    select_within_guarantee,
)


@dataclass(frozen=True, slots=True)
class QueueState:
    """Everything one cycle reads. `pending` in any order; `running` includes jobs being preempted;
    `usage_gpu_s` is each tenant's decayed GPU-second usage (fairshare.compute_decayed_usage)."""

    pending: Sequence[QueuedJob]
    running: Sequence[RunningJob] = ()
    queues: Mapping[str, QueueConfig] = field(default_factory=dict)
    quotas: QuotaBook = field(default_factory=QuotaBook)
    usage_gpu_s: Mapping[str, float] = field(default_factory=dict)
    pool_milli: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Admission:
    job_id: str
    model: str


@dataclass(frozen=True, slots=True)
class AdmissionPlan:
    """admit: start these now (in rank order). preempt: signal these (victims). pending: per waiting job its
    reason, position and ETA (only when asked to explain). nominate: the jobs waiting for GPUs that
    preempted jobs release (this plan's victims or earlier ones); the caller sets `nominated_s = now` on
    each unless already set, so that it keeps its claim on them in later cycles."""

    admit: tuple[Admission, ...]
    preempt: tuple[Preemption, ...]
    pending: Mapping[str, reasons.PendingStatus]
    nominate: tuple[str, ...] = ()


def running_attained(r: RunningJob, now_s: float) -> float:
    """GPU-seconds a running job has attained up to now (it accrues while it holds its GPUs)."""
    return r.job.attained_gpu_s + max(now_s - r.start_s, 0.0) * r.job.need_milli / 1000


def with_attained(job: QueuedJob, r: RunningJob | None, now_s: float) -> QueuedJob:
    """The job carrying the service it attained (used when a preempted job goes back to the queue)."""
    return job if r is None else replace(job, attained_gpu_s=running_attained(r, now_s), nominated_s=None)


def compute_rank_context(
    state: QueueState, policy: QueueingPolicy, attained: Mapping[str, float], now_s: float
) -> RankContext:
    """Fair-share tiers (which jobs fit within their tenant's weighted share of the pool) and decayed usage
    per unit of weight. Weights: quota weights (default: total guarantee), else 1."""
    if not policy.fair_share:
        return RankContext()
    weight = {t: q.fair_weight() for t, q in state.quotas.quotas.items()}
    # Running jobs first: the tenant order's sort is stable, so on a tie (array tasks share their submit time) a
    # running job keeps its place in the share rather than swapping with a pending twin every min_run_s.
    active = [*(r.job for r in state.running if not r.terminating), *state.pending]
    demand: dict[str, float] = {}
    for j in active:
        demand[j.tenant] = demand.get(j.tenant, 0.0) + j.need_milli
    shares = compute_fair_shares(demand, weight, float(sum(state.pool_milli.values())))
    within, rounded = select_share_tiers(
        active, shares, lambda j: compute_tenant_order_key(j, policy, attained.get(j.id, j.attained_gpu_s))
    )
    per_weight = {t: u / max(weight.get(t, 1.0), 1e-9) for t, u in state.usage_gpu_s.items()}
    return RankContext(within, per_weight, rounded)


@dataclass(slots=True)
class _Cycle:
    """Scratch for one cycle (not shared)."""

    state: QueueState
    policy: QueueingPolicy
    ledger: Ledger
    now_s: float
    held: Usage
    settled: Usage
    ranks: dict[str, RankKey]
    admit: list[Admission] = field(default_factory=list)
    preempt: list[Preemption] = field(default_factory=list)
    taken: set[str] = field(default_factory=set)
    reservations: list[Reservation] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)  # jobs holding GPUs that preempted jobs release
    failed_need: dict[tuple[str, str], int] = field(default_factory=dict)
    # Per (tenant, model asked for), the shapes of requests that neither fit nor could preempt this cycle: a
    # later (lower-ranked) job of the tenant whose request dominates one of them (same constraints, at least
    # as much of every resource) cannot either (free capacity and victims do not grow within a cycle; a job
    # asking 2 CPUs may fit where one asking 64 failed, so GPU demand alone does not say it).
    tenant_failed: dict[tuple[str, str], list[Shape]] = field(default_factory=dict)
    # Victim candidates per (kind, model) in victim order, and how many at their front are taken already
    # (victims go from the front, so each search starts past them instead of rescanning).
    orders: dict[tuple[str, str], list[RunningJob]] = field(default_factory=dict)
    order_starts: dict[tuple[str, str], int] = field(default_factory=dict)
    node_index: NodeIndex = field(default_factory=lambda: NodeIndex(()))
    # Running jobs within their tenant's fair share that (re)started less than DEFRAG_SETTLE_S ago: no other
    # tenant's job takes them by rank (fair-share policies), so no tenant makes another restart more often.
    shielded: frozenset[str] = frozenset()
    # Running jobs within (or rounded into) their tenant's fair share: RANK takes one of another tenant only while
    # that tenant stays nearer its guarantee (preemption._rank_margin); borrowed work is taken as before.
    in_share: frozenset[str] = frozenset()

    def rank_of(self, r: RunningJob) -> RankKey:
        return self.ranks[r.job.id]


def compute_admission(
    state: QueueState, ledger: Ledger, policy: QueueingPolicy, now_s: float, explain: bool = True
) -> AdmissionPlan:
    """Walk pending jobs in rank order; each starts if quota, capacity (all gang parts) and reservations
    allow, else it may preempt, else it waits with a reason. `explain=False` skips reasons and ETAs (the
    simulator's fast path)."""
    attained = {r.job.id: running_attained(r, now_s) for r in state.running} if policy.order in ATTAINED_ORDERS else {}
    ctx = compute_rank_context(state, policy, attained, now_s)
    ranks = {j.id: compute_rank(j, policy, ctx, i) for i, j in enumerate(state.pending)}
    if policy.preempt:
        ranks.update({r.job.id: compute_rank(r.job, policy, ctx, -1, attained.get(r.job.id)) for r in state.running})
    held = compute_usage(state.running)
    settled = compute_usage(r for r in state.running if not r.terminating)
    cyc = _Cycle(
        state,
        policy,
        ledger,
        now_s,
        held,
        settled,
        ranks,
        node_index=NodeIndex(state.running, {j.id: j.gpus for j in state.pending}),
        shielded=frozenset(
            r.job.id for r in state.running if r.job.id in ctx.within_share and now_s - r.start_s < DEFRAG_SETTLE_S
        ),
        in_share=ctx.within_share | ctx.rounded_in,
    )
    ordered = sorted(state.pending, key=lambda j: ranks[j.id])
    inf = float("inf")
    # Jobs already nominated (waiting on GPUs that preempted jobs release) claim their tenant's guarantee first,
    # by nomination time, then the rest in rank order: a reclaim in flight keeps the guarantee it reclaims,
    # so a newcomer of the same tenant (even of higher priority) cannot take it over and make the tenant
    # reclaim again, a grace period later.
    guaranteed = select_within_guarantee(
        sorted(ordered, key=lambda j: inf if j.nominated_s is None else j.nominated_s), held, state.quotas
    )
    if guaranteed:
        # Jobs within their tenant's guarantee first, and among them those that already preempted others
        # (by nomination time: they would otherwise lose the GPUs they reclaimed to a newcomer and reclaim
        # again). The sort is stable, so rank order holds otherwise.
        ordered.sort(
            key=lambda j: (
                j.id not in guaranteed,
                inf if j.id not in guaranteed or j.nominated_s is None else j.nominated_s,
            )
        )
    statuses: list[tuple[QueuedJob, str, str]] = []
    blocked_queues: set[str] = set()
    global_blocked = False
    for job in ordered:
        qname = job.queue_name
        strict = policy.head_blocks or state.queues.get(qname, QueueConfig(qname)).strict
        behind = global_blocked or qname in blocked_queues
        failed = cyc.tenant_failed.get((job.tenant, job.model))
        if failed and (behind or not (strict and policy.backfill)) and is_dominated(compute_shape(job), failed):
            # It cannot fit and cannot preempt: skip the work, keep the order and the queue's block.
            statuses.append((job, reasons.BEHIND_HEAD if behind else reasons.CAPACITY, ""))
            if strict:
                blocked_queues.add(qname)
                global_blocked = global_blocked or policy.head_blocks
            continue
        if behind and not policy.backfill:
            statuses.append((job, reasons.BEHIND_HEAD, "a job ahead in a strict queue is blocked"))
            continue
        reason, detail, blocks = _try_job(cyc, job, behind)
        if reason:
            statuses.append((job, reason, detail))
            if reason in (reasons.CAPACITY, reasons.GANG) and not behind:
                add_shape(cyc.tenant_failed.setdefault((job.tenant, job.model), []), compute_shape(job))
            if blocks and strict:
                if policy.head_blocks:
                    global_blocked = True
                blocked_queues.add(qname)
                if policy.backfill and reason != reasons.PREEMPTING:
                    _reserve(cyc, job)
        if not explain and not policy.preempt and not state.quotas.quotas and _all_full(ledger):
            break
    pending = _explain(cyc, statuses) if explain else {}
    return AdmissionPlan(tuple(cyc.admit), tuple(cyc.preempt), pending, tuple(cyc.waiting))


def _all_full(ledger: Ledger) -> bool:
    return all(ledger.free(m) <= 0 for m in ledger.models())


def _try_job(cyc: _Cycle, job: QueuedJob, behind: bool) -> tuple[str, str, bool]:
    """Start, preempt for, or explain one job: (reason, detail, blocks-its-queue); reason "" = admitted."""
    model, reason, detail = cyc.ledger.check(job)
    if model is not None:
        quota = check_quota(cyc.state.quotas, cyc.held, job, model)
        if quota and not job.model:
            model, quota, reason, detail = _try_other_models(cyc, job, model, quota)
    if model is not None:
        if quota:
            got = _try_preempt(cyc, job) if quota[0] == reasons.BORROW and not behind else ""
            return (reasons.PREEMPTING, got, True) if got else (quota[0], quota[1], True)
        if cyc.reservations and not allow_backfill(job, model, cyc.reservations, cyc.now_s):
            return reasons.RESERVED, "would delay the reserved start of a blocked head", False
        cyc.ledger.take(job, model)
        add_usage(cyc.held, job.tenant, model, job.need_milli)
        add_usage(cyc.settled, job.tenant, model, job.need_milli)
        cyc.admit.append(Admission(job.id, model))
        return "", "", False
    if reason == reasons.MODEL:
        return reason, detail, False
    if behind:
        return reasons.BEHIND_HEAD, "a job ahead in a strict queue is blocked", False
    room: tuple[str, str] | None = NO_NODES
    if cyc.ledger.knows_nodes and is_node_bound(job):  # nodes first; counting GPUs only where none is open
        room = _make_room(cyc, job, reason, detail)
        if room is not NO_NODES and room is not None:
            return room[0], room[1], True
    got = _try_preempt(cyc, job, unplaceable=True) if room is NO_NODES else ""
    if got:
        return reasons.PREEMPTING, got, True
    checks = [check_quota(cyc.state.quotas, cyc.held, job, m) for m in cyc.ledger.models() if job.matches(m)]
    blocked = [b for b in checks if b is not None and b[0] == reasons.QUOTA]
    if checks and len(blocked) == len(checks):  # no room, and its maximum says no anyway
        return blocked[0][0], blocked[0][1], True
    return reason, detail, True


def _try_other_models(
    cyc: _Cycle, job: QueuedJob, model: str, quota: tuple[str, str]
) -> tuple[str | None, tuple[str, str] | None, str, str]:
    """A job of any model that fits on `model` but breaks a quota there: the first other model it fits on
    within its quotas; else, when some other model's quotas allow it, "no room" (it may preempt there);
    else the quota problem on `model`."""
    allowed = [m for m in cyc.ledger.models() if m != model and not check_quota(cyc.state.quotas, cyc.held, job, m)]
    for other in allowed:
        got, _, _ = cyc.ledger.check(replace(job, model=other))
        if got is not None:
            return got, None, "", ""
    if allowed:
        return (
            None,
            None,
            reasons.CAPACITY,
            f"{job.need_milli / 1000:g} GPUs needed on {', '.join(allowed)} (quota: {quota[1]})",
        )
    return model, quota, "", ""


def _try_preempt(cyc: _Cycle, job: QueuedJob, unplaceable: bool = False) -> str:
    """Claim GPUs that preempted jobs are releasing, or pick new victims; "" when neither works.
    `unplaceable`: the placement engine found no room although enough GPUs of a model may be free (host
    CPU or memory, fragmentation): freeing more GPUs of that model by count is no answer there."""
    book = cyc.state.quotas
    for model in cyc.ledger.models():
        if not job.matches(model):
            continue
        quota = check_quota(book, cyc.held, job, model)
        if quota and quota[0] != reasons.BORROW or unplaceable and cyc.ledger.free(model) >= job.need_milli:
            continue
        # Short on the pool (free + what preempted jobs will release) or on the cohort's guarantees.
        cohort_short = compute_cohort_shortfall(book, cyc.settled, job, model)
        shortfall = max(job.need_milli - max(cyc.ledger.free(model), 0) - cyc.ledger.incoming(model), cohort_short)
        if shortfall <= 0:
            _hold_for(cyc, job, model)
            return f"waiting for preempted jobs to release {model} GPUs"
        q = book.get(job.tenant)
        reclaim = bool(book.quotas) and not is_borrowing(cyc.settled, q, model, job.need_milli)
        kind = RECLAIM if reclaim else RANK if cyc.policy.preempt and cohort_short <= 0 else ""
        if not kind or cyc.failed_need.get((model, kind), 1 << 62) <= job.need_milli:
            continue
        victims = _select(cyc, job, model, kind, shortfall, _candidates(cyc, kind, model))
        if victims is None:
            cyc.failed_need[(model, kind)] = job.need_milli
            continue
        cyc.preempt.extend(Preemption(v.job.id, job.id, kind) for v in victims)
        for v in victims:  # what they free beyond this job's need is there for the jobs after it
            cyc.ledger.release(v.model, v.job.need_milli)
        _hold_for(cyc, job, model)
        return f"preempting {len(victims)} job(s) ({kind})"
    return ""


def _select(
    cyc: _Cycle, job: QueuedJob, model: str, kind: str, shortfall_milli: int, candidates: Sequence[RunningJob]
) -> list[RunningJob] | None:
    """select_victims with this cycle's state and the policy's rules for `kind`."""
    q = cyc.state.quotas.get(job.tenant)
    return select_victims(
        job,
        model,
        shortfall_milli,
        candidates,
        cyc.taken,
        cyc.settled,
        cyc.state.quotas,
        kind,
        cyc.ranks.get(job.id),
        cyc.rank_of if cyc.policy.preempt else None,
        cyc.now_s,
        0.0 if kind == RECLAIM else cyc.policy.min_run_s,
        q.cohort if q else "",
        cyc.shielded,
        cyc.in_share,
    )


def _preempt_kind(cyc: _Cycle, job: QueuedJob, model: str) -> str:
    """How `job` may take GPUs of `model` from running jobs: reclaim (within its guarantee), rank (the
    policy time-slices), or "" (it may not)."""
    book = cyc.state.quotas
    q = book.get(job.tenant)
    if book.quotas and not is_borrowing(cyc.settled, q, model, job.need_milli):
        return RECLAIM
    cohort_short = compute_cohort_shortfall(book, cyc.settled, job, model)
    return RANK if cyc.policy.preempt and cohort_short <= 0 else ""


NO_NODES = ("", "")  # _make_room found no node open to the job (all kept for others, or none of its model)


def _make_room(cyc: _Cycle, job: QueuedJob, reason: str, detail: str) -> tuple[str, str] | None:
    """Nodes for a job that fragmentation blocks (node_room.py): on each matching model within its quotas,
    the nodes closest to holding a part, preempting the lowest-ranked jobs there when the policy allows;
    failing that, the closest nodes are kept for it to drain. The nodes are held for the rest of the cycle."""
    req = job.to_request()
    book = cyc.state.quotas
    drain: tuple[str, list[str]] | None = None
    tried_nodes = False
    for model in cyc.ledger.models():
        if not job.matches(model):
            continue
        quota = check_quota(book, cyc.held, job, model)
        if quota and quota[0] != reasons.BORROW:
            continue
        rows = rank_nodes(cyc.ledger.whole_free(model, req.gpus), cyc.node_index, model, job, req.gpus)
        if len(rows) < job.nodes:
            continue
        kind = _preempt_kind(cyc, job, model)
        if quota and kind != RECLAIM:
            continue  # its cohort has no idle guarantee to lend: room on a node would not let it start
        # A reclaim that no node can serve falls back to counting GPUs (the guarantee comes first): the GPUs
        # its victims free elsewhere are room that jobs can move into from a node, in a later cycle.
        tried_nodes = tried_nodes or kind != RECLAIM
        chosen: list[str] = []
        victims: list[tuple[RunningJob, str]] = []
        claimed = 0  # GPUs that exiting jobs release on the chosen nodes, counted on by this job
        tried = 0
        for name, free, avail in rows:
            if len(chosen) == job.nodes:
                break
            short = req.gpus - avail
            if short <= 0:
                chosen.append(name)
                claimed += max(req.gpus - free, 0)
                continue
            if not kind and not cyc.policy.preempt or tried >= MAX_VICTIM_NODES:
                break  # rows come closest first: the rest need victims too
            tried += 1
            got = None
            if kind:
                got = _select(cyc, job, model, kind, short * FULL_GPU_MILLI, _node_candidates(cyc, kind, model, name))
            if got is not None:
                victims += [(v, kind) for v in got]
            elif cyc.policy.preempt and cyc.ledger.free(model) >= (free + short) * FULL_GPU_MILLI:
                moved = _move_off(cyc, job, model, name, short, kind)
                if moved is None:
                    continue
                victims += [(v, DEFRAG) for v in moved]
            else:
                continue
            chosen.append(name)
            claimed += avail - free
        if len(chosen) < job.nodes or not victims and not claimed:
            # Not enough nodes, or nothing there is leaving for it (only draining would help): take nothing.
            for v, k in victims:
                cyc.taken.discard(v.job.id)
                if k != DEFRAG:
                    add_usage(cyc.settled, v.job.tenant, model, v.job.need_milli)
            cyc.ledger.unhold_nodes(model, chosen)
            if drain is None and cyc.policy.drain_nodes and not cyc.policy.preempt:
                ages = sorted(
                    (cyc.node_index.drain_age(name, model, req.gpus - avail, cyc.now_s), i, name)
                    for i, (name, _, avail) in enumerate(rows)
                )
                drain = (model, [name for _, _, name in ages[: job.nodes]])
            continue
        cyc.ledger.unhold_nodes(model, chosen)  # those _move_off held, held again with what they claim
        cyc.ledger.hold_nodes(model, chosen, claimed * FULL_GPU_MILLI)
        where = ", ".join(chosen)
        if victims:
            cyc.preempt.extend(Preemption(v.job.id, job.id, k) for v, k in victims)
            kinds = ", ".join(sorted({k for _, k in victims}))
            detail = f"preempting {len(victims)} job(s) ({kinds}) on {where}"
        elif any(cyc.node_index.exiting_for(n, job.id) for n in chosen):
            detail = f"waiting for preempted jobs to release {where}"
        else:
            return reason, f"{detail}; {where} kept for it: waiting for jobs there to end"
        cyc.waiting.append(job.id)
        add_usage(cyc.held, job.tenant, model, job.need_milli)
        add_usage(cyc.settled, job.tenant, model, job.need_milli)
        return reasons.PREEMPTING, detail
    if drain is None:
        # A time-slicing policy frees nodes by preempting and moving jobs; holding a node idle while it
        # drains costs it more than it gains (Philly MIX1: same JCT, lowest tenant-hour 0.90 against 0.92).
        return None if tried_nodes else NO_NODES
    cyc.ledger.hold_nodes(*drain)
    return reason, f"{detail}; {', '.join(drain[1])} kept for it: waiting for jobs there to end"


def _hold_for(cyc: _Cycle, job: QueuedJob, model: str) -> None:
    """Reserve GPUs for a job that waits on preemption (free ones now, the rest as victims exit) and count
    them as its tenant's for the rest of the cycle: its tenant's later jobs see the guarantee (and maximum)
    it is about to use, so they neither reclaim beyond the guarantee nor start above the maximum."""
    cyc.ledger.reserve(job, model)
    cyc.waiting.append(job.id)
    add_usage(cyc.held, job.tenant, model, job.need_milli)
    add_usage(cyc.settled, job.tenant, model, job.need_milli)


def _candidates(cyc: _Cycle, kind: str, model: str) -> Sequence[RunningJob]:
    key = (kind, model)
    order = cyc.orders.get(key)
    if order is None:
        running = [r for r in cyc.state.running if r.model == model]
        order = order_reclaim_candidates(running) if kind == RECLAIM else order_rank_candidates(running, cyc.rank_of)
        cyc.orders[key] = order
    start = cyc.order_starts.get(key, 0)
    while start < len(order) and order[start].job.id in cyc.taken:
        start += 1
    cyc.order_starts[key] = start
    return order[start:] if start else order


def _move_off(cyc: _Cycle, job: QueuedJob, model: str, node: str, short: int, kind: str) -> list[RunningJob] | None:
    """Defragmentation: jobs on `node` that fit elsewhere right now, freeing `short` GPUs there (lowest-ranked
    first; a move costs a job its grace and restart time only, as it keeps its progress and its place in line);
    their new room is kept for them this cycle. None (nothing kept) when they cannot. Which jobs may move:
    _may_move."""
    cyc.ledger.hold_nodes(model, [node])
    moved: list[RunningJob] = []
    freed = 0
    for r in _node_candidates(cyc, RANK, model, node):
        if freed >= short:
            break
        if r.job.id in cyc.taken or r.job.nodes > 1 or cyc.now_s - r.start_s < cyc.policy.min_run_s:
            continue
        if _may_move(cyc, job, r, kind) and cyc.ledger.keep_spot(r.job):
            moved.append(r)
            freed += sum(len(gpus) for name, gpus in r.parts if name == node)
    if freed < short:
        cyc.ledger.unhold_nodes(model, [node])
        return None  # the spots kept stay kept until the cycle ends: a little room lost for one cycle
    cyc.taken.update(r.job.id for r in moved)
    return moved


# Another tenant's job is moved (not for a reclaim) only once it has run this long since it (re)started: a
# tenant that keeps submitting wide jobs costs another tenant's job a grace period and a restart at most once per
# 10 minutes (a few % of its time), not once per cycle. (Philly MIX1, corral: JCT 300.5 s against 303.8 s
# without the limit, 14.6k preemptions against 19.9k; a rank condition on top cost las 4 s of JCT.)
DEFRAG_SETTLE_S = 600.0


def _may_move(cyc: _Cycle, job: QueuedJob, r: RunningJob, kind: str) -> bool:
    """A job of the waiting job's own tenant may always be moved for it; another tenant's for a job within its
    guarantee (a reclaim), or once it has run DEFRAG_SETTLE_S."""
    # (A reclaim moves even a job that just restarted: the guarantee comes first. Only when the moved job's
    # tenant borrows, on Philly MIX1, cost corral 4 s of JCT and its lowest tenant-hour fell 0.947 -> 0.899.)
    return r.job.tenant == job.tenant or kind == RECLAIM or cyc.now_s - r.start_s >= DEFRAG_SETTLE_S


def _node_candidates(cyc: _Cycle, kind: str, model: str, node: str) -> Sequence[RunningJob]:
    return cyc.node_index.candidates((kind, model), node, lambda: _candidates(cyc, kind, model))


def _reserve(cyc: _Cycle, job: QueuedJob) -> None:
    free = {m: cyc.ledger.free(m) for m in cyc.ledger.models()}
    res = compute_reservation(job, cyc.ledger.models(), free, cyc.state.running, cyc.now_s)
    if res is not None:
        cyc.reservations.append(res)


def _explain(cyc: _Cycle, statuses: list[tuple[QueuedJob, str, str]]) -> dict[str, reasons.PendingStatus]:
    """Reasons, positions and ETAs in rank order; a job waiting only on higher-ranked work says so."""
    free = {m: cyc.ledger.free(m) for m in cyc.ledger.models()}
    predicted = compute_predicted_ends(cyc.state.running, cyc.now_s) if cyc.policy.order == "predict" else None
    eta = EtaEstimator(free, cyc.state.running, cyc.now_s, predicted)
    out: dict[str, reasons.PendingStatus] = {}
    ends: dict[str, float] = {}  # per model, when its last job being preempted must be gone
    for r in cyc.state.running:
        if r.terminating:
            ends[r.model] = max(ends.get(r.model, cyc.now_s), r.expected_end_s or cyc.now_s)
    tenant_of = {r.job.id: r.job.tenant for r in cyc.state.running}
    # where GPUs are free, per set of models: the ledger does not change while explaining, and 10,000 jobs waiting
    # on 1,000 nodes merged and sorted the same node list once each (seconds of a cycle)
    free_by_models: dict[tuple[str, ...], tuple[tuple[str, int], ...]] = {}
    for pos, (job, reason, detail) in enumerate(statuses):
        models = [m for m in cyc.ledger.models() if job.matches(m)]
        when: float | None = None
        freed_by: tuple[str, bool] | None = None
        if reason == reasons.PREEMPTING:
            when = max((ends[m] for m in models if m in ends), default=cyc.now_s)
        elif reason != reasons.MODEL and models:
            when, freed_by = eta.estimate_why(models[0], job.need_milli)
            if freed_by is not None and tenant_of.get(freed_by[0]) != job.tenant:
                freed_by = ("", freed_by[1])  # another tenant's job: when, not which (its id is not this user's)
        facts = _wait_facts(cyc, job, models, reason, pos, when, freed_by, free_by_models)
        text = wording.compute_wait_sentence(reason, detail, job, facts)
        out[job.id] = reasons.PendingStatus(reason, detail or reasons.DESCRIPTIONS.get(reason, ""), pos, when, text)
    return out


def _wait_facts(
    cyc: _Cycle,
    job: QueuedJob,
    models: list[str],
    reason: str,
    pos: int,
    when: float | None,
    freed_by: tuple[str, bool] | None,
    free_by_models: dict[tuple[str, ...], tuple[tuple[str, int], ...]],
) -> wording.WaitFacts:
    """Where GPUs of the job's models are free now (only asked for jobs waiting on capacity). `free_by_models`
    keeps what was merged for a set of models while the ledger stays as it is."""
    free_by_node: tuple[tuple[str, int], ...] | None = None
    free_gpus = 0.0
    if reason in (reasons.CAPACITY, reasons.GANG):
        if cyc.ledger.knows_nodes:
            key = tuple(models)
            free_by_node = free_by_models.get(key)
            if free_by_node is None:
                free_by_node = free_by_models[key] = wording.merge_free_by_node(
                    [cyc.ledger.whole_free(m, 1) for m in models]
                )
        else:
            free_gpus = sum(max(cyc.ledger.free(m), 0) for m in models) / 1000
    return wording.WaitFacts(cyc.now_s, free_by_node, free_gpus, when, freed_by, pos)


__all__ = ["Admission", "AdmissionPlan", "QueueState", "compute_admission", "with_attained", "TOTAL"]
