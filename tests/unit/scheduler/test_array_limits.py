"""A job array's `%N`: the cycle considers at most N of its tasks beside those running (pure)."""

from __future__ import annotations

from corral.scheduler.plan import UNRANKED, select_within_group_limits
from corral.scheduler.queueing import reasons
from corral.scheduler.queueing.jobs import QueuedJob, RunningJob


def task(i: int, group: str = "array:1", limit: int = 2, submit_s: float = 0.0) -> QueuedJob:
    return QueuedJob(f"t{i}", "vision", group=group, group_limit=limit, submit_s=submit_s)


def test_only_the_room_left_beside_running_tasks_is_considered() -> None:
    pending = [task(i) for i in range(2, 6)]
    running = [RunningJob(task(0), 0.0, "H100"), RunningJob(task(1, limit=2), 0.0, "H100")]
    eligible, held = select_within_group_limits(pending, running[:1])
    assert [j.id for j in eligible] == ["t2"]
    assert set(held) == {"t3", "t4", "t5"}
    assert all(s.reason == reasons.ARRAY_LIMIT and s.position == UNRANKED for s in held.values())
    assert "at most 2 tasks at once" in held["t3"].detail
    eligible, held = select_within_group_limits(pending, running)
    assert eligible == [] and len(held) == 4


def test_first_submitted_first_other_jobs_and_groups_untouched() -> None:
    plain = QueuedJob("plain", "vision")
    late, early = task(9, submit_s=5.0), task(8, submit_s=1.0)
    other = [task(20 + i, group="array:2", limit=1) for i in range(3)]
    unlimited = QueuedJob("u", "vision", group="array:3", group_limit=0)
    eligible, held = select_within_group_limits([late, plain, early, *other, unlimited], [])
    assert [j.id for j in eligible] == ["t9", "plain", "t8", "t20", "u"]  # the caller's order is kept
    assert set(held) == {"t21", "t22"}
    late_only = [task(9, submit_s=5.0), task(8, submit_s=1.0), task(7, submit_s=3.0)]
    eligible, _ = select_within_group_limits(late_only, [])
    assert sorted(j.id for j in eligible) == ["t7", "t8"]  # the two submitted first


def test_without_limits_nothing_is_held() -> None:
    pending = [QueuedJob(f"j{i}", "t") for i in range(3)]
    assert select_within_group_limits(pending, []) == (pending, {})
