"""Rank (time-slice) preemption never takes a job from a tenant at or below its guarantee: only what a tenant
borrows beyond it may be sliced away, and only down to the guarantee."""

from __future__ import annotations

import pytest
from queue_builders import MODEL, admit, book, job, quota, running

from corral.scheduler.queueing import AdmissionPlan, QuotaBook, RunningJob
from corral.scheduler.queueing.preemption import RANK, select_victims
from corral.scheduler.queueing.quota import compute_usage


def _hogs(tenant: str, n: int) -> list[RunningJob]:
    """`n` one-GPU jobs of `tenant` that have run long (they rank below any newcomer under las)."""
    return [running(job(f"{tenant}{i}", tenant, 1, attained_gpu_s=1e6), start=0) for i in range(n)]


def _plan(b_guarantee: int, b_running: int, pool: int) -> AdmissionPlan:
    quotas = book(quota("a", 0, pool), quota("b", b_guarantee, pool))
    return admit(
        [job("a1", "a", 1, submit=1000)], gpus=pool, run=_hogs("b", b_running), quotas=quotas, policy="las", now=1000
    )


@pytest.mark.parametrize(("guarantee", "held"), [(2, 2), (3, 2)], ids=["at-guarantee", "below-guarantee"])
def test_a_tenant_within_its_guarantee_is_never_sliced(guarantee: int, held: int) -> None:
    plan = _plan(guarantee, held, pool=held)
    assert plan.preempt == ()
    assert plan.pending["a1"].reason == "capacity"


@pytest.mark.parametrize(("guarantee", "held", "taken"), [(1, 2, 1), (0, 2, 1), (1, 3, 1)])
def test_a_borrowing_tenant_loses_only_what_is_needed(guarantee: int, held: int, taken: int) -> None:
    plan = _plan(guarantee, held, pool=held)
    assert len(plan.preempt) == taken and all(p.kind == RANK and p.for_job_id == "a1" for p in plan.preempt)
    assert plan.pending["a1"].reason == "preempting"


@pytest.mark.parametrize(("guarantee", "expected"), [(2, None), (3, None), (1, ["b0"])])
def test_select_victims_rank_stops_at_the_guarantee(guarantee: int, expected: list[str] | None) -> None:
    run = _hogs("b", 2)
    quotas: QuotaBook = book(quota("a", 0, 2), quota("b", guarantee, 3))
    victims = select_victims(
        job("a1", "a", 1),
        MODEL,
        1000,
        run,
        set(),
        compute_usage(run),
        quotas,
        RANK,
        job_rank=(0.0,),
        rank_of=lambda r: (1.0,),
    )
    assert (None if victims is None else [v.job.id for v in victims]) == expected
