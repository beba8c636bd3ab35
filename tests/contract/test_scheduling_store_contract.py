"""The SchedulingStore's behaviour (jobs, nodes, tenancy), one suite run over SQLite, PostgreSQL and MemoryStore:
what the scheduling loop and the simulators rely on, the guarded assign included."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from corral.core.errors import ConflictError, IdempotencyKeyReused, TooManyRequestsError
from corral.core.resources import GpuInfo
from corral.core.states import JobState
from corral.store.memory import MemoryStore
from corral.store.protocols import SchedulingStore
from corral.store.records import JobSpec, Quota
from corral.store.snapshot import JobCache
from corral.store.sql import SqlStore, open_store

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
LATER = T0 + timedelta(minutes=5)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres), "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SchedulingStore]:
    if request.param == "memory":
        yield MemoryStore()
        return
    url = (
        f"sqlite:///{tmp_path / 'c.db'}" if request.param == "sqlite" else str(request.getfixturevalue("postgres_url"))
    )
    s = open_store(url)
    try:
        yield s
    finally:
        s.close()


def gpus(node: str, n: int = 2) -> list[GpuInfo]:
    return [GpuInfo(index=i, uuid=f"{node}-GPU-{i}", model="H100-80GB", memory_mib=81920) for i in range(n)]


def node(store: SchedulingStore, name: str = "n1", n: int = 2, cpu_milli: int = 8000, memory_mib: int = 65536) -> None:
    store.upsert_node(name, name, "simulated", cpu_milli, memory_mib, {}, gpus(name, n), T0)


def job(store: SchedulingStore, **kw: object) -> int:
    base: dict[str, object] = {"command": ("train",), "gpus": 1}
    base.update(kw)
    return store.create_job(JobSpec(**base), T0).id  # type: ignore[arg-type]


def state(store: SchedulingStore, job_id: int) -> JobState:
    got = store.get_job(job_id)
    assert got is not None
    return got.state


# ---- job lifecycle ----------------------------------------------------------------
def test_a_new_job_is_pending_with_its_submitted_event(store: SchedulingStore) -> None:
    a, b = job(store, env={"A": "1"}), job(store)
    got = store.get_job(a)
    assert got is not None and got.state is JobState.PENDING and got.spec.env == {"A": "1"} and got.created_at == T0
    assert [e.kind for e in store.list_events(a)] == ["submitted"]
    assert [j.id for j in store.list_jobs(states=[JobState.PENDING])] == [a, b]
    assert [j.id for j in store.list_jobs(newest_first=True, limit=1)] == [b]
    assert store.count_jobs(states=[JobState.PENDING]) == 2 and store.get_job(10_000) is None


def test_a_batch_larger_than_one_read_places_every_job(store: SchedulingStore) -> None:
    node(store, "n1", n=1)
    ids = [j.id for j in store.create_jobs([JobSpec(command=("x",), gpus=0)] * 1_100, T0)]
    assert store.assign_jobs_parts([(i, [("n1", [])]) for i in ids], T0) == [True] * 1_100
    assert store.count_jobs(states=[JobState.RUNNING]) == 1_100
    ids2, changed = store.list_jobs_changed([JobState.RUNNING], {})
    assert ids2 == ids and sorted(j.id for j, _ in changed) == ids


def test_jobs_by_ids_and_the_newest_ids_in_a_state(store: SchedulingStore) -> None:
    node(store)
    a, b, c, d = job(store), job(store), job(store), job(store)
    assert [j.id for j in store.get_jobs([d, a, 10_000, a])] == [a, d]  # unknown ids left out, by id, once
    assert store.get_jobs([]) == []
    for i in (a, c):
        assert store.assign_job_parts(i, [("n1", [0 if i == a else 1])], T0)
        assert store.finish_job(i, JobState.SUCCEEDED, 0, "", LATER)
    assert store.list_job_ids([JobState.SUCCEEDED], 10) == [c, a]
    assert store.list_job_ids([JobState.SUCCEEDED], 1) == [c]
    assert store.list_job_ids([JobState.PENDING, JobState.SUCCEEDED], 3) == [d, c, b]


def test_assign_is_compare_and_set_and_places_every_part(store: SchedulingStore) -> None:
    node(store, "n1")
    node(store, "n2")
    gang = job(store, gpus=2, nodes=2)
    assert store.assign_job_parts(gang, [("n1", [0, 1]), ("n2", [0, 1])], T0)
    assert not store.assign_job_parts(gang, [("n1", [0, 1]), ("n2", [0, 1])], T0)  # already RUNNING
    got = store.get_job(gang)
    assert got is not None and got.parts == (("n1", (0, 1)), ("n2", (0, 1))) and got.attempt == 1
    assert [j.id for j in store.list_node_jobs("n2")] == [gang]
    assert [e.kind for e in store.list_events(gang)] == ["submitted", "assigned"]


def test_a_nodes_running_jobs_are_its_own_and_the_gangs_with_a_part_on_it(store: SchedulingStore) -> None:
    """What an agent's sync reads: its node's running jobs, gangs on it by any part, and no other node's, even one
    whose name matches as a LIKE pattern (`_` is any one character)."""
    for name in ("a_b", "axb", "n3"):
        node(store, name, n=2)
    own, gang, elsewhere, ended = job(store), job(store, gpus=1, nodes=2), job(store, gpus=1, nodes=2), job(store)
    pending = job(store)
    assert store.assign_job_parts(own, [("a_b", [0])], T0)
    assert store.assign_job_parts(gang, [("n3", [0]), ("a_b", [1])], T0)  # a later part on a_b
    assert store.assign_job_parts(elsewhere, [("n3", [1]), ("axb", [0])], T0)  # a_b as a pattern matches axb
    assert store.assign_job_parts(ended, [("axb", [1])], T0)
    assert store.finish_job(ended, JobState.SUCCEEDED, 0, "", T0)
    assert [j.id for j in store.list_node_jobs("a_b")] == [own, gang]
    assert [j.id for j in store.list_node_jobs("axb")] == [elsewhere]
    assert [j.id for j in store.list_node_jobs("n3")] == [gang, elsewhere]
    assert store.list_node_jobs("a%b") == [] and store.list_node_jobs("nowhere") == []
    assert state(store, pending) is JobState.PENDING


def test_a_node_with_its_jobs_is_what_the_two_reads_give(store: SchedulingStore) -> None:
    """A telemetry batch reads its node and the node's running jobs at once (get_node_with_jobs)."""
    for name in ("n1", "n2"):
        node(store, name, n=2)
    own, gang, other = job(store), job(store, gpus=1, nodes=2), job(store)
    assert store.assign_job_parts(own, [("n1", [0])], T0)
    assert store.assign_job_parts(gang, [("n2", [0]), ("n1", [1])], T0)
    assert store.assign_job_parts(other, [("n2", [1])], T0)
    for name in ("n1", "n2"):
        got, jobs = store.get_node_with_jobs(name)
        assert got == store.get_node(name) and got is not None and got.name == name
        assert jobs == store.list_node_jobs(name)
    assert [j.id for j in store.get_node_with_jobs("n1")[1]] == [own, gang]
    assert store.get_node_with_jobs("nowhere") == (None, [])


