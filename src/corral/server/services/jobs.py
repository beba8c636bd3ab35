"""Job use-cases: submit (validated against the pool), cancel, describe."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from corral.api.schemas import JobOut, JobSubmit
from corral.autoscaler.demand import TypeFit
from corral.core.arrays import parse_array
from corral.core.containers import check_mounts_allowed
from corral.core.errors import NotFoundError, ValidationError
from corral.core.pools import CLUSTER_KINDS, KUBERNETES, POOL_LABEL, SLURM, STATIC_POOL, PoolSpec
from corral.core.requests import ResourceRequest, model_matches
from corral.core.staging import StagingRules
from corral.core.states import JobState
from corral.server.auth import Principal
from corral.server.services.secrets import check_registry_secret_ref, check_secret_refs
from corral.server.services.staging import check_staging
from corral.store.base import StateStore
from corral.store.protocols import SubmissionStore, TenancyStore
from corral.store.records import Job, JobSpec, Node, Quota


@dataclass(frozen=True, slots=True)
class SubmitRules:
    """What the server's settings allow in a job, wherever it comes from (a submission, a schedule's firing, a
    service's replica): host path prefixes container jobs may mount (CORRAL_ALLOWED_MOUNTS; none: no host mounts)
    and the data-staging rules (CORRAL_STAGE_PATHS, CORRAL_STAGE_S3_ENDPOINTS)."""

    allowed_mounts: tuple[str, ...] = ()
    staging: StagingRules | None = None


NO_SUBMIT_RULES = SubmitRules()


def check_fits_some_node(request: ResourceRequest, nodes: list[Node], gang: int = 1) -> None:
    """Reject a request that no registered node could ever hold (naming the field): it would wait forever.

    With no nodes registered yet the job is accepted and waits: nodes may join later.
    """
    if not nodes:
        return
    _check_host_fits(request, nodes)
    if request.gpus == 0:
        return
    biggest = max(len(n.gpus) for n in nodes)
    if request.gpus > biggest:
        raise ValidationError("gpus", f"{request.gpus} GPUs requested but the largest node has {biggest}")
    if request.gpu_models:
        models = sorted({g.model for n in nodes for g in n.gpus})
        matching = [n for n in nodes if sum(model_matches(g.model, request.gpu_models) for g in n.gpus) >= request.gpus]
        if not matching:
            wanted = "|".join(request.gpu_models)
            raise ValidationError(
                "gpu_model",
                f"no node has {request.gpus} GPU(s) of model {wanted}; models here: {', '.join(models) or 'none'}",
            )
    most_gpu_memory = max((g.memory_mib for n in nodes for g in n.gpus), default=0)
    if request.min_gpu_memory_mib > most_gpu_memory:
        raise ValidationError(
            "min_gpu_memory_mib",
            f"GPUs of {request.min_gpu_memory_mib} MiB requested but the largest GPU has {most_gpu_memory} MiB",
        )
    big_enough = [n for n in nodes if _can_ever_hold(n, request)]
    if not big_enough:
        raise ValidationError(
            "gpus", f"no node has {request.gpus} such GPU(s) together with the CPUs and memory requested"
        )
    if gang > len(big_enough):
        raise ValidationError(
            "nodes",
            f"{gang} nodes with {request.gpus} GPU(s) each requested but the pool has {len(big_enough)} such node(s)",
        )


def _check_host_fits(request: ResourceRequest, nodes: list[Node]) -> None:
    most_memory = max(n.memory_mib for n in nodes)
    if request.memory_mib > most_memory:
        raise ValidationError(
            "memory_mib", f"{request.memory_mib} MiB requested but the largest node has {most_memory} MiB"
        )
    most_cpu = max(n.cpu_milli for n in nodes)
    if request.cpu_milli > most_cpu:
        raise ValidationError(
            "cpu_milli", f"{request.cpu_milli} milli-CPUs requested but the largest node has {most_cpu}"
        )


def _can_ever_hold(node: Node, request: ResourceRequest) -> bool:
    """Whether the empty node could hold the request (GPUs of the model and memory, CPUs, memory)."""
    usable = sum(
        model_matches(g.model, request.gpu_models) and g.memory_mib >= request.min_gpu_memory_mib for g in node.gpus
    )
    return usable >= request.gpus and node.cpu_milli >= request.cpu_milli and node.memory_mib >= request.memory_mib


def compute_quota_models(quotas: Sequence[Quota]) -> tuple[str, ...]:
    """The GPU models a tenant's quotas are limited to: () when it may use any (no quota at all, or a total one)."""
    if not quotas or any(not q.gpu_model for q in quotas):
        return ()
    return tuple(q.gpu_model for q in quotas if q.gpu_model and (q.max_gpus is None or q.max_gpus > 0))


