"""/api/v1/agents: what agents call (join token): register, sync (long-poll), log upload."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool

from corral.api.schemas import AgentRegister, AgentSync, AgentSyncReply, NodeOut
from corral.core.errors import NotFoundError, ValidationError
from corral.server.auth import Principal, require_agent
from fastapi.responses import JSONResponse

from corral.server.errors import error_body
from corral.server.services.logs import LogOffsetError
from corral.server.services.agents import apply_reports, compute_assignments, register_node

router = APIRouter(prefix="/api/v1/agents", tags=["agents"])
Agent = Annotated[Principal, Depends(require_agent)]


@router.post("/register", response_model=NodeOut)
def register(body: AgentRegister, request: Request, _: Agent) -> NodeOut:
    from corral.server.routers.nodes import _node_out

    node = register_node(request.app.state.store, body)
    request.app.state.scheduler.trigger.fire()
    return _node_out(node, {})


@router.post("/{node}/sync", response_model=AgentSyncReply)
async def sync(node: str, body: AgentSync, request: Request, _: Agent) -> AgentSyncReply:
    """Heartbeat + reports in; assignments and cancels out. Holds the reply up to `wait_s` when
    there is nothing to hand over, so new work reaches the agent without polling delay."""
    app = request.app
    store = app.state.store
    if not await run_in_threadpool(store.touch_node, node, _now()):
        raise NotFoundError("node", node)
    acked, freed = await run_in_threadpool(apply_reports, store, node, body)
    if freed:
        app.state.scheduler.trigger.fire()
    running = set(body.running)
    record = await run_in_threadpool(store.get_node, node)
    telemetry = app.state.telemetry
    assignments, cancels = await run_in_threadpool(compute_assignments, store, record, running)
    faults = telemetry.take_faults(node)
    if not assignments and not cancels and not faults and body.wait_s > 0:
        await app.state.notifier.wait(node, body.wait_s)
        assignments, cancels = await run_in_threadpool(compute_assignments, store, record, running)
        faults = telemetry.take_faults(node)
    return AgentSyncReply(assignments=assignments, cancels=cancels, acked_exits=acked,
                          cancel_grace_s=app.state.settings.cancel_grace_s, faults=faults)


@router.post("/{node}/telemetry")
async def telemetry(node: str, request: Request, _: Agent) -> dict[str, int]:
    """A TelemetryBatch (corral.core.telemetry.batch_to_dict): samples stored, health checked."""
    try:
        data = await request.json()
    except ValueError as e:
        raise ValidationError("body", f"not JSON: {e}") from e
    if not isinstance(data, dict):
        raise ValidationError("body", "a telemetry batch is a JSON object")
    result = await run_in_threadpool(request.app.state.telemetry.ingest, node, data)
    if result.capacity_changed:
        request.app.state.scheduler.trigger.fire()
        request.app.state.notifier.notify(node)
    return {"stored": result.stored, "transitions": result.transitions}


@router.post("/{node}/jobs/{job_id}/logs")
async def upload_logs(node: str, job_id: int, request: Request, _: Agent,
                      offset: Annotated[int, Query(ge=0)] = 0, attempt: Annotated[int, Query(ge=1)] = 1,
                      rank: Annotated[int, Query(ge=0, le=1024)] = 0) -> dict[str, int]:
    """Append log bytes of one run that start at `offset`; 409 with `expected` when there is a gap."""
    data = await request.body()
    try:
        size = await run_in_threadpool(request.app.state.logs.append, job_id, offset, data, attempt, rank)
    except LogOffsetError as e:
        body = error_body(e.code, e.message, "offset") | {"expected": e.expected}
        # FastAPI passes a returned Response through; annotating the union would change the OpenAPI schema
        return JSONResponse(body, status_code=409)  # type: ignore[return-value]
    return {"size": size}


def _now() -> datetime:
    return datetime.now(UTC)