def test_a_nodes_running_jobs_are_matched_by_its_whole_name_case_included(store: SchedulingStore) -> None:
    """SQLite's LIKE ignores ASCII case: a node that joined as N3 must not be handed (nor requeue when lost,
    drained or revoked) the gangs with a part on n3."""
    for name in ("n1", "n3", "N3"):
        node(store, name, n=2)
    gang, own = job(store, gpus=1, nodes=2), job(store, gpus=1)
    assert store.assign_job_parts(gang, [("n1", [0]), ("n3", [0])], T0)
    assert store.assign_job_parts(own, [("N3", [0])], T0)
    assert [j.id for j in store.list_node_jobs("N3")] == [own]
    assert [j.id for j in store.list_node_jobs("n3")] == [gang]
    assert store.list_node_jobs("N1") == [] and [j.id for j in store.list_node_jobs("n1")] == [gang]


def test_a_batch_of_assigns_checks_each_against_those_before_it(store: SchedulingStore) -> None:
    node(store, "n1", n=2, cpu_milli=3000)
    node(store, "n2", n=1)
    a, b, c, d, e = job(store), job(store), job(store, gpus=2, nodes=2), job(store), job(store, gpus=0, cpu_milli=2000)
    done = job(store)
    store.request_cancel(done, T0)
    got = store.assign_jobs_parts(
        [
            (a, [("n1", [0])]),
            (b, [("n1", [0])]),  # a took GPU 0 earlier in this batch
            (c, [("n1", [1]), ("n2", [0])]),
            (d, [("n2", [0])]),  # c's second part holds it
            (done, [("n1", [1])]),  # not PENDING
            (10_000, [("n1", [1])]),  # unknown
            (e, [("n1", [])]),  # host CPU: 3000 on the node, a and c ask for none, e for 2000
        ],
        T0,
    )
    assert got == [True, False, True, False, False, False, True]
    assert {state(store, i) for i in (a, c, e)} == {JobState.RUNNING}
    assert state(store, b) is state(store, d) is JobState.PENDING and state(store, done) is JobState.CANCELLED
    held = store.get_job(c)
    assert held is not None and held.parts == (("n1", (1,)), ("n2", (0,))) and held.attempt == 1
    assert [e.kind for e in store.list_events(b)] == ["submitted"]  # a refused one writes nothing
    assert store.assign_jobs_parts([], T0) == []
    assert store.assign_jobs_parts([(b, [("n1", [0])])], T0) == [False]  # still held by a, in the store
    f = job(store, gpus=0, cpu_milli=2000)
    assert store.assign_jobs_parts([(f, [("n1", [])])], T0) == [False]  # e's CPU counts too


