"""Alert evaluation (pure): series values + now + previous alert states -> new states, changes, actions.

One alert per (rule, series labels). States: PENDING (the condition holds, for less than the rule's
for-duration), FIRING, RESOLVED (it fired and no longer holds). A pending alert whose condition
clears is dropped without a word; a resolved alert is kept `resolved_keep_s` for listings.
Silences mute notifications only: states and actions go on as usual.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from corral.alerts.rules import AlertRule, Labels, RuleAction, Severity
from corral.alerts.silences import Silence, select_silence


class AlertState(StrEnum):
    PENDING = "pending"
    FIRING = "firing"
    RESOLVED = "resolved"


@dataclass(frozen=True, slots=True)
class SeriesPoint:
    """The latest value of one series (metric + labels) at evaluation time."""

    metric: str
    labels: Labels
    value: float


@dataclass(frozen=True, slots=True)
class Alert:
    rule: str
    fingerprint: str
    labels: Labels
    state: AlertState
    severity: Severity
    value: float
    summary: str
    active_since: float  # when the condition started to hold
    updated_at: float
    fired_at: float | None = None
    resolved_at: float | None = None
    silenced_by: str | None = None
    tenant: str = ""  # the tenant the alert belongs to ("": a cluster alert); only its silences may mute it

    @property
    def label_map(self) -> dict[str, str]:
        return dict(self.labels)


@dataclass(frozen=True, slots=True)
class AlertChange:
    """A state change. `notify`: send it to the notifiers (firing, or resolved after firing; not muted)."""

    alert: Alert
    old_state: AlertState | None
    notify: bool


@dataclass(frozen=True, slots=True)
class ActionRequest:
    """Something a rule asks the server to do when its alert starts firing."""

    action: RuleAction
    rule: str
    fingerprint: str
    node: str | None
    job: str | None


@dataclass(frozen=True, slots=True)
class Evaluation:
    alerts: dict[str, Alert]  # fingerprint -> alert: what to keep for the next evaluation
    changes: list[AlertChange]
    actions: list[ActionRequest]


# Series about a tenant's own work (its jobs, its queue), as opposed to hardware that a job happens to use.
TENANT_SERIES = frozenset({"job_gpu_utilization_percent", "queue_length", "budget_used_percent"})


def compute_alert_tenant(rule: AlertRule, labels: Labels) -> str:
    """The tenant an alert belongs to: a tenant-scoped rule's tenant, or the `tenant` label of a series about a
    tenant's own work. A GPU or node alert is the cluster's ("") even when a tenant's job holds that GPU."""
    if rule.tenant:
        return rule.tenant
    if rule.metric in TENANT_SERIES:
        return dict(labels).get("tenant", "")
    return ""


def compute_fingerprint(rule: str, labels: Labels) -> str:
    text = rule + "\x00" + "\x00".join(f"{k}={v}" for k, v in labels)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def compute_summary(rule: AlertRule, labels: Labels, value: float) -> str:
    """The rule's summary template filled in; a missing label reads as '?', a broken template is shown as is."""
    template = rule.summary or f"{rule.metric} {rule.comparison.value} {rule.threshold:g}"
    values: dict[str, object] = _Missing({**dict(labels), "value": value, "threshold": rule.threshold})
    try:
        return template.format_map(values)
    except (ValueError, IndexError, AttributeError, TypeError):
        return template


class _Missing(dict[str, object]):
    def __missing__(self, key: str) -> str:
        return "?"


def evaluate_rules(
    rules: Sequence[AlertRule],
    series: Iterable[SeriesPoint],
    previous: Mapping[str, Alert],
    now: float,
    silences: Sequence[Silence] = (),
    resolved_keep_s: float = 3600.0,
) -> Evaluation:
    """One evaluation round over every enabled rule (pure)."""
    by_metric: dict[str, list[SeriesPoint]] = {}
    for point in series:
        by_metric.setdefault(point.metric, []).append(point)
    alerts: dict[str, Alert] = {}
    changes: list[AlertChange] = []
    actions: list[ActionRequest] = []
    active: set[str] = set()
    for rule in rules:
        if not rule.enabled:
            continue
        for point in by_metric.get(rule.metric, ()):
            # the value first: it rarely holds, and the labels' dict is made only then
            if not rule.comparison.holds(point.value, rule.threshold) or not rule.selects(dict(point.labels)):
                continue
            fingerprint = compute_fingerprint(rule.name, point.labels)
            active.add(fingerprint)
            alert = _advance(rule, point, fingerprint, previous.get(fingerprint), now, silences)
            alerts[fingerprint] = alert
            old = previous.get(fingerprint)
            old_state = old.state if old is not None and old.state is not AlertState.RESOLVED else None
            if alert.state is not old_state:
                notify = alert.state is AlertState.FIRING and not alert.silenced_by
                changes.append(AlertChange(alert, old_state, notify))
                if alert.state is AlertState.FIRING:
                    actions.extend(_actions(rule, alert))
    for fingerprint, old in previous.items():
        if fingerprint in active:
            continue
        if old.state is AlertState.FIRING:  # FIRING -> RESOLVED: the condition no longer holds
            muted = _muting(old, now, silences)
            resolved = dataclasses.replace(
                old, state=AlertState.RESOLVED, resolved_at=now, updated_at=now, silenced_by=muted
            )
            alerts[fingerprint] = resolved
            changes.append(AlertChange(resolved, AlertState.FIRING, muted is None))
        elif old.state is AlertState.RESOLVED and _resolved_recently(old, now, resolved_keep_s):
            alerts[fingerprint] = old  # kept a while so listings show what recently cleared
        # PENDING whose condition cleared, and old RESOLVED alerts: dropped.
    return Evaluation(alerts, changes, actions)


def _advance(
    rule: AlertRule, point: SeriesPoint, fingerprint: str, old: Alert | None, now: float, silences: Sequence[Silence]
) -> Alert:
    """The alert for a series whose condition holds now."""
    if old is None or old.state is AlertState.RESOLVED:
        since = now  # (re)starts: a resolved alert that holds again is a new episode
        fired_at = None
    else:
        since, fired_at = old.active_since, old.fired_at
    state = AlertState.FIRING if fired_at is not None or now - since >= rule.for_s else AlertState.PENDING
    if state is AlertState.FIRING and fired_at is None:
        fired_at = now
    alert = Alert(
        rule=rule.name,
        fingerprint=fingerprint,
        labels=point.labels,
        state=state,
        severity=rule.severity,
        value=point.value,
        summary=compute_summary(rule, point.labels, point.value),
        active_since=since,
        updated_at=now,
        fired_at=fired_at,
        tenant=compute_alert_tenant(rule, point.labels),
    )
    return dataclasses.replace(alert, silenced_by=_muting(alert, now, silences))


def _resolved_recently(alert: Alert, now: float, keep_s: float) -> bool:
    return alert.resolved_at is not None and now - alert.resolved_at < keep_s


def _muting(alert: Alert, now: float, silences: Sequence[Silence]) -> str | None:
    labels = {**alert.label_map, "alertname": alert.rule, "severity": alert.severity.value}
    silence = select_silence(silences, labels, now, alert.tenant)
    return silence.id if silence is not None else None


def _actions(rule: AlertRule, alert: Alert) -> list[ActionRequest]:
    labels = alert.label_map
    return [ActionRequest(a, rule.name, alert.fingerprint, labels.get("node"), labels.get("job")) for a in rule.actions]
