"""Repeating jobs' timing rules: expressions, time zones, missed firings, concurrency policies."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.core.errors import ValidationError
from corral.core.schedules import ConcurrencyPolicy, ScheduleExpr, count_missed, plan_firing

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "after", "expected"),
    [
        pytest.param("0 2 * * *", T0, datetime(2026, 1, 2, 2, 0, tzinfo=UTC), id="daily-at-two"),
        pytest.param("* * * * *", T0, T0 + timedelta(minutes=1), id="strictly-after-a-matching-minute"),
        pytest.param("*/15 * * * *", T0 + timedelta(seconds=1), T0 + timedelta(minutes=15), id="step"),
        pytest.param(
            "0 9 * * MON-FRI",
            datetime(2026, 1, 2, 10, tzinfo=UTC),  # a Friday, after nine
            datetime(2026, 1, 5, 9, tzinfo=UTC),
            id="weekdays-skip-the-weekend",
        ),
        pytest.param("@hourly", T0, T0 + timedelta(hours=1), id="nickname-hourly"),
        pytest.param("@daily", T0, datetime(2026, 1, 2, tzinfo=UTC), id="nickname-daily"),
        pytest.param("@monthly", T0, datetime(2026, 2, 1, tzinfo=UTC), id="nickname-monthly"),
        pytest.param("0 0 L * *", T0, datetime(2026, 1, 31, tzinfo=UTC), id="last-day-of-month"),
    ],
)
def test_cron_next_firing(text: str, after: datetime, expected: datetime) -> None:
    assert ScheduleExpr.parse(text).next_after(after) == expected


def test_cron_is_read_in_the_schedules_time_zone_across_dst() -> None:
    # 02:30 every day in New York: on 2026-03-08 02:30 does not exist (clocks jump 02:00 -> 03:00).
    expr = ScheduleExpr.parse("30 2 * * *", "America/New_York")
    runs = expr.upcoming(datetime(2026, 3, 7, tzinfo=UTC), 3)
    assert runs == [
        datetime(2026, 3, 7, 7, 30, tzinfo=UTC),  # 02:30 EST = 07:30 UTC
        datetime(2026, 3, 8, 7, 0, tzinfo=UTC),  # the missing 02:30 runs at 03:00 EDT, as cron does
        datetime(2026, 3, 9, 6, 30, tzinfo=UTC),
    ]  # 02:30 EDT = 06:30 UTC
    # 01:30 on 2026-11-01 happens twice in New York (clocks fall back 02:00 -> 01:00): it runs once.
    fall = ScheduleExpr.parse("30 1 * * *", "America/New_York").upcoming(datetime(2026, 10, 31, 12, tzinfo=UTC), 2)
    assert fall == [datetime(2026, 11, 1, 5, 30, tzinfo=UTC), datetime(2026, 11, 2, 6, 30, tzinfo=UTC)]


def test_every_counts_from_the_anchor_not_from_the_last_check() -> None:
    expr = ScheduleExpr.parse("@every 1h30m")
    anchor = T0
    assert expr.next_after(T0, anchor) == T0 + timedelta(minutes=90)
    assert expr.next_after(T0 + timedelta(minutes=100), anchor) == T0 + timedelta(minutes=180)  # no drift
    assert expr.next_after(T0 - timedelta(hours=1), anchor) == T0  # before the anchor: the anchor itself


@pytest.mark.parametrize(
    ("text", "tz", "field", "words"),
    [
        pytest.param("", "UTC", "schedule", "required", id="empty"),
        pytest.param("61 * * * *", "UTC", "schedule", "Bad minute", id="minute-out-of-range"),
        pytest.param("* * *", "UTC", "schedule", "not a cron line", id="three-fields"),
        pytest.param("0 0 30 2 *", "UTC", "schedule", "day-of-month", id="february-30th-never-comes"),
        pytest.param("@fortnightly", "UTC", "schedule", "unknown nickname", id="unknown-nickname"),
        pytest.param("@every", "UTC", "schedule", "duration", id="every-without-duration"),
        pytest.param("@every 10 minutes", "UTC", "schedule", "duration", id="every-in-words"),
        pytest.param("@every 0s", "UTC", "schedule", "between", id="every-zero"),
        pytest.param("@every 400d", "UTC", "schedule", "between", id="every-too-long"),
        pytest.param("@daily", "Mars/Olympus", "timezone", "unknown time zone", id="unknown-zone"),
    ],
)
def test_bad_expressions_name_the_field(text: str, tz: str, field: str, words: str) -> None:
    with pytest.raises(ValidationError) as e:
        ScheduleExpr.parse(text, tz)
    assert e.value.field == field and words in e.value.problem


def test_describe_in_words() -> None:
    assert ScheduleExpr.parse("@every 15m").describe() == "every 15m"
    assert "09:00" in ScheduleExpr.parse("0 9 * * MON-FRI").describe()
    assert ScheduleExpr.parse("0 9 * * *", "Europe/Paris").describe().endswith("(Europe/Paris)")


@given(
    minute=st.sampled_from(["*", "*/5", "7", "0,30", "10-20"]),
    hour=st.sampled_from(["*", "3", "*/6", "8-17"]),
    dow=st.sampled_from(["*", "MON-FRI", "0", "SAT,SUN"]),
    tz=st.sampled_from(["UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"]),
    start=st.datetimes(min_value=datetime(2025, 1, 1), max_value=datetime(2028, 1, 1), timezones=st.just(UTC)),
)
def test_cron_next_is_strictly_later_and_no_firing_is_skipped(
    minute: str, hour: str, dow: str, tz: str, start: datetime
) -> None:
    expr = ScheduleExpr.parse(f"{minute} {hour} * * {dow}", tz)
    a = expr.next_after(start)
    b = expr.next_after(a)
    assert start < a < b
    assert a.second == 0 and a.microsecond == 0
    # nothing fires between `start` and `a`: asking from just before `a` finds `a` again
    assert expr.next_after(a - timedelta(seconds=1)) == a
    assert expr.next_after(max(start, a - timedelta(minutes=1))) == a


def test_missed_firings_are_counted_and_folded_into_one() -> None:
    expr = ScheduleExpr.parse("*/10 * * * *")
    due = T0  # 12:00 was due; the server came back at 12:35
    now = T0 + timedelta(minutes=35)
    assert count_missed(expr, due, now, None) == 3  # 12:10, 12:20, 12:30
    f = plan_firing(expr, ConcurrencyPolicy.FORBID, due, now, [])
    assert f.start and f.missed == 3 and f.next_run_at == T0 + timedelta(minutes=40)
    every = ScheduleExpr.parse("@every 2s")
    assert count_missed(every, T0, T0 + timedelta(seconds=7), T0) == 3
    assert count_missed(every, T0, T0, T0) == 0


@pytest.mark.parametrize(
    ("policy", "active", "start", "cancel"),
    [
        pytest.param(ConcurrencyPolicy.FORBID, [], True, (), id="forbid-idle-starts"),
        pytest.param(ConcurrencyPolicy.FORBID, [7], False, (), id="forbid-busy-skips"),
        pytest.param(ConcurrencyPolicy.ALLOW, [7], True, (), id="allow-busy-starts-another"),
        pytest.param(ConcurrencyPolicy.REPLACE, [7, 8], True, (7, 8), id="replace-cancels-and-starts"),
        pytest.param(ConcurrencyPolicy.REPLACE, [], True, (), id="replace-idle-starts"),
    ],
)
def test_concurrency_policies(
    policy: ConcurrencyPolicy, active: list[int], start: bool, cancel: tuple[int, ...]
) -> None:
    f = plan_firing(ScheduleExpr.parse("@hourly"), policy, T0, T0 + timedelta(seconds=1), active)
    assert (f.start, f.cancel) == (start, cancel)
    assert f.next_run_at == T0 + timedelta(hours=1)
    assert ("still active" in f.skip_reason) == (not start)