def check_tenant_quota_covers(
    store: TenancyStore, tenant_id: int, request: ResourceRequest, quotas: Sequence[Quota] | None = None
) -> None:
    """A tenant with quotas only for some GPU models may not ask for another model (no flavor, in Kueue's
    words): the job would never be admitted. A tenant with a total quota, or none at all, may ask any; a job
    that names no model runs on the models its tenant's quotas cover (job_spec_for pins them).
    `quotas`: the tenant's, when the caller loaded them already."""
    if request.gpus == 0:
        return
    quotas = store.list_quotas(tenant_id) if quotas is None else quotas
    if not quotas or any(not q.gpu_model for q in quotas):
        return
    covered = compute_quota_models(quotas)
    wanted = request.gpu_models
    ok = (
        any(model_matches(m, (c,)) or model_matches(c, (m,)) for m in wanted for c in covered)
        if wanted
        else bool(covered)
    )
    if not ok:
        asked = "|".join(wanted) or "a GPU"
        raise ValidationError(
            "gpu_model",
            f"the tenant has no quota for {asked}; its quotas cover "
            f"{', '.join(covered) or 'no GPU model (all are at 0)'}" + (" (ask for one of those)" if covered else ""),
        )


@dataclass(frozen=True, slots=True)
class SubmitContext:
    """What checking submissions reads, loaded once for all the submissions of one call (a batch)."""

    queues: frozenset[str]
    nodes: list[Node]
    quotas: list[Quota]
    pools: tuple[PoolSpec, ...] = ()  # cloud pools: a job that fits one of their instance types may wait for it


def load_submit_context(store: SubmissionStore, tenant_id: int) -> SubmitContext:
    # kept by the store until a queue, quota, pool or node shape changes: one small read per submission
    lists = store.read_submit_lists(tenant_id)
    return SubmitContext(
        frozenset(q.name for q in lists.queues),
        lists.nodes,  # fits are judged on nodes' shapes only
        lists.quotas,
        tuple(p.spec for p in lists.pools),
    )


def check_fits_some_node_or_pool(
    request: ResourceRequest, nodes: list[Node], gang: int, pools: Sequence[PoolSpec]
) -> None:
    """check_fits_some_node, except that a request one of the cloud pools could start a node for is accepted (it
    waits for that node); the error names each pool's largest instance type. A job pinned to a pool (its node
    selector `pool=NAME`) is judged against that pool's nodes and instance types only."""
    pinned = dict(request.node_selector).get(POOL_LABEL)
    if pinned == STATIC_POOL:  # the nodes no pool started (none yet: accepted, nodes may join)
        check_fits_some_node(request, [n for n in nodes if n.labels.get(POOL_LABEL, STATIC_POOL) == STATIC_POOL], gang)
        return
    cluster = next((p for p in pools if p.name == pinned and p.kind in CLUSTER_KINDS), None)
    if cluster is not None:  # an existing cluster: can it run this kind of job, and does one of its nodes fit it
        if cluster.kind not in request.tolerations:
            raise ValidationError("pool", f"pool {pinned} is a {cluster.kind} cluster, which cannot run this job "
                                  f"({CLUSTER_RUNS[cluster.kind]}; no staged data or web UI port)")  # fmt: skip
        check_fits_some_node(request, [n for n in nodes if n.labels.get(POOL_LABEL) == pinned], gang)
        return
    if pinned is not None:  # a cloud pool: its instance types say (its nodes are of them)
        mine = [p for p in pools if p.name == pinned]
        fit = TypeFit(mine)
        if not any(fit.fits(p.name, t.name, request) and p.max_nodes >= gang for p in mine for t in p.instance_types):
            largest = "; ".join(t.describe for p in mine if (t := p.largest) is not None) or "none"
            raise ValidationError("gpus", f"no instance type of pool {pinned} fits it (its largest: {largest})")
        return
    try:
        check_fits_some_node(request, nodes, gang)
    except ValidationError as e:
        if not pools:
            raise
        fit = TypeFit(pools)
        if any(fit.fits(p.name, t.name, request) and p.max_nodes >= gang for p in pools for t in p.instance_types):
            return
        largest = "; ".join(f"pool {p.name}: {t.describe}" for p in pools if (t := p.largest) is not None)
        raise ValidationError(e.field, f"{e.problem}, and no cloud pool's instance type fits it ({largest})") from None


