"""Telemetry ingest on the server: an agent's batch, within its node's budget, stored as time series; each
running job's GPU usage summary kept up to date; the latest batch per node kept for live views and alerts.

load (node's running jobs) -> compute (pure, corral.core.telemetry: series, budget, summaries) -> apply (store).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from typing import Any

from corral.core.errors import ValidationError
from corral.core.telemetry import (
    HostSample,
    IngestBudget,
    JobGpuSummary,
    TelemetryBatch,
    compute_batch_size,
    compute_gpu_series,
    compute_host_series,
    compute_ingest,
    merge_job_gpu_summary,
)
from corral.store.protocols import TelemetryStore
from corral.store.records import Job
from corral.store.telemetry import HOST_GPU, Point


def compute_host_points(node: str, host: HostSample, prev: HostSample | None) -> list[Point]:
    """Host series, plus network and disk rates from the counters' change since the previous sample."""
    points = [Point(host.ts, node, HOST_GPU, m, v) for m, v in compute_host_series(host).items()]
    if prev is not None and host.ts > prev.ts:
        dt = host.ts - prev.ts
        for metric, now_v, old_v in (
            ("host_net_rx_bytes_s", host.net_rx_bytes, prev.net_rx_bytes),
            ("host_net_tx_bytes_s", host.net_tx_bytes, prev.net_tx_bytes),
            ("host_disk_read_bytes_s", host.disk_read_bytes, prev.disk_read_bytes),
            ("host_disk_write_bytes_s", host.disk_write_bytes, prev.disk_write_bytes),
        ):
            if now_v >= old_v:  # a counter reset (reboot) gives no rate rather than a negative one
                points.append(Point(host.ts, node, HOST_GPU, metric, (now_v - old_v) / dt))
    return points


def compute_batch_points(batch: TelemetryBatch, prev: TelemetryBatch | None, jobs: Sequence[Job]) -> list[Point]:
    """Every point a batch stores: host series and rates, and each GPU's series labelled with the job on it."""
    node = batch.node
    owner = {i: j for j in jobs for i in j.gpus_on(node)}
    points = compute_host_points(node, batch.host, prev.host if prev else None) if batch.host else []
    for sample in batch.gpus:
        job = owner.get(sample.index)
        points += [
            Point(sample.ts, node, sample.index, m, v, job.id if job else None)
            for m, v in compute_gpu_series(sample).items()
        ]
    return points


def summary_to_dict(s: JobGpuSummary) -> dict[str, Any]:
    return {
        "samples": s.samples,
        "utilization_avg_pct": s.utilization_avg,
        "utilization_max_pct": s.utilization_max,
        "idle_fraction": s.idle_fraction,
        "memory_used_max_mib": s.memory_used_max_mib,
        "power_w_avg": s.power_w_avg,
        "first_ts": s.first_ts,
        "last_ts": s.last_ts,
        "_raw": dataclasses.asdict(s),
    }


def summary_from_dict(d: dict[str, Any]) -> JobGpuSummary:
    raw = d.get("_raw")
    return JobGpuSummary(**raw) if isinstance(raw, dict) else JobGpuSummary()


class TelemetryIngest:
    """Thread-safe. Each node may send `rate_per_s` samples a second on average, ten seconds' worth at once."""

    def __init__(self, store: TelemetryStore, rate_per_s: float = 2000.0) -> None:
        self.store = store
        self.rate_per_s = rate_per_s
        self.samples_ingested = 0
        self.samples_rejected = 0
        self._lock = threading.Lock()
        self._latest: dict[str, TelemetryBatch] = {}
        self._budgets: dict[str, IngestBudget] = {}
        self._summaries: dict[int, tuple[str, JobGpuSummary]] = {}  # job -> (node that last reported, summary)
        self._summary_lock = threading.Lock()

    def check_budget(self, batch: TelemetryBatch, now: float) -> None:
        """Take the batch's cost from its node's budget. Raises ValidationError when the node sends too much."""
        cost = compute_batch_size(batch)
        with self._lock:
            budget = self._budgets.get(batch.node) or IngestBudget.full(self.rate_per_s, self.rate_per_s * 10, now)
            self._budgets[batch.node], ok = compute_ingest(budget, cost, now)
            if not ok:
                self.samples_rejected += cost
        if not ok:
            raise ValidationError("batch", f"node {batch.node} sends more than {self.rate_per_s:g} samples/s")

    def store_batch(self, batch: TelemetryBatch, jobs: Sequence[Job]) -> int:
        """Store the batch's series and fold its samples into the running jobs' summaries; returns points stored."""
        with self._lock:
            prev = self._latest.get(batch.node)
            self._latest[batch.node] = batch
        stored = self.store.insert_points(compute_batch_points(batch, prev, jobs))
        with self._lock:
            self.samples_ingested += stored
        self._update_job_summaries(jobs, batch)
        return stored

    def _update_job_summaries(self, jobs: Sequence[Job], batch: TelemetryBatch) -> None:
        node = batch.node
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

    def remember(self, batch: TelemetryBatch, stored: int) -> None:
        """A batch another process of this server received and stored (CORRAL_WORKERS): the node's latest unless a
        newer one is here already; its points count as ingested."""
        with self._lock:
            current = self._latest.get(batch.node)
            if current is None or current.ts <= batch.ts:
                self._latest[batch.node] = batch
            self.samples_ingested += stored

    def latest(self) -> dict[str, TelemetryBatch]:
        """node -> the last batch it sent (since this server started)."""
        with self._lock:
            return dict(self._latest)
