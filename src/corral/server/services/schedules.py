"""Repeating jobs: the use-cases behind /api/v1/schedules and the runner thread that fires them.

The timing rules are pure (corral.core.schedules); the store applies each firing in one transaction
(compare-and-set on the due time, job inserted alongside), so a crash or a second server never starts a
firing twice and never loses one: a schedule that was due while the server was down fires once when it is
back (the missed times are counted).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from corral.api.schemas import JobSubmit, ScheduleIn, ScheduleOut, SchedulePatch
from corral.core.errors import CorralError, NotFoundError, ValidationError
from corral.core.schedules import ConcurrencyPolicy, ScheduleExpr, plan_firing
from corral.server.auth import Principal
from corral.server.background.schedules import ScheduleLoop
from corral.server.services.jobs import NO_SUBMIT_RULES, SubmitRules, job_spec_for
from corral.server.services.notify import NodeNotifier, Trigger
from corral.store.protocols import SchedulesStore
from corral.store.records import Job, Schedule

log = logging.getLogger("corral.schedules")
UPCOMING = 3


def _expr(s: Schedule) -> ScheduleExpr:
    return ScheduleExpr.parse(s.expr, s.timezone)


def load_schedule(store: SchedulesStore, schedule_id: int, caller: Principal | None = None) -> Schedule:
    """The schedule, or NotFoundError, also when it belongs to a tenant the caller may not see."""
    s = store.get_schedule(schedule_id)
    if s is None:
        raise NotFoundError("schedule", str(schedule_id))
    if caller is not None:
        caller.check_tenant(s.tenant_id, "schedule", str(schedule_id))
    return s


def _job_body(body: JobSubmit) -> dict[str, Any]:
    return body.model_dump(exclude_defaults=True)


def _nested(e: ValidationError) -> ValidationError:
    """A job field's error, named as the API body names it (`job.gpus`)."""
    return ValidationError(f"job.{e.field}", e.problem)


def create_schedule(
    store: SchedulesStore, body: ScheduleIn, caller: Principal, now: datetime, rules: SubmitRules = NO_SUBMIT_RULES
) -> Schedule:
    """A schedule whose job is checked as a submission would be (`rules`: what the server's settings allow)."""
    expr = ScheduleExpr.parse(body.schedule, body.timezone)
    user_id = caller.user.id if caller.user else None
    try:
        spec = job_spec_for(store, body.job, caller.tenant_id, user_id, rules=rules)
    except ValidationError as e:
        raise (e if e.field == "tenant" else _nested(e)) from None
    name = body.name.strip() or spec.name
    assert caller.tenant_id is not None  # job_spec_for refused a caller without a tenant
    return store.create_schedule(
        caller.tenant_id,
        user_id,
        name,
        expr.text,
        body.timezone,
        body.concurrency,
        body.paused,
        _job_body(body.job),
        expr.next_after(now, anchor=now),
        now,
    )


def update_schedule(
    store: SchedulesStore,
    schedule: Schedule,
    body: SchedulePatch,
    now: datetime,
    author: int | None = None,
    rules: SubmitRules = NO_SUBMIT_RULES,
) -> Schedule:
    """A change of the job it runs makes `author` (the caller) its owner: its jobs run as whoever last said what they
    run, never as a member who did not (their Unix identity)."""
    changes: dict[str, Any] = {}
    expr_text = body.schedule if body.schedule is not None else schedule.expr
    tz = body.timezone if body.timezone is not None else schedule.timezone
    expr = ScheduleExpr.parse(expr_text, tz)
    if body.schedule is not None or body.timezone is not None:
        changes.update(expr=expr.text, timezone=tz, next_run_at=expr.next_after(now, anchor=schedule.created_at))
    if body.paused is not None and body.paused != schedule.paused:
        changes["paused"] = body.paused
        if not body.paused:  # resuming: no catch-up of the paused time, the next firing after now
            changes["next_run_at"] = expr.next_after(now, anchor=schedule.created_at)
    if body.concurrency is not None:
        changes["concurrency"] = body.concurrency
    if body.name is not None:
        changes["name"] = body.name.strip()
    if body.job is not None:
        try:
            job_spec_for(store, body.job, schedule.tenant_id, schedule.user_id, rules=rules)
        except ValidationError as e:
            raise _nested(e) from None
        changes["job"] = _job_body(body.job)
        if author is not None:
            changes["user_id"] = author
    if not changes:
        return schedule
    updated = store.update_schedule(schedule.id, **changes)
    if updated is None:
        raise NotFoundError("schedule", str(schedule.id))
    return updated


