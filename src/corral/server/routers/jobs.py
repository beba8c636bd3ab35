"""/api/v1/jobs: submit, list, show, cancel, logs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from corral.core.states import JobState
from corral.server.auth import Principal, require_user
from corral.server.schemas import JobOut, JobSubmit
from corral.server.services.jobs import load_job, submit_job, to_out

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])
User = Annotated[Principal, Depends(require_user)]


@router.post("", status_code=201, response_model=JobOut)
def create_job(body: JobSubmit, request: Request, principal: User) -> JobOut:
    app = request.app
    job = submit_job(app.state.store, body, principal.user.id if principal.user else None)
    app.state.scheduler.trigger.fire()
    return to_out(job, app.state.scheduler.pending_reasons)


@router.get("", response_model=list[JobOut])
def list_jobs(request: Request, _: User, all: bool = False,
              state: Annotated[list[JobState] | None, Query()] = None) -> list[JobOut]:
    states = state or (None if all else [JobState.PENDING, JobState.RUNNING])
    jobs = request.app.state.store.list_jobs(states=states)
    return [to_out(j, request.app.state.scheduler.pending_reasons) for j in jobs]


@router.get("/{job_id}", response_model=JobOut)
def get_job(job_id: int, request: Request, _: User) -> JobOut:
    return to_out(load_job(request.app.state.store, job_id), request.app.state.scheduler.pending_reasons)


@router.get("/{job_id}/events")
def job_events(job_id: int, request: Request, _: User) -> list[dict[str, str]]:
    store = request.app.state.store
    load_job(store, job_id)
    return [{"at": e.at.isoformat(), "kind": e.kind, "message": e.message} for e in store.list_events(job_id)]


@router.post("/{job_id}/cancel", response_model=JobOut)
def cancel_job(job_id: int, request: Request, _: User) -> JobOut:
    from datetime import UTC, datetime

    app = request.app
    load_job(app.state.store, job_id)
    job = app.state.store.request_cancel(job_id, datetime.now(UTC))
    if job.node and not job.state.terminal:
        app.state.notifier.notify(job.node)
    app.state.scheduler.trigger.fire()
    return to_out(job, app.state.scheduler.pending_reasons)


@router.get("/{job_id}/logs")
def job_logs(job_id: int, request: Request, _: User, offset: Annotated[int, Query(ge=0)] = 0) -> Response:
    """Log bytes from `offset`. Headers: X-Log-Size (bytes held), X-Job-State (the job's state)."""
    job = load_job(request.app.state.store, job_id)
    logs = request.app.state.logs
    data = logs.read(job_id, offset)
    return Response(content=data, media_type="text/plain; charset=utf-8",
                    headers={"X-Log-Size": str(logs.size(job_id)), "X-Job-State": job.state.value})
