"""EASY backfill: small jobs run ahead of a blocked head only when they don't delay its reserved start."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from queue_builders import MODEL, admit, admitted, job, running

from corral.scheduler.queueing import QueueConfig, QueueingPolicy
from corral.scheduler.queueing.backfill import compute_reservation

STRICT_BACKFILL = QueueingPolicy("test", "fifo", head_blocks=True, backfill=True)


@dataclass
class Case:
    name: str
    candidate_gpus: int
    candidate_limit_s: float | None
    expect_backfilled: bool


# 8 GPUs; a 6-GPU job runs until t=100 (time limit); head needs 8 -> reserved start 100, 0 spare then.
# 2 GPUs are free now.
CASES = [
    Case("short job ends before the reserved start", 2, 50.0, True),
    Case("job ending exactly at the reserved start", 2, 100.0, True),
    Case("long job would delay the head", 2, 150.0, False),
    Case("job without a time limit would delay the head", 1, None, False),
    Case("job bigger than the free GPUs", 3, 10.0, False),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_easy_backfill(case: Case) -> None:
    run = [running(job("r", gpus=6, time_limit_s=100.0))]
    pending = [
        job("head", gpus=8, submit=1),
        job("cand", gpus=case.candidate_gpus, submit=2, time_limit_s=case.candidate_limit_s),
    ]
    plan = admit(pending, gpus=8, run=run, policy=STRICT_BACKFILL)
    assert ("cand" in admitted(plan)) == case.expect_backfilled
    assert "head" not in admitted(plan)
    if not case.expect_backfilled:
        assert plan.pending["cand"].reason in ("backfill-reserved", "behind-head")


def test_extra_gpus_let_any_job_through() -> None:
    # 8 GPUs: 4 held until t=100; head needs 6 -> at t=100, 8 free, 2 spare: a 2-GPU job of any length fits.
    run = [running(job("r", gpus=4, time_limit_s=100.0))]
    plan = admit(
        [job("head", gpus=6, submit=1), job("x", gpus=2, submit=2), job("y", gpus=1, submit=3)],
        gpus=8,
        run=run,
        policy=STRICT_BACKFILL,
    )
    assert admitted(plan) == ["x"]  # x takes the spare GPUs; y (no limit) would then delay the head


def test_reservation_is_unknown_without_time_limits() -> None:
    res = compute_reservation(job("h", gpus=8), [MODEL], {MODEL: 2000}, [running(job("r", gpus=6))], 0.0)
    assert res is not None and res.shadow_s == float("inf")


def test_without_backfill_a_strict_queue_waits_in_order() -> None:
    run = [running(job("r", gpus=6, time_limit_s=100.0))]
    pending = [job("head", gpus=8, submit=1), job("cand", gpus=1, submit=2, time_limit_s=1.0)]
    plan = admit(
        pending, gpus=8, run=run, policy=QueueingPolicy("in-order", "fifo"), queues={"t": QueueConfig("t", strict=True)}
    )
    assert admitted(plan) == [] and plan.pending["cand"].reason == "behind-head"
