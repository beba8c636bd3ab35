"""The scheduling loop: load a snapshot, run the pure scheduler per pending job, apply guarded.

load -> compute (pure, corral.scheduler) -> apply (store compare-and-set) -> notify agents.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from datetime import UTC, datetime, timedelta

from corral.core.requests import ResourceRequest
from corral.core.states import JobState
from corral.scheduler.cycle import Unschedulable, apply_placement, compute_placement
from corral.server.services.notify import NodeNotifier, Trigger
from corral.server.services.recovery import requeue_after_failure
from corral.server.services.snapshot import compute_snapshot
from corral.store.base import StateStore
from corral.store.records import Job

log = logging.getLogger("corral.scheduler")


def request_of(job: Job) -> ResourceRequest:
    s = job.spec
    return ResourceRequest(gpus=s.gpus, gpu_milli=s.gpu_milli, gpu_models=s.gpu_models,
                           min_gpu_memory_mib=s.min_gpu_memory_mib, cpu_milli=s.cpu_milli, memory_mib=s.memory_mib)


class Scheduler:
    """Runs scheduling passes on its own thread; `trigger` asks for one soon."""

    def __init__(self, store: StateStore, notifier: NodeNotifier, policy: str, interval_s: float,
                 node_lost_after_s: float = 60.0, retry_backoff_s: float = 1.0) -> None:
        self.store = store
        self.notifier = notifier
        self.policy = policy
        self.interval_s = interval_s
        self.node_lost_after_s = node_lost_after_s
        self.retry_backoff_s = retry_backoff_s
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

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once(datetime.now(UTC))
            except Exception:  # a failed pass is logged and retried; the loop must survive
                log.exception("scheduling pass failed")
            self.trigger.wait(self.interval_s)

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
        """One pass: place pending jobs in priority-then-age order. Returns the ids placed."""
        with self._lock:
            self.reconcile_lost_nodes(now)
            pending = self.store.list_jobs(states=[JobState.PENDING])
            if not pending:
                self.pending_reasons.clear()
                return []
            nodes = self.store.list_nodes()
            running = self.store.list_jobs(states=[JobState.RUNNING])
            snapshot = compute_snapshot(nodes, running)
            placed: list[int] = []
            reasons: dict[int, str] = {}
            for job in sorted(pending, key=lambda j: (-j.spec.priority, j.id)):
                if job.not_before is not None and job.not_before > now:
                    reasons[job.id] = f"retry backoff until {job.not_before:%H:%M:%S} ({job.reason})"
                    continue
                result = compute_placement(request_of(job), snapshot, self.policy)
                if isinstance(result, Unschedulable):
                    reasons[job.id] = result.reason
                    continue
                if self.store.assign_job(job.id, result.node, result.gpu_indices, now):
                    apply_placement(snapshot, result)
                    placed.append(job.id)
                    self._latencies.append(max((now - job.created_at).total_seconds(), 0.0))
                    self.notifier.notify(result.node)
            self.pending_reasons = reasons
            return placed
