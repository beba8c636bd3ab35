"""The scheduler learns run times from every job that succeeds (SQLite and PostgreSQL): the leader notes the jobs it
starts, so one that starts and ends between two of its passes is learnt without re-reading the store's history; a
replica that does not lead (it starts nothing) finds such jobs by reading the newest successes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from corral.core.resources import GpuInfo
from corral.core.states import JobState
from corral.server.background.scheduling import Scheduler
from corral.server.services.notify import NodeNotifier
from corral.store.records import JobSpec
from corral.store.sql import SqlStore

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def _node(store: SqlStore) -> None:
    gpus = [GpuInfo(index=i, uuid=f"GPU-{i}", model="H100-80GB", memory_mib=81920) for i in range(2)]
    store.upsert_node("n1", "n1", "simulated", 64_000, 512_000, {}, gpus, T0)


def _pass(s: Scheduler, at: datetime) -> list[int]:
    s.store.touch_node("n1", at)
    return s.run_once(at)


def test_the_leader_learns_a_job_that_ends_between_two_passes(store: SqlStore) -> None:
    _node(store)
    sched = Scheduler(store, NodeNotifier(), "bestfit", 1.0)
    _pass(sched, T0)  # the first pass reads the history: none yet
    job = store.create_job(JobSpec(command=("train",), name="train-1", gpus=1), T0)
    assert _pass(sched, T0 + timedelta(seconds=1)) == [job.id]
    assert store.finish_job(job.id, JobState.SUCCEEDED, 0, "", T0 + timedelta(seconds=61))
    other = store.create_job(JobSpec(command=("train",), name="train-2", gpus=1), T0)
    _pass(sched, T0 + timedelta(seconds=62))  # the job it started is gone from the running set: learnt
    assert sched.predictions.recorded == 1
    got = store.get_job(other.id)
    assert got is not None and got.state is JobState.RUNNING
    _pass(sched, T0 + timedelta(seconds=63))
    assert sched.predictions.recorded == 1  # learnt once


def test_a_replica_that_does_not_lead_learns_from_the_newest_successes(store: SqlStore) -> None:
    _node(store)
    follower = Scheduler(store, NodeNotifier(), "bestfit", 1.0, leading=lambda: False)
    _pass(follower, T0)
    job = store.create_job(JobSpec(command=("train",), name="train-1", gpus=1), T0)
    assert store.assign_job(job.id, "n1", [0], T0)  # the leader started it, and it ended, between two passes
    assert store.finish_job(job.id, JobState.SUCCEEDED, 0, "", T0 + timedelta(seconds=30))
    follower._swept_at -= 10  # its sweep is due
    _pass(follower, T0 + timedelta(seconds=40))
    assert follower.predictions.recorded == 1
