"""The repeating-jobs loop: fires due schedules, then sleeps until the next due time (at most `interval_s`, so a
schedule another server created is seen), or until woken after a schedule was created or changed."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from corral.server.background.loop import Loop

MIN_WAIT_S = 0.01  # a due time already past (a firing that failed) is retried without spinning


class DueSchedules(Protocol):
    """What the loop runs (corral.server.services.schedules.ScheduleRunner)."""

    def run_due(self, now: datetime) -> Sequence[Any]:
        """Fire every schedule due at `now` once; returns the jobs started. Never raises for one bad schedule."""
        ...

    def next_due(self) -> datetime | None:
        """The earliest due time of an active schedule, or None."""
        ...


def _now() -> datetime:
    return datetime.now(UTC)


class ScheduleLoop(Loop):
    def __init__(self, runner: DueSchedules, interval_s: float = 1.0, *, clock: Callable[[], datetime] = _now) -> None:
        super().__init__("schedules", interval_s, log=logging.getLogger("corral.schedules"))
        self.runner = runner
        self.clock = clock

    def run_pass(self) -> float | None:
        self.runner.run_due(self.clock())
        nxt = self.runner.next_due()
        return None if nxt is None else max((nxt - self.clock()).total_seconds(), MIN_WAIT_S)
