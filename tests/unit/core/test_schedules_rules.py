"""Repeating jobs' rules at their edges: durations, interval limits, what parse keeps, firing times always in UTC,
missed firings at the boundary and the messages a user reads."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from corral.core.errors import ValidationError
from corral.core.schedules import (
    MAX_MISSED_COUNTED,
    NICKNAMES,
    ConcurrencyPolicy,
    ScheduleExpr,
    count_missed,
    parse_duration,
    plan_firing,
)

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
def server_in_kolkata(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The server's own local time zone (UTC+05:30) must never leak into the times a schedule computes."""
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("90s", timedelta(seconds=90), id="seconds"),
        pytest.param("15m", timedelta(minutes=15), id="minutes"),
        pytest.param("1h30m", timedelta(hours=1, minutes=30), id="hours-and-minutes"),
        pytest.param("2d", timedelta(days=2), id="days-are-24-hours"),
        pytest.param("1d2h3m4s", timedelta(days=1, hours=2, minutes=3, seconds=4), id="all-units"),
        pytest.param(" 2H ", timedelta(hours=2), id="case-and-spaces"),
    ],
)
def test_durations(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


def test_a_century_is_the_longest_duration() -> None:
    century = 100 * 366
    assert parse_duration(f"{century}d") == timedelta(days=century)
    with pytest.raises(ValueError, match="longer than a century"):
        parse_duration(f"{century}d1s")


@pytest.mark.parametrize("text", ["", "10 minutes", "1x", "m"])
def test_a_bad_duration_says_what_a_duration_looks_like(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration like 30s, 15m, 1h30m or 1d"):
        parse_duration(text)


def test_every_reports_why_its_duration_is_bad() -> None:
    with pytest.raises(ValidationError) as e:
        ScheduleExpr.parse("@every 10 minutes")
    assert e.value.field == "schedule"
    assert e.value.problem == "@every needs a duration: '10 minutes' is not a duration like 30s, 15m, 1h30m or 1d"


def test_every_interval_limits_are_inclusive() -> None:
    assert ScheduleExpr.parse("@every 1s").every == timedelta(seconds=1)
    assert ScheduleExpr.parse("@every 366d").every == timedelta(days=366)
    with pytest.raises(ValidationError) as e:
        ScheduleExpr.parse("@every 366d1s")
    assert e.value.field == "schedule" and "between 1 s and 366 days" in e.value.problem


def test_parse_keeps_the_normalised_text_and_the_time_zone() -> None:
    cron = ScheduleExpr.parse("  0   9 * *  MON-FRI ", "Europe/Paris")
    assert (cron.text, cron.timezone, cron.cron, cron.every) == (
        "0 9 * * MON-FRI",
        "Europe/Paris",
        "0 9 * * MON-FRI",
        None,
    )
    every = ScheduleExpr.parse("@every  15m", "Europe/Paris")
    assert (every.text, every.timezone, every.cron, every.every) == (
        "@every 15m",
        "Europe/Paris",
        None,
        timedelta(minutes=15),
    )
    nick = ScheduleExpr.parse("@Weekly")
    assert (nick.text, nick.cron) == ("@Weekly", "0 0 * * 0")


def test_an_empty_schedule_says_what_is_expected() -> None:
    with pytest.raises(ValidationError) as e:
        ScheduleExpr.parse("   ")
    assert e.value.problem == "a schedule is required, e.g. '0 * * * *', '@daily' or '@every 30m'"


def test_an_unknown_nickname_lists_the_known_ones() -> None:
    with pytest.raises(ValidationError) as e:
        ScheduleExpr.parse("@fortnightly")
    assert e.value.field == "schedule"
    assert e.value.problem == f"unknown nickname '@fortnightly'; known: {', '.join(NICKNAMES)}, @every DURATION"
    assert "@yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly" in e.value.problem


def test_times_are_utc_whatever_the_servers_local_zone(server_in_kolkata: None) -> None:
    cron = ScheduleExpr.parse("0 9 * * *", "Europe/Paris")
    nxt = cron.next_after(T0)
    assert nxt == datetime(2026, 1, 2, 8, tzinfo=UTC)  # 09:00 CET
    assert nxt.utcoffset() == timedelta(0)
    every = ScheduleExpr.parse("@every 1h")
    anchored = every.next_after(T0, anchor=T0 - timedelta(minutes=30))
    assert anchored == T0 + timedelta(minutes=30) and anchored.utcoffset() == timedelta(0)
    unanchored = every.next_after(T0)
    assert unanchored == T0 + timedelta(hours=1) and unanchored.utcoffset() == timedelta(0)
    early = every.next_after(T0 - timedelta(hours=3), anchor=T0)  # before the anchor: the anchor itself, in UTC
    assert early == T0 and early.utcoffset() == timedelta(0)


def test_upcoming_every_keeps_counting_from_the_anchor() -> None:
    expr = ScheduleExpr.parse("@every 1h")
    anchor = T0 - timedelta(minutes=20)
    assert expr.upcoming(T0, 3, anchor) == [anchor + timedelta(hours=h) for h in (1, 2, 3)]


def test_describe_names_the_zone_only_when_it_is_not_utc() -> None:
    utc = ScheduleExpr.parse("0 9 * * *").describe()
    assert utc == "At 09:00 every day"
    assert ScheduleExpr.parse("0 9 * * *", "Europe/Paris").describe() == "At 09:00 every day (Europe/Paris)"
    assert ScheduleExpr.parse("@every 1h30m", "Europe/Paris").describe() == "every 1h30m"


def test_a_firing_at_exactly_now_is_missed_not_lost() -> None:
    expr = ScheduleExpr.parse("*/10 * * * *")
    now = T0 + timedelta(minutes=30)  # 12:10, 12:20 and 12:30 came due since 12:00
    assert count_missed(expr, T0, now, None) == 3
    f = plan_firing(expr, ConcurrencyPolicy.ALLOW, T0, now, [])
    assert (f.missed, f.next_run_at) == (3, T0 + timedelta(minutes=40))


def test_nothing_is_missed_before_the_due_time() -> None:
    every = ScheduleExpr.parse("@every 2s")
    assert count_missed(every, T0, T0 - timedelta(seconds=5), T0) == 0
    assert count_missed(ScheduleExpr.parse("* * * * *"), T0, T0 - timedelta(minutes=5), None) == 0


def test_a_long_outage_counts_at_most_the_cap() -> None:
    minutely = ScheduleExpr.parse("* * * * *")
    assert count_missed(minutely, T0, T0 + timedelta(minutes=MAX_MISSED_COUNTED + 5), None) == MAX_MISSED_COUNTED
    assert count_missed(minutely, T0, T0 + timedelta(minutes=MAX_MISSED_COUNTED), None) == MAX_MISSED_COUNTED
    every = ScheduleExpr.parse("@every 1s")
    assert count_missed(every, T0, T0 + timedelta(seconds=MAX_MISSED_COUNTED + 5), T0) == MAX_MISSED_COUNTED


def test_plan_firing_every_keeps_the_anchor_rhythm() -> None:
    expr = ScheduleExpr.parse("@every 1h")
    due = T0 + timedelta(hours=1)
    now = due + timedelta(minutes=10)
    f = plan_firing(expr, ConcurrencyPolicy.ALLOW, due, now, [], anchor=T0)
    assert f.next_run_at == T0 + timedelta(hours=2)  # not now + 1h
    assert f.missed == 0


def test_a_forbidden_firing_names_the_active_jobs_and_still_counts_missed() -> None:
    expr = ScheduleExpr.parse("*/10 * * * *")
    f = plan_firing(expr, ConcurrencyPolicy.FORBID, T0, T0 + timedelta(minutes=25), [7, 8])
    assert not f.start and f.cancel == ()
    assert f.missed == 2 and f.next_run_at == T0 + timedelta(minutes=30)
    assert f.skip_reason == "skipped: the previous run (job 7, 8) is still active and concurrency is forbid"
