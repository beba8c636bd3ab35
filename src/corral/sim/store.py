"""The simulators' in-memory store: a trace's nodes registered, its jobs submitted as the server accepts them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from corral.core.requests import ResourceRequest
from corral.core.resources import NodeInfo
from corral.store.memory import MemoryStore
from corral.store.records import JobSpec

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)  # simulated second 0 on the store's clock


def compute_store_time(t_s: float) -> datetime:
    """Simulated seconds as the store's datetime."""
    return EPOCH + timedelta(seconds=t_s)


def load_store(nodes: Sequence[NodeInfo]) -> MemoryStore:
    """An in-memory store with `nodes` registered (READY, not cordoned)."""
    store = MemoryStore()
    for n in nodes:
        store.upsert_node(n.name, n.name, "sim", n.cpu_milli, n.memory_mib, dict(n.labels), n.gpus, EPOCH)
    return store


def submit_request(
    store: MemoryStore, request: ResourceRequest, name: str, at: datetime, *, nodes: int = 1, priority: int = 0
) -> int:
    """Submit a job asking `request` on each of `nodes` nodes; its id in the store."""
    r = request
    spec = JobSpec(
        command=("sim",),
        name=name,
        gpus=r.gpus,
        gpu_milli=r.gpu_milli,
        gpu_models=r.gpu_models,
        min_gpu_memory_mib=r.min_gpu_memory_mib,
        cpu_milli=r.cpu_milli,
        memory_mib=r.memory_mib,
        priority=priority,
        nodes=nodes,
    )
    return store.create_job(spec, at).id
