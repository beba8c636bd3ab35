"""Job use-cases: submit (validated against the pool), cancel, describe."""

from __future__ import annotations

from datetime import UTC, datetime

from corral.api.schemas import JobOut, JobSubmit
from corral.core.errors import NotFoundError, ValidationError
from corral.core.requests import ResourceRequest, model_matches
from corral.core.states import JobState
from corral.server.auth import Principal
from corral.store.base import StateStore
from corral.store.records import Job, JobSpec, Node


def check_fits_some_node(request: ResourceRequest, nodes: list[Node], gang: int = 1) -> None:
    """Reject a request that no registered node could ever hold (naming the field).

    With no nodes registered yet the job is accepted and waits: nodes may join later.
    """
    if not nodes or request.gpus == 0:
        return
    biggest = max(len(n.gpus) for n in nodes)
    if request.gpus > biggest:
        raise ValidationError("gpus", f"{request.gpus} GPUs requested but the largest node has {biggest}")
    if request.gpu_models:
        models = sorted({g.model for n in nodes for g in n.gpus})
        matching = [n for n in nodes if sum(model_matches(g.model, request.gpu_models) for g in n.gpus) >= request.gpus]
        if not matching:
            wanted = "|".join(request.gpu_models)
            raise ValidationError("gpu_model", f"no node has {request.gpus} GPU(s) of model {wanted}; models here: {', '.join(models) or 'none'}")
    big_enough = [n for n in nodes if sum(model_matches(g.model, request.gpu_models) for g in n.gpus) >= request.gpus]
    if gang > len(big_enough):
        raise ValidationError("nodes", f"{gang} nodes with {request.gpus} GPU(s) each requested but the pool has "
                                       f"{len(big_enough)} such node(s)")


def check_tenant_quota_covers(store: StateStore, tenant_id: int, request: ResourceRequest) -> None:
    """A tenant with quotas only for some GPU models may not ask for another model (no flavor, in Kueue's
    words): the job would never be admitted. A tenant with a total quota, or none at all, may ask any."""
    if request.gpus == 0:
        return
    quotas = store.list_quotas(tenant_id)
    if not quotas or any(not q.gpu_model for q in quotas):
        return
    covered = [q.gpu_model for q in quotas if (q.max_gpus is None or q.max_gpus > 0)]
    wanted = request.gpu_models
    ok = any(model_matches(m, (c,)) or model_matches(c, (m,)) for m in wanted for c in covered) if wanted else False
    if not ok:
        asked = "|".join(wanted) or "any model"
        raise ValidationError("gpu_model", f"the tenant has no quota for {asked}; its quotas cover "
                                           f"{', '.join(covered) or 'nothing'} (ask for one of those)")


def job_spec_for(store: StateStore, body: JobSubmit, tenant_id: int | None, user_id: int | None,
                 schedule_id: int | None = None) -> JobSpec:
    """Check a submission against the tenant's queues and quotas and the pool; the spec to store, or
    ValidationError naming the field."""
    if tenant_id is None:
        raise ValidationError("tenant", "the caller belongs to no tenant")
    if body.queue not in {q.name for q in store.list_queues(tenant_id)}:
        raise ValidationError("queue", f"no queue {body.queue!r} in this tenant")
    if body.nodes > 1 and body.gpus == 0:
        raise ValidationError("nodes", "a multi-node job asks for GPUs on each node (--gpus)")
    request = ResourceRequest(gpus=body.gpus, gpu_milli=body.gpu_milli, gpu_models=body.gpu_models,
                              min_gpu_memory_mib=body.min_gpu_memory_mib, cpu_milli=body.cpu_milli,
                              memory_mib=body.memory_mib)
    check_fits_some_node(request, store.list_nodes(), body.nodes)
    check_tenant_quota_covers(store, tenant_id, request)
    return JobSpec(command=tuple(body.command), name=body.name or body.command[0].rsplit("/", 1)[-1],
                   env=dict(body.env), workdir=body.workdir, gpus=body.gpus, gpu_milli=body.gpu_milli,
                   gpu_models=body.gpu_models, min_gpu_memory_mib=body.min_gpu_memory_mib,
                   cpu_milli=body.cpu_milli, memory_mib=body.memory_mib, priority=body.priority,
                   user_id=user_id, tenant_id=tenant_id, queue=body.queue,
                   time_limit_s=body.time_limit_s, port=body.port, nodes=body.nodes, schedule_id=schedule_id)


def submit_job(store: StateStore, body: JobSubmit, caller: Principal) -> Job:
    spec = job_spec_for(store, body, caller.tenant_id, caller.user.id if caller.user else None)
    return store.create_job(spec, datetime.now(UTC))


def load_job(store: StateStore, job_id: int, caller: Principal | None = None) -> Job:
    """The job, or NotFoundError, also when it belongs to a tenant the caller may not see."""
    job = store.get_job(job_id)
    if job is None:
        raise NotFoundError("job", str(job_id))
    if caller is not None:
        caller.check_tenant(job.spec.tenant_id, "job", str(job_id))
    return job


def to_out(job: Job, pending_reasons: dict[int, str], tenants: dict[int, str] | None = None,
           pending_info: dict[int, tuple[int, datetime | None]] | None = None) -> JobOut:
    s = job.spec
    pending_reason, position, eta = None, None, None
    if job.state is JobState.PENDING:
        pending_reason = pending_reasons.get(job.id, "waiting for the scheduler")
        position, eta = (pending_info or {}).get(job.id, (None, None))
    return JobOut(
        id=job.id, name=s.name, state=job.state, node=job.node, gpus=list(job.gpu_indices), gpu_count=s.gpus,
        nodes=s.nodes, parts=[{"node": n, "gpus": list(g)} for n, g in job.placed_parts],
        gpu_milli=s.gpu_milli, gpu_model="|".join(s.gpu_models) or None, command=list(s.command), env=dict(s.env),
        workdir=s.workdir, priority=s.priority, exit_code=job.exit_code, reason=job.reason,
        pending_reason=pending_reason, created_at=job.created_at, started_at=job.started_at,
        finished_at=job.finished_at, cancel_requested=job.cancel_requested, attempt=job.attempt,
        tenant=(tenants or {}).get(s.tenant_id) if s.tenant_id else None, queue=s.queue, time_limit_s=s.time_limit_s,
        queue_position=position, eta=eta, preemptions=job.preemptions,
        eta_s=None if eta is None else max((eta - datetime.now(UTC)).total_seconds(), 0.0), port=s.port,
        web_url=f"/proxy/jobs/{job.id}/" if s.port and job.state is JobState.RUNNING else None,
        schedule_id=s.schedule_id,
    )
