"""An agent's report ends only the runs it was checked for (the job's current attempt on that node): a job
requeued and placed on another node between the report's read and its write (another server's scheduler, a GPU
fault, a drain) is not ended by the old run's exit, nor failed as 'lost', whatever else the report holds."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from corral.api.schemas import AgentSync, ExitReport, RunRef
from corral.core.resources import GpuInfo
from corral.core.states import JobState
from corral.server.services.agents import apply_reports
from corral.store.memory import MemoryStore
from corral.store.records import JobSpec
from corral.store.sql import open_store

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "memory":
        yield MemoryStore()
        return
    s = open_store(f"sqlite:///{tmp_path / 'c.db'}")
    try:
        yield s
    finally:
        s.close()


class Meanwhile:
    """The store, with `then` run once just before the report's call of `method` (what happened meanwhile)."""

    def __init__(self, store: Any, method: str, then: Callable[[], None]) -> None:
        self._store, self._method, self._then = store, method, then

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name != self._method or self._then is None:
            return attr

        def call(*args: Any, **kw: Any) -> Any:
            then, self._then = self._then, None
            then()
            return attr(*args, **kw)

        return call


def running_on_n1(store: Any, gpu: int = 0) -> int:
    for name in ("n1", "n2"):
        gpus = [GpuInfo(index=i, uuid=f"{name}-GPU-{i}", model="H100-80GB", memory_mib=81920) for i in range(2)]
        store.upsert_node(name, name, "simulated", 8000, 65536, {}, gpus, T0)
    job_id = int(store.create_job(JobSpec(command=("train",), gpus=1), T0).id)
    assert store.assign_job_parts(job_id, [("n1", [gpu])], T0)
    store.mark_delivered([job_id], "n1")
    return job_id


def placed_again_on_n2(store: Any, job_id: int) -> Callable[[], None]:
    def move() -> None:
        assert store.requeue_job(job_id, "node n1 drained", T0)
        assert store.assign_job_parts(job_id, [("n2", [0])], T0)

    return move


def test_an_exit_of_the_old_run_does_not_end_the_job_placed_again_elsewhere(store: Any) -> None:
    job_id = running_on_n1(store)
    # the report's exits are all looked at before its ends are written: meanwhile, the job moved
    report = AgentSync(exits=[ExitReport(job_id=job_id, attempt=1, exit_code=0)])
    acked, freed = apply_reports(Meanwhile(store, "finish_jobs", placed_again_on_n2(store, job_id)), "n1", report)
    assert acked == [RunRef(job_id=job_id, attempt=1)] and not freed
    job = store.get_job(job_id)
    assert (job.state, job.attempt, job.node) == (JobState.RUNNING, 2, "n2")
    assert not any(e.kind == "succeeded" for e in store.list_events(job_id))


def test_a_run_the_agent_no_longer_has_is_not_failed_as_lost_once_placed_again_elsewhere(store: Any) -> None:
    job_id = running_on_n1(store)
    acked, freed = apply_reports(
        Meanwhile(store, "mark_delivered", placed_again_on_n2(store, job_id)), "n1", AgentSync()
    )
    assert acked == [] and not freed
    job = store.get_job(job_id)
    assert (job.state, job.attempt, job.node) == (JobState.RUNNING, 2, "n2")


def test_the_current_run_still_ends_and_is_still_lost(store: Any) -> None:
    ended, lost = running_on_n1(store), running_on_n1(store, gpu=1)
    report = AgentSync(exits=[ExitReport(job_id=ended, attempt=1, exit_code=3)])
    acked, freed = apply_reports(store, "n1", report)
    assert freed and acked == [RunRef(job_id=ended, attempt=1)]
    assert (store.get_job(ended).state, store.get_job(ended).exit_code) == (JobState.FAILED, 3)
    assert store.get_job(lost).state is JobState.FAILED and "no longer runs it" in store.get_job(lost).reason


def test_exits_of_jobs_not_running_on_the_node_cost_no_read_each(store: Any) -> None:
    """A node (its agent's credential) that reports a long list of other jobs' ids: acknowledged, ignored, and no
    database read per id (an 8 MiB report holds some 300,000)."""
    here, elsewhere = running_on_n1(store), running_on_n1(store, gpu=1)
    assert store.requeue_job(elsewhere, "moved", T0) and store.assign_job_parts(elsewhere, [("n2", [1])], T0)
    reads: list[int] = []

    class Counting(Meanwhile):
        def get_job(self, job_id: int) -> Any:
            reads.append(job_id)
            return store.get_job(job_id)

    exits = [ExitReport(job_id=i, attempt=a, exit_code=1) for i in range(1, 2000) for a in (1, 2) if i != here]
    acked, freed = apply_reports(
        Counting(store, "", lambda: None), "n1", AgentSync(running=[RunRef(job_id=here, attempt=1)], exits=exits)
    )
    assert len(acked) == len(exits) and not freed and reads == []
    assert store.get_job(elsewhere).state is JobState.RUNNING and store.get_job(here).state is JobState.RUNNING
