"""Telemetry on the server: store agents' batches as time series, run the GPU health checks, take a failed
GPU out of the pool and requeue its jobs, keep each job's GPU usage summary, relay simulated faults.

load (node, running jobs) -> compute (pure: series, health) -> apply (store, events, requeues).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from corral.api.schemas import SimFaultCommand
from corral.core.errors import NotFoundError, ValidationError
from corral.core.health import GpuHealth, GpuHealthState, HealthPolicy, NodeHealthState, apply_admin_enable, compute_health
from corral.core.telemetry import (
    HostSample, IngestBudget, JobGpuSummary, TelemetryBatch, batch_from_dict, compute_batch_size, compute_gpu_series,
    compute_host_series, compute_ingest, merge_job_gpu_summary,
)
from corral.server.services.recovery import requeue_after_failure
from corral.store.records import Job, Node
from corral.store.sql import SqlStore
from corral.store.telemetry import HOST_GPU, Point


@dataclass(frozen=True, slots=True)
class IngestResult:
    stored: int
    transitions: int
    capacity_changed: bool


def compute_host_points(node: str, host: HostSample, prev: HostSample | None) -> list[Point]:
    """Host series, plus network and disk rates from the counters' change since the previous sample."""
    points = [Point(host.ts, node, HOST_GPU, m, v) for m, v in compute_host_series(host).items()]
    if prev is not None and host.ts > prev.ts:
        dt = host.ts - prev.ts
        for metric, now_v, old_v in (("host_net_rx_bytes_s", host.net_rx_bytes, prev.net_rx_bytes),
                                     ("host_net_tx_bytes_s", host.net_tx_bytes, prev.net_tx_bytes),
                                     ("host_disk_read_bytes_s", host.disk_read_bytes, prev.disk_read_bytes),
                                     ("host_disk_write_bytes_s", host.disk_write_bytes, prev.disk_write_bytes)):
            if now_v >= old_v:  # a counter reset (reboot) gives no rate rather than a negative one
                points.append(Point(host.ts, node, HOST_GPU, metric, (now_v - old_v) / dt))
    return points


def summary_to_dict(s: JobGpuSummary) -> dict[str, Any]:
    return {"samples": s.samples, "utilization_avg_pct": s.utilization_avg, "utilization_max_pct": s.utilization_max,
            "idle_fraction": s.idle_fraction, "memory_used_max_mib": s.memory_used_max_mib,
            "power_w_avg": s.power_w_avg, "first_ts": s.first_ts, "last_ts": s.last_ts,
            "_raw": dataclasses.asdict(s)}


def summary_from_dict(d: dict[str, Any]) -> JobGpuSummary:
    raw = d.get("_raw")
    return JobGpuSummary(**raw) if isinstance(raw, dict) else JobGpuSummary()


