"""/api/v1/nodes and /api/v1/gpus: the inventory, what is in use, and operating it (cordon, drain, enable)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from corral.api.schemas import AuditOut, EventOut, GpuOut, NodeOut
from corral.core.states import JobState
from corral.core.tenancy import Action
from corral.server.auth import Principal, require_user
from corral.server.params import GpuIndex
from corral.server.services import operations
from corral.server.services.snapshot import compute_usage, compute_usage_from_holders
from corral.store.records import Node

router = APIRouter(prefix="/api/v1", tags=["nodes"])
User = Annotated[Principal, Depends(require_user)]
Usage = dict[tuple[str, int], tuple[int, int]]


def _usage(request: Request, node: str | None = None) -> Usage:
    if node is not None:
        return compute_usage(request.app.state.store.list_node_jobs(node))
    return compute_usage_from_holders(request.app.state.store.list_gpu_holders())


def _node_out(n: Node, usage: Usage) -> NodeOut:
    free = sum(1 for g in n.gpus if g.healthy and (n.name, g.index) not in usage)
    return NodeOut(name=n.name, hostname=n.hostname, backend=n.backend, state=n.state, cpu_milli=n.cpu_milli,
                   memory_mib=n.memory_mib, gpus_total=len(n.gpus), gpus_free=free,
                   gpu_models=sorted({g.model for g in n.gpus}), labels=n.labels, registered_at=n.registered_at,
                   last_heartbeat_at=n.last_heartbeat_at, cordoned=n.cordoned,
                   gpus_unhealthy=sum(1 for g in n.gpus if not g.healthy), isolation=n.isolation)


def _gpus_out(n: Node, usage: Usage) -> list[GpuOut]:
    status = {s.index: s for s in n.gpu_status}
    out = []
    for g in n.gpus:
        used, job_id = usage.get((n.name, g.index), (0, None))
        st = status.get(g.index)
        health = "DISABLED" if st and st.disabled else ("UNHEALTHY" if st and not st.healthy else "HEALTHY")
        out.append(GpuOut(node=n.name, index=g.index, uuid=g.uuid, model=g.model, memory_mib=g.memory_mib,
                          pci_bus_id=g.pci_bus_id, numa_node=g.numa_node, nvlink_peers=list(g.nvlink_peers),
                          healthy=g.healthy, job_id=job_id, used_milli=used, health=health,
                          health_reason=st.reason if st else ""))
    return out


@router.get("/nodes", response_model=list[NodeOut])
def list_nodes(request: Request, _: User) -> list[NodeOut]:
    usage = _usage(request)
    return [_node_out(n, usage) for n in request.app.state.store.list_nodes()]


@router.get("/nodes/{name}", response_model=NodeOut)
def get_node(name: str, request: Request, _: User) -> NodeOut:
    return _node_out(operations.load_node(request.app.state.store, name), _usage(request, name))


@router.get("/gpus", response_model=list[GpuOut])
def list_gpus(request: Request, _: User, node: str | None = None) -> list[GpuOut]:
    usage = _usage(request, node)
    store = request.app.state.store
    nodes = [operations.load_node(store, node)] if node else store.list_nodes()
    return [g for n in nodes for g in _gpus_out(n, usage)]


def _changed(request: Request) -> None:
    request.app.state.scheduler.trigger.fire()


@router.post("/nodes/{name}/cordon", response_model=NodeOut)
def cordon(name: str, request: Request, caller: User) -> NodeOut:
    node = operations.cordon_node(request.app.state.store, caller, name, True)
    return _node_out(node, _usage(request))


@router.post("/nodes/{name}/uncordon", response_model=NodeOut)
def uncordon(name: str, request: Request, caller: User) -> NodeOut:
    node = operations.cordon_node(request.app.state.store, caller, name, False)
    _changed(request)
    return _node_out(node, _usage(request))


@router.post("/nodes/{name}/drain", response_model=NodeOut)
def drain(name: str, request: Request, caller: User) -> NodeOut:
    store = request.app.state.store
    operations.drain_node(store, caller, name)
    request.app.state.notifier.notify(name)  # the agent learns at once which jobs to stop
    _changed(request)
    return _node_out(operations.load_node(store, name), _usage(request))


@router.post("/gpus/{node}/{index}/enable", response_model=list[GpuOut])
def enable_gpu(node: str, index: GpuIndex, request: Request, caller: User) -> list[GpuOut]:
    n = operations.set_gpu_enabled(request.app.state.store, caller, node, index, True)
    health = getattr(request.app.state, "health", None)
    if health is not None:
        health.admin_enable(node, index)
    _changed(request)
    return _gpus_out(n, _usage(request))


@router.post("/gpus/{node}/{index}/disable", response_model=list[GpuOut])
def disable_gpu(node: str, index: GpuIndex, request: Request, caller: User) -> list[GpuOut]:
    n = operations.set_gpu_enabled(request.app.state.store, caller, node, index, False)
    return _gpus_out(n, _usage(request))


@router.get("/nodes/{name}/events", response_model=list[EventOut])
def node_events(name: str, request: Request, _: User,
                limit: Annotated[int, Query(ge=1, le=5000)] = 200) -> list[EventOut]:
    store = request.app.state.store
    operations.load_node(store, name)
    return [EventOut(at=e.at, kind=e.kind, message=e.message, gpu=e.gpu_index)
            for e in store.list_node_events(name, limit=limit)]


@router.get("/gpus/{node}/{index}/events", response_model=list[EventOut])
def gpu_events(node: str, index: GpuIndex, request: Request, _: User,
               limit: Annotated[int, Query(ge=1, le=5000)] = 200) -> list[EventOut]:
    store = request.app.state.store
    operations.load_node(store, node)
    return [EventOut(at=e.at, kind=e.kind, message=e.message, gpu=e.gpu_index)
            for e in store.list_node_events(node, gpu_index=index, limit=limit)]


@router.get("/audit", response_model=list[AuditOut])
def audit(request: Request, caller: User, limit: Annotated[int, Query(ge=1, le=5000)] = 200) -> list[AuditOut]:
    """The trail of administrative changes, newest first (admins)."""
    caller.require(Action.MANAGE_CLUSTER)
    return [AuditOut(at=a.at, actor=a.actor, action=a.action, target=a.target, detail=a.detail)
            for a in request.app.state.store.list_audit(limit)]
