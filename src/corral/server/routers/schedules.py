"""/api/v1/schedules: repeating jobs (cron lines, nicknames, @every), paused, resumed, run now, deleted."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from corral.api.schemas import JobOut, ScheduleIn, ScheduleOut, SchedulePatch
from corral.core.tenancy import Action
from corral.server.auth import Principal, require_user
from corral.server.deps import SchedulerDep, SchedulesDep, StoreDep
from corral.server.params import Id
from corral.server.services.job_ui import job_out
from corral.server.services.schedules import create_schedule, load_schedule, run_now, schedule_out, update_schedule
from corral.server.services.tenancy import tenant_names
from corral.store.base import StateStore
from corral.store.records import Schedule

router = APIRouter(prefix="/api/v1/schedules", tags=["schedules"])
User = Annotated[Principal, Depends(require_user)]


def _one(store: StateStore, s: Schedule) -> ScheduleOut:
    active = store.active_schedule_jobs(schedule_id=s.id).get(s.id, [])
    return schedule_out(s, tenant_names(store), active, datetime.now(UTC))


@router.post("", status_code=201, response_model=ScheduleOut)
def create(body: ScheduleIn, caller: User, store: StoreDep, schedules: SchedulesDep) -> ScheduleOut:
    """A repeating job. Its `job` is checked like POST /api/v1/jobs (errors name `job.FIELD`)."""
    caller.require(Action.SUBMIT)
    s = create_schedule(store, body, caller, datetime.now(UTC), schedules.rules)
    schedules.wake()
    return _one(store, s)


@router.get("", response_model=list[ScheduleOut])
def list_schedules(caller: User, store: StoreDep) -> list[ScheduleOut]:
    """The caller's tenant's schedules (admins: every tenant's)."""
    scope = caller.tenant_scope()
    active = store.active_schedule_jobs(scope)
    names, now = tenant_names(store), datetime.now(UTC)
    return [schedule_out(s, names, active.get(s.id, []), now) for s in store.list_schedules(scope)]


@router.get("/{schedule_id}", response_model=ScheduleOut)
def get_schedule(schedule_id: Id, caller: User, store: StoreDep) -> ScheduleOut:
    return _one(store, load_schedule(store, schedule_id, caller))


@router.patch("/{schedule_id}", response_model=ScheduleOut)
def patch_schedule(
    schedule_id: Id, body: SchedulePatch, caller: User, store: StoreDep, schedules: SchedulesDep
) -> ScheduleOut:
    """Change when or what it runs; `paused: true|false` pauses or resumes (no catch-up of the paused time)."""
    s = load_schedule(store, schedule_id, caller)
    caller.require(Action.SUBMIT)
    author = caller.user.id if caller.user else None
    updated = update_schedule(store, s, body, datetime.now(UTC), author, schedules.rules)
    schedules.wake()
    return _one(store, updated)


@router.delete("/{schedule_id}", status_code=204)
def delete_schedule(schedule_id: Id, caller: User, store: StoreDep) -> Response:
    """No more firings; jobs it already started run on (cancel them separately)."""
    load_schedule(store, schedule_id, caller)
    caller.require(Action.SUBMIT)
    store.delete_schedule(schedule_id)
    return Response(status_code=204)


@router.post("/{schedule_id}/run", status_code=201, response_model=JobOut)
def run_schedule_now(
    schedule_id: Id, request: Request, caller: User, store: StoreDep, sched: SchedulerDep, schedules: SchedulesDep
) -> JobOut:
    """Start its job once now, outside the timetable (the timetable is unchanged)."""
    s = load_schedule(store, schedule_id, caller)
    caller.require(Action.SUBMIT)
    job = run_now(store, s, datetime.now(UTC), schedules.rules)
    sched.trigger.fire()
    return job_out(request, store, sched, job)


@router.get("/{schedule_id}/jobs", response_model=list[JobOut])
def schedule_jobs(
    schedule_id: Id,
    request: Request,
    caller: User,
    store: StoreDep,
    sched: SchedulerDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> list[JobOut]:
    """Its jobs, newest first."""
    load_schedule(store, schedule_id, caller)
    jobs = store.list_jobs(schedule_id=schedule_id, newest_first=True, limit=max(1, min(limit, 1000)))
    return [job_out(request, store, sched, j) for j in jobs]
