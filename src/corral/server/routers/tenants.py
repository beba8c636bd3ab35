"""/api/v1/tenants: tenants, their quotas and queues."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from corral.api.schemas import QueueIn, QueueOut, QuotaIn, QuotaOut, TenantIn, TenantOut
from corral.server.auth import Principal, require_user
from corral.server.services import tenancy

router = APIRouter(prefix="/api/v1", tags=["tenants"])
User = Annotated[Principal, Depends(require_user)]


@router.get("/tenants", response_model=list[TenantOut])
def list_tenants(request: Request, caller: User) -> list[TenantOut]:
    return tenancy.list_tenants(request.app.state.store, caller)


@router.post("/tenants", status_code=201, response_model=TenantOut)
def create_tenant(body: TenantIn, request: Request, caller: User) -> TenantOut:
    return tenancy.create_tenant(request.app.state.store, caller, body)


@router.get("/quotas", response_model=list[QuotaOut])
def list_quotas(request: Request, caller: User, tenant: str | None = None) -> list[QuotaOut]:
    return tenancy.list_quotas(request.app.state.store, caller, tenant)


@router.put("/tenants/{tenant}/quotas", response_model=QuotaOut)
def set_quota(tenant: str, body: QuotaIn, request: Request, caller: User) -> QuotaOut:
    out = tenancy.set_quota(request.app.state.store, caller, tenant, body)
    request.app.state.scheduler.trigger.fire()
    return out


@router.delete("/tenants/{tenant}/quotas", status_code=204)
def delete_quota(tenant: str, request: Request, caller: User,
                 gpu_model: Annotated[str, Query(max_length=128)] = "") -> Response:
    tenancy.delete_quota(request.app.state.store, caller, tenant, gpu_model)
    request.app.state.scheduler.trigger.fire()
    return Response(status_code=204)


@router.get("/queues", response_model=list[QueueOut])
def list_queues(request: Request, caller: User, tenant: str | None = None) -> list[QueueOut]:
    return tenancy.list_queues(request.app.state.store, caller, tenant)


@router.put("/tenants/{tenant}/queues", response_model=QueueOut)
def set_queue(tenant: str, body: QueueIn, request: Request, caller: User) -> QueueOut:
    return tenancy.set_queue(request.app.state.store, caller, tenant, body)