def test_requeue_frees_the_gpus_and_keeps_attained_service(store: SchedulingStore) -> None:
    node(store, "n1", n=1)
    first, second = job(store), job(store)
    assert store.assign_job_parts(first, [("n1", [0])], T0)
    assert not store.assign_job_parts(second, [("n1", [0])], T0)  # the GPU is taken
    assert store.requeue_job(first, "node lost", T0 + timedelta(seconds=100), failure=True)
    got = store.get_job(first)
    assert got is not None and got.state is JobState.PENDING and got.placed_parts == ()
    assert (got.attained_gpu_s, got.failures) == (100.0, 1)
    assert store.assign_job_parts(second, [("n1", [0])], T0)  # freed
    assert not store.requeue_job(first, "again", T0)  # only RUNNING jobs requeue


TERMINAL_MOVES: dict[str, Callable[[SchedulingStore, int], object]] = {
    "assign": lambda s, i: s.assign_job_parts(i, [("n1", [1])], LATER),
    "finish": lambda s, i: s.finish_job(i, JobState.SUCCEEDED, 0, "late", LATER),
    "requeue": lambda s, i: s.requeue_job(i, "late", LATER),
    "preempt": lambda s, i: s.request_preempt(i, "late", LATER),
}


@pytest.mark.parametrize("move", sorted(TERMINAL_MOVES))
@pytest.mark.parametrize("end", [JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED])
def test_a_terminal_job_never_moves(store: SchedulingStore, move: str, end: JobState) -> None:
    node(store)
    j = job(store)
    if end is JobState.CANCELLED:
        store.request_cancel(j, T0)
    else:
        assert store.assign_job_parts(j, [("n1", [0])], T0)
        assert store.finish_job(j, end, 0, "", T0)
    events = store.list_events(j)
    assert not TERMINAL_MOVES[move](store, j)
    assert state(store, j) is end and store.list_events(j) == events
    assert store.request_cancel(j, LATER) == store.get_job(j)


def test_finish_jobs_ends_each_as_finish_job_would_in_one_call(store: SchedulingStore) -> None:
    node(store, "n1", n=4)
    ok, bad, pending, done, gone = job(store), job(store), job(store), job(store), job(store)
    for k, i in enumerate((ok, bad, done)):
        assert store.assign_job_parts(i, [("n1", [k])], T0)
    assert store.finish_job(done, JobState.SUCCEEDED, 0, "", T0)
    store.request_cancel(gone, T0)
    got = store.finish_jobs(
        [
            (ok, JobState.SUCCEEDED, 0, ""),
            (bad, JobState.FAILED, 3, ""),
            (pending, JobState.FAILED, None, "cannot start: no image"),  # PENDING -> FAILED is allowed
            (done, JobState.FAILED, 1, "late"),  # already over: never moves
            (gone, JobState.SUCCEEDED, 0, ""),  # cancelled
            (ok, JobState.FAILED, 9, "twice"),  # named twice: the first entry moved it
            (10_000, JobState.SUCCEEDED, 0, ""),  # unknown
        ],
        LATER,
    )
    assert got == [True, True, True, False, False, False, False]
    ended = {j.id: (j.state, j.exit_code, j.reason, j.finished_at) for j in store.get_jobs([ok, bad, pending, done])}
    assert ended == {
        ok: (JobState.SUCCEEDED, 0, "", LATER),
        bad: (JobState.FAILED, 3, "", LATER),
        pending: (JobState.FAILED, None, "cannot start: no image", LATER),
        done: (JobState.SUCCEEDED, 0, "", T0),
    }
    assert [(e.kind, e.message) for e in store.list_events(bad)][-1] == ("failed", "exit code 3")
    assert [(e.kind, e.message) for e in store.list_events(pending)][-1] == ("failed", "cannot start: no image")
    assert [e.kind for e in store.list_events(ok)].count("succeeded") == 1
    assert [e.kind for e in store.list_events(done)].count("failed") == 0
    assert store.finish_jobs([], LATER) == []
    with pytest.raises(ValueError):
        store.finish_jobs([(ok, JobState.RUNNING, None, "")], LATER)
    assert store.assign_job_parts(job(store), [("n1", [0])], LATER)  # ok's GPU is free again


def test_finish_jobs_of_runs_ends_a_job_only_while_it_runs_that_attempt(store: SchedulingStore) -> None:
    """An agent's report ends the runs it checked when it read them: a job requeued since (PENDING again, same
    attempt number) or placed again (its next attempt, on another node) is not ended by its old run's exit."""
    node(store, "n1", n=4)
    node(store, "n2", n=4)
    ok, requeued, again, plain = job(store), job(store), job(store), job(store)
    for k, i in enumerate((ok, requeued, again)):
        assert store.assign_job_parts(i, [("n1", [k])], T0)
    assert store.requeue_job(requeued, "GPU fault", T0)
    assert store.requeue_job(again, "GPU fault", T0) and store.assign_job_parts(again, [("n2", [0])], T0)
    got = store.finish_jobs(
        [
            (ok, JobState.SUCCEEDED, 0, ""),
            (requeued, JobState.FAILED, 1, ""),
            (again, JobState.SUCCEEDED, 0, ""),
            (plain, JobState.FAILED, None, "cannot start"),  # no run given: as finish_job
        ],
        LATER,
        {ok: 1, requeued: 1, again: 1},
    )
    assert got == [True, False, False, True]
    jobs = {j.id: j for j in store.get_jobs([ok, requeued, again, plain])}
    assert jobs[ok].state is JobState.SUCCEEDED and jobs[plain].state is JobState.FAILED
    assert jobs[requeued].state is JobState.PENDING
    assert (jobs[again].state, jobs[again].attempt, jobs[again].node) == (JobState.RUNNING, 2, "n2")
    assert [e.kind for e in store.list_events(again)].count("succeeded") == 0
    assert store.finish_jobs([(again, JobState.FAILED, 3, "")], LATER, {again: 2}) == [True]


