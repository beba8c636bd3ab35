"""GPU health on the server: corral.core.health's pure rules run per node on each batch, their transitions
recorded in the store (GPU taken out or put back, node events), and an admin's enable.

The per-node state lives in memory; on first use (and after a restart) it is built from the store, so a GPU that
failed before stays out until it recovers or an admin enables it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime

from corral.core.health import (
    GpuHealth,
    GpuHealthState,
    HealthPolicy,
    HealthTransition,
    NodeHealthState,
    apply_admin_enable,
    compute_gpu_failures,
    compute_health,
    describe_gpu_fault,
)
from corral.core.telemetry import TelemetryBatch
from corral.store.protocols import OperationsStore
from corral.store.records import Node


def compute_initial_state(node: Node, now: float) -> NodeHealthState:
    """The node's health state as the store holds it: GPUs marked unhealthy there start UNHEALTHY (pure)."""
    status = {s.index: s for s in node.gpu_status}
    gpus = tuple(
        GpuHealthState(g.index, since=now)
        if status.get(g.index) is None or status[g.index].healthy
        else GpuHealthState(g.index, health=GpuHealth.UNHEALTHY, reason=status[g.index].reason, since=now)
        for g in node.gpus
    )
    return NodeHealthState(len(gpus), gpus)


def apply_transitions(
    store: OperationsStore, node: str, transitions: Sequence[HealthTransition], now: datetime
) -> tuple[bool, list[HealthTransition]]:
    """Record `transitions` of one node: GPU health in the store and one node event each. Returns (whether a
    GPU's stored health changed, the transitions that took a GPU out)."""
    changed = False
    failed: list[HealthTransition] = []
    for t in transitions:
        if t.gpu_index is None:  # "N-1 GPUs": a node-level event; the missing GPU fails on its own
            store.add_node_event(node, None, "gpu_count", t.detail, now)
            continue
        healthy = t.new is GpuHealth.HEALTHY
        changed |= store.set_gpu_health(node, t.gpu_index, healthy, t.reason)
        kind = "gpu_healthy" if healthy else "gpu_unhealthy"
        store.add_node_event(node, t.gpu_index, kind, f"{t.reason}: {t.detail}".strip(": "), now)
        if not healthy:
            failed.append(t)
    return changed, failed


def _enabled_elsewhere(state: NodeHealthState, node: Node, now: float) -> NodeHealthState:
    """A GPU this process holds UNHEALTHY that the store has healthy and enabled again: an admin enabled it through
    another replica or process (CORRAL_WORKERS: the people's process), whose own enable reached only its memory. It
    starts over as HEALTHY here too, so a fault it still raises takes it out again (else this process, still
    holding it out, would see no change and leave it in the pool, faulting)."""
    stored = {s.index: s for s in node.gpu_status}
    for g in state.gpus:
        st = stored.get(g.index)
        if g.health is GpuHealth.UNHEALTHY and (st is None or (st.healthy and not st.disabled)):
            state, _ = apply_admin_enable(state, g.index, now)
    return state


class GpuHealthTracker:
    """Thread-safe holder of every node's NodeHealthState between batches."""

    def __init__(self, policy: HealthPolicy | None = None) -> None:
        self.policy = policy or HealthPolicy()
        self._lock = threading.Lock()
        self._health: dict[str, NodeHealthState] = {}

    def check(self, node: Node, batch: TelemetryBatch) -> list[HealthTransition]:
        """One health check of `node` from its batch, at the batch's time; returns the transitions."""
        indices = tuple(g.index for g in node.gpus)
        with self._lock:
            state = self._health.get(node.name)
            if state is None or tuple(g.index for g in state.gpus) != indices:  # new node, or its GPUs changed
                state = compute_initial_state(node, batch.ts)
            else:
                state = _enabled_elsewhere(state, node, batch.ts)
            state, transitions = compute_health(state, batch.gpus, batch.events, batch.gpu_count, batch.ts, self.policy)
            self._health[node.name] = state
        return transitions

    def admin_enable(self, node: str, index: int, now: float) -> None:
        """An admin put the GPU back: its state starts over as HEALTHY (nothing for a GPU not seen yet)."""
        with self._lock:
            state = self._health.get(node)
            if state is not None:
                try:
                    self._health[node], _ = apply_admin_enable(state, index, now)
                except KeyError:
                    pass

    def standing_failure(self, batch: TelemetryBatch | None, index: int) -> str | None:
        """What the node's last batch still shows wrong with GPU `index` (a fatal Xid it keeps raising, a
        temperature over the limit, a GPU that cannot be read), or None: enabling it now would take it out again."""
        if batch is None:
            return None
        with self._lock:
            state = self._health.get(batch.node)
        if state is None:  # a batch another process checked (CORRAL_WORKERS): judged afresh
            state = NodeHealthState.initial((s.index for s in batch.gpus), batch.ts)
        failure = compute_gpu_failures(state, batch.gpus, batch.events, self.policy).get(index)
        return None if failure is None else failure.detail

    def unhealthy(self) -> dict[str, dict[int, str]]:
        """node -> {GPU index: reason in words ("Xid 79", "fallen off the bus")} for GPUs the checks hold
        UNHEALTHY now."""
        with self._lock:
            return {
                n: {g.index: describe_gpu_fault(g.reason, g.detail) for g in s.gpus if g.health is GpuHealth.UNHEALTHY}
                for n, s in self._health.items()
            }
