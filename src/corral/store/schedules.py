"""Repeating-job schedules in SQL: the schedules half of SqlStore (a mixin).

A firing is one transaction: the schedule's `next_run_at` is compare-and-set from the due time the caller saw,
and the job it starts is inserted in the same transaction. Two servers (or a retry after a crash) therefore
never start the same firing twice, and a crash between "decide" and "write" starts nothing and loses nothing:
the schedule is still due and fires on the next pass.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from corral.core.errors import ConflictError
from corral.core.states import JobState
from corral.store.records import Job, JobSpec, Schedule
from corral.store.tables import JobRow, ScheduleRow
from corral.store.tenancy import utc

UPDATABLE = {"name", "expr", "timezone", "concurrency", "paused", "job", "next_run_at", "last_error", "user_id"}


def to_schedule(r: ScheduleRow) -> Schedule:
    return Schedule(
        id=r.id,
        tenant_id=r.tenant_id,
        name=r.name,
        expr=r.expr,
        timezone=r.timezone,
        concurrency=r.concurrency,
        paused=bool(r.paused),
        job=dict(r.job or {}),
        created_at=utc(r.created_at) or r.created_at,
        next_run_at=utc(r.next_run_at) or r.next_run_at,
        user_id=r.user_id,
        last_run_at=utc(r.last_run_at),
        last_job_id=r.last_job_id,
        runs=r.runs or 0,
        skipped=r.skipped or 0,
        missed=r.missed or 0,
        last_error=r.last_error or "",
    )


class ScheduleMethods:
    """Every method is one transaction (see corral.store.base for the contracts)."""

    def _tx(self) -> AbstractContextManager[Session]:  # provided by SqlStore
        raise NotImplementedError

    def _rmw(self) -> AbstractContextManager[Session]:  # provided by SqlStore
        raise NotImplementedError

    _insert_job: Callable[[Session, JobSpec, datetime], Any]  # sql._JobColumns
    _to_job: Callable[[Any], Job]

    def create_schedule(
        self,
        tenant_id: int,
        user_id: int | None,
        name: str,
        expr: str,
        timezone: str,
        concurrency: str,
        paused: bool,
        job: dict[str, Any],
        next_run_at: datetime,
        now: datetime,
    ) -> Schedule:
        """Raises ConflictError (field `name`) when the tenant already has a schedule of that name."""
        try:
            with self._tx() as s:
                row = ScheduleRow(
                    tenant_id=tenant_id,
                    user_id=user_id,
                    name=name,
                    expr=expr,
                    timezone=timezone,
                    concurrency=concurrency,
                    paused=paused,
                    job=job,
                    created_at=now,
                    next_run_at=next_run_at,
                    runs=0,
                    skipped=0,
                    missed=0,
                    last_error="",
                )
                s.add(row)
                s.flush()
                return to_schedule(row)
        except IntegrityError as e:
            raise ConflictError(f"a schedule named {name!r} already exists in this tenant", field="name") from e

    def get_schedule(self, schedule_id: int) -> Schedule | None:
        with self._tx() as s:
            row = s.get(ScheduleRow, schedule_id)
            return to_schedule(row) if row else None

    def list_schedules(self, tenant_id: int | None = None) -> list[Schedule]:
        with self._tx() as s:
            q = select(ScheduleRow).order_by(ScheduleRow.id)
            if tenant_id is not None:
                q = q.where(ScheduleRow.tenant_id == tenant_id)
            return [to_schedule(r) for r in s.scalars(q).all()]

    def active_schedule_jobs(
        self, tenant_id: int | None = None, schedule_id: int | None = None
    ) -> dict[int, list[int]]:
        """schedule id -> ids of its PENDING or RUNNING jobs (only the two columns are read)."""
        with self._tx() as s:
            q = (
                select(JobRow.schedule_id, JobRow.id)
                .where(
                    JobRow.schedule_id.is_not(None), JobRow.state.in_([JobState.PENDING.value, JobState.RUNNING.value])
                )
                .order_by(JobRow.id)
            )
            if tenant_id is not None:
                q = q.where(JobRow.tenant_id == tenant_id)
            if schedule_id is not None:
                q = q.where(JobRow.schedule_id == schedule_id)
            out: dict[int, list[int]] = {}
            for sid, jid in s.execute(q).all():
                if sid is not None:  # (the query asks for these only)
                    out.setdefault(sid, []).append(jid)
            return out

    def due_schedules(self, now: datetime) -> list[Schedule]:
        """Schedules not paused whose next firing time has come, earliest first."""
        with self._tx() as s:
            q = (
                select(ScheduleRow)
                .where(ScheduleRow.paused.is_(False), ScheduleRow.next_run_at <= now)
                .order_by(ScheduleRow.next_run_at, ScheduleRow.id)
            )
            return [to_schedule(r) for r in s.scalars(q).all()]

    def next_schedule_due(self) -> datetime | None:
        """The earliest next firing of a schedule that is not paused (None: nothing scheduled)."""
        with self._tx() as s:
            row = s.scalars(
                select(ScheduleRow.next_run_at)
                .where(ScheduleRow.paused.is_(False))
                .order_by(ScheduleRow.next_run_at)
                .limit(1)
            ).first()
            return utc(row)

    def update_schedule(self, schedule_id: int, **changes: Any) -> Schedule | None:
        """Set the given fields (see UPDATABLE). None if the schedule is gone. ConflictError on a taken name."""
        unknown = set(changes) - UPDATABLE
        if unknown:
            raise TypeError(f"not updatable: {sorted(unknown)}")
        try:
            with self._rmw() as s:
                row = s.scalars(select(ScheduleRow).where(ScheduleRow.id == schedule_id).with_for_update()).first()
                if row is None:
                    return None
                for k, v in changes.items():
                    setattr(row, k, v)
                s.flush()
                return to_schedule(row)
        except IntegrityError as e:
            raise ConflictError(
                f"a schedule named {changes.get('name')!r} already exists in this tenant", field="name"
            ) from e

    def delete_schedule(self, schedule_id: int) -> bool:
        """Jobs it started stay (they keep their schedule_id for history)."""
        with self._tx() as s:
            result = s.execute(delete(ScheduleRow).where(ScheduleRow.id == schedule_id))
            return bool(getattr(result, "rowcount", 0))

    def fire_schedule(
        self,
        schedule_id: int,
        due_at: datetime | None,
        spec: JobSpec | None,
        next_run_at: datetime | None,
        now: datetime,
        missed: int = 0,
        skip_reason: str = "",
    ) -> tuple[bool, Job | None]:
        """Apply one firing atomically: start `spec` (None: skip, recording `skip_reason`), move `next_run_at`.

        `due_at` is the next_run_at the caller planned from: if it changed meanwhile (another server fired it,
        or the user edited the schedule) nothing happens and (False, None) is returned. `due_at=None` is a
        manual run: it starts the job without touching the timetable. Returns (applied, the job started).
        """
        with self._rmw() as s:
            row = s.scalars(select(ScheduleRow).where(ScheduleRow.id == schedule_id).with_for_update()).first()
            if row is None:
                return False, None
            if due_at is not None and (row.paused or utc(row.next_run_at) != due_at):
                return False, None
            job_row = None
            if spec is not None:
                job_row = self._insert_job(s, spec, now)
                row.runs = (row.runs or 0) + 1
                row.last_job_id = job_row.id
                row.last_run_at = now
                row.last_error = ""
            else:
                row.skipped = (row.skipped or 0) + 1
                row.last_error = skip_reason
            if due_at is not None and next_run_at is not None:
                row.next_run_at = next_run_at
                row.missed = (row.missed or 0) + missed
            s.flush()
            return True, (self._to_job(job_row) if job_row is not None else None)
