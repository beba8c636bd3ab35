"""Idempotent submission in the store, on SQLite and PostgreSQL: one key, one job, also when requests race."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from corral.core.errors import IdempotencyKeyReused
from corral.core.states import JobState
from corral.store.records import Job, JobSpec
from corral.store.sql import SqlStore

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(hours=24)


def spec(name: str = "train") -> JobSpec:
    return JobSpec(command=("python", "train.py"), name=name)


def all_jobs(store: SqlStore) -> list[Job]:
    return store.list_jobs(states=list(JobState))


def test_the_same_key_and_request_returns_the_first_job(store: SqlStore) -> None:
    first, created = store.create_job_once(spec(), T0, "user:1", "k1", "h1", DAY)
    again, created_again = store.create_job_once(spec(), T0 + timedelta(hours=23), "user:1", "k1", "h1", DAY)
    assert (created, created_again) == (True, False)
    assert again.id == first.id and [j.id for j in all_jobs(store)] == [first.id]


def test_the_same_key_with_another_request_is_refused_and_makes_nothing(store: SqlStore) -> None:
    store.create_job_once(spec(), T0, "user:1", "k1", "h1", DAY)
    with pytest.raises(IdempotencyKeyReused):
        store.create_job_once(spec("other"), T0, "user:1", "k1", "h2", DAY)
    assert len(all_jobs(store)) == 1


def test_keys_are_per_caller(store: SqlStore) -> None:
    a, _ = store.create_job_once(spec(), T0, "user:1", "k1", "h1", DAY)
    b, created = store.create_job_once(spec(), T0, "user:2", "k1", "h1", DAY)
    assert created and a.id != b.id


def test_a_key_is_forgotten_after_it_is_kept(store: SqlStore) -> None:
    a, _ = store.create_job_once(spec(), T0, "user:1", "k1", "h1", DAY)
    b, created = store.create_job_once(spec(), T0 + DAY + timedelta(seconds=1), "user:1", "k1", "h1", DAY)
    assert created and b.id != a.id


def test_concurrent_requests_with_one_key_make_one_job(store: SqlStore) -> None:
    """Eight threads send the same key at once (a client retrying while its first request is still in flight)."""
    start = threading.Barrier(8)
    results: list[tuple[int, bool]] = []
    errors: list[BaseException] = []

    def submit() -> None:
        try:
            start.wait()
            job, created = store.create_job_once(spec(), T0, "user:1", "race", "h1", DAY)
            results.append((job.id, created))
        except BaseException as e:  # reported below, with the thread's result
            errors.append(e)

    threads = [threading.Thread(target=submit) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert len({job_id for job_id, _ in results}) == 1 and len(results) == 8
    assert sum(created for _, created in results) == 1
    assert len(all_jobs(store)) == 1
