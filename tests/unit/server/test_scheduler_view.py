"""CORRAL_WORKERS (issue 13): the loops' process schedules and leads; the people's process computes no plan and tells
people why a job waits from what the loops' process wrote (server/background/scheduler_view.py). Both databases."""

from __future__ import annotations

import marshal
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from corral.core.models import JobSpec
from corral.core.resources import GpuInfo
from corral.core.states import JobState
from corral.server.background import scheduler_view
from corral.server.background.leadership import Leadership
from corral.server.background.scheduler_view import ViewFollower, read_view, write_view
from corral.server.background.scheduling import Scheduler
from corral.server.services.notify import NodeNotifier, Trigger
from corral.store.sql import SqlStore

T0 = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)


def test_a_view_reads_back_as_written_and_a_follower_reads_it_only_when_it_changed(tmp_path: Path) -> None:
    path = tmp_path / "scheduler-view"
    follower = ViewFollower(path)
    assert follower.changed() is None  # nothing written yet
    eta = T0 + timedelta(minutes=3)
    extra = {"notifiers": [{"notifier": "webhook", "failed": 2}], "demand": {"burst": [3, 12]}}
    write_view(path, {7: "no node has 4 free GPUs"}, {7: "resources"}, {7: (1, eta), 8: (2, None)}, [0.25, 1.5], extra)
    view = follower.changed()
    assert view is not None
    assert view.reasons == {7: "no node has 4 free GPUs"} and view.codes == {7: "resources"}
    assert view.info == {7: (1, eta), 8: (2, None)} and view.latencies_s == (0.25, 1.5) and view.extra == extra
    assert follower.changed() is None  # the same file: not read again
    write_view(path, {}, {}, {}, [])
    again = follower.changed()
    assert again is not None and again.reasons == {} and again.info == {}
    assert not [p for p in tmp_path.iterdir() if p.name != "scheduler-view"]  # written aside, then renamed


def test_what_is_not_a_view_is_ignored_not_half_applied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "scheduler-view"
    for junk in (b"", b"\x00garbage", marshal.dumps((2, {"7": 3}, {}, {}, [], {})), marshal.dumps((1, {}, {}, {}, []))):
        path.write_bytes(junk)
        assert read_view(path) is None
    follower = ViewFollower(path)
    reads = []
    monkeypatch.setattr(scheduler_view, "read_view", lambda p: reads.append(p))
    assert follower.changed() is None and follower.changed() is None
    assert len(reads) == 1  # read once, then left until it changes


def _node_and_jobs(store: SqlStore, jobs: int) -> list[int]:
    gpu = GpuInfo(index=0, uuid="GPU-0", model="H100-80GB", memory_mib=81920)
    store.upsert_node("n1", "n1", "simulated", 8000, 65536, {}, [gpu], datetime.now(UTC))
    return [store.create_job(JobSpec(command=("true",), gpus=1), datetime.now(UTC)).id for _ in range(jobs)]


def test_the_people_process_tells_what_the_loops_process_worked_out(store: SqlStore, tmp_path: Path) -> None:
    path = tmp_path / "scheduler-view"
    first, second, third = _node_and_jobs(store, 3)
    loops = Scheduler(store, NodeNotifier(), "bestfit", 1.0, view_out=path)
    people = Scheduler(store, NodeNotifier(), "bestfit", 1.0, leading=lambda: False, explains=False, view_in=path)
    people.run_pass()
    assert people.pending_reasons == {} and people.last_cycle is None  # nothing written yet; it plans nothing itself
    loops.run_pass()  # starts the first on n1's one GPU; the other two wait
    written = os.stat(path).st_ino  # each write replaces the file: a new inode
    assert set(loops.pending_reasons) == {second, third}
    people.run_pass()
    assert people.last_cycle is None  # still no plan of its own
    assert people.pending_reasons == loops.pending_reasons and people.pending_codes == loops.pending_codes
    assert people.pending_info == loops.pending_info and [p for p, _ in people.pending_info.values()] == [0, 1]
    assert len(people.latencies_s()) == 1  # the first job's wait, for the scheduling-latency histogram
    loops.run_pass()  # the same work: the same view, not written again
    assert os.stat(path).st_ino == written
    assert store.finish_job(first, JobState.SUCCEEDED, 0, "", datetime.now(UTC))  # n1's GPU is free: the second starts
    loops.run_pass()
    people.run_pass()
    assert set(people.pending_reasons) == {third} and [p for p, _ in people.pending_info.values()] == [0]


