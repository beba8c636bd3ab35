"""Liveness: /healthz answers without auth when the store is reachable."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool

from corral import __version__

router = APIRouter()


@router.get("/healthz")
async def healthz(request: Request) -> dict[str, str]:
    await run_in_threadpool(request.app.state.store.count_users)
    return {"status": "ok", "version": __version__}
