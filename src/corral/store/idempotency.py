"""Idempotent job submission in SQL: the idempotency half of SqlStore (a mixin).

The key and the job it made are inserted in one transaction, under a unique (owner, key): of two concurrent
requests with the same key, one commits both rows and the other finds that row (SQLite: the writers are
serialised; PostgreSQL: the second insert waits on the unique index, fails, and its job is rolled back with it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from corral.core.errors import IdempotencyKeyReused
from corral.store.records import Job, JobSpec
from corral.store.tables import IdempotencyKeyRow, JobRow


class IdempotencyMethods:
    def _rmw(self) -> AbstractContextManager[Session]:  # provided by SqlStore
        raise NotImplementedError

    _insert_jobs: Callable[[Session, Sequence[JobSpec], datetime, int | None], list[Any]]  # sql._JobColumns
    _to_job: Callable[[Any], Job]

    def create_job_once(
        self, spec: JobSpec, now: datetime, owner: str, key: str, request_hash: str, keep: timedelta
    ) -> tuple[Job, bool]:
        """(the job, True) when this call created it; (the earlier job, False) when `owner` already used `key`
        with the same `request_hash` within `keep`. Raises IdempotencyKeyReused when the key came with another
        request. Keys older than `keep` are forgotten (and pruned here)."""
        jobs, created = self.create_jobs_once([spec], now, owner, key, request_hash, keep)
        return jobs[0], created

    def create_jobs_once(
        self,
        specs: Sequence[JobSpec],
        now: datetime,
        owner: str,
        key: str,
        request_hash: str,
        keep: timedelta,
        max_active: int | None = None,
    ) -> tuple[list[Job], bool]:
        """create_jobs made idempotent by (owner, key), as create_job_once: every job of the first request. A
        replay is answered before `max_active` is checked (the jobs exist already). A key stands for the jobs it
        made, so an empty list is refused (ValueError)."""
        if not specs:
            raise ValueError("create_jobs_once needs at least one job")
        for _ in range(2):  # the second round runs only after losing a race on the unique (owner, key)
            try:
                with self._rmw() as s:
                    s.execute(delete(IdempotencyKeyRow).where(IdempotencyKeyRow.created_at < now - keep))
                    found = s.scalar(
                        select(IdempotencyKeyRow).where(IdempotencyKeyRow.owner == owner, IdempotencyKeyRow.key == key)
                    )
                    if found is not None:
                        return self._replay(s, found, request_hash), False
                    rows = self._insert_jobs(s, specs, now, max_active)
                    s.add(
                        IdempotencyKeyRow(
                            owner=owner,
                            key=key,
                            request_hash=request_hash,
                            job_id=rows[0].id,
                            job_ids=[r.id for r in rows] if len(rows) > 1 else None,
                            created_at=now,
                        )
                    )
                    s.flush()
                    return [self._to_job(r) for r in rows], True
            except IntegrityError:
                continue
        raise RuntimeError("idempotency key neither inserted nor found")  # a unique index that lies

    def _replay(self, s: Session, found: IdempotencyKeyRow, request_hash: str) -> list[Job]:
        if found.request_hash != request_hash:
            raise IdempotencyKeyReused(found.key)
        ids = found.job_ids or [found.job_id]
        rows = {r.id: r for r in s.scalars(select(JobRow).where(JobRow.id.in_(ids)))}
        assert found.job_id in rows  # the foreign key cascades: a key never outlives its (first) job
        return [self._to_job(rows[i]) for i in ids if i in rows]
