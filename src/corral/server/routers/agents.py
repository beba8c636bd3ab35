"""/api/v1/agents: what agents call over mutual TLS: register, sync (long-poll), telemetry, log upload, renew.

Every route checks that the node named in the path (or the body) is the node of the client certificate."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse

from corral.api.bounds import MAX_ID
from corral.api.schemas import AgentRegister, AgentSync, AgentSyncReply, NodeCertOut, NodeOut, RenewIn, RunRef
from corral.api.telemetry import TelemetryBatchIn
from corral.core.errors import ForbiddenError, NotFoundError
from corral.core.pools import CLUSTER_KINDS, POOL_LABEL, SOURCE_LABEL
from corral.server.deps import ContextDep, LogsDep, SchedulerDep, SettingsDep, StoreDep, TelemetryDep
from corral.server.errors import error_body
from corral.server.node_auth import require_node
from corral.server.params import Id, Offset
from corral.server.services.agents import (
    apply_reports,
    compute_assignments,
    compute_notice_s,
    record_heartbeat,
    register_node,
)
from corral.server.services.identity import NodeIdentity, renew_node_cert, require_node_match
from corral.server.services.inventory import node_out
from corral.server.services.logs import LogOffsetError
from corral.server.services.staging import compute_stage_orders, record_stage_reports
from corral.server.services.webports import compute_web_port_checks
from corral.server.threads import on_log_thread, on_node_thread

if TYPE_CHECKING:
    from corral.api.schemas import Assignment, WebPortCheck
    from corral.api.staging import StageOrder
    from corral.core.models import Node

router = APIRouter(prefix="/api/v1/agents", tags=["agents"])
Agent = Annotated[NodeIdentity, Depends(require_node)]


@router.post("/register", response_model=NodeOut)
def register(body: AgentRegister, me: Agent, store: StoreDep, sched: SchedulerDep) -> NodeOut:
    require_node_match(me, body.name)
    node = register_node(store, body)
    sched.trigger.fire()
    return node_out(node, {})


@router.post("/{node}/sync", response_model=AgentSyncReply)
async def sync(node: str, body: AgentSync, me: Agent, ctx: ContextDep) -> AgentSyncReply:
    """Heartbeat + reports in; assignments and cancels out. Holds the reply up to `wait_s` when
    there is nothing to hand over, so new work reaches the agent without polling delay."""
    require_node_match(me, node)
    store = ctx.store
    order = ctx.report_order
    threads = ctx.settings.agent_threads

    # Few hops to the agents' thread pool (each is a hand-over between the event loop and a worker thread; a node's
    # hops run one at a time, server/threads.py): one for the reports, one for the offers (again after the wait), each
    # with few transactions; one more for stage reports, and for a cloud pool's node its spot notice.
    def heartbeat_and_report() -> tuple[Node, list[RunRef], bool]:
        with order.lock(node):  # one report of a node at a time, in the agent's order of snapshots
            record, jobs = store.get_node_with_jobs(node)  # one transaction
            # a cluster pool's node: no agent reports for it or takes its work
            if record is not None and record.labels.get(SOURCE_LABEL) in CLUSTER_KINDS:
                raise ForbiddenError(f"{node} is a node of the {record.labels.get(POOL_LABEL)} pool's cluster")
            if record is None or not record_heartbeat(store, record, _now()):
                raise NotFoundError("node", node)
            reported = record, *apply_reports(store, node, body, order.is_fresh(node, body.boot, body.seq), jobs)
        ctx.web_ports.record(node, body.web_ports)  # may write (shared with other replicas): never on the event loop
        return reported

    record, acked, freed = await on_node_thread(node, threads, heartbeat_and_report)
    if body.staging_in or body.staging_out:
        freed |= await on_node_thread(
            node, threads, record_stage_reports, store, node, body.staging_in, body.staging_out
        )
    if freed:
        ctx.scheduler.trigger.fire()
    running = set(body.running)
    telemetry = ctx.telemetry
    settings = ctx.settings
    assign = partial(
        compute_assignments,
        store,
        record,
        running,
        ctx.keyring,
        settings.job_uid_range,
        job_ports=settings.job_port_range,
        port_salt=settings.job_port_salt,
        log_max_bytes=settings.job_log_max_bytes,
    )  # now and after the wait
    stage = partial(compute_stage_orders, store, node, ctx.keyring, settings.staging_rules, settings.job_uid_range)

    def offers() -> tuple[
        tuple[list[Assignment], list[RunRef]], tuple[list[StageOrder], list[StageOrder]], list[WebPortCheck]
    ]:
        work = store.read_node_work(node)  # one transaction for the three reads
        handed = assign(jobs=work.jobs)
        if any(node not in j.delivered_to for j in work.jobs):
            # handing a run over may have written (its web port, moved off a clash; its failure, which may leave
            # output to ship): the rest is read again, as it is after (on a steady node: never)
            work = store.read_node_work(node)
        return handed, stage(staging=work.staging, outs=work.stage_outs), compute_web_port_checks(work.jobs, node)

    (assignments, cancels), (stage_in, stage_out), checks = await on_node_thread(node, threads, offers)
    faults = telemetry.take_faults(node)
    # The agent already has every stage order (it reports on each): nothing new to hand over for those.
    staging_news = {str(o.job_id) for o in stage_in} != set(body.staging_in) or {
        str(o.job_id) for o in stage_out
    } != set(body.staging_out)
    if not assignments and not cancels and not faults and not staging_news and body.wait_s > 0:
        # never past CORRAL_LONG_POLL_S: the sync is the node's heartbeat, checked against CORRAL_NODE_LOST_AFTER_S
        await ctx.notifier.wait(node, min(body.wait_s, settings.long_poll_s))
        (assignments, cancels), (stage_in, stage_out), checks = await on_node_thread(node, threads, offers)
        faults = telemetry.take_faults(node)
    # a cloud pool's node reads its spot notice (a read): any other has none
    notice_s = (
        await on_node_thread(node, threads, compute_notice_s, store, record) if POOL_LABEL in record.labels else None
    )
    return AgentSyncReply(
        assignments=assignments,
        cancels=cancels,
        acked_exits=acked,
        cancel_grace_s=settings.cancel_grace_s if notice_s is None else max(settings.cancel_grace_s, notice_s),
        notice_s=notice_s,
        faults=faults,
        web_ports=checks,
        stage_in=stage_in,
        stage_out=stage_out,
    )


@router.post("/{node}/telemetry")
async def telemetry(
    node: str, body: TelemetryBatchIn, me: Agent, service: TelemetryDep, settings: SettingsDep
) -> dict[str, int]:
    """A TelemetryBatch (corral.api.telemetry): samples stored, health checked, failures acted on (server/health)."""
    require_node_match(me, node)
    threads = settings.agent_threads
    result = await on_node_thread(node, threads, service.receive, node, body.to_core())
    return {"stored": result.stored, "transitions": result.transitions}


@router.post("/{node}/jobs/{job_id}/logs")
async def upload_logs(
    node: str,
    job_id: Id,
    request: Request,
    me: Agent,
    store: StoreDep,
    logs: LogsDep,
    offset: Offset = 0,
    attempt: Annotated[int, Query(ge=1, le=MAX_ID)] = 1,
    rank: Annotated[int, Query(ge=0, le=1024)] = 0,
) -> dict[str, int]:
    """Append log bytes of one run that start at `offset`; 409 with `expected` when there is a gap. Only for
    a job placed on this node, up to its current attempt."""
    require_node_match(me, node)
    job = await on_log_thread(node, store.get_job, job_id)
    if job is None or attempt > max(job.attempt, 1) or all(n != node for n, _ in job.placed_parts):
        raise ForbiddenError(f"job {job_id} (attempt {attempt}) is not placed on node {node}")
    # A rank the job has, and this node's own in the current attempt: each rank's log is capped, so an invented
    # rank would multiply the cap, and another node's rank written first would stand for that node's output.
    if rank >= len(job.placed_parts) or (attempt == max(job.attempt, 1) and rank != job.rank_on(node)):
        raise ForbiddenError(f"job {job_id} (attempt {attempt}) has no rank {rank} on node {node}")
    data = await request.body()
    try:
        size = await on_log_thread(node, logs.append, job_id, offset, data, attempt, rank)
    except LogOffsetError as e:
        body = error_body(e.code, e.message, "offset") | {"expected": e.expected}
        # FastAPI passes a returned Response through; annotating the union would change the OpenAPI schema
        return JSONResponse(body, status_code=409)  # type: ignore[return-value]
    return {"size": size}


@router.post("/{node}/renew", response_model=NodeCertOut)
def renew(node: str, body: RenewIn, me: Agent, ctx: ContextDep) -> NodeCertOut:
    """A new certificate for this node (over the agent's current one, before it expires)."""
    require_node_match(me, node)
    cert = renew_node_cert(ctx.store, ctx.ca, node, body.csr, ctx.node_cert_lifetime)
    return NodeCertOut(node=node, cert=cert.pem, ca=ctx.ca.cert_pem, serial=cert.serial, not_after=cert.not_after)


def _now() -> datetime:
    return datetime.now(UTC)
