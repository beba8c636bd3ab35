"""Victim selection (preemption.select_victims): only as many as needed, none when not enough can be freed;
rank victims must rank below the waiting job and have run the policy's minimum; reclaim takes only from
tenants above their guarantee, within the job's cohort tree."""

from __future__ import annotations

from queue_builders import MODEL, book, job, quota, running

from corral.scheduler.queueing import QuotaBook, RunningJob
from corral.scheduler.queueing.preemption import RANK, RECLAIM, order_reclaim_candidates, select_victims
from corral.scheduler.queueing.quota import compute_usage

NOW = 1000.0


def ranked_below(_: RunningJob) -> tuple[float, ...]:
    return (1.0,)


def rank_victims(run: list[RunningJob], min_run_s: float, shortfall: int = 1000) -> list[str] | None:
    got = select_victims(
        job("w", "a"), MODEL, shortfall, run, set(), compute_usage(run), QuotaBook(), RANK, (0.0,), ranked_below,
        NOW, min_run_s,
    )  # fmt: skip
    return None if got is None else [r.job.id for r in got]


def test_rank_victims_must_have_run_the_minimum() -> None:
    assert rank_victims([running(job("young", "b"), start=NOW - 10)], min_run_s=30.0) is None
    assert rank_victims([running(job("old", "b"), start=NOW - 31)], min_run_s=30.0) == ["old"]
    assert rank_victims([running(job("just", "b"), start=NOW - 30)], min_run_s=30.0) == ["just"]


def test_rank_victims_skip_the_too_young_and_take_the_next() -> None:
    run = [running(job("young", "b"), start=NOW - 5), running(job("old", "b"), start=NOW - 100)]
    assert rank_victims(run, min_run_s=30.0) == ["old"]


def test_a_victim_set_that_frees_too_little_is_none_even_by_one_milli_gpu() -> None:
    b = book(quota("a", 1), quota("b", 0))
    run = [running(job("share", "b", gpu_milli=499))]
    settled = compute_usage(run)
    got = select_victims(job("w", "a", gpu_milli=500), MODEL, 500, run, set(), settled, b, RECLAIM)
    assert got is None
    assert settled["b"][MODEL] == 499  # nothing taken, nothing counted as freed
    got = select_victims(job("w", "a", gpu_milli=499), MODEL, 499, run, set(), settled, b, RECLAIM)
    assert got is not None and [r.job.id for r in got] == ["share"]
    assert settled["b"][MODEL] == 0


def test_reclaim_takes_only_what_is_needed_in_victim_order() -> None:
    b = book(quota("a", 4, 8), quota("b", 0, 8))
    run = [running(job(f"b{i}", "b"), start=float(i)) for i in range(4)]
    taken: set[str] = set()
    got = select_victims(
        job("w", "a", 2), MODEL, 2000, order_reclaim_candidates(run), taken, compute_usage(run), b, RECLAIM
    )
    assert got is not None and [r.job.id for r in got] == ["b3", "b2"]  # most recently started first
    assert taken == {"b3", "b2"}