def test_cancel_and_preempt(store: SchedulingStore) -> None:
    node(store)
    pending, running = job(store), job(store)
    assert store.assign_job_parts(running, [("n1", [0])], T0)
    cancelled = store.request_cancel(pending, T0)
    assert cancelled is not None and cancelled.state is JobState.CANCELLED
    assert store.request_preempt(running, "for job 9", T0, for_job_id=9)
    assert not store.request_preempt(running, "twice", T0, for_job_id=10)
    flagged = store.get_job(running)
    assert flagged is not None and flagged.preempted_for == 9  # the first claim holds
    got = store.request_cancel(running, T0)
    assert got is not None and got.state is JobState.RUNNING and got.cancel_requested and got.preempt_requested
    assert not store.request_preempt(pending, "not running", T0)
    with pytest.raises(ValueError):
        store.finish_job(running, JobState.RUNNING, None, "", T0)


def test_a_requeued_job_forgets_whom_it_was_preempted_for(store: SchedulingStore) -> None:
    node(store)
    j = job(store)
    assert store.assign_job_parts(j, [("n1", [0])], T0)
    assert store.request_preempt(j, "for job 9", T0, for_job_id=9)
    assert store.requeue_job(j, "preempted", LATER, preempted=True)
    got = store.get_job(j)
    assert got is not None and got.preempted_for is None and not got.preempt_requested and got.preemptions == 1


def test_delivery_and_part_exits(store: SchedulingStore) -> None:
    node(store, "n1")
    node(store, "n2")
    gang = job(store, nodes=2)
    assert store.assign_job_parts(gang, [("n1", [0]), ("n2", [0])], T0)
    store.mark_delivered([gang], "n1")
    got = store.get_job(gang)
    assert got is not None and got.delivered and got.delivered_to == frozenset({"n1"})
    assert store.record_part_exit(gang, "n1", 0) == {"n1": 0}
    assert store.record_part_exit(gang, "n2", 3) == {"n1": 0, "n2": 3}
    assert store.record_part_exit(10_000, "n1", 0) == {}


def test_delivery_adds_each_node_once_and_only_to_running_jobs(store: SchedulingStore) -> None:
    for name in ("n", "n1", "n2"):
        node(store, name)
    gang = job(store, nodes=2)
    waiting = job(store)
    assert store.assign_job_parts(gang, [("n1", [0]), ("n2", [0])], T0)
    store.mark_delivered([gang, waiting, 10_000], "n1")
    store.mark_delivered([gang], "n2")
    got, still = store.get_job(gang), store.get_job(waiting)
    assert got is not None and got.delivered and got.delivered_to == frozenset({"n1", "n2"})
    assert still is not None and not still.delivered and still.delivered_to == frozenset()
    # "n" is not "n1": a name held inside another's is still added
    store.mark_delivered([gang], "n")
    got = store.get_job(gang)
    assert got is not None and got.delivered_to == frozenset({"n", "n1", "n2"})
    # a delivery already noted writes nothing: the row's version stays, so no reader loads the job again
    _, loaded = store.list_jobs_changed([JobState.RUNNING], {})
    known = {j.id: v for j, v in loaded}
    store.mark_delivered([gang], "n1")
    assert store.list_jobs_changed([JobState.RUNNING], known) == ([gang], [])
    store.mark_delivered([], "n1")  # nothing to note
    assert store.finish_job(gang, JobState.SUCCEEDED, 0, "", T0)
    store.mark_delivered([gang], "n3")  # an ended job is not marked
    got = store.get_job(gang)
    assert got is not None and got.delivered_to == frozenset({"n", "n1", "n2"})


def test_create_job_once_is_idempotent_by_key(store: SchedulingStore) -> None:
    spec = JobSpec(command=("x",))
    made, created = store.create_job_once(spec, T0, "alice", "k1", "h1", timedelta(hours=1))
    again, created_again = store.create_job_once(spec, T0, "alice", "k1", "h1", timedelta(hours=1))
    assert created and not created_again and again.id == made.id
    with pytest.raises(IdempotencyKeyReused):
        store.create_job_once(spec, T0, "alice", "k1", "other", timedelta(hours=1))
    assert store.count_jobs() == 1