CLUSTER_RUNS = {SLURM: "it runs commands, not containers", KUBERNETES: "it runs container jobs of one node"}


def check_pool_ref(pool: str, pools: Sequence[PoolSpec]) -> None:
    if pool and pool != STATIC_POOL and all(p.name != pool for p in pools):
        known = ", ".join([STATIC_POOL, *(p.name for p in pools)])
        raise ValidationError("pool", f"no pool {pool!r}; pools: {known}")


def job_spec_for(
    store: SubmissionStore,
    body: JobSubmit,
    tenant_id: int | None,
    user_id: int | None,
    schedule_id: int | None = None,
    ctx: SubmitContext | None = None,
    rules: SubmitRules = NO_SUBMIT_RULES,
) -> JobSpec:
    """Check a submission against the tenant's queues and quotas and the pool; the spec to store, or
    ValidationError naming the field. `ctx`: the tenant's queues, quotas and the nodes, loaded once per call."""
    if tenant_id is None:
        raise ValidationError("tenant", "the caller belongs to no tenant")
    if ctx is None:
        ctx = load_submit_context(store, tenant_id)
    if body.queue not in ctx.queues:
        raise ValidationError("queue", f"no queue {body.queue!r} in this tenant")
    if body.nodes > 1 and body.gpus == 0:
        raise ValidationError("nodes", "a multi-node job asks for GPUs on each node (--gpus)")
    spec = body.to_spec(tenant_id, user_id, schedule_id)
    pinned = compute_quota_models(ctx.quotas)
    if spec.gpus and not spec.gpu_models and pinned:
        # It names no model and its tenant's quotas cover only some: it runs on those (it could not be
        # admitted on another).
        spec = replace(spec, gpu_models=pinned)
    check_pool_ref(spec.pool, ctx.pools)
    check_fits_some_node_or_pool(spec.request, ctx.nodes, body.nodes, ctx.pools)
    check_tenant_quota_covers(store, tenant_id, spec.request, ctx.quotas)
    check_secret_refs(store, tenant_id, body.secret_env, body.env)  # names only: values are read at hand-over
    if spec.container is not None:  # host paths only under the admin's prefixes (the agent checks links too)
        check_mounts_allowed(spec.container.mounts, rules.allowed_mounts)
        if spec.container.registry_secret:
            check_registry_secret_ref(store, tenant_id, spec.container.registry_secret, spec.container.image)
    check_staging(store, tenant_id, spec, rules.staging)  # shared paths under the tenant's, S3 through its s3 secret
    return spec


