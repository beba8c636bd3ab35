"""Silences (pure): label matchers over alerts and a time window during which they notify nobody."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from corral.alerts.rules import LabelMatcher, format_selector, parse_selector
from corral.core.errors import ValidationError

MAX_SILENCE_S = 90 * 86400
MAX_TENANT_SILENCE_S = 30 * 86400  # a tenant-admin's silence, which mutes only its own tenant's alerts
MAX_COMMENT = 1000


@dataclass(frozen=True, slots=True)
class Silence:
    """Mutes alerts whose labels (series labels plus `alertname` and `severity`) match every matcher,
    from `starts_at` until `ends_at` (Unix seconds). A silence with no matchers would mute everything
    and is refused. A tenant's silence (`tenant` set: made by a tenant-admin) mutes only alerts that belong
    to that tenant (the alert's `tenant`, see evaluator.compute_alert_tenant), whatever its matchers say:
    cluster alerts (nodes, GPUs) and other tenants' alerts are out of its reach."""

    id: str
    matchers: tuple[LabelMatcher, ...]
    starts_at: float
    ends_at: float
    created_by: str = ""
    comment: str = ""
    tenant: str | None = None

    def __post_init__(self) -> None:
        if not self.matchers:
            raise ValidationError("matchers", "a silence needs at least one matcher")
        if not (math.isfinite(self.starts_at) and math.isfinite(self.ends_at)) or self.ends_at <= self.starts_at:
            raise ValidationError("ends_at", "must be after starts_at")

    def active(self, now: float) -> bool:
        return self.starts_at <= now < self.ends_at

    def mutes(self, labels: Mapping[str, str], now: float, alert_tenant: str = "") -> bool:
        """Whether it mutes an alert with `labels` belonging to `alert_tenant` ("" for a cluster alert)."""
        if self.tenant is not None and alert_tenant != self.tenant:
            return False
        return self.active(now) and all(m.matches(labels) for m in self.matchers)


def parse_silence(data: Mapping[str, Any], *, id: str, now: float, created_by: str = "") -> Silence:  # noqa: A002
    """From API input: `matchers` (selector text), `duration_s` or `ends_at`, optional `starts_at`, `comment`,
    `tenant` (a tenant's silence lasts at most MAX_TENANT_SILENCE_S, any other MAX_SILENCE_S)."""
    if not isinstance(data, Mapping):
        raise ValidationError("silence", "expected an object")
    matchers = data.get("matchers", "")
    if not isinstance(matchers, str):
        raise ValidationError("matchers", 'expected a selector string such as alertname="gpu_temperature"')
    starts_at = _seconds(data.get("starts_at", now), "starts_at")
    if "ends_at" in data:
        ends_at = _seconds(data["ends_at"], "ends_at")
    else:
        ends_at = starts_at + _seconds(data.get("duration_s", 3600), "duration_s")
    tenant = data.get("tenant")
    if tenant is not None and (not isinstance(tenant, str) or not tenant):
        raise ValidationError("tenant", "expected a tenant's name")
    longest = MAX_SILENCE_S if tenant is None else MAX_TENANT_SILENCE_S
    if ends_at - starts_at > longest:
        raise ValidationError(
            "ends_at", f"a{' tenant' if tenant else ''} silence lasts at most {longest // 86400} days"
        )
    comment = data.get("comment", "")
    if not isinstance(comment, str) or len(comment) > MAX_COMMENT:
        raise ValidationError("comment", f"expected text of at most {MAX_COMMENT} characters")
    return Silence(
        id=id,
        matchers=parse_selector(matchers),
        starts_at=starts_at,
        ends_at=ends_at,
        created_by=created_by,
        comment=comment,
        tenant=tenant,
    )


def silence_to_dict(silence: Silence) -> dict[str, Any]:
    return {
        "id": silence.id,
        "matchers": format_selector(silence.matchers),
        "starts_at": silence.starts_at,
        "ends_at": silence.ends_at,
        "created_by": silence.created_by,
        "comment": silence.comment,
        "tenant": silence.tenant,
    }


def select_silence(
    silences: Iterable[Silence], labels: Mapping[str, str], now: float, alert_tenant: str = ""
) -> Silence | None:
    """The first active silence that mutes an alert with `labels` belonging to `alert_tenant`, if any."""
    return next((s for s in silences if s.mutes(labels, now, alert_tenant)), None)


def _seconds(value: object, field_name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValidationError(field_name, f"expected seconds, got {value!r}")
    return float(value)
