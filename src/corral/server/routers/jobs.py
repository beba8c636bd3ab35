"""/api/v1/jobs: submit, list, show, cancel, logs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated

from fastapi import APIRouter, BackgroundTasks, Depends, Query, Request, Response
from fastapi.responses import PlainTextResponse

from corral.api.bounds import MAX_ID
from corral.api.schemas import JobBatch, JobOut, JobSubmit
from corral.core.errors import NotFoundError
from corral.core.states import JobState
from corral.core.tenancy import Action
from corral.server.auth import Principal, require_user
from corral.server.context import context_of
from corral.server.deps import LogsDep, NotifierDep, SchedulerDep, SettingsDep, StoreDep
from corral.server.params import Id, IdempotencyKey, Offset
from corral.server.services.job_ui import job_out
from corral.server.services.jobs import load_job, submit_jobs
from corral.server.services.tenancy import known_tenant_names

if TYPE_CHECKING:
    from corral.server.services.notify import Trigger
    from corral.server.settings import Settings
    from corral.store.base import StateStore
    from corral.store.records import Job

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])
User = Annotated[Principal, Depends(require_user)]


@router.post("", status_code=201, response_model=JobOut)
def create_job(
    body: JobSubmit,
    request: Request,
    response: Response,
    caller: User,
    store: StoreDep,
    sched: SchedulerDep,
    settings: SettingsDep,
    after: BackgroundTasks,
    idempotency_key: IdempotencyKey = None,
) -> JobOut:
    """Submit a job (with `array`, a job array: answers its first task, whose id is the array's id). With
    `Idempotency-Key`, a retry (same key, same body, same caller) returns the job the first
    request made, marked `Idempotent-Replayed: true`; the same key with another body is refused (422)."""
    jobs = _submit([body], response, caller, store, sched.trigger, settings, idempotency_key, after)
    with wake_if_failing(sched.trigger):
        return job_out(request, store, sched, jobs[0])


@router.post("/batch", status_code=201, response_model=list[JobOut])
def create_jobs(
    body: JobBatch,
    request: Request,
    response: Response,
    caller: User,
    store: StoreDep,
    sched: SchedulerDep,
    settings: SettingsDep,
    after: BackgroundTasks,
    idempotency_key: IdempotencyKey = None,
) -> list[JobOut]:
    """Submit several jobs (each may be an array) in one call: every one is checked, then all are stored in one
    transaction, or none (the error names `jobs.N.field`). Answers every job made, arrays' tasks included, in
    order. `Idempotency-Key` works as for a single submission."""
    jobs = _submit(body.jobs, response, caller, store, sched.trigger, settings, idempotency_key, after)
    with wake_if_failing(sched.trigger):
        names = known_tenant_names(store, {j.spec.tenant_id for j in jobs})
        return [job_out(request, store, sched, j, names) for j in jobs]


def _submit(
    bodies: list[JobSubmit],
    response: Response,
    caller: Principal,
    store: StateStore,
    trigger: Trigger,
    settings: Settings,
    idempotency_key: str | None,
    after: BackgroundTasks,
) -> list[Job]:
    """Both submit routes: check the role, store (or replay) the jobs, wake the scheduler once the answer is sent
    (wake_after) or mark the replay."""
    caller.require(Action.SUBMIT)
    keep = timedelta(seconds=settings.idempotency_key_ttl_s)
    jobs, created = submit_jobs(
        store,
        bodies,
        caller,
        idempotency_key,
        keep,
        settings.max_active_jobs_per_tenant,
        rules=settings.submit_rules,
    )
    if created:
        wake_after(after, trigger)
    else:
        response.headers["Idempotent-Replayed"] = "true"
    return jobs


def wake_after(after: BackgroundTasks, trigger: Trigger) -> None:
    """Wake the scheduler once the answer has been sent, not while it is being made: a pass woken in this process
    takes the interpreter from the request that woke it (a submission's answer took 11.2 ms against 7.2 ms with the
    wake held back, `corral up`, idle). The job is stored by now; were the wake lost (the task not run), the next
    periodic pass (CORRAL_SCHEDULE_INTERVAL_S) places it."""

    async def wake() -> None:  # async: run on the event loop, no hop to the thread pool
        trigger.fire()

    after.add_task(wake)


@contextmanager
def wake_if_failing(trigger: Trigger) -> Iterator[None]:
    """Around what follows wake_after: the change is stored, so when its answer cannot be made (an error, then a
    500, and FastAPI runs no background task) the scheduler is woken at once instead."""
    try:
        yield
    except BaseException:
        trigger.fire()
        raise


DEFAULT_PAGE = 500  # jobs in one answer unless `limit` says otherwise (kubectl's chunk size)


@router.get("", response_model=list[JobOut])
def list_jobs(
    request: Request,
    response: Response,
    caller: User,
    store: StoreDep,
    sched: SchedulerDep,
    all: bool = False,
    state: Annotated[list[JobState] | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=10_000, description="at most this many jobs (a page)")] = DEFAULT_PAGE,
    before_id: Annotated[int | None, Query(ge=1, le=MAX_ID, description="page: only jobs with a smaller id")] = None,
    after_id: Annotated[int | None, Query(ge=0, le=MAX_ID, description="page: only jobs with a larger id")] = None,
    newest_first: bool = False,
    node: Annotated[str | None, Query(max_length=255)] = None,
    array_id: Annotated[int | None, Query(ge=1, le=MAX_ID, description="only the tasks of this job array")] = None,
    tenant: Annotated[str | None, Query(min_length=1, max_length=64, description="only this tenant's jobs")] = None,
    user: Annotated[str | None, Query(min_length=1, max_length=64, description="only this user's jobs")] = None,
    name: Annotated[str | None, Query(max_length=255, description="only jobs whose name holds this text")] = None,
) -> Response:
    """Pending and running jobs (`all=true`: every job), of the caller's tenant (admins: of all), oldest first
    (`newest_first=true`: newest first), at most `limit` (default 500) per answer. `tenant`, `user` and `name`
    narrow the list (an unknown tenant or user matches no job).

    Pages: when more may follow, the answer carries `Link: <next page>; rel="next"` (the same query with
    `after_id`, or `before_id` when newest first, = the last id of this page). `X-Total-Count` counts all
    matches.
    """
    states = state or (None if all else [JobState.PENDING, JobState.RUNNING])
    who = _filter_ids(store, caller, tenant, user)
    if who is None:  # the filter names a tenant or user the caller cannot see: nothing matches
        response.headers["X-Total-Count"] = "0"
        return Response(b"[]", media_type="application/json", headers=dict(response.headers))
    tenant_id, user_id = who
    jobs = store.list_jobs(
        states=states,
        tenant_id=tenant_id,
        limit=limit,
        newest_first=newest_first,
        before_id=before_id,
        after_id=after_id,
        node=node,
        array_id=array_id,
        user_id=user_id,
        name_contains=name or None,
    )
    total = store.count_jobs(
        states=states, tenant_id=tenant_id, user_id=user_id, name_contains=name or None, node=node, array_id=array_id
    )
    response.headers["X-Total-Count"] = str(total)
    if len(jobs) == limit:
        cursor = {"before_id": jobs[-1].id} if newest_first else {"after_id": jobs[-1].id}
        nxt = request.url.include_query_params(**cursor)
        response.headers["Link"] = f'<{nxt.path}?{nxt.query}>; rel="next"'
    names = known_tenant_names(store, {j.spec.tenant_id for j in jobs})
    # the JSON of each job kept while nothing it is made of changes (services/job_ui.JobPages): the same bytes as
    # the list of JobOut would give, without building 500 models a page
    body = context_of(request.app).job_pages.json(request, store, sched, jobs, names)
    return Response(body, media_type="application/json", headers=dict(response.headers))


def _filter_ids(
    store: StateStore, caller: Principal, tenant: str | None, user: str | None
) -> tuple[int | None, int | None] | None:
    """(tenant id, user id) to filter by, the caller's own tenant for a non-admin; None when a named tenant or user
    does not exist or lies outside the caller's tenant (another tenant's existence is private)."""
    scope = caller.tenant_scope()
    tenant_id, user_id = scope, None
    if tenant is not None:
        found = store.find_tenant(tenant)
        if found is None or (scope is not None and found.id != scope):
            return None
        tenant_id = found.id
    if user is not None:
        person = store.find_user(user)
        if person is None or (scope is not None and person.tenant_id != scope):
            return None
        user_id = person.id
    return tenant_id, user_id


@router.get("/{job_id}", response_model=JobOut)
def get_job(job_id: Id, request: Request, caller: User, store: StoreDep, sched: SchedulerDep) -> JobOut:
    return job_out(request, store, sched, load_job(store, job_id, caller))


@router.get("/{job_id}/events")
def job_events(job_id: Id, caller: User, store: StoreDep) -> list[dict[str, str]]:
    load_job(store, job_id, caller)
    return [{"at": e.at.isoformat(), "kind": e.kind, "message": e.message} for e in store.list_events(job_id)]


@router.post("/{job_id}/cancel", response_model=JobOut)
def cancel_job(
    job_id: Id,
    request: Request,
    caller: User,
    store: StoreDep,
    sched: SchedulerDep,
    notifier: NotifierDep,
    after: BackgroundTasks,
) -> JobOut:
    load_job(store, job_id, caller)
    caller.require(Action.SUBMIT)
    job = store.request_cancel(job_id, datetime.now(UTC))
    if job is None:  # deleted since load_job saw it
        raise NotFoundError("job", str(job_id))
    if job.node and not job.state.terminal:
        notifier.notify(job.node)
    wake_after(after, sched.trigger)
    with wake_if_failing(sched.trigger):
        return job_out(request, store, sched, job)


@router.get("/{job_id}/logs", response_class=PlainTextResponse)
def job_logs(
    job_id: Id,
    caller: User,
    store: StoreDep,
    logs: LogsDep,
    offset: Offset = 0,
    rank: Annotated[int, Query(ge=0, le=1024, description="part of a multi-node job")] = 0,
) -> Response:
    """Log bytes from `offset` (every attempt, in order). Headers: X-Log-Size (bytes held), X-Job-State,
    X-Log-Runs (`attempt=bytes` of each attempt's run log, oldest first, comma-separated: the newest 100)."""
    job = load_job(store, job_id, caller)
    data = logs.read(job_id, offset, rank=rank)
    runs = logs.run_sizes(job_id, rank)
    return Response(
        content=data,
        media_type="text/plain; charset=utf-8",
        headers={
            "X-Log-Size": str(sum(n for _, n in runs)),
            "X-Log-Runs": ",".join(f"{attempt}={n}" for attempt, n in runs[-100:]),
            "X-Job-State": job.state.value,
        },
    )
