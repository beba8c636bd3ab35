"""AlertEngine: carries state between rounds, notifies and acts outside its lock, manages silences."""

from __future__ import annotations

from typing import Any

import pytest

from corral.alerts.engine import AlertEngine
from corral.alerts.evaluator import ActionRequest, AlertState, SeriesPoint
from corral.alerts.rules import RuleAction, make_labels, parse_rule, parse_selector
from corral.alerts.silences import Silence
from corral.core.errors import ConflictError, NotFoundError

LOST = SeriesPoint("node_lost", make_labels({"node": "n2"}), 1)
HOT = SeriesPoint("gpu_temperature_c", make_labels({"node": "n1", "gpu": "0"}), 99)


def test_rounds_notify_and_act() -> None:
    sent: list[Any] = []
    acted: list[ActionRequest] = []
    engine = AlertEngine(submit=sent.append, act=acted.append)
    engine.set_custom_rules(
        [
            parse_rule(
                {
                    "name": "node_lost",
                    "metric": "node_lost",
                    "comparison": ">",
                    "threshold": 0,
                    "actions": ["cordon_node"],
                }
            )
        ]
    )
    engine.evaluate([LOST, HOT], now=0.0)
    assert [[c.alert.rule for c in batch] for batch in sent] == [["node_lost"]]  # pending: nothing to say
    assert [(a.action, a.node) for a in acted] == [(RuleAction.CORDON_NODE, "n2")]
    assert [(a.rule, a.state) for a in engine.alerts()] == [
        ("node_lost", AlertState.FIRING),
        ("gpu_temperature", AlertState.PENDING),
    ]
    engine.evaluate([HOT], now=130.0)
    assert [(a.rule, a.state) for a in engine.alerts()] == [
        ("gpu_temperature", AlertState.FIRING),
        ("node_lost", AlertState.RESOLVED),
    ]
    assert [a.rule for a in engine.alerts([AlertState.RESOLVED])] == ["node_lost"]
    assert [[(c.alert.rule, c.alert.state) for c in batch] for batch in sent[1:]] == [
        [("gpu_temperature", AlertState.FIRING), ("node_lost", AlertState.RESOLVED)]
    ]
    assert len(acted) == 1


def test_duplicate_custom_rule_names_are_refused() -> None:
    rule = parse_rule({"name": "x", "metric": "gpu_power_w", "comparison": ">", "threshold": 1})
    with pytest.raises(ConflictError):
        AlertEngine().set_custom_rules([rule, rule])


def test_silences_mute_then_expire() -> None:
    sent: list[Any] = []
    engine = AlertEngine(submit=sent.append)
    engine.add_silence(Silence("s1", parse_selector('alertname="node_lost"'), 0.0, 1000.0))
    with pytest.raises(ConflictError):
        engine.add_silence(Silence("s1", parse_selector('node="a"'), 0.0, 10.0))
    engine.evaluate([LOST], now=1.0)
    assert sent == [] and [s.id for s in engine.silences(now=1.0)] == ["s1"]
    engine.expire_silence("s1", now=2.0)
    assert engine.silences(now=2.0) == []
    engine.evaluate([], now=3.0)  # resolves, no longer muted
    assert [[c.alert.state for c in batch] for batch in sent] == [[AlertState.RESOLVED]]
    assert engine.silences() == []  # pruned once over
    with pytest.raises(NotFoundError):
        engine.expire_silence("nope", now=4.0)
