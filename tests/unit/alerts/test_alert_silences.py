"""Silences: parsing, time window, matching on alert labels."""

from __future__ import annotations

from typing import Any

import pytest

from corral.alerts.silences import parse_silence, select_silence, silence_to_dict
from corral.core.errors import ValidationError


def test_parse_with_duration_and_round_trip() -> None:
    s = parse_silence(
        {"matchers": 'alertname="gpu_temperature", node="n1"', "duration_s": 600, "comment": "fan"},
        id="s1",
        now=1000.0,
        created_by="alice",
    )
    assert (s.starts_at, s.ends_at, s.created_by, s.comment) == (1000.0, 1600.0, "alice", "fan")
    again = parse_silence(silence_to_dict(s), id="s1", now=0.0, created_by="alice")
    assert again == s


@pytest.mark.parametrize(
    ("now", "labels", "muted"),
    [
        (999.0, {"alertname": "hot", "node": "n1"}, False),  # not started
        (1000.0, {"alertname": "hot", "node": "n1"}, True),
        (1599.0, {"alertname": "hot", "node": "n2"}, False),  # other node
        (1600.0, {"alertname": "hot", "node": "n1"}, False),  # ended
    ],
)
def test_window_and_matchers(now: float, labels: dict[str, str], muted: bool) -> None:
    s = parse_silence({"matchers": 'alertname="hot", node="n1"', "starts_at": 1000, "ends_at": 1600}, id="s", now=0)
    assert (select_silence([s], labels, now) is s) is muted


@pytest.mark.parametrize(
    ("name", "data", "field"),
    [
        ("no matchers", {"matchers": "", "duration_s": 60}, "matchers"),
        ("matchers not text", {"matchers": ["a"]}, "matchers"),
        ("bad selector", {"matchers": "node=n1"}, "selector"),
        ("ends before start", {"matchers": 'node="n"', "starts_at": 10, "ends_at": 5}, "ends_at"),
        ("too long", {"matchers": 'node="n"', "duration_s": 400 * 86400}, "ends_at"),
        ("duration text", {"matchers": 'node="n"', "duration_s": "1h"}, "duration_s"),
    ],
)
def test_bad_silences_are_refused(name: str, data: Any, field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_silence(data, id="s", now=0.0)
    assert caught.value.field == field, name
