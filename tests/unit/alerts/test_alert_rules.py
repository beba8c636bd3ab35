"""Alert rules: parsing API input, selectors, scope, and refusing bad input with the field named."""

from __future__ import annotations

from typing import Any

import pytest

from corral.alerts.defaults import DEFAULT_RULES, merge_rules
from corral.alerts.rules import (
    AlertRule,
    Comparison,
    LabelMatcher,
    MatchOp,
    RuleAction,
    Scope,
    Severity,
    parse_rule,
    parse_selector,
    rule_to_dict,
)
from corral.core.errors import ValidationError


@pytest.mark.parametrize(
    ("name", "selector", "labels", "selected"),
    [
        ("empty selects all", "", {"node": "a"}, True),
        ("equal", 'node="a"', {"node": "a"}, True),
        ("equal, other value", 'node="a"', {"node": "b"}, False),
        ("not equal", 'node!="a"', {"node": "b"}, True),
        ("regex is anchored", 'gpu=~"1|2"', {"gpu": "12"}, False),
        ("regex", 'gpu=~"1|2"', {"gpu": "2"}, True),
        ("negative regex", 'model!~"H100.*"', {"model": "A100"}, True),
        ("missing label reads as empty", 'tenant=""', {}, True),
        ("braces, spaces, two matchers", '{ node = "a" , gpu=~"[0-3]" }', {"node": "a", "gpu": "3"}, True),
        ("escaped quote", r'note="say \"hi\""', {"note": 'say "hi"'}, True),
    ],
)
def test_selectors(name: str, selector: str, labels: dict[str, str], selected: bool) -> None:
    matchers = parse_selector(selector)
    assert all(m.matches(labels) for m in matchers) is selected, name


@pytest.mark.parametrize("bad", ["node=a", 'node="a" gpu="1"', '="a"', 'gpu=~"("', 'node=="a"'])
def test_malformed_selectors_are_refused(bad: str) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_selector(bad)
    assert caught.value.field == "selector"


def _rule(**changes: Any) -> dict[str, Any]:
    return {"name": "hot", "metric": "gpu_temperature_c", "comparison": ">=", "threshold": 85, **changes}


def test_parse_rule_full_and_round_trip() -> None:
    data = _rule(
        for_s=120,
        severity="critical",
        selector='node=~"dgx-.*"',
        scope="tenant",
        tenant="vision",
        actions=["cordon_node", "stop_job"],
        summary="GPU {gpu} hot",
    )
    rule = parse_rule(data)
    assert rule == AlertRule(
        "hot",
        "gpu_temperature_c",
        Comparison.GE,
        85.0,
        120.0,
        Severity.CRITICAL,
        (LabelMatcher("node", MatchOp.RE, "dgx-.*"),),
        Scope.TENANT,
        "vision",
        (RuleAction.CORDON_NODE, RuleAction.STOP_JOB),
        "GPU {gpu} hot",
    )
    assert parse_rule(rule_to_dict(rule)) == rule


def test_threshold_given_as_text_is_accepted_when_numeric() -> None:
    assert parse_rule(_rule(threshold="85.5")).threshold == 85.5


@pytest.mark.parametrize(
    ("name", "data", "field"),
    [
        ("unknown metric", _rule(metric="gpu_happiness"), "metric"),
        ("threshold text", _rule(threshold="hot"), "threshold"),
        ("threshold missing", {"name": "x", "metric": "gpu_power_w"}, "threshold"),
        ("threshold infinite", _rule(threshold=float("inf")), "threshold"),
        ("threshold bool", _rule(threshold=True), "threshold"),
        ("bad comparison", _rule(comparison="=>"), "comparison"),
        ("bad severity", _rule(severity="apocalyptic"), "severity"),
        ("bad selector", _rule(selector="node=a"), "selector"),
        ("negative for", _rule(for_s=-1), "for_s"),
        ("tenant scope without tenant", _rule(scope="tenant"), "tenant"),
        ("tenant on a global rule", _rule(tenant="vision"), "tenant"),
        ("bad action", _rule(actions=["reboot"]), "actions"),
        ("bad name", _rule(name="1 bad name"), "name"),
        ("not an object", [], "rule"),
    ],
)
def test_bad_rules_name_the_field(name: str, data: Any, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_rule(data)
    assert caught.value.field == field, name


def test_tenant_scope_selects_only_that_tenant() -> None:
    rule = parse_rule(_rule(metric="job_gpu_utilization_percent", scope="tenant", tenant="vision"))
    assert rule.selects({"tenant": "vision", "job": "j1"})
    assert not rule.selects({"tenant": "nlp", "job": "j2"}) and not rule.selects({"job": "j3"})


@pytest.mark.parametrize(
    ("op", "value", "holds"),
    [
        (">", 2, True),
        (">", 1, False),
        (">=", 1, True),
        ("<", 0, True),
        ("<=", 1, True),
        ("==", 1, True),
        ("!=", 1, False),
    ],
)
def test_comparisons_against_threshold_one(op: str, value: float, holds: bool) -> None:
    assert Comparison(op).holds(value, 1.0) is holds


def test_defaults_are_valid_and_overridable_by_name() -> None:
    names = [r.name for r in DEFAULT_RULES]
    assert names == [
        "gpu_unhealthy",
        "node_lost",
        "gpu_temperature",
        "gpu_ecc_errors",
        "job_gpu_idle",
        "budget_warning",
        "budget_exceeded",
    ]
    cooler = parse_rule(_rule(name="gpu_temperature", threshold=80))
    extra = parse_rule(_rule(name="power", metric="gpu_power_w", threshold=650))
    merged = merge_rules([extra, cooler])
    assert [r.name for r in merged] == [*names, "power"]
    assert merged[2].threshold == 80
