"""list_runs_between, what usage reports read (SQLite and PostgreSQL): each run's placement comes back as stored,
whatever other runs share it (the store decodes each distinct placement text once)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from corral.core.states import JobState
from corral.store.records import JobSpec

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def test_runs_carry_their_own_placements(store: Any, ready_nodes: Callable[..., None]) -> None:
    ready_nodes("a", "b")
    one = store.create_job(JobSpec(command=("x",), gpus=2), T0).id
    same = store.create_job(JobSpec(command=("x",), gpus=2), T0).id  # the same placement, after `one` ends
    gang = store.create_job(JobSpec(command=("x",), gpus=1, nodes=2), T0).id
    never = store.create_job(JobSpec(command=("x",), gpus=1), T0).id  # never started: not a run
    assert store.assign_job(one, "a", [0, 1], T0)
    assert store.finish_job(one, JobState.SUCCEEDED, 0, "", T0 + timedelta(minutes=10))
    assert store.assign_job(same, "a", [0, 1], T0 + timedelta(minutes=20))
    assert store.assign_job_parts(gang, [("a", [2]), ("b", [3])], T0 + timedelta(minutes=30))
    runs = store.list_runs_between(T0 - timedelta(hours=1), T0 + timedelta(hours=1))
    by_id = {r[0]: r for r in runs}
    assert set(by_id) == {one, same, gang}
    # (id, tenant, user, gpus, milli, nodes, started, finished, node, gpu_indices, parts, util)
    assert by_id[one][6:11] == (T0, T0 + timedelta(minutes=10), "a", [0, 1], by_id[one][10])
    assert by_id[one][9] == by_id[same][9] == [0, 1]
    assert by_id[same][7] is None
    assert [(n, list(g)) for n, g in by_id[gang][10]] == [("a", [2]), ("b", [3])]
    # Two runs of the same placement get lists of their own: a caller changing one changes nothing else.
    by_id[one][9].append(7)
    assert by_id[same][9] == [0, 1]
    assert store.list_runs_between(T0, T0 + timedelta(hours=1))[0][9] == [0, 1]
    # Without placements: empty lists, the rest the same.
    bare = {r[0]: r for r in store.list_runs_between(T0, T0 + timedelta(hours=1), with_placement=False)}
    assert bare[gang][9:11] == ([], []) and bare[gang][:9] == by_id[gang][:9]
    assert never not in bare
    # A gang's parts hold inner lists: two runs of the same placement share none of them either.
    twin = store.create_job(JobSpec(command=("x",), gpus=1, nodes=2), T0).id  # the gang's placement again
    assert store.finish_job(gang, JobState.SUCCEEDED, 0, "", T0 + timedelta(minutes=40))
    assert store.assign_job_parts(twin, [("a", [2]), ("b", [3])], T0 + timedelta(minutes=50))
    again = {r[0]: r for r in store.list_runs_between(T0, T0 + timedelta(hours=1))}
    again[gang][10][0][1].append(9)  # an inner list of one run's parts
    assert [(n, list(g)) for n, g in again[twin][10]] == [("a", [2]), ("b", [3])]
