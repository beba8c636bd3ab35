"""ISO 8601 times as API input: one parser, so a time without a zone means UTC everywhere."""

from __future__ import annotations

from datetime import UTC, datetime

from corral.core.errors import ValidationError


def parse_iso_time(value: str, field: str) -> datetime:
    """`value` as an aware datetime; a trailing `Z` and a missing zone both mean UTC.

    Raises ValidationError naming `field` when `value` is not an ISO date or time.
    """
    try:
        dt = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError as e:
        raise ValidationError(field, f"expected an ISO date or time, got {value!r}") from e
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)