def schedule_out(s: Schedule, names: dict[int, str], active: list[int], now: datetime) -> ScheduleOut:
    expr = _expr(s)
    upcoming = [] if s.paused else [s.next_run_at, *expr.upcoming(max(s.next_run_at, now), UPCOMING - 1, s.created_at)]
    return ScheduleOut(
        id=s.id,
        name=s.name,
        tenant=names.get(s.tenant_id),
        schedule=s.expr,
        timezone=s.timezone,
        description=expr.describe(),
        concurrency=s.concurrency,
        paused=s.paused,
        job=s.job,
        created_at=s.created_at,
        next_run_at=None if s.paused else s.next_run_at,
        upcoming=upcoming,
        last_run_at=s.last_run_at,
        last_job_id=s.last_job_id,
        active_job_ids=active,
        runs=s.runs,
        skipped=s.skipped,
        missed=s.missed,
        last_skip_reason=s.last_error,
    )


def run_now(store: SchedulesStore, schedule: Schedule, now: datetime, rules: SubmitRules = NO_SUBMIT_RULES) -> Job:
    """Start the schedule's job once, now, outside its timetable (like `kubectl create job --from=cronjob/...`)."""
    try:
        spec = job_spec_for(
            store, JobSubmit(**schedule.job), schedule.tenant_id, schedule.user_id, schedule.id, rules=rules
        )
    except ValidationError as e:
        raise _nested(e) from None
    applied, job = store.fire_schedule(schedule.id, None, spec, None, now)
    if not applied or job is None:
        raise NotFoundError("schedule", str(schedule.id))
    return job


class ScheduleRunner:
    """Fires due schedules: `run_due` once, or start()/stop() its loop (server/background/schedules.py), which polls
    the store at most every `interval_s` and sleeps until the next due time otherwise; `wake()` after a schedule
    was created or changed."""

    def __init__(
        self,
        store: SchedulesStore,
        trigger: Trigger,
        notifier: NodeNotifier,
        interval_s: float = 1.0,
        rules: SubmitRules = NO_SUBMIT_RULES,
    ) -> None:
        self.store = store
        self.rules = rules  # what the server's settings allow in a job (host mounts, staging): firings check with it
        self.trigger = trigger  # the job scheduler's: a started job is placed at once
        self.notifier = notifier
        self.interval_s = interval_s
        self.loop = ScheduleLoop(self, interval_s)

    def start(self) -> None:
        self.loop.start()

    def stop(self) -> None:
        self.loop.stop()

    def wake(self) -> None:
        self.loop.wake()

    def next_due(self) -> datetime | None:
        return self.store.next_schedule_due()

    def run_due(self, now: datetime) -> list[Job]:
        """Fire every due schedule once; returns the jobs started."""
        started: list[Job] = []
        for s in self.store.due_schedules(now):
            try:
                job = self.fire(s, now)
            except Exception:  # one broken schedule must not stop the others
                log.exception("schedule %s could not fire", s.id)
                continue
            if job is not None:
                started.append(job)
        if started:
            self.trigger.fire()
        return started

    def fire(self, s: Schedule, now: datetime) -> Job | None:
        expr = _expr(s)
        active = self.store.active_schedule_jobs(schedule_id=s.id).get(s.id, [])
        firing = plan_firing(expr, ConcurrencyPolicy(s.concurrency), s.next_run_at, now, active, s.created_at)
        spec, skip = None, firing.skip_reason
        if firing.start:
            try:
                spec = job_spec_for(self.store, JobSubmit(**s.job), s.tenant_id, s.user_id, s.id, rules=self.rules)
            except (CorralError, ValueError) as e:  # e.g. its queue was deleted, or its GPU model left the pool
                skip = f"skipped: the job is no longer valid: {getattr(e, 'message', e)}"
        applied, job = self.store.fire_schedule(s.id, s.next_run_at, spec, firing.next_run_at, now, firing.missed, skip)
        if not applied:
            return None  # someone else fired or changed it meanwhile
        if firing.missed:
            log.warning(
                "schedule %s (%s): %d firing(s) missed while the server was down or behind", s.id, s.name, firing.missed
            )
        if job is None:
            log.info("schedule %s (%s): %s", s.id, s.name, skip)
            return None
        late = (now - s.next_run_at).total_seconds()
        self.store.add_event(
            job.id,
            "scheduled",
            f"schedule {s.id} ({s.name}) due at {s.next_run_at:%Y-%m-%d %H:%M:%S}Z"
            + (f", started {late:.1f} s late" if late >= 1 else ""),
            now,
        )
        for old in firing.cancel:
            cancelled = self.store.request_cancel(old, now)
            self.store.add_event(old, "replaced", f"replaced by job {job.id} of schedule {s.id}", now)
            if cancelled is not None and cancelled.node and not cancelled.state.terminal:
                self.notifier.notify(cancelled.node)
        return job
