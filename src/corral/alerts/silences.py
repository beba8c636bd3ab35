"""Silences (pure): label matchers over alerts and a time window during which they notify nobody."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from corral.alerts.rules import LabelMatcher, format_selector, parse_selector
from corral.core.errors import ValidationError

MAX_SILENCE_S = 90 * 86400


@dataclass(frozen=True, slots=True)
class Silence:
    """Mutes alerts whose labels (series labels plus `alertname` and `severity`) match every matcher,
    from `starts_at` until `ends_at` (Unix seconds). A silence with no matchers would mute everything
    and is refused."""

    id: str
    matchers: tuple[LabelMatcher, ...]
    starts_at: float
    ends_at: float
    created_by: str = ""
    comment: str = ""

    def __post_init__(self) -> None:
        if not self.matchers:
            raise ValidationError("matchers", "a silence needs at least one matcher")
        if not (math.isfinite(self.starts_at) and math.isfinite(self.ends_at)) or self.ends_at <= self.starts_at:
            raise ValidationError("ends_at", "must be after starts_at")

    def active(self, now: float) -> bool:
        return self.starts_at <= now < self.ends_at

    def mutes(self, labels: Mapping[str, str], now: float) -> bool:
        return self.active(now) and all(m.matches(labels) for m in self.matchers)


def parse_silence(data: Mapping[str, Any], *, id: str, now: float, created_by: str = "") -> Silence:  # noqa: A002
    """From API input: `matchers` (selector text), `duration_s` or `ends_at`, optional `starts_at`, `comment`."""
    if not isinstance(data, Mapping):
        raise ValidationError("silence", "expected an object")
    matchers = data.get("matchers", "")
    if not isinstance(matchers, str):
        raise ValidationError("matchers", "expected a selector string such as alertname=\"gpu_temperature\"")
    starts_at = _seconds(data.get("starts_at", now), "starts_at")
    if "ends_at" in data:
        ends_at = _seconds(data["ends_at"], "ends_at")
    else:
        ends_at = starts_at + _seconds(data.get("duration_s", 3600), "duration_s")
    if ends_at - starts_at > MAX_SILENCE_S:
        raise ValidationError("ends_at", "a silence lasts at most 90 days")
    return Silence(id=id, matchers=parse_selector(matchers), starts_at=starts_at, ends_at=ends_at,
                   created_by=created_by, comment=str(data.get("comment", ""))[:1000])


def silence_to_dict(silence: Silence) -> dict[str, Any]:
    return {"id": silence.id, "matchers": format_selector(silence.matchers), "starts_at": silence.starts_at,
            "ends_at": silence.ends_at, "created_by": silence.created_by, "comment": silence.comment}


def select_silence(silences: Iterable[Silence], labels: Mapping[str, str], now: float) -> Silence | None:
    """The first active silence that mutes an alert with `labels`, if any."""
    return next((s for s in silences if s.mutes(labels, now)), None)


def _seconds(value: object, field_name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValidationError(field_name, f"expected seconds, got {value!r}")
    return float(value)
