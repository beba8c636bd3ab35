"""Alert rules (pure): which series, which labels, what comparison, for how long, how bad, what to do."""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from corral.core.errors import ValidationError
from corral.core.telemetry import GPU_SERIES, HOST_SERIES

# Series the server derives from state and events (labels in brackets), beside the sampled ones.
EVENT_SERIES: dict[str, str] = {
    "gpu_unhealthy": "1 per GPU the health checks took out [node, gpu, uuid, reason]",
    "node_lost": "1 per node that missed heartbeats past the grace period [node]",
    "gpu_xid": "the Xid code, for one evaluation after the event [node, gpu, xid]",
    "gpu_ecc_dbe": "1 for one evaluation after a double-bit ECC event [node, gpu]",
    "job_gpu_utilization_percent": "mean utilisation of a running job's GPUs [job, tenant, node]",
    "queue_length": "jobs waiting to be scheduled [tenant]",
    "budget_used_percent": "how much of its budget a tenant used this period, the higher of GPU-hours and money [tenant]",
}
KNOWN_METRICS: frozenset[str] = frozenset(GPU_SERIES) | frozenset(HOST_SERIES) | frozenset(EVENT_SERIES)

Labels = tuple[tuple[str, str], ...]  # sorted (name, value) pairs


def make_labels(values: Mapping[str, object]) -> Labels:
    return tuple(sorted((str(k), str(v)) for k, v in values.items()))


class Comparison(StrEnum):
    GT = ">"
    GE = ">="
    LT = "<"
    LE = "<="
    EQ = "=="
    NE = "!="

    def holds(self, value: float, threshold: float) -> bool:
        return _COMPARE[self](value, threshold)


# a round compares every GPU's value (8,000 GPUs every 5 s): one operator looked up, not six comparisons made
_COMPARE: dict[Comparison, Callable[[float, float], bool]] = {
    Comparison.GT: operator.gt,
    Comparison.GE: operator.ge,
    Comparison.LT: operator.lt,
    Comparison.LE: operator.le,
    Comparison.EQ: operator.eq,
    Comparison.NE: operator.ne,
}


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class Scope(StrEnum):
    GLOBAL = "global"  # every series, whoever's it is
    TENANT = "tenant"  # only series labelled tenant=<the rule's tenant>


class RuleAction(StrEnum):
    CORDON_NODE = "cordon_node"  # needs a `node` label on the series
    STOP_JOB = "stop_job"  # needs a `job` label on the series


class MatchOp(StrEnum):
    EQ = "="
    NE = "!="
    RE = "=~"
    NRE = "!~"


@dataclass(frozen=True, slots=True)
class LabelMatcher:
    """Prometheus-style: `=`, `!=`, `=~` and `!~` (regular expressions match the whole value)."""

    name: str
    op: MatchOp
    value: str
    _regex: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.op in (MatchOp.RE, MatchOp.NRE):
            try:
                object.__setattr__(self, "_regex", re.compile(self.value))
            except re.error as e:
                raise ValidationError("selector", f"bad regular expression {self.value!r}: {e}") from e

    def matches(self, labels: Mapping[str, str]) -> bool:
        actual = labels.get(self.name, "")
        if self._regex is not None:
            hit = self._regex.fullmatch(actual) is not None
            return hit if self.op is MatchOp.RE else not hit
        return (actual == self.value) if self.op is MatchOp.EQ else (actual != self.value)

    def __str__(self) -> str:
        return f'{self.name}{self.op.value}"{self.value}"'


_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
_RULE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,99}$")


def parse_selector(text: str) -> tuple[LabelMatcher, ...]:
    """`node="n1", gpu=~"0|1"` -> matchers. '' selects everything. Raises ValidationError("selector")."""
    text = text.strip().removeprefix("{").removesuffix("}").strip()
    matchers: list[LabelMatcher] = []
    pos = 0
    while pos < len(text):
        m = _MATCHER.match(text, pos)
        if m is None or m.end() == pos:
            raise ValidationError("selector", f'cannot parse {text[pos:]!r}; expected like node="n1", gpu=~"0|1"')
        value = re.sub(r"\\(.)", r"\1", m[3])
        matchers.append(LabelMatcher(m[1], MatchOp(m[2]), value))
        pos = m.end()
    return tuple(matchers)


