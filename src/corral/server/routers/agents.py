"""/api/v1/agents: what agents call over mutual TLS: register, sync (long-poll), telemetry, log upload, renew.

Every route checks that the node named in the path (or the body) is the node of the client certificate."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import partial
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool

from corral.api.bounds import MAX_ID
from corral.api.schemas import AgentRegister, AgentSync, AgentSyncReply, NodeCertOut, NodeOut, RenewIn
from corral.server.params import Id, Offset
from corral.core.errors import ForbiddenError, NotFoundError, ValidationError
from corral.server.node_auth import require_node
from corral.server.services.identity import NodeIdentity, renew_node_cert, require_node_match
from fastapi.responses import JSONResponse

from corral.server.errors import error_body
from corral.server.services.logs import LogOffsetError
from corral.server.services.agents import apply_reports, compute_assignments, register_node
from corral.server.services.webports import compute_web_port_checks

router = APIRouter(prefix="/api/v1/agents", tags=["agents"])
Agent = Annotated[NodeIdentity, Depends(require_node)]


@router.post("/register", response_model=NodeOut)
def register(body: AgentRegister, request: Request, me: Agent) -> NodeOut:
    from corral.server.routers.nodes import _node_out

    require_node_match(me, body.name)
    node = register_node(request.app.state.store, body)
    request.app.state.scheduler.trigger.fire()
    return _node_out(node, {})


@router.post("/{node}/sync", response_model=AgentSyncReply)
async def sync(node: str, body: AgentSync, request: Request, me: Agent) -> AgentSyncReply:
    """Heartbeat + reports in; assignments and cancels out. Holds the reply up to `wait_s` when
    there is nothing to hand over, so new work reaches the agent without polling delay."""
    require_node_match(me, node)
    app = request.app
    store = app.state.store
    if not await run_in_threadpool(store.touch_node, node, _now()):
        raise NotFoundError("node", node)
    acked, freed = await run_in_threadpool(apply_reports, store, node, body)
    app.state.web_ports.record(node, body.web_ports)
    if freed:
        app.state.scheduler.trigger.fire()
    running = set(body.running)
    record = await run_in_threadpool(store.get_node, node)
    telemetry = app.state.telemetry
    settings = app.state.settings
    assign = partial(compute_assignments, store, record, running, app.state.keyring, settings.job_uid_range,
                     job_ports=settings.job_port_range, port_salt=settings.job_port_salt)  # now and after the wait
    assignments, cancels = await run_in_threadpool(assign)
    faults = telemetry.take_faults(node)
    if not assignments and not cancels and not faults and body.wait_s > 0:
        # never past CORRAL_LONG_POLL_S: the sync is the node's heartbeat, checked against CORRAL_NODE_LOST_AFTER_S
        await app.state.notifier.wait(node, min(body.wait_s, settings.long_poll_s))
        assignments, cancels = await run_in_threadpool(assign)
        faults = telemetry.take_faults(node)
    checks = compute_web_port_checks(await run_in_threadpool(store.list_node_jobs, node), node)
    return AgentSyncReply(assignments=assignments, cancels=cancels, acked_exits=acked,
                          cancel_grace_s=settings.cancel_grace_s, faults=faults, web_ports=checks)


@router.post("/{node}/telemetry")
async def telemetry(node: str, request: Request, me: Agent) -> dict[str, int]:
    """A TelemetryBatch (corral.core.telemetry.batch_to_dict): samples stored, health checked."""
    require_node_match(me, node)
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
async def upload_logs(node: str, job_id: Id, request: Request, me: Agent,
                      offset: Offset = 0, attempt: Annotated[int, Query(ge=1, le=MAX_ID)] = 1,
                      rank: Annotated[int, Query(ge=0, le=1024)] = 0) -> dict[str, int]:
    """Append log bytes of one run that start at `offset`; 409 with `expected` when there is a gap. Only for
    a job placed on this node, up to its current attempt."""
    require_node_match(me, node)
    job = await run_in_threadpool(request.app.state.store.get_job, job_id)
    if job is None or attempt > max(job.attempt, 1) or all(n != node for n, _ in job.placed_parts):
        raise ForbiddenError(f"job {job_id} (attempt {attempt}) is not placed on node {node}")
    data = await request.body()
    try:
        size = await run_in_threadpool(request.app.state.logs.append, job_id, offset, data, attempt, rank)
    except LogOffsetError as e:
        body = error_body(e.code, e.message, "offset") | {"expected": e.expected}
        # FastAPI passes a returned Response through; annotating the union would change the OpenAPI schema
        return JSONResponse(body, status_code=409)  # type: ignore[return-value]
    return {"size": size}


@router.post("/{node}/renew", response_model=NodeCertOut)
def renew(node: str, body: RenewIn, request: Request, me: Agent) -> NodeCertOut:
    """A new certificate for this node (over the agent's current one, before it expires)."""
    require_node_match(me, node)
    state = request.app.state
    cert = renew_node_cert(state.store, state.ca, node, body.csr, state.node_cert_lifetime)
    return NodeCertOut(node=node, cert=cert.pem, ca=state.ca.cert_pem, serial=cert.serial, not_after=cert.not_after)


def _now() -> datetime:
    return datetime.now(UTC)
