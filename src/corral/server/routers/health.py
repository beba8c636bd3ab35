"""Liveness: /healthz answers without auth when the store is reachable; /api/v1/status (admins) lists the server
replicas sharing the database and which of them leads."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.concurrency import run_in_threadpool

from corral import __version__
from corral.api.schemas import StatusOut
from corral.core.tenancy import Action
from corral.server.auth import Principal, require_user
from corral.server.deps import ContextDep, StoreDep
from corral.server.services.replicas import compute_status

User = Annotated[Principal, Depends(require_user)]

router = APIRouter()


@router.get("/healthz")
async def healthz(store: StoreDep) -> dict[str, str]:
    await run_in_threadpool(store.count_users)
    return {"status": "ok", "version": __version__}


@router.get("/api/v1/status", response_model=StatusOut, tags=["status"])
def status(caller: User, ctx: ContextDep) -> StatusOut:
    """The server replicas sharing the database and which of them leads (admins)."""
    caller.require(Action.MANAGE_CLUSTER)
    return compute_status(ctx.store, ctx.leadership.id, datetime.now(UTC))
