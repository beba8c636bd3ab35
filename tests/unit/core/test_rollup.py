"""Rollups: min/max/avg/last per minute, merging, closed buckets, retention cut-offs."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.core.errors import ValidationError
from corral.core.rollup import (
    RawPoint,
    RetentionPolicy,
    compute_closed_before,
    compute_coarser_rollups,
    compute_keyed_rollups,
    compute_retention_cutoffs,
    compute_rollups,
    merge_rollup,
    select_resolution,
)


def test_one_rollup_per_minute_with_min_max_avg_last() -> None:
    points = [RawPoint(60.0, 10), RawPoint(119.9, 30), RawPoint(75.0, 20), RawPoint(120.0, 5), RawPoint(-1.0, 1)]
    rollups = compute_rollups(points)
    assert [(r.start, r.count, r.min, r.max, r.avg, r.last) for r in rollups] == [
        (-60.0, 1, 1, 1, 1, 1),
        (60.0, 3, 10, 30, 20, 30),
        (120.0, 1, 5, 5, 5, 5),
    ]


def test_last_is_by_timestamp_not_arrival_and_nan_skipped() -> None:
    [r] = compute_rollups([RawPoint(70.0, 1), RawPoint(65.0, 2), RawPoint(66.0, math.nan)])
    assert (r.last, r.last_ts, r.count) == (1, 70.0, 2)


@given(st.lists(st.tuples(st.floats(0, 3600), st.floats(-1e6, 1e6)), min_size=1, max_size=60), st.randoms())
def test_rollups_agree_with_a_direct_computation_in_any_split(
    raw: list[tuple[float, float]], rng: random.Random
) -> None:
    points = [RawPoint(ts, v) for ts, v in raw]
    whole = compute_rollups(points)
    cut = rng.randrange(len(points) + 1)
    parts = {r.start: r for r in compute_rollups(points[:cut])}
    for r in compute_rollups(points[cut:]):
        parts[r.start] = merge_rollup(parts[r.start], r) if r.start in parts else r
    for r in whole:
        members = [p for p in points if r.start <= p.ts < r.start + 60]
        assert (r.count, r.min, r.max) == (len(members), min(p.value for p in members), max(p.value for p in members))
        assert r.avg == pytest.approx(sum(p.value for p in members) / len(members), abs=1e-6)
        assert r.last_ts == max(p.ts for p in members)
        merged = parts[r.start]
        assert (merged.count, merged.min, merged.max, merged.last_ts) == (r.count, r.min, r.max, r.last_ts)
    assert sum(r.count for r in whole) == len(points)


def test_merge_refuses_different_buckets() -> None:
    a, b = compute_rollups([RawPoint(0, 1), RawPoint(60, 1)])
    with pytest.raises(ValueError):
        merge_rollup(a, b)


def test_coarser_rollups() -> None:
    minutes = compute_rollups([RawPoint(t * 60.0 + 1, float(t)) for t in range(120)])
    hours = compute_coarser_rollups(minutes, 3600)
    assert [(h.start, h.count, h.min, h.max, h.last) for h in hours] == [
        (0.0, 60, 0, 59, 59),
        (3600.0, 60, 60, 119, 119),
    ]


def test_only_closed_buckets_are_rolled_up() -> None:
    closed = compute_closed_before(now=185.0, grace_s=15)
    assert closed == 120.0
    points = [("a", RawPoint(100, 1)), ("a", RawPoint(130, 2)), ("b", RawPoint(50, 3))]
    keyed = compute_keyed_rollups(points, closed)
    assert {k: [(r.start, r.count) for r in v] for k, v in keyed.items()} == {"a": [(60.0, 1)], "b": [(0.0, 1)]}


def test_retention_cutoffs_and_resolution() -> None:
    now = 100 * 86400.0 + 30.5
    cut = compute_retention_cutoffs(now)
    assert cut.raw_before == 99 * 86400.0 and cut.rollup_before == 70 * 86400.0
    assert select_resolution(now - 3600, now) == "raw"
    assert select_resolution(now - 2 * 86400, now) == "rollup"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"bucket_s": 0}, "bucket_s"),
        ({"bucket_s": 7}, "bucket_s"),
        ({"raw_s": 30}, "raw_s"),
        ({"raw_s": 86400, "rollup_s": 3600}, "rollup_s"),
    ],
)
def test_bad_policy(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        RetentionPolicy(**kwargs)
    assert caught.value.field == field
