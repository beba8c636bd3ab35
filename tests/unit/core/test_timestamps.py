"""API times: one ISO parser, a missing zone means UTC."""

from datetime import UTC, datetime, timedelta, timezone

import pytest

from corral.core.errors import ValidationError
from corral.core.timestamps import parse_iso_time


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-22", datetime(2026, 11, 22, tzinfo=UTC)),
        ("2026-11-22T10:30:00", datetime(2026, 11, 22, 10, 30, tzinfo=UTC)),
        ("2026-11-22T10:30:00Z", datetime(2026, 11, 22, 10, 30, tzinfo=UTC)),
        (" 2026-11-22T10:30:00Z ", datetime(2026, 11, 22, 10, 30, tzinfo=UTC)),
        ("2026-11-22T11:30:00+01:00", datetime(2026, 11, 22, 11, 30, tzinfo=timezone(timedelta(hours=1)))),
    ],
)
def test_parses_iso_times_and_reads_no_zone_as_utc(text: str, expected: datetime) -> None:
    parsed = parse_iso_time(text, "start")
    assert parsed == expected and parsed.tzinfo is not None


@pytest.mark.parametrize("text", ["yesterday", "2026-13-01", "", "12/11/2026"])
def test_bad_times_name_the_field(text: str) -> None:
    with pytest.raises(ValidationError) as e:
        parse_iso_time(text, "until")
    assert e.value.field == "until" and repr(text) in e.value.problem
