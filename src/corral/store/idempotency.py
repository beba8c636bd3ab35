"""Idempotent job submission in SQL: the idempotency half of SqlStore (a mixin).

The key and the job it made are inserted in one transaction, under a unique (owner, key): of two concurrent
requests with the same key, one commits both rows and the other finds that row (SQLite: the writers are
serialised; PostgreSQL: the second insert waits on the unique index, fails, and its job is rolled back with it).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from corral.core.errors import IdempotencyKeyReused
from corral.store.records import Job, JobSpec
from corral.store.tables import IdempotencyKeyRow, JobRow


class IdempotencyMethods:
    def _rmw(self) -> AbstractContextManager[Session]:  # provided by SqlStore
        raise NotImplementedError

    _insert_job: Callable[[Session, JobSpec, datetime], JobRow]
    _to_job: Callable[[JobRow], Job]

    def create_job_once(
        self, spec: JobSpec, now: datetime, owner: str, key: str, request_hash: str, keep: timedelta
    ) -> tuple[Job, bool]:
        """(the job, True) when this call created it; (the earlier job, False) when `owner` already used `key`
        with the same `request_hash` within `keep`. Raises IdempotencyKeyReused when the key came with another
        request. Keys older than `keep` are forgotten (and pruned here)."""
        for _ in range(2):  # the second round runs only after losing a race on the unique (owner, key)
            try:
                with self._rmw() as s:
                    s.execute(delete(IdempotencyKeyRow).where(IdempotencyKeyRow.created_at < now - keep))
                    found = s.scalar(
                        select(IdempotencyKeyRow).where(IdempotencyKeyRow.owner == owner, IdempotencyKeyRow.key == key)
                    )
                    if found is not None:
                        return self._replay(s, found, request_hash), False
                    row = self._insert_job(s, spec, now)
                    s.add(
                        IdempotencyKeyRow(
                            owner=owner, key=key, request_hash=request_hash, job_id=row.id, created_at=now
                        )
                    )
                    s.flush()
                    return self._to_job(row), True
            except IntegrityError:
                continue
        raise RuntimeError("idempotency key neither inserted nor found")  # a unique index that lies

    def _replay(self, s: Session, found: IdempotencyKeyRow, request_hash: str) -> Job:
        if found.request_hash != request_hash:
            raise IdempotencyKeyReused(found.key)
        job = s.get(JobRow, found.job_id)
        assert job is not None  # the foreign key cascades: a key never outlives its job
        return self._to_job(job)
