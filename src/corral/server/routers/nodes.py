"""/api/v1/nodes and /api/v1/gpus: the inventory and what is in use."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from corral.core.errors import NotFoundError
from corral.core.states import JobState
from corral.server.auth import Principal, require_user
from corral.server.schemas import GpuOut, NodeOut
from corral.server.services.snapshot import compute_usage
from corral.store.records import Node

router = APIRouter(prefix="/api/v1", tags=["nodes"])
User = Annotated[Principal, Depends(require_user)]


def _usage(request: Request) -> dict[tuple[str, int], tuple[int, int]]:
    return compute_usage(request.app.state.store.list_jobs(states=[JobState.RUNNING]))


def _node_out(n: Node, usage: dict[tuple[str, int], tuple[int, int]]) -> NodeOut:
    free = sum(1 for g in n.gpus if g.healthy and (n.name, g.index) not in usage)
    return NodeOut(name=n.name, hostname=n.hostname, backend=n.backend, state=n.state, cpu_milli=n.cpu_milli,
                   memory_mib=n.memory_mib, gpus_total=len(n.gpus), gpus_free=free,
                   gpu_models=sorted({g.model for g in n.gpus}), labels=n.labels, registered_at=n.registered_at,
                   last_heartbeat_at=n.last_heartbeat_at)


@router.get("/nodes", response_model=list[NodeOut])
def list_nodes(request: Request, _: User) -> list[NodeOut]:
    usage = _usage(request)
    return [_node_out(n, usage) for n in request.app.state.store.list_nodes()]


@router.get("/nodes/{name}", response_model=NodeOut)
def get_node(name: str, request: Request, _: User) -> NodeOut:
    node = request.app.state.store.get_node(name)
    if node is None:
        raise NotFoundError("node", name)
    return _node_out(node, _usage(request))


@router.get("/gpus", response_model=list[GpuOut])
def list_gpus(request: Request, _: User) -> list[GpuOut]:
    usage = _usage(request)
    out = []
    for n in request.app.state.store.list_nodes():
        for g in n.gpus:
            used, job_id = usage.get((n.name, g.index), (0, None))
            out.append(GpuOut(node=n.name, index=g.index, uuid=g.uuid, model=g.model, memory_mib=g.memory_mib,
                              pci_bus_id=g.pci_bus_id, numa_node=g.numa_node, nvlink_peers=list(g.nvlink_peers),
                              healthy=g.healthy, job_id=job_id, used_milli=used))
    return out
