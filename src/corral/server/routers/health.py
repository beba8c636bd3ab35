"""Liveness: /healthz answers without auth when the store is reachable."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool

from corral import __version__
from corral.server.deps import StoreDep

router = APIRouter()


@router.get("/healthz")
async def healthz(store: StoreDep) -> dict[str, str]:
    await run_in_threadpool(store.count_users)
    return {"status": "ok", "version": __version__}
