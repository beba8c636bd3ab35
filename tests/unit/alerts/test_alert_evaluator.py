"""Alert evaluation: pending -> firing after for-duration, resolve, silences, actions, default rules."""

from __future__ import annotations

from collections.abc import Sequence

from corral.alerts.defaults import DEFAULT_RULES
from corral.alerts.evaluator import Alert, AlertState, Evaluation, SeriesPoint, evaluate_rules
from corral.alerts.rules import AlertRule, RuleAction, make_labels, parse_rule, parse_selector
from corral.alerts.silences import Silence

HOT = parse_rule(
    {
        "name": "hot",
        "metric": "gpu_temperature_c",
        "comparison": ">=",
        "threshold": 85,
        "for_s": 60,
        "severity": "warning",
        "summary": "GPU {gpu} on {node} at {value:.0f} C",
        "actions": ["cordon_node"],
    }
)


def _temp(value: float, gpu: str = "0", node: str = "n1") -> SeriesPoint:
    return SeriesPoint("gpu_temperature_c", make_labels({"node": node, "gpu": gpu}), value)


class Run:
    """Feeds evaluations one after another, carrying the alert states, as the server loop will."""

    def __init__(self, rules: Sequence[AlertRule], silences: Sequence[Silence] = ()) -> None:
        self.rules, self.silences = rules, silences
        self.alerts: dict[str, Alert] = {}
        self.last: Evaluation | None = None

    def at(self, now: float, *points: SeriesPoint) -> list[tuple[str, AlertState | None, AlertState, bool]]:
        self.last = evaluate_rules(self.rules, points, self.alerts, now, self.silences, resolved_keep_s=600)
        self.alerts = self.last.alerts
        return [(dict(c.alert.labels).get("gpu", ""), c.old_state, c.alert.state, c.notify) for c in self.last.changes]


P, F, R = AlertState.PENDING, AlertState.FIRING, AlertState.RESOLVED


def test_pending_then_firing_after_for_duration_then_resolved() -> None:
    run = Run([HOT])
    assert run.at(0, _temp(90)) == [("0", None, P, False)]
    assert run.at(30, _temp(91)) == []  # still pending: 30 s < 60 s
    assert run.at(60, _temp(92)) == [("0", P, F, True)]
    firing = next(iter(run.alerts.values()))
    assert (firing.fired_at, firing.active_since, firing.summary) == (60, 0, "GPU 0 on n1 at 92 C")
    assert run.at(90, _temp(93)) == []  # firing stays firing, no repeat
    assert run.at(120, _temp(70)) == [("0", F, R, True)]
    resolved = next(iter(run.alerts.values()))
    assert (resolved.state, resolved.resolved_at) == (R, 120)


def test_pending_that_clears_is_dropped_silently() -> None:
    run = Run([HOT])
    run.at(0, _temp(90))
    assert run.at(30, _temp(80)) == [] and run.alerts == {}


def test_missing_series_resolves_a_firing_alert() -> None:
    run = Run([HOT])
    run.at(0, _temp(90))
    run.at(60, _temp(90))
    assert run.at(70) == [("0", F, R, True)]


def test_zero_for_duration_fires_at_once_and_actions_are_requested_once() -> None:
    rule = parse_rule(
        {
            "name": "lost",
            "metric": "node_lost",
            "comparison": ">",
            "threshold": 0,
            "actions": ["cordon_node", "stop_job"],
        }
    )
    run = Run([rule])
    lost = SeriesPoint("node_lost", make_labels({"node": "n2", "job": "j9"}), 1)
    assert run.at(5, lost) == [("", None, F, True)]
    assert run.last is not None
    assert [(a.action, a.node, a.job) for a in run.last.actions] == [
        (RuleAction.CORDON_NODE, "n2", "j9"),
        (RuleAction.STOP_JOB, "n2", "j9"),
    ]
    run.at(10, lost)
    assert run.last.actions == []