def format_selector(matchers: Sequence[LabelMatcher]) -> str:
    return ", ".join(str(m) for m in matchers)


@dataclass(frozen=True, slots=True)
class AlertRule:
    """Fires when `metric <comparison> threshold` holds for a series for `for_s` seconds.

    `summary` is a str.format template over the series labels plus `value` and `threshold`.
    Raises ValidationError (naming the field) on bad values.
    """

    name: str
    metric: str
    comparison: Comparison
    threshold: float
    for_s: float = 0.0
    severity: Severity = Severity.WARNING
    selector: tuple[LabelMatcher, ...] = ()
    scope: Scope = Scope.GLOBAL
    tenant: str | None = None
    actions: tuple[RuleAction, ...] = ()
    summary: str = ""
    enabled: bool = True

    def __post_init__(self) -> None:
        if not _RULE_NAME.fullmatch(self.name):
            raise ValidationError("name", "letters, digits, '_', '.', '-', starting with a letter, at most 100")
        if self.metric not in KNOWN_METRICS:
            known = ", ".join(sorted(KNOWN_METRICS))
            raise ValidationError("metric", f"unknown metric {self.metric!r}; known: {known}")
        if not math.isfinite(self.threshold):
            raise ValidationError("threshold", "must be a finite number")
        if not 0 <= self.for_s <= 30 * 86400:
            raise ValidationError("for_s", "must be between 0 and 30 days")
        if (self.scope is Scope.TENANT) != bool(self.tenant):
            raise ValidationError("tenant", "a tenant-scoped rule names its tenant; a global rule names none")

    def selects(self, labels: Mapping[str, str]) -> bool:
        if self.scope is Scope.TENANT and labels.get("tenant") != self.tenant:
            return False
        return all(m.matches(labels) for m in self.selector)


def parse_rule(data: Mapping[str, Any]) -> AlertRule:
    """An AlertRule from API / file input. Raises ValidationError naming the bad field."""
    if not isinstance(data, Mapping):
        raise ValidationError("rule", "expected an object")
    threshold = data.get("threshold")
    if isinstance(threshold, str):
        try:
            threshold = float(threshold)
        except ValueError as e:
            raise ValidationError("threshold", f"not a number: {threshold!r}") from e
    if isinstance(threshold, bool) or not isinstance(threshold, int | float):
        raise ValidationError("threshold", f"expected a number, got {threshold!r}")
    for_s = data.get("for_s", 0)
    if isinstance(for_s, bool) or not isinstance(for_s, int | float):
        raise ValidationError("for_s", f"expected seconds, got {for_s!r}")
    selector = data.get("selector", "")
    if not isinstance(selector, str):
        raise ValidationError("selector", 'expected a string such as node="n1"')
    actions = data.get("actions", [])
    if not isinstance(actions, list):
        raise ValidationError("actions", "expected a list")
    return AlertRule(
        name=str(data.get("name", "")),
        metric=str(data.get("metric", "")),
        comparison=_enum(Comparison, data.get("comparison", ">"), "comparison"),
        threshold=float(threshold),
        for_s=float(for_s),
        severity=_enum(Severity, data.get("severity", "warning"), "severity"),
        selector=parse_selector(selector),
        scope=_enum(Scope, data.get("scope", "global"), "scope"),
        tenant=data.get("tenant") or None,
        actions=tuple(_enum(RuleAction, a, "actions") for a in actions),
        summary=str(data.get("summary", "")),
        enabled=bool(data.get("enabled", True)),
    )


def rule_to_dict(rule: AlertRule) -> dict[str, Any]:
    """The inverse of parse_rule (what the API returns and a store keeps)."""
    return {
        "name": rule.name,
        "metric": rule.metric,
        "comparison": rule.comparison.value,
        "threshold": rule.threshold,
        "for_s": rule.for_s,
        "severity": rule.severity.value,
        "selector": format_selector(rule.selector),
        "scope": rule.scope.value,
        "tenant": rule.tenant,
        "actions": [a.value for a in rule.actions],
        "summary": rule.summary,
        "enabled": rule.enabled,
    }


def _enum(kind: type[Any], value: object, field_name: str) -> Any:
    try:
        return kind(value)
    except ValueError as e:
        allowed = ", ".join(str(v.value) for v in kind)
        raise ValidationError(field_name, f"{value!r} is not one of {allowed}") from e
