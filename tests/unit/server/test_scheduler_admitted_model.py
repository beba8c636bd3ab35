"""The server places a job on the GPU model the queueing core admitted it on: a job that allows any model is
not put back on a model whose maximum its tenant has reached (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime

from corral.core.resources import GpuInfo
from corral.server.background.scheduling import Scheduler
from corral.server.services.notify import NodeNotifier
from corral.store.records import JobSpec, Quota
from corral.store.sql import SqlStore

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def _gpus(model: str, n: int) -> list[GpuInfo]:
    return [GpuInfo(index=i, uuid=f"GPU-{model}-{i}", model=model, memory_mib=81920) for i in range(n)]


def test_any_model_job_lands_on_the_model_it_was_admitted_on(store: SqlStore) -> None:
    tenant = store.create_tenant("vision", T0).id
    store.set_quota(Quota(tenant_id=tenant, gpu_model="", guaranteed_gpus=0, max_gpus=8))
    store.set_quota(Quota(tenant_id=tenant, gpu_model="A100", guaranteed_gpus=0, max_gpus=1))
    store.upsert_node("a", "a", "simulated", 64_000, 512_000, {}, _gpus("A100-80GB", 4), T0)
    store.upsert_node("h", "h", "simulated", 64_000, 512_000, {}, _gpus("H100-80GB", 4), T0)
    sched = Scheduler(store, NodeNotifier(), "corral", 1.0)
    on_a100 = store.create_job(JobSpec(command=("x",), gpus=1, gpu_models=("A100",), tenant_id=tenant), T0)
    assert sched.run_once(T0) == [on_a100.id]
    anywhere = [store.create_job(JobSpec(command=("x",), gpus=1, tenant_id=tenant), T0) for _ in range(3)]
    placed = sched.run_once(T0)
    assert sorted(placed) == sorted(j.id for j in anywhere)
    nodes = {store.get_job(j.id).node for j in anywhere}  # type: ignore[union-attr]
    assert nodes == {"h"}  # the A100 node has 3 idle GPUs, but the tenant's A100 maximum (1) is reached