def test_one_alert_per_series_and_selector_applies() -> None:
    rule = parse_rule(
        {"name": "hot_n1", "metric": "gpu_temperature_c", "comparison": ">", "threshold": 85, "selector": 'node="n1"'}
    )
    run = Run([rule])
    changes = run.at(0, _temp(90, "0"), _temp(95, "1"), _temp(99, "0", node="n2"), _temp(50, "2"))
    assert sorted(changes) == [("0", None, F, True), ("1", None, F, True)]
    assert len(run.alerts) == 2


def test_resolved_alert_that_holds_again_starts_a_new_episode() -> None:
    run = Run([HOT])
    run.at(0, _temp(90))
    run.at(60, _temp(90))
    run.at(70, _temp(50))
    assert run.at(80, _temp(90)) == [("0", None, P, False)]
    assert next(iter(run.alerts.values())).active_since == 80


def test_resolved_alerts_are_kept_for_a_while_then_dropped() -> None:
    run = Run([HOT])
    run.at(0, _temp(90))
    run.at(60, _temp(90))
    run.at(70)
    run.at(600)
    assert [a.state for a in run.alerts.values()] == [R]
    run.at(671)
    assert run.alerts == {}


def test_silence_mutes_notifications_but_not_states_or_actions() -> None:
    silence = Silence("s1", parse_selector('alertname="hot", node="n1"'), starts_at=0, ends_at=100)
    run = Run([HOT], [silence])
    run.at(0, _temp(90))
    assert run.at(60, _temp(90)) == [("0", P, F, False)]
    assert run.last is not None and len(run.last.actions) == 1
    assert next(iter(run.alerts.values())).silenced_by == "s1"
    assert run.at(150, _temp(50)) == [("0", F, R, True)]  # the silence has ended by now


def test_silence_by_severity_and_inactive_silence() -> None:
    later = Silence("s2", parse_selector('severity="warning"'), starts_at=1000, ends_at=2000)
    run = Run([HOT], [later])
    run.at(0, _temp(90))
    assert run.at(60, _temp(90)) == [("0", P, F, True)]


def test_disabled_and_removed_rules() -> None:
    import dataclasses

    run = Run([dataclasses.replace(HOT, enabled=False)])
    assert run.at(0, _temp(99)) == [] and run.alerts == {}
    run = Run([HOT])
    run.at(0, _temp(90))
    run.at(60, _temp(90))
    run.rules = []
    assert run.at(61, _temp(90)) == [("0", F, R, True)]


def test_default_job_idle_rule_fires_after_thirty_minutes_under_five_percent() -> None:
    run = Run(list(DEFAULT_RULES))
    idle = SeriesPoint("job_gpu_utilization_percent", make_labels({"job": "j1", "tenant": "vision", "node": "n1"}), 2)
    busy = SeriesPoint("job_gpu_utilization_percent", make_labels({"job": "j2", "tenant": "nlp", "node": "n1"}), 80)
    run.at(0, idle, busy)
    run.at(1799, idle, busy)
    assert [a.state for a in run.alerts.values()] == [P]
    run.at(1800, idle, busy)
    alert = next(iter(run.alerts.values()))
    assert alert.state is F and alert.summary == "job j1 of vision has kept its GPUs under 5% busy for 30 minutes"


def test_default_gpu_unhealthy_fires_at_once_with_reason() -> None:
    run = Run(list(DEFAULT_RULES))
    point = SeriesPoint("gpu_unhealthy", make_labels({"node": "n1", "gpu": "3", "uuid": "u", "reason": "xid"}), 1)
    assert run.at(0, point) == [("3", None, F, True)]
    assert next(iter(run.alerts.values())).summary == "GPU 3 on n1 taken out of the pool: xid"


def test_summary_with_missing_label_or_broken_template() -> None:
    rule = parse_rule(
        {
            "name": "x",
            "metric": "gpu_power_w",
            "comparison": ">",
            "threshold": 1,
            "summary": "{node} {nope} {value:.1f}",
        }
    )
    broken = parse_rule(
        {"name": "y", "metric": "gpu_power_w", "comparison": ">", "threshold": 1, "summary": "{value:bad}"}
    )
    run = Run([rule, broken])
    run.at(0, SeriesPoint("gpu_power_w", make_labels({"node": "n"}), 2.0))
    assert sorted(a.summary for a in run.alerts.values()) == ["n ? 2.0", "{value:bad}"]
