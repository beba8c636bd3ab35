"""The scheduling loop: load a snapshot, let the pure queueing core admit and preempt, place, apply guarded.

load -> compute (pure: corral.scheduler.queueing, corral.scheduler) -> apply (store compare-and-set) -> notify.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from corral.core.requests import ResourceRequest
from corral.core.resources import NodeState
from corral.core.states import JobState
from corral.scheduler.cycle import Unschedulable, apply_placement, compute_placement
from corral.scheduler.gang import compute_gang_placement
from corral.scheduler.queueing import compute_admission, compute_decayed_usage, get_queueing_policy
from corral.scheduler.queueing.node_capacity import NodeLedger
from corral.server.services.notify import NodeNotifier, Trigger
from corral.server.services.queue_state import compute_queue_state, compute_running_job
from corral.server.services.recovery import requeue_after_failure
from corral.server.services.snapshot import compute_snapshot
from corral.store.base import StateStore
from corral.store.records import Job, Tenant

log = logging.getLogger("corral.scheduler")
USAGE_SAVE_EVERY_S = 30.0  # fair share's history is written this often (and on stop), read back on start


def request_of(job: Job) -> ResourceRequest:
    s = job.spec
    return ResourceRequest(gpus=s.gpus, gpu_milli=s.gpu_milli, gpu_models=s.gpu_models,
                           min_gpu_memory_mib=s.min_gpu_memory_mib, cpu_milli=s.cpu_milli, memory_mib=s.memory_mib)


class Scheduler:
    """Runs scheduling passes on its own thread; `trigger` asks for one soon."""

    def __init__(self, store: StateStore, notifier: NodeNotifier, policy: str, interval_s: float,
                 node_lost_after_s: float = 60.0, retry_backoff_s: float = 1.0, queueing: str | None = None,
                 cancel_grace_s: float = 10.0) -> None:
        self.store = store
        self.notifier = notifier
        self.policy = policy
        self.interval_s = interval_s
        self.node_lost_after_s = node_lost_after_s
        self.retry_backoff_s = retry_backoff_s
        self.queueing = get_queueing_policy(queueing)
        self.cancel_grace_s = cancel_grace_s
        self.pending_info: dict[int, tuple[int, datetime | None]] = {}  # job id -> (queue position, ETA)
        self._usage: dict[str, float] = {}
        self._usage_at: datetime | None = None
        self._usage_loaded = False
        self._usage_saved_at: datetime | None = None
        # job id -> when running jobs were first preempted for it: it gets the freed GPUs first
        self._nominated: dict[int, float] = {}
        self.trigger = Trigger()
        self.pending_reasons: dict[int, str] = {}
        self._latencies: deque[float] = deque(maxlen=10_000)  # submit -> placement, seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="corral-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.trigger.fire()
        if self._thread:
            self._thread.join(timeout=10)
        try:
            self._save_usage()
        except Exception:  # the store may be gone already; at most USAGE_SAVE_EVERY_S of history is lost
            log.exception("could not save fair-share usage")

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once(datetime.now(UTC))
            except Exception:  # a failed pass is logged and retried; the loop must survive
                log.exception("scheduling pass failed")
            self.trigger.wait(self.interval_s)

    @property
    def usage_gpu_s(self) -> dict[str, float]:
        """Fair share's history: decayed GPU-seconds per tenant name, as of the last pass."""
        return dict(self._usage)

    def latencies_s(self) -> list[float]:
        """Recent submit-to-placement latencies (for the scheduling-latency histogram)."""
        return list(self._latencies)

    def reconcile_lost_nodes(self, now: datetime) -> list[str]:
        """Nodes silent for longer than node_lost_after_s become LOST; their jobs go back to the queue
        (a job whose cancel was already requested ends CANCELLED instead)."""
        lost = self.store.mark_nodes_lost(now - timedelta(seconds=self.node_lost_after_s))
        for name in lost:
            log.warning("node %s lost: no heartbeat for %.0f s", name, self.node_lost_after_s)
            self.store.add_node_event(name, None, "lost", f"no heartbeat for {self.node_lost_after_s:g} s", now)
            for job in self.store.list_node_jobs(name):
                requeue_after_failure(self.store, job, f"node {name} lost", now, self.retry_backoff_s)
        return lost

    def run_once(self, now: datetime) -> list[int]:
        """One pass: the queueing core decides what starts and what is preempted (quotas, fair share, gang,
        backfill); each admitted job is then placed with its full request on the snapshot (the plan is
        verified with the same pure fit, Nomad-style) and applied compare-and-set. Returns the ids placed."""
        with self._lock:
            self.reconcile_lost_nodes(now)
            pending = self.store.list_jobs(states=[JobState.PENDING])
            running = self.store.list_jobs(states=[JobState.RUNNING])
            tenants = self.store.list_tenants()
            self._update_usage(running, tenants, now)
            if not pending:
                self.pending_reasons, self.pending_info = {}, {}
                return []
            # Jobs in retry backoff wait; jobs without GPUs use no quota and hold no GPUs: they are placed
            # directly, oldest first; the rest go through the queueing core.
            waiting: list[Job] = []
            cpu_only: list[Job] = []
            ready: list[Job] = []
            for j in pending:
                if j.not_before is not None and j.not_before > now:
                    waiting.append(j)
                else:
                    (ready if j.spec.gpus > 0 else cpu_only).append(j)
            nodes = self.store.list_nodes()
            snapshot = compute_snapshot(nodes, running)
            state = compute_queue_state(ready, running, nodes, tenants, self.store.list_quotas(),
                                        self.store.list_queues(), self._usage, now, self.cancel_grace_s,
                                        self._nominated)
            ledger = NodeLedger(snapshot, state.running, self.policy)
            plan = compute_admission(state, ledger, self.queueing, now.timestamp())
            by_id = {str(j.id): j for j in ready}
            reasons: dict[int, str] = {}
            info: dict[int, tuple[int, datetime | None]] = {}
            for job in waiting:
                reasons[job.id] = f"retry-backoff: until {job.not_before:%H:%M:%S} ({job.reason})"
            for p in plan.preempt:
                self._preempt(p.job_id, p.for_job_id, p.kind, now)
            # Waiting on GPUs that preempted jobs release (each preemption's beneficiary among them): it keeps its
            # claim on them from the first cycle it was nominated.
            for job_id in plan.nominate:
                self._nominated.setdefault(int(job_id), now.timestamp())
            pending_ids = {j.id for j in pending}
            self._nominated = {k: v for k, v in self._nominated.items() if k in pending_ids}
            placed = [placed_id for j in cpu_only if (placed_id := self._place(j, snapshot, now, reasons))]
            placed += [placed_id for a in plan.admit
                       if (placed_id := self._place(by_id[a.job_id], snapshot, now, reasons, a.model))]
            for job_id, status in plan.pending.items():
                jid = int(job_id)
                reasons.setdefault(jid, f"{status.reason}: {status.detail}" if status.detail else status.reason)
                eta = datetime.fromtimestamp(status.eta_s, UTC) if status.eta_s is not None else None
                info[jid] = (status.position, eta)
            self.pending_reasons, self.pending_info = reasons, info
            return placed

    def _place(self, job: Job, snapshot: list[NodeState], now: datetime, reasons: dict[int, str],
               model: str = "") -> int | None:
        """Place every part with the job's full request (a gang: one part per node, all or none). `model`: the
        GPU model the queueing core admitted it on; a job that allows several (or any) is held to it, so that
        it lands where its tenant's quota was counted (another model's maximum may be reached)."""
        request = request_of(job)
        if model and request.gpus and len(request.gpu_models) != 1:
            request = replace(request, gpu_models=(model,))
        if job.spec.nodes > 1:
            result = compute_gang_placement(request, job.spec.nodes, snapshot, self.policy)
        else:
            single = compute_placement(request, snapshot, self.policy)
            result = single if isinstance(single, Unschedulable) else [single]
        if isinstance(result, Unschedulable):
            reasons[job.id] = f"capacity: {result.reason}"
            return None
        if not self.store.assign_job_parts(job.id, [(p.node, p.gpu_indices) for p in result], now):
            return None
        for p in result:
            apply_placement(snapshot, p)
            self.notifier.notify(p.node)
        self._latencies.append(max((now - job.created_at).total_seconds(), 0.0))
        return job.id

    def _preempt(self, job_id: str, for_job_id: str, kind: str, now: datetime) -> None:
        why = "reclaiming its tenant's guarantee" if kind == "reclaim" else "higher rank (least attained service)"
        job = self.store.get_job(int(job_id))
        if job is not None and self.store.request_preempt(job.id, f"preempted for job {for_job_id}: {why}", now):
            log.info("preempting job %s for job %s (%s)", job_id, for_job_id, kind)
            for node, _ in job.placed_parts:
                self.notifier.notify(node)

    def _update_usage(self, running: list[Job], tenants: list[Tenant], now: datetime) -> None:
        """Decayed GPU-seconds per tenant (fair share's history), advanced to `now`. The history is read from the
        store on the first pass and written back every USAGE_SAVE_EVERY_S: a restart keeps it (the jobs running
        across the gap are counted as having run through it)."""
        names = {t.id: t.name for t in tenants}
        if not self._usage_loaded:
            self._usage_loaded = True
            stored, as_of = self.store.load_usage()
            if as_of is not None and as_of <= now:
                self._usage = {names[t]: v for t, v in stored.items() if t in names}
                self._usage_at = as_of
                self._usage_saved_at = now
        if self._usage_at is not None:
            dt = max((now - self._usage_at).total_seconds(), 0.0)
            held = [compute_running_job(j, names, (), {}, now, 0.0) for j in running]
            self._usage = compute_decayed_usage(self._usage, held, dt, self.queueing.half_life_s)
        self._usage_at = now
        if self._usage_saved_at is None or (now - self._usage_saved_at).total_seconds() >= USAGE_SAVE_EVERY_S:
            self._save_usage(names)

    def _save_usage(self, names: dict[int, str] | None = None) -> None:
        if self._usage_at is None:
            return
        ids = {n: i for i, n in (names or {t.id: t.name for t in self.store.list_tenants()}).items()}
        self.store.save_usage({ids[n]: v for n, v in self._usage.items() if n in ids}, self._usage_at)
        self._usage_saved_at = self._usage_at
