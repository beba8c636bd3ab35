"""/metrics (Prometheus, dcgm-exporter names), /api/v1/metrics/* (time series, latest values), job GPU
usage, and simulated fault injection."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from corral.api.bounds import MAX_GPUS_PER_NODE, MAX_ID
from corral.api.schemas import SimFaultCommand
from corral.core.errors import NotFoundError, ValidationError
from corral.core.rollup import select_resolution
from corral.core.simfault import parse_sim_fault
from corral.core.states import JobState
from corral.core.telemetry import GPU_SERIES, HOST_SERIES, compute_gpu_series, compute_host_series
from corral.core.tenancy import Action
from corral.core.timestamps import parse_iso_time
from corral.server.auth import Principal, require_metrics_reader, require_user
from corral.server.context import ServerContext
from corral.server.deps import AlertingDep, ContextDep, StoreDep, TelemetryDep
from corral.server.params import GpuIndex, Id
from corral.server.prometheus import CONTENT_TYPE, ClusterStats, GpuMetrics, compute_latency_histogram, render_metrics
from corral.server.services.allocation import check_allocation_range, compute_allocation_series
from corral.server.services.audit import record_audit
from corral.server.services.jobs import load_job
from corral.server.services.reports import JobRun
from corral.store.telemetry import HOST_GPU

router = APIRouter(tags=["metrics"])
User = Annotated[Principal, Depends(require_user)]

DERIVED_HOST_SERIES = {
    "host_net_rx_bytes_s": "network receive rate",
    "host_net_tx_bytes_s": "network send rate",
    "host_disk_read_bytes_s": "disk read rate",
    "host_disk_write_bytes_s": "disk write rate",
}
# Short names the portal may use, mapped to the stored series.
ALIASES = {
    "gpu_util_pct": "gpu_utilization_percent",
    "gpu_mem_used_mib": "gpu_memory_used_mib",
    "gpu_temp_c": "gpu_temperature_c",
    "cpu_pct": "host_cpu_percent",
    "mem_used_pct": "host_memory_used_percent",
    "disk_used_pct": "host_disk_used_percent",
    "load1": "host_load_1m",
    "net_rx_bps": "host_net_rx_bytes_s",
    "net_tx_bps": "host_net_tx_bytes_s",
}
KNOWN = set(GPU_SERIES) | set(HOST_SERIES) | set(DERIVED_HOST_SERIES)


def _ts(value: str | None, field: str, default: float) -> float:
    if value is None or value == "":
        return default
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        if not 0 <= seconds <= 1e11:  # NaN and infinities too: Unix seconds up to the year 5138
            raise ValidationError(field, f"expected Unix seconds from 0 to 1e11, got {value!r}")
        return seconds
    try:
        return parse_iso_time(value, field).timestamp()
    except ValidationError as e:
        raise ValidationError(field, f"expected an ISO time or Unix seconds, got {value!r}") from e


def _downsample(points: list[tuple[float, float]], step_s: float) -> list[list[float]]:
    """Averages over `step_s` buckets (the start of each bucket as its time)."""
    if step_s <= 0:
        return [[t, v] for t, v in points]
    buckets: dict[float, list[float]] = {}
    for t, v in points:
        buckets.setdefault(t - t % step_s, []).append(v)
    return [[t, sum(vs) / len(vs)] for t, vs in sorted(buckets.items())]


@router.get("/api/v1/metrics/series")
def series(
    caller: User,
    store: StoreDep,
    alerting: AlertingDep,
    metric: str,
    node: str | None = None,
    gpu: Annotated[int | None, Query(ge=0, le=MAX_GPUS_PER_NODE)] = None,
    job: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
    tenant: str | None = None,
    start: str | None = None,
    end: str | None = None,
    step_s: Annotated[float, Query(ge=0, le=86400)] = 0,
    agg: Annotated[str | None, Query(pattern="^(avg|max|min|sum)$")] = None,
) -> dict[str, Any]:
    """One metric over [start, end) (default: the last hour), a series per (node, gpu). Raw samples while the
    raw retention still covers `start`, 1-minute averages beyond. `job` (or `tenant`) restricts to samples of
    GPUs while that job (or one of the tenant's jobs) held them. `agg` folds every series into one
    (avg, max, min or sum per `step_s`, default 60 s), computed in the database."""
    name = ALIASES.get(metric, metric)
    if name not in KNOWN:
        raise ValidationError("metric", f"unknown metric {metric!r}; known: {', '.join(sorted(KNOWN))}")
    now = time.time()
    t1 = _ts(end, "end", now)
    t0 = _ts(start, "start", t1 - 3600)
    if t0 >= t1:
        raise ValidationError("start", "must be before end")
    if job is not None:
        load_job(store, job, caller)
    tenant_id = None
    if tenant is not None:
        from corral.server.services.tenancy import load_tenant

        tenant_id = load_tenant(store, tenant, caller).id
    resolution = select_resolution(t0, now, alerting.retention)
    if agg is not None and job is None and tenant_id is None and gpu is None:
        points = store.query_aggregate(name, t0, t1, step_s or 60.0, agg, node=node, rollups=resolution == "rollup")
        agg_labels: dict[str, Any] = {"agg": agg} | ({"node": node} if node else {})
        return {
            "metric": name,
            "resolution": resolution,
            "start": t0,
            "end": t1,
            "series": [{"labels": agg_labels, "points": [[t, v] for t, v in points]}] if points else [],
        }
    if resolution == "raw" or job is not None or tenant_id is not None:
        found = store.query_points(name, t0, t1, node=node, gpu=gpu, job_id=job, tenant_id=tenant_id)
    else:
        found = store.query_rollups(name, t0, t1, node=node, gpu=gpu)
    out = []
    for (n, g), points in sorted(found.items()):
        labels: dict[str, Any] = {"node": n} | ({} if g == HOST_GPU else {"gpu": g})
        out.append({"labels": labels, "points": _downsample(points, step_s)})
    return {"metric": name, "resolution": resolution, "start": t0, "end": t1, "series": out}


@router.get("/api/v1/metrics/allocated")
def allocated(
    caller: User,
    store: StoreDep,
    start: str | None = None,
    end: str | None = None,
    step_s: Annotated[float, Query(ge=1, le=86400)] = 60,
) -> dict[str, Any]:
    """GPUs held by running jobs over [start, end) (default: the last hour; never past now), averaged per
    `step_s` bucket, from the jobs' runs (a share counts its fraction). Members see their tenant's jobs only,
    admins the whole fleet's. At most 2000 buckets and 400 days."""
    now = time.time()
    t1 = _ts(end, "end", now)
    t0 = _ts(start, "start", min(t1, now) - 3600)
    check_allocation_range(t0, t1, step_s, now)  # before reading any run: a 50-year range is refused, not read
    runs_from, runs_to = (datetime.fromtimestamp(t, UTC) for t in (t0, min(t1, now)))
    scope = caller.tenant_scope()
    rows = store.list_runs_between(runs_from, runs_to, tenant_id=scope, with_placement=False)
    points = compute_allocation_series([JobRun.from_columns(r) for r in rows], t0, t1, step_s, now)
    series = [{"labels": {}, "points": points}]
    return {"metric": "gpus_allocated", "start": t0, "end": min(t1, now), "step_s": step_s, "series": series}


@router.get("/api/v1/metrics/latest")
def latest(_: User, store: StoreDep, telemetry: TelemetryDep, node: str) -> dict[str, Any]:
    """The newest values the node's agent sent: host vitals and one entry per GPU."""
    batch = telemetry.latest().get(node)
    if batch is None:
        if store.get_node(node) is None:
            raise NotFoundError("node", node)
        return {"node": node, "ts": None, "host": None, "gpus": []}
    host = compute_host_series(batch.host) if batch.host else None
    gpus = []
    for s in batch.gpus:
        values = compute_gpu_series(s)
        gpus.append(
            {
                "index": s.index,
                "uuid": s.uuid,
                "util_pct": s.utilization_percent,
                "mem_used_mib": s.memory_used_mib,
                "mem_total_mib": s.memory_total_mib,
                "power_w": s.power_w,
                "temp_c": s.temperature_c,
                "processes": len(s.processes),
                "series": values,
            }
        )
    return {
        "node": node,
        "ts": batch.ts,
        "host": host,
        "gpus": gpus,
        "events": [{"kind": e.kind.value, "gpu": e.gpu_index, "xid": e.xid, "detail": e.detail} for e in batch.events],
    }


@router.get("/api/v1/jobs/{job_id}/usage")
def job_usage(job_id: Id, caller: User, store: StoreDep) -> dict[str, Any]:
    """The job's GPU usage summary (mean/peak utilisation, idle fraction, peak memory, mean power)."""
    load_job(store, job_id, caller)
    summary = store.get_job_gpu_summary(job_id)
    summary.pop("_raw", None)
    return summary


@router.post("/api/v1/nodes/{node}/gpus/{index}/fault")
def inject_fault(node: str, index: GpuIndex, body: dict[str, Any], caller: User, ctx: ContextDep) -> dict[str, Any]:
    """Inject a fault into a simulated GPU: {"xid": 79} | {"ecc": true} | {"off_bus": true} |
    {"temperature_c": 95} | {"clear": true}. Refused for nodes with real GPUs (admins)."""
    caller.require(Action.MANAGE_CLUSTER)
    parse_sim_fault(body)  # validates, naming the field
    cmd = SimFaultCommand.model_validate({**body, "gpu_index": index})
    ctx.telemetry.request_fault(node, cmd)
    ctx.notifier.notify(node)
    record_audit(ctx.store, caller, "gpu.fault", f"{node}/{index}", str(body))
    return {"node": node, "gpu": index, "fault": body}


def _cluster_stats(ctx: ServerContext) -> ClusterStats:
    store = ctx.store
    jobs_by_state = Counter(j.state.value for j in store.list_jobs(states=[JobState.PENDING, JobState.RUNNING]))
    pending_by_reason = Counter(ctx.scheduler.pending_codes.values())
    nodes = store.list_nodes()
    failures = sum(s.failed for s in ctx.alerting.notifier_status())
    return ClusterStats(
        queue_length=jobs_by_state.get("PENDING", 0),
        pending_by_reason=dict(pending_by_reason),
        jobs_by_state=dict(jobs_by_state),
        nodes_by_state=dict(Counter(n.state for n in nodes)),
        alerts_by_state=dict(ctx.alerting.alert_states()),
        scheduling_latency=compute_latency_histogram(ctx.scheduler.latencies_s()),
        samples_ingested=ctx.telemetry.samples_ingested,
        samples_rejected=ctx.telemetry.samples_rejected,
        notification_failures=failures,
    )


def _render(ctx: ServerContext) -> bytes:
    store = ctx.store
    nodes = {n.name: n for n in store.list_nodes()}
    gpus, hosts = [], []
    for name, batch in ctx.telemetry.latest().items():
        node = nodes.get(name)
        if node is None:
            continue
        models = {g.index: g.model for g in node.gpus}
        healthy = {g.index: g.healthy for g in node.gpus}
        last_xid = {e.gpu_index: e.xid for e in batch.events if e.xid is not None}
        for s in batch.gpus:
            gpus.append(
                GpuMetrics(
                    hostname=name,
                    model=models.get(s.index, ""),
                    sample=s,
                    healthy=healthy.get(s.index, True),
                    last_xid=last_xid.get(s.index) or 0,
                )
            )
        if batch.host is not None:
            hosts.append((name, batch.host))
    return render_metrics(gpus, hosts, _cluster_stats(ctx))


@router.get("/metrics", include_in_schema=False)
async def prometheus(request: Request, ctx: ContextDep) -> Response:
    """Prometheus exposition: dcgm-exporter's GPU series and Corral's own (queue, jobs, nodes, alerts). Needs a
    metrics token or an admin's (Authorization: Bearer) unless CORRAL_METRICS_PUBLIC=true."""
    if not ctx.settings.metrics_public:
        await run_in_threadpool(require_metrics_reader, request)
    return Response(await run_in_threadpool(_render, ctx), media_type=CONTENT_TYPE)
