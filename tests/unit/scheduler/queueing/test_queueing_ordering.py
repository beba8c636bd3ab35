"""Ordering and queue modes: priority then submit time; strict queues block behind a blocked head,
best-effort queues let later jobs through; the baselines order as published."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from queue_builders import admit, admitted, job, running

from corral.scheduler.queueing import QueueConfig, QueuedJob, get_queueing_policy
from corral.scheduler.queueing.ordering import compute_las_level


@dataclass
class Case:
    name: str
    pending: list[QueuedJob]
    gpus: int
    policy: str
    expect: list[str]
    queues: dict[str, QueueConfig] = field(default_factory=dict)


CASES = [
    Case("fifo: submit order", [job("b", submit=2), job("a", submit=1)], 1, "fifo", ["a"]),
    Case("priority before submit time", [job("a", submit=1), job("b", submit=2, priority=5)], 1, "fifo", ["b"]),
    Case("fifo: a blocked head blocks everyone", [job("big", gpus=8, submit=0), job("small", submit=1)], 4, "fifo", []),
    Case(
        "a job bigger than the pool never blocks", [job("huge", gpus=64), job("small", submit=1)], 8, "fifo", ["small"]
    ),
    Case(
        "sjf: shortest known duration first",
        [job("long", known_duration_s=100), job("short", submit=5, known_duration_s=10)],
        1,
        "sjf",
        ["short"],
    ),
    Case("sjf: skips a job that does not fit", [job("big", gpus=8), job("small", submit=1)], 4, "sjf", ["small"]),
    Case(
        "las: least attained service first", [job("old", attained_gpu_s=5000), job("new", submit=9)], 1, "las", ["new"]
    ),
    Case(
        "strict queue: head blocks its own queue only",
        [job("head", tenant="a", gpus=8), job("next", tenant="a", submit=1), job("other", tenant="b", submit=2)],
        4,
        "sjf",
        ["other"],
        {"a": QueueConfig("a", strict=True)},
    ),
    Case(
        "best-effort queue: later jobs pass a blocked head",
        [job("head", tenant="a", gpus=8), job("next", tenant="a", submit=1)],
        4,
        "sjf",
        ["next"],
        {"a": QueueConfig("a", strict=False)},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_ordering(case: Case) -> None:
    # `gpus` are free out of an 8-GPU pool (the rest held by a running job), so 8-GPU jobs can wait.
    hold = [running(job("holder", tenant="z", gpus=8 - case.gpus))] if case.gpus < 8 else []
    plan = admit(case.pending, gpus=8, run=hold, policy=case.policy, queues=case.queues)
    assert admitted(plan) == case.expect


def test_strict_queue_reports_behind_head() -> None:
    hold = [running(job("holder", tenant="z", gpus=4))]
    plan = admit(
        [job("head", gpus=8), job("next", submit=1)],
        gpus=8,
        run=hold,
        policy="sjf",
        queues={"t": QueueConfig("t", True)},
    )
    assert plan.pending["head"].reason == "gang-incomplete" and plan.pending["next"].reason == "behind-head"
    assert [plan.pending[j].position for j in ("head", "next")] == [0, 1]


@pytest.mark.parametrize("attained,level", [(0, 0), (119, 0), (120, 1), (959, 1), (960, 2), (1e9, 4)])
def test_las_levels(attained: float, level: int) -> None:
    assert compute_las_level(attained, get_queueing_policy("corral").las_thresholds_gpu_s) == level


def test_unknown_policy_names_the_choices() -> None:
    with pytest.raises(Exception, match="fifo, sjf, las, corral"):
        get_queueing_policy("nope")


def test_las_preempts_a_job_with_more_attained_service() -> None:
    hog = job("hog")
    plan = admit([job("new", submit=10_000)], gpus=1, run=[running(hog, start=0)], policy="las", now=10_000)
    assert [p.job_id for p in plan.preempt] == ["hog"] and plan.pending["new"].reason == "preempting"
