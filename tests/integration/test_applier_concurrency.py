"""No GPU is ever given twice: two appliers commit conflicting plans at the same moment (SQLite with two connections,
PostgreSQL, memory), and afterwards no GPU holds more than 1000 milli and every job is fully placed as one of the
plans said, or untouched (PENDING, nowhere). The issue's "done when" property for the guarded commit."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral.core.resources import GpuInfo, Placement
from corral.core.states import JobState
from corral.scheduler.plan import Admit, Plan
from corral.store.applier import AppliedPlan, apply_plan
from corral.store.memory import MemoryStore
from corral.store.protocols import SchedulingStore
from corral.store.records import JobSpec
from corral.store.sql import SqlStore, open_store

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
GPUS_PER_NODE = 4
EXAMPLE = itertools.count()  # examples share one database: each uses nodes of its own


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres), "memory"])
def two_stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[SchedulingStore, SchedulingStore]]:
    """Two writers on one database: two SqlStore objects (two engines: neither's in-process lock helps the
    other, only the database's own locking does) or one MemoryStore seen by two threads."""
    if request.param == "memory":
        mem = MemoryStore()
        yield mem, mem
        return
    url = (
        f"sqlite:///{tmp_path / 'race.db'}"
        if request.param == "sqlite"
        else str(request.getfixturevalue("postgres_url"))
    )
    a: SqlStore = open_store(url)
    b = SqlStore(url)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


# A job: (whole GPUs or one GPU's share in milli, nodes of its gang); a plan gives it concrete GPUs.
job_shapes = st.tuples(st.sampled_from([250, 500, 750, 1000, 2000, 3000]), st.integers(1, 2))


@st.composite
def conflicting_plans(
    draw: st.DrawFn,
) -> tuple[int, list[tuple[int, int, int]], list[dict[int, list[tuple[int, tuple[int, ...]]]]]]:
    """(node count, jobs as (gpus, milli, nodes), two plans: job index -> [(node, GPU indices)] per part)."""
    node_count = draw(st.integers(2, 3))
    jobs = []
    for milli_or_gpus, nodes in draw(st.lists(job_shapes, min_size=2, max_size=8)):
        gpus, milli = (1, milli_or_gpus) if milli_or_gpus < 1000 else (milli_or_gpus // 1000, 1000)
        jobs.append((gpus, milli, min(nodes, node_count)))
    plans: list[dict[int, list[tuple[int, tuple[int, ...]]]]] = [{}, {}]
    for k, (gpus, _, nodes) in enumerate(jobs):
        for plan in draw(st.sampled_from([[0], [1], [0, 1]])):  # in one plan, the other, or both (two schedulers)
            on = draw(st.permutations(range(node_count)))[:nodes]
            plans[plan][k] = [(n, tuple(sorted(draw(st.permutations(range(GPUS_PER_NODE)))[:gpus]))) for n in on]
    return node_count, jobs, plans


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(case=conflicting_plans())
def test_two_appliers_never_give_a_gpu_twice(
    two_stores: tuple[SchedulingStore, SchedulingStore],
    case: tuple[int, list[tuple[int, int, int]], list[dict[int, list[tuple[int, tuple[int, ...]]]]]],
) -> None:
    node_count, jobs, plans = case
    a, b = two_stores
    prefix = f"e{next(EXAMPLE)}"
    names = [f"{prefix}-n{i}" for i in range(node_count)]
    for name in names:
        a.upsert_node(
            name,
            name,
            "simulated",
            0,
            0,
            {},
            [GpuInfo(index=i, uuid=f"{name}-{i}", model="H100-80GB", memory_mib=81920) for i in range(GPUS_PER_NODE)],
            T0,
        )
    ids = [a.create_job(JobSpec(command=("x",), gpus=g, gpu_milli=m, nodes=n), T0).id for g, m, n in jobs]
    built = [
        Plan(
            admit=tuple(
                Admit(
                    str(ids[k]),
                    "H100-80GB",
                    tuple(Placement(node=names[n], gpu_indices=g, gpu_milli=jobs[k][1]) for n, g in parts),
                )
                for k, parts in p.items()
            ),
            preempt=(),
            nominate=(),
            pending={},
        )
        for p in plans
    ]

    results: list[AppliedPlan] = [AppliedPlan(), AppliedPlan()]
    barrier = threading.Barrier(2)

    def run(i: int, store: SchedulingStore) -> None:
        barrier.wait()
        results[i] = apply_plan(store, built[i], T0)

    threads = [threading.Thread(target=run, args=(i, s)) for i, s in enumerate((a, b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    # no GPU over its capacity
    used: dict[tuple[str, int], int] = {}
    for held in a.list_jobs(states=[JobState.RUNNING]):
        for node, gpus in held.placed_parts:
            for idx in gpus:
                used[(node, idx)] = used.get((node, idx), 0) + held.spec.gpu_milli
    assert {k: v for k, v in used.items() if v > 1000} == {}
    # each job fully placed as one plan said (and started by that plan only), or untouched
    for k, job_id in enumerate(ids):
        job = a.get_job(job_id)
        assert job is not None
        starters = [i for i in (0, 1) if str(job_id) in results[i].started]
        if job.state is JobState.PENDING:
            assert job.placed_parts == () and starters == []
            continue
        assert job.state is JobState.RUNNING and len(starters) == 1
        want = tuple((names[n], g) for n, g in plans[starters[0]][k])
        assert job.placed_parts == want
    # every admission is answered: started or rejected, never both, never lost
    for i in (0, 1):
        r = results[i]
        assert sorted(r.started + r.rejected) == sorted(str(ids[k]) for k in plans[i])
    # liveness: the first job each plan admits fits on an empty cluster, so something started
    if plans[0] or plans[1]:
        assert results[0].started or results[1].started
