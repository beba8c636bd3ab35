"""Where a job runs: its GPUs and its rank on each node, for gangs and for rows written before gangs."""

from __future__ import annotations

from datetime import UTC, datetime

from corral.core.models import Job, JobSpec, compute_placed_parts
from corral.core.states import JobState

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SPEC = JobSpec(command=("python", "train.py"), gpus=2)


def _job(**kw: object) -> Job:
    return Job(id=1, spec=SPEC, state=JobState.RUNNING, created_at=T0, **kw)  # type: ignore[arg-type]


def test_a_gangs_gpus_and_rank_per_node() -> None:
    gang = _job(parts=(("n1", (0, 1)), ("n2", (2, 3)), ("n3", (5,))))
    assert [gang.gpus_on(n) for n in ("n1", "n2", "n3")] == [(0, 1), (2, 3), (5,)]
    assert [gang.rank_on(n) for n in ("n1", "n2", "n3")] == [0, 1, 2]


def test_a_node_the_job_is_not_on_has_no_gpus_and_rank_zero() -> None:
    gang = _job(parts=(("n1", (0, 1)), ("n2", (2, 3))))
    assert gang.gpus_on("elsewhere") == ()
    assert gang.rank_on("elsewhere") == 0
    assert _job().gpus_on("n1") == () and _job().rank_on("n1") == 0  # never placed


def test_a_row_from_before_gangs_runs_on_its_one_node() -> None:
    old = _job(node="n7", gpu_indices=(3, 4))
    assert old.gpus_on("n7") == (3, 4) and old.rank_on("n7") == 0
    assert old.gpus_on("n1") == ()


def test_placements_are_read_from_stored_columns() -> None:
    # stored parts come back from JSON as lists, maybe with numbers as text
    stored = [["n1", [0, 1]], ["n2", ["2", 3]]]
    assert compute_placed_parts("ignored", [9], stored) == (("n1", (0, 1)), ("n2", (2, 3)))
    assert compute_placed_parts("n7", [3, 4], []) == (("n7", (3, 4)),)  # a row from before gangs
    assert compute_placed_parts(None, [], []) == ()  # never placed
    assert compute_placed_parts("", [], []) == ()