def test_an_array_is_made_in_one_call_with_the_first_tasks_id(store: SchedulingStore) -> None:
    other = job(store)
    tasks = [JobSpec(command=("x",), array_index=i, array_limit=2) for i in (0, 5, 7)]
    made = store.create_jobs(tasks, T0)
    assert [m.spec.array_index for m in made] == [0, 5, 7] and all(m.state is JobState.PENDING for m in made)
    assert {m.spec.array_id for m in made} == {made[0].id} and made[0].id != other
    assert [j.id for j in store.list_jobs(array_id=made[0].id)] == [m.id for m in made]
    stored = store.get_job(made[2].id)
    assert stored is not None and (stored.spec.array_id, stored.spec.array_limit) == (made[0].id, 2)
    plain = store.create_jobs([JobSpec(command=("a",)), JobSpec(command=("b",))], T0)
    assert [p.spec.array_id for p in plain] == [None, None]  # a batch of jobs is not an array
    assert store.create_jobs([], T0) == []  # an empty batch makes nothing (not a job of the columns' defaults)
    assert store.count_jobs() == 6


def test_each_array_of_a_batch_gets_its_own_id(store: SchedulingStore) -> None:
    # As the API passes them: each array's tasks keyed by their body's place in the call (a batch found that
    # the plain job first left the array without an id, and a second array took the first one's).
    plain = JobSpec(command=("p",))
    first = [JobSpec(command=("a",), array_id=1, array_index=i, array_limit=1) for i in range(2)]
    second = [JobSpec(command=("b",), array_id=2, array_index=i, array_limit=5) for i in range(3)]
    made = store.create_jobs([plain, *first, plain, *second], T0)
    ids = [m.id for m in made]
    assert [m.spec.array_id for m in made] == [None, ids[1], ids[1], None, ids[4], ids[4], ids[4]]
    assert [j.spec.array_limit for j in store.list_jobs(array_id=ids[4])] == [5, 5, 5]


