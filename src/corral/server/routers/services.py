"""/api/v1/services: long-running services behind the gateway: create, list, show, update, scale, roll back,
delete, their graphs. Members see and change their tenant's services (viewers see them); another tenant's service
is a 404, as if it did not exist."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from corral.api.services import ServiceIn, ServiceOut, ServicePatch, ServiceSampleOut, ServiceScale, TrafficOut
from corral.core.tenancy import Action
from corral.server.auth import Principal, require_user
from corral.server.deps import ServicesDep, StoreDep
from corral.server.services.audit import record_audit
from corral.server.services.job_ui import gateway_base
from corral.server.services.services import (
    create_service,
    delete_service,
    load_service,
    rollback_service,
    scale_service,
    service_out,
    update_service,
)
from corral.server.services.tenancy import known_tenant_names
from corral.store.base import StateStore
from corral.store.records import Job, Service

router = APIRouter(prefix="/api/v1/services", tags=["services"])
User = Annotated[Principal, Depends(require_user)]


def _owner(store: StateStore, user_id: int | None) -> str | None:
    user = store.get_user(user_id) if user_id is not None else None
    return user.name if user else None


def _out(
    request: Request,
    store: StateStore,
    services: ServicesDep,
    s: Service,
    *,
    detail: bool = True,
    replicas: list[Job] | None = None,
) -> ServiceOut:
    """`replicas`: the service's live replica jobs when the caller read them already (a list reads them once)."""
    if replicas is None:
        replicas = store.live_replicas(s.id)
    figures = services.figures(s.id)
    out = service_out(
        s,
        replicas,
        tenant=known_tenant_names(store, (s.tenant_id,)).get(s.tenant_id),
        owner=_owner(store, s.current.get("user_id", s.user_id)),
        ready={j.id: services.readiness.ready(j.id, j.attempt) for j in replicas},
        health={j.id: services.readiness.detail(j.id) for j in replicas},
        traffic=TrafficOut(**figures) if figures else None,
        detail=detail,
    )
    out.endpoint = f"{gateway_base(request)}{out.url}"
    return out


@router.post("", status_code=201, response_model=ServiceOut)
def create(request: Request, body: ServiceIn, caller: User, store: StoreDep, services: ServicesDep) -> ServiceOut:
    """A service of the caller's tenant: its replicas are jobs of the tenant (quotas and fair share count them),
    served by the gateway at /services/NAME/ once their health path answers."""
    caller.require(Action.SUBMIT)
    s = create_service(store, body, caller, datetime.now(UTC), services.rules)
    record_audit(store, caller, "service.create", s.name, f"tenant {s.tenant_id}")
    services.wake()
    return _out(request, store, services, s)


@router.get("", response_model=list[ServiceOut])
def list_services(request: Request, caller: User, store: StoreDep, services: ServicesDep) -> list[ServiceOut]:
    """The caller's tenant's services (admins: every tenant's)."""
    by_service: dict[int, list[Job]] = {}
    for j in store.live_replicas():
        by_service.setdefault(j.spec.service_id or 0, []).append(j)
    return [
        _out(request, store, services, s, detail=False, replicas=by_service.get(s.id, []))
        for s in store.list_services(caller.tenant_scope())
    ]


@router.get("/{name}", response_model=ServiceOut)
def show(request: Request, name: str, caller: User, store: StoreDep, services: ServicesDep) -> ServiceOut:
    return _out(request, store, services, load_service(store, name, caller))


@router.patch("/{name}", response_model=ServiceOut)
def update(
    request: Request, name: str, body: ServicePatch, caller: User, store: StoreDep, services: ServicesDep
) -> ServiceOut:
    """Settings change at once; a change of what replicas run (command, image, env, resources, port, health path)
    is a new revision, rolled out replica by replica (max surge 1, max unavailable 0 by default)."""
    s = load_service(store, name, caller)
    caller.require(Action.SUBMIT)
    updated = update_service(store, s, body, datetime.now(UTC), caller.user.id if caller.user else None, services.rules)
    record_audit(store, caller, "service.update", s.name, f"revision {updated.revision}")
    services.wake()
    return _out(request, store, services, updated)


@router.post("/{name}/scale", response_model=ServiceOut)
def scale(
    request: Request, name: str, body: ServiceScale, caller: User, store: StoreDep, services: ServicesDep
) -> ServiceOut:
    s = load_service(store, name, caller)
    caller.require(Action.SUBMIT)
    updated = scale_service(store, s, body.replicas, datetime.now(UTC))
    record_audit(store, caller, "service.scale", s.name, f"{body.replicas} replicas")
    services.wake()
    return _out(request, store, services, updated)


@router.post("/{name}/rollback", response_model=ServiceOut)
def rollback(request: Request, name: str, caller: User, store: StoreDep, services: ServicesDep) -> ServiceOut:
    """Back to the last revision that completed its rollout."""
    s = load_service(store, name, caller)
    caller.require(Action.SUBMIT)
    updated = rollback_service(store, s, datetime.now(UTC))
    record_audit(store, caller, "service.rollback", s.name, f"revision {updated.revision}")
    services.wake()
    return _out(request, store, services, updated)


@router.delete("/{name}", status_code=204)
def delete(request: Request, name: str, caller: User, store: StoreDep, services: ServicesDep) -> Response:
    """Stops its replicas, then removes it (its name is free again once they stopped)."""
    s = load_service(store, name, caller)
    caller.require(Action.SUBMIT)
    delete_service(store, s, datetime.now(UTC))
    record_audit(store, caller, "service.delete", s.name, "")
    services.wake()
    return Response(status_code=204)


@router.get("/{name}/metrics", response_model=list[ServiceSampleOut])
def metrics(
    name: str,
    caller: User,
    store: StoreDep,
    since_s: Annotated[float, Query(gt=0, le=7 * 86400, description="how far back, in seconds")] = 3600,
) -> list[ServiceSampleOut]:
    """The service's graphs: request rate, error rate, p50/p99 latency (ms) and replicas, a point every 5 s."""
    s = load_service(store, name, caller)
    since = datetime.now(UTC) - timedelta(seconds=since_s)
    return [
        ServiceSampleOut(
            at=at,
            rps=float(d.get("rps") or 0.0),
            error_rate=float(d.get("error_rate") or 0.0),
            p50_ms=d.get("p50_ms"),
            p99_ms=d.get("p99_ms"),
            desired=int(d.get("desired") or 0),
            ready=int(d.get("ready") or 0),
        )
        for at, d in store.service_samples(s.id, since)
    ]