class TelemetryService:
    """Thread-safe. `policy` decides what a failure is; `backoff_s` is the retry backoff base."""

    def __init__(self, store: SqlStore, policy: HealthPolicy | None = None, *, backoff_s: float = 1.0,
                 ingest_rate_per_s: float = 2000.0, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.policy = policy or HealthPolicy()
        self.backoff_s = backoff_s
        self.ingest_rate_per_s = ingest_rate_per_s
        self.clock = clock
        self.samples_ingested = 0
        self.samples_rejected = 0
        self._lock = threading.Lock()
        self._health: dict[str, NodeHealthState] = {}
        self._latest: dict[str, TelemetryBatch] = {}
        self._budgets: dict[str, IngestBudget] = {}
        self._faults: dict[str, list[SimFaultCommand]] = {}
        self._summaries: dict[int, tuple[str, JobGpuSummary]] = {}  # job -> (node that last reported, summary)
        self._summary_lock = threading.Lock()

    # ---- ingest ---------------------------------------------------------------------
    def ingest(self, node_name: str, data: dict[str, Any]) -> IngestResult:
        node = self.store.get_node(node_name)
        if node is None:
            raise NotFoundError("node", node_name)
        batch = batch_from_dict(data)
        if batch.node != node_name:
            raise ValidationError("node", f"batch is for node {batch.node!r}, sent as {node_name!r}")
        if not self._take_budget(node_name, compute_batch_size(batch)):
            raise ValidationError("batch", f"node {node_name} sends more than {self.ingest_rate_per_s:g} samples/s")
        jobs = self.store.list_node_jobs(node_name)
        owner = {i: j for j in jobs for i in j.gpus_on(node_name)}
        with self._lock:
            prev = self._latest.get(node_name)
            self._latest[node_name] = batch
        points = compute_host_points(node_name, batch.host, prev.host if prev else None) if batch.host else []
        for sample in batch.gpus:
            job = owner.get(sample.index)
            points += [Point(sample.ts, node_name, sample.index, m, v, job.id if job else None)
                       for m, v in compute_gpu_series(sample).items()]
        stored = self.store.insert_points(points)
        self.samples_ingested += stored
        self._update_job_summaries(jobs, batch, node_name)
        transitions, changed = self._check_health(node, batch, jobs)
        return IngestResult(stored, transitions, changed)

    def _take_budget(self, node: str, cost: int) -> bool:
        now = self.clock()
        with self._lock:
            budget = self._budgets.get(node) or IngestBudget.full(self.ingest_rate_per_s, self.ingest_rate_per_s * 10, now)
            self._budgets[node], ok = compute_ingest(budget, cost, now)
        if not ok:
            self.samples_rejected += cost
        return ok

    def _update_job_summaries(self, jobs: list[Job], batch: TelemetryBatch, node: str) -> None:
        by_gpu = {s.index: s for s in batch.gpus}
        running = {j.id for j in jobs}
        # Summaries stay in memory between batches (read from the store once, e.g. after a restart): one write
        # a batch instead of a read and a write. The lock keeps a gang's nodes from losing each other's samples;
        # a job is forgotten once the node that last reported it no longer runs it (the store keeps it).
        with self._summary_lock:
            for job_id in [k for k, (n, _) in self._summaries.items() if n == node and k not in running]:
                del self._summaries[job_id]
            for job in jobs:
                samples = [by_gpu[i] for i in job.gpus_on(node) if i in by_gpu]
                if not samples:
                    continue
                cached = self._summaries.get(job.id)
                old = cached[1] if cached else summary_from_dict(self.store.get_job_gpu_summary(job.id))
                new = merge_job_gpu_summary(old, samples)
                self._summaries[job.id] = (node, new)
                self.store.set_job_gpu_summary(job.id, summary_to_dict(new))

    # ---- health ---------------------------------------------------------------------
    def _state_for(self, node: Node, now: float) -> NodeHealthState:
        """The node's health state; built from the store on first use (a restart keeps failed GPUs out)."""
        indices = tuple(g.index for g in node.gpus)
        state = self._health.get(node.name)
        if state is None or tuple(g.index for g in state.gpus) != indices:
            status = {s.index: s for s in node.gpu_status}
            gpus = tuple(GpuHealthState(i, since=now) if status.get(i) is None or status[i].healthy else
                         GpuHealthState(i, health=GpuHealth.UNHEALTHY, reason=status[i].reason, since=now)
                         for i in indices)
            state = NodeHealthState(len(indices), gpus)
        return state

    def _check_health(self, node: Node, batch: TelemetryBatch, jobs: list[Job]) -> tuple[int, bool]:
        with self._lock:
            state = self._state_for(node, batch.ts)
            state, transitions = compute_health(state, batch.gpus, batch.events, batch.gpu_count, batch.ts, self.policy)
            self._health[node.name] = state
        now = datetime.fromtimestamp(batch.ts, UTC)
        changed = False
        for t in transitions:
            if t.gpu_index is None:  # "N-1 GPUs": a node-level event; the missing GPU fails on its own
                self.store.add_node_event(node.name, None, "gpu_count", t.detail, now)
                continue
            healthy = t.new is GpuHealth.HEALTHY
            changed |= self.store.set_gpu_health(node.name, t.gpu_index, healthy, t.reason)
            kind = "gpu_healthy" if healthy else "gpu_unhealthy"
            self.store.add_node_event(node.name, t.gpu_index, kind, f"{t.reason}: {t.detail}".strip(": "), now)
            if not healthy:
                for job in jobs:
                    if t.gpu_index in job.gpus_on(node.name):
                        reason = f"GPU {t.gpu_index} on {node.name} failed ({t.reason}: {t.detail})"
                        requeue_after_failure(self.store, job, reason, now, self.backoff_s)
                        self.store.add_event(job.id, "gpu_failed", reason, now)
                        changed = True
        return len(transitions), changed

    def admin_enable(self, node: str, index: int) -> None:
        with self._lock:
            state = self._health.get(node)
            if state is not None:
                try:
                    self._health[node], _ = apply_admin_enable(state, index, self.clock())
                except KeyError:
                    pass

    def unhealthy(self) -> dict[str, dict[int, str]]:
        """node -> {GPU index: reason} for GPUs the checks hold UNHEALTHY now."""
        with self._lock:
            return {n: {g.index: g.reason for g in s.gpus if g.health is GpuHealth.UNHEALTHY}
                    for n, s in self._health.items()}

    # ---- latest values and faults -----------------------------------------------------
    def latest(self) -> dict[str, TelemetryBatch]:
        with self._lock:
            return dict(self._latest)

    def request_fault(self, node_name: str, cmd: SimFaultCommand) -> None:
        """Queue a simulated fault for the node's agent. Refused for nodes with real GPUs."""
        node = self.store.get_node(node_name)
        if node is None:
            raise NotFoundError("node", node_name)
        if node.backend != "simulated":
            raise ValidationError("node", f"node {node_name} has real GPUs ({node.backend}); faults can only be "
                                          "injected into simulated GPUs")
        if cmd.gpu_index not in {g.index for g in node.gpus}:
            raise ValidationError("gpu_index", f"node {node_name} has no GPU {cmd.gpu_index}")
        with self._lock:
            self._faults.setdefault(node_name, []).append(cmd)

    def take_faults(self, node_name: str) -> list[SimFaultCommand]:
        with self._lock:
            return self._faults.pop(node_name, [])
