"""Background loops (server/background): a failed pass is logged and retried, trigger() cuts the wait short, a pass
may ask for a shorter wait (the schedules' next due time), stop() ends the thread and runs on_stop once; the alert
loop runs retention once a minute."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from corral.server.background import AlertLoop, Loop, ScheduleLoop

LONG_S = 60.0  # an interval no test waits out: a pass that comes early was asked for


class Recorder(Loop):
    """Counts passes; raises on the passes listed in `fail_on`; returns `next_s` as its wait."""

    def __init__(
        self,
        interval_s: float = LONG_S,
        *,
        fail_on: tuple[int, ...] = (),
        next_s: float | None = None,
        delay_first: bool = False,
    ) -> None:
        super().__init__("test-loop", interval_s, delay_first=delay_first)
        self.fail_on = fail_on
        self.next_s = next_s
        self.count = 0
        self.stops = 0
        self.changed = threading.Condition()

    def run_pass(self) -> float | None:
        with self.changed:
            self.count += 1
            self.changed.notify_all()
            n = self.count
        if n in self.fail_on:
            raise RuntimeError(f"pass {n} broke")
        return self.next_s

    def on_stop(self) -> None:
        self.stops += 1

    def wait_for(self, passes: int, timeout_s: float = 10.0) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: self.count >= passes, timeout_s)


@pytest.fixture
def loops() -> Iterator[list[Loop]]:
    started: list[Loop] = []
    yield started
    for loop in started:
        loop.stop()


def test_a_failed_pass_is_logged_and_the_next_one_runs(loops: list[Loop], caplog: pytest.LogCaptureFixture) -> None:
    loop = Recorder(interval_s=0.01, fail_on=(1,))
    loops.append(loop)
    with caplog.at_level(logging.ERROR, logger="corral.test-loop"):
        loop.start()
        assert loop.wait_for(3)
    assert loop.failed_passes == 1 and loop.running
    assert any("test-loop pass failed" in r.message and r.exc_info for r in caplog.records)


def test_trigger_cuts_the_wait_short(loops: list[Loop]) -> None:
    loop = Recorder()
    loops.append(loop)
    loop.start()
    assert loop.wait_for(1)
    assert not loop.wait_for(2, timeout_s=0.2)  # the interval is a minute: no second pass by itself
    loop.trigger.fire()
    assert loop.wait_for(2)
    loop.wake()
    assert loop.wait_for(3)


def test_a_pass_may_ask_for_a_shorter_wait(loops: list[Loop]) -> None:
    loop = Recorder(next_s=0.01)
    loops.append(loop)
    loop.start()
    assert loop.wait_for(5)


def test_delay_first_waits_one_interval_or_a_trigger(loops: list[Loop]) -> None:
    loop = Recorder(delay_first=True)
    loops.append(loop)
    loop.start()
    assert not loop.wait_for(1, timeout_s=0.2)
    loop.trigger.fire()
    assert loop.wait_for(1)


def test_stop_ends_the_thread_and_runs_on_stop_once() -> None:
    loop = Recorder()
    loop.start()
    assert loop.wait_for(1)
    loop.stop()
    loop.stop()
    assert not loop.running and loop.stops == 1
    with pytest.raises(RuntimeError):
        loop.start()  # a loop runs once; build a new one


class FakeSchedules:
    def __init__(self, due_in_s: float | None) -> None:
        self.due_in_s = due_in_s
        self.fired: list[datetime] = []

    def run_due(self, now: datetime) -> list[int]:
        self.fired.append(now)
        return []

    def next_due(self) -> datetime | None:
        return None if self.due_in_s is None else datetime.now(UTC) + timedelta(seconds=self.due_in_s)


@pytest.mark.parametrize(("due_in_s", "wait_s"), [(None, None), (30.0, 30.0), (-5.0, 0.01), (120.0, 60.0)])
def test_the_schedule_loop_sleeps_until_the_next_due_time(due_in_s: float | None, wait_s: float | None) -> None:
    loop = ScheduleLoop(FakeSchedules(due_in_s), interval_s=LONG_S)
    got = loop.run_pass()
    if wait_s is None:
        assert got is None  # nothing scheduled: the interval
    else:
        assert got is not None and min(got, LONG_S) == pytest.approx(wait_s, abs=0.5)


class FakeAlerts:
    def __init__(self) -> None:
        self.rounds: list[float] = []
        self.retention: list[float] = []

    def evaluate(self, now: float) -> list[object]:
        self.rounds.append(now)
        return []

    def apply_retention(self, now: float) -> None:
        self.retention.append(now)


def test_the_alert_loop_runs_retention_once_a_minute() -> None:
    clock = iter([1000.0, 1005.0, 1059.0, 1060.0, 1065.0, 1121.0])
    alerts = FakeAlerts()
    loop = AlertLoop(alerts, interval_s=5.0, clock=lambda: next(clock))
    for _ in range(6):
        loop.run_pass()
    assert alerts.rounds == [1000.0, 1005.0, 1059.0, 1060.0, 1065.0, 1121.0]
    assert alerts.retention == [1000.0, 1060.0, 1121.0]


class Paced(Loop):
    """A loop whose passes take `pass_s` and which is triggered again during each: the start time of each pass."""

    def __init__(self, pass_s: float, rest_ratio: float) -> None:
        super().__init__("paced-loop", LONG_S, rest_ratio=rest_ratio, max_rest_s=LONG_S)
        self.pass_s = pass_s
        self.spans: list[tuple[float, float]] = []
        self.changed = threading.Condition()

    def run_pass(self) -> float | None:
        started = time.monotonic()
        self.trigger.fire()  # as submissions do while a busy pass runs: always another pass asked for
        time.sleep(self.pass_s)
        with self.changed:
            self.spans.append((started, time.monotonic()))
            self.changed.notify_all()
        return None

    def wait_for(self, passes: int) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: len(self.spans) >= passes, 10.0)


def test_a_loop_with_a_rest_ratio_rests_as_long_as_its_last_pass_took_however_often_triggered(
    loops: list[Loop],
) -> None:
    loop = Paced(pass_s=0.2, rest_ratio=1.0)
    loops.append(loop)
    loop.start()
    assert loop.wait_for(3)
    for (_, end), (start, _) in zip(loop.spans, loop.spans[1:], strict=False):
        assert start - end >= 0.2  # a lower bound: the rest is what the loop guarantees the others get


def test_stop_cuts_a_rest_short(loops: list[Loop]) -> None:
    loop = Paced(pass_s=0.01, rest_ratio=1e6)  # a rest as long as the interval (LONG_S): stop must not wait it out
    loop.start()
    assert loop.wait_for(1)
    loop.stop(timeout_s=5.0)
    assert not loop.running  # the thread ended within stop()'s 5 s: it did not wait out its 60 s rest