def submit_jobs(
    store: StateStore,
    bodies: Sequence[JobSubmit],
    caller: Principal,
    idempotency_key: str | None = None,
    keep_keys: timedelta = timedelta(hours=24),
    max_active: int | None = None,
    rules: SubmitRules = NO_SUBMIT_RULES,
) -> tuple[list[Job], bool]:
    """Several submissions (each one job or an array of tasks), checked each and stored in one transaction: all
    of them or none. (every job made, in order; whether this call made them). With an Idempotency-Key, the same
    key from the same caller with the same bodies returns the jobs the first request made (also after a crash,
    for `keep_keys`); the same key with other bodies raises IdempotencyKeyReused.
    `max_active`: the most pending and running jobs the caller's tenant may have (TooManyRequestsError beyond).
    `rules`: what the server's settings allow (host mounts, staging)."""
    user_id = caller.user.id if caller.user else None
    specs: list[JobSpec] = []
    ctx = load_submit_context(store, caller.tenant_id) if caller.tenant_id is not None else None
    for i, body in enumerate(bodies):
        try:
            spec = job_spec_for(store, body, caller.tenant_id, user_id, ctx=ctx, rules=rules)
        except ValidationError as e:
            raise ValidationError(e.field if len(bodies) == 1 else f"jobs.{i}.{e.field}", e.problem) from None
        if body.array is None:
            specs.append(spec)
        else:  # every task is the checked spec with its own index; `array_id` keys this body's array in the call
            arr = parse_array(body.array)
            specs += [replace(spec, array_id=i, array_index=x, array_limit=arr.limit) for x in arr.indices]
    now = datetime.now(UTC)
    if idempotency_key is None:
        return store.create_jobs(specs, now, max_active), True
    owner = f"user:{caller.user.id}" if caller.user else f"token:{caller.token.id}"
    fingerprint = request_fingerprint(bodies[0]) if len(bodies) == 1 else request_fingerprint_of(bodies)
    return store.create_jobs_once(specs, now, owner, idempotency_key, fingerprint, keep_keys, max_active)


def request_fingerprint(body: JobSubmit) -> str:
    """sha256 of the submission as the API understood it (defaults filled, keys sorted)."""
    return _sha256(_canonical(body))


def request_fingerprint_of(bodies: Sequence[JobSubmit]) -> str:
    """sha256 of a batch of submissions, in order."""
    return _sha256([_canonical(b) for b in bodies])


def _canonical(body: JobSubmit) -> dict[str, Any]:
    # Without `array`, `container_port` and the staging fields when there are none, so a key stored before they
    # existed still matches its retry.
    later = {f for f in ("array", "container_port", "stage_secret") if getattr(body, f) is None}
    later |= {f for f in ("stage_in", "stage_out") if not getattr(body, f)}
    return body.model_dump(mode="json", exclude=later or None)


def _sha256(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def load_job(store: StateStore, job_id: int, caller: Principal | None = None) -> Job:
    """The job, or NotFoundError, also when it belongs to a tenant the caller may not see."""
    job = store.get_job(job_id)
    if job is None:
        raise NotFoundError("job", str(job_id))
    if caller is not None:
        caller.check_tenant(job.spec.tenant_id, "job", str(job_id))
    return job


WAITING_FOR_SCHEDULER = "waiting for the scheduler"  # a job no scheduling pass has looked at yet
CODE_NEW = "new"


def to_out(
    job: Job,
    pending_reasons: dict[int, str],
    tenants: dict[int, str] | None = None,
    pending_info: dict[int, tuple[int, datetime | None]] | None = None,
    pending_codes: dict[int, str] | None = None,
) -> JobOut:
    pending_reason, pending_code, position, eta = None, None, None, None
    if job.state is JobState.PENDING:
        pending_reason = pending_reasons.get(job.id, WAITING_FOR_SCHEDULER)
        pending_code = (pending_codes or {}).get(job.id, CODE_NEW if job.id not in pending_reasons else None)
        position, eta = (pending_info or {}).get(job.id, (None, None))
    tenant = (tenants or {}).get(job.spec.tenant_id) if job.spec.tenant_id else None
    return JobOut.from_job(
        job,
        datetime.now(UTC),
        pending_reason=pending_reason,
        pending_code=pending_code,
        position=position,
        eta=eta,
        tenant=tenant,
    )
