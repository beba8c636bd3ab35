"""/api/v1/tenants: tenants, their quotas and queues."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response

from corral.api.schemas import QueueIn, QueueOut, QuotaIn, QuotaOut, TenantIn, TenantOut
from corral.server.auth import Principal, require_user
from corral.server.deps import SchedulerDep, StoreDep
from corral.server.services import tenancy

router = APIRouter(prefix="/api/v1", tags=["tenants"])
User = Annotated[Principal, Depends(require_user)]


@router.get("/tenants", response_model=list[TenantOut])
def list_tenants(caller: User, store: StoreDep) -> list[TenantOut]:
    return tenancy.list_tenants(store, caller)


@router.post("/tenants", status_code=201, response_model=TenantOut)
def create_tenant(body: TenantIn, caller: User, store: StoreDep) -> TenantOut:
    return tenancy.create_tenant(store, caller, body)


@router.get("/quotas", response_model=list[QuotaOut])
def list_quotas(caller: User, store: StoreDep, tenant: str | None = None) -> list[QuotaOut]:
    return tenancy.list_quotas(store, caller, tenant)


@router.put("/tenants/{tenant}/quotas", response_model=QuotaOut)
def set_quota(tenant: str, body: QuotaIn, caller: User, store: StoreDep, sched: SchedulerDep) -> QuotaOut:
    out = tenancy.set_quota(store, caller, tenant, body)
    sched.trigger.fire()
    return out


@router.delete("/tenants/{tenant}/quotas", status_code=204)
def delete_quota(
    tenant: str,
    caller: User,
    store: StoreDep,
    sched: SchedulerDep,
    gpu_model: Annotated[str, Query(max_length=128)] = "",
) -> Response:
    tenancy.delete_quota(store, caller, tenant, gpu_model)
    sched.trigger.fire()
    return Response(status_code=204)


@router.get("/queues", response_model=list[QueueOut])
def list_queues(caller: User, store: StoreDep, tenant: str | None = None) -> list[QueueOut]:
    return tenancy.list_queues(store, caller, tenant)


@router.put("/tenants/{tenant}/queues", response_model=QueueOut)
def set_queue(tenant: str, body: QueueIn, caller: User, store: StoreDep) -> QueueOut:
    return tenancy.set_queue(store, caller, tenant, body)
