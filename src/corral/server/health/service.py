"""The one entry point for an agent's telemetry: ingest (budget, series, usage), GPU health checked, what a failure
leads to (jobs requeued, scheduler and agent woken), and simulated faults. Routers call `receive` and nothing else.

receive: load (node, its running jobs) -> ingest -> health rules (pure) -> record transitions -> consequences ->
wake (CapacityWaker) once, when usable capacity changed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from corral.api.schemas import SimFaultCommand
from corral.core.errors import NotFoundError, ValidationError
from corral.core.health import HealthPolicy
from corral.core.telemetry import TelemetryBatch, batch_from_dict
from corral.server.health.consequences import CapacityWaker, apply_gpu_failure
from corral.server.health.faults import FaultQueue
from corral.server.health.gpu_health import GpuHealthTracker, apply_transitions
from corral.server.health.ingest import TelemetryIngest
from corral.store.protocols import JobStore, NodeStore, OperationsStore, TelemetryStore


class TelemetryServiceStore(TelemetryStore, OperationsStore, JobStore, NodeStore, Protocol):
    """The store roles the telemetry service uses: series and usage, GPU health and node events, jobs, nodes."""


@dataclass(frozen=True, slots=True)
class IngestResult:
    stored: int  # points stored
    transitions: int  # health transitions the batch caused
    capacity_changed: bool  # a GPU went out or came back, or jobs were requeued (the waker was told)


class TelemetryService:
    """Thread-safe. `policy` decides what a failure is; `backoff_s` is the retry backoff base; `waker` hears of
    every capacity change (the server's wakes the scheduler and the node's agent)."""

    def __init__(
        self,
        store: TelemetryServiceStore,
        policy: HealthPolicy | None = None,
        *,
        backoff_s: float = 1.0,
        ingest_rate_per_s: float = 2000.0,
        clock: Callable[[], float] = time.time,
        waker: CapacityWaker | None = None,
    ) -> None:
        self.store = store
        self.backoff_s = backoff_s
        self.clock = clock
        self.waker = waker
        self.telemetry = TelemetryIngest(store, ingest_rate_per_s)
        self.health = GpuHealthTracker(policy)
        self.faults = FaultQueue(store)
        # Each batch received and stored, with its points' count, handed on (a CORRAL_WORKERS worker hands it to
        # the process that serves people: its /metrics and latest values). Best effort: it must not fail a batch.
        self.forward: Callable[[TelemetryBatch, int], None] | None = None

    @property
    def policy(self) -> HealthPolicy:
        return self.health.policy

    @property
    def ingest_rate_per_s(self) -> float:
        return self.telemetry.rate_per_s

    @property
    def samples_ingested(self) -> int:
        return self.telemetry.samples_ingested

    @property
    def samples_rejected(self) -> int:
        return self.telemetry.samples_rejected

    # ---- one batch ----------------------------------------------------------------------
    def receive(self, node_name: str, batch: TelemetryBatch) -> IngestResult:
        """Take one batch `node_name` sent. Raises NotFoundError (unknown node), ValidationError (a batch for
        another node, or over the node's budget: nothing stored then)."""
        node, jobs = self.store.get_node_with_jobs(node_name)  # one transaction
        if node is None:
            raise NotFoundError("node", node_name)
        if batch.node != node_name:
            raise ValidationError("node", f"batch is for node {batch.node!r}, sent as {node_name!r}")
        self.telemetry.check_budget(batch, self.clock())
        stored = self.telemetry.store_batch(batch, jobs)
        if self.forward is not None:
            self.forward(batch, stored)
        transitions = self.health.check(node, batch)
        now = datetime.fromtimestamp(batch.ts, UTC)
        changed, failed = apply_transitions(self.store, node_name, transitions, now)
        handled: set[int] = set()  # a job on two GPUs that fail together is requeued once
        for t in failed:
            assert t.gpu_index is not None  # apply_transitions returns GPU transitions only
            todo = [j for j in jobs if j.id not in handled]
            outcome = apply_gpu_failure(
                self.store, node_name, t.gpu_index, f"{t.reason}: {t.detail}", todo, now, self.backoff_s
            )
            handled |= outcome.keys()
        changed |= bool(handled)
        if changed and self.waker is not None:
            self.waker.capacity_changed(node_name)
        return IngestResult(stored, len(transitions), changed)

    def ingest(self, node_name: str, data: Mapping[str, Any] | TelemetryBatch) -> IngestResult:
        """`receive`, also for a batch in its wire form (corral.core.telemetry.batch_to_dict)."""
        batch = data if isinstance(data, TelemetryBatch) else batch_from_dict(data)
        return self.receive(node_name, batch)

    # ---- health, latest values, faults ----------------------------------------------------
    def admin_enable(self, node: str, index: int) -> None:
        self.health.admin_enable(node, index, self.clock())

    def standing_failure(self, node: str, index: int) -> str | None:
        """The fault GPU `index` of `node` still shows in its last telemetry (None: none, or no telemetry yet)."""
        return self.health.standing_failure(self.telemetry.latest().get(node), index)

    def unhealthy(self) -> dict[str, dict[int, str]]:
        """node -> {GPU index: reason} for GPUs the checks hold UNHEALTHY now."""
        return self.health.unhealthy()

    def latest(self) -> dict[str, TelemetryBatch]:
        return self.telemetry.latest()

    def remember(self, batch: TelemetryBatch, stored: int) -> None:
        """A batch another process of this server received and stored: its latest values (no health check here:
        the process that received it checks them)."""
        self.telemetry.remember(batch, stored)

    def request_fault(self, node_name: str, cmd: SimFaultCommand) -> None:
        """Queue a simulated fault for the node's agent. Refused for nodes with real GPUs."""
        self.faults.request(node_name, cmd)

    def take_faults(self, node_name: str) -> list[SimFaultCommand]:
        return self.faults.take(node_name)