def test_concurrent_submissions_never_pass_the_active_limit_together(store: SchedulingStore) -> None:
    tenant = store.create_tenant("vision", T0)
    specs = [JobSpec(command=("x",), tenant_id=tenant.id) for _ in range(5)]
    outcomes: list[str] = []

    def submit() -> None:
        try:
            store.create_jobs(specs, T0, max_active=10)
            outcomes.append("made")
        except TooManyRequestsError:
            outcomes.append("refused")

    threads = [threading.Thread(target=submit) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(outcomes) == ["made"] * 2 + ["refused"] * 6
    assert store.count_jobs(tenant_id=tenant.id) == 10
    with pytest.raises(TooManyRequestsError, match="limit of 10"):  # a replay-free key is refused the same way
        store.create_jobs_once(specs[:1], T0, "alice", "k9", "h", timedelta(hours=1), max_active=10)


def test_the_active_limit_counts_each_tenant_of_a_call_against_its_own_jobs(store: SchedulingStore) -> None:
    # One call naming two tenants: the second tenant's jobs are checked against its own count, not the first's.
    small, full = store.create_tenant("small", T0), store.create_tenant("full", T0)
    store.create_jobs([JobSpec(command=("x",), tenant_id=full.id) for _ in range(3)], T0)
    mixed = [JobSpec(command=("x",), tenant_id=small.id), JobSpec(command=("x",), tenant_id=full.id)]
    with pytest.raises(TooManyRequestsError, match="has 3 jobs pending or running; 1 more would pass its limit of 3"):
        store.create_jobs(mixed, T0, max_active=3)
    assert store.count_jobs(tenant_id=small.id) == 0 and store.count_jobs(tenant_id=full.id) == 3
    store.create_jobs(mixed, T0, max_active=4)
    assert store.count_jobs(tenant_id=small.id) == 1 and store.count_jobs(tenant_id=full.id) == 4


def test_create_jobs_once_refuses_an_empty_call_and_keeps_no_key(store: SchedulingStore) -> None:
    with pytest.raises(ValueError, match="at least one job"):
        store.create_jobs_once([], T0, "alice", "k0", "h0", timedelta(hours=1))
    made, created = store.create_jobs_once([JobSpec(command=("x",))], T0, "alice", "k0", "h1", timedelta(hours=1))
    assert created and len(made) == 1


def test_create_jobs_once_replays_every_job_of_the_first_call(store: SchedulingStore) -> None:
    specs = [JobSpec(command=("x",), array_index=i) for i in range(3)]
    made, created = store.create_jobs_once(specs, T0, "alice", "k1", "h1", timedelta(hours=1))
    again, created_again = store.create_jobs_once(specs, T0, "alice", "k1", "h1", timedelta(hours=1))
    assert created and not created_again and [j.id for j in again] == [j.id for j in made]
    with pytest.raises(IdempotencyKeyReused):
        store.create_jobs_once(specs[:1], T0, "alice", "k1", "h2", timedelta(hours=1))
    assert store.count_jobs() == 3


def test_pages_by_id_in_both_directions(store: SchedulingStore) -> None:
    ids = [job(store) for _ in range(5)]
    assert [j.id for j in store.list_jobs(limit=2, after_id=ids[1])] == ids[2:4]
    assert [j.id for j in store.list_jobs(limit=2, newest_first=True, before_id=ids[3])] == [ids[2], ids[1]]


def test_name_filter_is_any_case_literal_text_and_counts_agree(store: SchedulingStore) -> None:
    tenant = store.create_tenant("vision", T0).id
    ids = {
        n: job(store, name=n, tenant_id=tenant if n != "Train-BERT" else None)
        for n in ("train-a", "eval_5%", "Train-BERT")
    }
    cases = {
        "train": ["train-a", "Train-BERT"],
        "TRAIN-": ["train-a", "Train-BERT"],
        "_5%": ["eval_5%"],
        "%": ["eval_5%"],
        "_": ["eval_5%"],
        "nothing": [],
    }
    for text, names in cases.items():
        assert [j.id for j in store.list_jobs(name_contains=text)] == [ids[n] for n in names], text
        assert store.count_jobs(name_contains=text) == len(names), text
    assert [j.id for j in store.list_jobs(name_contains="train", tenant_id=tenant)] == [ids["train-a"]]
    assert store.count_jobs(name_contains="train", tenant_id=tenant, states=[JobState.PENDING]) == 1
    assert store.count_jobs(user_id=10_000) == 0 and store.list_jobs(user_id=10_000) == []


# ---- the guarded assign: what it re-checks -----------------------------------------
def _cordon(s: SchedulingStore) -> None:
    s.set_node_cordoned("n1", True)  # type: ignore[attr-defined]


def _disable(s: SchedulingStore) -> None:
    s.set_gpu_disabled("n1", 0, True)  # type: ignore[attr-defined]


def _unhealthy(s: SchedulingStore) -> None:
    s.set_gpu_health("n1", 0, False, "xid 79")  # type: ignore[attr-defined]


def _lost(s: SchedulingStore) -> None:
    s.mark_nodes_lost(LATER)


def _half_used(s: SchedulingStore) -> None:
    assert s.assign_job_parts(job(s, gpu_milli=500), [("n1", [0])], T0)


def NO_CHANGE(s: SchedulingStore) -> None:  # named as a constant: an entry of the table below
    """Nothing happens before the assignment."""


REFUSED = [  # (name, what happens first, the job asked, its parts)
    ("unknown node", NO_CHANGE, {}, [("ghost", [0])]),
    ("unknown GPU", NO_CHANGE, {}, [("n1", [7])]),
    ("cordoned node", _cordon, {}, [("n1", [0])]),
    ("lost node", _lost, {}, [("n1", [0])]),
    ("disabled GPU", _disable, {}, [("n1", [0])]),
    ("unhealthy GPU", _unhealthy, {}, [("n1", [0])]),
    ("share beyond the GPU", _half_used, {"gpu_milli": 750}, [("n1", [0])]),
    ("whole GPU on a shared one", _half_used, {}, [("n1", [0])]),
    ("host CPU", NO_CHANGE, {"cpu_milli": 9000}, [("n1", [0])]),
    ("host memory", NO_CHANGE, {"memory_mib": 70000}, [("n1", [0])]),
    ("a GPU twice", NO_CHANGE, {"gpus": 2}, [("n1", [0, 0])]),
    ("two parts on one node", NO_CHANGE, {"nodes": 2}, [("n1", [0]), ("n1", [1])]),
    ("one bad part of a gang", NO_CHANGE, {"nodes": 2}, [("n1", [0]), ("ghost", [0])]),
]


@pytest.mark.parametrize(("first", "asked", "parts"), [pytest.param(*c[1:], id=c[0]) for c in REFUSED])
def test_assign_refuses_what_does_not_fit_and_writes_nothing(
    store: SchedulingStore,
    first: Callable[[SchedulingStore], None],
    asked: dict[str, object],
    parts: list[tuple[str, list[int]]],
) -> None:
    node(store, "n1")
    first(store)
    j = job(store, **asked)
    events = store.list_events(j)
    assert not store.assign_job_parts(j, parts, T0)
    got = store.get_job(j)
    assert got is not None and got.state is JobState.PENDING and got.placed_parts == () and got.attempt == 0
    assert store.list_events(j) == events


def test_shares_fill_a_gpu_exactly_and_host_resources_add_up(store: SchedulingStore) -> None:
    node(store, "n1", cpu_milli=4000, memory_mib=1024)
    for milli in (250, 250, 500):
        assert store.assign_job_parts(job(store, gpu_milli=milli, cpu_milli=1000, memory_mib=256), [("n1", [0])], T0)
    assert not store.assign_job_parts(job(store, gpu_milli=250), [("n1", [0])], T0)  # 1000 milli in use
    assert store.assign_job_parts(job(store, cpu_milli=1000, memory_mib=256), [("n1", [1])], T0)  # CPU/memory full now
    assert not store.assign_job_parts(job(store, gpus=0, cpu_milli=1), [("n1", [])], T0)
    assert store.assign_job_parts(job(store, gpus=0), [("n1", [])], T0)  # asks for nothing: fits


# ---- nodes ------------------------------------------------------------------------
def test_nodes_register_beat_and_get_lost(store: SchedulingStore) -> None:
    node(store, "b")
    node(store, "a", n=4)
    assert [n.name for n in store.list_nodes()] == ["a", "b"]
    got = store.upsert_node("a", "host-a", "simulated", 1, 2, {"zone": "z"}, gpus("a", 1), T0)
    assert (len(got.gpus), got.labels, got.state) == (1, {"zone": "z"}, "READY")
    assert sorted(store.mark_nodes_lost(T0 + timedelta(seconds=1))) == ["a", "b"]  # in no promised order
    assert store.touch_node("a", LATER) and not store.touch_node("ghost", LATER)
    assert [(n.name, n.state) for n in store.list_nodes()] == [("a", "READY"), ("b", "LOST")]
    assert store.mark_node_lost("a") and not store.mark_node_lost("ghost")


def test_gpu_health_follows_the_gpu_across_registrations(store: SchedulingStore) -> None:
    node(store, "n1")
    store.set_gpu_health("n1", 1, False, "xid 79")  # type: ignore[attr-defined]
    node(store, "n1")  # the agent restarts and registers again
    got = store.get_node("n1")
    assert got is not None and [g.healthy for g in got.gpus] == [True, False]


# ---- tenancy ----------------------------------------------------------------------
def test_tenants_quotas_queues_and_usage(store: SchedulingStore) -> None:
    team = store.create_tenant("team", T0, weight=2.0)
    with pytest.raises(ConflictError):
        store.create_tenant("team", T0)
    assert store.find_tenant("team") == team and store.get_tenant(team.id) == team and store.find_tenant("x") is None
    assert [(q.name, q.mode) for q in store.list_queues(team.id)] == [("default", "best-effort")]
    store.upsert_queue(team.id, "batch", "strict", 1)
    store.upsert_queue(team.id, "batch", "best-effort", 2)
    assert [(q.name, q.mode, q.priority) for q in store.list_queues(team.id)] == [
        ("batch", "best-effort", 2),
        ("default", "best-effort", 0),
    ]
    store.set_quota(Quota(team.id, "H100", 4, None))
    store.set_quota(replace(Quota(team.id, "H100", 4, None), max_gpus=8))
    assert store.list_quotas(team.id) == [Quota(team.id, "H100", 4, 8)]
    assert store.delete_quota(team.id, "H100") and not store.delete_quota(team.id, "H100")
    assert store.set_tenant_weight(team.id, 3.0) and not store.set_tenant_weight(10_000, 1.0)
    assert store.load_usage() == ({}, None)
    store.save_usage({team.id: 12.5, 10_000: 1.0}, T0)  # an unknown tenant is dropped
    assert store.load_usage() == ({team.id: 12.5}, T0)


# ---- reading through a JobCache (row versions) ------------------------------------------
MOVES: dict[str, Callable[[SchedulingStore, int, random.Random], Any]] = {
    "submit": lambda s, _, r: s.create_job(JobSpec(command=("x",), gpus=1, priority=r.randint(0, 9)), T0),
    "assign": lambda s, i, r: s.assign_job_parts(i, [(r.choice(["n1", "n2"]), [r.randint(0, 1)])], T0),
    "finish": lambda s, i, _: s.finish_job(i, JobState.SUCCEEDED, 0, "", T0),
    "requeue": lambda s, i, r: s.requeue_job(i, "node lost", T0 + timedelta(seconds=r.randint(1, 99))),
    "preempt": lambda s, i, _: s.request_preempt(i, "for another", T0, 1),
    "cancel": lambda s, i, _: s.request_cancel(i, T0),
    "deliver": lambda s, i, _: s.mark_delivered([i], "n1"),
    "phase": lambda s, i, _: s.set_job_phase(i, 1, "pulling 5%"),
    # (the memory store keeps no staging: the simulators stage nothing)
    "stage": lambda s, i, _: (
        isinstance(s, SqlStore) and s.update_staging(i, ("", None), "staging", "n1", "staging input", ["n1"])
    ),
    "nothing": lambda s, i, _: s.get_job(i),
}


def random_moves(store: SchedulingStore, rnd: random.Random, jobs: int, steps: int) -> Iterator[tuple[str, list[int]]]:
    """On two nodes and `jobs` jobs, `steps` random MOVES: each move's name and the job ids so far, after it."""
    node(store, "n1")
    node(store, "n2")
    ids = [store.create_job(JobSpec(command=("x",), gpus=1), T0).id for _ in range(jobs)]
    for _ in range(steps):
        move = rnd.choice(sorted(MOVES))
        got = MOVES[move](store, rnd.choice(ids), rnd)
        if move == "submit":
            ids.append(got.id)
        yield move, ids


@pytest.mark.parametrize("seed", range(3))
def test_reading_through_the_cache_always_gives_what_list_jobs_gives(store: SchedulingStore, seed: int) -> None:
    caches = {st: JobCache(store, [st]) for st in (JobState.PENDING, JobState.RUNNING)}
    both = JobCache(store, [JobState.PENDING, JobState.RUNNING])
    for move, _ in random_moves(store, random.Random(seed), 6, 60):
        for st, cache in caches.items():
            assert cache.read() == store.list_jobs(states=[st]), move
        assert both.read() == store.list_jobs(states=[JobState.PENDING, JobState.RUNNING]), move


STATE_SETS = [
    [JobState.PENDING, JobState.RUNNING],
    [JobState.RUNNING, JobState.PENDING, JobState.RUNNING],
    [JobState.SUCCEEDED, JobState.CANCELLED, JobState.PENDING],
    [JobState.RUNNING],
    None,
]


@pytest.mark.parametrize("seed", range(3))
def test_a_page_is_the_slice_of_the_whole_list_it_stands_for(store: SchedulingStore, seed: int) -> None:
    # A page (list_jobs with a limit) reads ids and versions, then only the rows it does not hold at that version,
    # and reads several states as one range per state: after any change it must still be exactly that slice.
    rnd = random.Random(seed)
    for move, ids in random_moves(store, rnd, 8, 50):
        states, newest = rnd.choice(STATE_SETS), rnd.random() < 0.5
        whole = store.list_jobs(states=states, newest_first=newest)
        limit = rnd.randint(1, 6)
        assert store.list_jobs(states=states, limit=limit, newest_first=newest) == whole[:limit], move
        mark = rnd.choice(ids)
        after = [j for j in whole if (j.id < mark if newest else j.id > mark)]
        cursor = {"before_id": mark} if newest else {"after_id": mark}
        assert store.list_jobs(states=states, limit=limit, newest_first=newest, **cursor) == after[:limit], move


def test_a_page_whose_rows_change_between_its_two_reads_is_read_whole_again(tmp_path: Path) -> None:
    # The ids and versions, then the rows: two statements, two snapshots on PostgreSQL (and SQLite outside a
    # transaction). A job cancelled in between must not show in a page of pending jobs as CANCELLED.
    from sqlalchemy import event, text

    store = open_store(f"sqlite:///{tmp_path / 'p.db'}")
    try:
        a, b, c = (store.create_job(JobSpec(command=("x",)), T0).id for _ in range(3))
        fired: list[str] = []

        def meanwhile(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
            if not fired and "jobs.id IN" in statement and "row_version" in statement:
                fired.append(statement)
                with store.engine.connect() as other:
                    other.execute(text("UPDATE jobs SET state = 'CANCELLED' WHERE id = :i"), {"i": b})
                    other.commit()

        event.listen(store.engine, "before_cursor_execute", meanwhile)
        page = store.list_jobs(states=[JobState.PENDING, JobState.RUNNING], limit=10)
        assert fired
        assert [(j.id, j.state) for j in page] == [(a, JobState.PENDING), (c, JobState.PENDING)]
    finally:
        store.close()


def test_a_page_never_shows_a_deleted_job_kept_under_an_id_made_again(tmp_path: Path) -> None:
    # SQLite gives the largest id of a deleted row to the next one, at row version 0 again: the kept job must not
    # stand for the new row (another tenant's command and environment would show)
    from sqlalchemy import text

    store = open_store(f"sqlite:///{tmp_path / 'r.db'}")
    try:
        first = store.create_job(JobSpec(command=("secret",), env={"TOKEN": "a"}), T0)
        assert store.list_jobs(limit=10)[0].spec.command == ("secret",)
        with store.engine.begin() as conn:
            conn.execute(text("DELETE FROM jobs WHERE id = :i"), {"i": first.id})
        again = store.create_job(JobSpec(command=("other",)), T0 + timedelta(seconds=1))
        assert again.id == first.id
        page = store.list_jobs(limit=10)
        assert [(j.id, j.spec.command, dict(j.spec.env)) for j in page] == [(again.id, ("other",), {})]
    finally:
        store.close()


def test_a_page_keeps_no_job_with_a_large_command_or_environment(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'b.db'}")
    try:
        big = store.create_job(JobSpec(command=("x",), env={f"V{i}": "v" * 4000 for i in range(4)}), T0).id
        small = store.create_job(JobSpec(command=("x",)), T0).id
        assert [j.id for j in store.list_jobs(limit=10)] == [big, small]
        assert set(store._paged) == {small}
    finally:
        store.close()


def test_a_job_no_change_touched_is_not_loaded_again(store: SchedulingStore) -> None:
    a, b = (store.create_job(JobSpec(command=("x",)), T0).id for _ in range(2))
    cache = JobCache(store, [JobState.PENDING])
    cache.read()
    known = {a: _version(store, a), b: _version(store, b)}
    assert store.list_jobs_changed([JobState.PENDING], known) == ([a, b], [])
    store.request_cancel(b, T0)
    c = store.create_job(JobSpec(command=("y",)), T0).id
    ids, changed = store.list_jobs_changed([JobState.PENDING], known)
    assert ids == [a, c] and [j.id for j, _ in changed] == [c]
    assert [j.id for j in cache.read()] == [a, c]


def _version(store: SchedulingStore, job_id: int) -> int:
    _, loaded = store.list_jobs_changed([JobState.PENDING], {})
    return next(v for j, v in loaded if j.id == job_id)
