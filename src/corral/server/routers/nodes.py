"""/api/v1/nodes and /api/v1/gpus: the inventory, what is in use, and operating it (cordon, drain, enable)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from corral.api.schemas import AuditOut, EventOut, GpuOut, NodeOut
from corral.core.errors import ConflictError
from corral.core.states import JobState
from corral.core.tenancy import Action
from corral.server.auth import Principal, require_user
from corral.server.context import context_of
from corral.server.deps import NotifierDep, SchedulerDep, StoreDep, TelemetryDep
from corral.server.params import GpuIndex
from corral.server.services import operations
from corral.server.services.inventory import Usage, gpus_out, node_out
from corral.store.base import StateStore
from corral.store.snapshot import compute_usage, compute_usage_from_holders

router = APIRouter(prefix="/api/v1", tags=["nodes"])
User = Annotated[Principal, Depends(require_user)]


def _visible_jobs(store: StateStore, caller: Principal) -> set[int] | None:
    """The running jobs whose ids the caller may see on a GPU: its tenant's (None: all, for admins). Another
    tenant's job id is not a member's to know (it could not open the job anyway)."""
    scope = caller.tenant_scope()
    if scope is None:
        return None
    return {j.id for j in store.list_jobs(states=[JobState.RUNNING], tenant_id=scope)}


def _usage(store: StateStore, node: str | None = None) -> Usage:
    if node is not None:
        return compute_usage(store.list_node_jobs(node))
    return compute_usage_from_holders(store.list_gpu_holders())


@router.get("/nodes", response_model=list[NodeOut])
def list_nodes(request: Request, caller: User, store: StoreDep) -> Response:
    usage = _usage(store)
    # each node's JSON kept while the node is the same (services/inventory.NodePages): the bytes the list of NodeOut
    # would give
    body = context_of(request.app).node_pages.json(store.list_nodes(), usage, caller.is_admin)
    return Response(body, media_type="application/json")


@router.get("/nodes/{name}", response_model=NodeOut)
def get_node(name: str, caller: User, store: StoreDep) -> NodeOut:
    return node_out(operations.load_node(store, name), _usage(store, name), caller.is_admin)


@router.get("/gpus", response_model=list[GpuOut])
def list_gpus(caller: User, store: StoreDep, node: str | None = None) -> list[GpuOut]:
    usage = _usage(store, node)
    nodes = [operations.load_node(store, node)] if node else store.list_nodes()
    visible = _visible_jobs(store, caller)
    return [g for n in nodes for g in gpus_out(n, usage, visible)]


@router.post("/nodes/{name}/cordon", response_model=NodeOut)
def cordon(name: str, caller: User, store: StoreDep) -> NodeOut:
    node = operations.cordon_node(store, caller, name, True)
    return node_out(node, _usage(store))


@router.post("/nodes/{name}/uncordon", response_model=NodeOut)
def uncordon(name: str, caller: User, store: StoreDep, sched: SchedulerDep) -> NodeOut:
    node = operations.cordon_node(store, caller, name, False)
    sched.trigger.fire()
    return node_out(node, _usage(store))


@router.post("/nodes/{name}/drain", response_model=NodeOut)
def drain(name: str, caller: User, store: StoreDep, sched: SchedulerDep, notifier: NotifierDep) -> NodeOut:
    operations.drain_node(store, caller, name)
    notifier.notify(name)  # the agent learns at once which jobs to stop
    sched.trigger.fire()
    return node_out(operations.load_node(store, name), _usage(store))


@router.post("/gpus/{node}/{index}/enable", response_model=list[GpuOut])
def enable_gpu(
    node: str, index: GpuIndex, caller: User, store: StoreDep, sched: SchedulerDep, health: TelemetryDep
) -> list[GpuOut]:
    caller.require(Action.MANAGE_CLUSTER)
    if (fault := health.standing_failure(node, index)) is not None:
        # It would be taken out again by the next check, a second later: say so instead of "enabled".
        raise ConflictError(
            f"GPU {index} on {node} still reports {fault} in its last telemetry: clear the fault first "
            f"(a simulated GPU: corral sim fault {node} {index} --clear), then enable it",
            "index",
        )
    n = operations.set_gpu_enabled(store, caller, node, index, True)
    health.admin_enable(node, index)
    sched.trigger.fire()
    return gpus_out(n, _usage(store), _visible_jobs(store, caller))


@router.post("/gpus/{node}/{index}/disable", response_model=list[GpuOut])
def disable_gpu(node: str, index: GpuIndex, caller: User, store: StoreDep) -> list[GpuOut]:
    n = operations.set_gpu_enabled(store, caller, node, index, False)
    return gpus_out(n, _usage(store), _visible_jobs(store, caller))


@router.get("/nodes/{name}/events", response_model=list[EventOut])
def node_events(
    name: str, _: User, store: StoreDep, limit: Annotated[int, Query(ge=1, le=5000)] = 200
) -> list[EventOut]:
    operations.load_node(store, name)
    return [
        EventOut(at=e.at, kind=e.kind, message=e.message, gpu=e.gpu_index)
        for e in store.list_node_events(name, limit=limit)
    ]


@router.get("/gpus/{node}/{index}/events", response_model=list[EventOut])
def gpu_events(
    node: str, index: GpuIndex, _: User, store: StoreDep, limit: Annotated[int, Query(ge=1, le=5000)] = 200
) -> list[EventOut]:
    operations.load_node(store, node)
    return [
        EventOut(at=e.at, kind=e.kind, message=e.message, gpu=e.gpu_index)
        for e in store.list_node_events(node, gpu_index=index, limit=limit)
    ]


@router.get("/audit", response_model=list[AuditOut])
def audit(caller: User, store: StoreDep, limit: Annotated[int, Query(ge=1, le=5000)] = 200) -> list[AuditOut]:
    """The trail of administrative changes, newest first (admins)."""
    caller.require(Action.MANAGE_CLUSTER)
    return [
        AuditOut(at=a.at, actor=a.actor, action=a.action, target=a.target, detail=a.detail)
        for a in store.list_audit(limit)
    ]
