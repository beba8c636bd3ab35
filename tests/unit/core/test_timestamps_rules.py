"""A trailing Z means UTC on every ISO form the API takes, dates included."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from corral.core.timestamps import parse_iso_time


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-22Z", datetime(2026, 11, 22, tzinfo=UTC)),
        ("2026-11-22T10Z", datetime(2026, 11, 22, 10, tzinfo=UTC)),
        ("2026-11-22T10:30:00.5Z", datetime(2026, 11, 22, 10, 30, 0, 500000, tzinfo=UTC)),
    ],
)
def test_a_trailing_z_is_utc(text: str, expected: datetime) -> None:
    parsed = parse_iso_time(text, "since")
    assert parsed == expected and parsed.utcoffset() == timedelta(0)