def test_a_new_loops_process_removes_what_dead_writers_of_this_host_left_and_nothing_else(
    store: SqlStore, tmp_path: Path
) -> None:
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(gone.stdout)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_too = int(gone.stdout)
    me = os.getpid()
    view = scheduler_view.view_path(tmp_path, me)
    host = scheduler_view.host_tag()
    assert view.name == f"scheduler-view.{host}.{me}"
    # hosts whose names read alike as file names (a dot, a long name cut) still have views of their own
    assert len({scheduler_view.host_tag(h) for h in ("gpu.01", "gpu_01", "a" * 70, "a" * 71)}) == 4
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        removed = [
            f".{view.name}.{dead}",  # its writer was killed between its write and its rename
            f"scheduler-view.{host}.{dead}",  # the view of a server of this host that no longer runs
            f".scheduler-view.{host}.{dead}.{dead}",
        ]
        kept = [
            f".{view.name}.{live.pid}",  # a running writer's copy, about to be renamed
            f"scheduler-view.other-host.{dead}",  # another host's: its pids mean nothing here
            f".scheduler-view.other-host.{me}.{dead}",
            f".scheduler-view.{host}.\u00b2",  # names no pid of ours: left alone, and no error
            f".scheduler-view.{host}.{me}.99999999999999999999",
            f"scheduler-view.{host}.\u0661\u0662",
            ".scheduler-view.tmp",
            "other.123",
        ]
        for name in removed + kept:
            (tmp_path / name).write_bytes(b"x")
        (tmp_path / f"scheduler-view.{host}.{dead_too}").mkdir()  # not a file: kept
        kept.append(f"scheduler-view.{host}.{dead_too}")
        Scheduler(store, NodeNotifier(), "bestfit", 1.0, view_out=view)
        assert sorted(p.name for p in tmp_path.iterdir() if "view" in p.name or "other" in p.name) == sorted(kept)
    finally:
        live.kill()
        live.wait()


def test_a_process_that_is_no_candidate_never_takes_the_lease(store: SqlStore) -> None:
    people = Leadership(store, "https://people", replica_id="p", candidate=False)
    assert not people.claim() and not people.leading
    people.run_pass()  # heartbeats all the same
    assert [r.id for r in store.list_replicas(datetime.now(UTC) - timedelta(minutes=1))] == ["p"]
    loops = Leadership(store, "https://loops", replica_id="p/worker-1")
    assert loops.claim() and loops.leading
    assert not people.claim()


def test_a_trigger_also_wakes_where_it_forwards() -> None:
    trigger, woken = Trigger(), []
    trigger.forward = lambda: woken.append(1)
    trigger.fire()
    assert trigger.wait(0) and woken == [1]


@pytest.mark.postgres
def test_the_people_process_of_a_server_of_several_leads_nothing_and_tells_what_it_was_told(
    postgres_url: str, tmp_path: Path
) -> None:
    """create_app(serves="people"): no lease, no plan; its queue reasons, notifiers' status and pools' demand are
    what the loops' process wrote to the view (the app's own alert rules and autoscaler never run)."""
    from corral.server.app import create_app
    from corral.server.context import context_of
    from corral.server.settings import Settings
    from corral.store.sql import open_store

    view = tmp_path / "scheduler-view"
    store = open_store(postgres_url)
    try:
        app = create_app(Settings(data_dir=tmp_path, database_url=postgres_url), store, serves="people", view_path=view)
        ctx = context_of(app)
        assert not ctx.leadership.claim() and not ctx.scheduler.explains
        (job,) = _node_and_jobs(store, 1)
        extra = {
            "notifiers": [
                {
                    "notifier": "webhook",
                    "delivered": 1,
                    "failed": 3,
                    "dropped": 0,
                    "retries": 9,
                    "last_error": "timed out",
                    "last_error_at": 5.0,
                    "last_success_at": 1.0,
                }
            ],
            "demand": {"burst": [2, 16]},
        }
        write_view(view, {job: "a reason"}, {job: "resources"}, {job: (0, None)}, [0.5], extra)
        ctx.scheduler.run_once(datetime.now(UTC))
        assert ctx.scheduler.last_cycle is None and ctx.scheduler.pending_reasons == {job: "a reason"}
        assert [(s.notifier, s.failed) for s in ctx.alerting.notifier_status()] == [("webhook", 3)]
        assert ctx.autoscaler.demand_by_pool() == {"burst": (2, 16)}
        assert ctx.scheduler.latencies_s() == [0.5]
        # a loops' process of another version (an upgrade under way) wrote what this one does not read: nothing shown
        write_view(view, {}, {}, {}, [], {"notifiers": [{"name": "webhook"}], "demand": {"burst": "many"}})
        ctx.scheduler.run_once(datetime.now(UTC))
        assert ctx.alerting.notifier_status() == [] and ctx.autoscaler.demand_by_pool() == {}
    finally:
        store.close()
